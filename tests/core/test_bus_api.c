/* SPDX-License-Identifier: MIT */
/*
 * test_bus_api.c -- the rest of the bus API: statistics, seda_now,
 * strerror, publish_many, envelope accessors, consumers that publish,
 * worker hooks, wait_idle.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
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
 * stats, publish_many, envelopes, workers
 * ==================================================================== */

/* seda_now() (TSC-based where the TSC is reliable) keeps pace with
 * CLOCK_MONOTONIC: over 0.5 s the two advance by the same amount within
 * 20 us (40 ppm).  A loosely calibrated TSC ran 115 ppm fast on a VM. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One (seda_now, monotonic) pair: the monotonic read bracketed by two
 * seda_now reads, the tightest bracket of a few tries, so a preemption
 * between the reads does not count as skew. */
static void now_pair(double *s, double *m)
{
    double best = 1e9;
    for (int i = 0; i < 50; i++) {
        double a = seda_now(), mm = mono_s(), b = seda_now();
        if (b - a < best) {
            best = b - a;
            *s = a + (b - a) / 2;
            *m = mm;
        }
        if (best < 2e-6)
            break;
    }
}

static void test_bus_now_keeps_pace_with_monotonic(void **state)
{
    (void)state;
    double s0, m0, s1, m1;
    now_pair(&s0, &m0);
    struct timespec half = { 0, 500000000L };
    while (nanosleep(&half, &half) != 0)
        ;
    now_pair(&s1, &m1);
    double skew_us = ((s1 - s0) - (m1 - m0)) * 1e6;
    if (skew_us > 20 || skew_us < -20)
        fail_msg("seda_now advanced %.1f us %s than CLOCK_MONOTONIC over "
                 "%.3f s", skew_us > 0 ? skew_us : -skew_us,
                 skew_us > 0 ? "more" : "less", m1 - m0);
}

static void test_bus_strerror_words(void **state)
{
    (void)state;
    assert_string_equal(seda_strerror(0), "ok");
    assert_string_equal(seda_strerror(SEDA_EFULL), "full");
    assert_string_equal(seda_strerror(SEDA_ETIMEDOUT), "timeout");
    assert_string_equal(seda_strerror(SEDA_EDROPPED), "dropped");
    assert_string_equal(seda_strerror(SEDA_EPAUSED), "paused");
    assert_string_equal(seda_strerror(SEDA_ECLOSED), "closed");
    assert_string_equal(seda_strerror(SEDA_ENOSTAGE), "no_such_stage");
    assert_string_equal(seda_strerror(SEDA_EEXIST), "exists");
    assert_string_equal(seda_strerror(SEDA_EINVAL), "invalid");
    assert_string_equal(seda_strerror(SEDA_ENOMEM), "nomem");
    assert_string_equal(seda_strerror(SEDA_ERANGE), "range");
    assert_string_equal(seda_strerror(SEDA_ETOOLARGE), "too_large");
    assert_string_equal(seda_strerror(-12345), "error");
}

static void test_bus_stats_fields(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 3, 0, NULL);
    tweak_args t = {.capacity = 77, .concurrency = 2, .max_attempts = 4,
                    .policy = SEDA_POLICY_DROP_NEWEST};
    seda_stage_t *st = fx_stage(f, "s", 0, tweak_apply, &t);
    fx_stage(f, "s2", -1, NULL, NULL);
    assert_int_equal(seda_bus_workers(f->bus), 3);
    seda_bus_stats b = bstats(f->bus);
    assert_int_equal(b.workers, 3);
    assert_int_equal(b.stages, 2);
    assert_false(b.paused);
    assert_false(b.closed);
    assert_int_equal(b.accepted, 0);
    seda_stage_stats s = sstats(st);
    assert_string_equal(s.name, "s");
    assert_int_equal(s.capacity, 77);
    assert_int_equal(s.concurrency, 2);
    assert_int_equal(s.max_attempts, 4);
    assert_int_equal(s.policy, SEDA_POLICY_DROP_NEWEST);
    assert_int_equal(s.delivery, SEDA_DELIVERY_P2P);
    assert_int_equal(s.consumers, 1);
    for (uint64_t i = 0; i < 20; i++)
        must_publish(f, "s", i);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 20, TU_DEADLINE),
            "20 done(SEDA_COMPLETED)");
    wait_idle(f);
    s = sstats(st);
    assert_int_equal(s.enqueued, 20);
    assert_int_equal(s.delivered, 20);
    assert_int_equal(s.completed, 20);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.in_flight, 0);
    b = bstats(f->bus);
    assert_int_equal(b.accepted, 20);
    assert_int_equal(b.completed, 20);
    assert_int_equal(b.in_system, 0);
    check_balance(f->bus);
}

