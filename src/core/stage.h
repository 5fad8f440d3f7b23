/* SPDX-License-Identifier: MIT */
/*
 * stage.h -- a stage: bounded queue + admission policy + permits + consumers,
 * and the drain task that the pool runs for it.
 */
#ifndef SEDA_STAGE_H
#define SEDA_STAGE_H

#include "env.h"
#include "hist.h"
#include "queue.h"
#include "pool.h"
#include "seda_int.h"
#include "remote.h"
#include "store.h"

struct seda_bus_s;

/* A consumer: fn (one envelope a call) or bfn (a batch a call, see
 * deliver.c); the other is NULL.  Written once before nconsumers covers
 * it. */
struct consumer {
    seda_consumer_fn fn;
    seda_batch_fn bfn;
    void *ud;
};

/* Stage counters; guarded by the stage mutex. */
struct stage_counters {
    uint64_t enqueued;          /* admissions */
    uint64_t delivered;         /* acks */
    uint64_t nacked;            /* nacks */
    uint64_t dropped;           /* refusals, evictions, sweeps */
    uint64_t dead_lettered;     /* envelopes dead-lettered from here */
    uint64_t errors;            /* reported errors */
    uint64_t completed;         /* itineraries ended here */
    uint64_t invalid;           /* refused by the admission check */
    uint64_t refused;           /* refused by an admit rule (Lua) */
    uint64_t shed;              /* publishes refused by shedding */
    /* Itinerary-level counters summed into the bus totals. */
    uint64_t accepted;          /* publishes accepted as a first hop here */
    uint64_t it_dead;           /* itineraries dead-lettered here */
    uint64_t it_lost;           /* itineraries evicted or swept here */
    uint64_t it_remote;         /* itineraries handed to JetStream here
                                   (a remote stage: remote.h) */
};

/*
 * Locking:
 *   mu guards: q (the head ring), in_flight, waiters, reserved,
 *   receivers, leases, c (counters), in_other, rate, and the tunables
 *   capacity, concurrency, policy (seda_stage_tune).  Taking envelopes
 *   (drain tasks, evictions, sweeps, receivers) always holds mu, so the
 *   inbox has one consumer at a time.
 *   Immutable after seda_stage_add: bus, name, dead_letter, delivery,
 *   max_attempts, publish_timeout, handler_timeout, index, pull,
 *   ack_timeout_ns, durable, dedup_window, inbox, inbox_mask,
 *   remote_ops, remote.
 *   Atomic: the inbox's slots, in_pos, fast_hop, cap_fast, conc_fast,
 *   running (the publishers' line below), out_pos, held and svc_ns (the
 *   takers' line), see "HOW IT WORKS" in inbox.c; nconsumers (release
 *   in add_consumer / acquire in deliver.c, publishing cons[i] written
 *   before it); rr (relaxed, round
 *   robin only); userdata, check, check_ud (release/acquire).
 *   hist_mu guards sojourn and service; report_mu the rate limiter;
 *   errs_mu the recent-errors ring (all three leaf locks).
 *   Lock order: bus->mu -> stage->mu -> pool->mu -> bus->idle_mu; hist_mu,
 *   report_mu and errs_mu last, never two of them at once.  A drain task
 *   never holds its own stage lock while pushing into another stage.
 */
struct seda_stage_s {
    struct seda_bus_s *bus;
    void *mem;                  /* the allocation (st is aligned within it
                                   to a cache line) */
    char name[SEDA_NAME_MAX + 1];
    char *dead_letter;          /* owned, or NULL */
    int capacity;               /* admission bound; guarded by mu */
    int concurrency;            /* permits; guarded by mu */
    int delivery;               /* enum seda_delivery */
    int policy;                 /* enum seda_policy; guarded by mu */
    int max_attempts;
    double publish_timeout;     /* seconds */
    double handler_timeout;     /* seconds, 0 = none */
    int index;                  /* creation order */
    bool pull;                  /* receivers, not consumers */
    int64_t ack_timeout_ns;     /* pull: lease lifetime */
    _Atomic(seda_env_t *) *inbox;/* the inbox's slots (NULL = free),
                                   aligned to a cache line */
    void *inbox_mem;            /* its allocation */
    uint32_t inbox_mask;        /* slots - 1; a power of two minus one */
    int durable;                /* enum seda_durability; immutable */
    int dedup_window;           /* exactly_once; immutable */
    const struct seda__remote_ops *remote_ops; /* a remote stage's layer
                                   (remote.h), or NULL; immutable */
    void *remote;               /* its context; immutable */
    _Atomic(void *) userdata;   /* release/acquire */
    _Atomic(seda_check_fn) check; /* admission check; release/acquire */
    _Atomic(void *) check_ud;   /* its argument; stored before check */

