/* SPDX-License-Identifier: MIT */
/*
 * inbox.c -- a stage's queue: the lock-free inbox, the head ring and the
 * priority lanes; a leaf over struct seda_inbox (inbox.h), like skynet's
 * message queue: it knows envelopes and rings, not stages.  Its owner (the
 * stage) decides admission and scheduling around it and holds the guard.
 *
 * HOW IT WORKS: the lock-free publish path
 *   A stage's queue is two parts: the inbox, a ring of envelope pointers
 *   that publishers fill without the stage lock, and q, a ring at the head
 *   for envelopes that must go first (nack retries, an interrupted batch,
 *   replays) or that did not fit in the inbox.  Takers (drain tasks,
 *   evictions, sweeps, receivers) take from q, then the inbox, always
 *   under the stage lock, so the inbox has a single consumer at a time.
 *
 *   Inbox tickets: in_pos counts tickets issued, out_pos tickets taken;
 *   ticket t owns slot t & inbox_mask.  A publisher reads out_pos and
 *   held (q's count plus reservations), and if in_pos - out_pos is below
 *   the number of slots and in_pos - out_pos + held below the capacity,
 *   claims ticket in_pos with a compare-and-swap: one atomic step both
 *   admits and reserves the slot, so nothing is ever over-counted or
 *   undone.  Since fewer than `slots` tickets are then outstanding,
 *   ticket t - slots was taken, and the
 *   taker cleared its slot before it stored out_pos (release; the
 *   publisher's load is acquire), so the slot is free.  The publisher
 *   stores its envelope there (release) and, if fewer drain tasks run
 *   than the stage allows, takes the lock to schedule one.  A taker walks
 *   slots from out_pos, clearing each, and stops at an empty one: either
 *   nothing more was published or a publisher is between its ticket and
 *   its store; takers treat that as "not yet" and look again.
 *
 *   Why a ring and not a linked list: a taker following links waits for
 *   one cache line from the publisher's core per envelope, one after the
 *   other; the ring hands it eight pointers a line, and it can start
 *   fetching all the envelopes of a batch at once.  The publishers write
 *   only their own line and the slots; takers write theirs (out_pos, once
 *   a batch) and the slots.
 *
 *   The race with a drain task that is about to give its permit back is
 *   closed Dekker-style, all seq_cst: the publisher's compare-and-swap on
 *   in_pos, then its read of running; the task's running--, then its read
 *   of in_pos.  Whichever comes second sees the other, so either the
 *   publisher schedules or the task carries on; an envelope is never left
 *   behind.  The same order protects closing: a publisher that finds the
 *   bus closing after its ticket was issued cannot return it, so it
 *   stores a tombstone that takers skip, and takes the locked path, which
 *   refuses; a sweep after the store of stopping waits for every issued
 *   ticket's slot to fill, and a tombstone stored after a sweep is
 *   skipped by its own publisher (under the lock).
 *
 *   The locked path appends to the inbox the same way (so order holds);
 *   when the inbox is full but the capacity is larger than the inbox, it
 *   first moves the inbox's envelopes to the tail of q, in order, then
 *   appends there.  That empties the inbox, so the lock-free path goes
 *   on (what it adds is taken after q): a deep queue costs one locked
 *   spill per `slots` publishes, not a lock each.
 *
 *   Worked example: capacity 2, slots 64, nothing held.  Tickets 0 and 1
 *   are issued; a third publisher reads in_pos 2, out_pos 0: 2 is not
 *   below 2, so it takes the locked path, where the policy (reject, wait,
 *   evict) applies to the exact state.  A drain task takes both (out_pos
 *   becomes 2, slots 0 and 1 cleared); the next ticket is 2, slot 2.
 */
#include <sched.h>
#include <string.h>

#include "inbox.h"

#define HELD(in) SEDA__ASSERT_HELD((in)->guard)

/* Inbox slots: the capacity rounded up to a power of two, within these
 * bounds (8 bytes a slot).  Deeper queues overflow into q. */
#define INBOX_MIN 64
#define INBOX_MAX 1024

seda_env_t seda__tombstone_env;

/* ---- making ---- */

int seda__inbox_init(struct seda_inbox *in, int capacity, uint32_t slots,
                     int64_t starve_ns, seda__mutex_t *guard)
{
    if (seda__queue_init(&in->q, slots))
        return SEDA_ENOMEM;
    uint32_t n = INBOX_MIN;
    while (n < INBOX_MAX && n < (uint32_t)capacity)
        n *= 2;
    if (!(in->mem = seda__calloc(1, n * sizeof *in->slot + 63))) {
        seda__queue_destroy(&in->q);
        return SEDA_ENOMEM;
    }
    in->slot = (void *)(((uintptr_t)in->mem + 63) & ~(uintptr_t)63);
    for (uint32_t k = 0; k < n; k++)
        atomic_init(&in->slot[k], NULL);
    in->mask = n - 1;
    in->guard = guard;
    in->starve_ns = starve_ns;
    atomic_init(&in->in_pos, 0);
    atomic_init(&in->fast_hop, 0);
    atomic_init(&in->out_pos, 0);
    atomic_init(&in->held, 0);
    return 0;
}

