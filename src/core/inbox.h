/* SPDX-License-Identifier: MIT */
/*
 * inbox.h -- a stage's queue (inbox.c): a leaf that knows envelopes and
 * rings, not stages.
 *
 * The queue is two parts: the inbox, a ring of envelope pointers that
 * publishers fill without a lock, and q, a ring at the head for what must
 * go first (retries, an interrupted batch, replays) or did not fit; plus
 * priority lanes.  HOW IT WORKS in inbox.c tells the publish path.
 *
 * Locking: the queue has no lock of its own.  Its owner (the stage)
 * serialises every taker and every writer of the guarded fields with
 * one mutex, named at seda__inbox_init (`guard`, for assertions).
 *   Guarded: q, q_head_n, lanes, q_high, q_low, starve_ns, reserved,
 *   in_other.
 *   Immutable after init: slot, mem, mask, guard.
 *   Atomic: the slots, in_pos and fast_hop (the publishers' line), out_pos
 *   and held (the takers' line): orders in inbox.c.
 */
#ifndef SEDA_INBOX_H
#define SEDA_INBOX_H

#include "env.h"
#include "queue.h"
#include "seda_int.h"

struct seda_inbox {
    _Atomic(seda_env_t *) *slot;/* the inbox's slots (NULL = free),
                                   aligned to a cache line */
    void *mem;                  /* their allocation */
    uint32_t mask;              /* slots - 1; a power of two minus one */
    seda__mutex_t *guard;       /* the owner's lock (assertions) */
    struct seda_queue q;        /* the head: retries and replays, taken
                                   before the inbox; guarded */
    uint32_t q_head_n;          /* head items at the front of q; guarded */
    bool lanes;                 /* q_high or q_low has been used; guarded */
    struct seda_queue q_high;   /* high priority, FIFO; guarded */
    struct seda_queue q_low;    /* low priority, FIFO; guarded */
    int64_t starve_ns;          /* an envelope older than this goes next;
                                   guarded */
    int reserved;               /* slots held with no envelope yet (a
                                   journal write); guarded */
    uint64_t in_other;          /* tickets that are not lock-free
                                   admissions (the locked path's, and
                                   voided ones); guarded */
    /* ---- the publishers' line ----
     * in_pos: tickets issued; a compare-and-swap (seq_cst) both admits
     *   under the capacity and claims slot in_pos & mask.
     * fast_hop: lock-free admissions of hops (relaxed counter). */
    _Alignas(64) atomic_uint_fast64_t in_pos;
    atomic_uint_fast64_t fast_hop;
    /* ---- the takers' line: read by anyone ----
     * out_pos: tickets taken; written guarded (release store after the
     *   slots were cleared; publishers load it with acquire).
     * held: q's and the lanes' count plus reservations (relaxed mirror,
     *   written guarded). */
    _Alignas(64) atomic_uint_fast64_t out_pos;
    atomic_uint held;
};

/* A voided ticket's slot (see HOW IT WORKS in inbox.c); takers skip it. */
SEDA__API extern seda_env_t seda__tombstone_env;
#define TOMBSTONE (&seda__tombstone_env)

/* Make in for a stage of `capacity` whose head ring must hold `slots`
 * (capacity plus what drain tasks may hand back); guard is the owner's
 * lock.  0 or SEDA_ENOMEM (nothing to free). */
SEDA__API int seda__inbox_init(struct seda_inbox *in, int capacity,
                               uint32_t slots, int64_t starve_ns,
                               seda__mutex_t *guard);
/* Free an empty queue. */
SEDA__API void seda__inbox_free(struct seda_inbox *in);

/* Make the head ring and the lanes hold `slots` (guarded).  0 or
 * SEDA_ENOMEM (unchanged). */
SEDA__API int seda__inbox_reserve(struct seda_inbox *in, uint32_t slots);

/* Change the starvation age (guarded). */
SEDA__API void seda__inbox_set_starve(struct seda_inbox *in, int64_t ns);

/* count: envelopes queued (head ring and inbox, counting tickets whose
 * publisher is mid-way) plus reservations.  A hint unguarded; exact
 * guarded with no lock-free publisher mid-way.  seq_cst: a drain task's
 * final look at it is the second half of the Dekker pairing (inbox.c).
 * out_pos is read first: a taker only counts tickets issued before, so
 * the difference never goes negative. */
static inline uint32_t seda__inbox_count(struct seda_inbox *in)
{
    uint64_t out = atomic_load_explicit(&in->out_pos, memory_order_seq_cst);
    uint64_t inp = atomic_load_explicit(&in->in_pos, memory_order_seq_cst);
    return (uint32_t)(inp - out) +
           atomic_load_explicit(&in->held, memory_order_relaxed);
}

/* Envelopes queued, not counting reservations (guarded). */
static inline uint32_t seda__inbox_depth(struct seda_inbox *in)
{
    return seda__inbox_count(in) - (uint32_t)in->reserved;
}

