/* SPDX-License-Identifier: MIT */
/*
 * test_stage.c -- stage admission through the public C API.
 *
 * C1 back-pressure for each policy, on a stage whose only consumer is held
 * on a gate so the queue provably fills (batch 1, concurrency 1: exactly
 * one envelope sits in the handler, `capacity` more fill the queue).
 * C5 configuration validation at seda_stage_add.  (C7 and the inbox:
 * test_stage_concurrency.c.)
 */
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
 * C1: back-pressure
 * ==================================================================== */

#define C1_LOG_MAX 256

typedef struct c1 {
    seda_bus_t *bus;
    seda_stage_t *st;
    int capacity;
    tu_gate gate;              /* holds the consumer */
    tu_counter calls;          /* consumer calls */
    tu_idset delivered;        /* payload values the consumer saw */
    pthread_mutex_t log_mu;
    uint64_t log[C1_LOG_MAX];  /* delivery order; guarded by log_mu */
    int nlog;                  /* guarded by log_mu */
    tu_counter done_completed;
    tu_counter done_dropped;
    tu_counter done_other;
    tu_idset dropped_ids;      /* payloads whose done said SEDA_DROPPED */
    atomic_int gate_timeouts;  /* consumer gave up waiting on the gate */
    /* block-policy producer thread */
    pthread_t producer;
    bool producer_started;
    tu_latch producer_done;
    tu_counter produced;       /* publishes that returned */
    int prc[16];               /* their results; written before produced++ */
    int nprod;
    double prod_timeout;
} c1_t;

static bool c1_consumer(seda_env_t *env, void *ud)
{
    c1_t *c = ud;
    uint64_t v = tu_env_u64(env);
    tu_idset_add(&c->delivered, v);
    pthread_mutex_lock(&c->log_mu);
    if (c->nlog < C1_LOG_MAX)
        c->log[c->nlog++] = v;
    pthread_mutex_unlock(&c->log_mu);
    tu_counter_add(&c->calls, 1);
    if (!tu_gate_wait(&c->gate, TU_DEADLINE))
        atomic_fetch_add_explicit(&c->gate_timeouts, 1,
                                  memory_order_relaxed); /* counter only */
    return true;
}

static void c1_done(seda_env_t *env, int outcome, void *ud)
{
    c1_t *c = ud;
    if (outcome == SEDA_COMPLETED) {
        tu_counter_add(&c->done_completed, 1);
    } else if (outcome == SEDA_DROPPED) {
        tu_idset_add(&c->dropped_ids, tu_env_u64(env));
        tu_counter_add(&c->done_dropped, 1);
    } else {
        tu_counter_add(&c->done_other, 1);
    }
}

static int c1_setup(void **state)
{
    c1_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    tu_gate_init(&c->gate);
    tu_counter_init(&c->calls);
    tu_idset_init(&c->delivered);
    pthread_mutex_init(&c->log_mu, NULL);
    tu_counter_init(&c->done_completed);
    tu_counter_init(&c->done_dropped);
    tu_counter_init(&c->done_other);
    tu_idset_init(&c->dropped_ids);
    tu_latch_init(&c->producer_done, 1);
    tu_counter_init(&c->produced);
    atomic_init(&c->gate_timeouts, 0);
    *state = c;
    return 0;
}

static int c1_teardown(void **state)
{
    c1_t *c = *state;
    tu_gate_open(&c->gate);
    if (c->bus != NULL)
        seda_bus_shutdown(c->bus, TU_DEADLINE);
    if (c->producer_started)
        pthread_join(c->producer, NULL);
    seda_bus_free(c->bus);
    tu_counter_destroy(&c->produced);
    tu_counter_destroy(&c->producer_done);
    tu_idset_destroy(&c->dropped_ids);
    tu_counter_destroy(&c->done_other);
    tu_counter_destroy(&c->done_dropped);
    tu_counter_destroy(&c->done_completed);
    pthread_mutex_destroy(&c->log_mu);
    tu_idset_destroy(&c->delivered);
    tu_counter_destroy(&c->calls);
    tu_gate_destroy(&c->gate);
    free(c);
    return 0;
}

static void c1_popts(c1_t *c, seda_publish_opts *o)
{
    seda_publish_opts_init(o);
    o->done = c1_done;
    o->done_ud = c;
}

/* Build a bus (batch 1) and one gated stage, put envelope 0 in the handler
 * and envelopes 1..capacity in the queue. */