static void test_bus_workers_zero_means_cpus(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 0, 0, NULL);
    assert_true(seda_bus_workers(f->bus) >= 1);
    assert_int_equal(bstats(f->bus).workers, seda_bus_workers(f->bus));
}

/* publish_many: in order, all accepted, FIFO on a concurrency-1 stage. */
static void test_bus_publish_many_in_order(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    fx_stage(f, "q", 0, NULL, NULL);
    enum { N = 100 };
    uint64_t vals[N];
    const void *pl[N];
    size_t ln[N];
    for (int i = 0; i < N; i++) {
        vals[i] = (uint64_t)i;
        pl[i] = &vals[i];
        ln[i] = sizeof vals[i];
    }
    seda_publish_opts po;
    fx_popts(f, &po);
    int err = 0;
    assert_int_equal(seda_publish_many(f->bus, "q", pl, ln, N, &po, &err), N);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], N, TU_DEADLINE),
            "100 done(SEDA_COMPLETED)");
    wait_idle(f);
    pthread_mutex_lock(&f->log_mu);
    int n = f->norder;
    uint64_t order[LOG_MAX];
    memcpy(order, f->order, sizeof order);
    pthread_mutex_unlock(&f->log_mu);
    assert_int_equal(n, N);
    for (int i = 0; i < N; i++)
        if (order[i] != (uint64_t)i)
            fail_msg("publish_many: delivery %d was %llu, want %d", i,
                     (unsigned long long)order[i], i);
    assert_int_equal(bstats(f->bus).accepted, N);
    assert_int_equal(seda_publish_many(f->bus, "q", pl, ln, 0, &po, &err), 0);
}

/* publish_many stops at the first refusal and says why. */
static void test_bus_publish_many_stops_at_refusal(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    tweak_args t = {.capacity = 5, .policy = SEDA_POLICY_REJECT};
    seda_stage_t *st = fx_stage(f, "q", 0, tweak_apply, &t);
    f->rec[0].gated = true;
    must_publish(f, "q", 1000);
    TU_WAIT(tu_counter_wait_ge(&f->rec[0].calls, 1, TU_DEADLINE),
            "envelope 1000 in the gated handler");
    TU_WAIT(tu_stage_wait(st, tu_pred_in_flight_eq, 1, TU_DEADLINE),
            "q in_flight == 1");
    enum { N = 10 };
    uint64_t vals[N];
    const void *pl[N];
    size_t ln[N];
    for (int i = 0; i < N; i++) {
        vals[i] = (uint64_t)i;
        pl[i] = &vals[i];
        ln[i] = sizeof vals[i];
    }
    seda_publish_opts po;
    fx_popts(f, &po);
    int err = 0;
    int n = seda_publish_many(f->bus, "q", pl, ln, N, &po, &err);
    assert_int_equal(n, 5);
    assert_int_equal(err, SEDA_EFULL);
    assert_true(sstats(st).dropped >= 1);
    assert_int_equal(bstats(f->bus).accepted, 6);
    tu_gate_open(&f->gate);
    wait_idle(f);
    for (uint64_t i = 0; i < N; i++)
        assert_int_equal(tu_idset_count(&f->rec[0].ids, i), i < 5 ? 1 : 0);
    assert_int_equal(outc(f, SEDA_COMPLETED), 6);
    check_balance(f->bus);
}

