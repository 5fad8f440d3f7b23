/* SPDX-License-Identifier: MIT */
/*
 * tap.h -- live taps on a stage (tap.c): copies of the envelopes entering
 * it, for an operator watching traffic (the REPL's tap(), /tap).
 *
 * Locking: n is read relaxed by every admission (the whole cost when
 * nobody taps) and written under mu; mu guards the list and each tap's
 * ring (a leaf lock, taken under the stage's mu on the locked path).
 */
#ifndef SEDA_TAP_H
#define SEDA_TAP_H

#include "env.h"
#include "seda_int.h"

struct seda_tap_s;

struct seda_taps {
    atomic_int n;               /* open taps; relaxed (see above) */
    seda__mutex_t mu;           /* guards list and the taps' rings */
    struct seda_tap_s *list;    /* open taps; guarded by mu */
};

SEDA__API void seda__taps_init(struct seda_taps *t);
/* Free (every tap closed: the stage outlives its taps' owners, who close
 * them before seda_bus_free). */
SEDA__API void seda__taps_free(struct seda_taps *t);

static inline bool seda__taps_active(struct seda_taps *t)
{
    return atomic_load_explicit(&t->n, memory_order_relaxed) > 0;
}

/* Copy env's id, headers and the start of its payload to every open tap
 * (one that is full counts a miss).  Any thread; takes mu. */
SEDA__API void seda__taps_offer(struct seda_taps *t, const seda_env_t *env);

/* seda_tap_open on the stage whose taps t are (the stage's file passes
 * its part): 0, SEDA_EINVAL or SEDA_ENOMEM.  Any thread; takes mu. */
SEDA__API int seda__taps_open(struct seda_taps *t, int capacity,
                              seda_tap_t **out);

#endif /* SEDA_TAP_H */