static void c1_start(c1_t *c, int policy, int capacity, double pub_timeout)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.batch = 1;
    assert_int_equal(seda_bus_new(&bo, &c->bus), 0);

    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "bp";
    so.capacity = capacity;
    so.concurrency = 1;
    so.policy = policy;
    so.publish_timeout = pub_timeout;
    char err[256] = "";
    int rc = seda_stage_add(c->bus, &so, &c->st, err, sizeof err);
    if (rc != 0)
        fail_msg("seda_stage_add: %d (%s)", rc, err);
    assert_true(seda_stage_consume(c->st, c1_consumer, c) >= 0);
    c->capacity = capacity;

    seda_publish_opts po;
    c1_popts(c, &po);
    assert_int_equal(tu_publish_u64(c->bus, "bp", 0, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&c->calls, 1, TU_DEADLINE),
            "envelope 0 to reach the gated consumer");
    TU_WAIT(tu_stage_wait(c->st, tu_pred_in_flight_eq, 1, TU_DEADLINE),
            "stage in_flight == 1");
    TU_WAIT(tu_stage_wait(c->st, tu_pred_depth_eq, 0, TU_DEADLINE),
            "stage depth == 0 with envelope 0 in the handler");
    for (int i = 1; i <= capacity; i++) {
        rc = tu_publish_u64(c->bus, "bp", (uint64_t)i, &po);
        if (rc != 0)
            fail_msg("filling: publish %d of %d returned %d (%s)", i,
                     capacity, rc, seda_strerror(rc));
    }
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.depth, capacity);
    assert_int_equal(s.in_flight, 1);
    assert_int_equal(s.capacity, capacity);
    assert_int_equal(s.dropped, 0);
}

/* Open the gate and wait until every accepted envelope has ended. */
static void c1_finish(c1_t *c)
{
    tu_gate_open(&c->gate);
    int rc = seda_bus_wait_idle(c->bus, TU_DEADLINE);
    if (rc != 0)
        fail_msg("seda_bus_wait_idle: %d (%s)", rc, seda_strerror(rc));
    assert_int_equal(atomic_load_explicit(&c->gate_timeouts,
                                          memory_order_relaxed), 0);
}

static void check_balance(seda_bus_t *bus)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    if (b.accepted != b.completed + b.dead_lettered + b.dropped +
                          b.in_system)
        fail_msg("accepted %llu != completed %llu + dead %llu + dropped "
                 "%llu + in_system %llu",
                 (unsigned long long)b.accepted,
                 (unsigned long long)b.completed,
                 (unsigned long long)b.dead_lettered,
                 (unsigned long long)b.dropped,
                 (unsigned long long)b.in_system);
}

/* reject: past capacity publish fails at once with SEDA_EFULL and the
 * stage's dropped rises by exactly the refusals. */
static void test_stage_c1_reject_counts_refusals(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_REJECT, 2, 30);
    seda_publish_opts po;
    c1_popts(c, &po);
    for (int k = 0; k < 5; k++) {
        int rc = tu_publish_u64(c->bus, "bp", 100 + (uint64_t)k, &po);
        assert_int_equal(rc, SEDA_EFULL);
        seda_stage_stats s;
        seda_stage_stats_get(c->st, &s);
        assert_int_equal(s.dropped, (uint64_t)k + 1);
        assert_int_equal(s.depth, 2);
    }
    assert_string_equal(seda_strerror(SEDA_EFULL), "full");
    seda_bus_stats b;
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.accepted, 3);
    assert_int_equal(b.dropped, 0); /* refusals were never accepted */

    c1_finish(c);
    for (uint64_t v = 0; v <= 2; v++)
        assert_int_equal(tu_idset_count(&c->delivered, v), 1);
    for (uint64_t v = 100; v < 105; v++)
        assert_int_equal(tu_idset_count(&c->delivered, v), 0);
    assert_int_equal(tu_counter_get(&c->done_completed), 3);
    assert_int_equal(tu_counter_get(&c->done_dropped), 0);
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.enqueued, 3);
    assert_int_equal(s.delivered, 3);
    assert_int_equal(s.completed, 3);
    assert_int_equal(s.dropped, 5);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.completed, 3);
    assert_int_equal(b.in_system, 0);
    check_balance(c->bus);
}

