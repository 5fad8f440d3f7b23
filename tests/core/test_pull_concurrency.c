/* SPDX-License-Identifier: MIT */
/*
 * test_pull_concurrency.c -- the pull model under concurrency: idleness,
 * shutdown (blocked receivers woken, outstanding leases swept) and
 * concurrent receivers (every envelope handed out once per attempt and
 * acked exactly once).
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
        cmocka_unit_test(test_pull_wait_idle_ignores_queued),
        cmocka_unit_test(test_pull_wait_idle_waits_for_lease),
        cmocka_unit_test(test_pull_wait_idle_returns_after_lease_expires),
        cmocka_unit_test(test_pull_shutdown_wakes_blocked_receivers),
        cmocka_unit_test(test_pull_shutdown_sweeps_leases),
        cmocka_unit_test(test_pull_concurrent_receivers_exactly_once),
        cmocka_unit_test(test_pull_concurrent_receivers_with_expiry),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("pull_concurrency", tests, NULL, NULL);
}
