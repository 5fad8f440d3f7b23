/* SPDX-License-Identifier: MIT */
/*
 * test_suspend.c -- suspended calls (seda_batch_suspend): a batch
 * consumer suspends each envelope and a settler thread settles it later,
 * as a network wait would.  Every envelope is handled once, a stage never
 * has more than `concurrency` calls out (suspended or running), the drain
 * task's permit passes to a call when none is free, nacks retry and
 * dead-letter as a plain result does, a nack undoes what the call
 * changed, a drop counts dropped, and the books balance throughout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>

#include "testutil.h"

#define MAXP 4096

typedef struct sc {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seda_pending_t *q[MAXP];    /* suspended, to settle; guarded by mu */
    int head, tail;             /* guarded by mu */
    int out;                    /* suspended now; guarded by mu */
    int peak;                   /* the most out at once; guarded by mu */
    bool stop;                  /* guarded by mu */
    int nack_first;             /* nack attempt 1 of every envelope */
    bool drop;                  /* drop instead of settling */
    tu_idset acked;             /* payloads acked */
    tu_counter settled;
    pthread_t tid;
} sc_t;

static void sc_batch(seda_batch_t *b, void *ud)
{
    sc_t *c = ud;
    seda_env_t *env;
    while ((env = seda_batch_next(b)) != NULL) {
        /* What the call changes before it waits: undone by a nack, so a
         * retry never sees it. */
        if (seda_env_attempts(env) > 1)
            assert_null(seda_env_header(env, "seen"));
        seda_env_set_header(env, "seen", "yes");
        seda_pending_t *p = seda_batch_suspend(b);
        assert_non_null(p);
        pthread_mutex_lock(&c->mu);
        c->q[c->tail++ % MAXP] = p;
        if (++c->out > c->peak)
            c->peak = c->out;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

static void *sc_settler(void *arg)
{
    sc_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->head == c->tail && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->head == c->tail)
            break;
        /* Let a few gather, so several are out at once. */
        seda_pending_t *p = c->q[c->head++ % MAXP];
        pthread_mutex_unlock(&c->mu);
        tu_spin(0.0002);
        seda_env_t *env = seda_pending_env(p);
        if (c->drop) {
            pthread_mutex_lock(&c->mu);
            c->out--;
            pthread_mutex_unlock(&c->mu);
            seda_pending_drop(p);
        } else {
            seda_pending_enter(p);
            bool ok = !(c->nack_first && seda_env_attempts(env) == 1);
            if (ok)
                tu_idset_add(&c->acked, tu_env_u64(env));
            seda_pending_leave(p);
            pthread_mutex_lock(&c->mu);
            c->out--;
            pthread_mutex_unlock(&c->mu);
            seda_pending_settle(p, ok);
        }
        tu_counter_add(&c->settled, 1);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void sc_start(sc_t *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    tu_cond_init(&c->cv);
    tu_idset_init(&c->acked);
    tu_counter_init(&c->settled);
    pthread_create(&c->tid, NULL, sc_settler, c);
}

static void sc_stop(sc_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->tid, NULL);
    tu_idset_destroy(&c->acked);
    tu_counter_destroy(&c->settled);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

static seda_bus_t *bus_with(sc_t *c, int concurrency, int max_attempts,
                            seda_stage_t **out)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    seda_bus_t *bus;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "wait";
    so.capacity = 64;
    so.concurrency = concurrency;
    so.max_attempts = max_attempts;
    char err[256];
    assert_int_equal(seda_stage_add(bus, &so, out, err, sizeof err), 0);
    assert_true(seda_stage_consume_batch(*out, sc_batch, c) >= 0);
    so.name = "dlq";
    so.concurrency = 1;
    so.max_attempts = 1;
    seda_stage_t *dl;
    assert_int_equal(seda_stage_add(bus, &so, &dl, err, sizeof err), 0);
    return bus;
}

/* The books: accepted == completed + dead + dropped + in_system, and the
 * stage's suspended and in_flight back to zero when idle. */
static void check_books(seda_bus_t *bus, seda_stage_t *st)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.accepted, b.completed + b.dead_lettered + b.dropped +
                                     b.in_system);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.suspended, 0);
    assert_int_equal(s.in_flight, 0);
    assert_int_equal(b.suspended, 0);
}