typedef struct env_probe {
    pthread_mutex_t mu;
    int calls;                 /* guarded by mu */
    char id[2][SEDA_ID_MAX];   /* guarded by mu */
    uint64_t seq[2];
    char sender[32], to[32], h1[32], h2[32];
    int hcount, hcount_after;
    bool pair_ok, deleted_ok, time_ok, len_ok, payload_ok;
} env_probe;

static bool env_probe_consumer(seda_env_t *env, void *ud)
{
    env_probe *p = ud;
    pthread_mutex_lock(&p->mu);
    int i = p->calls < 2 ? p->calls : 1;
    seda_env_id(env, p->id[i]);
    p->seq[i] = seda_env_seq(env);
    const char *s = seda_env_sender(env);
    snprintf(p->sender, sizeof p->sender, "%s", s ? s : "(null)");
    snprintf(p->to, sizeof p->to, "%s", seda_env_to(env));
    const char *h1 = seda_env_header(env, "k1");
    const char *h2 = seda_env_header(env, "k2");
    snprintf(p->h1, sizeof p->h1, "%s", h1 ? h1 : "(null)");
    snprintf(p->h2, sizeof p->h2, "%s", h2 ? h2 : "(null)");
    p->hcount = seda_env_header_count(env);
    const char *k = NULL, *v = NULL;
    seda_env_header_at(env, 0, &k, &v);
    p->pair_ok = k != NULL && v != NULL &&
                 (strcmp(k, "k1") == 0 || strcmp(k, "k2") == 0);
    seda_env_set_header(env, "k1", NULL);
    p->deleted_ok = seda_env_header(env, "k1") == NULL;
    p->hcount_after = seda_env_header_count(env);
    double at = seda_env_published_at(env);
    p->time_ok = at > 0 && at <= seda_now();
    size_t len = 0;
    const void *pl = seda_env_payload(env, &len);
    p->len_ok = len == 5;
    p->payload_ok = pl != NULL && memcmp(pl, "a\0b\0c", 5) == 0;
    p->calls++;
    pthread_mutex_unlock(&p->mu);
    return true;
}

static void test_bus_envelope_accessors(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 1, 0, NULL);
    env_probe *p = calloc(1, sizeof *p);
    assert_non_null(p);
    pthread_mutex_init(&p->mu, NULL);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "e";
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &st, NULL, 0), 0);
    assert_true(seda_stage_consume(st, env_probe_consumer, p) >= 0);
    seda_publish_opts po;
    fx_popts(f, &po);
    po.sender = "me";
    const char *hdrs[] = {"k1", "v1", "k2", "v2"};
    po.headers = hdrs;
    po.nheaders = 2;
    assert_int_equal(seda_publish(f->bus, "e", "a\0b\0c", 5, &po), 0);
    assert_int_equal(seda_publish(f->bus, "e", "a\0b\0c", 5, &po), 0);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 2, TU_DEADLINE),
            "2 done(SEDA_COMPLETED)");
    wait_idle(f);
    seda_bus_free(f->bus);
    f->bus = NULL;
    assert_int_equal(p->calls, 2);
    assert_string_equal(p->sender, "me");
    assert_string_equal(p->to, "e");
    assert_string_equal(p->h1, "v1");
    assert_string_equal(p->h2, "v2");
    assert_int_equal(p->hcount, 2);
    assert_true(p->pair_ok);
    assert_true(p->deleted_ok);
    assert_int_equal(p->hcount_after, 1);
    assert_true(p->time_ok);
    assert_true(p->len_ok);
    assert_true(p->payload_ok);
    assert_true(strlen(p->id[0]) > 0 && strlen(p->id[0]) < SEDA_ID_MAX);
    assert_string_not_equal(p->id[0], p->id[1]);
    assert_true(p->seq[0] != p->seq[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* A consumer may publish (on a worker): a new acceptance, delivered. */
typedef struct repub {
    seda_bus_t *bus;
    atomic_int rc;
} repub;

static bool repub_consumer(seda_env_t *env, void *ud)
{
    repub *r = ud;
    (void)env;
    atomic_store_explicit(&r->rc, tu_publish_u64(r->bus, "b", 77, NULL),
                          memory_order_relaxed);
    return true;
}

static void test_bus_consumer_may_publish(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 0, NULL);
    repub *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->bus = f->bus;
    atomic_init(&r->rc, 1);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "a";
    seda_stage_t *a = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &a, NULL, 0), 0);
    assert_true(seda_stage_consume(a, repub_consumer, r) >= 0);
    fx_stage(f, "b", 1, NULL, NULL);
    must_publish(f, "a", 1);
    TU_WAIT(tu_counter_wait_ge(&f->rec[1].calls, 1, TU_DEADLINE),
            "the envelope published by a consumer to arrive");
    wait_idle(f);
    int rc = atomic_load_explicit(&r->rc, memory_order_relaxed);
    seda_bus_stats b = bstats(f->bus);
    seda_bus_free(f->bus);
    f->bus = NULL;
    free(r);
    assert_int_equal(rc, 0);
    assert_int_equal(b.accepted, 2);
    assert_int_equal(b.completed, 2);
}