    struct consumer cons[SEDA_MAX_CONSUMERS];
    atomic_int nconsumers;      /* release/acquire, see above */
    _Alignas(64) atomic_uint rr;/* relaxed round-robin cursor; drain
                                   tasks write it, so it gets a line of
                                   its own away from what publishers read */
    char pad_rr[64 - sizeof(atomic_uint)];

    /* What the drain tasks write, from here on, is kept off the lines
     * above, which publishers read on every publish. */
    _Alignas(64) seda__mutex_t mu;
    pthread_cond_t not_full;    /* block-policy publishers wait here */
    struct seda_queue q;        /* the head: retries and replays, taken
                                   before the inbox; guarded by mu */
    int in_flight;              /* taken by drain tasks; guarded by mu */
    int waiters;                /* publishers waiting for room; mu */
    int reserved;               /* slots held for journal writes; mu */
    pthread_cond_t not_empty;   /* pull: receivers wait here */
    int receivers;              /* pull: receivers waiting; guarded by mu */
    struct seda_lease_s *leases;/* pull: outstanding, oldest first; mu */
    struct seda_lease_s *leases_tail; /* guarded by mu */

    uint64_t in_other;          /* inbox tickets that are not lock-free
                                   admissions (the locked path's, and
                                   voided ones); guarded by mu */

    /* Priority lanes (inbox.c), all guarded by mu.  q holds q_head_n
     * head items (retries, replays, returned batches: taken first) and
     * then spilled normal-priority envelopes; high and low envelopes wait
     * in their own rings, allocated on first use.  Until one is used
     * (lanes false) takes skip the priority order entirely. */
    uint32_t q_head_n;          /* head items at the front of q */
    bool lanes;                 /* q_high or q_low has been used */
    struct seda_queue q_high;   /* high priority, FIFO */
    struct seda_queue q_low;    /* low priority, FIFO */
    int64_t starve_ns;          /* an envelope older than this goes next */

    /* Adaptive shedding (CoDel on sojourn, drain.c), guarded by mu;
     * shed_level is also mirrored on the publishers' line. */
    int64_t shed_target_ns;     /* 0: off */
    int64_t shed_interval_ns;
    int64_t shed_above_since;   /* first start above target with none
                                   below since (clock ns), or 0 */
    int64_t shed_level_at;      /* when the level last rose (clock ns) */
    uint64_t low_offered;       /* low-priority publishes offered */
    uint64_t shed_low_mark;     /* low_offered when shed_above_since was
                                   set: none since, no low traffic to
                                   refuse first */
    int shed_rearm;             /* the level shedding had when it last
                                   ended: armed with it until
                                   shed_rearm_until; 0: never shed */
    int64_t shed_rearm_until;   /* (clock ns) */

    /* Retry backoff (drain.c), guarded by mu. */
    double retry_backoff;       /* seconds; 0: retry at once */
    double retry_max;
    double retry_mult;
    bool retry_jitter;
    int delayed;                /* retries waiting out their backoff */

