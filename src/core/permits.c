/* SPDX-License-Identifier: MIT */
/*
 * permits.c -- a stage's permits for drain tasks: claimed by whoever
 * queues work (a publish, a retry that comes due, a tune), given back or
 * passed on by a task that ends.  A part: it sees the drain state's
 * counters (drain_state.h) and the queue's depth (inbox.h), never the stage.
 *
 * DESIGN
 *   running counts the tasks queued in the pool or running; a claim takes
 *   one of `concurrency` permits only when the work wants another task
 *   (seda__drain_want_task), so an idle stage costs nothing and a busy one
 *   never floods the pool.  Giving a permit back is the drain task's half
 *   of the Dekker pairing with the lock-free publish path (inbox.c, HOW IT
 *   WORKS): running is lowered with seq_cst, then the queue looked at once
 *   more, so a queued envelope always has a task.  Every function here
 *   runs under the stage's mu (the guard drain_state.h names).
 */
#include "env.h"
#include "permits.h"
#include "seda_int.h"

bool seda__permits_claim(struct seda_drain *d, int concurrency, uint32_t depth,
                         bool force)
{
    int run = atomic_load_explicit(&d->running, memory_order_relaxed);
    if (run < concurrency &&
        (force || seda__drain_want_task(d, run, depth))) {
        atomic_store_explicit(&d->running, run + 1, memory_order_seq_cst);
        return true;
    }
    return false;
}

int seda__permits_claim_n(struct seda_drain *d, int concurrency,
                          uint32_t depth)
{
    int run = atomic_load_explicit(&d->running, memory_order_relaxed);
    int n = 0;
    while (run < concurrency && (uint32_t)run < depth) {
        run++;
        n++;
    }
    atomic_store_explicit(&d->running, run, memory_order_seq_cst);
    return n;
}

bool seda__permits_release(struct seda_drain *d, struct seda_inbox *in,
                           int concurrency, bool stopping, bool *idle)
{
    *idle = false;
    if (!stopping && seda__inbox_depth(in) > 0)
        return true;                    /* the permit goes on as a task */
    /* Give it back, then look once more (seq_cst, the Dekker pairing with
     * the lock-free publish path, as at the end of a drain task). */
    atomic_fetch_sub_explicit(&d->running, 1, memory_order_seq_cst);
    if (!stopping && seda__inbox_depth(in) > 0 &&
        atomic_load_explicit(&d->running, memory_order_relaxed) <
            concurrency) {
        atomic_fetch_add_explicit(&d->running, 1, memory_order_seq_cst);
        return true;
    }
    *idle = atomic_load_explicit(&d->running, memory_order_relaxed) == 0 &&
            seda__inbox_depth(in) == 0;
    return false;
}

void seda__permits_reset(struct seda_drain *d)
{
    atomic_store_explicit(&d->running, 0, memory_order_seq_cst);
}
