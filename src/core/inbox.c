/* SPDX-License-Identifier: MIT */
/*
 * inbox.c -- a stage's queue: the lock-free inbox and the head ring.
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
 *   Extra drain tasks: a stage with several permits gets a second (third,
 *   ...) drain task only when the backlog would keep the tasks already
 *   running busy for SEDA_SPAWN_NS or more at the recent handling time
 *   per envelope (svc_ns; unknown counts as slow).  So a burst of slow
 *   envelopes is spread over every permit at once (each task takes a
 *   fair share of the queue), while a fast consumer that keeps up alone
 *   is not joined by tasks that would only fight it for the queue and,
 *   on a small machine, for the cores the publishers need.  Drain tasks
 *   apply the same rule after each batch, and one that meets an envelope
 *   taking SEDA_SHED_NS (longer than a preemption makes a fast one) gives
 *   the rest of its batch back and starts tasks for it; the batch's
 *   slowest envelope is left out of svc_ns for the same reason.  A queued
 *   envelope always has a task: with none running one is started, as
 *   before.
 *
 *   Worked example: capacity 2, slots 64, nothing held.  Tickets 0 and 1
 *   are issued; a third publisher reads in_pos 2, out_pos 0: 2 is not
 *   below 2, so it takes the locked path, where the policy (reject, wait,
 *   evict) applies to the exact state.  A drain task takes both (out_pos
 *   becomes 2, slots 0 and 1 cleared); the next ticket is 2, slot 2.
 */
#include <sched.h>
#include <string.h>

#include "bus.h"
#include "inbox.h"
#include "stage.h"

/* ---- the two-part queue ---- */

seda_env_t seda__tombstone_env;

/* Keep held (q's count plus reservations) in step after q or reserved
 * changed (mu held). */
void seda__inbox_held_sync(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    atomic_store_explicit(&st->held,
                          seda__queue_count(&st->q) +
                              seda__queue_count(&st->q_high) +
                              seda__queue_count(&st->q_low) +
                              (uint32_t)st->reserved,
                          memory_order_relaxed);
}

/* Take up to n envelopes from the inbox into out[] (mu held), stopping at
 * the first empty slot. */
