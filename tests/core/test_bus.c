/* SPDX-License-Identifier: MIT */
/*
 * test_bus.c -- the bus contract through the public C API.
 *
 * C2 retry then dead letter, C3 failure isolation, C4 shutdown accounting,
 * C6 no leak across lifecycles, C8 routing slip, C9 pub/sub, C13 pause /
 * resume / closed, plus statistics, publish_many, envelope accessors and
 * worker hooks.
 *
 * Every test keeps its consumers' state in a heap fixture that outlives
 * the bus: teardown frees the bus first (joining the pool), then the
 * state, so a failed assertion never leaves a worker with a dangling
 * pointer.  Consumers never call cmocka; they record, the test checks.
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

/* ====================================================================
 * fixture
 * ==================================================================== */

#define NREC 10
#define LOG_MAX 256
#define STR_MAX 256

typedef struct fx fx_t;

/* One recording consumer.  Behaviour flags are set before publishing and
 * never change while the bus runs. */
typedef struct rec {
    fx_t *fx;
    char name[SEDA_NAME_MAX + 1];
    /* behaviour (immutable while running) */
    bool gated;                /* wait on fx->gate before returning */
    int nack_before;           /* nack while attempts < nack_before */
    bool always_nack;
    int fail_every;            /* ids % fail_every == 0 fail (nack) */
    bool use_env_fail;         /* fail via seda_env_fail + return true */
    bool append;               /* append "|name" to payload, set header */
    const char *const *fwd;    /* seda_env_forward these hops... */
    int nfwd;                  /* ...this many */
    double spin;               /* busy seconds per call */
    tu_rendezvous *meet;       /* arrive here before returning */
    /* observations */
    tu_counter calls;
    tu_idset ids;              /* u64 payloads acked */
    pthread_mutex_t mu;
    int attempts[LOG_MAX];     /* attempts seen, in order; guarded by mu */
    int nattempts;             /* guarded by mu */
    char reason[STR_MAX];      /* last x-dead-reason; guarded by mu */
    char from[STR_MAX];        /* last x-dead-from; guarded by mu */
    char hdr_k[STR_MAX];       /* last header "k"; guarded by mu */
    char to[STR_MAX];          /* last seda_env_to; guarded by mu */
    uint64_t seq;              /* last seq; guarded by mu */
    int slip[8];               /* slip count at each call; guarded by mu */
    atomic_int bad;            /* inconsistencies seen in the consumer */
    atomic_int gate_timeouts;
} rec_t;

struct fx {
    seda_bus_t *bus;
    tu_gate gate;
    tu_counter out[3];         /* done callbacks by outcome */
    tu_counter out_bad;        /* done callbacks with another outcome */
    tu_idset done_seqs;        /* seqs of done callbacks */
    pthread_mutex_t mu;
    char done_payload[STR_MAX]; /* payload at the last done; guarded by mu */
    int done_slip;             /* slip count at the last done; mu */
    uint64_t done_seq;         /* mu */
    char done_hdrs[STR_MAX];   /* "k=v;" list at the last done; mu */
    pthread_mutex_t log_mu;
    char log[LOG_MAX][SEDA_NAME_MAX + 8]; /* "stage/attempt"; log_mu */
    uint64_t order[LOG_MAX];   /* u64 payloads in order; log_mu */
    int nlog, norder;          /* log_mu */
    rec_t rec[NREC];
    /* helper thread (shutdown or publisher) */
    pthread_t thr;
    bool thr_started;
    tu_latch thr_done;
    double thr_timeout;
    int thr_rc;                /* written before thr_done counts down */
};

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    tu_gate_init(&f->gate);
    for (int i = 0; i < 3; i++)
        tu_counter_init(&f->out[i]);
    tu_counter_init(&f->out_bad);
    tu_idset_init(&f->done_seqs);
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->log_mu, NULL);
    f->done_slip = -1;
    for (int i = 0; i < NREC; i++) {
        rec_t *r = &f->rec[i];
        r->fx = f;
        tu_counter_init(&r->calls);
        tu_idset_init(&r->ids);
        pthread_mutex_init(&r->mu, NULL);
        atomic_init(&r->bad, 0);
        atomic_init(&r->gate_timeouts, 0);
    }
    tu_latch_init(&f->thr_done, 1);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    tu_gate_open(&f->gate);
    if (f->bus != NULL && f->thr_started)
        seda_bus_shutdown_now(f->bus); /* wakes a blocked publisher */
    if (f->thr_started)
        pthread_join(f->thr, NULL);
    seda_bus_free(f->bus);
    tu_counter_destroy(&f->thr_done);
    for (int i = 0; i < NREC; i++) {
        rec_t *r = &f->rec[i];
        pthread_mutex_destroy(&r->mu);
        tu_idset_destroy(&r->ids);
        tu_counter_destroy(&r->calls);
    }
    pthread_mutex_destroy(&f->log_mu);
    pthread_mutex_destroy(&f->mu);
    tu_idset_destroy(&f->done_seqs);
    tu_counter_destroy(&f->out_bad);
    for (int i = 0; i < 3; i++)
        tu_counter_destroy(&f->out[i]);
    tu_gate_destroy(&f->gate);
    free(f);
    return 0;
}