/* Capacity 1 is a real bound: one in the handler, one queued, then full. */
static void test_stage_c1_reject_capacity_one(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_REJECT, 1, 30);
    seda_publish_opts po;
    c1_popts(c, &po);
    assert_int_equal(tu_publish_u64(c->bus, "bp", 100, &po), SEDA_EFULL);
    /* seda_stage_publish follows the same admission path. */
    uint64_t v = 101;
    assert_int_equal(seda_stage_publish(c->st, &v, sizeof v, &po),
                     SEDA_EFULL);
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.dropped, 2);
    assert_int_equal(s.depth, 1);
    c1_finish(c);
    assert_int_equal(tu_idset_size(&c->delivered), 2);
    assert_int_equal(tu_idset_count(&c->delivered, 100), 0);
    assert_int_equal(tu_idset_count(&c->delivered, 101), 0);
    assert_int_equal(tu_counter_get(&c->done_completed), 2);
    check_balance(c->bus);
}

/* drop_newest: the caller sees a refusal (SEDA_EDROPPED), the offered
 * envelope is never delivered, done is not called for it. */
static void test_stage_c1_drop_newest_discards_offer(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_DROP_NEWEST, 3, 30);
    seda_publish_opts po;
    c1_popts(c, &po);
    for (int k = 0; k < 4; k++) {
        int rc = tu_publish_u64(c->bus, "bp", 100 + (uint64_t)k, &po);
        assert_int_equal(rc, SEDA_EDROPPED);
    }
    assert_string_equal(seda_strerror(SEDA_EDROPPED), "dropped");
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.dropped, 4);
    assert_int_equal(s.depth, 3);
    seda_bus_stats b;
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.accepted, 4);
    assert_int_equal(b.dropped, 0);

    c1_finish(c);
    for (uint64_t v = 0; v <= 3; v++)
        assert_int_equal(tu_idset_count(&c->delivered, v), 1);
    for (uint64_t v = 100; v < 104; v++)
        if (tu_idset_count(&c->delivered, v) != 0)
            fail_msg("drop_newest: refused envelope %llu was delivered",
                     (unsigned long long)v);
    assert_int_equal(tu_counter_get(&c->done_completed), 4);
    assert_int_equal(tu_counter_get(&c->done_dropped), 0);
    assert_int_equal(tu_counter_get(&c->done_other), 0);
    check_balance(c->bus);
}

/* drop_oldest: every publish succeeds, depth never exceeds capacity, the
 * evicted heads are never delivered and their done fires SEDA_DROPPED. */
static void test_stage_c1_drop_oldest_evicts_head(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_DROP_OLDEST, 3, 30);
    seda_publish_opts po;
    c1_popts(c, &po);
    /* queue [1,2,3]; 100..104 evict 1,2,3,100,101 -> [102,103,104] */
    for (int k = 0; k < 5; k++) {
        int rc = tu_publish_u64(c->bus, "bp", 100 + (uint64_t)k, &po);
        assert_int_equal(rc, 0);
        seda_stage_stats s;
        seda_stage_stats_get(c->st, &s);
        if (s.depth > 3)
            fail_msg("drop_oldest: depth %d exceeds capacity 3", s.depth);
        assert_int_equal(s.dropped, (uint64_t)k + 1);
    }
    TU_WAIT(tu_counter_wait_ge(&c->done_dropped, 5, TU_DEADLINE),
            "5 done callbacks with SEDA_DROPPED");
    const uint64_t evicted[] = {1, 2, 3, 100, 101};
    for (size_t i = 0; i < sizeof evicted / sizeof evicted[0]; i++)
        if (tu_idset_count(&c->dropped_ids, evicted[i]) != 1)
            fail_msg("drop_oldest: expected envelope %llu evicted once",
                     (unsigned long long)evicted[i]);
    seda_bus_stats b;
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.accepted, 9);
    assert_int_equal(b.dropped, 5);

    c1_finish(c);
    const uint64_t kept[] = {0, 102, 103, 104};
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(tu_idset_count(&c->delivered, kept[i]), 1);
    for (size_t i = 0; i < 5; i++)
        if (tu_idset_count(&c->delivered, evicted[i]) != 0)
            fail_msg("drop_oldest: evicted envelope %llu was delivered",
                     (unsigned long long)evicted[i]);
    assert_int_equal(tu_idset_size(&c->delivered), 4);
    assert_int_equal(tu_counter_get(&c->done_completed), 4);
    assert_int_equal(tu_counter_get(&c->done_dropped), 5);
    assert_int_equal(tu_counter_get(&c->done_other), 0);
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.dropped, 5);
    assert_int_equal(s.delivered, 4);
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.completed, 4);
    assert_int_equal(b.dropped, 5);
    assert_int_equal(b.in_system, 0);
    check_balance(c->bus);
}