static uint32_t inbox_take(struct seda_stage_s *st, seda_env_t **out,
                           uint32_t n)
{
    SEDA__ASSERT_HELD(&st->mu);
    uint64_t pos = atomic_load_explicit(&st->out_pos, memory_order_relaxed);
    uint64_t start = pos;
    uint32_t got = 0;
    while (got < n) {
        _Atomic(seda_env_t *) *slot = &st->inbox[pos & st->inbox_mask];
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
        atomic_store_explicit(&st->out_pos, pos, memory_order_seq_cst);
    return got;
}

/* Clear the tombstones at the head of the inbox, stopping at the first
 * envelope or empty slot (mu held). */
void seda__inbox_skip_tombstones(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    uint64_t pos = atomic_load_explicit(&st->out_pos, memory_order_relaxed);
    uint64_t start = pos;
    for (;;) {
        _Atomic(seda_env_t *) *slot = &st->inbox[pos & st->inbox_mask];
        if (atomic_load_explicit(slot, memory_order_acquire) != TOMBSTONE)
            break;
        atomic_store_explicit(slot, NULL, memory_order_relaxed);
        pos++;
    }
    if (pos != start)
        atomic_store_explicit(&st->out_pos, pos, memory_order_seq_cst);
}

/* Move everything in the inbox to the tail of q, in order, waiting out
 * publishers between their ticket and their store (mu held). */
static void inbox_spill(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    uint64_t end = atomic_load_explicit(&st->in_pos, memory_order_acquire);
    seda_env_t *chunk[64];
    unsigned spin = 0;
    while (atomic_load_explicit(&st->out_pos, memory_order_relaxed) < end) {
        uint32_t got = inbox_take(st, chunk, 64);
        for (uint32_t k = 0; k < got; k++)
            seda__queue_push(&st->q, chunk[k]);
        if (got > 0) {
            spin = 0;
            continue;
        }
        if (atomic_load_explicit(&st->out_pos, memory_order_relaxed) >= end)
            break;                      /* only tombstones were left */
        if (spin++ < 64)
            seda__cpu_relax();
        else
            sched_yield();
    }
    seda__inbox_held_sync(st);
}

/* Append env at the tail, after everything queued (mu held, room under
 * the capacity already checked).  Returns through the inbox when it has
 * a free slot, else through q after spilling the inbox into it. */
void seda__inbox_append_locked(struct seda_stage_s *st, seda_env_t *env)
{
    SEDA__ASSERT_HELD(&st->mu);
    uint64_t slots = (uint64_t)st->inbox_mask + 1;
    uint64_t t = atomic_load_explicit(&st->in_pos, memory_order_relaxed);
    for (;;) {
        uint64_t out = atomic_load_explicit(&st->out_pos,
                                            memory_order_relaxed);
        if (t - out >= slots) {
            inbox_spill(st);
            seda__queue_push(&st->q, env);
            seda__inbox_held_sync(st);
            return;
        }
        if (atomic_compare_exchange_weak_explicit(&st->in_pos, &t, t + 1,
                                                  memory_order_seq_cst,
                                                  memory_order_relaxed))
            break;
    }
    st->in_other++;
    seda__inbox_store(st, t, env);
}

bool seda__stage_ready(struct seda_stage_s *st, uint32_t n)
{
    if (atomic_load_explicit(&st->held, memory_order_relaxed))
        return true;
    if (n == 0 || n > st->inbox_mask + 1)
        n = st->inbox_mask + 1;
    uint64_t out = atomic_load_explicit(&st->out_pos, memory_order_relaxed);
    return atomic_load_explicit(&st->inbox[(out + n - 1) & st->inbox_mask],
                                memory_order_relaxed) != NULL;
}

/* Pop up to n from q's front; what it takes counts off the head items
 * first (mu held). */
static uint32_t q_pop(struct seda_stage_s *st, seda_env_t **out, uint32_t n)
{
    uint32_t got = seda__queue_pop_many(&st->q, (void **)out, n);
    st->q_head_n -= got < st->q_head_n ? got : st->q_head_n;
    return got;
}

/* The oldest normal-priority envelope (q's spill part, then the inbox),
 * without taking it; NULL when there is none ready (mu held, no head
 * items in q). */
static seda_env_t *normal_peek(struct seda_stage_s *st)
{
    if (seda__queue_count(&st->q))
        return st->q.slot[st->q.head];
    seda__inbox_skip_tombstones(st);
    uint64_t pos = atomic_load_explicit(&st->out_pos, memory_order_relaxed);
    return atomic_load_explicit(&st->inbox[pos & st->inbox_mask],
                                memory_order_acquire);
}

static seda_env_t *lane_peek(struct seda_queue *q)
{
    return seda__queue_count(q) ? q->slot[q->head] : NULL;
}

/* The priority order (mu held): head items; then an envelope waiting
 * longer than starve_after while a higher lane has work (the oldest such);
 * then high, normal, low. */
static uint32_t take_lanes(struct seda_stage_s *st, seda_env_t **out,
                           uint32_t n)
{
    uint32_t got = 0;
    int64_t old = seda__clock_ns() - st->starve_ns;
    while (got < n) {
        if (st->q_head_n) {
            got += q_pop(st, out + got, 1);
            continue;
        }
        seda_env_t *h = lane_peek(&st->q_high);
        seda_env_t *m = normal_peek(st);
        seda_env_t *l = lane_peek(&st->q_low);
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
            out[got++] = seda__queue_pop(&st->q_high);
        } else if (lane == 2) {
            out[got++] = seda__queue_pop(&st->q_low);
        } else if (seda__queue_count(&st->q)) {
            got += q_pop(st, out + got, 1);
        } else if (inbox_take(st, out + got, 1) == 1) {
            got++;
        } else {
            break;                      /* a publisher is mid-way */
        }
    }
    seda__inbox_held_sync(st);
    return got;
}

