/* SPDX-License-Identifier: MIT */
/*
 * publish.c -- a new itinerary enters the bus: seda_publish,
 * seda_stage_publish and seda_publish_many.  The checks before anything
 * is made (closed or paused, a custom id, shedding at the door, the
 * stage's payload check and size), then the envelope made and admitted to
 * its first stage (journaled first on a durable stage).  Hops never come
 * here: routing (bus.c) admits them.  No state of its own.
 */
#include <stdio.h>
#include <string.h>

#include "bus.h"

int64_t seda__publish_deadline(struct seda_bus_s *b, double timeout)
{
    int64_t d = seda__deadline(timeout);
    if (seda__pool_current_owner() == b) {
        int64_t cap = seda__now_ns() + b->hop_timeout_ns;
        if (d > cap)
            d = cap;
    }
    return d;
}

static int refuse_early(struct seda_bus_s *b)
{
    if (atomic_load_explicit(&b->closed, memory_order_acquire))
        return SEDA_ECLOSED;
    if (atomic_load_explicit(&b->paused, memory_order_acquire))
        return SEDA_EPAUSED;
    return 0;
}

/* A custom id names a message across restarts, so only a durable stage
 * takes one (exactly_once refuses a repeat; at_least_once may deliver a
 * message twice by design).  On an in-memory stage it could repeat, or
 * equal a generated id, and ids are unique within the process.  A remote
 * stage takes one as its JetStream message id. */
static int check_id(const struct seda_stage_s *st,
                    const seda_publish_opts *opts)
{
    /* A remote stage takes one too: JetStream deduplicates by it. */
    return opts && opts->id && !st->durable && !st->remote_ops
               ? SEDA_EINVAL : 0;
}

/* A check's refusal, to the publisher's buffer if it gave one. */
static void tell_why(const seda_publish_opts *opts, const char *why)
{
    if (opts && opts->why && opts->whylen)
        snprintf(opts->why, opts->whylen, "%s", why);
}

/* Shedding at the door (SPEC.md section 13, amending section 10): a new
 * itinerary is refused with SEDA_ESHED when a stage it may reach is
 * shedding: a stage on its slip, or a stage its first stage or those were
 * seen to forward to (seda__shed_fwd_seen), and so on from there, up to
 * DOOR_REACH stages (its first stage, st, says so itself when it is
 * offered the envelope).  Hops never come here, so work already on its
 * way is never shed.  The refusal is counted at st (shed, dropped) and at
 * the stage that caused it (shed_for), whose name goes to opts->why.
 * Costs one relaxed load while no stage of the bus sheds. */
#define DOOR_REACH 32

static bool door_seen(struct seda_stage_s *const *seen, int n,
                      const struct seda_stage_s *h)
{
    for (int i = 0; i < n; i++)
        if (seen[i] == h)
            return true;
    return false;
}

static int door_shed(struct seda_bus_s *b, struct seda_stage_s *st,
                     const seda_publish_opts *opts)
{
    if (SEDA__LIKELY(!atomic_load_explicit(&b->shedding,
                                           memory_order_relaxed)))
        return 0;
    int prio = opts ? opts->priority : SEDA_PRIO_NORMAL;
    if (prio == SEDA_PRIO_HIGH)
        return 0;
    struct seda_stage_s *seen[DOOR_REACH];
    int n = 0;
    seen[n++] = st;
    int nslip = opts && opts->slip ? opts->nslip : 0;
    for (int i = 0; i < nslip && n < DOOR_REACH; i++) {
        struct seda_stage_s *h = opts->slip[i]
                                     ? seda__bus_lookup(b, opts->slip[i])
                                     : NULL;
        if (h && !door_seen(seen, n, h))
            seen[n++] = h;
    }
    int64_t now = seda__now_ns();
    for (int i = 0; i < n; i++) {
        struct seda_stage_s *h = seen[i];
        if (h != st && seda__stage_shed_door(h, prio)) {
            seda__stage_shed_count(st);
            tell_why(opts, h->name);
            return SEDA_ESHED;
        }
        struct seda_stage_s *to[SEDA__FWD_SEEN];
        int k = seda__shed_fwd_seen(&h->fwd, now, h->bus->stats_window_ns,
                                    to);
        for (int j = 0; j < k && n < DOOR_REACH; j++)
            if (!door_seen(seen, n, to[j]))
                seen[n++] = to[j];
    }
    return 0;
}

/* A publish's size as max_payload counts it: the payload and its
 * headers' names and values. */
static size_t publish_size(size_t len, const seda_publish_opts *opts)
{
    if (!opts || opts->nheaders <= 0 || !opts->headers)
        return len;
    for (int i = 0; i < 2 * opts->nheaders; i++)
        if (opts->headers[i])
            len += strlen(opts->headers[i]);
    return len;
}