static void *c1_block_producer(void *arg)
{
    c1_t *c = arg;
    seda_publish_opts po;
    c1_popts(c, &po);
    po.timeout = c->prod_timeout;
    for (int i = 0; i < c->nprod; i++) {
        c->prc[i] = tu_publish_u64(c->bus, "bp", 100 + (uint64_t)i, &po);
        tu_counter_add(&c->produced, 1); /* publishes prc[i] (mutex) */
    }
    tu_latch_count_down(&c->producer_done);
    return NULL;
}

/* block: publishing past capacity waits instead of refusing; once the
 * gate opens every publish returns 0 and everything arrives in order. */
static void test_stage_c1_block_waits_for_room(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_BLOCK, 2, 30);
    c->nprod = 5;
    c->prod_timeout = 60;
    assert_int_equal(pthread_create(&c->producer, NULL, c1_block_producer,
                                    c), 0);
    c->producer_started = true;

    /* While the gate is closed the queue stays full: the producer's first
     * publish cannot have returned and depth never exceeds capacity. */
    double end = seda_now() + 0.05;
    while (seda_now() < end) {
        seda_stage_stats s;
        seda_stage_stats_get(c->st, &s);
        if (s.depth > 2)
            fail_msg("block: depth %d exceeds capacity 2", s.depth);
        if (tu_counter_get(&c->produced) != 0)
            fail_msg("block: publish on a full stage returned %d (%s) "
                     "instead of waiting", c->prc[0],
                     seda_strerror(c->prc[0]));
    }

    tu_gate_open(&c->gate);
    TU_WAIT(tu_latch_wait(&c->producer_done, TU_DEADLINE),
            "the blocked producer to finish after the gate opened");
    pthread_join(c->producer, NULL);
    c->producer_started = false;
    for (int i = 0; i < c->nprod; i++)
        if (c->prc[i] != 0)
            fail_msg("block: publish %d returned %d (%s)", i, c->prc[i],
                     seda_strerror(c->prc[i]));
    c1_finish(c);

    const uint64_t order[] = {0, 1, 2, 100, 101, 102, 103, 104};
    pthread_mutex_lock(&c->log_mu);
    int n = c->nlog;
    uint64_t log[C1_LOG_MAX];
    memcpy(log, c->log, sizeof log);
    pthread_mutex_unlock(&c->log_mu);
    assert_int_equal(n, 8);
    for (int i = 0; i < 8; i++)
        if (log[i] != order[i])
            fail_msg("block: FIFO broken at %d: got %llu, want %llu", i,
                     (unsigned long long)log[i],
                     (unsigned long long)order[i]);
    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.dropped, 0);
    assert_int_equal(s.enqueued, 8);
    assert_int_equal(tu_counter_get(&c->done_completed), 8);
    check_balance(c->bus);
}

/* block with a timeout: the publish-option timeout, else the stage's
 * publish_timeout; SEDA_ETIMEDOUT after at least that long, counted in
 * dropped, never delivered. */
static void test_stage_c1_block_timeout_returns_etimedout(void **state)
{
    c1_t *c = *state;
    c1_start(c, SEDA_POLICY_BLOCK, 1, 0.05);
    seda_publish_opts po;
    c1_popts(c, &po);
    po.timeout = 0.05;
    double t0 = seda_now();
    int rc = tu_publish_u64(c->bus, "bp", 100, &po);
    double dt = seda_now() - t0;
    assert_int_equal(rc, SEDA_ETIMEDOUT);
    if (dt < 0.045)
        fail_msg("block timeout 0.05 s returned after only %.4f s", dt);

    /* No per-publish timeout: the stage's publish_timeout (0.05 s). */
    t0 = seda_now();
    rc = tu_publish_u64(c->bus, "bp", 101, NULL);
    dt = seda_now() - t0;
    assert_int_equal(rc, SEDA_ETIMEDOUT);
    if (dt < 0.045)
        fail_msg("stage publish_timeout 0.05 s returned after %.4f s", dt);
    assert_string_equal(seda_strerror(SEDA_ETIMEDOUT), "timeout");

    seda_stage_stats s;
    seda_stage_stats_get(c->st, &s);
    assert_int_equal(s.dropped, 2);
    assert_int_equal(s.depth, 1);
    c1_finish(c);
    assert_int_equal(tu_idset_count(&c->delivered, 100), 0);
    assert_int_equal(tu_idset_count(&c->delivered, 101), 0);
    assert_int_equal(tu_idset_size(&c->delivered), 2);
    check_balance(c->bus);
}

