/* SPDX-License-Identifier: MIT */
/*
 * test_bus.c.new -- the bus contract through the public C API: C2 retry
 * then dead letter, C3 failure isolation, C4 shutdown accounting, C6 no
 * leak across lifecycles, C13 pause / resume / closed.
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
 * C2: retry then dead letter
 * ==================================================================== */

static void c2_nack_until(fx_t *f, int k, int max)
{
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.max_attempts = max};
    seda_stage_t *st = fx_stage(f, "work", 0, tweak_apply, &t);
    f->rec[0].nack_before = k;
    must_publish(f, "work", 7);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 1, TU_DEADLINE),
            "done(SEDA_COMPLETED)");
    wait_idle(f);
    rec_t *r = &f->rec[0];
    assert_int_equal(tu_counter_get(&r->calls), k);
    pthread_mutex_lock(&r->mu);
    int n = r->nattempts;
    int seen[LOG_MAX];
    memcpy(seen, r->attempts, sizeof seen);
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(n, k);
    for (int i = 0; i < n; i++)
        if (seen[i] != i + 1)
            fail_msg("call %d saw attempts %d, want %d", i, seen[i], i + 1);
    assert_int_equal(tu_idset_count(&r->ids, 7), 1); /* acked once */
    assert_int_equal(outc(f, SEDA_COMPLETED), 1);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 0);
    seda_stage_stats s = sstats(st);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.nacked, (uint64_t)(k - 1));
    assert_int_equal(s.dead_lettered, 0);
    assert_int_equal(s.enqueued, 1); /* retries are not admissions */
    assert_int_equal(s.completed, 1);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);

    /* No retry state left behind: the next envelope starts at 1. */
    f->rec[0].nack_before = 0; /* bus idle: no consumer is running */
    must_publish(f, "work", 8);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 2, TU_DEADLINE),
            "second done(SEDA_COMPLETED)");
    wait_idle(f);
    pthread_mutex_lock(&r->mu);
    int last = r->attempts[r->nattempts - 1];
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(last, 1);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.accepted, 2);
    assert_int_equal(b.completed, 2);
    assert_int_equal(b.in_system, 0);
    check_balance(f->bus);
    assert_int_equal(rec_bad(r), 0);
}

static void test_bus_c2_nack_until_attempt_2_delivered_once(void **state)
{
    c2_nack_until(*state, 2, 3);
}

static void test_bus_c2_nack_until_last_attempt_delivered_once(void **state)
{
    c2_nack_until(*state, 3, 3);
}

/* Always nack: exactly max_attempts calls, then the stage's DLQ with the
 * reason headers; done fires SEDA_DEAD_LETTERED at once (while the DLQ
 * consumer is still held), never SEDA_COMPLETED. */
static void test_bus_c2_always_nack_dead_letters(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    tweak_args t = {.max_attempts = 3, .dead_letter = "dlq"};
    seda_stage_t *work = fx_stage(f, "work", 0, tweak_apply, &t);
    seda_stage_t *dlq = fx_stage(f, "dlq", 1, NULL, NULL);
    f->rec[0].always_nack = true;
    f->rec[1].gated = true;

    seda_publish_opts po;
    fx_popts(f, &po);
    const char *hdrs[] = {"k", "v"};
    po.headers = hdrs;
    po.nheaders = 1;
    uint64_t v = 42;
    assert_int_equal(seda_publish(f->bus, "work", &v, sizeof v, &po), 0);

    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED) while the DLQ consumer is held");
    TU_WAIT(tu_counter_wait_ge(&f->rec[1].calls, 1, TU_DEADLINE),
            "the envelope to reach the dlq stage");
    tu_gate_open(&f->gate);
    wait_idle(f);

    assert_int_equal(tu_counter_get(&f->rec[0].calls), 3);
    assert_int_equal(tu_counter_get(&f->rec[1].calls), 1);
    assert_int_equal(tu_idset_count(&f->rec[1].ids, 42), 1);
    expect_header(&f->rec[1], "reason", "max_attempts");
    expect_header(&f->rec[1], "from", "work");
    expect_header(&f->rec[1], "k", "v");
    expect_header(&f->rec[1], "to", "dlq");
    pthread_mutex_lock(&f->rec[0].mu);
    uint64_t seq0 = f->rec[0].seq;
    pthread_mutex_unlock(&f->rec[0].mu);
    pthread_mutex_lock(&f->rec[1].mu);
    uint64_t seq1 = f->rec[1].seq;
    int dlq_att = f->rec[1].attempts[0];
    pthread_mutex_unlock(&f->rec[1].mu);
    assert_int_equal(seq0, seq1); /* same envelope, same id */
    assert_int_equal(dlq_att, 1);
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), 1);
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    assert_int_equal(outc(f, SEDA_DROPPED), 0);
    seda_stage_stats s = sstats(work);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.delivered, 0);
    assert_int_equal(s.completed, 0);
    s = sstats(dlq);
    assert_int_equal(s.delivered, 1);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.accepted, 1);      /* the DLQ transfer is no publish */
    assert_int_equal(b.dead_lettered, 1);
    assert_int_equal(b.completed, 0);     /* DLQ ack is not a completion */
    assert_int_equal(b.in_system, 0);
    check_balance(f->bus);
    assert_int_equal(rec_bad(&f->rec[0]) + rec_bad(&f->rec[1]), 0);
}

