/* SPDX-License-Identifier: MIT */
/*
 * test_stage_concurrency.c -- stages under concurrency, through the public
 * C API.
 *
 * C7 exactly-once delivery with several producers and consumers, repeated
 * (STRESS=1 for many more rounds); the lock-free inbox's boundaries
 * (hand-off against a drain task giving its permit back, overflow past
 * 1024 slots, shutdown races); concurrency permits running in parallel.
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
 * "HOW IT WORKS" in src/core/inbox.c): publish one envelope at a time
 * after a pause around the drain task's linger time (20 us), so
 * publishes keep landing while the task decides to stop.  A lost hand-off leaves an
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
/* A worker routing a hop into a full stage whose drain task runs on the
 * other worker: help_drain finds no queued task to run it itself, and must
 * not leave a gap in which that drain task makes room unseen (a drain task
 * broadcasts not_full only to publishers already counted as waiting), or
 * the hop then sleeps for its whole hop_timeout on a stage with room.
 *
 * Each attempt: "dst" (one permit, batch 1) has its consumer held on G
 * and F1, F2 queued, then its capacity cut to 1, so it is full with a
 * drain task running.  "src"'s consumer releases G and returns, and its
 * worker routes X into dst: full, so it watches the depth for room.  The
 * drain task takes F1 -- not room yet, but the watcher sees the depth
 * drop and looks again at once: full, so it calls help_drain, then waits
 * -- and takes F2 (room) a varying moment later, so across attempts that
 * take lands all over the look-help-wait sequence.  X must reach dst
 * within the deadline (hop_timeout is far above it).  Before the fix
 * about one attempt in a few hundred lost the wake-up. */
struct hw {
    atomic_int release;                 /* G may return */
    atomic_int d1, d2;                  /* this attempt's delays, ns */
    tu_counter x_done;                  /* X delivered at dst */
};

static int64_t hw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A consumer's handling time, not a way to order events. */
static void hw_spin_ns(int64_t ns)
{
    int64_t end = hw_now_ns() + ns;
    while (hw_now_ns() < end) {
    }
}

static bool hw_src(seda_env_t *env, void *ud)
{
    struct hw *h = ud;
    (void)env;
    atomic_store(&h->release, 1);
    return true;
}

static bool hw_dst(seda_env_t *env, void *ud)
{
    struct hw *h = ud;
    uint64_t v = tu_env_u64(env);
    if (v == 0) {                       /* G: held until X is on its way */
        int64_t end = hw_now_ns() + (int64_t)(TU_DEADLINE * 1e9);
        while (!atomic_load(&h->release) && hw_now_ns() < end) {
        }
        hw_spin_ns(atomic_load(&h->d1));
    } else if (v == 1) {                /* F1 */
        hw_spin_ns(atomic_load(&h->d2));
    } else if (v == 3) {                /* X */
        tu_counter_add(&h->x_done, 1);
    }
    return true;
}

