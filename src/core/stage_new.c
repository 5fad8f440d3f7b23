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
    if (seda__admission_check(o, SEDA_TUNE_SHED | SEDA_TUNE_RETRY |
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
    uint64_t slots = seda__admission_slots(o->capacity, o->concurrency,
                                           bus->batch);
    if (seda__inbox_init(&st->in, o->capacity, (uint32_t)slots,
                         seda__secs_to_ns(o->starve_after), &st->mu) != 0)
        goto oom;
    if (o->dead_letter && !(st->dead_letter = seda__strdup(o->dead_letter)))
        goto oom_in;
    seda__route_retry_set(&st->rt, o);
    if (seda__admission_init(&st->adm, o) != 0)
        goto oom_in;
    if (seda__pull_init(&st->pl, seda__secs_to_ns(o->ack_timeout),
                        &st->mu) != 0) {
        seda__admission_free(&st->adm);
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
    seda__drain_init(&st->task);
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
        seda__admission_free(&st->adm);
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
    seda__admission_free(&st->adm);
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
    return st->durable;
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