/* The stage's dead_letter wins over the bus's; the bus's is the fallback. */
static void test_bus_c2_bus_dead_letter_is_fallback(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, "bdlq");
    tweak_args none = {0};
    tweak_args own = {.dead_letter = "sdlq"};
    fx_stage(f, "w1", 0, tweak_apply, &none);
    fx_stage(f, "w2", 1, tweak_apply, &own);
    fx_stage(f, "bdlq", 2, NULL, NULL);
    fx_stage(f, "sdlq", 3, NULL, NULL);
    f->rec[0].always_nack = true;
    f->rec[1].always_nack = true;
    must_publish(f, "w1", 1);
    must_publish(f, "w2", 2);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 2, TU_DEADLINE),
            "two done(SEDA_DEAD_LETTERED)");
    wait_idle(f);
    assert_int_equal(tu_idset_count(&f->rec[2].ids, 1), 1);
    assert_int_equal(tu_idset_count(&f->rec[2].ids, 2), 0);
    assert_int_equal(tu_idset_count(&f->rec[3].ids, 2), 1);
    assert_int_equal(tu_idset_count(&f->rec[3].ids, 1), 0);
    expect_header(&f->rec[2], "from", "w1");
    expect_header(&f->rec[3], "from", "w2");
    expect_header(&f->rec[2], "reason", "max_attempts");
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    check_balance(f->bus);
}

/* No dead-letter stage anywhere: discarded, still counted. */
static void test_bus_c2_no_dlq_discards_but_counts(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.max_attempts = 2};
    seda_stage_t *st = fx_stage(f, "work", 0, tweak_apply, &t);
    f->rec[0].always_nack = true;
    must_publish(f, "work", 5);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED)");
    wait_idle(f);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), 2);
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    seda_stage_stats s = sstats(st);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.nacked, 2);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.dead_lettered, 1);
    assert_int_equal(b.accepted, 1);
    assert_int_equal(b.in_system, 0);
    check_balance(f->bus);
}

/* A stage with no consumers accepts, then dead-letters (no_consumers). */
static void test_bus_c2_no_consumers_dead_letters(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.dead_letter = "dlq", .max_attempts = 3};
    seda_stage_t *empty = fx_stage(f, "empty", -1, tweak_apply, &t);
    fx_stage(f, "dlq", 1, NULL, NULL);
    assert_int_equal(publish_u64(f, "empty", 9), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED) for a stage with no consumers");
    wait_idle(f);
    assert_int_equal(tu_idset_count(&f->rec[1].ids, 9), 1);
    expect_header(&f->rec[1], "reason", "no_consumers");
    expect_header(&f->rec[1], "from", "empty");
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    seda_stage_stats s = sstats(empty);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.consumers, 0);
    assert_int_equal(s.depth, 0);
    assert_int_equal(bstats(f->bus).dead_lettered, 1);
    check_balance(f->bus);
}

