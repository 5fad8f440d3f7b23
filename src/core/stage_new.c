/* SPDX-License-Identifier: MIT */
/*
 * stage_new.c -- making a stage: its options checked, its parts made
 * (each by the file that owns it: the queue, admission, retry, the pull
 * side, the stats, the taps), and freed; and the public readers of what
 * was fixed at its making (the layers beside the core read it through
 * door.h's accessors, in stage.c).
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "bus.h"
#include "stage.h"

/* ---- creation ---- */

#define FAIL(...) do { \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return SEDA_EINVAL; \
    } while (0)

int seda__stage_new(struct seda_bus_s *bus, const seda_stage_opts *o,
                    struct seda_stage_s **out, char *err, size_t errlen)
{
    if (!o)
        FAIL("stage: options are required");
    const char *nm = o->name;
    if (!nm || !*nm)
        FAIL("stage: name is required");
    if (!seda__valid_name(nm))
        FAIL("stage '%.80s': name must be 1-%d characters of "
             "[A-Za-z0-9_.:-]", nm, SEDA_NAME_MAX);
    if (o->capacity <= 0)
        FAIL("stage '%s': capacity must be > 0 (got %d)", nm, o->capacity);
    if (o->capacity > (1 << 26))
        FAIL("stage '%s': capacity must be <= %d (got %d)", nm, 1 << 26,
             o->capacity);
    if (o->concurrency <= 0)
        FAIL("stage '%s': concurrency must be > 0 (got %d)", nm,
             o->concurrency);
    if (o->concurrency > 4096)
        FAIL("stage '%s': concurrency must be <= 4096 (got %d)", nm,
             o->concurrency);
    if (o->max_attempts <= 0)
        FAIL("stage '%s': max_attempts must be > 0 (got %d)", nm,
             o->max_attempts);
    if (o->max_attempts > 65535)
        FAIL("stage '%s': max_attempts must be <= 65535 (got %d)", nm,
             o->max_attempts);
    if (!seda_policy_name(o->policy))
        FAIL("stage '%s': unknown policy (%d)", nm, o->policy);
    if (!seda_delivery_name(o->delivery))
        FAIL("stage '%s': unknown delivery (%d)", nm, o->delivery);
    if (!(o->publish_timeout >= 0))
        FAIL("stage '%s': publish_timeout must be >= 0", nm);
    if (!(o->handler_timeout >= 0))
        FAIL("stage '%s': handler_timeout must be >= 0", nm);
    if (o->dead_letter && !seda__valid_name(o->dead_letter))
        FAIL("stage '%s': dead_letter is not a valid stage name", nm);
    if (o->pull && !(o->ack_timeout > 0))
        FAIL("stage '%s': ack_timeout must be > 0", nm);
    if (o->durable < SEDA_MEMORY || o->durable > SEDA_EXACTLY_ONCE)
        FAIL("stage '%s': unknown durable mode (%d)", nm, o->durable);
    if (o->durable == SEDA_EXACTLY_ONCE && o->dedup_window <= 0)
        FAIL("stage '%s': dedup_window must be > 0", nm);
    char why[160];
    if (seda__stage_check_admission(o, SEDA_TUNE_SHED | SEDA_TUNE_RETRY |
                                           SEDA_TUNE_STARVE,
                                    why, sizeof why) != 0)
        FAIL("stage '%s': %s", nm, why);