uint32_t seda__stage_take(struct seda_stage_s *st, seda_env_t **out,
                          uint32_t n)
{
    SEDA__ASSERT_HELD(&st->mu);
    if (SEDA__UNLIKELY(st->lanes))
        return take_lanes(st, out, n);
    uint32_t got = 0;
    if (seda__queue_count(&st->q)) {
        got = q_pop(st, out, n);
        seda__inbox_held_sync(st);
    }
    if (got < n)
        got += inbox_take(st, out + got, n - got);
    return got;
}

int seda__inbox_lane_push(struct seda_stage_s *st, seda_env_t *env)
{
    SEDA__ASSERT_HELD(&st->mu);
    struct seda_queue *q = env->prio == SEDA_PRIO_HIGH ? &st->q_high
                                                      : &st->q_low;
    if (!q->slot) {
        uint64_t slots = (uint64_t)st->capacity +
                         (uint64_t)st->concurrency * (uint64_t)st->bus->batch;
        if (seda__queue_init(q, (uint32_t)slots) != 0)
            return SEDA_ENOMEM;
    }
    if (seda__queue_room(q) == 0 &&
        seda__queue_reserve(q, q->mask + 2) != 0)
        return SEDA_ENOMEM;
    seda__queue_push(q, env);
    st->lanes = true;
    seda__inbox_held_sync(st);
    return 0;
}

seda_env_t *seda__inbox_evict(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    seda_env_t *e = NULL;
    if (!st->lanes)
        return seda__inbox_take_all(st, &e, 1) ? e : NULL;
    /* Lowest priority first: low, normal, high, then the head items. */
    if ((e = seda__queue_pop(&st->q_low)) == NULL &&
        seda__queue_count(&st->q) > st->q_head_n) {
        /* The oldest spilled normal envelope, behind the head items. */
        uint32_t i = (st->q.head + st->q_head_n) & st->q.mask;
        e = st->q.slot[i];
        for (uint32_t k = st->q_head_n; k + 1 < st->q.count; k++)
            st->q.slot[(st->q.head + k) & st->q.mask] =
                st->q.slot[(st->q.head + k + 1) & st->q.mask];
        st->q.count--;
    }
    if (!e) {
        for (unsigned spin = 0; !e; spin++) {
            if (inbox_take(st, &e, 1) == 1)
                break;
            e = NULL;
            if (atomic_load_explicit(&st->in_pos, memory_order_acquire) ==
                atomic_load_explicit(&st->out_pos, memory_order_relaxed))
                break;                  /* the inbox is empty */
            if (spin < 64)
                seda__cpu_relax();
            else
                sched_yield();
        }
    }
    if (!e)
        e = seda__queue_pop(&st->q_high);
    if (!e && (e = seda__queue_pop(&st->q)) != NULL && st->q_head_n)
        st->q_head_n--;
    seda__inbox_held_sync(st);
    return e;
}

/* Put env back at the head (mu held; q has room by construction: see
 * seda__queue_reserve calls). */
void seda__stage_push_head(struct seda_stage_s *st, seda_env_t *env)
{
    SEDA__ASSERT_HELD(&st->mu);
    seda__queue_push_front(&st->q, env);
    st->q_head_n++;
    seda__inbox_held_sync(st);
}

/* Take everything queued right now, waiting out publishers mid-way
 * (mu held; used where the count must reach zero: sweeps). */
uint32_t seda__inbox_take_all(struct seda_stage_s *st, seda_env_t **out,
                              uint32_t n)
{
    uint32_t got = seda__stage_take(st, out, n);
    /* A publisher holding a ticket stores its envelope (or a tombstone)
     * shortly; that needs no lock. */
    for (unsigned spin = 0;
         got == 0 && seda__stage_qcount(st) > (uint32_t)st->reserved; spin++) {
        if (spin < 64)
            seda__cpu_relax();
        else
            sched_yield();
        got = seda__stage_take(st, out, n);
    }
    return got;
}

uint32_t seda__stage_depth(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    return seda__stage_qcount(st) - (uint32_t)st->reserved;
}

seda_env_t *seda__stage_take_one(struct seda_stage_s *st)
{
    seda_env_t *e = NULL;
    return seda__stage_take(st, &e, 1) ? e : NULL;
}