/* seda_env_fail turns an ack into a nack and counts an error. */
static void test_bus_c2_env_fail_is_a_counted_nack(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.max_attempts = 2};
    seda_stage_t *st = fx_stage(f, "work", 0, tweak_apply, &t);
    f->rec[0].fail_every = 1;
    f->rec[0].use_env_fail = true;
    must_publish(f, "work", 3);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_DEAD_LETTERED], 1, TU_DEADLINE),
            "done(SEDA_DEAD_LETTERED) after seda_env_fail twice");
    wait_idle(f);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), 2);
    assert_int_equal(outc(f, SEDA_COMPLETED), 0);
    seda_stage_stats s = sstats(st);
    assert_int_equal(s.nacked, 2);
    assert_int_equal(s.errors, 2);
    assert_int_equal(s.delivered, 0);
    seda_stage_report(st, "test: reported from the test thread");
    assert_int_equal(sstats(st).errors, 3);
}

/* ====================================================================
 * C3: handler failure isolation
 * ==================================================================== */

static void test_bus_c3_failing_handler_isolated(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    tweak_args t = {.concurrency = 2, .capacity = 4096};
    fx_stage(f, "flaky", 0, tweak_apply, &t);
    fx_stage(f, "flaky2", 1, tweak_apply, &t);
    tweak_args m = {.concurrency = 2};
    fx_stage(f, "meet", 2, tweak_apply, &m);
    f->rec[0].fail_every = 7;                 /* returns false */
    f->rec[1].fail_every = 5;
    f->rec[1].use_env_fail = true;            /* seda_env_fail */
    tu_rendezvous rv;
    tu_rendezvous_init(&rv, 2);
    f->rec[2].meet = &rv;

    const int n = 300;
    for (int i = 0; i < n; i++) {
        must_publish(f, "flaky", (uint64_t)i);
        must_publish(f, "flaky2", (uint64_t)i);
    }
    wait_idle(f);
    int fail7 = 0, fail5 = 0;
    for (int i = 0; i < n; i++) {
        uint32_t a = tu_idset_count(&f->rec[0].ids, (uint64_t)i);
        uint32_t b = tu_idset_count(&f->rec[1].ids, (uint64_t)i);
        if (i % 7 == 0) {
            fail7++;
            assert_int_equal(a, 0);
        } else if (a != 1) {
            fail_msg("flaky: envelope %d acked %u times, want 1", i, a);
        }
        if (i % 5 == 0) {
            fail5++;
            assert_int_equal(b, 0);
        } else if (b != 1) {
            fail_msg("flaky2: envelope %d acked %u times, want 1", i, b);
        }
    }
    assert_int_equal(outc(f, SEDA_DEAD_LETTERED), fail7 + fail5);
    assert_int_equal(outc(f, SEDA_COMPLETED), 2 * n - fail7 - fail5);

    /* No worker was lost: two handlers can still run at the same time. */
    assert_int_equal(seda_bus_workers(f->bus), 2);
    must_publish(f, "meet", 1);
    must_publish(f, "meet", 2);
    TU_WAIT(tu_counter_wait_ge(&f->rec[2].calls, 2, TU_DEADLINE),
            "both workers to run a handler at once");
    wait_idle(f);
    assert_int_equal(rec_bad(&f->rec[2]), 0);

    /* And the failing stages keep serving afterwards. */
    for (int i = 1000; i < 1010; i++)
        if (i % 7 != 0)
            must_publish(f, "flaky", (uint64_t)i);
    wait_idle(f);
    for (int i = 1000; i < 1010; i++)
        if (i % 7 != 0)
            assert_int_equal(tu_idset_count(&f->rec[0].ids, (uint64_t)i), 1);
    check_balance(f->bus);
    seda_bus_free(f->bus); /* before rv goes out of scope */
    f->bus = NULL;
    tu_rendezvous_destroy(&rv);
}

/* ====================================================================
 * C4: shutdown accounting
 * ==================================================================== */

static void *shutdown_thread(void *arg)
{
    fx_t *f = arg;
    if (f->thr_timeout < 0) {
        seda_bus_shutdown_now(f->bus);
        f->thr_rc = 0;
    } else {
        f->thr_rc = seda_bus_shutdown(f->bus, f->thr_timeout);
    }
    tu_latch_count_down(&f->thr_done); /* publishes thr_rc (mutex) */
    return NULL;
}

static void start_thread(fx_t *f, void *(*fn)(void *), double timeout)
{
    f->thr_timeout = timeout;
    assert_int_equal(pthread_create(&f->thr, NULL, fn, f), 0);
    f->thr_started = true;
}

