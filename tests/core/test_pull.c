/* SPDX-License-Identifier: MIT */
/*
 * test_pull.c.new -- the pull model through the public C API: receive on an
 * empty stage, misuse, ack routing (next hop or completion), nack (retry at
 * the head, dead letter by max_attempts), changes made through
 * seda_lease_env, ack_timeout expiry (a nack; late settles return
 * SEDA_ETIMEDOUT). No sleeps order events; short ack timeouts only make
 * expiry happen.
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
#include "pull_fixture.h"

/* ====================================================================
 * receive: empty stage, misuse
 * ==================================================================== */

static void test_pull_receive_empty_times_out(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    seda_lease_t *l = (seda_lease_t *)(uintptr_t)0x1;
    assert_int_equal(seda_stage_receive(f->p, 0, &l), SEDA_ETIMEDOUT);
    assert_int_equal(seda_stage_receive(f->p, 0.02, &l), SEDA_ETIMEDOUT);
    assert_ptr_equal(l, (seda_lease_t *)(uintptr_t)0x1); /* untouched */
    assert_string_equal(seda_strerror(SEDA_ETIMEDOUT), "timeout");
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(s.depth, 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

static void test_pull_receive_non_pull_stage_einval(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    seda_lease_t *l = NULL;
    assert_int_equal(seda_stage_receive(f->sink, 0, &l), SEDA_EINVAL);
    assert_int_equal(seda_stage_receive(f->sink, 0.01, &l), SEDA_EINVAL);
    assert_null(l);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

static bool never_called(seda_env_t *env, void *ud)
{
    (void)env;
    atomic_fetch_add_explicit((atomic_int *)ud, 1, memory_order_relaxed);
    return true;
}

static void test_pull_consume_on_pull_stage_einval(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    atomic_int calls = 0;
    assert_int_equal(seda_stage_consume(f->p, never_called, &calls),
                     SEDA_EINVAL);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.consumers, 0);
    /* The envelope waits for a receiver; it is neither handled nor
     * dead-lettered as "no_consumers". */
    assert_int_equal(pf_publish(f, 7, NULL, 0), 0);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.depth, 1);
    assert_int_equal(s.dead_lettered, 0);
    assert_int_equal(tu_counter_get(&f->dlq_calls), 0);
    seda_lease_t *l = recv_ok(f->p);
    uint64_t v = 0;
    assert_true(lease_read(l, &v, NULL));
    assert_int_equal(v, 7);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(atomic_load(&calls), 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

static void test_pull_stage_add_validates_ack_timeout(void **state)
{
    (void)state;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(NULL, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    assert_false(so.pull);
    assert_true(so.ack_timeout == 30.0);
    so.name = "p";
    so.pull = true;
    char err[256] = "";
    seda_stage_t *st = NULL;
    so.ack_timeout = 0;
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err),
                     SEDA_EINVAL);
    assert_non_null(strstr(err, "ack_timeout"));
    so.ack_timeout = -1;
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err),
                     SEDA_EINVAL);
    assert_null(seda_bus_stage(bus, "p"));
    so.ack_timeout = 0.5;
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err), 0);
    assert_ptr_equal(seda_bus_stage(bus, "p"), st);
    assert_int_equal(seda_bus_shutdown(bus, TU_DEADLINE), 0);
    seda_bus_free(bus);
}

/* ====================================================================
 * ack
 * ==================================================================== */

static void test_pull_ack_completes_itinerary(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 42, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    seda_env_t *env = seda_lease_env(l);
    assert_non_null(env);
    assert_int_equal(tu_env_u64(env), 42);
    assert_int_equal(seda_env_attempts(env), 1);
    assert_string_equal(seda_env_to(env), "p");
    assert_string_equal(seda_env_header(env, "x"), "orig");
    assert_true(seda_env_has_done(env));
    seda_lease_release_env(l);

    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.in_flight, 1);
    assert_int_equal(s.depth, 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 0);

    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    assert_int_equal(tu_idset_count(&f->done_ids, 42), 1);
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.completed, 1);
    assert_int_equal(s.nacked, 0);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_bus_stats b;
    check_accounting(f->bus, &b);
    assert_int_equal(b.accepted, 1);
    assert_int_equal(b.completed, 1);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    assert_int_equal(tu_counter_get(&f->done_dropped), 0);
    pf_free(f);
}

