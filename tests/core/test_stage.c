/* SPDX-License-Identifier: MIT */
/*
 * test_stage.c -- stage admission through the public C API.
 *
 * C1 back-pressure for each policy, on a stage whose only consumer is held
 * on a gate so the queue provably fills (batch 1, concurrency 1: exactly
 * one envelope sits in the handler, `capacity` more fill the queue).
 * C5 configuration validation at seda_stage_add.
 * C7 exactly-once delivery with several producers and consumers, repeated
 * (STRESS=1 for many more rounds).
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

/* ====================================================================
 * C7: exactly once under contention
 * ==================================================================== */

#define C7_PRODUCERS 4

typedef struct c7 {
    seda_bus_t *bus;
    int per_producer;
    int nack_every;            /* nack attempt 1 of ids % nack_every == 0 */
    tu_idset acked;            /* payload ids acked */
    tu_idset seqs;             /* envelope seqs acked */
    tu_idset done_ids;         /* payload ids whose done fired */
    tu_idset dropped_ids;      /* ... with SEDA_DROPPED */
    tu_counter done;           /* done callbacks */
    atomic_long calls;         /* consumer calls */
    atomic_int bad;            /* unexpected events seen off-thread */
    atomic_int prod_err;       /* first refusal seen by a producer */
    tu_latch producers_done;
} c7_t;

static bool c7_consumer(seda_env_t *env, void *ud)
{
    c7_t *c = ud;
    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    uint64_t id = tu_env_u64(env);
    if (c->nack_every > 0 && id % (uint64_t)c->nack_every == 0 &&
        seda_env_attempts(env) == 1)
        return false;
    tu_idset_add(&c->acked, id);
    tu_idset_add(&c->seqs, seda_env_seq(env));
    return true;
}

static void c7_done(seda_env_t *env, int outcome, void *ud)
{
    c7_t *c = ud;
    uint64_t id = tu_env_u64(env);
    tu_idset_add(&c->done_ids, id);
    if (outcome == SEDA_DROPPED)
        tu_idset_add(&c->dropped_ids, id);
    else if (outcome != SEDA_COMPLETED)
        atomic_fetch_add_explicit(&c->bad, 1, memory_order_relaxed);
    tu_counter_add(&c->done, 1);
}

typedef struct c7_prod {
    c7_t *c;
    int index;
} c7_prod;

static void *c7_producer(void *arg)
{
    c7_prod *p = arg;
    c7_t *c = p->c;
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.done = c7_done;
    po.done_ud = c;
    po.timeout = 30;
    for (int i = 0; i < c->per_producer; i++) {
        uint64_t id = ((uint64_t)(p->index + 1) << 32) | (uint64_t)i;
        int rc = tu_publish_u64(c->bus, "work", id, &po);
        if (rc != 0) {
            int zero = 0;
            atomic_compare_exchange_strong_explicit(
                &c->prod_err, &zero, rc, memory_order_relaxed,
                memory_order_relaxed); /* first error only */
            break;
        }
    }
    tu_latch_count_down(&c->producers_done);
    return NULL;
}

/* One round: C7_PRODUCERS threads publish into one stage with three p2p
 * consumers and concurrency 3; every id must be acked exactly once. */