static int join_thread(fx_t *f, double deadline, const char *what)
{
    if (!tu_latch_wait(&f->thr_done, deadline))
        fail_msg("deadline of %.0f s passed waiting for %s", deadline, what);
    pthread_join(f->thr, NULL);
    f->thr_started = false;
    return f->thr_rc;
}

static void check_all_stages_empty(seda_bus_t *bus)
{
    int n = seda_bus_stage_count(bus);
    for (int i = 0; i < n; i++) {
        seda_stage_stats s = sstats(seda_bus_stage_at(bus, i));
        if (s.depth != 0 || s.in_flight != 0)
            fail_msg("after shutdown stage '%s' has depth %d in_flight %d",
                     s.name, s.depth, s.in_flight);
    }
}

static void check_done_matches_stats(fx_t *f, long accepted)
{
    seda_bus_stats b = bstats(f->bus);
    long c = outc(f, SEDA_COMPLETED), d = outc(f, SEDA_DEAD_LETTERED),
         x = outc(f, SEDA_DROPPED);
    if (c + d + x != accepted)
        fail_msg("done callbacks: %ld completed + %ld dead + %ld dropped "
                 "!= %ld accepted", c, d, x, accepted);
    assert_int_equal(b.accepted, (uint64_t)accepted);
    assert_int_equal(b.completed, (uint64_t)c);
    assert_int_equal(b.dead_lettered, (uint64_t)d);
    assert_int_equal(b.dropped, (uint64_t)x);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(tu_counter_get(&f->out_bad), 0);
    assert_int_equal(tu_idset_dups(&f->done_seqs), 0);
    check_balance(f->bus);
}

/* Shutdown started while publishing continues: it drains everything
 * accepted, refuses what comes later with SEDA_ECLOSED, returns 0. */
static void test_bus_c4_shutdown_drains_all_accepted(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.concurrency = 2, .capacity = 100000};
    fx_stage(f, "a", 0, tweak_apply, &t);
    fx_stage(f, "b", 1, tweak_apply, &t);
    f->rec[0].spin = 0.001;
    f->rec[1].fail_every = 10; /* dead-lettered, no DLQ */

    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"b"};
    po.slip = slip;
    po.nslip = 1;
    long accepted = 0;
    for (int i = 0; i < 300; i++) {
        assert_int_equal(tu_publish_u64(f->bus, "a", (uint64_t)i, &po), 0);
        accepted++;
    }
    start_thread(f, shutdown_thread, 120);
    int last = 0;
    for (int i = 300; i < 2300; i++) {
        last = tu_publish_u64(f->bus, "a", (uint64_t)i, &po);
        if (last != 0)
            break;
        accepted++;
    }
    if (last != 0 && last != SEDA_ECLOSED)
        fail_msg("publish during shutdown: %d (%s), want SEDA_ECLOSED",
                 last, seda_strerror(last));
    int rc = join_thread(f, 120, "seda_bus_shutdown(120) to drain");
    if (rc != 0)
        fail_msg("seda_bus_shutdown(120) returned %d (%s), want 0", rc,
                 seda_strerror(rc));
    check_done_matches_stats(f, accepted);
    assert_int_equal(outc(f, SEDA_DROPPED), 0);
    assert_true(outc(f, SEDA_DEAD_LETTERED) > 0);
    check_all_stages_empty(f->bus);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), accepted);
    assert_int_equal(publish_u64(f, "a", 1), SEDA_ECLOSED);
    assert_true(seda_bus_closed(f->bus));
    assert_int_equal(seda_bus_shutdown(f->bus, 1), 0); /* first result */
}

/* Shutdown that times out sweeps the rest as dropped: every accepted
 * envelope ends exactly once, all done callbacks have fired when
 * shutdown returns, and nothing is left queued. */