void seda__inbox_free(struct seda_inbox *in)
{
    assert(seda__queue_count(&in->q) == 0 && seda__inbox_count(in) == 0);
    seda__queue_destroy(&in->q);
    seda__queue_destroy(&in->q_high);
    seda__queue_destroy(&in->q_low);
    seda__free(in->mem);
}

int seda__inbox_reserve(struct seda_inbox *in, uint32_t slots)
{
    HELD(in);
    int rc = seda__queue_reserve(&in->q, slots);
    if (rc == 0 && in->q_high.slot)
        rc = seda__queue_reserve(&in->q_high, slots);
    if (rc == 0 && in->q_low.slot)
        rc = seda__queue_reserve(&in->q_low, slots);
    return rc;
}

void seda__inbox_set_starve(struct seda_inbox *in, int64_t ns)
{
    HELD(in);
    in->starve_ns = ns;
}

/* ---- the two-part queue ---- */

/* Keep held (q's count plus reservations) in step after q or reserved
 * changed (guarded). */
static void held_sync(struct seda_inbox *in)
{
    HELD(in);
    atomic_store_explicit(&in->held,
                          seda__queue_count(&in->q) +
                              seda__queue_count(&in->q_high) +
                              seda__queue_count(&in->q_low) +
                              (uint32_t)in->reserved,
                          memory_order_relaxed);
}

void seda__inbox_reserve_slot(struct seda_inbox *in)
{
    in->reserved++;
    held_sync(in);
}

void seda__inbox_unreserve_slot(struct seda_inbox *in)
{
    assert(in->reserved > 0);
    in->reserved--;
    held_sync(in);
}

/* Take up to n envelopes from the inbox into out[] (guarded), stopping at
 * the first empty slot. */
static uint32_t inbox_take(struct seda_inbox *in, seda_env_t **out,
                           uint32_t n)
{
    HELD(in);
    uint64_t pos = atomic_load_explicit(&in->out_pos, memory_order_relaxed);
    uint64_t start = pos;
    uint32_t got = 0;
    while (got < n) {
        _Atomic(seda_env_t *) *slot = &in->slot[pos & in->mask];
        seda_env_t *e = atomic_load_explicit(slot, memory_order_acquire);
        if (!e)
            break;
        atomic_store_explicit(slot, NULL, memory_order_relaxed);
        pos++;
        if (e == TOMBSTONE)
            continue;
        /* Start fetching the batch's envelopes at once (for reading: an
         * ack writes nothing into them, so they stay shared with the
         * publisher that will reuse them). */
        __builtin_prefetch(e);
        __builtin_prefetch((char *)e + sizeof *e - 1);
        out[got++] = e;
    }
    if (pos != start)
        /* Release: the cleared slots are visible to a publisher that sees
         * the new out_pos and reuses them. */
        atomic_store_explicit(&in->out_pos, pos, memory_order_seq_cst);
    return got;
}

/* Clear the tombstones at the head of the inbox, stopping at the first
 * envelope or empty slot (guarded). */
static void skip_tombstones(struct seda_inbox *in)
{
    HELD(in);
    uint64_t pos = atomic_load_explicit(&in->out_pos, memory_order_relaxed);
    uint64_t start = pos;
    for (;;) {
        _Atomic(seda_env_t *) *slot = &in->slot[pos & in->mask];
        if (atomic_load_explicit(slot, memory_order_acquire) != TOMBSTONE)
            break;
        atomic_store_explicit(slot, NULL, memory_order_relaxed);
        pos++;
    }
    if (pos != start)
        atomic_store_explicit(&in->out_pos, pos, memory_order_seq_cst);
}

void seda__inbox_voided(struct seda_inbox *in)
{
    HELD(in);
    in->in_other++;                     /* not an admission */
    /* A sweep may already be over: nobody else would skip it.  Skip the
     * tombstones at the head; one behind a slot still empty is skipped
     * by its own publisher, who stores after us and comes here too. */
    skip_tombstones(in);
}

/* Move everything in the inbox to the tail of q, in order, waiting out
 * publishers between their ticket and their store (guarded). */