static void c7_round(int policy, int capacity, int per_producer,
                     int nack_every)
{
    c7_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->per_producer = per_producer;
    c->nack_every = nack_every;
    tu_idset_init(&c->acked);
    tu_idset_init(&c->seqs);
    tu_idset_init(&c->done_ids);
    tu_idset_init(&c->dropped_ids);
    tu_counter_init(&c->done);
    atomic_init(&c->calls, 0);
    atomic_init(&c->bad, 0);
    atomic_init(&c->prod_err, 0);
    tu_latch_init(&c->producers_done, C7_PRODUCERS);

    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 4;
    bo.batch = 8;
    assert_int_equal(seda_bus_new(&bo, &c->bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "work";
    so.capacity = capacity;
    so.concurrency = 3;
    so.policy = policy;
    so.max_attempts = nack_every > 0 ? 2 : 1;
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(c->bus, &so, &st, NULL, 0), 0);
    for (int i = 0; i < 3; i++)
        assert_true(seda_stage_consume(st, c7_consumer, c) >= 0);

    pthread_t th[C7_PRODUCERS];
    c7_prod args[C7_PRODUCERS];
    for (int i = 0; i < C7_PRODUCERS; i++) {
        args[i].c = c;
        args[i].index = i;
        assert_int_equal(pthread_create(&th[i], NULL, c7_producer,
                                        &args[i]), 0);
    }
    long total = (long)C7_PRODUCERS * per_producer;
    bool ok = tu_latch_wait(&c->producers_done, 60);
    if (!ok) {
        seda_bus_shutdown_now(c->bus);
        fail_msg("C7: producers did not finish within 60 s");
    }
    for (int i = 0; i < C7_PRODUCERS; i++)
        pthread_join(th[i], NULL);
    int perr = atomic_load_explicit(&c->prod_err, memory_order_relaxed);
    if (perr != 0)
        fail_msg("C7: a producer was refused: %d (%s)", perr,
                 seda_strerror(perr));
    if (!tu_counter_wait_ge(&c->done, total, 60))
        fail_msg("C7: only %ld of %ld done callbacks within 60 s",
                 tu_counter_get(&c->done), total);
    assert_int_equal(seda_bus_wait_idle(c->bus, TU_DEADLINE), 0);

    size_t ndrop = tu_idset_size(&c->dropped_ids);
    if (tu_idset_dups(&c->acked) != 0)
        fail_msg("C7: %zu duplicate deliveries", tu_idset_dups(&c->acked));
    if (tu_idset_dups(&c->seqs) != 0)
        fail_msg("C7: %zu duplicate envelope seqs", tu_idset_dups(&c->seqs));
    if (tu_idset_dups(&c->done_ids) != 0)
        fail_msg("C7: %zu done callbacks fired twice",
                 tu_idset_dups(&c->done_ids));
    if (tu_idset_size(&c->done_ids) != (size_t)total)
        fail_msg("C7: %zu distinct done callbacks, want %ld",
                 tu_idset_size(&c->done_ids), total);
    if (tu_idset_size(&c->acked) + ndrop != (size_t)total)
        fail_msg("C7: %zu acked + %zu dropped != %ld published",
                 tu_idset_size(&c->acked), ndrop, total);
    assert_int_equal(atomic_load_explicit(&c->bad, memory_order_relaxed), 0);
    /* every id ended exactly one way */
    for (int p = 0; p < C7_PRODUCERS; p++) {
        for (int i = 0; i < per_producer; i++) {
            uint64_t id = ((uint64_t)(p + 1) << 32) | (uint64_t)i;
            uint32_t a = tu_idset_count(&c->acked, id);
            uint32_t d = tu_idset_count(&c->dropped_ids, id);
            if (a + d != 1)
                fail_msg("C7: id %d/%d acked %u times, dropped %u times",
                         p, i, a, d);
        }
    }
    long nretry = 0;
    if (nack_every > 0)
        for (int p = 0; p < C7_PRODUCERS; p++)
            for (int i = 0; i < per_producer; i++) {
                uint64_t id = ((uint64_t)(p + 1) << 32) | (uint64_t)i;
                if (id % (uint64_t)nack_every == 0 &&
                    tu_idset_count(&c->acked, id) == 1)
                    nretry++;
            }
    long calls = atomic_load_explicit(&c->calls, memory_order_relaxed);
    if (calls != (long)tu_idset_size(&c->acked) + nretry)
        fail_msg("C7: %ld consumer calls, want %zu acks + %ld retries",
                 calls, tu_idset_size(&c->acked), nretry);

    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    seda_bus_stats b;
    seda_bus_stats_get(c->bus, &b);
    assert_int_equal(b.accepted, (uint64_t)total);
    assert_int_equal(b.completed, tu_idset_size(&c->acked));
    assert_int_equal(b.dropped, ndrop);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(b.dead_lettered, 0);
    assert_int_equal(s.delivered, tu_idset_size(&c->acked));
    assert_int_equal(s.nacked, (uint64_t)nretry);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);
    if (policy != SEDA_POLICY_DROP_OLDEST)
        assert_int_equal(s.enqueued, (uint64_t)total);

    assert_int_equal(seda_bus_shutdown(c->bus, TU_DEADLINE), 0);
    seda_bus_free(c->bus);
    tu_counter_destroy(&c->producers_done);
    tu_counter_destroy(&c->done);
    tu_idset_destroy(&c->dropped_ids);
    tu_idset_destroy(&c->done_ids);
    tu_idset_destroy(&c->seqs);
    tu_idset_destroy(&c->acked);
    free(c);
}

