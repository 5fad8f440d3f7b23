/* SPDX-License-Identifier: MIT */
/*
 * test_pull.c -- the pull model through the public C API.
 *
 * A pull stage has no consumers: receivers take envelopes with
 * seda_stage_receive and settle the lease with seda_lease_ack or
 * seda_lease_nack.  Covered here: receive on an empty stage, misuse
 * (non-pull stage, consumers on a pull stage), ack routing (next hop or
 * completion), nack (retry at the head, dead letter by max_attempts),
 * changes made through seda_lease_env, ack_timeout expiry (counts as a
 * nack, late settles return SEDA_ETIMEDOUT), idleness, shutdown (blocked
 * receivers woken, outstanding leases swept) and concurrent receivers
 * (every envelope handed out once per attempt and acked exactly once).
 *
 * No sleeps order events: receivers and consumers record into counters and
 * id sets, the test thread waits on them with deadlines.  Short ack
 * timeouts only make expiry happen; assertions are about order and counts.
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

static bool pf_sink(seda_env_t *env, void *ud)
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

static bool pf_dlq(seda_env_t *env, void *ud)
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

static void pf_done(seda_env_t *env, int outcome, void *ud)
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

static pf_t *pf_new(double ack_timeout, int max_attempts, int capacity,
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

static void pf_free(pf_t *f)
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
static int pf_publish(pf_t *f, uint64_t v, const char *const *slip, int nslip)
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
static bool lease_read(seda_lease_t *l, uint64_t *v, int *attempts)
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

static seda_lease_t *recv_ok(seda_stage_t *st)
{
    seda_lease_t *l = NULL;
    int rc = seda_stage_receive(st, TU_DEADLINE, &l);
    if (rc != 0)
        fail_msg("seda_stage_receive: expected 0, got %d (%s)", rc,
                 seda_strerror(rc));
    assert_non_null(l);
    return l;
}

static void check_accounting(seda_bus_t *bus, seda_bus_stats *out)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.accepted,
                     b.completed + b.dead_lettered + b.dropped + b.in_system);
    if (out)
        *out = b;
}

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

/* ====================================================================
 * idleness
 * ==================================================================== */

/* Queued envelopes in a pull stage do not keep the bus busy. */
static void test_pull_wait_idle_ignores_queued(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(pf_publish(f, i, NULL, 0), 0);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    seda_bus_stats b;
    check_accounting(f->bus, &b);
    assert_int_equal(b.in_system, 3);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.depth, 3);
    seda_bus_shutdown_now(f->bus);
    check_accounting(f->bus, &b);
    assert_int_equal(b.dropped, 3);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(tu_counter_get(&f->done_dropped), 3);
    pf_free(f);
}

/* An outstanding lease keeps the bus busy until it is settled. */
static void test_pull_wait_idle_waits_for_lease(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 1, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    assert_int_equal(seda_bus_wait_idle(f->bus, 0), SEDA_ETIMEDOUT);
    assert_int_equal(seda_bus_wait_idle(f->bus, 0.02), SEDA_ETIMEDOUT);
    assert_int_equal(seda_lease_ack(l), 0);
    assert_int_equal(seda_bus_wait_idle(f->bus, TU_DEADLINE), 0);
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    pf_free(f);
}

/* ... or until it expires: a blocked seda_bus_wait_idle must notice the
 * expiry and return 0 (the retried envelope is queued, not in flight). */
