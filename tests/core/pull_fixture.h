/* SPDX-License-Identifier: MIT */
/*
 * pull_fixture.h -- the fixture of the pull-model tests (test_pull.c,
 * test_pull_concurrency.c): a bus with a pull stage "p", a push stage
 * "sink" and a dead-letter stage, with recording consumers.
 */
#ifndef SEDA_PULL_FIXTURE_H
#define SEDA_PULL_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seda.h"
#include "testutil.h"

/* ====================================================================
 * fixture: a bus with a pull stage "p", a push stage "sink" and a push
 * dead-letter stage "dlq"; both push stages record what they see.
 * ==================================================================== */

#define PF_LOG_MAX 64

typedef struct pf {
    seda_bus_t *bus;
    seda_stage_t *p;
    seda_stage_t *sink;
    seda_stage_t *dlq;
    tu_counter sink_calls;
    tu_counter dlq_calls;
    tu_idset sink_ids;          /* payload values seen by sink */
    tu_idset dlq_ids;           /* payload values seen by dlq */
    pthread_mutex_t mu;
    char sink_hdr[64];          /* header "x" at the sink; guarded by mu */
    int sink_attempts;          /* guarded by mu */
    int sink_slip;              /* slip count at the sink; guarded by mu */
    char dlq_reason[64];        /* guarded by mu */
    char dlq_from[64];          /* guarded by mu */
    tu_counter done_completed;
    tu_counter done_dead;
    tu_counter done_dropped;
    tu_idset done_ids;          /* payload values whose done fired */
} pf_t;

static inline bool pf_sink(seda_env_t *env, void *ud)
{
    pf_t *f = ud;
    pthread_mutex_lock(&f->mu);
    const char *x = seda_env_header(env, "x");
    snprintf(f->sink_hdr, sizeof f->sink_hdr, "%s", x ? x : "");
    f->sink_attempts = seda_env_attempts(env);
    f->sink_slip = seda_env_slip_count(env);
    pthread_mutex_unlock(&f->mu);
    tu_idset_add(&f->sink_ids, tu_env_u64(env));
    tu_counter_add(&f->sink_calls, 1);
    return true;
}

static inline bool pf_dlq(seda_env_t *env, void *ud)
{
    pf_t *f = ud;
    pthread_mutex_lock(&f->mu);
    const char *r = seda_env_header(env, "x-dead-reason");
    const char *fr = seda_env_header(env, "x-dead-from");
    snprintf(f->dlq_reason, sizeof f->dlq_reason, "%s", r ? r : "");
    snprintf(f->dlq_from, sizeof f->dlq_from, "%s", fr ? fr : "");
    pthread_mutex_unlock(&f->mu);
    tu_idset_add(&f->dlq_ids, tu_env_u64(env));
    tu_counter_add(&f->dlq_calls, 1);
    return true;
}

static inline void pf_done(seda_env_t *env, int outcome, void *ud)
{
    pf_t *f = ud;
    tu_idset_add(&f->done_ids, tu_env_u64(env));
    if (outcome == SEDA_COMPLETED)
        tu_counter_add(&f->done_completed, 1);
    else if (outcome == SEDA_DEAD_LETTERED)
        tu_counter_add(&f->done_dead, 1);
    else
        tu_counter_add(&f->done_dropped, 1);
}

static inline pf_t *pf_new(double ack_timeout, int max_attempts, int capacity,
                    int policy)
{
    pf_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    tu_counter_init(&f->sink_calls);
    tu_counter_init(&f->dlq_calls);
    tu_idset_init(&f->sink_ids);
    tu_idset_init(&f->dlq_ids);
    pthread_mutex_init(&f->mu, NULL);
    tu_counter_init(&f->done_completed);
    tu_counter_init(&f->done_dead);
    tu_counter_init(&f->done_dropped);
    tu_idset_init(&f->done_ids);

    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    assert_int_equal(seda_bus_new(&bo, &f->bus), 0);

    char err[256] = "";
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "sink";
    assert_int_equal(seda_stage_add(f->bus, &so, &f->sink, err, sizeof err),
                     0);
    assert_true(seda_stage_consume(f->sink, pf_sink, f) >= 0);

    seda_stage_opts_init(&so);
    so.name = "dlq";
    assert_int_equal(seda_stage_add(f->bus, &so, &f->dlq, err, sizeof err),
                     0);
    assert_true(seda_stage_consume(f->dlq, pf_dlq, f) >= 0);

    seda_stage_opts_init(&so);
    so.name = "p";
    so.pull = true;
    if (ack_timeout > 0)
        so.ack_timeout = ack_timeout;
    so.max_attempts = max_attempts;
    so.dead_letter = "dlq";
    if (capacity > 0)
        so.capacity = capacity;
    so.policy = policy;
    int rc = seda_stage_add(f->bus, &so, &f->p, err, sizeof err);
    if (rc != 0)
        fail_msg("stage_add p: %d %s", rc, err);
    return f;
}

static inline void pf_free(pf_t *f)
{
    seda_bus_free(f->bus);
    tu_counter_destroy(&f->sink_calls);
    tu_counter_destroy(&f->dlq_calls);
    tu_idset_destroy(&f->sink_ids);
    tu_idset_destroy(&f->dlq_ids);
    pthread_mutex_destroy(&f->mu);
    tu_counter_destroy(&f->done_completed);
    tu_counter_destroy(&f->done_dead);
    tu_counter_destroy(&f->done_dropped);
    tu_idset_destroy(&f->done_ids);
    free(f);
}

/* Publish v to "p" with the done callback, headers and slip given. */
static inline int pf_publish(pf_t *f, uint64_t v, const char *const *slip, int nslip)
{
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = pf_done;
    o.done_ud = f;
    o.slip = slip;
    o.nslip = nslip;
    static const char *const hdr[] = { "x", "orig" };
    o.headers = hdr;
    o.nheaders = 1;
    return tu_publish_u64(f->bus, "p", v, &o);
}

/* Read the payload value and attempts of a lease (false when expired). */
static inline bool lease_read(seda_lease_t *l, uint64_t *v, int *attempts)
{
    seda_env_t *env = seda_lease_env(l);
    if (!env)
        return false;
    if (v)
        *v = tu_env_u64(env);
    if (attempts)
        *attempts = seda_env_attempts(env);
    seda_lease_release_env(l);
    return true;
}

static inline seda_lease_t *recv_ok(seda_stage_t *st)
{
    seda_lease_t *l = NULL;
    int rc = seda_stage_receive(st, TU_DEADLINE, &l);
    if (rc != 0)
        fail_msg("seda_stage_receive: expected 0, got %d (%s)", rc,
                 seda_strerror(rc));
    assert_non_null(l);
    return l;
}

static inline void check_accounting(seda_bus_t *bus, seda_bus_stats *out)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.accepted,
                     b.completed + b.dead_lettered + b.dropped + b.in_system);
    if (out)
        *out = b;
}

#endif