static void inbox_spill(struct seda_inbox *in)
{
    HELD(in);
    uint64_t end = atomic_load_explicit(&in->in_pos, memory_order_acquire);
    seda_env_t *chunk[64];
    unsigned spin = 0;
    while (atomic_load_explicit(&in->out_pos, memory_order_relaxed) < end) {
        uint32_t got = inbox_take(in, chunk, 64);
        for (uint32_t k = 0; k < got; k++)
            seda__queue_push(&in->q, chunk[k]);
        if (got > 0) {
            spin = 0;
            continue;
        }
        if (atomic_load_explicit(&in->out_pos, memory_order_relaxed) >= end)
            break;                      /* only tombstones were left */
        /* Not an idle wait: a publisher holding a ticket stores within a
         * few instructions; the yield is for when it was preempted
         * mid-store on this core (also below). */
        if (spin++ < 64)
            seda__cpu_relax();
        else
            sched_yield();
    }
    held_sync(in);
}

/* Append env at the tail, after everything queued (guarded, room under
 * the capacity already checked): through the inbox when it has a free
 * slot, else through q after spilling the inbox into it. */
static void append_locked(struct seda_inbox *in, seda_env_t *env)
{
    HELD(in);
    uint64_t slots = (uint64_t)in->mask + 1;
    uint64_t t = atomic_load_explicit(&in->in_pos, memory_order_relaxed);
    for (;;) {
        uint64_t out = atomic_load_explicit(&in->out_pos,
                                            memory_order_relaxed);
        if (t - out >= slots) {
            inbox_spill(in);
            seda__queue_push(&in->q, env);
            held_sync(in);
            return;
        }
        if (atomic_compare_exchange_weak_explicit(&in->in_pos, &t, t + 1,
                                                  memory_order_seq_cst,
                                                  memory_order_relaxed))
            break;
    }
    in->in_other++;
    seda__inbox_store(in, t, env);
}

bool seda__inbox_ready(struct seda_inbox *in, uint32_t n)
{
    if (atomic_load_explicit(&in->held, memory_order_relaxed))
        return true;
    if (n == 0 || n > in->mask + 1)
        n = in->mask + 1;
    uint64_t out = atomic_load_explicit(&in->out_pos, memory_order_relaxed);
    return atomic_load_explicit(&in->slot[(out + n - 1) & in->mask],
                                memory_order_relaxed) != NULL;
}

/* Pop up to n from q's front; what it takes counts off the head items
 * first (guarded). */
static uint32_t q_pop(struct seda_inbox *in, seda_env_t **out, uint32_t n)
{
    uint32_t got = seda__queue_pop_many(&in->q, (void **)out, n);
    in->q_head_n -= got < in->q_head_n ? got : in->q_head_n;
    return got;
}

/* The oldest normal-priority envelope (q's spill part, then the inbox),
 * without taking it; NULL when there is none ready (guarded, no head
 * items in q). */
static seda_env_t *normal_peek(struct seda_inbox *in)
{
    if (seda__queue_count(&in->q))
        return in->q.slot[in->q.head];
    skip_tombstones(in);
    uint64_t pos = atomic_load_explicit(&in->out_pos, memory_order_relaxed);
    return atomic_load_explicit(&in->slot[pos & in->mask],
                                memory_order_acquire);
}

static seda_env_t *lane_peek(struct seda_queue *q)
{
    return seda__queue_count(q) ? q->slot[q->head] : NULL;
}

/* The priority order (guarded): head items; then an envelope waiting
 * longer than starve_ns while a higher lane has work (the oldest such);
 * then high, normal, low. */
static uint32_t take_lanes(struct seda_inbox *in, seda_env_t **out,
                           uint32_t n)
{
    uint32_t got = 0;
    int64_t old = seda__clock_ns() - in->starve_ns;
    while (got < n) {
        if (in->q_head_n) {
            got += q_pop(in, out + got, 1);
            continue;
        }
        seda_env_t *h = lane_peek(&in->q_high);
        seda_env_t *m = normal_peek(in);
        seda_env_t *l = lane_peek(&in->q_low);
        int lane = h ? 0 : m ? 1 : l ? 2 : -1;
        if (lane < 0)
            break;
        /* Starvation: a lower lane's head older than starve_after. */
        if (lane == 0 && m && m->enq_ts < old)
            lane = 1;
        if (l && lane < 2 && l->enq_ts < old &&
            (lane == 0 || l->enq_ts < m->enq_ts))
            lane = 2;
        if (lane == 0) {
            out[got++] = seda__queue_pop(&in->q_high);
        } else if (lane == 2) {
            out[got++] = seda__queue_pop(&in->q_low);
        } else if (seda__queue_count(&in->q)) {
            got += q_pop(in, out + got, 1);
        } else if (inbox_take(in, out + got, 1) == 1) {
            got++;
        } else {
            break;                      /* a publisher is mid-way */
        }
    }
    held_sync(in);
    return got;
}