static void test_pull_wait_idle_returns_after_lease_expires(void **state)
{
    (void)state;
    pf_t *f = pf_new(0.1, 3, 0, SEDA_POLICY_BLOCK);
    assert_int_equal(pf_publish(f, 1, NULL, 0), 0);
    seda_lease_t *l = recv_ok(f->p);
    double t0 = seda_now();
    int rc = seda_bus_wait_idle(f->bus, TU_DEADLINE);
    double waited = seda_now() - t0;
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    int arc = seda_lease_ack(l);
    seda_bus_shutdown_now(f->bus);
    pf_free(f);
    if (rc != 0)
        fail_msg("seda_bus_wait_idle(%.0f) with one lease (ack_timeout "
                 "0.1 s): expected 0 once the lease expired, got %d after "
                 "%.2f s (in_flight %d, nacked %llu, depth %d)",
                 TU_DEADLINE, rc, waited, s.in_flight,
                 (unsigned long long)s.nacked, s.depth);
    assert_int_equal(arc, SEDA_ETIMEDOUT);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(s.nacked, 1);
    assert_int_equal(s.depth, 1);
}

/* ====================================================================
 * shutdown
 * ==================================================================== */

typedef struct blocked {
    seda_stage_t *st;
    tu_counter entered;
    tu_latch finished;
    atomic_int rc[4];
} blocked_t;

typedef struct blocked_arg {
    blocked_t *b;
    int i;
} blocked_arg_t;

static void *blocked_receiver(void *arg)
{
    blocked_arg_t *a = arg;
    tu_counter_add(&a->b->entered, 1);
    seda_lease_t *l = NULL;
    int rc = seda_stage_receive(a->b->st, 3 * TU_DEADLINE, &l);
    if (rc == 0)
        seda_lease_nack(l);
    atomic_store(&a->b->rc[a->i], rc);
    tu_latch_count_down(&a->b->finished);
    return NULL;
}

static void test_pull_shutdown_wakes_blocked_receivers(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    blocked_t b;
    b.st = f->p;
    tu_counter_init(&b.entered);
    tu_latch_init(&b.finished, 4);
    pthread_t th[4];
    blocked_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        atomic_init(&b.rc[i], 1);
        args[i].b = &b;
        args[i].i = i;
        assert_int_equal(pthread_create(&th[i], NULL, blocked_receiver,
                                        &args[i]), 0);
    }
    TU_WAIT(tu_counter_wait_ge(&b.entered, 4, TU_DEADLINE),
            "receivers started");
    /* Whether a receiver is already blocked or not, it must see closed. */
    assert_int_equal(seda_bus_shutdown(f->bus, TU_DEADLINE), 0);
    bool ok = tu_latch_wait(&b.finished, TU_DEADLINE);
    if (!ok) {
        /* Do not leave threads blocked on a freed bus. */
        fail_msg("receivers not woken by shutdown within %.0f s",
                 TU_DEADLINE);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(atomic_load(&b.rc[i]), SEDA_ECLOSED);
    }
    seda_lease_t *l = NULL;
    assert_int_equal(seda_stage_receive(f->p, 0, &l), SEDA_ECLOSED);
    assert_int_equal(seda_stage_receive(f->p, 1, &l), SEDA_ECLOSED);
    tu_counter_destroy(&b.entered);
    tu_counter_destroy(&b.finished);
    pf_free(f);
}

static void test_pull_shutdown_sweeps_leases(void **state)
{
    (void)state;
    pf_t *f = pf_new(0, 1, 0, SEDA_POLICY_BLOCK);
    for (uint64_t i = 1; i <= 3; i++)
        assert_int_equal(pf_publish(f, i, NULL, 0), 0);
    seda_lease_t *l1 = recv_ok(f->p);
    seda_lease_t *l2 = recv_ok(f->p);
    uint64_t v1 = 0, v2 = 0;
    assert_true(lease_read(l1, &v1, NULL));
    assert_true(lease_read(l2, &v2, NULL));
    /* Leases (ack_timeout 30 s) keep it from draining in 0.05 s. */
    assert_int_equal(seda_bus_shutdown(f->bus, 0.05), SEDA_ETIMEDOUT);
    assert_int_equal(tu_counter_get(&f->done_dropped), 3);
    assert_int_equal(tu_idset_count(&f->done_ids, v1), 1);
    assert_int_equal(tu_idset_count(&f->done_ids, v2), 1);
    assert_int_equal(tu_idset_size(&f->done_ids), 3);
    assert_null(seda_lease_env(l1));
    assert_int_equal(seda_lease_ack(l1), SEDA_ETIMEDOUT);
    assert_int_equal(seda_lease_nack(l2), SEDA_ETIMEDOUT);
    assert_int_equal(tu_counter_get(&f->done_completed), 0);
    assert_int_equal(tu_counter_get(&f->done_dead), 0);
    seda_stage_stats s;
    seda_stage_stats_get(f->p, &s);
    assert_int_equal(s.dropped, 3);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.delivered, 0);
    assert_int_equal(s.nacked, 0);
    seda_bus_stats b;
    check_accounting(f->bus, &b);
    assert_int_equal(b.dropped, 3);
    assert_int_equal(b.in_system, 0);
    pf_free(f);
}