static void test_pull_ack_routes_next_hop(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    static const char *const slip[] = { "sink" };
    assert_int_equal(pf_publish(f, 5, slip, 1), 0);
    seda_lease_t *l = recv_ok(f->p);
    assert_int_equal(seda_lease_ack(l), 0);
    TU_WAIT(tu_counter_wait_ge(&f->done_completed, 1, TU_DEADLINE),
            "completion after the sink hop");
    assert_int_equal(tu_counter_get(&f->sink_calls), 1);
    assert_int_equal(tu_idset_count(&f->sink_ids, 5), 1);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.completed, 0);
    seda_stage_stats_get(f->sink, &s);
    assert_int_equal(s.completed, 1);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    check_accounting(f->bus, NULL);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* pull -> pull: the second hop is received as attempt 1. */
static void test_pull_ack_to_another_pull_stage(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 3, 0, SEDA_POLICY_BLOCK);
    char err[256];
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "p2";
    so.pull = true;
    seda_stage_t *p2 = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &p2, err, sizeof err), 0);
    static const char *const slip[] = { "p2" };
    assert_int_equal(pf_publish(f, 9, slip, 1), 0);
    seda_lease_t *l = recv_ok(f->p);
    assert_int_equal(seda_lease_nack(l), 0);            /* attempt 1 fails */
    l = recv_ok(f->p);
    int att = 0;
    assert_true(lease_read(l, NULL, &att));
    assert_int_equal(att, 2);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 0);
    seda_lease_t *l2 = recv_ok(p2);
    uint64_t v = 0;
    assert_true(lease_read(l2, &v, &att));
    assert_int_equal(v, 9);
    assert_int_equal(att, 1);
    assert_int_equal(seda_lease_ack(l2), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    seda_stage_stats s;
    seda_stage_stats_get(p2, &s);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.completed, 1);
    check_accounting(f->bus, NULL);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* Changes made through seda_lease_env travel with the ack. */
static void test_pull_lease_env_changes_travel_with_ack(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 1, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    seda_env_t *env = seda_lease_env(l);
    assert_non_null(env);
    uint64_t nv = 77;
    assert_int_equal(seda_env_set_payload(env, &nv, sizeof nv), 0);
    assert_int_equal(seda_env_set_header(env, "x", "changed"), 0);
    static const char *const fw[] = { "sink" };
    assert_int_equal(seda_env_forward(env, fw, 1), 0);
    seda_lease_release_env(l);
    assert_int_equal(seda_lease_ack(l), 0);
    TU_WAIT(tu_counter_wait_ge(&f->sink_calls, 1, TU_DEADLINE), "sink");
    TU_WAIT(tu_counter_wait_ge(&f->done_completed, 1, TU_DEADLINE),
            "completion");
    assert_int_equal(tu_idset_count(&f->sink_ids, 77), 1);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->sink_hdr, "changed");
    assert_int_equal(f->sink_attempts, 1);
    assert_int_equal(f->sink_slip, 0);
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* ====================================================================
 * nack
 * ==================================================================== */

static void test_pull_nack_retries_at_head_then_dead_letters(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 3, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 1, NULL, 0), 0);
    assert_int_equal(pf_publish(f, 2, NULL, 0), 0);
    for (int a = 1; a <= 3; a++) {
        seda_lease_t *l = recv_ok(f->p);
        uint64_t v = 0;
        int att = 0;
        assert_true(lease_read(l, &v, &att));
        assert_int_equal(v, 1);              /* retried at the head */
        assert_int_equal(att, a);
        assert_int_equal(seda_lease_nack(l), 0);
    }
    TU_WAIT(tu_counter_wait_ge(&f->dlq_calls, 1, TU_DEADLINE),
            "dead letter at dlq");
    assert_int_equal(tu_idset_count(&f->dlq_ids, 1), 1);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->dlq_reason, "max_attempts");
    assert_string_equal(f->dlq_from, "p");
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(tu_counter_get(&f->done_dead), 1);
    assert_int_equal(tu_counter_get(&f->done_completed), 0);

    seda_lease_t *l = recv_ok(f->p);
    uint64_t v = 0;
    int att = 0;
    assert_true(lease_read(l, &v, &att));
    assert_int_equal(v, 2);
    assert_int_equal(att, 1);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(seda_stage_receive(f->p, 0.01, &l), SEDA_ETIMEDOUT);

    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.nacked, 3);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);
    seda_bus_stats b;
    check_accounting(f->bus, &b);
    assert_int_equal(b.completed, 1);
    assert_int_equal(b.dead_lettered, 1);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    assert_int_equal(tu_counter_get(&f->done_dead), 1);
    pf_free(f);
}