/* Fill ticket t's slot. */
static inline void seda__inbox_store(struct seda_inbox *in, uint64_t t,
                                     seda_env_t *env)
{
    SEDA__CHAOS();                      /* the "ticket, no envelope" window */
    /* Entering a line of slots (eight a line): ask for the next one now,
     * the taker cleared it last. */
    if ((t & 7) == 0)
        seda__prefetchw(&in->slot[(t + 8) & in->mask]);
    /* Release: pairs with the acquire load in inbox_take (inbox.c). */
    atomic_store_explicit(&in->slot[t & in->mask], env,
                          memory_order_release);
}

/* Claim a ticket without the lock when the inbox has a free slot and
 * fewer than cap envelopes are queued: true with *t the ticket (fill it
 * with seda__inbox_store), false when the owner must take its locked
 * path.  *depth: what was queued before this one. */
static inline bool seda__inbox_claim(struct seda_inbox *in, uint64_t cap,
                                     uint64_t *t, uint64_t *depth)
{
    uint64_t pos = atomic_load_explicit(&in->in_pos, memory_order_relaxed);
    for (;;) {
        /* Acquire: pairs with the taker's store of out_pos, after which
         * the slots below it are clear.  A stale value only makes the
         * queue look fuller than it is (the locked path then decides). */
        uint64_t out = atomic_load_explicit(&in->out_pos,
                                            memory_order_acquire);
        uint32_t held = atomic_load_explicit(&in->held,
                                             memory_order_relaxed);
        if (pos - out > in->mask || pos - out + held >= cap)
            return false;
        /* seq_cst: ordered before the owner's reads that follow (the
         * Dekker pairings of inbox.c). */
        if (atomic_compare_exchange_weak_explicit(&in->in_pos, &pos,
                                                  pos + 1,
                                                  memory_order_seq_cst,
                                                  memory_order_relaxed)) {
            *t = pos;
            *depth = pos - out + held;
            return true;
        }
    }
}

/* A ticket was voided: its publisher found the owner closing after it
 * claimed one, stored TOMBSTONE in its slot (unguarded, first: a sweep
 * waits for every claimed slot to fill while it holds the guard), and
 * calls this guarded.  Clears the tombstones at the head. */
SEDA__API void seda__inbox_voided(struct seda_inbox *in);

/* Without the lock: a hint that at least n envelopes wait to be taken
 * (the inbox's n-th slot from its head is filled, or q is in use).
 * Cheap to poll: it reads the takers' line and a slot line the
 * publishers have not reached yet. */
SEDA__API bool seda__inbox_ready(struct seda_inbox *in, uint32_t n);

/* Append env at the tail, after everything queued (guarded, room under
 * the capacity already checked), or, priority high or low, in its lane
 * (allocated on first use with `lane_slots`; when that fails, at normal
 * priority rather than refuse what the caller owns). */
SEDA__API void seda__inbox_push(struct seda_inbox *in, seda_env_t *env,
                                uint32_t lane_slots);

/* Take up to n envelopes in delivery order: head items (retries), then
 * by priority (high, normal, low), an envelope older than starve_ns first
 * (guarded); may return fewer than the count says while publishers are
 * mid-way. */
SEDA__API uint32_t seda__inbox_take(struct seda_inbox *in, seda_env_t **out,
                                    uint32_t n);

/* Take everything queued right now, up to n, waiting out publishers
 * mid-way (guarded; for sweeps and evictions). */
SEDA__API uint32_t seda__inbox_take_all(struct seda_inbox *in,
                                        seda_env_t **out, uint32_t n);

/* Put env back at the head (guarded; q has room by construction). */
SEDA__API void seda__inbox_push_head(struct seda_inbox *in, seda_env_t *env);

/* Queue envs[0..n) at the head in order, ahead of everything, growing
 * q as needed beyond `slots` (guarded).  0 or SEDA_ENOMEM (nothing
 * queued). */
SEDA__API int seda__inbox_push_front(struct seda_inbox *in, seda_env_t **envs,
                                     int n, uint32_t slots);

/* Take the envelope drop_oldest evicts (guarded): without lanes the head
 * of the queue; with them the oldest low, else normal, else high, else a
 * head item.  NULL when only reservations are held. */
SEDA__API seda_env_t *seda__inbox_evict(struct seda_inbox *in);

/* Hold a slot with no envelope yet, or give one back (guarded). */
SEDA__API void seda__inbox_reserve_slot(struct seda_inbox *in);
SEDA__API void seda__inbox_unreserve_slot(struct seda_inbox *in);

/* Lock-free admissions so far, and the hops among them (guarded). */
static inline uint64_t seda__inbox_fast_all(struct seda_inbox *in)
{
    return atomic_load_explicit(&in->in_pos, memory_order_relaxed) -
           in->in_other;
}
static inline uint64_t seda__inbox_fast_hops(struct seda_inbox *in)
{
    return atomic_load_explicit(&in->fast_hop, memory_order_relaxed);
}
/* Count a lock-free admission of a hop. */
static inline void seda__inbox_count_hop(struct seda_inbox *in)
{
    atomic_fetch_add_explicit(&in->fast_hop, 1, memory_order_relaxed);
}

#endif /* SEDA_INBOX_H */