/* ====================================================================
 * concurrent receivers
 * ==================================================================== */

#define CR_THREADS 4

typedef struct cr {
    seda_bus_t *bus;
    seda_stage_t *p;
    int n;                      /* envelopes */
    double ack_timeout;         /* < 1: some leases are held late */
    atomic_uchar *holding;      /* [n]: a live lease holds value i */
    tu_idset handed;            /* (value << 16 | attempt) per receive */
    tu_idset acked;             /* values whose ack returned 0 */
    tu_counter nacks;           /* explicit nacks returning 0 */
    tu_counter expired;         /* settles returning SEDA_ETIMEDOUT */
    tu_counter unread;          /* expired before it could be read */
    tu_counter acks;            /* acks returning 0 */
    tu_counter done_completed;
    tu_counter done_other;
    tu_idset done_ids;
    atomic_int overlap;         /* value held by two live leases */
    atomic_int bad_rc;          /* unexpected return codes */
    atomic_int last_bad_rc;
    atomic_int published;
    tu_latch finished;
    double deadline;
} cr_t;

typedef struct cr_arg {
    cr_t *c;
    unsigned seed;
} cr_arg_t;

static void cr_done(seda_env_t *env, int outcome, void *ud)
{
    cr_t *c = ud;
    tu_idset_add(&c->done_ids, tu_env_u64(env));
    tu_counter_add(outcome == SEDA_COMPLETED ? &c->done_completed
                                             : &c->done_other, 1);
}

static void cr_bad(cr_t *c, int rc)
{
    atomic_fetch_add(&c->bad_rc, 1);
    atomic_store(&c->last_bad_rc, rc);
}

static void *cr_publisher(void *arg)
{
    cr_t *c = arg;
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = cr_done;
    o.done_ud = c;
    o.timeout = TU_DEADLINE;
    for (int i = 0; i < c->n; i++) {
        int rc = tu_publish_u64(c->bus, "p", (uint64_t)i, &o);
        if (rc != 0) {
            cr_bad(c, rc);
            break;
        }
        atomic_fetch_add(&c->published, 1);
    }
    return NULL;
}

/* Settle l for value v: true to ack. */
static void cr_settle(cr_t *c, seda_lease_t *l, uint64_t v, bool ack,
                      bool track_holding)
{
    if (track_holding)
        atomic_store(&c->holding[v], 0);
    int rc = ack ? seda_lease_ack(l) : seda_lease_nack(l);
    if (rc == 0) {
        if (ack) {
            tu_idset_add(&c->acked, v);
            tu_counter_add(&c->acks, 1);
        } else {
            tu_counter_add(&c->nacks, 1);
        }
    } else if (rc == SEDA_ETIMEDOUT) {
        tu_counter_add(&c->expired, 1);
    } else {
        cr_bad(c, rc);
    }
}