/* A nacked envelope is the same envelope when received again. */
static void test_pull_nack_then_receive_again_same_envelope(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 2, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 11, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    char id1[SEDA_ID_MAX], id2[SEDA_ID_MAX];
    seda_env_t *env = seda_lease_env(l);
    assert_non_null(env);
    seda_env_id(env, id1);
    seda_lease_release_env(l);
    assert_int_equal(seda_lease_nack(l), 0);
    l = recv_ok(f->p);
    env = seda_lease_env(l);
    assert_non_null(env);
    seda_env_id(env, id2);
    assert_int_equal(seda_env_attempts(env), 2);
    seda_lease_release_env(l);
    assert_string_equal(id1, id2);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* Receive takes room: a full pull stage admits again after a receive. */
static void test_pull_receive_frees_room(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 1, SEDA_POLICY_REJECT);
    assert_int_equal(pf_publish(f, 1, NULL, 0), 0);
    assert_int_equal(pf_publish(f, 2, NULL, 0), SEDA_EFULL);
    seda_lease_t *l = recv_ok(f->p);
    assert_int_equal(pf_publish(f, 2, NULL, 0), 0);
    assert_int_equal(seda_lease_ack(l), 0);
    l = recv_ok(f->p);
    uint64_t v = 0;
    assert_true(lease_read(l, &v, NULL));
    assert_int_equal(v, 2);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 2);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* ====================================================================
 * ack_timeout
 * ==================================================================== */

/* An unsettled lease expires (a nack): the envelope comes back with
 * attempts + 1; the late ack and lease_env see the expiry. */
static void test_pull_ack_timeout_expiry_counts_as_nack(void **state)
{
    (void)state;
    pf_t *f = pf_new(0.05, 100, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 3, NULL, 0), 0);
    seda_lease_t *l1 = recv_ok(f->p);
    /* Waits for l1 to expire, then takes the retried envelope. */
    seda_lease_t *l2 = recv_ok(f->p);
    uint64_t v = 0;
    int att = 0;
    bool read = lease_read(l2, &v, &att);
    assert_null(seda_lease_env(l1));                 /* expired */
    assert_int_equal(seda_lease_ack(l1), SEDA_ETIMEDOUT);
    assert_int_equal(tu_counter_get(&f->done_completed), 0);
    int expired = 1;
    if (read) {
        assert_int_equal(v, 3);
        assert_int_equal(att, 2);
    }
    /* l2 may expire too on a slow machine: then keep receiving; the
     * envelope must end exactly once and every expiry count as a nack. */
    int rc = seda_lease_ack(l2);
    while (rc != 0) {
        assert_int_equal(rc, SEDA_ETIMEDOUT);
        expired++;
        assert_true(expired < 100);
        seda_lease_t *l = recv_ok(f->p);
        rc = seda_lease_ack(l);
    }
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.nacked, (uint64_t)expired);
    assert_int_equal(s.delivered, 1);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    assert_int_equal(tu_counter_get(&f->done_completed), 1);
    assert_int_equal(tu_counter_get(&f->done_dead) +
                     tu_counter_get(&f->done_dropped), 0);
    assert_int_equal(tu_idset_count(&f->done_ids, 3), 1);
    pf_free(f);
}

/* A settle after the deadline is refused even when nothing (no receive,
 * stats or lease_env call) noticed the expiry first: the late ack returns
 * SEDA_ETIMEDOUT and the envelope is nacked (here: dead-lettered), never
 * completed; a late nack returns SEDA_ETIMEDOUT too and still nacks. */