static void test_stage_hop_wait_sees_room_made_while_helping(void **state)
{
    (void)state;
    struct hw *h = calloc(1, sizeof *h);
    assert_non_null(h);
    tu_counter_init(&h->x_done);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.batch = 1;
    bo.hop_timeout = 1000;              /* a lost wake-up outlasts the test */
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "src";
    seda_stage_t *src = NULL, *dst = NULL;
    assert_int_equal(seda_stage_add(bus, &so, &src, NULL, 0), 0);
    assert_true(seda_stage_consume(src, hw_src, h) >= 0);
    so.name = "dst";
    assert_int_equal(seda_stage_add(bus, &so, &dst, NULL, 0), 0);
    assert_true(seda_stage_consume(dst, hw_dst, h) >= 0);
    static const char *const slip[] = { "dst" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.slip = slip;
    po.nslip = 1;
    int attempts = tu_iterations(3000, 50000);
    unsigned x = 12345;
    for (int a = 0; a < attempts; a++) {
        x = x * 1103515245u + 12345u;
        atomic_store(&h->d1, (int)((x >> 8) % 4000u));
        x = x * 1103515245u + 12345u;
        atomic_store(&h->d2, 500 + (int)((x >> 8) % 1500u));
        atomic_store(&h->release, 0);
        assert_int_equal(seda_stage_tune(dst, 3, 0, -1, NULL, 0), 0);
        for (uint64_t v = 0; v < 3; v++)            /* G, F1, F2 */
            assert_int_equal(tu_publish_u64(bus, "dst", v, NULL), 0);
        assert_int_equal(seda_stage_tune(dst, 1, 0, -1, NULL, 0), 0);
        assert_int_equal(tu_publish_u64(bus, "src", 3, &po), 0);    /* X */
        if (!tu_counter_wait_ge(&h->x_done, a + 1, TU_DEADLINE)) {
            seda_stage_stats s;
            seda_stage_stats_get(dst, &s);
            fail_msg("attempt %d: the hop into dst still waits after %.0f s "
                     "with dst depth %d, in_flight %d: it sleeps on a stage "
                     "with room (lost not_full wake-up)", a,
                     (double)TU_DEADLINE, s.depth, s.in_flight);
        }
        TU_WAIT(seda_bus_wait_idle(bus, TU_DEADLINE) == 0, "an idle bus");
    }
    assert_int_equal(seda_bus_shutdown(bus, TU_DEADLINE), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.dead_lettered, 0);
    assert_int_equal(bs.completed, 4L * attempts);
    seda_bus_free(bus);
    tu_counter_destroy(&h->x_done);
    free(h);
}

/* A hop that waits for room in a full stage looked for that stage's drain
 * task in the pool (help_drain) before it slept.  If the stage's drain
 * task, running on the other worker, then goes to the back of the pool
 * (it reschedules itself behind other stages' tasks) and that worker picks
 * up a task that blocks in turn, the queued task has no worker left but
 * the sleeping hop, which must be woken to run it -- not left to sleep
 * out its hop_timeout.
 *
 * Each attempt: dst (capacity 1) holds G in its consumer on one worker,
 * F queued; mid's drain, on the other worker, routes M1 into dst and
 * waits; M2 fills mid; S1 queues src's drain task.  G then returns (after
 * a varying handling time, mostly long after M1's hop went to sleep):
 * dst's drain task, with F left and src's task waiting, reschedules
 * itself behind it; its worker runs src's drain, whose hop into the full
 * mid waits.  Only the worker sleeping on dst can run dst's task now. */
struct hq {
    atomic_int armed;                   /* G may start its handling time */
    atomic_int d;                       /* G's handling time, ns */
    tu_counter done;                    /* deliveries at dst */
};

static bool hq_pass(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    return true;
}

static bool hq_dst(seda_env_t *env, void *ud)
{
    struct hq *q = ud;
    if (tu_env_u64(env) == 0) {         /* G */
        int64_t end = hw_now_ns() + (int64_t)(TU_DEADLINE * 1e9);
        while (!atomic_load(&q->armed) && hw_now_ns() < end) {
        }
        hw_spin_ns(atomic_load(&q->d));
    }
    tu_counter_add(&q->done, 1);
    return true;
}

static void test_stage_hop_waiter_runs_task_queued_while_it_slept(void **state)
{
    (void)state;
    struct hq *q = calloc(1, sizeof *q);
    assert_non_null(q);
    tu_counter_init(&q->done);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.batch = 1;
    bo.hop_timeout = 1000;              /* a lost hand-off outlasts the test */
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    seda_stage_t *src = NULL, *mid = NULL, *dst = NULL;
    so.name = "src";
    assert_int_equal(seda_stage_add(bus, &so, &src, NULL, 0), 0);
    assert_true(seda_stage_consume(src, hq_pass, q) >= 0);
    so.capacity = 1;
    so.name = "mid";
    assert_int_equal(seda_stage_add(bus, &so, &mid, NULL, 0), 0);
    assert_true(seda_stage_consume(mid, hq_pass, q) >= 0);
    so.name = "dst";
    assert_int_equal(seda_stage_add(bus, &so, &dst, NULL, 0), 0);
    assert_true(seda_stage_consume(dst, hq_dst, q) >= 0);
    static const char *const to_dst[] = { "dst" };
    static const char *const to_mid[] = { "mid", "dst" };
    seda_publish_opts pd, pm;
    seda_publish_opts_init(&pd);
    pd.slip = to_dst;
    pd.nslip = 1;
    seda_publish_opts_init(&pm);
    pm.slip = to_mid;
    pm.nslip = 2;
    int attempts = tu_iterations(200, 2000);
    unsigned x = 4321;
    for (int a = 0; a < attempts; a++) {
        x = x * 1103515245u + 12345u;
        atomic_store(&q->d, (int)((x >> 8) % 300000u));     /* 0..300 us */
        atomic_store(&q->armed, 0);
        assert_int_equal(tu_publish_u64(bus, "dst", 0, NULL), 0);  /* G */
        assert_int_equal(tu_publish_u64(bus, "dst", 1, NULL), 0);  /* F */
        assert_int_equal(tu_publish_u64(bus, "mid", 2, &pd), 0);   /* M1 */
        assert_int_equal(tu_publish_u64(bus, "mid", 3, &pd), 0);   /* M2 */
        assert_int_equal(tu_publish_u64(bus, "src", 4, &pm), 0);   /* S1 */
        atomic_store(&q->armed, 1);
        if (!tu_counter_wait_ge(&q->done, 5L * (a + 1), TU_DEADLINE)) {
            seda_stage_stats sm, sd;
            seda_stage_stats_get(mid, &sm);
            seda_stage_stats_get(dst, &sd);
            fail_msg("attempt %d: %ld of 5 delivered at dst after %.0f s "
                     "(mid depth %d, dst depth %d in_flight %d): a hop "
                     "sleeps while the drain task it waits for sits in the "
                     "pool", a, tu_counter_get(&q->done) - 5L * a,
                     (double)TU_DEADLINE, sm.depth, sd.depth, sd.in_flight);
        }
        TU_WAIT(seda_bus_wait_idle(bus, TU_DEADLINE) == 0, "an idle bus");
    }
    assert_int_equal(seda_bus_shutdown(bus, TU_DEADLINE), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.dead_lettered, 0);
    assert_int_equal(bs.completed, 5L * attempts);
    seda_bus_free(bus);
    tu_counter_destroy(&q->done);
    free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stage_inbox_handoff_never_strands),
        cmocka_unit_test(test_stage_inbox_overflow_keeps_fifo),
        cmocka_unit_test(test_stage_inbox_overflow_drop_oldest),
        cmocka_unit_test(test_stage_inbox_tuned_past_its_size),
        cmocka_unit_test(test_stage_publish_racing_shutdown_ends_once),
        cmocka_unit_test(test_stage_c7_exactly_once_under_contention),
        cmocka_unit_test(test_stage_publish_many_starts_every_task_it_owes),
        cmocka_unit_test(test_stage_c7_exactly_once_with_retries),
        cmocka_unit_test(test_stage_c7_drop_oldest_each_ends_once),
        cmocka_unit_test(test_stage_concurrency_permits_run_in_parallel),
        cmocka_unit_test(test_stage_hop_wait_sees_room_made_while_helping),
        cmocka_unit_test(test_stage_hop_waiter_runs_task_queued_while_it_slept),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("stage_concurrency", tests, NULL, NULL);
}