static void *cr_receiver(void *arg)
{
    cr_arg_t *a = arg;
    cr_t *c = a->c;
    unsigned seed = a->seed;
    bool late_mode = c->ack_timeout < 1.0;
    seda_lease_t *held = NULL;      /* late mode: one lease set aside */
    uint64_t held_v = 0;
    while (tu_counter_get(&c->acks) < c->n) {
        if (seda_now() > c->deadline)
            break;
        seda_lease_t *l = NULL;
        int rc = seda_stage_receive(c->p, 0.02, &l);
        if (rc == SEDA_ETIMEDOUT)
            continue;
        if (rc != 0) {
            cr_bad(c, rc);
            break;
        }
        uint64_t v = UINT64_MAX;
        int att = 0;
        if (!lease_read(l, &v, &att)) {
            /* Expired between receive and read: only in late mode. */
            if (!late_mode)
                cr_bad(c, 1000);
            tu_counter_add(&c->unread, 1);
            cr_settle(c, l, 0, true, false);
            continue;
        }
        if (v >= (uint64_t)c->n || att < 1 || att > 0xffff) {
            cr_bad(c, 1001);
            seda_lease_nack(l);
            continue;
        }
        if (tu_idset_add(&c->handed, (v << 16) | (uint64_t)att) != 1)
            cr_bad(c, 1002);                /* same attempt handed twice */
        if (!late_mode) {
            unsigned char z = 0;
            if (!atomic_compare_exchange_strong(&c->holding[v], &z, 1))
                atomic_fetch_add(&c->overlap, 1);
        }
        unsigned r = (unsigned)rand_r(&seed);
        if (late_mode && !held && r % 8 == 0) {
            held = l;                       /* settle after the next one */
            held_v = v;
            continue;
        }
        cr_settle(c, l, v, r % 4 != 0, !late_mode);
        if (held) {
            /* A slow receiver: usually outlives the ack_timeout (a cost
             * that makes expiry likely, not an ordering device). */
            if (r % 16 < 8)
                tu_spin(c->ack_timeout * 1.5);
            cr_settle(c, held, held_v, true, false);
            held = NULL;
        }
    }
    if (held)
        cr_settle(c, held, held_v, true, false);
    tu_latch_count_down(&c->finished);
    return NULL;
}