static void test_bus_c4_shutdown_timeout_sweeps_rest(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    tweak_args t = {.concurrency = 1, .capacity = 100000};
    seda_stage_t *a = fx_stage(f, "a", 0, tweak_apply, &t);
    seda_stage_t *b = fx_stage(f, "b", 1, tweak_apply, &t);
    f->rec[0].spin = 0.001;
    f->rec[1].spin = 0.001;
    f->rec[1].fail_every = 10;

    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"b"};
    po.slip = slip;
    po.nslip = 1;
    const long n = 3000;
    for (long i = 0; i < n; i++)
        assert_int_equal(tu_publish_u64(f->bus, "a", (uint64_t)i, &po), 0);
    start_thread(f, shutdown_thread, 0.05);
    int rc = join_thread(f, 60, "seda_bus_shutdown(0.05) to return");
    if (rc != SEDA_ETIMEDOUT)
        fail_msg("seda_bus_shutdown(0.05) with %ld queued 1 ms envelopes "
                 "returned %d (%s), want SEDA_ETIMEDOUT", n, rc,
                 seda_strerror(rc));
    /* No waiting here: every done callback fired before shutdown returned. */
    check_done_matches_stats(f, n);
    assert_true(outc(f, SEDA_DROPPED) > 0);
    check_all_stages_empty(f->bus);
    seda_stage_stats sa = sstats(a), sb = sstats(b);
    if (sa.dropped + sb.dropped != (uint64_t)outc(f, SEDA_DROPPED))
        fail_msg("swept at stop: stage dropped a=%llu + b=%llu != %ld "
                 "done(SEDA_DROPPED) == bus dropped",
                 (unsigned long long)sa.dropped,
                 (unsigned long long)sb.dropped, outc(f, SEDA_DROPPED));
    /* handlers stopped with the pool: calls match the outcomes */
    long calls_b = tu_counter_get(&f->rec[1].calls);
    assert_int_equal(calls_b,
                     outc(f, SEDA_COMPLETED) + outc(f, SEDA_DEAD_LETTERED));
    assert_int_equal(seda_bus_shutdown(f->bus, 10), SEDA_ETIMEDOUT);
    assert_int_equal(tu_counter_get(&f->rec[1].calls), calls_b);
    assert_int_equal(publish_u64(f, "a", 1), SEDA_ECLOSED);
}

/* shutdown_now: the running handler finishes its envelope; everything
 * queued is dropped, never delivered. */
static void test_bus_c4_shutdown_now_drops_queued(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    tweak_args t = {.capacity = 100};
    seda_stage_t *st = fx_stage(f, "g", 0, tweak_apply, &t);
    f->rec[0].gated = true;
    must_publish(f, "g", 0);
    TU_WAIT(tu_counter_wait_ge(&f->rec[0].calls, 1, TU_DEADLINE),
            "envelope 0 in the gated handler");
    for (uint64_t i = 1; i <= 50; i++)
        must_publish(f, "g", i);
    start_thread(f, shutdown_thread, -1); /* shutdown_now */
    double end = seda_now() + TU_DEADLINE;
    while (!seda_bus_closed(f->bus)) {
        if (seda_now() > end)
            fail_msg("seda_bus_closed() not true after shutdown_now began");
        sched_yield();
    }
    tu_gate_open(&f->gate);
    join_thread(f, TU_DEADLINE, "seda_bus_shutdown_now to return");
    check_done_matches_stats(f, 51);
    assert_int_equal(tu_counter_get(&f->rec[0].calls), 1);
    assert_int_equal(outc(f, SEDA_COMPLETED), 1);
    assert_int_equal(outc(f, SEDA_DROPPED), 50);
    assert_int_equal(sstats(st).dropped, 50);
    check_all_stages_empty(f->bus);
}

static void *blocked_publisher(void *arg)
{
    fx_t *f = arg;
    seda_publish_opts po;
    fx_popts(f, &po);
    po.timeout = f->thr_timeout;
    f->thr_rc = tu_publish_u64(f->bus, "g", 99, &po);
    tu_latch_count_down(&f->thr_done);
    return NULL;
}

/* A publisher blocked on a full stage is woken with SEDA_ECLOSED when
 * shutdown begins, even while the stage's handler is still held. */
