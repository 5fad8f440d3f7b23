/* SPDX-License-Identifier: MIT */
/*
 * test_stage_errors.c -- the recent-errors ring of a stage
 * (seda_stage_report keeps what it reports; seda_stage_errors reads it;
 * src/core/stats.c), and the latency sums the stats carry for
 * Prometheus summaries.
 *
 * The binary installs a counting allocator before anything else
 * (seda_set_allocator must come first) so one test can fail the next
 * allocations.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seda.h"
#include "testutil.h"

/* ---- allocator: fails while fail_allocs > 0 (each failure counts
 * down) ---- */

static atomic_int fail_allocs;  /* relaxed: set by the test thread only
                                   while no worker allocates */

static void *failing_malloc(size_t n)
{
    int f = atomic_load_explicit(&fail_allocs, memory_order_relaxed);
    if (f > 0) {
        atomic_store_explicit(&fail_allocs, f - 1, memory_order_relaxed);
        return NULL;
    }
    return malloc(n);
}

/* ---- fixture: a bus with one stage "s" and no consumer ---- */

typedef struct fx {
    seda_bus_t *bus;
    seda_stage_t *st;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    assert_int_equal(seda_bus_new(&bo, &f->bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "s";
    assert_int_equal(seda_stage_add(f->bus, &so, &f->st, NULL, 0), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    seda_bus_free(f->bus);
    free(f);
    return 0;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t stage_errors_count(seda_stage_t *st)
{
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    return s.errors;
}

/* ---- tests ---- */

static void test_stage_errors_empty(void **state)
{
    fx_t *f = *state;
    seda_error *e = (seda_error *)1;
    assert_int_equal(seda_stage_errors(f->st, &e), 0);
    assert_null(e);
    seda_errors_free(NULL);             /* a no-op */
}

static void test_stage_errors_newest_first_with_wall_time(void **state)
{
    fx_t *f = *state;
    double before = wall();
    seda_stage_report(f->st, "test: first");
    seda_stage_report(f->st, "test: second");
    seda_stage_report(f->st, "test: third");
    double after = wall();
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), 3);
    assert_string_equal(e[0].message, "test: third");
    assert_string_equal(e[1].message, "test: second");
    assert_string_equal(e[2].message, "test: first");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(e[i].repeats, 1);
        assert_true(e[i].time >= before - 0.001 && e[i].time <= after + 0.001);
        assert_true(e[i].first == e[i].time);
    }
    assert_true(e[0].time >= e[1].time && e[1].time >= e[2].time);
    seda_errors_free(e);
    assert_int_equal(stage_errors_count(f->st), 3);
}

/* A message already kept is folded into its entry, which moves to the
 * front: reports A B A C give C A(x2) B. */
static void test_stage_errors_repeat_folds_and_moves_to_front(void **state)
{
    fx_t *f = *state;
    seda_stage_report(f->st, "test: A");
    seda_stage_report(f->st, "test: B");
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), 2);
    double first_a = e[1].first;
    seda_errors_free(e);
    seda_stage_report(f->st, "test: A");
    assert_int_equal(seda_stage_errors(f->st, &e), 2);
    assert_string_equal(e[0].message, "test: A");
    assert_int_equal(e[0].repeats, 2);
    assert_true(e[0].first == first_a);
    assert_true(e[0].time >= e[0].first);
    assert_string_equal(e[1].message, "test: B");
    assert_int_equal(e[1].repeats, 1);
    seda_errors_free(e);
    seda_stage_report(f->st, "test: C");
    assert_int_equal(seda_stage_errors(f->st, &e), 3);
    assert_string_equal(e[0].message, "test: C");
    assert_string_equal(e[1].message, "test: A");
    assert_string_equal(e[2].message, "test: B");
    seda_errors_free(e);
    /* Every report counts, folded or not. */
    assert_int_equal(stage_errors_count(f->st), 4);
}