static void cr_run(double ack_timeout, int n)
{
    cr_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->n = n;
    c->ack_timeout = ack_timeout;
    c->holding = calloc((size_t)n, sizeof *c->holding);
    assert_non_null(c->holding);
    tu_idset_init(&c->handed);
    tu_idset_init(&c->acked);
    tu_idset_init(&c->done_ids);
    tu_counter_init(&c->nacks);
    tu_counter_init(&c->expired);
    tu_counter_init(&c->unread);
    tu_counter_init(&c->acks);
    tu_counter_init(&c->done_completed);
    tu_counter_init(&c->done_other);
    tu_latch_init(&c->finished, CR_THREADS);
    c->deadline = seda_now() + 6 * TU_DEADLINE;

    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    assert_int_equal(seda_bus_new(&bo, &c->bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "p";
    so.pull = true;
    so.ack_timeout = ack_timeout;
    so.max_attempts = 1000;         /* 1/4 nack rate: never dead-letters */
    so.capacity = 64;               /* publisher blocks: admission races */
    char err[256];
    assert_int_equal(seda_stage_add(c->bus, &so, &c->p, err, sizeof err), 0);

    pthread_t pub, th[CR_THREADS];
    cr_arg_t args[CR_THREADS];
    for (int i = 0; i < CR_THREADS; i++) {
        args[i].c = c;
        args[i].seed = 0x5eda0000u + (unsigned)i * 7919u;
        assert_int_equal(pthread_create(&th[i], NULL, cr_receiver, &args[i]),
                         0);
    }
    assert_int_equal(pthread_create(&pub, NULL, cr_publisher, c), 0);
    pthread_join(pub, NULL);
    bool finished = tu_latch_wait(&c->finished, 7 * TU_DEADLINE);
    if (!finished)
        seda_bus_shutdown_now(c->bus);      /* wake them, then join */
    for (int i = 0; i < CR_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_true(finished);

    assert_int_equal(atomic_load(&c->bad_rc), 0);
    assert_int_equal(atomic_load(&c->published), n);
    assert_int_equal(atomic_load(&c->overlap), 0);
    assert_int_equal(tu_counter_get(&c->acks), n);
    assert_int_equal(tu_idset_size(&c->acked), (size_t)n);
    assert_int_equal(tu_idset_dups(&c->acked), 0);   /* acked exactly once */
    assert_int_equal(tu_idset_dups(&c->handed), 0);
    assert_int_equal(tu_counter_get(&c->done_completed), n);
    assert_int_equal(tu_counter_get(&c->done_other), 0);
    assert_int_equal(tu_idset_size(&c->done_ids), (size_t)n);
    assert_int_equal(tu_idset_dups(&c->done_ids), 0);
    /* Every receive was settled once: handed = acks + nacks + expired. */
    assert_int_equal(tu_idset_size(&c->handed) +
                     (size_t)tu_counter_get(&c->unread),
                     (size_t)(tu_counter_get(&c->acks) +
                              tu_counter_get(&c->nacks) +
                              tu_counter_get(&c->expired)));
    if (ack_timeout >= 1.0)
        assert_int_equal(tu_counter_get(&c->expired), 0);
    print_message("    %d envelopes: %ld acks, %ld nacks, %ld expired\n", n,
                  tu_counter_get(&c->acks), tu_counter_get(&c->nacks),
                  tu_counter_get(&c->expired));

    assert_int_equal(seda_bus_wait_idle(c->bus, TU_DEADLINE), 0);
    seda_stage_stats s;
    seda_stage_stats_get(c->p, &s);
    assert_int_equal(s.delivered, (uint64_t)n);
    assert_int_equal(s.nacked, (uint64_t)(tu_counter_get(&c->nacks) +
                                          tu_counter_get(&c->expired)));
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(s.completed, (uint64_t)n);
    seda_bus_stats b;
    check_accounting(c->bus, &b);
    assert_int_equal(b.accepted, (uint64_t)n);
    assert_int_equal(b.completed, (uint64_t)n);
    assert_int_equal(b.in_system, 0);
    assert_int_equal(seda_bus_shutdown(c->bus, TU_DEADLINE), 0);
    seda_bus_free(c->bus);

    tu_idset_destroy(&c->handed);
    tu_idset_destroy(&c->acked);
    tu_idset_destroy(&c->done_ids);
    tu_counter_destroy(&c->nacks);
    tu_counter_destroy(&c->expired);
    tu_counter_destroy(&c->unread);
    tu_counter_destroy(&c->acks);
    tu_counter_destroy(&c->done_completed);
    tu_counter_destroy(&c->done_other);
    tu_counter_destroy(&c->finished);
    free(c->holding);
    free(c);
}

static void test_pull_concurrent_receivers_exactly_once(void **state)
{
    (void)state;
    cr_run(30.0, tu_iterations(2000, 50000));
}

/* Receivers hold some leases past a short ack_timeout: expiries race
 * receives and settles, yet each envelope is acked exactly once. */
static void test_pull_concurrent_receivers_with_expiry(void **state)
{
    (void)state;
    cr_run(0.005, tu_iterations(500, 10000));
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
        cmocka_unit_test(test_pull_wait_idle_ignores_queued),
        cmocka_unit_test(test_pull_wait_idle_waits_for_lease),
        cmocka_unit_test(test_pull_wait_idle_returns_after_lease_expires),
        cmocka_unit_test(test_pull_shutdown_wakes_blocked_receivers),
        cmocka_unit_test(test_pull_shutdown_sweeps_leases),
        cmocka_unit_test(test_pull_concurrent_receivers_exactly_once),
        cmocka_unit_test(test_pull_concurrent_receivers_with_expiry),
    };
    return cmocka_run_group_tests_name("pull", tests, NULL, NULL);
}
