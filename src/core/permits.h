/* SPDX-License-Identifier: MIT */
/*
 * permits.h -- a stage's permits for drain tasks (permits.c): claimed
 * when work is queued, given back or passed on when a task ends.  The
 * counters are the drain state's (drain_state.h); the stage's mu guards every
 * call.
 */
#ifndef SEDA_PERMITS_H
#define SEDA_PERMITS_H

#include "drain_state.h"
#include "inbox.h"
#include "seda_int.h"

/* Guarded: with `depth` queued, take a permit for one more task when
 * fewer than `concurrency` run and the work wants it (seda__drain_want_task;
 * force: whenever a permit is free).  True when the caller must submit
 * the task (seda__drain_schedule) after unlocking. */
SEDA__API bool seda__permits_claim(struct seda_drain *d, int concurrency,
                                   uint32_t depth, bool force);

/* Guarded: take permits for up to `want` more tasks (fewer than
 * concurrency in all, at most one per queued envelope: a tune that raised
 * concurrency, a replay, a shutdown).  Returns how many to submit. */
SEDA__API int seda__permits_claim_n(struct seda_drain *d, int concurrency,
                                    uint32_t depth);

/* Guarded: a permit comes back from a call that ended, with in the
 * stage's queue.  True when it goes on as a new drain task (what is
 * queued needs one: submit it after unlocking); otherwise it is given
 * back, with the Dekker check against the lock-free publish path, and
 * *idle says whether the stage has nothing left (notify the bus). */
SEDA__API bool seda__permits_release(struct seda_drain *d,
                                     struct seda_inbox *in, int concurrency,
                                     bool stopping, bool *idle);

/* Guarded: a swept stage runs no task. */
SEDA__API void seda__permits_reset(struct seda_drain *d);

#endif /* SEDA_PERMITS_H */