/* Worker hooks: start runs once per worker on that worker, its result is
 * seda_worker_data() there; stop runs on the same thread at exit. */
#define HOOK_MAX 8
typedef struct hooks {
    pthread_mutex_t mu;
    int starts, stops;              /* guarded by mu */
    bool seen[HOOK_MAX];            /* guarded by mu */
    pthread_t thr[HOOK_MAX];        /* guarded by mu */
    bool stop_same_thread;          /* guarded by mu */
    bool data_ok;                   /* guarded by mu */
    int data[HOOK_MAX];
    int bad;                        /* guarded by mu */
} hooks;

static void *hook_start(int index, void *ud)
{
    hooks *h = ud;
    pthread_mutex_lock(&h->mu);
    h->starts++;
    if (index < 0 || index >= HOOK_MAX || h->seen[index]) {
        h->bad++;
        pthread_mutex_unlock(&h->mu);
        return NULL;
    }
    h->seen[index] = true;
    h->thr[index] = pthread_self();
    pthread_mutex_unlock(&h->mu);
    return &h->data[index];
}

static void hook_stop(int index, void *data, void *ud)
{
    hooks *h = ud;
    pthread_mutex_lock(&h->mu);
    h->stops++;
    if (index < 0 || index >= HOOK_MAX || data != &h->data[index] ||
        !pthread_equal(h->thr[index], pthread_self()))
        h->bad++;
    pthread_mutex_unlock(&h->mu);
}

static bool hook_consumer(seda_env_t *env, void *ud)
{
    hooks *h = ud;
    (void)env;
    int i = seda_worker_index();
    void *d = seda_worker_data();
    pthread_mutex_lock(&h->mu);
    if (i < 0 || i >= HOOK_MAX || d != &h->data[i])
        h->bad++;
    else
        h->data_ok = true;
    pthread_mutex_unlock(&h->mu);
    return true;
}

static void test_bus_worker_hooks(void **state)
{
    fx_t *f = *state;
    hooks *h = calloc(1, sizeof *h);
    assert_non_null(h);
    pthread_mutex_init(&h->mu, NULL);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 3;
    bo.worker_start = hook_start;
    bo.worker_stop = hook_stop;
    bo.worker_ud = h;
    assert_int_equal(seda_bus_new(&bo, &f->bus), 0);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "h";
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &st, NULL, 0), 0);
    assert_true(seda_stage_consume(st, hook_consumer, h) >= 0);
    for (uint64_t i = 0; i < 10; i++)
        must_publish(f, "h", i);
    TU_WAIT(tu_counter_wait_ge(&f->out[SEDA_COMPLETED], 10, TU_DEADLINE),
            "10 done(SEDA_COMPLETED)");
    assert_int_equal(seda_worker_index(), -1);
    assert_null(seda_worker_data());
    seda_bus_free(f->bus);
    f->bus = NULL;
    pthread_mutex_lock(&h->mu);
    int starts = h->starts, stops = h->stops, bad = h->bad;
    bool data_ok = h->data_ok;
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_destroy(&h->mu);
    free(h);
    assert_int_equal(starts, 3);
    assert_int_equal(stops, 3);
    assert_int_equal(bad, 0);
    assert_true(data_ok);
}