    /* ---- the publishers' line (see "HOW IT WORKS" in inbox.c) ----
     * in_pos: inbox tickets issued; a compare-and-swap (seq_cst) both
     *   admits under capacity and claims slot in_pos & inbox_mask.
     * fast_hop: lock-free admissions of hops (relaxed; the stats derive
     *   first-hop admissions from in_pos).
     * cap_fast / conc_fast: capacity and concurrency mirrors,
     *   written under mu (relaxed), read by the lock-free path.
     * running: drain tasks queued or running; changed under mu with
     *   seq_cst stores, read seq_cst by the lock-free path (the Dekker
     *   pairing with in_pos described in inbox.c). */
    _Alignas(64) atomic_uint_fast64_t in_pos;
    atomic_uint_fast64_t fast_hop;
    atomic_int cap_fast;
    atomic_int conc_fast;
    atomic_int running;
    atomic_int shed_level;      /* 0, 1 (refuse low), 2 (and normal):
                                   written under mu (relaxed), read by
                                   publishers as a hint, checked again on
                                   the locked path */
    /* ---- the takers' line: read by anyone ----
     * out_pos: inbox tickets taken; written under mu (release store
     *   after the slots were cleared; publishers load it with acquire
     *   before reusing a slot).
     * held: q's count plus reservations (relaxed mirror, written under
     *   mu).
     * svc_ns: recent handling time per envelope, a moving average drain
     *   tasks update once a batch without a lock (relaxed load and store:
     *   two tasks may overwrite each other's update, which an average
     *   tolerates; 0 = not measured yet); publishers read it to decide
     *   on extra drain tasks. */
    _Alignas(64) atomic_uint_fast64_t out_pos;
    atomic_uint held;
    atomic_uint svc_ns;
    _Alignas(64) struct stage_counters c; /* guarded by mu; its own line */
    seda__mutex_t hist_mu;      /* guards sojourn, service; a leaf lock
                                   (may be taken while holding mu) */
    struct seda_hist sojourn;   /* admission -> handler start; hist_mu */
    struct seda_hist service;   /* handler run time; guarded by hist_mu */
    struct {
        int64_t t;              /* clock ns */
        uint64_t delivered;     /* c.delivered then */
    } rate[64];                 /* samples >= 100 ms apart; guarded by mu */
    int rate_n;                 /* samples stored (<= 64); guarded by mu */
    int rate_head;              /* next slot; guarded by mu */

    seda__mutex_t report_mu;
    int64_t report_window;      /* start of the current second; report_mu */
    int report_lines;           /* lines in this window; report_mu */
    uint64_t report_suppressed; /* lines not printed; report_mu */

    /* The recent errors (seda_stage_errors; see "Recent errors" in
     * stage_conf.c): the last SEDA_ERRORS_KEPT distinct messages, newest
     * first. */
    seda__mutex_t errs_mu;      /* guards errs and errs_n; a leaf lock */
    struct seda__err {
        char *msg;              /* owned copy (cut at SEDA_ERROR_MSG_MAX),
                                   or NULL: no memory to keep it */
        int64_t first_ns;       /* wall clock of its first occurrence */
        int64_t last_ns;        /* wall clock of its latest */
        uint64_t repeats;       /* occurrences folded into this entry */
    } errs[SEDA_ERRORS_KEPT];   /* [0] the newest; guarded by errs_mu */
    int errs_n;                 /* entries kept; guarded by errs_mu */
};

/* Create a stage object (not yet registered).  Validates opts; on failure
 * writes a message naming the stage and field into err.  Returns 0 or
 * SEDA_EINVAL / SEDA_ENOMEM. */
SEDA__API int seda__stage_new(struct seda_bus_s *bus,
                              const seda_stage_opts *o,
                              struct seda_stage_s **out, char *err,
                              size_t errlen);

/* Pull stages (pull.c): expire overdue leases (lock held); returns
 * how many.  And settle every lease at shutdown (counted dropped). */
SEDA__API int seda__lease_expire(struct seda_stage_s *st, int64_t now,
                                 struct seda_env_s **requeue, int max);
SEDA__API int seda__lease_sweep(struct seda_stage_s *st);

/* Requeue a nacked envelope at the head, or dead-letter it when out of
 * attempts (no lock held).  Counts the nack. */
SEDA__API void seda__stage_nack(struct seda_stage_s *st, seda_env_t *env);

/* Retry backoff (mu held): when st has a backoff, count env delayed and
 * set a timer that puts it back at the head when due (attempts already
 * raised for its next try); true.  A due time already set on env (a
 * durable stage journals it first: env.h's ext->due) is used as it is.
 * Without either, or when the timer cannot be set, false: the caller
 * requeues it at once. */
SEDA__API bool seda__stage_retry_later(struct seda_stage_s *st,
                                       seda_env_t *env);

/* The backoff before retry attempt `next` (>= 2) of st, in ns (jitter
 * drawn); 0 without a backoff.  mu held.  (A remote stage's nak asks
 * JetStream for this delay.) */