int seda_stage_publish(seda_stage_t *st, const void *payload, size_t len,
                       const seda_publish_opts *opts)
{
    struct seda_bus_s *b = st->bus;
    int rc = refuse_early(b);
    if (rc)
        return rc;
    if ((!payload && len) || check_id(st, opts) ||
        (opts && opts->on_durable && !st->durable))
        return SEDA_EINVAL;
    if (len > b->max_payload ||
        (opts && opts->nheaders > 0 &&
         publish_size(len, opts) > b->max_payload))
        return SEDA_ETOOLARGE;
    if ((rc = door_shed(b, st, opts)) != 0)
        return rc;
    if (opts && opts->nslip > 0 && opts->slip)
        seda__ownhops_note(&b->ownhops, opts->slip, opts->nslip);
    seda_env_t *env = seda__env_new(payload, len, opts, &rc);
    if (!env)
        return rc;
    char why[256];
    if ((rc = seda__stage_check(st, env, why, sizeof why)) != 0) {
        tell_why(opts, why);
    } else {
        double t = opts && opts->timeout >= 0 ? opts->timeout
                                              : st->publish_timeout;
        if (st->durable && opts && opts->on_durable)
            return seda__bus_store_ops(b)->publish_async(
                st, env, t, opts->on_durable, opts->on_durable_ud);
        if (st->durable) {
            seda__bus_store_ops(b)->publish(st, &env, 1, t, &rc);
            return rc;
        }
        rc = seda__stage_enter(st, env, t, false);
    }
    if (rc) {                   /* refused, or failed its check: done */
        env->done = NULL;       /* never fires */
        seda__env_free(env);
    }
    return rc;
}

int seda_publish(seda_bus_t *b, const char *to, const void *payload,
                 size_t len, const seda_publish_opts *opts)
{
    if (!to)
        return SEDA_EINVAL;
    int rc = refuse_early(b);
    if (rc)
        return rc;
    struct seda_stage_s *st = seda__bus_lookup(b, to);
    if (!st)
        return SEDA_ENOSTAGE;
    return seda_stage_publish(st, payload, len, opts);
}

int seda_publish_many(seda_bus_t *b, const char *to,
                      const void *const *payloads, const size_t *lens, int n,
                      const seda_publish_opts *opts, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    if (!to || n < 0 || (n > 0 && (!payloads || !lens))) {
        *err = SEDA_EINVAL;
        return 0;
    }
    if ((*err = refuse_early(b)) != 0)
        return 0;
    struct seda_stage_s *st = seda__bus_lookup(b, to);
    if (!st) {
        *err = SEDA_ENOSTAGE;
        return 0;
    }
    if ((*err = check_id(st, opts)) != 0)
        return 0;
    if (opts && opts->on_durable) {
        *err = SEDA_EINVAL;             /* one envelope a call */
        return 0;
    }
    if ((*err = door_shed(b, st, opts)) != 0)
        return 0;
    if (opts && opts->nslip > 0 && opts->slip)
        seda__ownhops_note(&b->ownhops, opts->slip, opts->nslip);
    seda_env_t *small[64];
    seda_env_t **envs = n <= 64 ? small : seda__malloc(sizeof *envs *
                                                       (size_t)n);
    if (!envs) {
        *err = SEDA_ENOMEM;
        return 0;
    }
    int built = 0, rc = 0;
    char why[256];
    for (; built < n; built++) {
        if (lens[built] > b->max_payload ||
            publish_size(lens[built], opts) > b->max_payload) {
            rc = SEDA_ETOOLARGE;
            break;
        }
        envs[built] = seda__env_new(payloads[built], lens[built], opts, &rc);
        if (!envs[built])
            break;
        if ((rc = seda__stage_check(st, envs[built], why, sizeof why))) {
            tell_why(opts, why);
            envs[built]->done = NULL;
            seda__env_free(envs[built]);
            break;
        }
    }
    double t = opts && opts->timeout >= 0 ? opts->timeout
                                          : st->publish_timeout;
    if (st->durable) {
        /* Frees what it refuses. */
        int done = seda__bus_store_ops(b)->publish(st, envs, built, t, err);
        if (done == built && built < n)
            *err = rc;
        if (envs != small)
            seda__free(envs);
        return done;
    }
    int done = 0;
    if (st->remote_ops) {
        /* One at a time: each goes to JetStream (stops at a refusal). */
        while (done < built && !*err &&
               !(*err = seda__stage_enter(st, envs[done], t, false)))
            done++;
    } else {
        done = seda__stage_admit_many(st, envs, built, t, err);
    }
    for (int i = done; i < built; i++) {
        envs[i]->done = NULL;
        seda__env_free(envs[i]);
    }
    if (done == built && built < n)
        *err = rc;
    if (envs != small)
        seda__free(envs);
    return done;
}

/* A handler's new payload is held to the bus's publish limit. */
int seda_env_set_payload_kind(seda_env_t *env, const void *p, size_t len,
                              int kind)
{
    return seda__env_put_payload(env, p, len, kind,
                                 env->at ? env->at->bus->max_payload
                                         : SIZE_MAX);
}

int seda_env_set_payload(seda_env_t *env, const void *p, size_t len)
{
    return seda_env_set_payload_kind(env, p, len, 0);
}