uint32_t seda__inbox_take(struct seda_inbox *in, seda_env_t **out,
                          uint32_t n)
{
    HELD(in);
    if (SEDA__UNLIKELY(in->lanes))
        return take_lanes(in, out, n);
    uint32_t got = 0;
    if (seda__queue_count(&in->q)) {
        got = q_pop(in, out, n);
        held_sync(in);
    }
    if (got < n)
        got += inbox_take(in, out + got, n - got);
    return got;
}

/* Queue env (high or low priority) in its lane, allocating the lane on
 * first use (guarded, room under the capacity checked).  0 or
 * SEDA_ENOMEM (nothing queued). */
static int lane_push(struct seda_inbox *in, seda_env_t *env, uint32_t slots)
{
    struct seda_queue *q = env->prio == SEDA_PRIO_HIGH ? &in->q_high
                                                      : &in->q_low;
    if (!q->slot && seda__queue_init(q, slots) != 0)
        return SEDA_ENOMEM;
    if (seda__queue_room(q) == 0 &&
        seda__queue_reserve(q, q->mask + 2) != 0)
        return SEDA_ENOMEM;
    seda__queue_push(q, env);
    in->lanes = true;
    held_sync(in);
    return 0;
}

void seda__inbox_push(struct seda_inbox *in, seda_env_t *env,
                      uint32_t lane_slots)
{
    HELD(in);
    if (env->prio == SEDA_PRIO_NORMAL || lane_push(in, env, lane_slots) != 0)
        append_locked(in, env);
}

seda_env_t *seda__inbox_evict(struct seda_inbox *in)
{
    HELD(in);
    seda_env_t *e = NULL;
    if (!in->lanes)
        return seda__inbox_take_all(in, &e, 1) ? e : NULL;
    /* Lowest priority first: low, normal, high, then the head items. */
    if ((e = seda__queue_pop(&in->q_low)) == NULL &&
        seda__queue_count(&in->q) > in->q_head_n) {
        /* The oldest spilled normal envelope, behind the head items. */
        uint32_t i = (in->q.head + in->q_head_n) & in->q.mask;
        e = in->q.slot[i];
        for (uint32_t k = in->q_head_n; k + 1 < in->q.count; k++)
            in->q.slot[(in->q.head + k) & in->q.mask] =
                in->q.slot[(in->q.head + k + 1) & in->q.mask];
        in->q.count--;
    }
    if (!e) {
        for (unsigned spin = 0; !e; spin++) {
            if (inbox_take(in, &e, 1) == 1)
                break;
            e = NULL;
            if (atomic_load_explicit(&in->in_pos, memory_order_acquire) ==
                atomic_load_explicit(&in->out_pos, memory_order_relaxed))
                break;                  /* the inbox is empty */
            if (spin < 64)
                seda__cpu_relax();
            else
                sched_yield();
        }
    }
    if (!e)
        e = seda__queue_pop(&in->q_high);
    if (!e && (e = seda__queue_pop(&in->q)) != NULL && in->q_head_n)
        in->q_head_n--;
    held_sync(in);
    return e;
}

/* Put env back at the head (guarded; q has room by construction: see
 * seda__queue_reserve calls). */
void seda__inbox_push_head(struct seda_inbox *in, seda_env_t *env)
{
    HELD(in);
    seda__queue_push_front(&in->q, env);
    in->q_head_n++;
    held_sync(in);
}

int seda__inbox_push_front(struct seda_inbox *in, seda_env_t **envs, int n,
                           uint32_t slots)
{
    HELD(in);
    uint64_t need = (uint64_t)seda__queue_count(&in->q) + (uint64_t)n +
                    (uint64_t)slots;
    if (need > UINT32_MAX / 2 ||
        seda__queue_reserve(&in->q, (uint32_t)need) != 0)
        return SEDA_ENOMEM;
    for (int i = n - 1; i >= 0; i--)
        seda__inbox_push_head(in, envs[i]);
    return 0;
}

/* Take everything queued right now, waiting out publishers mid-way
 * (guarded; used where the count must reach zero: sweeps). */
uint32_t seda__inbox_take_all(struct seda_inbox *in, seda_env_t **out,
                              uint32_t n)
{
    uint32_t got = seda__inbox_take(in, out, n);
    /* A publisher holding a ticket stores its envelope (or a tombstone)
     * shortly; that needs no lock. */
    for (unsigned spin = 0;
         got == 0 && seda__inbox_count(in) > (uint32_t)in->reserved; spin++) {
        if (spin < 64)
            seda__cpu_relax();
        else
            sched_yield();
        got = seda__inbox_take(in, out, n);
    }
    return got;
}