static void fx_bus(fx_t *f, int workers, int batch, const char *dlq)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = workers;
    if (batch > 0)
        bo.batch = batch;
    bo.dead_letter = dlq;
    int rc = seda_bus_new(&bo, &f->bus);
    if (rc != 0)
        fail_msg("seda_bus_new: %d (%s)", rc, seda_strerror(rc));
}

static bool rec_consumer(seda_env_t *env, void *ud);

/* Add a stage; rec_index >= 0 attaches fx->rec[rec_index] as consumer. */
static seda_stage_t *fx_stage(fx_t *f, const char *name, int rec_index,
                              void (*tweak)(seda_stage_opts *, void *),
                              void *arg)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = name;
    if (tweak != NULL)
        tweak(&so, arg);
    seda_stage_t *st = NULL;
    char err[256] = "";
    int rc = seda_stage_add(f->bus, &so, &st, err, sizeof err);
    if (rc != 0)
        fail_msg("seda_stage_add(%s): %d (%s) %s", name, rc,
                 seda_strerror(rc), err);
    if (rec_index >= 0) {
        rec_t *r = &f->rec[rec_index];
        snprintf(r->name, sizeof r->name, "%s", name);
        assert_true(seda_stage_consume(st, rec_consumer, r) >= 0);
    }
    return st;
}

/* Common tweaks. */
typedef struct tweak_args {
    int capacity, concurrency, max_attempts, policy, delivery;
    const char *dead_letter;
    double publish_timeout;
} tweak_args;

static void tweak_apply(seda_stage_opts *so, void *arg)
{
    const tweak_args *t = arg;
    if (t == NULL)
        return;
    if (t->capacity > 0)
        so->capacity = t->capacity;
    if (t->concurrency > 0)
        so->concurrency = t->concurrency;
    if (t->max_attempts > 0)
        so->max_attempts = t->max_attempts;
    if (t->policy > 0)
        so->policy = t->policy;
    if (t->delivery > 0)
        so->delivery = t->delivery;
    if (t->dead_letter != NULL)
        so->dead_letter = t->dead_letter;
    if (t->publish_timeout > 0)
        so->publish_timeout = t->publish_timeout;
}

static void fx_done(seda_env_t *env, int outcome, void *ud)
{
    fx_t *f = ud;
    pthread_mutex_lock(&f->mu);
    size_t len = 0;
    const void *p = seda_env_payload(env, &len);
    if (len >= STR_MAX)
        len = STR_MAX - 1;
    if (p != NULL)
        memcpy(f->done_payload, p, len);
    f->done_payload[len] = '\0';
    f->done_slip = seda_env_slip_count(env);
    f->done_seq = seda_env_seq(env);
    f->done_hdrs[0] = '\0';
    int nh = seda_env_header_count(env);
    for (int i = 0; i < nh; i++) {
        const char *k = NULL, *v = NULL;
        seda_env_header_at(env, i, &k, &v);
        size_t used = strlen(f->done_hdrs);
        snprintf(f->done_hdrs + used, sizeof f->done_hdrs - used, "%s=%s;",
                 k ? k : "(null)", v ? v : "(null)");
    }
    pthread_mutex_unlock(&f->mu);
    tu_idset_add(&f->done_seqs, seda_env_seq(env));
    if (outcome >= SEDA_COMPLETED && outcome <= SEDA_DROPPED)
        tu_counter_add(&f->out[outcome], 1);
    else
        tu_counter_add(&f->out_bad, 1);
}

