/* SPDX-License-Identifier: MIT */
/*
 * test_routing.c -- routing through the public C API: C8 the routing slip,
 * C9 pub/sub and p2p delivery, custom ids.
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
#include <time.h>
#include "seda.h"
#include "testutil.h"
#include "bus_fixture.h"

/* ====================================================================
 * C8: routing slip
 * ==================================================================== */

/* s1 -> s2 -> s3 -> (x1 -> x2 inserted by s3) -> s4 -> s5; s2 nacks its
 * first attempt.  Attempts reset per hop, payload and headers carry,
 * done fires once with the final payload. */
static void test_bus_c8_slip_visits_in_order(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, "dlq");
    static const char *const names[] = {"s1", "s2", "s3", "x1",
                                        "x2", "s4", "s5"};
    static const char *const fwd[] = {"x1", "x2"};
    tweak_args t2 = {.max_attempts = 2};
    seda_stage_t *st[7];
    for (int i = 0; i < 7; i++) {
        st[i] = fx_stage(f, names[i], i, tweak_apply,
                         i == 1 ? &t2 : NULL);
        f->rec[i].append = true;
    }
    fx_stage(f, "dlq", 7, NULL, NULL);
    f->rec[1].nack_before = 2;
    f->rec[2].fwd = fwd;
    f->rec[2].nfwd = 2;

    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"s2", "s3", "s4", "s5"};
    po.slip = slip;
    po.nslip = 4;
    const char *hdrs[] = {"orig", "yes"};
    po.headers = hdrs;
    po.nheaders = 1;
    po.sender = "me";
    assert_int_equal(seda_publish(f->bus, "s1", "p", 1, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 1, TU_DEADLINE),
            "done(SEDA_COMPLETED) at the end of the slip");
    wait_idle(f);

    static const char *const want[] = {"s1/1", "s2/1", "s2/2", "s3/1",
                                       "x1/1", "x2/1", "s4/1", "s5/1"};
    pthread_mutex_lock(&f->log_mu);
    int n = f->nlog;
    char log[LOG_MAX][SEDA_NAME_MAX + 8];
    memcpy(log, f->log, sizeof log);
    pthread_mutex_unlock(&f->log_mu);
    for (int i = 0; i < 8 && i < n; i++)
        if (strcmp(log[i], want[i]) != 0)
            fail_msg("slip visit %d was %s, want %s", i, log[i], want[i]);
    assert_int_equal(n, 8);

    pthread_mutex_lock(&f->mu);
    char payload[STR_MAX], hdrs_out[STR_MAX];
    snprintf(payload, sizeof payload, "%s", f->done_payload);
    snprintf(hdrs_out, sizeof hdrs_out, "%s", f->done_hdrs);
    int slip_left = f->done_slip;
    uint64_t done_seq = f->done_seq;
    pthread_mutex_unlock(&f->mu);
    assert_string_equal(payload, "p|s1|s2|s3|x1|x2|s4|s5");
    assert_int_equal(slip_left, 0);
    const char *hwant[] = {"orig=yes;", "h-s1=s1;", "h-s2=s2;", "h-s3=s3;",
                           "h-x1=x1;", "h-x2=x2;", "h-s4=s4;", "h-s5=s5;"};
    for (size_t i = 0; i < 8; i++)
        if (strstr(hdrs_out, hwant[i]) == NULL)
            fail_msg("final headers \"%s\" lack %s", hdrs_out, hwant[i]);

    /* same envelope id at every hop and at done */
    for (int i = 0; i < 7; i++) {
        pthread_mutex_lock(&f->rec[i].mu);
        uint64_t s = f->rec[i].seq;
        pthread_mutex_unlock(&f->rec[i].mu);
        if (s != done_seq)
            fail_msg("stage %s saw seq %llu, done saw %llu", names[i],
                     (unsigned long long)s, (unsigned long long)done_seq);
    }
    /* the slip as each stage saw it */
    pthread_mutex_lock(&f->rec[0].mu);
    int slip_s1 = f->rec[0].slip[0];
    pthread_mutex_unlock(&f->rec[0].mu);
    pthread_mutex_lock(&f->rec[5].mu);
    int slip_s4 = f->rec[5].slip[0];
    pthread_mutex_unlock(&f->rec[5].mu);
    assert_int_equal(slip_s1, 4);
    assert_int_equal(slip_s4, 1);

    assert_int_equal(outc(f, SEDA_COMPLETED), 1);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 0);
    for (int i = 0; i < 7; i++) {
        seda_stage_stats s = sstats(st[i]);
        if (s.delivered != 1 || s.enqueued != 1)
            fail_msg("stage %s: delivered %llu enqueued %llu, want 1/1",
                     names[i], (unsigned long long)s.delivered,
                     (unsigned long long)s.enqueued);
        assert_int_equal(s.completed, i == 6 ? 1 : 0);
    }
    assert_int_equal(sstats(st[1]).nacked, 1);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.accepted, 1); /* hops are not new acceptances */
    assert_int_equal(b.completed, 1);
    for (int i = 0; i < 7; i++)
        assert_int_equal(rec_bad(&f->rec[i]), 0);
    check_balance(f->bus);
}

