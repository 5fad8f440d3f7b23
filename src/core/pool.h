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
 * result is what seda_worker_data() returns there (a loan thread calls
 * start lazily, on its first seda_worker_data(); data a loan slot kept is
 * stopped by seda__pool_free on the freeing thread).  max_loans bounds
 * the loan threads (< 0: 4 * n, following resizes).  owner is an opaque
 * tag for seda__pool_current_owner().  Returns 0, SEDA_EINVAL,
 * SEDA_ENOMEM or -EAGAIN (no thread left running).  Any thread. */
SEDA__API int seda__pool_new(int n, int max_loans, seda_worker_start_fn start,
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

/* Run fn(arg) at monotonic time due (ns) or soon after, on a worker of p
 * (before the ring's next task; an idle worker sleeps until the earliest
 * one is due), never on a thread that waits for it.  Returns 0,
 * SEDA_ENOMEM or SEDA_ECLOSED once the pool is stopping.  Takes mu; any
 * thread. */
SEDA__API int seda__pool_submit_at(struct seda_pool *p, int64_t due,
                                   seda__task_fn fn, void *arg);

/* Timed tasks waiting (takes mu), and, after seda__pool_stop, handing
 * each one still waiting to each(fn, arg, ud) instead of running it (the
 * caller accounts for their work). */
SEDA__API int seda__pool_timers(struct seda_pool *p);
SEDA__API void seda__pool_drop_timers(struct seda_pool *p,
                                      void (*each)(seda__task_fn fn,
                                                   void *arg, void *ud),
                                      void *ud);

/* Managed blocking.  A pool worker about to wait (for room in a full
 * stage, for a pull receive) calls block_begin first: its pool wakes a
 * sleeper for what the caller queued and, while fewer loan threads serve
 * than workers wait, lends one (a spare, or a new thread; never more than
 * max_loans), so the drain tasks the wait depends on keep running.  It
 * returns the pool that counted the wait, for block_end when the wait is
 * over (the loan then ends at the loan thread's next task boundary).  Off
 * the pools' workers, or once the pool stops, begin returns NULL, and
 * end(NULL) is a no-op.  Hold no stage lock around either (they take
 * loan_mu and mu; begin may start a thread). */
SEDA__API struct seda_pool *seda__pool_loan_block_begin(void);
SEDA__API void seda__pool_loan_block_end(struct seda_pool *p);

/* Time this thread spent between block_begin and block_end (the
 * outermost pair) since the last call, in ns; the count starts again at
 * 0.  Whether the thread is inside such a pair now.  Thread-local: no
 * lock.  (The long-hold check in deliver.c subtracts seda's own waits
 * from a handler's time with them.) */
SEDA__API int64_t seda__pool_loan_blocked_take(void);
SEDA__API bool seda__pool_loan_in_block(void);

/* Loan figures: in service now, started so far, the most at once, and
 * the bound.  Takes mu. */
SEDA__API void seda__pool_loan_stats(struct seda_pool *p, int *lent,
                                     uint64_t *loans, int *peak,
                                     int *max_loans);

/* For tests: threads asleep on the idle stack now.  Takes mu. */
SEDA__API int seda__pool_idle(struct seda_pool *p);

/* True when a worker waits without a loan because max_loans are in
 * service (for the message of a wait that timed out).  Takes mu. */
SEDA__API bool seda__pool_loan_exhausted(struct seda_pool *p);

/* True when the calling worker has mail it has not run (seda_worker_wake:
 * a call suspended on its worker data, ready to resume, waits for it).
 * False off the pool.  Takes mu. */
SEDA__API bool seda__pool_self_mail(void);
/* Waits no loan covered so far (max_loans reached).  Takes mu. */
SEDA__API uint64_t seda__pool_loan_uncovered(struct seda_pool *p);

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

/* Install the mail hook regular workers run when seda_worker_wake wakes
 * them (before their next task), with the pool's ud.  Any thread. */
/* seda_watch_add on p's readiness set (made at the first call). */
SEDA__API int seda__pool_ready_watch(struct seda_pool *p, int fd, uint32_t events,
                               seda_watch_fn fn, void *ud,
                               seda_watch_t **out);

/* A worker of p between batches of a long drain task: look for readiness
 * (at most every few microseconds, and only when no worker waits for it)
 * and run what came, here.  What those callbacks publish is not this
 * worker's to take next (it drains on).  No lock held; cheap when nothing
 * is watched. */
SEDA__API void seda__pool_ready_look(struct seda_pool *p);

SEDA__API void seda__pool_set_mail(struct seda_pool *p,
                                   seda_worker_mail_fn fn);

SEDA__API int seda__pool_size(const struct seda_pool *p);

/* Tasks queued and not yet taken (relaxed; a hint for lingering drains). */
SEDA__API unsigned seda__pool_pending(const struct seda_pool *p);

/* The owner tag of the pool whose worker is calling, or NULL off-pool. */
SEDA__API void *seda__pool_current_owner(void);

#endif /* SEDA_POOL_H */