/* The lock-free publish path vs a drain task giving its permit back (see
 * "HOW IT WORKS" in src/stage.c): publish one envelope at a time after a
 * pause around the drain task's linger time (20 us), so publishes keep
 * landing while the task decides to stop.  A lost hand-off leaves an
 * envelope queued with no task: the wait for its delivery then fails by
 * deadline.  Two publishers race as well in the second half. */
static tu_counter race_seen;

static bool race_consume(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    tu_counter_add(&race_seen, 1);
    return true;
}

struct race_prod {
    seda_stage_t *st;
    int n;
    unsigned seed;
};

static void *race_producer(void *arg)
{
    struct race_prod *p = arg;
    for (int i = 0; i < p->n; i++) {
        p->seed = p->seed * 1103515245u + 12345u;
        tu_spin((double)((p->seed >> 8) % 40) * 1e-6);
        if (seda_stage_publish(p->st, &i, sizeof i, NULL) != 0)
            return NULL;
    }
    return NULL;
}

static void test_stage_inbox_handoff_never_strands(void **state)
{
    (void)state;
    tu_counter_init(&race_seen);
    seda_bus_t *bus;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "race";
    seda_stage_t *st;
    assert_int_equal(seda_stage_add(bus, &so, &st, NULL, 0), 0);
    assert_true(seda_stage_consume(st, race_consume, NULL) >= 0);
    int rounds = getenv("STRESS") ? 20000 : 2000;
    /* One publisher, waiting for each delivery: every envelope must be
     * taken even when it lands as the task stops. */
    unsigned seed = 12345;
    for (int i = 0; i < rounds; i++) {
        seed = seed * 1103515245u + 12345u;
        tu_spin((double)((seed >> 8) % 40) * 1e-6);
        assert_int_equal(seda_stage_publish(st, &i, sizeof i, NULL), 0);
        if (!tu_counter_wait_ge(&race_seen, i + 1, TU_DEADLINE))
            fail_msg("envelope %d stranded: published, never delivered", i);
    }
    /* Two publishers at once. */
    struct race_prod p[2] = { { st, rounds, 1 }, { st, rounds, 2 } };
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&t[k], NULL, race_producer, &p[k]),
                         0);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    if (!tu_counter_wait_ge(&race_seen, 3L * rounds, TU_DEADLINE))
        fail_msg("%ld of %d envelopes delivered",
                 tu_counter_get(&race_seen), 3 * rounds);
    assert_int_equal(seda_bus_shutdown(bus, 10), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.accepted, 3L * rounds);
    assert_int_equal(bs.completed, 3L * rounds);
    seda_bus_free(bus);
    tu_counter_destroy(&race_seen);
}

/* ====================================================================
 * The inbox boundary: a stage's lock-free inbox holds at most 1024
 * envelopes; deeper queues overflow into the head ring in order.  FIFO,
 * eviction and tuning must not notice the boundary.
 * ==================================================================== */

#define OVF_MAX 8192

typedef struct ovf {
    seda_bus_t *bus;
    seda_stage_t *st;
    tu_gate gate;               /* holds the consumer on its first call */
    tu_counter calls;
    pthread_mutex_t mu;
    uint64_t log[OVF_MAX];      /* delivery order; guarded by mu */
    int nlog;                   /* guarded by mu */
} ovf_t;

static bool ovf_consumer(seda_env_t *env, void *ud)
{
    ovf_t *o = ud;
    pthread_mutex_lock(&o->mu);
    if (o->nlog < OVF_MAX)
        o->log[o->nlog++] = tu_env_u64(env);
    pthread_mutex_unlock(&o->mu);
    if (tu_counter_add(&o->calls, 1) == 1)
        tu_gate_wait(&o->gate, TU_DEADLINE);
    return true;
}