static void fx_popts(fx_t *f, seda_publish_opts *o)
{
    seda_publish_opts_init(o);
    o->done = fx_done;
    o->done_ud = f;
}

static bool rec_consumer(seda_env_t *env, void *ud)
{
    rec_t *r = ud;
    fx_t *f = r->fx;
    int att = seda_env_attempts(env);
    const char *reason = seda_env_header(env, "x-dead-reason");
    const char *from = seda_env_header(env, "x-dead-from");
    const char *k = seda_env_header(env, "k");
    const char *to = seda_env_to(env);
    pthread_mutex_lock(&r->mu);
    if (r->nattempts < LOG_MAX) {
        if (r->nattempts < 8)
            r->slip[r->nattempts] = seda_env_slip_count(env);
        r->attempts[r->nattempts++] = att;
    }
    snprintf(r->reason, STR_MAX, "%s", reason ? reason : "");
    snprintf(r->from, STR_MAX, "%s", from ? from : "");
    snprintf(r->hdr_k, STR_MAX, "%s", k ? k : "");
    snprintf(r->to, STR_MAX, "%s", to ? to : "");
    r->seq = seda_env_seq(env);
    pthread_mutex_unlock(&r->mu);

    size_t len = 0;
    const void *p = seda_env_payload(env, &len);
    uint64_t id = tu_env_u64(env);
    pthread_mutex_lock(&f->log_mu);
    if (f->nlog < LOG_MAX)
        snprintf(f->log[f->nlog++], sizeof f->log[0], "%s/%d", r->name,
                 att);
    if (f->norder < LOG_MAX)
        f->order[f->norder++] = id;
    pthread_mutex_unlock(&f->log_mu);
    tu_counter_add(&r->calls, 1); /* after recording: waiters read it */

    if (r->spin > 0)
        tu_spin(r->spin);
    if (r->meet != NULL && !tu_rendezvous_arrive(r->meet, TU_DEADLINE))
        atomic_fetch_add_explicit(&r->gate_timeouts, 1,
                                  memory_order_relaxed); /* counter */
    if (r->gated && !tu_gate_wait(&f->gate, TU_DEADLINE))
        atomic_fetch_add_explicit(&r->gate_timeouts, 1,
                                  memory_order_relaxed); /* counter */

    if (r->always_nack || att < r->nack_before)
        return false;
    if (r->fail_every > 0 && id != UINT64_MAX &&
        id % (uint64_t)r->fail_every == 0) {
        if (r->use_env_fail) {
            seda_env_fail(env, "test: deliberate failure");
            return true; /* must still count as a nack */
        }
        return false;
    }
    if (r->append) {
        char buf[STR_MAX];
        if (len >= STR_MAX - SEDA_NAME_MAX - 2) {
            atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
            return true;
        }
        memcpy(buf, p, len);
        int n = snprintf(buf + len, sizeof buf - len, "|%s", r->name);
        if (seda_env_set_payload(env, buf, len + (size_t)n) != 0)
            atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
        char hk[SEDA_NAME_MAX + 3];
        snprintf(hk, sizeof hk, "h-%s", r->name);
        if (seda_env_set_header(env, hk, r->name) != 0)
            atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
    }
    if (r->nfwd > 0 && seda_env_forward(env, r->fwd, r->nfwd) != 0)
        atomic_fetch_add_explicit(&r->bad, 1, memory_order_relaxed);
    if (id != UINT64_MAX)
        tu_idset_add(&r->ids, id);
    return true;
}

