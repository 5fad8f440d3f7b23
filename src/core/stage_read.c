/* SPDX-License-Identifier: MIT */
/*
 * stage_read.c -- the stage's one snapshot for readers
 * (seda_stage_stats_get): every part read into one struct, after the
 * overdue leases of a pull stage are counted as nacks (route.c's), so it
 * sits above the envelope's path, while stage_new.c, which makes the
 * stage, sits below it.
 */
#include <string.h>

#include "stage.h"

void seda_stage_stats_get(seda_stage_t *st, seda_stage_stats *out)
{
    if (st->pull) {
        /* Overdue leases count as nacks before we report. */
        seda_env_t *requeue[64];
        int n;
        do {
            seda__mutex_lock(&st->mu);
            n = seda__pull_expire(&st->pl, seda__now_ns(), requeue, 64);
            seda__mutex_unlock(&st->mu);
            for (int i = 0; i < n; i++)
                seda__route_nack(st, requeue[i]);
        } while (n == 64);
    }
    memset(out, 0, sizeof *out);
    memcpy(out->name, st->name, sizeof out->name);
    out->delivery = st->delivery;
    out->max_attempts = st->max_attempts;
    out->durable = st->durable;
    out->consumers = atomic_load_explicit(&st->cons.n,
                                          memory_order_acquire);
    seda__mutex_lock(&st->mu);
    out->capacity = st->adm.capacity;
    out->concurrency = st->adm.concurrency;
    out->policy = st->adm.policy;
    /* Counts an inbox ticket whose publisher is mid-way as queued (it
     * was admitted); a ticket voided by a publisher racing a close counts
     * until a taker skips it. */
    out->depth = (int)seda__stage_depth(st);
    /* Envelopes being handled: at most one per drain task, so never above
     * the permits.  What a task has taken and not yet started (up to a
     * batch of a fast handler's, for microseconds) is neither queued nor
     * being handled; the bus's in_system counts it.  A pull stage's are
     * its leases. */
    out->in_flight = st->pull ? st->pl.leased
                              : seda__drain_in_flight(&st->task);
    out->suspended = seda__drain_suspended(&st->task);
    if (!st->pull) {
        /* Drain tasks hold the permits suspended calls do not. */
        int run = seda__drain_running_hint(&st->task) -
                  seda__drain_suspended(&st->task);
        if (out->in_flight > run)
            out->in_flight = run;
        out->in_flight += seda__drain_suspended(&st->task);
    }
    out->enqueued = st->stats.c.enqueued + seda__inbox_fast_all(&st->in);
    out->delivered = st->stats.c.delivered;
    out->nacked = st->stats.c.nacked;
    out->dropped = st->stats.c.dropped;
    out->dead_lettered = st->stats.c.dead_lettered;
    out->errors = st->stats.c.errors;
    out->completed = st->stats.c.completed;
    out->invalid = st->stats.c.invalid;
    out->refused = st->stats.c.refused;
    out->shed = st->stats.c.shed;
    out->shed_for = st->stats.c.shed_for;
    out->delayed = st->rt.delayed;
    out->shedding = atomic_load_explicit(&st->shed.level,
                                         memory_order_relaxed);
    out->depth_high = (int)seda__queue_count(&st->in.q_high);
    out->depth_low = (int)seda__queue_count(&st->in.q_low);
    out->handed_off = st->stats.c.it_remote;
    out->long_holds = atomic_load_explicit(&st->long_holds,
                                           memory_order_relaxed);
    for (int k = 0; k < SEDA__DEAD_N && k < SEDA_DEAD_REASONS; k++)
        out->dead_by_reason[k] = st->stats.c.dead_by[k];
    /* Rate over the newest sample and the oldest within 5 s of now. */
    int64_t now = seda__clock_ns();
    uint64_t d_now = st->stats.c.delivered;
    for (int k = st->stats.rate_n; k >= 1; k--) {
        int idx = (st->stats.rate_head - k + 64) % 64;
        int64_t dt = now - st->stats.rate[idx].t;
        if (dt <= 5000000000LL && dt > 0) {
            out->rate = (double)(d_now - st->stats.rate[idx].delivered) * 1e9 /
                        (double)dt;
            break;
        }
    }
    seda__mutex_unlock(&st->mu);
    seda__stats_latency_get(&st->stats, out);
}
