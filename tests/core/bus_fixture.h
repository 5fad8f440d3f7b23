/* SPDX-License-Identifier: MIT */
/*
 * bus_fixture.h -- the heap fixture of the bus contract tests (test_bus.c,
 * test_routing.c, test_bus_api.c): recording consumers, done callbacks,
 * helpers.
 *
 * Every test keeps its consumers' state in a heap fixture that outlives
 * the bus: teardown frees the bus first (joining the pool), then the
 * state, so a failed assertion never leaves a worker with a dangling
 * pointer.  Consumers never call cmocka; they record, the test checks.
 */
#ifndef SEDA_BUS_FIXTURE_H
#define SEDA_BUS_FIXTURE_H

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

static inline int fx_setup(void **state)
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

static inline int fx_teardown(void **state)
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

static inline void fx_bus(fx_t *f, int workers, int batch, const char *dlq)
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
static inline seda_stage_t *fx_stage(fx_t *f, const char *name, int rec_index,
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

static inline void tweak_apply(seda_stage_opts *so, void *arg)
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

static inline void fx_done(seda_env_t *env, int outcome, void *ud)
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

static inline void fx_popts(fx_t *f, seda_publish_opts *o)
{
    seda_publish_opts_init(o);
    o->done = fx_done;
    o->done_ud = f;
}

static inline bool rec_consumer(seda_env_t *env, void *ud)
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

static inline int rec_bad(rec_t *r)
{
    return atomic_load_explicit(&r->bad, memory_order_relaxed) +
           atomic_load_explicit(&r->gate_timeouts, memory_order_relaxed);
}

static inline void rec_str(rec_t *r, const char *what, char *out)
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

static inline void expect_header(rec_t *r, const char *what, const char *want)
{
    char got[STR_MAX];
    rec_str(r, what, got);
    if (strcmp(got, want) != 0)
        fail_msg("stage '%s': %s is \"%s\", want \"%s\"", r->name, what, got,
                 want);
}

static inline void wait_idle(fx_t *f)
{
    int rc = seda_bus_wait_idle(f->bus, TU_DEADLINE);
    if (rc != 0)
        fail_msg("seda_bus_wait_idle: %d (%s)", rc, seda_strerror(rc));
}

static inline long outc(fx_t *f, int outcome)
{
    return tu_counter_get(&f->out[outcome]);
}

static inline void check_balance(seda_bus_t *bus)
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

static inline seda_stage_stats sstats(seda_stage_t *st)
{
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    return s;
}

static inline seda_bus_stats bstats(seda_bus_t *bus)
{
    seda_bus_stats b;
    seda_bus_stats_get(bus, &b);
    return b;
}

static inline int publish_u64(fx_t *f, const char *to, uint64_t v)
{
    seda_publish_opts po;
    fx_popts(f, &po);
    return tu_publish_u64(f->bus, to, v, &po);
}

static inline void must_publish(fx_t *f, const char *to, uint64_t v)
{
    int rc = publish_u64(f, to, v);
    if (rc != 0)
        fail_msg("publish to '%s': %d (%s)", to, rc, seda_strerror(rc));
}

#endif