/* More distinct messages than the ring holds: the newest N stay. */
static void test_stage_errors_keeps_the_last_n(void **state)
{
    fx_t *f = *state;
    char msg[64];
    for (int i = 0; i < SEDA_ERRORS_KEPT + 5; i++) {
        snprintf(msg, sizeof msg, "test: error %d", i);
        seda_stage_report(f->st, msg);
    }
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), SEDA_ERRORS_KEPT);
    for (int i = 0; i < SEDA_ERRORS_KEPT; i++) {
        snprintf(msg, sizeof msg, "test: error %d", SEDA_ERRORS_KEPT + 4 - i);
        assert_string_equal(e[i].message, msg);
    }
    seda_errors_free(e);
    /* An evicted message comes back as a new entry, not a repeat. */
    seda_stage_report(f->st, "test: error 0");
    assert_int_equal(seda_stage_errors(f->st, &e), SEDA_ERRORS_KEPT);
    assert_string_equal(e[0].message, "test: error 0");
    assert_int_equal(e[0].repeats, 1);
    snprintf(msg, sizeof msg, "test: error %d", 6);
    assert_string_equal(e[SEDA_ERRORS_KEPT - 1].message, msg);
    seda_errors_free(e);
}

/* A message past SEDA_ERROR_MSG_MAX - 1 bytes is cut, ending in "...";
 * the same long message again is a repeat, and one that differs only past
 * the cut is too (what is kept cannot tell them apart). */
static void test_stage_errors_long_message_cut(void **state)
{
    fx_t *f = *state;
    size_t n = 3 * SEDA_ERROR_MSG_MAX;
    char *m = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        m[i] = (char)('a' + i % 26);
    m[n] = '\0';
    seda_stage_report(f->st, m);
    seda_stage_report(f->st, m);
    m[n - 1] = '!';
    seda_stage_report(f->st, m);
    /* Exactly SEDA_ERROR_MSG_MAX - 1 bytes: kept whole. */
    m[SEDA_ERROR_MSG_MAX - 1] = '\0';
    seda_stage_report(f->st, m);
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), 2);
    assert_int_equal(strlen(e[0].message), SEDA_ERROR_MSG_MAX - 1);
    assert_memory_equal(e[0].message, m, SEDA_ERROR_MSG_MAX - 1);
    assert_int_equal(e[0].repeats, 1);
    assert_int_equal(strlen(e[1].message), SEDA_ERROR_MSG_MAX - 1);
    assert_memory_equal(e[1].message, m, SEDA_ERROR_MSG_MAX - 4);
    assert_string_equal(e[1].message + SEDA_ERROR_MSG_MAX - 4, "...");
    assert_int_equal(e[1].repeats, 3);
    seda_errors_free(e);
    free(m);
}

/* What a consumer's seda_env_fail reports reaches the ring. */
static bool failing(seda_env_t *env, void *ud)
{
    (void)ud;
    seda_env_fail(env, "test: consumer says no");
    return true;
}

static void test_stage_errors_from_a_consumer(void **state)
{
    fx_t *f = *state;
    assert_true(seda_stage_consume(f->st, failing, NULL) >= 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tu_publish_u64(f->bus, "s", (uint64_t)i, NULL), 0);
    TU_WAIT(seda_bus_wait_idle(f->bus, TU_DEADLINE) == 0, "bus idle");
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), 1);
    assert_non_null(strstr(e[0].message, "test: consumer says no"));
    assert_int_equal(e[0].repeats, 3);
    seda_errors_free(e);
}

/* Reporters and a reader at once (for TSan): every report is counted in
 * exactly one entry. */
#define CR_THREADS 4
#define CR_DISTINCT 8

typedef struct cr {
    seda_stage_t *st;
    int iters;
    atomic_bool stop;           /* relaxed flag for the reader */
    tu_rendezvous start;
} cr_t;

static void *cr_reporter(void *arg)
{
    cr_t *c = arg;
    char msg[64];
    tu_rendezvous_arrive(&c->start, TU_DEADLINE);
    for (int i = 0; i < c->iters; i++) {
        snprintf(msg, sizeof msg, "test: concurrent %d", i % CR_DISTINCT);
        seda_stage_report(c->st, msg);
    }
    return NULL;
}

static void *cr_reader(void *arg)
{
    cr_t *c = arg;
    tu_rendezvous_arrive(&c->start, TU_DEADLINE);
    while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
        seda_error *e;
        int n = seda_stage_errors(c->st, &e);
        for (int i = 0; i < n; i++)
            if (strncmp(e[i].message, "test: concurrent ", 17) != 0)
                abort();                /* a torn message */
        seda_errors_free(e);
    }
    return NULL;
}