SEDA__API int64_t seda__stage_retry_delay(struct seda_stage_s *st, int next);

/* After the pool stopped: end a retry still waiting out its backoff as
 * dropped (swept).  A seda__pool_drop_timers callback; no lock held. */
SEDA__API void seda__stage_drop_timer(seda__task_fn fn, void *arg,
                                      void *ud);

/* Adaptive shedding (mu held): a batch whose shortest wait in the queue
 * was `least` ns started at clock time now. */
SEDA__API void seda__stage_shed_update(struct seda_stage_s *st,
                                       int64_t least, int64_t now);

/* Free a stage whose queue is empty (swept). */
SEDA__API void seda__stage_free(struct seda_stage_s *st);

/* Admit env into st under its policy.  hop: the envelope is already
 * accepted (a slip hop or a dead letter), so the bus's pause and close do
 * not apply and the itinerary is not counted again.  On 0 the stage owns
 * env; otherwise the caller still does.  Under the block policy waits up
 * to timeout seconds (< 0: forever), capped at the bus's hop_timeout on
 * its workers; the deadline is only computed when a wait is needed.
 * Takes st->mu, then maybe pool->mu. */
SEDA__API int seda__stage_admit(struct seda_stage_s *st, seda_env_t *env,
                                double timeout, bool hop);

/* Durable publishing in three steps: hold a slot (under the policy, like
 * an admission; env-less), then, once the journal committed, fill it; or
 * give it back. */
SEDA__API int seda__stage_reserve(struct seda_stage_s *st, double timeout);
SEDA__API void seda__stage_fill(struct seda_stage_s *st, seda_env_t *env);
SEDA__API void seda__stage_unreserve(struct seda_stage_s *st);

/* Queue envs[0..n) at the head, in order, ahead of anything queued,
 * regardless of capacity (replay).  Counted accepted.  0 or SEDA_ENOMEM
 * (nothing queued). */
/* Queue env (replayed, its ext->due set: a journaled retry not yet due)
 * on a timer for its due time, counted accepted and delayed.  0, or
 * SEDA_ECLOSED / SEDA_ENOMEM when no timer can be set (nothing done). */
SEDA__API int seda__stage_requeue_later(struct seda_stage_s *st,
                                        seda_env_t *env);

SEDA__API int seda__stage_requeue_front(struct seda_stage_s *st,
                                        seda_env_t **envs, int n);

/* qcount: envelopes queued (head ring and inbox, counting inbox tickets
 * whose publisher is mid-way) plus held reservations.  A hint without mu;
 * exact with mu held and no lock-free publisher mid-way.  seq_cst: the
 * drain task's final look at it is the second half of the Dekker pairing
 * (see inbox.c).  out_pos is read first: a taker only counts tickets
 * issued before, so the difference never goes negative. */
static inline uint32_t seda__stage_qcount(struct seda_stage_s *st)
{
    uint64_t out = atomic_load_explicit(&st->out_pos, memory_order_seq_cst);
    uint64_t in = atomic_load_explicit(&st->in_pos, memory_order_seq_cst);
    return (uint32_t)(in - out) +
           atomic_load_explicit(&st->held, memory_order_relaxed);
}

/* Whether a publisher that found `run` drain tasks queued or running
 * should start one more for `depth` queued envelopes (see "Extra drain
 * tasks" in inbox.c).  The caller checked run < concurrency.  100 us: a
 * full 1024-slot queue of a ~180 ns Lua handler (two producers, two
 * permits) gets its second task, which lifts it 3-15% over one producer
 * (0.98x with 200 us); a C consumer at ~10 ns never reaches it. */
#define SEDA_SPAWN_NS 100000
/* A drain task gives back the rest of its batch after an envelope that
 * took this long (see drain.c). */
#define SEDA_SHED_NS 20000000
/* How many envelopes a drain task takes at once: the bus's batch, but no
 * more than it expects to handle in SEDA_BATCH_NS at the recent handling
 * time (unknown counts as slow: one).  What a task has taken is out of
 * the queue -- it no longer counts against the capacity, and a retry goes
 * back behind it -- so for a handler that takes milliseconds, or waits on
 * a gate, a batch of 32 would let the stage hold capacity + 31 per task.
 * A ~200 ns Lua handler still takes full batches. */