static void test_pull_late_settle_refused_unnoticed(void **state)
{
    (void)state;
    for (int nack = 0; nack < 2; nack++) {
        pf_t *f = pf_new(0.05, 1, 0, SEDA_POLICY_BLOCK);
        assert_int_equal(pf_publish(f, 9, NULL, 0), 0);
        seda_lease_t *l = recv_ok(f->p);
        /* Let the lease run out without touching the stage: the wait is
         * for the clock itself, no synchronisation. */
        double past = seda_now() + 0.05 + 0.05;
        while (seda_now() < past)
            ;
        assert_int_equal(nack ? seda_lease_nack(l) : seda_lease_ack(l),
                         SEDA_ETIMEDOUT);
        TU_WAIT(tu_counter_wait_ge(&f->dlq_calls, 1, TU_DEADLINE), "dlq");
        assert_int_equal(tu_counter_get(&f->done_completed), 0);
        assert_int_equal(tu_counter_get(&f->done_dead), 1);
        assert_int_equal(tu_counter_get(&f->sink_calls), 0);
        seda_stage_stats s;
        seda_stage_stats_get(f->p, &s);
        assert_int_equal(s.nacked, 1);
        assert_int_equal(s.in_flight, 0);
        assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
        pf_free(f);
    }
}

/* With max_attempts 1 an expired lease dead-letters; a late nack returns
 * SEDA_ETIMEDOUT and changes nothing. */
static void test_pull_ack_timeout_dead_letters(void **state)
{
    (void)state;
    pf_t *f = pf_new(0.05, 1, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 4, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    /* Receive checks expiry: poll with short receives until the dead
     * letter shows up (deadline TU_DEADLINE). */
    double end = seda_now() + TU_DEADLINE;
    while (tu_counter_get(&f->done_dead) == 0 && seda_now() < end) {
        seda_lease_t *x = NULL;
        int rc = seda_stage_receive(f->p, 0.01, &x);
        assert_int_equal(rc, SEDA_ETIMEDOUT);
    }
    assert_int_equal(tu_counter_get(&f->done_dead), 1);
    TU_WAIT(tu_counter_wait_ge(&f->dlq_calls, 1, TU_DEADLINE), "dlq");
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->dlq_reason, "max_attempts");
    assert_string_equal(f->dlq_from, "p");
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(seda_lease_nack(l), SEDA_ETIMEDOUT);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.nacked, 1);
    assert_int_equal(s.dead_lettered, 1);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_bus_stats b;
    check_accounting(f->bus, &b);
    assert_int_equal(b.dead_lettered, 1);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    assert_int_equal(tu_counter_get(&f->done_dead), 1);
    pf_free(f);
}

/* Stats check expiry too: with no receive and no idle check, polling the
 * stage's stats alone sees the lease expire. */
static void test_pull_ack_timeout_seen_by_stats(void **state)
{
    (void)state;
    pf_t *f = pf_new(0.05, 2, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 6, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    bool ok = tu_stage_wait(f->p, tu_pred_in_flight_eq, 0, TU_DEADLINE);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    /* Settle before asserting so the bus can be freed either way. */
    int rc = seda_lease_ack(l);
    seda_bus_shutdown_now(f->bus);
    pf_free(f);
    if (!ok)
        fail_msg("stats never expired the lease: in_flight %d, nacked %llu,"
                 " depth %d after %.0f s (ack_timeout 0.05 s)", s.in_flight,
                 (unsigned long long)s.nacked, s.depth, TU_DEADLINE);
    assert_int_equal(rc, SEDA_ETIMEDOUT);
    assert_int_equal(s.nacked, 1);
    assert_int_equal(s.depth, 1);
}



int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pull_receive_empty_times_out),
        cmocka_unit_test(test_pull_receive_non_pull_stage_einval),
        cmocka_unit_test(test_pull_consume_on_pull_stage_einval),
        cmocka_unit_test(test_pull_stage_add_validates_ack_timeout),
        cmocka_unit_test(test_pull_ack_completes_itinerary),
        cmocka_unit_test(test_pull_ack_routes_next_hop),
        cmocka_unit_test(test_pull_ack_to_another_pull_stage),
        cmocka_unit_test(test_pull_lease_env_changes_travel_with_ack),
        cmocka_unit_test(test_pull_nack_retries_at_head_then_dead_letters),
        cmocka_unit_test(test_pull_nack_then_receive_again_same_envelope),
        cmocka_unit_test(test_pull_receive_frees_room),
        cmocka_unit_test(test_pull_ack_timeout_expiry_counts_as_nack),
        cmocka_unit_test(test_pull_ack_timeout_dead_letters),
        cmocka_unit_test(test_pull_late_settle_refused_unnoticed),
        cmocka_unit_test(test_pull_ack_timeout_seen_by_stats),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("pull", tests, NULL, NULL);
}
