/* SPDX-License-Identifier: MIT */
/*
 * test_batch.c -- batch consumers (seda_stage_consume_batch): a stage's
 * only consumer gets whole batches; every per-envelope rule of a plain
 * consumer holds inside one: order, a retry at once ahead of the rest,
 * the nack rule (changes undone), an envelope left unsettled counting as
 * a nack, envelopes left untaken coming back in order, dead letters, a
 * service time per envelope, and one envelope per call when the stage
 * has several consumers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#define MAXSEEN 256

typedef struct bc {
    pthread_mutex_t mu;
    uint64_t seen[MAXSEEN];     /* payload of each envelope taken; mu */
    int attempt[MAXSEEN];       /* its attempt; guarded by mu */
    int n;                      /* guarded by mu */
    int calls;                  /* batch calls; guarded by mu */
    int sizes[MAXSEEN];         /* envelopes taken per call; guarded by mu */
    tu_counter settled;         /* envelopes settled (acked or nacked) */
    tu_gate gate;               /* the first call waits here at its end */
    bool gated;                 /* immutable once the stage runs */
    int take_per_call;          /* 0: until seda_batch_next says NULL */
    uint64_t nack_value;        /* nack this payload ... */
    int nack_until;             /* ... while attempts < this (0: never) */
    uint64_t open_value;        /* take this one and leave it unsettled */
    uint64_t slow_value;        /* spin 3 ms on this one */
} bc_t;

static void bc_init(bc_t *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    tu_counter_init(&c->settled);
    tu_gate_init(&c->gate);
    c->nack_value = c->open_value = c->slow_value = UINT64_MAX;
}

static void bc_destroy(bc_t *c)
{
    tu_gate_destroy(&c->gate);
    tu_counter_destroy(&c->settled);
    pthread_mutex_destroy(&c->mu);
}

static void bc_fn(seda_batch_t *b, void *ud)
{
    bc_t *c = ud;
    int k = 0, call;
    seda_env_t *env;
    pthread_mutex_lock(&c->mu);
    call = c->calls++;
    pthread_mutex_unlock(&c->mu);
    while ((c->take_per_call == 0 || k < c->take_per_call) &&
           (env = seda_batch_next(b)) != NULL) {
        uint64_t v = tu_env_u64(env);
        int a = seda_env_attempts(env);
        pthread_mutex_lock(&c->mu);
        if (c->n < MAXSEEN) {
            c->seen[c->n] = v;
            c->attempt[c->n] = a;
            c->n++;
        }
        pthread_mutex_unlock(&c->mu);
        k++;
        if (v == c->open_value && a == 1)
            continue;                   /* the next take nacks it */
        if (v == c->slow_value)
            tu_spin(0.003);
        bool ok = !(v == c->nack_value && a < c->nack_until);
        if (!ok) {
            uint64_t other = 999;       /* discarded by the nack */
            assert_int_equal(seda_env_set_payload(env, &other, sizeof other),
                             0);
        }
        seda_batch_result(b, ok);
        tu_counter_add(&c->settled, 1);
    }
    pthread_mutex_lock(&c->mu);
    if (call < MAXSEEN)
        c->sizes[call] = k;
    pthread_mutex_unlock(&c->mu);
    if (c->gated && call == 0)
        tu_gate_wait(&c->gate, TU_DEADLINE);
}

static seda_bus_t *new_bus(void)
{
    seda_bus_opts o;
    seda_bus_opts_init(&o);
    o.workers = 2;
    seda_bus_t *b = NULL;
    assert_int_equal(seda_bus_new(&o, &b), 0);
    return b;
}

static seda_stage_t *add(seda_bus_t *b, const char *name, int max_attempts,
                         int delivery, const char *dlq)
{
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = name;
    o.max_attempts = max_attempts;
    o.delivery = delivery;
    o.dead_letter = dlq;
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(b, &o, &st, NULL, 0), 0);
    return st;
}

static bool idle(seda_bus_t *b)
{
    return seda_bus_wait_idle(b, TU_DEADLINE) == 0;
}