static void test_suspend_each_once_within_concurrency(void **state)
{
    (void)state;
    sc_t c;
    sc_start(&c);
    seda_stage_t *st;
    seda_bus_t *bus = bus_with(&c, 8, 1, &st);
    int n = 2000;
    for (int i = 0; i < n; i++)
        assert_int_equal(tu_publish_u64(bus, "wait", (uint64_t)i, NULL), 0);
    assert_true(tu_counter_wait_ge(&c.settled, n, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    assert_int_equal(tu_idset_size(&c.acked), (size_t)n);
    assert_int_equal(tu_idset_dups(&c.acked), 0);
    pthread_mutex_lock(&c.mu);
    int peak = c.peak;
    pthread_mutex_unlock(&c.mu);
    assert_true(peak >= 1 && peak <= 8);
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.completed, (uint64_t)n);
    check_books(bus, st);
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
    sc_stop(&c);
}

static void test_suspend_nack_retries_and_undoes(void **state)
{
    (void)state;
    sc_t c;
    sc_start(&c);
    c.nack_first = 1;
    seda_stage_t *st;
    seda_bus_t *bus = bus_with(&c, 4, 2, &st);
    int n = 200;
    for (int i = 0; i < n; i++)
        assert_int_equal(tu_publish_u64(bus, "wait", (uint64_t)i, NULL), 0);
    assert_true(tu_counter_wait_ge(&c.settled, 2 * n, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.nacked, (uint64_t)n);
    assert_int_equal(s.delivered, (uint64_t)n);
    assert_int_equal(tu_idset_size(&c.acked), (size_t)n);
    check_books(bus, st);
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
    sc_stop(&c);
}

static void test_suspend_dead_letters_after_max_attempts(void **state)
{
    (void)state;
    sc_t c;
    sc_start(&c);
    c.nack_first = 1;
    seda_stage_t *st;
    seda_bus_t *bus = bus_with(&c, 4, 1, &st);
    int n = 100;
    for (int i = 0; i < n; i++)
        assert_int_equal(tu_publish_u64(bus, "wait", (uint64_t)i, NULL), 0);
    assert_true(tu_counter_wait_ge(&c.settled, n, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    assert_int_equal(s.dead_lettered, (uint64_t)n);
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.dead_lettered, (uint64_t)n);
    check_books(bus, st);
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
    sc_stop(&c);
}

static void test_suspend_drop_counts_dropped(void **state)
{
    (void)state;
    sc_t c;
    sc_start(&c);
    c.drop = true;
    seda_stage_t *st;
    seda_bus_t *bus = bus_with(&c, 1, 1, &st);
    int n = 50;
    for (int i = 0; i < n; i++)
        assert_int_equal(tu_publish_u64(bus, "wait", (uint64_t)i, NULL), 0);
    assert_true(tu_counter_wait_ge(&c.settled, n, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    assert_int_equal(b.dropped, (uint64_t)n);
    check_books(bus, st);
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
    sc_stop(&c);
}

/* ---- waking a worker to run the mail hook ---- */

static seda_worker_t *woken_self;       /* set by the consumer */
static atomic_int mail_index = -1;      /* relaxed: read after a wait */
static tu_counter mail_runs;

static void mail_hook(int index, void *data, void *ud)
{
    (void)data;
    (void)ud;
    atomic_store_explicit(&mail_index, index, memory_order_relaxed);
    tu_counter_add(&mail_runs, 1);
}

static tu_counter self_seen;

static bool note_self(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    woken_self = seda_worker_self();
    tu_counter_add(&self_seen, 1);
    return true;
}

static void test_suspend_worker_wake_runs_mail_on_that_worker(void **state)
{
    (void)state;
    tu_counter_init(&mail_runs);
    tu_counter_init(&self_seen);
    assert_null(seda_worker_self());    /* not a pool thread */
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.worker_mail = mail_hook;
    seda_bus_t *bus;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "self";
    seda_stage_t *st;
    char err[256];
    assert_int_equal(seda_stage_add(bus, &so, &st, err, sizeof err), 0);
    seda_stage_consume(st, note_self, NULL);
    assert_int_equal(tu_publish_u64(bus, "self", 1, NULL), 0);
    assert_true(tu_counter_wait_ge(&self_seen, 1, TU_DEADLINE));
    assert_int_equal(seda_bus_wait_idle(bus, TU_DEADLINE), 0);
    assert_non_null(woken_self);
    /* The worker sleeps now: a wake from this thread runs its hook. */
    seda_worker_wake(woken_self);
    assert_true(tu_counter_wait_ge(&mail_runs, 1, TU_DEADLINE));
    int idx = atomic_load_explicit(&mail_index, memory_order_relaxed);
    assert_true(idx == 0 || idx == 1);
    seda_worker_wake(woken_self);
    assert_true(tu_counter_wait_ge(&mail_runs, 2, TU_DEADLINE));
    assert_int_equal(atomic_load_explicit(&mail_index, memory_order_relaxed),
                     idx);
    assert_int_equal(seda_bus_shutdown(bus, 5.0), 0);
    seda_bus_free(bus);
    tu_counter_destroy(&mail_runs);
    tu_counter_destroy(&self_seen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suspend_each_once_within_concurrency),
        cmocka_unit_test(test_suspend_nack_retries_and_undoes),
        cmocka_unit_test(test_suspend_dead_letters_after_max_attempts),
        cmocka_unit_test(test_suspend_drop_counts_dropped),
        cmocka_unit_test(test_suspend_worker_wake_runs_mail_on_that_worker),
    };
    return cmocka_run_group_tests_name("suspend", tests, NULL, NULL);
}