#define SEDA_BATCH_NS 50000
static inline uint32_t seda__stage_take_limit(struct seda_stage_s *st,
                                              uint32_t batch)
{
    uint64_t svc = atomic_load_explicit(&st->svc_ns, memory_order_relaxed);
    uint64_t n = svc == 0 ? 1 : SEDA_BATCH_NS / svc;
    return n == 0 ? 1 : n < batch ? (uint32_t)n : batch;
}
static inline bool seda__stage_want_task(struct seda_stage_s *st, int run,
                                         uint64_t depth)
{
    if (run == 0)
        return true;
    uint64_t svc = atomic_load_explicit(&st->svc_ns, memory_order_relaxed);
    return svc == 0 || svc * depth >= (uint64_t)SEDA_SPAWN_NS * (uint64_t)run;
}

/* Lock-free admissions so far, and the hops among them (mu held). */
static inline uint64_t seda__stage_fast_all(struct seda_stage_s *st)
{
    return atomic_load_explicit(&st->in_pos, memory_order_relaxed) -
           st->in_other;
}
static inline uint64_t seda__stage_fast_hops(struct seda_stage_s *st)
{
    return atomic_load_explicit(&st->fast_hop, memory_order_relaxed);
}

/* Without mu: a hint that at least n envelopes wait to be taken (the
 * inbox's n-th slot from its head is filled, or q is in use).  Cheap to
 * poll: it reads the takers' line and a slot line the publishers have
 * not reached yet, rather than the publishers' own line. */
SEDA__API bool seda__stage_ready(struct seda_stage_s *st, uint32_t n);

/* Take up to n envelopes in delivery order: head items (retries), then
 * by priority (high, normal: the head ring's spill and the inbox, low),
 * an envelope older than starve_after first (mu held);
 * may return fewer than qcount says while publishers are mid-way. */
SEDA__API uint32_t seda__stage_take(struct seda_stage_s *st,
                                    seda_env_t **out, uint32_t n);

/* Put env back at the head (mu held). */
SEDA__API void seda__stage_push_head(struct seda_stage_s *st,
                                     seda_env_t *env);

/* Submit a drain task for st (its permit already counted in running). */
SEDA__API void seda__stage_schedule(struct seda_stage_s *st);

/* The drain task (drain.c). */
SEDA__API void seda__stage_drain(void *arg);

/* Envelopes queued, not counting held reservations (mu held), and
 * taking the oldest (mu held; NULL when none is ready yet). */
SEDA__API uint32_t seda__stage_depth(struct seda_stage_s *st);
SEDA__API seda_env_t *seda__stage_take_one(struct seda_stage_s *st);

/* Run st's admission check on env (no lock held); 0 when admitted or no
 * check is set, SEDA_ETYPE (counted in invalid, reason in err) if not. */
SEDA__API int seda__stage_check(struct seda_stage_s *st,
                                const seda_env_t *env, char *err,
                                size_t errlen);

/* Admit envs[0..n) in order with one lock round; returns how many were
 * admitted and sets *rc for the first refusal. */
SEDA__API int seda__stage_admit_many(struct seda_stage_s *st,
                                     seda_env_t **envs, int n,
                                     double timeout, int *rc);

/* Wake every publisher blocked on st (close and stop use it). */
SEDA__API void seda__stage_wake(struct seda_stage_s *st);

/* After the pool stopped: take everything left, count it dropped and end
 * it.  Returns how many envelopes were swept. */
SEDA__API int seda__stage_sweep(struct seda_stage_s *st);

/* Idle check for the bus: true when nothing is queued or scheduled; adds
 * the stage's enqueued count to *sum. */
SEDA__API bool seda__stage_idle(struct seda_stage_s *st, uint64_t *sum);

/* End an envelope with an outcome: count it (in tally, or on st under its
 * lock when tally is NULL), fire done, free it. */
SEDA__API void seda__env_end(struct seda_stage_s *st, seda_env_t *env,
                             int outcome, struct stage_counters *tally);

/* Count one envelope dropped on st (takes st->mu). */
SEDA__API void seda__stage_count_dropped(struct seda_stage_s *st);

/* Add tally into st's counters (lock held). */
SEDA__API void seda__counters_fold(struct stage_counters *into,
                                   const struct stage_counters *from);

#endif /* SEDA_STAGE_H */