    /* Aligned to a cache line, so the lines laid out in stage.h are. */
    struct seda_stage_s *st = NULL;
    void *mem = seda__calloc(1, sizeof *st + 63);
    if (!mem)
        goto oom;
    st = (void *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    st->mem = mem;
    st->bus = bus;
    seda__mutex_init(&st->mu);
    uint64_t slots = seda__stage_slots(st, o->capacity, o->concurrency);
    if (seda__inbox_init(&st->in, o->capacity, (uint32_t)slots,
                         seda__secs_to_ns(o->starve_after), &st->mu) != 0)
        goto oom;
    if (o->dead_letter && !(st->dead_letter = seda__strdup(o->dead_letter)))
        goto oom_in;
    seda__route_retry_set(&st->rt, o);
    if (seda__stage_admission_init(&st->adm, o) != 0)
        goto oom_in;
    if (seda__pull_init(&st->pl, seda__secs_to_ns(o->ack_timeout),
                        &st->mu) != 0) {
        seda__stage_admission_free(&st->adm);
        goto oom_in;
    }
    snprintf(st->name, sizeof st->name, "%s", nm);
    st->delivery = o->delivery;
    st->max_attempts = o->max_attempts;
    st->publish_timeout = o->publish_timeout;
    st->handler_timeout = o->handler_timeout;
    st->pull = o->pull;
    st->durable = o->durable;
    st->dedup_window = o->dedup_window;
    seda__consumers_init(&st->cons);
    seda__drain_init(&st->dr);
    atomic_init(&st->userdata, NULL);
    seda__taps_init(&st->taps);
    atomic_init(&st->check, NULL);
    atomic_init(&st->check_ud, NULL);
    st->hold_warn_ns = bus->hold_warn_ns;
    atomic_init(&st->long_holds, 0);
    atomic_init(&st->hold_warned, 0);
    seda__shed_init(&st->shed, seda__secs_to_ns(o->shed_target),
                    seda__secs_to_ns(o->shed_interval), &bus->shedding);
    seda__shed_fwd_init(&st->fwd);
    if (seda__stats_init(&st->stats, bus->stats_window_ns,
                         bus->dead_letter_keep) != 0) {
        seda__pull_free(&st->pl);
        seda__stage_admission_free(&st->adm);
        goto oom_in;
    }
    *out = st;
    return 0;
oom_in:
    seda__inbox_free(&st->in);
oom:
    if (st) {
        seda__free(st->dead_letter);
        seda__mutex_destroy(&st->mu);
        seda__free(st->mem);
    }
    if (err && errlen)
        snprintf(err, errlen, "stage '%s': out of memory", nm);
    return SEDA_ENOMEM;
}

void seda__stage_free(struct seda_stage_s *st)
{
    if (!st)
        return;
    seda__inbox_free(&st->in);
    seda__stage_admission_free(&st->adm);
    seda__pull_free(&st->pl);
    seda__stats_free(&st->stats, st->name);
    seda__taps_free(&st->taps);
    seda__mutex_destroy(&st->mu);
    seda__free(st->dead_letter);
    seda__free(st->mem);
}

/* ---- settings ---- */

const char *seda_stage_name(const seda_stage_t *st) { return st->name; }

/* The tap part (tap.c) sees only its own struct. */
int seda_tap_open(seda_stage_t *st, int capacity, seda_tap_t **out)
{
    return seda__taps_open(&st->taps, capacity, out);
}

int seda_stage_durability(const seda_stage_t *st)
{
    return seda__stage_durability(st);
}

double seda_stage_handler_timeout(const seda_stage_t *st)
{
    return st->handler_timeout;
}

void seda_stage_set_userdata(seda_stage_t *st, void *ud)
{
    /* Release: pairs with the acquire in seda_stage_userdata. */
    atomic_store_explicit(&st->userdata, ud, memory_order_release);
}

void *seda_stage_userdata(const seda_stage_t *st)
{
    return atomic_load_explicit(&((seda_stage_t *)st)->userdata,
                                memory_order_acquire);
}

/* ---- the parts' public readers ----
 *
 * Each part's file sees only its part (stats.c its struct seda_stats);
 * the stage's readers pass it, and seda_stage_stats_get reads every part
 * into one snapshot.
 */

int seda_stage_errors(seda_stage_t *st, seda_error **out)
{
    return seda__stats_errors(&st->stats, out);
}

int seda_stage_dead_letters(seda_stage_t *st, seda_dead_letter **out)
{
    return seda__stats_dead_letters(&st->stats, out);
}

int seda_stage_histogram(seda_stage_t *st, int which, const double *le,
                         int n, uint64_t *cum, uint64_t *count, double *sum)
{
    return seda__stats_histogram(&st->stats, which, le, n, cum, count, sum);
}

void seda_stage_report(seda_stage_t *st, const char *msg)
{
    seda__stats_report(&st->stats, st->name, &st->mu, msg);
}

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
                              : seda__drain_in_flight(&st->dr);
    out->suspended = seda__drain_suspended(&st->dr);
    if (!st->pull) {
        /* Drain tasks hold the permits suspended calls do not. */
        int run = atomic_load_explicit(&st->dr.running,
                                       memory_order_relaxed) -
                  seda__drain_suspended(&st->dr);
        if (out->in_flight > run)
            out->in_flight = run;
        out->in_flight += seda__drain_suspended(&st->dr);
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
