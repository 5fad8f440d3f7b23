/* SPDX-License-Identifier: MIT */
/*
 * pool.h -- the shared pthread worker pool that drains every stage.
 *
 * A fixed set of threads takes tasks (function + argument) from one FIFO.
 * Idle threads sleep on a condition variable; there is no polling.  The task
 * ring never grows on the submit path: whoever can submit reserves room
 * first (a stage reserves one slot per permit when it is added), so
 * submitting a drain task cannot fail.
 */
#ifndef SEDA_POOL_H
#define SEDA_POOL_H

#include "seda_int.h"

struct seda_pool;

typedef void (*seda__task_fn)(void *arg);

/* Start n threads.  start/stop run on each worker (may be NULL); start's
 * result is what seda_worker_data() returns there.  owner is an opaque tag
 * for seda__pool_current_owner().  Returns 0, SEDA_ENOMEM or -EAGAIN (no
 * thread left running).  Any thread. */
SEDA__API int seda__pool_new(int n, seda_worker_start_fn start,
                             seda_worker_stop_fn stop, void *ud, void *owner,
                             struct seda_pool **out);

/* Grow or shrink to n threads (1..1024).  Shrinking lets each retiring
 * worker finish its current task, then joins it (its stop hook runs).
 * Returns 0, SEDA_EINVAL, SEDA_ENOMEM or -EAGAIN (some threads may have
 * started), SEDA_ECLOSED after stop.  Must not be called from a worker. */
SEDA__API int seda__pool_resize(struct seda_pool *p, int n);

/* Make room for `more` additional outstanding tasks.  Returns 0 or
 * SEDA_ENOMEM (nothing changed).  Takes pool->mu. */
SEDA__API int seda__pool_reserve(struct seda_pool *p, int more);

/* Queue a task.  The caller must have reserved room for it.  prompt: a
 * caller that is a worker of p will come back for a task right away, so
 * one queued task needs no wake-up; pass false from code that may run or
 * block for long before returning to the pool (a consumer call).  Returns
 * 0, or SEDA_ECLOSED once the pool is stopping (the task is not queued).
 * Takes pool->mu; never blocks otherwise.  Any thread. */
SEDA__API int seda__pool_submit(struct seda_pool *p, seda__task_fn fn,
                                void *arg, bool prompt);

/* A worker of p is about to block (waiting for room in a stage): wake a
 * sleeper for any queued task, since the caller will not take it.  Any
 * thread; a no-op elsewhere than on p's workers. */
SEDA__API void seda__pool_kick(struct seda_pool *p);

/* Remove the queued task (fn, arg), if one is queued, so the caller can
 * run it itself.  Returns whether it did.  Takes pool->mu. */
SEDA__API bool seda__pool_take(struct seda_pool *p, seda__task_fn fn,
                               void *arg);

/* Ask every worker to exit after its current task, wake them and join
 * them.  Tasks still queued are discarded (the caller accounts for their
 * work).  Idempotent.  Must not be called from a worker. */
SEDA__API void seda__pool_stop(struct seda_pool *p);

/* True once seda__pool_stop has begun (acquire; pairs with the release
 * store in seda__pool_stop).  Drain tasks poll it between envelopes. */
SEDA__API bool seda__pool_stopping(const struct seda_pool *p);

/* Stop if needed and free.  NULL is a no-op. */
SEDA__API void seda__pool_free(struct seda_pool *p);

SEDA__API int seda__pool_size(const struct seda_pool *p);

/* Tasks queued and not yet taken (relaxed; a hint for lingering drains). */
SEDA__API unsigned seda__pool_pending(const struct seda_pool *p);

/* The owner tag of the pool whose worker is calling, or NULL off-pool. */
SEDA__API void *seda__pool_current_owner(void);

#endif /* SEDA_POOL_H */