/* ====================================================================
 * C5: configuration validation
 * ==================================================================== */

typedef struct c5 {
    seda_bus_t *bus;
} c5_t;

static int c5_setup(void **state)
{
    c5_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    assert_int_equal(seda_bus_new(&bo, &c->bus), 0);
    *state = c;
    return 0;
}

static int c5_teardown(void **state)
{
    c5_t *c = *state;
    seda_bus_free(c->bus);
    free(c);
    return 0;
}

/* Add a stage expected to be refused with want; the error must name the
 * stage (when it has one) and the field, and nothing may be added. */
static void expect_refused(seda_bus_t *bus, const seda_stage_opts *so,
                           int want, const char *field)
{
    int before = seda_bus_stage_count(bus);
    char err[256];
    memset(err, 0, sizeof err);
    seda_stage_t *st = NULL;
    int rc = seda_stage_add(bus, so, &st, err, sizeof err);
    const char *nm = so->name != NULL ? so->name : "(null)";
    if (rc != want)
        fail_msg("stage '%s' (%s): seda_stage_add returned %d (%s), want "
                 "%d (%s); err=\"%s\"", nm, field, rc, seda_strerror(rc),
                 want, seda_strerror(want), err);
    if (err[0] == '\0')
        fail_msg("stage '%s' (%s): refused without an error message", nm,
                 field);
    if (field != NULL && strstr(err, field) == NULL)
        fail_msg("stage '%s': error \"%s\" does not name field '%s'", nm,
                 err, field);
    bool printable = so->name != NULL && so->name[0] != '\0' &&
                     strlen(so->name) <= SEDA_NAME_MAX;
    for (const char *p = so->name; printable && *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            printable = false;
    if (printable && strstr(err, so->name) == NULL)
        fail_msg("stage '%s': error \"%s\" does not name the stage", nm,
                 err);
    if (seda_bus_stage_count(bus) != before)
        fail_msg("stage '%s' (%s): refused but stage count went %d -> %d",
                 nm, field, before, seda_bus_stage_count(bus));
    /* a refused new name must not be findable */
    if (want != SEDA_EEXIST && so->name != NULL && so->name[0] != '\0' &&
        seda_bus_stage(bus, so->name) != NULL)
        fail_msg("stage '%s': refused but findable by name", nm);
}

static void c5_opts(seda_stage_opts *so, const char *name)
{
    seda_stage_opts_init(so);
    so->name = name;
}

static void test_stage_c5_defaults_are_valid(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    assert_null(so.name);
    assert_true(so.capacity > 0);
    assert_int_equal(so.concurrency, 1);
    assert_int_equal(so.max_attempts, 1);
    assert_int_equal(so.policy, SEDA_POLICY_BLOCK);
    assert_int_equal(so.delivery, SEDA_DELIVERY_P2P);
    so.name = "ok";
    seda_stage_t *st = NULL;
    char err[128] = "";
    assert_int_equal(seda_stage_add(c->bus, &so, &st, err, sizeof err), 0);
    assert_non_null(st);
    assert_ptr_equal(seda_bus_stage(c->bus, "ok"), st);
    assert_string_equal(seda_stage_name(st), "ok");
    assert_int_equal(seda_bus_stage_count(c->bus), 1);
    assert_ptr_equal(seda_bus_stage_at(c->bus, 0), st);
    assert_null(seda_bus_stage_at(c->bus, 1));
    assert_null(seda_bus_stage_at(c->bus, -1));
    assert_null(seda_bus_stage(c->bus, "missing"));
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_string_equal(s.name, "ok");
    assert_int_equal(s.capacity, so.capacity);
    assert_int_equal(s.concurrency, 1);
    assert_int_equal(s.max_attempts, 1);
    assert_int_equal(s.consumers, 0);
}

static void test_stage_c5_capacity_must_be_positive(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "cap0");
    so.capacity = 0;
    expect_refused(c->bus, &so, SEDA_EINVAL, "capacity");
    c5_opts(&so, "capneg");
    so.capacity = -5;
    expect_refused(c->bus, &so, SEDA_EINVAL, "capacity");
}

