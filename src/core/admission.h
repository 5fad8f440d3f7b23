/* SPDX-License-Identifier: MIT */
/*
 * admission.h -- a stage's admission part (admission.c, a leaf).
 */
#ifndef SEDA_ADMISSION_H
#define SEDA_ADMISSION_H

#include "seda_int.h"

/*
 * Admission: what a publish meets (the paths are stage.c's).  Guarded by
 * the stage's mu, but for the publishers' line: cap_fast and conc_fast
 * are mirrors written guarded (relaxed) and read by the lock-free path as
 * hints, checked again on the locked path.
 */
struct seda_admission {
    int capacity;               /* admission bound */
    int concurrency;            /* permits for drain tasks */
    int policy;                 /* enum seda_policy */
    int waiters;                /* publishers waiting for room */
    pthread_cond_t not_full;    /* block-policy publishers wait here */

    /* ---- the publishers' line ---- */
    _Alignas(64) atomic_int cap_fast;   /* capacity mirror */
    atomic_int conc_fast;       /* concurrency mirror */
};

/* Admission's part: made and freed with the stage (0 or SEDA_ENOMEM),
 * and its options' ranges checked for the parts `what` names
 * (SEDA_TUNE_*): 0, or -1 with why naming the field. */
SEDA__API int seda__admission_init(struct seda_admission *a,
                                   const seda_stage_opts *o);
SEDA__API void seda__admission_free(struct seda_admission *a);
SEDA__API int seda__admission_check(const seda_stage_opts *o, unsigned what,
                                    char *why, size_t n);

/* The head ring's size for a capacity and concurrency, batch envelopes a
 * drain task takes: admissions stop at capacity, and the headroom
 * guarantees that every envelope a drain task took can go back to the
 * head (retry, or an interrupted batch).  Inline: the locked publish
 * path asks it for every envelope it pushes. */
static inline uint64_t seda__admission_slots(int capacity, int concurrency,
                                             int batch)
{
    return (uint64_t)capacity + (uint64_t)concurrency * (uint64_t)batch;
}

#endif /* SEDA_ADMISSION_H */