/* Publish 0, wait until the first call holds the gate, publish 1..n-1,
 * open the gate: the rest come in batches of more than one. */
static void publish_gated(seda_bus_t *b, bc_t *c, const char *to, int n)
{
    assert_int_equal(tu_publish_u64(b, to, 0, NULL), 0);
    TU_WAIT(tu_gate_wait_waiters(&c->gate, 1, TU_DEADLINE),
            "the first batch call at its gate");
    for (int i = 1; i < n; i++)
        assert_int_equal(tu_publish_u64(b, to, (uint64_t)i, NULL), 0);
    tu_gate_open(&c->gate);
}

static void test_batch_whole_batches_in_order(void **state)
{
    (void)state;
    bc_t c;
    bc_init(&c);
    c.gated = true;
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 1, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c), 0);
    publish_gated(b, &c, "s", 60);
    TU_WAIT(idle(b), "idle");
    assert_int_equal(c.n, 60);
    for (int i = 0; i < 60; i++) {
        assert_int_equal(c.seen[i], (uint64_t)i);
        assert_int_equal(c.attempt[i], 1);
    }
    assert_int_equal(c.sizes[0], 1);
    /* Some call took several (how many follows the stage's recent
     * handling time: under TSan each envelope is slow enough that the
     * first batches after the gated one take one or two). */
    assert_true(c.calls < 60);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 60);
    assert_int_equal(s.nacked, 0);
    seda_bus_free(b);
    bc_destroy(&c);
}

static bool recorder(seda_env_t *env, void *ud)
{
    bc_t *c = ud;
    pthread_mutex_lock(&c->mu);
    if (c->n < MAXSEEN) {
        c->seen[c->n] = tu_env_u64(env);
        c->attempt[c->n] =
            strcmp(seda_env_header(env, "x-dead-reason") ?
                   seda_env_header(env, "x-dead-reason") : "",
                   "max_attempts") == 0;
        c->n++;
    }
    pthread_mutex_unlock(&c->mu);
    return true;
}

static void test_batch_retry_goes_first_and_nack_undoes(void **state)
{
    (void)state;
    bc_t c, dl;
    bc_init(&c);
    bc_init(&dl);
    c.gated = true;
    c.nack_value = 2;
    c.nack_until = 2;                   /* attempt 1 nacks, 2 acks */
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 2, SEDA_DELIVERY_P2P, "dlq");
    seda_stage_t *d = add(b, "dlq", 1, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c), 0);
    assert_true(seda_stage_consume(d, recorder, &dl) >= 0);
    publish_gated(b, &c, "s", 6);
    TU_WAIT(idle(b), "idle");
    /* The retry of 2 is delivered before 3, with the payload the first
     * attempt was given. */
    static const uint64_t want[] = { 0, 1, 2, 2, 3, 4, 5 };
    static const int att[] = { 1, 1, 1, 2, 1, 1, 1 };
    assert_int_equal(c.n, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(c.seen[i], want[i]);
        assert_int_equal(c.attempt[i], att[i]);
    }
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 6);
    assert_int_equal(s.nacked, 1);

    /* Out of attempts: dead-lettered with the delivered payload. */
    c.nack_value = 3;
    c.nack_until = 9;
    c.gated = false;
    assert_int_equal(tu_publish_u64(b, "s", 3, NULL), 0);
    TU_WAIT(idle(b), "idle");
    assert_int_equal(dl.n, 1);
    assert_int_equal(dl.seen[0], 3);
    assert_int_equal(dl.attempt[0], 1); /* reason max_attempts */
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.nacked, 3);
    seda_bus_free(b);
    bc_destroy(&c);
    bc_destroy(&dl);
}

