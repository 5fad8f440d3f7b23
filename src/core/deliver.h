/* SPDX-License-Identifier: MIT */
/*
 * deliver.h -- delivering a drain task's batch to the stage's consumers
 * (deliver.c), as one session that plain consumers and batch consumers
 * (seda_stage_consume_batch) share.
 */
#ifndef SEDA_DELIVER_H
#define SEDA_DELIVER_H

#include "env.h"
#include "stats.h"

struct seda_stage_s;

/* A consumer: fn (one envelope a call) or bfn (a batch a call); the other
 * is NULL.  Written once before the count covers it. */
struct consumer {
    seda_consumer_fn fn;
    seda_batch_fn bfn;
    void *ud;
};

/* A stage's consumers (deliver.c adds them and calls them).
 * Locking: n is release (seda__consumers_add, after writing its entry)
 * / acquire (deliver.c); rr is a relaxed round-robin cursor on a line of
 * its own (drain tasks write it; publishers read the stage's other lines);
 * adders are serialised by the stage's mu. */
struct seda_consumers {
    struct consumer cons[SEDA_MAX_CONSUMERS];
    atomic_int n;               /* release/acquire, see above */
    _Alignas(64) atomic_uint rr;/* relaxed round-robin cursor */
    char pad_rr[64 - sizeof(atomic_uint)];
};

/* Add a consumer to st (exactly one of fn and bfn; not on a pull stage):
 * its index, SEDA_EINVAL or SEDA_ERANGE.  Takes st's mu. */
SEDA__API int seda__consumers_add(struct seda_stage_s *st, seda_consumer_fn fn,
                                  seda_batch_fn bfn, void *ud);

/* No consumers yet. */
static inline void seda__consumers_init(struct seda_consumers *c)
{
    atomic_init(&c->n, 0);
    atomic_init(&c->rr, 0);
}

/* Consumers so far (acquire). */
static inline int seda__consumers_count(struct seda_consumers *c)
{
    return atomic_load_explicit(&c->n, memory_order_acquire);
}

/* The largest batch a drain task takes (seda_bus_opts.batch <= 256). */
#define SEDA_MAX_BATCH 256

/* A batch entry that left the batch suspended (seda_batch_suspend): not
 * routed, not counted here; its service time is -1. */
#define DR_SUSPENDED 16

/*
 * A delivery session.  Two kinds:
 *   - a drain batch (single false): envelopes env[0..n), delivered in
 *     order from index i; the drain task fills the inputs, runs it with
 *     seda__batch_run, and reads the outputs;
 *   - one envelope for one consumer call (single true): what a batch
 *     consumer gets when the stage has several consumers (deliver() in
 *     deliver.c makes it on its stack).
 * Locking: none.  A session lives on one drain task's stack and is used
 * only by that thread (the consumer it calls runs there too).
 */
struct seda_batch_s {
    struct seda_stage_s *st;    /* in */
    bool single;                /* in: one envelope, one consumer call */
    bool open;                  /* an envelope is out, not yet settled */
    bool cut;                   /* no more envelopes this batch */
    bool shed;                  /* out: cut after a slow envelope */
    bool later;                 /* in: retries wait on a backoff timer */
    bool defer;                 /* settled envelopes are routed after the
                                   batch consumer's call, not at once */
    bool gave_permit;           /* out: a suspended call took the drain
                                   task's own permit (none was free): the
                                   task ends without giving it back */
    int n;                      /* in: envelopes taken */
    int i;                      /* the one out (open) or next; out: how
                                   many were delivered (the rest, i..n,
                                   go back to the head) */
    int64_t t;                  /* clock at the current one's start; out:
                                   the clock at the end */
    seda_env_t **env;           /* in: [n] */
    int *res;                   /* out: [n] DR_* decisions */
    int64_t *sojourn;           /* out: [n] queue wait, ns */
    int64_t *service;           /* out: [n] handling time, ns */
    seda_env_t **retry;         /* out: nacked envelopes to requeue */
    int nretry;                 /* out: how many */
    struct stage_counters *tally; /* in: counters to add to */
    seda_env_t *one;            /* single: the envelope */
    int one_state;              /* single: 0 not taken, 1 out, 2 done */
    bool one_ok;                /* single: the settled result */
};

/* Deliver b's envelopes from b->i on (b->t the clock now, b->open and
 * b->cut false, nretry 0) to the stage's consumers and route each result:
 * acks to their next hop, dead letters, retries (at once at the head, or
 * into b->retry); for a durable stage the whole batch's decisions are
 * journaled in one commit first.  No lock held; runs consumer code. */
SEDA__API void seda__batch_run(struct seda_batch_s *b);

/* True on a thread inside a batch consumer's call: the consumer's own
 * state is busy, so the thread must not run another drain task inline
 * (help_drain in stage.c). */
SEDA__API bool seda__batch_busy(void);

#endif /* SEDA_DELIVER_H */