static void test_stage_c5_concurrency_must_be_positive(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "conc0");
    so.concurrency = 0;
    expect_refused(c->bus, &so, SEDA_EINVAL, "concurrency");
    c5_opts(&so, "concneg");
    so.concurrency = -1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "concurrency");
}

static void test_stage_c5_max_attempts_must_be_positive(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "att0");
    so.max_attempts = 0;
    expect_refused(c->bus, &so, SEDA_EINVAL, "max_attempts");
    c5_opts(&so, "attneg");
    so.max_attempts = -3;
    expect_refused(c->bus, &so, SEDA_EINVAL, "max_attempts");
}

static void test_stage_c5_policy_out_of_range(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "pol");
    so.policy = -1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "policy");
    so.policy = SEDA_POLICY_DROP_OLDEST + 1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "policy");
    /* the name helpers agree with the enum */
    assert_int_equal(seda_policy_parse("block"), SEDA_POLICY_BLOCK);
    assert_int_equal(seda_policy_parse("reject"), SEDA_POLICY_REJECT);
    assert_int_equal(seda_policy_parse("drop_newest"),
                     SEDA_POLICY_DROP_NEWEST);
    assert_int_equal(seda_policy_parse("drop_oldest"),
                     SEDA_POLICY_DROP_OLDEST);
    assert_int_equal(seda_policy_parse("nope"), -1);
    assert_string_equal(seda_policy_name(SEDA_POLICY_DROP_OLDEST),
                        "drop_oldest");
    assert_null(seda_policy_name(42));
    assert_null(seda_policy_name(-1));
}

static void test_stage_c5_delivery_out_of_range(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "del");
    so.delivery = -1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "delivery");
    so.delivery = SEDA_DELIVERY_PUBSUB + 1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "delivery");
    assert_int_equal(seda_delivery_parse("p2p"), SEDA_DELIVERY_P2P);
    assert_int_equal(seda_delivery_parse("pubsub"), SEDA_DELIVERY_PUBSUB);
    assert_int_equal(seda_delivery_parse("broadcast"), -1);
    assert_string_equal(seda_delivery_name(SEDA_DELIVERY_PUBSUB), "pubsub");
    assert_null(seda_delivery_name(7));
}

static void test_stage_c5_timeouts_must_not_be_negative(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "pto");
    so.publish_timeout = -1;
    expect_refused(c->bus, &so, SEDA_EINVAL, "publish_timeout");
    c5_opts(&so, "hto");
    so.handler_timeout = -0.5;
    expect_refused(c->bus, &so, SEDA_EINVAL, "handler_timeout");
    /* zero is allowed for both */
    c5_opts(&so, "zero_to");
    so.publish_timeout = 0;
    so.handler_timeout = 0;
    assert_int_equal(seda_stage_add(c->bus, &so, NULL, NULL, 0), 0);
    c5_opts(&so, "hto_set");
    so.handler_timeout = 2.5;
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(c->bus, &so, &st, NULL, 0), 0);
    assert_true(seda_stage_handler_timeout(st) == 2.5);
}

static void test_stage_c5_name_required(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, NULL);
    expect_refused(c->bus, &so, SEDA_EINVAL, "name");
    c5_opts(&so, "");
    expect_refused(c->bus, &so, SEDA_EINVAL, "name");
}

static void test_stage_c5_name_malformed(void **state)
{
    c5_t *c = *state;
    static const char *bad[] = {
        "has space", "a/b", "tab\there", "semi;colon", "quote'", "star*",
        "caf\xc3\xa9", "new\nline",
    };
    seda_stage_opts so;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c5_opts(&so, bad[i]);
        expect_refused(c->bus, &so, SEDA_EINVAL, "name");
    }
    char longname[SEDA_NAME_MAX + 2];
    memset(longname, 'a', SEDA_NAME_MAX + 1);
    longname[SEDA_NAME_MAX + 1] = '\0';
    c5_opts(&so, longname);
    expect_refused(c->bus, &so, SEDA_EINVAL, "name");
}