static void test_bus_c4_shutdown_wakes_blocked_publisher(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    tweak_args t = {.capacity = 1};
    fx_stage(f, "g", 0, tweak_apply, &t);
    f->rec[0].gated = true;
    must_publish(f, "g", 0);
    TU_WAIT(tu_counter_wait_ge(&f->rec[0].calls, 1, TU_DEADLINE),
            "envelope 0 in the gated handler");
    must_publish(f, "g", 1); /* fills capacity 1 */
    start_thread(f, blocked_publisher, 60);

    /* shutdown runs on this thread's helper: reuse a second thread */
    pthread_t sh;
    fx_t shf; /* only thr_* fields are used by shutdown_thread */
    memset(&shf, 0, sizeof shf);
    shf.bus = f->bus;
    shf.thr_timeout = 30;
    tu_latch_init(&shf.thr_done, 1);
    assert_int_equal(pthread_create(&sh, NULL, shutdown_thread, &shf), 0);

    bool woke = tu_latch_wait(&f->thr_done, TU_DEADLINE);
    tu_gate_open(&f->gate); /* let shutdown finish either way */
    if (!tu_latch_wait(&shf.thr_done, 60))
        fail_msg("seda_bus_shutdown(30) did not return");
    pthread_join(sh, NULL);
    tu_counter_destroy(&shf.thr_done);
    if (!woke)
        fail_msg("publisher blocked on a full stage was not woken by "
                 "shutdown within %.0f s", TU_DEADLINE);
    int prc = join_thread(f, TU_DEADLINE, "the publisher");
    if (prc != SEDA_ECLOSED)
        fail_msg("blocked publisher got %d (%s), want SEDA_ECLOSED", prc,
                 seda_strerror(prc));
    assert_string_equal(seda_strerror(SEDA_ECLOSED), "closed");
    assert_int_equal(shf.thr_rc, 0);
    check_done_matches_stats(f, 2);
    assert_int_equal(outc(f, SEDA_COMPLETED), 2);
}

/* ====================================================================
 * C6: no leak across lifecycles
 * ==================================================================== */

static bool c6_ack(seda_env_t *env, void *ud)
{
    (void)ud;
    return tu_env_u64(env) % 9 != 0;
}

static bool c6_ack_all(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    return true;
}

static void c6_lifecycle(int i, int baseline_threads)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 3;
    bo.dead_letter = "dlq";
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    const char *names[] = {"a", "b", "dlq"};
    for (int s = 0; s < 3; s++) {
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = names[s];
        so.capacity = 256;
        seda_stage_t *st = NULL;
        assert_int_equal(seda_stage_add(bus, &so, &st, NULL, 0), 0);
        assert_true(seda_stage_consume(st, s == 2 ? c6_ack_all : c6_ack,
                                       NULL) >= 0);
    }
    if (baseline_threads >= 0) {
        int now = tu_thread_count();
        if (now < baseline_threads + 3)
            fail_msg("lifecycle %d: %d threads with 3 workers, baseline %d",
                     i, now, baseline_threads);
    }
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    const char *slip[] = {"b"};
    po.slip = slip;
    po.nslip = 1;
    for (uint64_t k = 0; k < 100; k++)
        assert_int_equal(tu_publish_u64(bus, "a", k, &po), 0);
    switch (i % 3) {
    case 0:
        assert_int_equal(seda_bus_shutdown(bus, 30), 0);
        break;
    case 1:
        seda_bus_shutdown_now(bus);
        break;
    default:
        break; /* seda_bus_free shuts down itself */
    }
    seda_bus_free(bus);
}

static void test_bus_c6_no_leak_across_lifecycles(void **state)
{
    (void)state;
    c6_lifecycle(0, -1); /* warm-up: one-time lazy initialisation */
    int threads = tu_thread_count();
    int fds = tu_fd_count();
    assert_true(threads > 0);
    assert_true(fds > 0);
    for (int i = 0; i < 20; i++) {
        c6_lifecycle(i, threads);
        if (!tu_wait_threads(threads, TU_DEADLINE))
            fail_msg("lifecycle %d: %d threads after seda_bus_free, "
                     "baseline %d", i, tu_thread_count(), threads);
        int nf = tu_fd_count();
        if (nf != fds)
            fail_msg("lifecycle %d: %d open fds after seda_bus_free, "
                     "baseline %d", i, nf, fds);
    }
}

/* ====================================================================
 * C13: pause, resume, closed
 * ==================================================================== */