static int rec_bad(rec_t *r)
{
    return atomic_load_explicit(&r->bad, memory_order_relaxed) +
           atomic_load_explicit(&r->gate_timeouts, memory_order_relaxed);
}

static void rec_str(rec_t *r, const char *what, char *out)
{
    pthread_mutex_lock(&r->mu);
    if (strcmp(what, "reason") == 0)
        snprintf(out, STR_MAX, "%s", r->reason);
    else if (strcmp(what, "from") == 0)
        snprintf(out, STR_MAX, "%s", r->from);
    else if (strcmp(what, "k") == 0)
        snprintf(out, STR_MAX, "%s", r->hdr_k);
    else
        snprintf(out, STR_MAX, "%s", r->to);
    pthread_mutex_unlock(&r->mu);
}

static void expect_header(rec_t *r, const char *what, const char *want)
{
    char got[STR_MAX];
    rec_str(r, what, got);
    if (strcmp(got, want) != 0)
        fail_msg("stage '%s': %s is \"%s\", want \"%s\"", r->name, what, got,
                 want);
}

static void wait_idle(fx_t *f)
{
    int rc = seda_bus_wait_idle(f->bus, TU_DEADLINE);
    if (rc != 0)
        fail_msg("seda_bus_wait_idle: %d (%s)", rc, seda_strerror(rc));
}

static long outc(fx_t *f, int outcome)
{
    return tu_counter_get(&f->out[outcome]);
}

static void check_balance(seda_bus_t *bus)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    if (b.accepted != b.completed + b.dead_lettered + b.dropped +
                          b.in_system)
        fail_msg("accepted %llu != completed %llu + dead %llu + dropped "
                 "%llu + in_system %llu",
                 (unsigned long long)b.accepted,
                 (unsigned long long)b.completed,
                 (unsigned long long)b.dead_lettered,
                 (unsigned long long)b.dropped,
                 (unsigned long long)b.in_system);
}

static seda_stage_stats sstats(seda_stage_t *st)
{
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    return s;
}

static seda_bus_stats bstats(seda_bus_t *bus)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    return b;
}

static int publish_u64(fx_t *f, const char *to, uint64_t v)
{
    seda_publish_opts po;
    fx_popts(f, &po);
    return tu_publish_u64(f->bus, to, v, &po);
}

static void must_publish(fx_t *f, const char *to, uint64_t v)
{
    int rc = publish_u64(f, to, v);
    if (rc != 0)
        fail_msg("publish to '%s': %d (%s)", to, rc, seda_strerror(rc));
}

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

static bool wait_threads(int want, double timeout)
{
    double end = seda_now() + timeout;
    while (tu_thread_count() != want) {
        if (seda_now() > end)
            return false;
        struct timespec nap = {0, 1000000}; /* polling back-off only */
        nanosleep(&nap, NULL);
    }
    return true;
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
        if (!wait_threads(threads, TU_DEADLINE))
            fail_msg("lifecycle %d: %d threads after seda_bus_free, "
                     "baseline %d", i, tu_thread_count(), threads);
        int nf = tu_fd_count();
        if (nf != fds)
            fail_msg("lifecycle %d: %d open fds after seda_bus_free, "
                     "baseline %d", i, nf, fds);
    }
}

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

/* ==================================================================== */

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
        FX(test_bus_c13_pause_refuses_inflight_completes),
        FX(test_bus_c13_closed_after_shutdown),
        cmocka_unit_test(test_bus_strerror_words),
        cmocka_unit_test(test_bus_now_keeps_pace_with_monotonic),
        FX(test_bus_stats_fields),
        FX(test_bus_workers_zero_means_cpus),
        FX(test_bus_publish_many_in_order),
        FX(test_bus_publish_many_stops_at_refusal),
        FX(test_bus_envelope_accessors),
        FX(test_bus_consumer_may_publish),
        FX(test_bus_worker_hooks),
        FX(test_bus_wait_idle_times_out_while_busy),
    };
    if (getenv("TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("bus", tests, NULL, NULL);
}