static void test_batch_unsettled_counts_as_nack(void **state)
{
    (void)state;
    bc_t c;
    bc_init(&c);
    c.gated = true;
    c.open_value = 3;                   /* left open on attempt 1 */
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 2, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c), 0);
    publish_gated(b, &c, "s", 5);
    TU_WAIT(idle(b), "idle");
    static const uint64_t want[] = { 0, 1, 2, 3, 3, 4 };
    assert_int_equal(c.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(c.seen[i], want[i]);
    assert_int_equal(c.attempt[4], 2);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 5);
    assert_int_equal(s.nacked, 1);
    seda_bus_free(b);
    bc_destroy(&c);
}

static void test_batch_untaken_come_back_in_order(void **state)
{
    (void)state;
    bc_t c;
    bc_init(&c);
    c.gated = true;
    c.take_per_call = 1;
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 1, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c), 0);
    publish_gated(b, &c, "s", 12);
    TU_WAIT(idle(b), "idle");
    assert_int_equal(c.n, 12);
    for (int i = 0; i < 12; i++)
        assert_int_equal(c.seen[i], (uint64_t)i);
    assert_int_equal(c.calls, 12);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 12);
    assert_int_equal(s.depth, 0);
    seda_bus_free(b);
    bc_destroy(&c);
}

static void test_batch_service_time_is_per_envelope(void **state)
{
    (void)state;
    bc_t c;
    bc_init(&c);
    c.gated = true;
    c.slow_value = 5;
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 1, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c), 0);
    publish_gated(b, &c, "s", 20);
    TU_WAIT(idle(b), "idle");
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 20);
    assert_true(s.service_max >= 2900);  /* the slow one, 3 ms */
    assert_true(s.service_p50 < 2900);   /* not the batch's time */
    seda_bus_free(b);
    bc_destroy(&c);
}

static void test_batch_several_consumers_one_envelope_a_call(void **state)
{
    (void)state;
    bc_t c0, c1;
    bc_init(&c0);
    bc_init(&c1);
    c1.nack_value = 4;
    c1.nack_until = 2;
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 2, SEDA_DELIVERY_PUBSUB, NULL);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c0), 0);
    assert_int_equal(seda_stage_consume_batch(st, bc_fn, &c1), 1);
    for (int i = 0; i < 8; i++)
        assert_int_equal(tu_publish_u64(b, "s", (uint64_t)i, NULL), 0);
    TU_WAIT(idle(b), "idle");
    /* c0 acked 4 on its first try and is not called again for it; c1
     * sees it twice (its retry). */
    assert_int_equal(c0.n, 8);
    assert_int_equal(c1.n, 9);
    assert_int_equal(c0.calls, 8);
    assert_int_equal(c1.calls, 9);
    for (int i = 0; i < c0.calls; i++)
        assert_int_equal(c0.sizes[i], 1);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.delivered, 8);
    assert_int_equal(s.nacked, 1);
    seda_bus_free(b);
    bc_destroy(&c0);
    bc_destroy(&c1);
}

static void test_batch_consume_batch_einval(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus();
    seda_stage_t *st = add(b, "s", 1, SEDA_DELIVERY_P2P, NULL);
    assert_int_equal(seda_stage_consume_batch(st, NULL, NULL), SEDA_EINVAL);
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = "p";
    o.pull = true;
    seda_stage_t *p = NULL;
    assert_int_equal(seda_stage_add(b, &o, &p, NULL, 0), 0);
    bc_t c;
    bc_init(&c);
    assert_int_equal(seda_stage_consume_batch(p, bc_fn, &c), SEDA_EINVAL);
    seda_bus_free(b);
    bc_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_whole_batches_in_order),
        cmocka_unit_test(test_batch_retry_goes_first_and_nack_undoes),
        cmocka_unit_test(test_batch_unsettled_counts_as_nack),
        cmocka_unit_test(test_batch_untaken_come_back_in_order),
        cmocka_unit_test(test_batch_service_time_is_per_envelope),
        cmocka_unit_test(test_batch_several_consumers_one_envelope_a_call),
        cmocka_unit_test(test_batch_consume_batch_einval),
    };
    return cmocka_run_group_tests_name("batch", tests, NULL, NULL);
}
