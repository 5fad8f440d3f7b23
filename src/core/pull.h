/* SPDX-License-Identifier: MIT */
/*
 * pull.h -- a pull stage's receivers and leases (pull.c).
 *
 * Locking: every field is guarded by the stage's mu.
 */
#ifndef SEDA_PULL_H
#define SEDA_PULL_H

#include "env.h"
#include "seda_int.h"

struct seda_stage_s;
struct seda_lease_s;

struct seda_pull {
    pthread_cond_t not_empty;   /* receivers wait here */
    int receivers;              /* receivers waiting; guarded */
    int leased;                 /* envelopes out on leases; guarded */
    int64_t ack_timeout_ns;     /* a lease's lifetime; immutable */
    struct seda_lease_s *leases;/* outstanding, oldest first; guarded */
    struct seda_lease_s *leases_tail; /* guarded */
};

/* 0 or SEDA_ENOMEM. */
SEDA__API int seda__pull_init(struct seda_pull *p, int64_t ack_timeout_ns);
SEDA__API void seda__pull_free(struct seda_pull *p);

/* Something was queued on a pull stage (guarded): wake one receiver, or
 * every one (all). */
SEDA__API void seda__pull_wake(struct seda_pull *p, bool all);

/* Expire overdue leases (guarded); returns how many, their envelopes in
 * requeue[] for a nack.  And settle every lease at shutdown (counted
 * dropped; no lock held). */
SEDA__API int seda__lease_expire(struct seda_stage_s *st, int64_t now,
                                 seda_env_t **requeue, int max);
SEDA__API int seda__lease_sweep(struct seda_stage_s *st);

/* True when no lease is outstanding (guarded). */
static inline bool seda__pull_settled(const struct seda_pull *p)
{
    return p->leases == NULL;
}

#endif /* SEDA_PULL_H */
