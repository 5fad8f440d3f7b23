/* SPDX-License-Identifier: MIT */
/*
 * bus.h -- the bus: stage registry, routing (ack, nack, dead letters),
 * lifecycle and statistics.
 */
#ifndef SEDA_BUS_H
#define SEDA_BUS_H

#include "ownhops.h"
#include "pool.h"
#include "stage.h"

/* An immutable snapshot of the stage table: an open-addressed hash for
 * lookup by name plus the creation-order list.  Replaced, never changed,
 * when a stage is added; old snapshots are kept until the bus is freed so
 * lock-free readers never see freed memory. */
struct registry {
    struct registry *prev;      /* older snapshot (retired list) */
    int n;                      /* stages */
    uint32_t mask;              /* hash slots - 1 */
    struct seda_stage_s **slot; /* hash slots (NULL = empty) */
    struct seda_stage_s *list[];/* creation order */
};

/*
 * Locking:
 *   mu guards: registration (building and publishing a new snapshot),
 *   the retired list.  shut_mu serialises shutdowns and guards shut_*; it
 *   is taken before any other lock.
 *   Atomic: reg (release in add / acquire in lookup); paused, closed,
 *   stopping (release on set / acquire on read).
 *   idle_mu guards idle_gen, idle_waiters (idle_cv waits on it).
 *   stage_cv waits on mu (a registration, or stopping).
 *   Immutable after seda_bus_new: pool, workers, batch, hop_timeout_ns,
 *   stats_window_ns, hold_warn_ns,
 *   dead_letter, data_dir, sync_normal, group_wait, max_payload.
 *   Lock order: mu -> stage->mu -> pool->mu -> idle_mu.
 */
struct seda_bus_s {
    seda__mutex_t mu;
    _Atomic(struct registry *) reg;
    struct seda_pool *pool;
    int workers;
    int batch;
    int64_t hop_timeout_ns;
    int64_t stats_window_ns;    /* what latency quantiles cover */
    int64_t hold_warn_ns;       /* a long hold (deliver.c); INT64_MAX:
                                   none */
    int dead_letter_keep;       /* dead letters each stage keeps */
    char *dead_letter;          /* owned, or NULL */
    atomic_bool paused;
    atomic_bool closed;         /* no new publishes */
    atomic_bool stopping;       /* pool stopping: drains give up */
    atomic_bool has_pull;       /* a pull stage exists (relaxed hint) */
    atomic_int shedding;        /* stages whose shedding level is above
                                   0 (seda__bus_shedding_add, each change
                                   under its stage's mu); relaxed: a new
                                   itinerary's door check skips its slip
                                   while it is 0 */
    _Atomic(void *) store;      /* the durable store (store.h), set once
                                   under mu (release), read with acquire */
    const struct seda__store_ops *store_ops; /* written before store */
    char *data_dir;             /* owned; immutable */
    size_t max_payload;         /* bytes; immutable */
    struct seda__ownhops ownhops; /* the program's own "nats:" hops (its
                                   own lock; ownhops.h) */
    bool sync_normal;           /* immutable */
    double group_wait;          /* seconds; immutable */
    seda__mutex_t idle_mu;
    pthread_cond_t idle_cv;
    uint64_t idle_gen;          /* guarded by idle_mu */
    pthread_cond_t stage_cv;    /* broadcast (under mu) when a stage is
                                   added or the pool stops */
    _Atomic int64_t replay_until; /* monotonic ns: replayed envelopes
                                   wait for undeclared hops until then;
                                   relaxed (a deadline, no data) */
    seda__mutex_t shut_mu;      /* held for a whole shutdown; outermost */
    bool shut_done;             /* guarded by shut_mu */
    int shut_rc;                /* guarded by shut_mu */
};







/* A stage's shedding started (delta 1) or ended (-1); relaxed. */
static inline void seda__bus_shedding_add(struct seda_bus_s *b, int delta)
{
    atomic_fetch_add_explicit(&b->shedding, delta, memory_order_relaxed);
}

/* A stage got a consumer: replayed hops waiting for it may go on (takes
 * b->mu; call with no stage lock held). */
SEDA__API void seda__bus_wake_hops(struct seda_bus_s *b);

#endif /* SEDA_BUS_H */