typedef struct fwd_probe {
    atomic_int rc_null, rc_bad, slip_after, first_after;
} fwd_probe;

static bool fwd_probe_consumer(seda_env_t *env, void *ud)
{
    fwd_probe *p = ud;
    const char *const nul[] = {NULL};
    const char *const bad[] = {"ok", "bad name"};
    atomic_store_explicit(&p->rc_null, seda_env_forward(env, nul, 1),
                          memory_order_relaxed);
    atomic_store_explicit(&p->rc_bad, seda_env_forward(env, bad, 2),
                          memory_order_relaxed);
    atomic_store_explicit(&p->slip_after, seda_env_slip_count(env),
                          memory_order_relaxed);
    const char *first = seda_env_slip_at(env, 0);
    atomic_store_explicit(&p->first_after,
                          first != NULL && strcmp(first, "d") == 0,
                          memory_order_relaxed);
    const char *const good[] = {"b", "c"};
    return seda_env_forward(env, good, 2) == 0;
}

/* forward inserts hops before the rest of the slip, in the given order;
 * a NULL or malformed name is SEDA_EINVAL and leaves the slip unchanged.
 * The counters are read after wait_idle (which orders them). */
static void test_bus_c8_forward_inserts_before_slip(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    fwd_probe *p = calloc(1, sizeof *p);
    assert_non_null(p);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "a";
    seda_stage_t *a = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &a, NULL, 0), 0);
    assert_true(seda_stage_consume(a, fwd_probe_consumer, p) >= 0);
    fx_stage(f, "b", 1, NULL, NULL);
    fx_stage(f, "c", 2, NULL, NULL);
    fx_stage(f, "d", 3, NULL, NULL);
    for (int i = 1; i <= 3; i++)
        f->rec[i].append = true;
    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"d"};
    po.slip = slip;
    po.nslip = 1;
    assert_int_equal(seda_publish(f->bus, "a", "p", 1, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 1, TU_DEADLINE),
            "done(SEDA_COMPLETED)");
    wait_idle(f);
    int rn = atomic_load_explicit(&p->rc_null, memory_order_relaxed);
    int rb = atomic_load_explicit(&p->rc_bad, memory_order_relaxed);
    int sa = atomic_load_explicit(&p->slip_after, memory_order_relaxed);
    int fa = atomic_load_explicit(&p->first_after, memory_order_relaxed);
    seda_bus_free(f->bus);
    f->bus = NULL;
    free(p);
    assert_int_equal(rn, SEDA_EINVAL);
    assert_int_equal(rb, SEDA_EINVAL);
    assert_int_equal(sa, 1);
    assert_int_equal(fa, 1);
    pthread_mutex_lock(&f->mu);
    char payload[STR_MAX];
    snprintf(payload, sizeof payload, "%s", f->done_payload);
    pthread_mutex_unlock(&f->mu);
    assert_string_equal(payload, "p|b|c|d");
    assert_int_equal(outc(f, SEDA_COMPLETED), 1);
}

/* An unknown hop dead-letters with no_such_stage from the stage that
 * acked; the later hops are never visited. */
static void test_bus_c8_unknown_hop_dead_letters(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, "dlq");
    seda_stage_t *a = fx_stage(f, "a", 0, NULL, NULL);
    fx_stage(f, "b", 1, NULL, NULL);
    fx_stage(f, "dlq", 2, NULL, NULL);
    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"nope", "b"};
    po.slip = slip;
    po.nslip = 2;
    assert_int_equal(tu_publish_u64(f->bus, "a", 11, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED) for an unknown hop");
    wait_idle(f);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), 1);
    assert_int_equal(tu_counter_get(&f->rec[1].calls), 0);
    assert_int_equal(tu_idset_count(&f->rec[2].ids, 11), 1);
    expect_header(&f->rec[2], "reason", "no_such_stage");
    expect_header(&f->rec[2], "from", "a");
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 1);
    assert_int_equal(sstats(a).dead_lettered, 1);
    assert_int_equal(sstats(a).delivered, 1);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.dead_lettered, 1);
    assert_int_equal(b.completed, 0);
    check_balance(f->bus);
}

/* A next hop that refuses (reject policy, full) dead-letters with
 * hop_refused; the refusal counts in the hop's dropped. */