static void test_bus_wait_idle_times_out_while_busy(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 2, 1, NULL);
    fx_stage(f, "g", 0, NULL, NULL);
    f->rec[0].gated = true;
    must_publish(f, "g", 1);
    TU_WAIT(tu_counter_wait_ge(&f->rec[0].calls, 1, TU_DEADLINE),
            "envelope 1 in the gated handler");
    assert_int_equal(seda_bus_wait_idle(f->bus, 0.05), SEDA_ETIMEDOUT);
    assert_int_equal(bstats(f->bus).in_system, 1);
    check_balance(f->bus);
    tu_gate_open(&f->gate);
    wait_idle(f);
    assert_int_equal(bstats(f->bus).in_system, 0);
}

/* ---- max_payload ---- */

/* A consumer that tries payloads of 101 and 100 bytes (max_payload is
 * 100) and records what each returned. */
typedef struct size_probe {
    atomic_int over_rc, at_rc, calls;
} size_probe;

static bool size_consumer(seda_env_t *env, void *ud)
{
    size_probe *p = ud;
    static const char buf[101];
    atomic_store_explicit(&p->over_rc, seda_env_set_payload(env, buf, 101),
                          memory_order_relaxed);
    atomic_store_explicit(&p->at_rc, seda_env_set_payload(env, buf, 100),
                          memory_order_relaxed);
    atomic_fetch_add_explicit(&p->calls, 1, memory_order_release);
    return true;
}

static void test_bus_max_payload_refuses_larger(void **state)
{
    (void)state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    bo.max_payload = (size_t)UINT32_MAX + 1;
    seda_bus_t *bus = NULL;
    assert_int_equal(seda_bus_new(&bo, &bus), SEDA_EINVAL);
    bo.max_payload = 0;                 /* the default */
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    assert_int_equal(seda_bus_max_payload(bus), SEDA_MAX_PAYLOAD_DEFAULT);
    seda_bus_free(bus);
    bo.max_payload = 100;
    assert_int_equal(seda_bus_new(&bo, &bus), 0);
    assert_int_equal(seda_bus_max_payload(bus), 100);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "s";
    seda_stage_t *st;
    assert_int_equal(seda_stage_add(bus, &so, &st, NULL, 0), 0);
    size_probe *p = calloc(1, sizeof *p);
    assert_non_null(p);
    assert_true(seda_stage_consume(st, size_consumer, p) >= 0);
    static const char big[101];
    assert_int_equal(seda_publish(bus, "s", big, 101, NULL), SEDA_ETOOLARGE);
    assert_int_equal(seda_stage_publish(st, big, 101, NULL), SEDA_ETOOLARGE);
    const void *pl[3] = { big, big, big };
    size_t ln[3] = { 10, 101, 10 };
    int err = 0;
    assert_int_equal(seda_publish_many(bus, "s", pl, ln, 3, NULL, &err), 1);
    assert_int_equal(err, SEDA_ETOOLARGE);
    assert_int_equal(seda_publish(bus, "s", big, 100, NULL), 0);
    assert_int_equal(seda_bus_wait_idle(bus, 10), 0);
    assert_int_equal(atomic_load(&p->calls), 2);
    assert_int_equal(atomic_load(&p->over_rc), SEDA_ETOOLARGE);
    assert_int_equal(atomic_load(&p->at_rc), 0);
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    assert_int_equal(bs.accepted, 2);
    assert_int_equal(bs.completed, 2);
    seda_bus_free(bus);
    free(p);
}

/* A slip array with no count is a caller's mistake, not "no slip": it is
 * refused (SEDA_EINVAL) and nothing is accepted. */