static void test_stage_errors_concurrent_reports(void **state)
{
    fx_t *f = *state;
    cr_t c = { .st = f->st, .iters = tu_iterations(500, 20000) };
    atomic_init(&c.stop, false);
    tu_rendezvous_init(&c.start, CR_THREADS + 1);
    pthread_t th[CR_THREADS], rd;
    for (int i = 0; i < CR_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, cr_reporter, &c), 0);
    assert_int_equal(pthread_create(&rd, NULL, cr_reader, &c), 0);
    for (int i = 0; i < CR_THREADS; i++)
        pthread_join(th[i], NULL);
    atomic_store_explicit(&c.stop, true, memory_order_relaxed);
    pthread_join(rd, NULL);
    tu_rendezvous_destroy(&c.start);
    seda_error *e;
    assert_int_equal(seda_stage_errors(f->st, &e), CR_DISTINCT);
    uint64_t sum = 0;
    for (int i = 0; i < CR_DISTINCT; i++)
        sum += e[i].repeats;
    assert_int_equal(sum, (uint64_t)CR_THREADS * (uint64_t)c.iters);
    seda_errors_free(e);
    assert_int_equal(stage_errors_count(f->st),
                     (uint64_t)CR_THREADS * (uint64_t)c.iters);
}

/* Out of memory: reading fails with SEDA_ENOMEM and nothing to free; a
 * report whose copy cannot be made still leaves an entry saying so, and
 * still counts. */
static void test_stage_errors_enomem(void **state)
{
    fx_t *f = *state;
    seda_stage_report(f->st, "test: kept");
    seda_error *e = (seda_error *)1;
    atomic_store_explicit(&fail_allocs, 1, memory_order_relaxed);
    assert_int_equal(seda_stage_errors(f->st, &e), SEDA_ENOMEM);
    assert_null(e);
    atomic_store_explicit(&fail_allocs, 1, memory_order_relaxed);
    seda_stage_report(f->st, "test: not copied");
    assert_int_equal(seda_stage_errors(f->st, &e), 2);
    assert_string_equal(e[0].message, "(out of memory: message not kept)");
    assert_string_equal(e[1].message, "test: kept");
    seda_errors_free(e);
    assert_int_equal(stage_errors_count(f->st), 2);
}

/* ---- the sums behind the Prometheus summaries ---- */

static bool slow_ok(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    tu_spin(0.002);
    return true;
}

static void test_stage_stats_latency_sums(void **state)
{
    fx_t *f = *state;
    assert_true(seda_stage_consume(f->st, slow_ok, NULL) >= 0);
    seda_stage_stats s;
    seda_stage_stats_get(f->st, &s);
    assert_int_equal(s.sojourn_count, 0);
    assert_true(s.sojourn_sum == 0 && s.service_sum == 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(tu_publish_u64(f->bus, "s", (uint64_t)i, NULL), 0);
    TU_WAIT(seda_bus_wait_idle(f->bus, TU_DEADLINE) == 0, "bus idle");
    seda_stage_stats_get(f->st, &s);
    assert_int_equal(s.sojourn_count, 5);
    assert_int_equal(s.service_count, 5);
    /* Each call spun 2 ms: the service sum is at least 10 ms (in us),
     * and no sum exceeds count * the largest sample. */
    assert_true(s.service_sum >= 5 * 2000.0);
    assert_true(s.service_sum <= 5 * s.service_max + 1e-6);
    assert_true(s.sojourn_sum > 0);
    assert_true(s.sojourn_sum <= 5 * s.sojourn_max + 1e-6);
}

int main(void)
{
    seda_set_allocator(failing_malloc, NULL, NULL);
    atomic_init(&fail_allocs, 0);
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_stage_errors_empty),
        T(test_stage_errors_newest_first_with_wall_time),
        T(test_stage_errors_repeat_folds_and_moves_to_front),
        T(test_stage_errors_keeps_the_last_n),
        T(test_stage_errors_long_message_cut),
        T(test_stage_errors_from_a_consumer),
        T(test_stage_errors_concurrent_reports),
        T(test_stage_errors_enomem),
        T(test_stage_stats_latency_sums),
#undef T
    };
    return cmocka_run_group_tests_name("stage_errors", tests, NULL, NULL);
}