static void test_bus_c8_refused_hop_dead_letters(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, "dlq");
    fx_stage(f, "a", 0, NULL, NULL);
    tweak_args t = {.capacity = 1, .policy = SEDA_POLICY_REJECT};
    seda_stage_t *b = fx_stage(f, "b", 1, tweak_apply, &t);
    fx_stage(f, "dlq", 2, NULL, NULL);
    f->rec[1].gated = true;
    must_publish(f, "b", 100);
    TU_WAIT(tu_counter_wait_ge(&f->rec[1].calls, 1, TU_DEADLINE),
            "b's handler to hold envelope 100");
    TU_WAIT(tu_stage_wait(b, tu_pred_in_flight_eq, 1, TU_DEADLINE),
            "b in_flight == 1");
    must_publish(f, "b", 101); /* b is now full */
    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"b"};
    po.slip = slip;
    po.nslip = 1;
    assert_int_equal(tu_publish_u64(f->bus, "a", 7, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED) for a refused hop");
    TU_WAIT(tu_counter_wait_ge(&f->rec[2].calls, 1, TU_DEADLINE),
            "the dlq to receive the refused hop");
    expect_header(&f->rec[2], "reason", "hop_refused");
    expect_header(&f->rec[2], "from", "a");
    assert_int_equal(sstats(b).dropped, 1);
    tu_gate_open(&f->gate);
    wait_idle(f);
    assert_int_equal(tu_idset_count(&f->rec[1].ids, 7), 0);
    assert_int_equal(outc(f, SEDA_COMPLETED), 2);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 1);
    check_balance(f->bus);
}

static void test_bus_c8_publish_unknown_stage_enostage(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 1, 0, NULL);
    assert_int_equal(publish_u64(f, "nope", 1), SEDA_ENOSTAGE);
    assert_string_equal(seda_strerror(SEDA_ENOSTAGE), "no_such_stage");
    const void *pl[] = {"x"};
    size_t ln[] = {1};
    int err = 0;
    assert_int_equal(seda_publish_many(f->bus, "nope", pl, ln, 1, NULL,
                                       &err), 0);
    assert_int_equal(err, SEDA_ENOSTAGE);
    assert_int_equal(bstats(f->bus).accepted, 0);
    assert_int_equal(outc(f, SEDA_COMPLETED) + outc(f, SEDA_DEAD_LETTERED) +
                         outc(f, SEDA_DROPPED), 0);
}

/* SPEC §2: ids are unique within the process, so a custom id (a durable
 * stage's message name) is refused on an in-memory stage. */
static void test_bus_custom_id_only_on_durable_stages(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 1, 0, NULL);
    seda_stage_t *st = fx_stage(f, "mem", 0, NULL, NULL);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.id = "x";
    assert_int_equal(seda_publish(f->bus, "mem", "a", 1, &o), SEDA_EINVAL);
    assert_int_equal(seda_stage_publish(st, "a", 1, &o), SEDA_EINVAL);
    const void *pl[] = {"a", "b"};
    size_t ln[] = {1, 1};
    int err = 0;
    assert_int_equal(seda_publish_many(f->bus, "mem", pl, ln, 2, &o, &err),
                     0);
    assert_int_equal(err, SEDA_EINVAL);
    assert_int_equal(bstats(f->bus).accepted, 0);
    o.id = NULL;
    assert_int_equal(seda_publish(f->bus, "mem", "a", 1, &o), 0);
    /* and seda_bus_new with no out-pointer refuses before starting */
    assert_int_equal(seda_bus_new(NULL, NULL), SEDA_EINVAL);
    assert_true(seda_bus_shutdown(f->bus, 5) == 0);
    assert_int_equal(bstats(f->bus).completed, 1);
}

/* ====================================================================
 * C9: pub/sub and p2p delivery
 * ==================================================================== */

static void pubsub_stage(fx_t *f, const char *name, int max_attempts,
                         seda_stage_t **out)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = name;
    so.delivery = SEDA_DELIVERY_PUBSUB;
    so.concurrency = 2;
    so.max_attempts = max_attempts;
    assert_int_equal(seda_stage_add(f->bus, &so, out, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(f->rec[i].name, sizeof f->rec[i].name, "%s", name);
        assert_int_equal(seda_stage_consume(*out, rec_consumer, &f->rec[i]),
                         i);
    }
}