/* A stage whose consumer holds envelope 0 until the gate opens. */
static ovf_t *ovf_start(int capacity, int policy)
{
    ovf_t *o = calloc(1, sizeof *o);
    assert_non_null(o);
    tu_gate_init(&o->gate);
    tu_counter_init(&o->calls);
    pthread_mutex_init(&o->mu, NULL);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    assert_int_equal(seda_bus_new(&bo, &o->bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "deep";
    so.capacity = capacity;
    so.policy = policy;
    assert_int_equal(seda_stage_add(o->bus, &so, &o->st, NULL, 0), 0);
    assert_true(seda_stage_consume(o->st, ovf_consumer, o) >= 0);
    assert_int_equal(tu_publish_u64(o->bus, "deep", 0, NULL), 0);
    TU_WAIT(tu_counter_wait_ge(&o->calls, 1, TU_DEADLINE),
            "envelope 0 to reach the gated consumer");
    TU_WAIT(tu_stage_wait(o->st, tu_pred_in_flight_eq, 1, TU_DEADLINE),
            "stage in_flight == 1");
    return o;
}

static void ovf_finish(ovf_t *o)
{
    tu_gate_open(&o->gate);
    assert_int_equal(seda_bus_wait_idle(o->bus, TU_DEADLINE), 0);
    assert_int_equal(seda_bus_shutdown(o->bus, TU_DEADLINE), 0);
    seda_bus_free(o->bus);
    pthread_mutex_destroy(&o->mu);
    tu_counter_destroy(&o->calls);
    tu_gate_destroy(&o->gate);
    free(o);
}

static void ovf_expect_depth(ovf_t *o, int depth)
{
    seda_stage_stats s;
    seda_stage_stats_get(o->st, &s);
    assert_int_equal(s.depth, depth);
}

struct ovf_prod {
    ovf_t *o;
    uint64_t tag;
    int n;
    int err;
};

static void *ovf_producer(void *arg)
{
    struct ovf_prod *p = arg;
    for (int i = 1; i <= p->n && !p->err; i++)
        p->err = tu_publish_u64(p->o->bus, "deep", p->tag << 32 | (uint64_t)i,
                                NULL);
    return NULL;
}

/* Producers 1-3 at once, then producer 4 alone, 5000 envelopes behind a
 * held one: every producer's envelopes arrive complete and in order. */
static void test_stage_inbox_overflow_keeps_fifo(void **state)
{
    (void)state;
    ovf_t *o = ovf_start(5000, SEDA_POLICY_BLOCK);
    struct ovf_prod p[4] = { { o, 1, 1500, 0 }, { o, 2, 1500, 0 },
                             { o, 3, 1500, 0 }, { o, 4, 500, 0 } };
    pthread_t t[3];
    for (int k = 0; k < 3; k++)
        assert_int_equal(pthread_create(&t[k], NULL, ovf_producer, &p[k]), 0);
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    ovf_producer(&p[3]);
    for (int k = 0; k < 4; k++)
        assert_int_equal(p[k].err, 0);
    ovf_expect_depth(o, 5000);
    tu_gate_open(&o->gate);
    assert_int_equal(seda_bus_wait_idle(o->bus, TU_DEADLINE), 0);
    assert_int_equal(o->nlog, 5001);
    uint64_t next[5] = { 1, 1, 1, 1, 1 };
    for (int i = 1; i < o->nlog; i++) {
        uint64_t tag = o->log[i] >> 32, seq = o->log[i] & 0xffffffffu;
        assert_true(tag >= 1 && tag <= 4);
        if (seq != next[tag])
            fail_msg("producer %d: envelope %d arrived where %d was due",
                     (int)tag, (int)seq, (int)next[tag]);
        next[tag]++;
    }
    ovf_finish(o);
}

/* drop_oldest past the inbox: the oldest are evicted, from the head ring
 * first, and what is left arrives in order. */
static void test_stage_inbox_overflow_drop_oldest(void **state)
{
    (void)state;
    ovf_t *o = ovf_start(2000, SEDA_POLICY_DROP_OLDEST);
    for (uint64_t i = 1; i <= 3000; i++)
        assert_int_equal(tu_publish_u64(o->bus, "deep", i, NULL), 0);
    ovf_expect_depth(o, 2000);
    tu_gate_open(&o->gate);
    assert_int_equal(seda_bus_wait_idle(o->bus, TU_DEADLINE), 0);
    assert_int_equal(o->nlog, 2001);
    for (int i = 1; i < o->nlog; i++)
        assert_int_equal(o->log[i], 1000 + (uint64_t)i);
    seda_stage_stats s;
    seda_stage_stats_get(o->st, &s);
    assert_int_equal(s.dropped, 1000);
    ovf_finish(o);
}

/* A stage created small (a 128-slot inbox) and tuned deeper, then back
 * below its depth: nothing is lost or reordered. */
static void test_stage_inbox_tuned_past_its_size(void **state)
{
    (void)state;
    ovf_t *o = ovf_start(100, SEDA_POLICY_REJECT);
    uint64_t v = 1;
    for (; v <= 100; v++)
        assert_int_equal(tu_publish_u64(o->bus, "deep", v, NULL), 0);
    assert_int_equal(tu_publish_u64(o->bus, "deep", v, NULL), SEDA_EFULL);
    char err[128];
    assert_int_equal(seda_stage_tune(o->st, 1000, 0, -1, err, sizeof err), 0);
    for (; v <= 1000; v++)
        assert_int_equal(tu_publish_u64(o->bus, "deep", v, NULL), 0);
    assert_int_equal(tu_publish_u64(o->bus, "deep", v, NULL), SEDA_EFULL);
    ovf_expect_depth(o, 1000);
    assert_int_equal(seda_stage_tune(o->st, 50, 0, -1, err, sizeof err), 0);
    assert_int_equal(tu_publish_u64(o->bus, "deep", v, NULL), SEDA_EFULL);
    ovf_expect_depth(o, 1000);
    tu_gate_open(&o->gate);
    assert_int_equal(seda_bus_wait_idle(o->bus, TU_DEADLINE), 0);
    assert_int_equal(o->nlog, 1001);
    for (int i = 0; i < o->nlog; i++)
        assert_int_equal(o->log[i], (uint64_t)i);
    ovf_finish(o);
}

/* Publishers racing a shutdown: a publish that returned 0 ends exactly
 * once (completed, or dropped by the sweep), a refused one never, and the
 * bus's books balance. */
typedef struct race_close {
    seda_bus_t *bus;
    tu_idset ended;             /* ids whose done fired */
    tu_idset accepted;          /* ids whose publish returned 0 */
    tu_counter delivered;
    atomic_int bad_rc;
} race_close_t;

struct race_close_prod {
    race_close_t *r;
    uint64_t tag;
};

static void race_close_done(seda_env_t *env, int outcome, void *ud)
{
    race_close_t *r = ud;
    if (outcome != SEDA_COMPLETED && outcome != SEDA_DROPPED)
        atomic_fetch_add_explicit(&r->bad_rc, 1, memory_order_relaxed);
    tu_idset_add(&r->ended, tu_env_u64(env));
}

static bool race_close_consume(seda_env_t *env, void *ud)
{
    (void)env;
    tu_counter_add(&((race_close_t *)ud)->delivered, 1);
    return true;
}

static void *race_close_producer(void *arg)
{
    struct race_close_prod *p = arg;
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.done = race_close_done;
    po.done_ud = p->r;
    for (uint64_t i = 0;; i++) {
        uint64_t id = p->tag << 32 | i;
        int rc = tu_publish_u64(p->r->bus, "race", id, &po);
        if (rc == 0) {
            tu_idset_add(&p->r->accepted, id);
        } else {
            if (rc != SEDA_ECLOSED)
                atomic_fetch_add_explicit(&p->r->bad_rc, 1,
                                          memory_order_relaxed);
            return NULL;
        }
    }
}

static void test_stage_publish_racing_shutdown_ends_once(void **state)
{
    (void)state;
    int rounds = tu_iterations(10, 100);
    for (int round = 0; round < rounds; round++) {
        race_close_t r;
        memset(&r, 0, sizeof r);
        tu_idset_init(&r.ended);
        tu_idset_init(&r.accepted);
        tu_counter_init(&r.delivered);
        atomic_init(&r.bad_rc, 0);
        seda_bus_opts bo;
        seda_bus_opts_init(&bo);
        bo.workers = 2;
        assert_int_equal(seda_bus_new(&bo, &r.bus), 0);
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "race";
        so.capacity = 64 + 512 * (round % 3);
        so.concurrency = 2;
        seda_stage_t *st;
        assert_int_equal(seda_stage_add(r.bus, &so, &st, NULL, 0), 0);
        assert_true(seda_stage_consume(st, race_close_consume, &r) >= 0);
        struct race_close_prod p[3];
        pthread_t t[3];
        for (int k = 0; k < 3; k++) {
            p[k] = (struct race_close_prod){ &r, (uint64_t)k + 1 };
            assert_int_equal(pthread_create(&t[k], NULL,
                                            race_close_producer, &p[k]), 0);
        }
        TU_WAIT(tu_counter_wait_ge(&r.delivered, 200 + 100 * round,
                                   TU_DEADLINE),
                "deliveries before the shutdown");
        /* Alternate a drain and an immediate stop. */
        if (round % 2)
            seda_bus_shutdown(r.bus, TU_DEADLINE);
        else
            seda_bus_shutdown_now(r.bus);
        for (int k = 0; k < 3; k++)
            pthread_join(t[k], NULL);
        assert_int_equal(atomic_load(&r.bad_rc), 0);
        assert_int_equal(tu_idset_dups(&r.ended), 0);
        assert_int_equal(tu_idset_dups(&r.accepted), 0);
        if (tu_idset_size(&r.ended) != tu_idset_size(&r.accepted))
            fail_msg("round %d: %zu accepted, %zu ended", round,
                     tu_idset_size(&r.accepted), tu_idset_size(&r.ended));
        seda_bus_stats bs;
        seda_bus_stats_get(r.bus, &bs);
        assert_int_equal(bs.accepted, (uint64_t)tu_idset_size(&r.accepted));
        assert_int_equal(bs.accepted, bs.completed + bs.dropped);
        assert_int_equal(bs.in_system, 0);
        seda_stage_stats ss;
        seda_stage_stats_get(st, &ss);
        assert_int_equal(ss.depth, 0);
        assert_int_equal(ss.enqueued, bs.accepted);
        seda_bus_free(r.bus);
        tu_counter_destroy(&r.delivered);
        tu_idset_destroy(&r.accepted);
        tu_idset_destroy(&r.ended);
    }
}

static void test_stage_c7_exactly_once_under_contention(void **state)
{
    (void)state;
    int rounds = tu_iterations(20, 200);
    for (int r = 0; r < rounds; r++)
        c7_round(SEDA_POLICY_BLOCK, 64, 500, 0);
}

/* Retries under contention: ids that nack their first attempt are still
 * acked exactly once, and the consumer is called exactly once more. */
static void test_stage_c7_exactly_once_with_retries(void **state)
{
    (void)state;
    int rounds = tu_iterations(20, 200);
    for (int r = 0; r < rounds; r++)
        c7_round(SEDA_POLICY_BLOCK, 32, 300, 5);
}

/* drop_oldest under contention: each envelope is either acked once or
 * dropped once (done SEDA_DROPPED), never both, never lost. */
static void test_stage_c7_drop_oldest_each_ends_once(void **state)
{
    (void)state;
    int rounds = tu_iterations(20, 200);
    for (int r = 0; r < rounds; r++)
        c7_round(SEDA_POLICY_DROP_OLDEST, 8, 300, 0);
}

/* ====================================================================
 * concurrency permits: a stage with concurrency 2 on a 2-worker pool runs
 * two envelopes at once (each handler waits for the other at a
 * rendezvous).  Each round first runs one envelope on another stage so a
 * worker has just gone idle when the pair arrives.
 * ==================================================================== */

typedef struct par {
    tu_rendezvous rv;
    atomic_int timeouts;
} par_t;

static bool par_meet(seda_env_t *env, void *ud)
{
    par_t *p = ud;
    (void)env;
    if (!tu_rendezvous_arrive(&p->rv, TU_DEADLINE))
        atomic_fetch_add_explicit(&p->timeouts, 1,
                                  memory_order_relaxed); /* counter */
    return true;
}

static bool par_noop(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    return true;
}

static void test_stage_concurrency_permits_run_in_parallel(void **state)
{
    (void)state;
    int rounds = tu_iterations(200, 2000);
    for (int r = 0; r < rounds; r++) {
        par_t *p = calloc(1, sizeof *p);
        assert_non_null(p);
        tu_rendezvous_init(&p->rv, 2);
        atomic_init(&p->timeouts, 0);
        seda_bus_opts bo;
        seda_bus_opts_init(&bo);
        bo.workers = 2;
        bo.batch = 1;
        seda_bus_t *bus = NULL;
        assert_int_equal(seda_bus_new(&bo, &bus), 0);
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "warm";
        seda_stage_t *warm = NULL, *meet = NULL;
        assert_int_equal(seda_stage_add(bus, &so, &warm, NULL, 0), 0);
        assert_true(seda_stage_consume(warm, par_noop, NULL) >= 0);
        so.name = "meet";
        so.concurrency = 2;
        assert_int_equal(seda_stage_add(bus, &so, &meet, NULL, 0), 0);
        assert_true(seda_stage_consume(meet, par_meet, p) >= 0);
        assert_int_equal(tu_publish_u64(bus, "warm", 0, NULL), 0);
        assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
        assert_int_equal(tu_publish_u64(bus, "meet", 1, NULL), 0);
        assert_int_equal(tu_publish_u64(bus, "meet", 2, NULL), 0);
        int rc = seda_bus_wait_idle(bus, 3 * TU_DEADLINE);
        int t = atomic_load_explicit(&p->timeouts, memory_order_relaxed);
        seda_bus_free(bus);
        tu_rendezvous_destroy(&p->rv);
        free(p);
        assert_int_equal(rc, 0);
        if (t != 0)
            fail_msg("round %d: two envelopes on a concurrency-2 stage with "
                     "2 idle workers did not run at the same time (a "
                     "drain task waited %.0f s for a worker)", r,
                     (double)TU_DEADLINE);
    }
}

/* publish_many into a stage with several permits: one admission step can
 * take more than one permit (one per envelope while the handling time is
 * unknown), and every permit taken must start a drain task.  Counting them
 * as one left a permit held by no task: the stage then waited for a
 * backlog it could never reach and stranded at capacity. */
static void test_stage_publish_many_starts_every_task_it_owes(void **state)
{
    (void)state;
    for (int round = 0; round < 5; round++) {
        seda_bus_opts bo;
        seda_bus_opts_init(&bo);
        bo.workers = 2;
        seda_bus_t *bus = NULL;
        assert_int_equal(seda_bus_new(&bo, &bus), 0);
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "s";
        so.capacity = 4096;
        so.concurrency = 2;
        so.publish_timeout = TU_DEADLINE;
        seda_stage_t *st = NULL;
        assert_int_equal(seda_stage_add(bus, &so, &st, NULL, 0), 0);
        assert_true(seda_stage_consume(st, par_noop, NULL) >= 0);
        static uint64_t vals[2000];
        const void *ps[2000];
        size_t lens[2000];
        for (int i = 0; i < 2000; i++) {
            vals[i] = (uint64_t)i;
            ps[i] = &vals[i];
            lens[i] = sizeof vals[i];
        }
        for (int r = 0; r < 20; r++) {
            int err = 0;
            int n = seda_publish_many(bus, "s", ps, lens, 2000, NULL, &err);
            if (n != 2000)
                fail_msg("round %d.%d: %d of 2000 accepted (%s): the stage "
                         "stranded", round, r, n, seda_strerror(err));
        }
        assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
        seda_stage_stats s;
        seda_stage_stats_get(st, &s);
        assert_int_equal(s.delivered, 40000);
        assert_int_equal(s.depth, 0);
        assert_int_equal(s.in_flight, 0);
        seda_bus_free(bus);
    }
}

/* ==================================================================== */

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
        cmocka_unit_test(test_stage_inbox_handoff_never_strands),
        cmocka_unit_test(test_stage_inbox_overflow_keeps_fifo),
        cmocka_unit_test(test_stage_inbox_overflow_drop_oldest),
        cmocka_unit_test(test_stage_inbox_tuned_past_its_size),
        cmocka_unit_test(test_stage_publish_racing_shutdown_ends_once),
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
        cmocka_unit_test(test_stage_c7_exactly_once_under_contention),
        cmocka_unit_test(test_stage_publish_many_starts_every_task_it_owes),
        cmocka_unit_test(test_stage_c7_exactly_once_with_retries),
        cmocka_unit_test(test_stage_c7_drop_oldest_each_ends_once),
        cmocka_unit_test(test_stage_concurrency_permits_run_in_parallel),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("stage", tests, NULL, NULL);
}