static void test_bus_c13_pause_refuses_inflight_completes(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    seda_stage_t *a = fx_stage(f, "a", 0, NULL, NULL);
    fx_stage(f, "b", 1, NULL, NULL);
    f->rec[0].gated = true;
    seda_publish_opts po;
    fx_popts(f, &po);
    const char *slip[] = {"b"};
    po.slip = slip;
    po.nslip = 1;
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(tu_publish_u64(f->bus, "a", i, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->rec[0].calls, 1, TU_DEADLINE),
            "envelope 0 in the gated handler");

    assert_false(seda_bus_paused(f->bus));
    seda_bus_pause(f->bus);
    assert_true(seda_bus_paused(f->bus));
    assert_true(bstats(f->bus).paused);
    assert_int_equal(publish_u64(f, "a", 50), SEDA_EPAUSED);
    uint64_t v = 51;
    assert_int_equal(seda_stage_publish(a, &v, sizeof v, NULL), SEDA_EPAUSED);
    const void *pl[] = {&v};
    size_t ln[] = {sizeof v};
    int err = 0;
    assert_int_equal(seda_publish_many(f->bus, "a", pl, ln, 1, NULL, &err),
                     0);
    assert_int_equal(err, SEDA_EPAUSED);
    assert_string_equal(seda_strerror(SEDA_EPAUSED), "paused");

    /* accepted work, hops included, completes while paused */
    tu_gate_open(&f->gate);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 4, TU_DEADLINE),
            "4 accepted envelopes to complete while paused");
    wait_idle(f);
    assert_true(seda_bus_paused(f->bus));
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(tu_idset_count(&f->rec[1].ids, i), 1);
    assert_int_equal(tu_idset_count(&f->rec[0].ids, 50), 0);
    assert_int_equal(tu_idset_count(&f->rec[0].ids, 51), 0);
    assert_int_equal(bstats(f->bus).accepted, 4);

    seda_bus_resume(f->bus);
    assert_false(seda_bus_paused(f->bus));
    assert_false(bstats(f->bus).paused);
    assert_int_equal(tu_publish_u64(f->bus, "a", 60, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 5, TU_DEADLINE),
            "the envelope published after resume to complete");
    wait_idle(f);
    assert_int_equal(tu_idset_count(&f->rec[1].ids, 60), 1);
    check_balance(f->bus);
}

static void test_bus_c13_closed_after_shutdown(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    seda_stage_t *a = fx_stage(f, "a", 0, NULL, NULL);
    must_publish(f, "a", 1);
    assert_false(seda_bus_closed(f->bus));
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    assert_int_equal(outc(f, SEDA_COMPLETED), 1);
    assert_true(seda_bus_closed(f->bus));
    assert_true(bstats(f->bus).closed);
    assert_int_equal(publish_u64(f, "a", 2), SEDA_ECLOSED);
    uint64_t v = 3;
    assert_int_equal(seda_stage_publish(a, &v, sizeof v, NULL),
                     SEDA_ECLOSED);
    const void *pl[] = {&v};
    size_t ln[] = {sizeof v};
    int err = 0;
    assert_int_equal(seda_publish_many(f->bus, "a", pl, ln, 1, NULL, &err),
                     0);
    assert_int_equal(err, SEDA_ECLOSED);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "late";
    assert_int_equal(seda_stage_add(f->bus, &so, NULL, NULL, 0),
                     SEDA_ECLOSED);
    /* resume does not reopen a closed bus */
    seda_bus_resume(f->bus);
    assert_int_equal(publish_u64(f, "a", 4), SEDA_ECLOSED);
    assert_int_equal(seda_bus_wait_idle(f->bus, 1), 0);
    assert_int_equal(seda_bus_shutdown(f->bus, 1), 0);
    seda_bus_shutdown_now(f->bus); /* harmless after shutdown */
    assert_int_equal(bstats(f->bus).accepted, 1);
    check_balance(f->bus);
}

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)


int main(void)
{
    const struct CMUnitTest tests[] = {
        FX(test_bus_c2_nack_until_attempt_2_delivered_once),
        FX(test_bus_c2_nack_until_last_attempt_delivered_once),
        FX(test_bus_c2_always_nack_dead_letters),
        FX(test_bus_c2_bus_dead_letter_is_fallback),
        FX(test_bus_c2_no_dlq_discards_but_counts),
        FX(test_bus_c2_no_consumers_dead_letters),
        FX(test_bus_c2_env_fail_is_a_counted_nack),
        FX(test_bus_c3_failing_handler_isolated),
        FX(test_bus_c4_shutdown_drains_all_accepted),
        FX(test_bus_c4_shutdown_timeout_sweeps_rest),
        FX(test_bus_c4_shutdown_now_drops_queued),
        FX(test_bus_c4_shutdown_wakes_blocked_publisher),
        cmocka_unit_test(test_bus_c6_no_leak_across_lifecycles),
        FX(test_bus_c13_pause_refuses_inflight_completes),
        FX(test_bus_c13_closed_after_shutdown),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("bus", tests, NULL, NULL);
}