static void test_stage_c5_name_edges_accepted(void **state)
{
    c5_t *c = *state;
    char maxname[SEDA_NAME_MAX + 1];
    memset(maxname, 'z', SEDA_NAME_MAX);
    maxname[SEDA_NAME_MAX] = '\0';
    static const char *good[] = {
        "a", "A-Z_09.x:y", "ns:stage.v2", "-", "0",
    };
    seda_stage_opts so;
    char err[256];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        c5_opts(&so, good[i]);
        err[0] = '\0';
        int rc = seda_stage_add(c->bus, &so, NULL, err, sizeof err);
        if (rc != 0)
            fail_msg("valid name '%s' refused: %d (%s) %s", good[i], rc,
                     seda_strerror(rc), err);
    }
    c5_opts(&so, maxname);
    seda_stage_t *st = NULL;
    int rc = seda_stage_add(c->bus, &so, &st, err, sizeof err);
    if (rc != 0)
        fail_msg("a %d-char name was refused: %s", SEDA_NAME_MAX, err);
    assert_string_equal(seda_stage_name(st), maxname);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_string_equal(s.name, maxname);
}

static void test_stage_c5_duplicate_name_eexist(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "dup");
    seda_stage_t *first = NULL;
    assert_int_equal(seda_stage_add(c->bus, &so, &first, NULL, 0), 0);
    so.capacity = 7; /* different options, same name */
    expect_refused(c->bus, &so, SEDA_EEXIST, NULL);
    assert_ptr_equal(seda_bus_stage(c->bus, "dup"), first);
    seda_stage_stats s;
    seda_stage_stats_get(first, &s);
    assert_int_equal(s.capacity, 1024);
    assert_string_equal(seda_strerror(SEDA_EEXIST), "exists");
}

/* Error text is truncated to errlen and NUL-terminated; err may be NULL. */
static void test_stage_c5_error_buffer_bounded(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "a_rather_long_stage_name_for_truncation");
    so.capacity = 0;
    char err[12];
    memset(err, 'Z', sizeof err);
    assert_int_equal(seda_stage_add(c->bus, &so, NULL, err, 8), SEDA_EINVAL);
    assert_true(memchr(err, '\0', 8) != NULL);
    assert_int_equal(err[8], 'Z'); /* nothing written past errlen */
    assert_int_equal(seda_stage_add(c->bus, &so, NULL, NULL, 0),
                     SEDA_EINVAL);
    assert_int_equal(seda_bus_stage_count(c->bus), 0);
}

/* Consumers: NULL fn is invalid, at most SEDA_MAX_CONSUMERS per stage. */
static bool c5_noop(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    return true;
}

static void test_stage_c5_consumer_limits(void **state)
{
    c5_t *c = *state;
    seda_stage_opts so;
    c5_opts(&so, "cons");
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(c->bus, &so, &st, NULL, 0), 0);
    assert_int_equal(seda_stage_consume(st, NULL, NULL), SEDA_EINVAL);
    for (int i = 0; i < SEDA_MAX_CONSUMERS; i++)
        assert_int_equal(seda_stage_consume(st, c5_noop, NULL), i);
    assert_int_equal(seda_stage_consume(st, c5_noop, NULL), SEDA_ERANGE);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.consumers, SEDA_MAX_CONSUMERS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stage_c1_reject_counts_refusals,
                                        c1_setup, c1_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c1_reject_capacity_one,
                                        c1_setup, c1_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c1_drop_newest_discards_offer, c1_setup, c1_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c1_drop_oldest_evicts_head,
                                        c1_setup, c1_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c1_block_waits_for_room,
                                        c1_setup, c1_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c1_block_timeout_returns_etimedout, c1_setup,
            c1_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_defaults_are_valid,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c5_capacity_must_be_positive, c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c5_concurrency_must_be_positive, c5_setup,
            c5_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c5_max_attempts_must_be_positive, c5_setup,
            c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_policy_out_of_range,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_delivery_out_of_range,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(
            test_stage_c5_timeouts_must_not_be_negative, c5_setup,
            c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_name_required,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_name_malformed,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_name_edges_accepted,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_duplicate_name_eexist,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_error_buffer_bounded,
                                        c5_setup, c5_teardown),
        cmocka_unit_test_setup_teardown(test_stage_c5_consumer_limits,
                                        c5_setup, c5_teardown),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("stage", tests, NULL, NULL);
}