static void test_bus_c9_pubsub_every_consumer_every_envelope(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 3, 0, NULL);
    seda_stage_t *st = NULL;
    pubsub_stage(f, "ps", 1, &st);
    const int n = 100;
    for (int i = 0; i < n; i++)
        must_publish(f, "ps", (uint64_t)i);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], n, TU_DEADLINE),
            "100 done(SEDA_COMPLETED)");
    wait_idle(f);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(tu_counter_get(&f->rec[c].calls), n);
        assert_int_equal(tu_idset_size(&f->rec[c].ids), (size_t)n);
        assert_int_equal(tu_idset_dups(&f->rec[c].ids), 0);
    }
    assert_int_equal(outc(f, SEDA_COMPLETED), n);
    assert_int_equal(tu_idset_dups(&f->done_seqs), 0);
    seda_stage_stats s = sstats(st);
    assert_int_equal(s.delivery, SEDA_DELIVERY_PUBSUB);
    assert_int_equal(s.consumers, 3);
    assert_int_equal(s.completed, (uint64_t)n);
    assert_int_equal(s.nacked, 0);
    check_balance(f->bus);
}

/* One of three nacks its first attempt: only it is called again. */
static void test_bus_c9_pubsub_retry_calls_only_nacker(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 3, 0, NULL);
    seda_stage_t *st = NULL;
    pubsub_stage(f, "ps", 2, &st);
    f->rec[2].nack_before = 2;
    const int n = 10;
    for (int i = 0; i < n; i++)
        must_publish(f, "ps", (uint64_t)i);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], n, TU_DEADLINE),
            "10 done(SEDA_COMPLETED)");
    wait_idle(f);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), n);
    assert_int_equal(tu_counter_get(&f->rec[1].calls), n);
    if (tu_counter_get(&f->rec[2].calls) != 2 * n)
        fail_msg("pubsub retry: nacking consumer called %ld times, want %d",
                 tu_counter_get(&f->rec[2].calls), 2 * n);
    for (int c = 0; c < 3; c++)
        assert_int_equal(tu_idset_size(&f->rec[c].ids), (size_t)n);
    /* the acking consumers only ever saw attempt 1 */
    for (int c = 0; c < 2; c++) {
        pthread_mutex_lock(&f->rec[c].mu);
        for (int i = 0; i < f->rec[c].nattempts; i++)
            if (f->rec[c].attempts[i] != 1) {
                pthread_mutex_unlock(&f->rec[c].mu);
                fail_msg("pubsub: consumer %d that acked was called again "
                         "(attempt %d)", c, f->rec[c].attempts[i]);
            }
        pthread_mutex_unlock(&f->rec[c].mu);
    }
    assert_int_equal(outc(f, SEDA_COMPLETED), n);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 0);
    assert_int_equal(sstats(st).nacked, (uint64_t)n);
    check_balance(f->bus);
}

/* The stage acks only when all consumers ack: one that always nacks
 * dead-letters the envelope; the others are not called again. */
static void test_bus_c9_pubsub_needs_all_acks(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 3, 0, NULL);
    seda_stage_t *st = NULL;
    pubsub_stage(f, "ps", 2, &st);
    f->rec[1].always_nack = true;
    must_publish(f, "ps", 1);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED)");
    wait_idle(f);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), 1);
    assert_int_equal(tu_counter_get(&f->rec[1].calls), 2);
    assert_int_equal(tu_counter_get(&f->rec[2].calls), 1);
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    assert_int_equal(sstats(st).dead_lettered, 1);
    assert_int_equal(sstats(st).completed, 0);
    check_balance(f->bus);
}

/* p2p: one consumer per envelope, round robin. */
static void test_bus_c9_p2p_round_robin(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "rr";
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &st, NULL, 0), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(f->rec[i].name, sizeof f->rec[i].name, "rr");
        assert_true(seda_stage_consume(st, rec_consumer, &f->rec[i]) >= 0);
    }
    for (int i = 0; i < 30; i++)
        must_publish(f, "rr", (uint64_t)i);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 30, TU_DEADLINE),
            "30 done(SEDA_COMPLETED)");
    wait_idle(f);
    size_t total = 0;
    for (int c = 0; c < 3; c++) {
        long calls = tu_counter_get(&f->rec[c].calls);
        if (calls != 10)
            fail_msg("p2p round robin: consumer %d got %ld of 30, want 10",
                     c, calls);
        total += tu_idset_size(&f->rec[c].ids);
    }
    assert_int_equal(total, 30); /* disjoint: one consumer each */
    assert_int_equal(sstats(st).delivered, 30);
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)


int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_bus_c8_slip_visits_in_order),
        FX(test_bus_c8_forward_inserts_before_slip),
        FX(test_bus_c8_unknown_hop_dead_letters),
        FX(test_bus_c8_refused_hop_dead_letters),
        FX(test_bus_c8_publish_unknown_stage_enostage),
        FX(test_bus_custom_id_only_on_durable_stages),
        FX(test_bus_c9_pubsub_every_consumer_every_envelope),
        FX(test_bus_c9_pubsub_retry_calls_only_nacker),
        FX(test_bus_c9_pubsub_needs_all_acks),
        FX(test_bus_c9_p2p_round_robin),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("routing", tests, NULL, NULL);
}