static void test_bus_publish_slip_without_count_is_einval(void **state)
{
    fx_t *f = *state;
    fx_bus(f, 1, 0, NULL);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "s";
    seda_stage_t *st = NULL;
    assert_int_equal(seda_stage_add(f->bus, &so, &st, NULL, 0), 0);
    static const char *const hops[] = { "s" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.slip = hops;
    po.nslip = 0;
    assert_int_equal(seda_publish(f->bus, "s", "x", 1, &po), SEDA_EINVAL);
    assert_int_equal(seda_stage_publish(st, "x", 1, &po), SEDA_EINVAL);
    seda_bus_stats bs;
    seda_bus_stats_get(f->bus, &bs);
    assert_int_equal(bs.accepted, 0);
    po.slip = NULL;                     /* no slip at all: accepted */
    assert_int_equal(seda_publish(f->bus, "s", "x", 1, &po), 0);
}

/* A consumer that holds its worker past hold_warn is a long hold: counted
 * on its stage and the bus; one that waits as long inside
 * seda_block_begin/end (the worker lent) is not, and hold_warn < 0 turns
 * the count off.  Bad values are refused. */
static bool hold_consumer(seda_env_t *env, void *ud)
{
    (void)env;
    struct timespec t = { 0, 250000000L };      /* 0.25 s */
    void *tok = ud ? seda_block_begin() : NULL;
    while (nanosleep(&t, &t) != 0)
        ;
    if (ud)
        seda_block_end(tok);
    return true;
}

static void test_bus_long_hold_counted(void **state)
{
    (void)state;
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    seda_bus_t *bus = NULL;
    static const double bad[] = { 3601, NAN };
    for (int i = 0; i < 2; i++) {
        bo.hold_warn = bad[i];
        assert_int_equal(seda_bus_new(&bo, &bus), SEDA_EINVAL);
    }
    for (int off = 0; off < 2; off++) {
        bo.hold_warn = off ? -1 : 0.1;
        assert_int_equal(seda_bus_new(&bo, &bus), 0);
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        seda_stage_t *held, *lent;
        so.name = "held";
        assert_int_equal(seda_stage_add(bus, &so, &held, NULL, 0), 0);
        so.name = "lent";
        assert_int_equal(seda_stage_add(bus, &so, &lent, NULL, 0), 0);
        assert_true(seda_stage_consume(held, hold_consumer, NULL) >= 0);
        assert_true(seda_stage_consume(lent, hold_consumer, bus) >= 0);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(seda_publish(bus, "held", "x", 1, NULL), 0);
            assert_int_equal(seda_publish(bus, "lent", "x", 1, NULL), 0);
        }
        assert_int_equal(seda_bus_wait_idle(bus, 30), 0);
        seda_stage_stats ss;
        seda_stage_stats_get(held, &ss);
        assert_int_equal(ss.long_holds, off ? 0 : 2);
        seda_stage_stats_get(lent, &ss);
        assert_int_equal(ss.long_holds, 0);
        seda_bus_stats bs;
        seda_bus_stats_get(bus, &bs);
        assert_int_equal(bs.long_holds, off ? 0 : 2);
        seda_bus_free(bus);
    }
}

/* ==================================================================== */

#define FX(t) cmocka_unit_test_setup_teardown(t, fx_setup, fx_teardown)


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bus_strerror_words),
        cmocka_unit_test(test_bus_now_keeps_pace_with_monotonic),
        cmocka_unit_test(test_bus_max_payload_refuses_larger),
        cmocka_unit_test(test_bus_long_hold_counted),
        FX(test_bus_stats_fields),
        FX(test_bus_workers_zero_means_cpus),
        FX(test_bus_publish_many_in_order),
        FX(test_bus_publish_many_stops_at_refusal),
        FX(test_bus_envelope_accessors),
        FX(test_bus_consumer_may_publish),
        FX(test_bus_worker_hooks),
        FX(test_bus_wait_idle_times_out_while_busy),
        FX(test_bus_publish_slip_without_count_is_einval),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("bus_api", tests, NULL, NULL);
}
