/* SPDX-License-Identifier: MIT */
/*
 * drain_state.h -- the drain task's state on a stage (struct seda_drain,
 * st->task): the permits it holds, what its batches have out, and the
 * recent handling time that decides how many tasks a stage wants and how
 * much each takes.  Plain data and its readers: the drain task (drain.c,
 * deliver.c) writes it, the permits (permits.c) count in it; the stage,
 * its readers and shedding read it only through the functions below,
 * never its fields.
 *
 * Locking (the stage's mu is the guard):
 *   running: drain tasks queued or running.  Changed guarded with seq_cst
 *   stores (the Dekker pairing with the lock-free publish path, inbox.c),
 *   read seq_cst by publishers without the lock.
 *   in_flight: envelopes taken by drain tasks, not yet settled; guarded.
 *   svc_ns: recent handling time per envelope, a moving average drain
 *   tasks update once a batch without a lock (relaxed load and store: two
 *   tasks may overwrite each other's update, which an average tolerates;
 *   0 = not measured yet); publishers read it to decide on extra tasks.
 */
#ifndef SEDA_DRAIN_STATE_H
#define SEDA_DRAIN_STATE_H

#include "seda_int.h"

struct seda_drain {
    _Alignas(64) atomic_int running;/* tasks queued or running: see above */
    atomic_uint svc_ns;         /* ns per envelope, relaxed: see above */
    int in_flight;              /* taken, not settled; guarded */
    int suspended;              /* calls suspended, each holding a permit
                                   counted in running; guarded */
    uint64_t life_ns;           /* a suspended call's whole life (its wait
                                   included), a moving average; 0 = none
                                   settled yet; guarded.  svc_ns leaves
                                   these calls out (they hold no worker);
                                   shedding's backlog needs them in. */
};

/* Whether a publisher that found `run` drain tasks queued or running
 * should start one more for `depth` queued envelopes (see "Extra drain
 * tasks" in drain.c).  The caller checked run < concurrency.  100 us: a
 * full 1024-slot queue of a ~180 ns Lua handler with two producers and
 * two permits gets its second task. */
#define SEDA_SPAWN_NS 100000
/* A drain task gives back the rest of its batch after an envelope that
 * took this long (deliver.c). */
#define SEDA_SHED_NS 20000000
/* How many envelopes a drain task takes at once: the bus's batch, but no
 * more than it expects to handle in SEDA_BATCH_NS at the recent handling
 * time (unknown counts as slow: one).  What a task has taken is out of
 * the queue -- it no longer counts against the capacity, and a retry goes
 * back behind it -- so for a handler that takes milliseconds, or waits on
 * a gate, a batch of 32 would let the stage hold capacity + 31 per task. */
#define SEDA_BATCH_NS 50000

static inline uint32_t seda__drain_take_limit(struct seda_drain *d,
                                              uint32_t batch)
{
    uint64_t svc = atomic_load_explicit(&d->svc_ns, memory_order_relaxed);
    uint64_t n = svc == 0 ? 1 : SEDA_BATCH_NS / svc;
    return n == 0 ? 1 : n < batch ? (uint32_t)n : batch;
}

static inline bool seda__drain_want_task(struct seda_drain *d, int run,
                                         uint64_t depth)
{
    if (run == 0)
        return true;
    uint64_t svc = atomic_load_explicit(&d->svc_ns, memory_order_relaxed);
    return svc == 0 || svc * depth >= (uint64_t)SEDA_SPAWN_NS * (uint64_t)run;
}

/* Tasks queued or running: seq_cst, for the publisher's half of the
 * Dekker pairing (no lock needed); relaxed where the guard is held. */
static inline int seda__drain_running(struct seda_drain *d)
{
    return atomic_load_explicit(&d->running, memory_order_seq_cst);
}

/* Tasks queued or running, relaxed: a hint for a reader that checks
 * again, or holds the guard. */
static inline int seda__drain_running_hint(const struct seda_drain *d)
{
    return atomic_load_explicit(&d->running, memory_order_relaxed);
}

/* The handling time a backlog waits for, per envelope (guarded): a
 * suspended call holds its permit for its whole life, so that life, not
 * the worker's share (svc_ns leaves those calls out), when longer; 0 when
 * nothing was measured yet. */
static inline uint64_t seda__drain_backlog_ns(const struct seda_drain *d)
{
    uint64_t svc = atomic_load_explicit(&d->svc_ns, memory_order_relaxed);
    return d->life_ns > svc ? d->life_ns : svc;
}

/* A stage's drain state before its first task. */
static inline void seda__drain_init(struct seda_drain *d)
{
    atomic_init(&d->running, 0);
    atomic_init(&d->svc_ns, 0);
    d->in_flight = 0;
    d->suspended = 0;
    d->life_ns = 0;
}

/* Envelopes out in drain batches (guarded). */
static inline int seda__drain_in_flight(const struct seda_drain *d)
{
    return d->in_flight;
}

/* Calls suspended, each holding a permit counted in running (guarded). */
static inline int seda__drain_suspended(const struct seda_drain *d)
{
    return d->suspended;
}

#endif /* SEDA_DRAIN_STATE_H */
