/* SPDX-License-Identifier: MIT */
/*
 * test_trust.c -- regression tests of remote stages you can trust (issue
 * 26), each against a real nats-server (tests/remote/natsd.h): no double
 * handling in one process, completions acknowledged and never lost
 * silently, the stream re-declared when the server lost it, forged
 * completions refused, credentials never shown, over-size publishes
 * refused "too_large", hops waiting out a reconnect, pub/sub retries
 * that do not re-run acked handlers, and typed stages checked at intake.
 *
 * Every wait has a deadline (DL seconds) and fails the test with what
 * did not happen.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <nats/nats.h>

#include "natsd.h"
#include "core/seda_int.h"
#include "remote/wire.h"
#include "seda.h"
#include "seda_remote.h"
#include "testutil.h"

#define DL 30.0

static struct natsd g_srv;              /* the file's server */

/* ---- a recording consumer ---- */

#define NIDS 4096

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;                  /* guarded by mu */
    int twice;                  /* calls for an id seen before; mu */
    char (*ids)[64];            /* ids seen (NIDS); guarded by mu */
    int nids;                   /* guarded by mu */
    char last_reason[64];       /* x-dead-reason of the last; mu */
    char last_detail[256];      /* x-dead-detail of the last; mu */
    double sleep;               /* seconds each call takes */
    bool nack;                  /* set before use */
    size_t grow;                /* a payload of this many bytes, if > 0 */
};

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    r->ids = calloc(NIDS, sizeof *r->ids);
    pthread_mutex_init(&r->mu, NULL);
    tu_cond_init(&r->cv);
}

static void rec_destroy(struct rec *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->ids);
}

static void nap(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

static bool record(seda_env_t *env, void *ud)
{
    struct rec *r = ud;
    char id[SEDA_ID_MAX];
    seda_env_id(env, id);
    const char *reason = seda_env_header(env, "x-dead-reason");
    const char *detail = seda_env_header(env, "x-dead-detail");
    pthread_mutex_lock(&r->mu);
    bool seen = false;
    for (int i = 0; i < r->nids && !seen; i++)
        seen = strcmp(r->ids[i], id) == 0;
    if (seen)
        r->twice++;
    else if (r->nids < NIDS)
        snprintf(r->ids[r->nids++], sizeof r->ids[0], "%.63s", id);
    r->calls++;
    snprintf(r->last_reason, sizeof r->last_reason, "%s",
             reason ? reason : "");
    snprintf(r->last_detail, sizeof r->last_detail, "%s",
             detail ? detail : "");
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->sleep > 0)
        nap(r->sleep);
    if (r->grow) {
        char *big = malloc(r->grow);
        memset(big, 'x', r->grow);
        seda_env_set_payload(env, big, r->grow);
        free(big);
    }
    return !r->nack;
}

/* Wait until calls >= n; false at the deadline. */
static bool rec_wait(struct rec *r, int n)
{
    struct timespec ts;
    tu_abstime(DL, &ts);
    pthread_mutex_lock(&r->mu);
    while (r->calls < n && pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0) {
    }
    bool ok = r->calls >= n;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static int rec_get(struct rec *r, int *twice)
{
    pthread_mutex_lock(&r->mu);
    int n = r->calls;
    if (twice)
        *twice = r->twice;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- done callbacks ---- */

struct done_rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int completed, dead, dropped;   /* guarded by mu */
    char reason[64];                /* x-dead-reason of the last; mu */
    char detail[256];               /* x-dead-detail of the last; mu */
    char payload[64];               /* the last completed one's; mu */
};

static void done_init(struct done_rec *d)
{
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    tu_cond_init(&d->cv);
}

static void done_destroy(struct done_rec *d)
{
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
}

static void on_done(seda_env_t *env, int outcome, void *ud)
{
    struct done_rec *d = ud;
    const char *reason = seda_env_header(env, "x-dead-reason");
    const char *detail = seda_env_header(env, "x-dead-detail");
    pthread_mutex_lock(&d->mu);
    if (outcome == SEDA_COMPLETED) {
        d->completed++;
        size_t len;
        const char *p = seda_env_payload(env, &len);
        snprintf(d->payload, sizeof d->payload, "%.*s",
                 (int)(len < 63 ? len : 63), p ? p : "");
    } else if (outcome == SEDA_DEAD_LETTERED) {
        d->dead++;
    } else {
        d->dropped++;
    }
    snprintf(d->reason, sizeof d->reason, "%s", reason ? reason : "");
    snprintf(d->detail, sizeof d->detail, "%s", detail ? detail : "");
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Wait until completed + dead + dropped >= n. */
static bool done_wait(struct done_rec *d, int n)
{
    struct timespec ts;
    tu_abstime(DL, &ts);
    pthread_mutex_lock(&d->mu);
    while (d->completed + d->dead + d->dropped < n &&
           pthread_cond_timedwait(&d->cv, &d->mu, &ts) == 0) {
    }
    bool ok = d->completed + d->dead + d->dropped >= n;
    pthread_mutex_unlock(&d->mu);
    return ok;
}

/* ---- helpers ---- */

static seda_bus_t *new_bus(int workers)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = workers;
    seda_bus_t *b;
    assert_int_equal(seda_bus_new(&bo, &b), 0);
    return b;
}

struct radd {
    const char *name, *stream, *url, *dlq;
    int capacity, max_attempts;
    double ack_wait, handler_timeout;
    bool consume;
    int delivery;
};

static seda_stage_t *add_remote(seda_bus_t *b, const struct radd *a)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = a->name;
    so.max_attempts = a->max_attempts ? a->max_attempts : 1;
    so.dead_letter = a->dlq;
    so.capacity = a->capacity ? a->capacity : 64;
    so.handler_timeout = a->handler_timeout;
    so.delivery = a->delivery;
    seda_remote_opts ro;
    seda_remote_opts_init(&ro);
    ro.url = a->url ? a->url : g_srv.url;
    ro.stream = a->stream;
    ro.ack_wait = a->ack_wait;
    ro.consume = a->consume;
    seda_stage_t *st = NULL;
    char err[512];
    int rc = seda_remote_stage_add(b, &so, &ro, &st, err, sizeof err);
    if (rc)
        fail_msg("seda_remote_stage_add: %s", err);
    return st;
}

static seda_stage_t *add_local(seda_bus_t *b, const char *name)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = name;
    seda_stage_t *st;
    char err[256];
    if (seda_stage_add(b, &so, &st, err, sizeof err))
        fail_msg("seda_stage_add: %s", err);
    return st;
}

static void assert_books(seda_bus_t *b)
{
    seda_bus_stats s;
    seda_bus_stats_get(b, &s);
    assert_int_equal(s.accepted, s.completed + s.dead_lettered + s.dropped +
                                     s.handed_off + s.in_system);
}

static bool wait_idle(seda_bus_t *b)
{
    return seda_bus_wait_idle(b, DL) == 0;
}

/* ---- 1: no double handling in one process ---- */

/* More taken in than the handler gets through within ack_wait: before,
 * JetStream redelivered what waited in the local queue and this very
 * process handled it again (and dead-lettered some max_attempts). */
static void test_trust_held_messages_are_handled_once(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1);
    struct rec rr, rd;
    rec_init(&rr);
    rec_init(&rd);
    rr.sleep = 0.02;                    /* 50 a second, at most */
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "slow", .stream = "C1", .capacity = 100, .ack_wait = 1,
        .max_attempts = 1, .dlq = "dlq", .consume = true });
    int n = 250;
    for (int i = 0; i < n; i++)
        assert_int_equal(seda_publish(b, "slow", "x", 1, NULL), 0);
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    if (!rec_wait(&rr, n))
        fail_msg("%d of %d handled", rec_get(&rr, NULL), n);
    assert_true(wait_idle(b));
    nap(1.5);                           /* a late redelivery would show */
    assert_true(wait_idle(b));
    int twice = 0;
    int calls = rec_get(&rr, &twice);
    seda_remote_stats rst;
    seda_remote_stats_get(st, &rst);
    if (calls != n || twice != 0 || rec_get(&rd, NULL) != 0)
        fail_msg("%d calls for %d envelopes, %d twice, %d dead-lettered "
                 "(in_progress %llu, held_twice %llu)", calls, n, twice,
                 rec_get(&rd, NULL), (unsigned long long)rst.in_progress,
                 (unsigned long long)rst.held_twice);
    assert_true(rst.in_progress > 0);
    assert_books(b);
    seda_bus_free(b);
    rec_destroy(&rr);
    rec_destroy(&rd);
}

/* ---- 2: completions that cannot be sent ---- */

/* The final payload is over the server's max_payload: before, the
 * consumer acked, the completion was never sent and the origin waited
 * forever.  Now the origin hears of it: dead-lettered, too_large. */
static void test_trust_completion_over_max_payload_ends_on_complete(
    void **state)
{
    (void)state;
    struct natsd srv;
    assert_true(natsd_prepare(&srv));
    snprintf(srv.conf, sizeof srv.conf, "%s/small.conf", srv.dir);
    FILE *f = fopen(srv.conf, "w");
    assert_non_null(f);
    fprintf(f, "max_payload: 4096\n");
    fclose(f);
    assert_true(natsd_start(&srv, &srv));
    seda_bus_t *origin = new_bus(1), *b = new_bus(1);
    add_remote(origin, &(struct radd){ .name = "grow", .stream = "C2",
                                       .url = srv.url });
    struct rec rr;
    rec_init(&rr);
    rr.grow = 6000;
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "grow", .stream = "C2", .url = srv.url, .consume = true });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    struct done_rec d;
    done_init(&d);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = on_done;
    o.done_ud = &d;
    assert_int_equal(seda_publish(origin, "grow", "x", 1, &o), 0);
    if (!done_wait(&d, 1))
        fail_msg("on_complete never fired (handled %d)", rec_get(&rr, NULL));
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.dead, 1);
    assert_string_equal(d.reason, "too_large");
    assert_non_null(strstr(d.detail, "4096"));
    pthread_mutex_unlock(&d.mu);
    assert_true(wait_idle(origin));
    assert_true(wait_idle(b));
    assert_books(origin);
    assert_books(b);
    seda_bus_free(b);
    seda_bus_free(origin);
    natsd_cleanup(&srv);
    rec_destroy(&rr);
    done_destroy(&d);
}

/* The server stopped (SIGSTOP) for 4 s while handlers end their
 * itineraries: the completions they send get no answer and are sent
 * again; once the server runs again every on_complete fires, once, and
 * none is dropped (the audit lost 2-4 of them after an 8 s stop). */
static void test_trust_completions_survive_a_stopped_server(void **state)
{
    (void)state;
    struct natsd srv;
    assert_true(natsd_start(&srv, NULL));
    seda_bus_t *origin = new_bus(1), *b = new_bus(1);
    add_remote(origin, &(struct radd){ .name = "slow", .stream = "C2S",
                                       .url = srv.url });
    struct rec rr;
    rec_init(&rr);
    rr.sleep = 0.3;
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "slow", .stream = "C2S", .url = srv.url, .consume = true });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    struct done_rec d;
    done_init(&d);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = on_done;
    o.done_ud = &d;
    enum { N = 6 };
    for (int i = 0; i < N; i++)
        assert_int_equal(seda_publish(origin, "slow", "x", 1, &o), 0);
    assert_true(rec_wait(&rr, 1));      /* taken in: handlers running */
    kill(srv.pid, SIGSTOP);
    nap(4.0);                           /* the stop, not a synchronisation */
    kill(srv.pid, SIGCONT);
    if (!done_wait(&d, N))
        fail_msg("%d of %d on_complete fired (handled %d)", d.completed, N,
                 rec_get(&rr, NULL));
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed, N);
    assert_int_equal(d.dead + d.dropped, 0);
    pthread_mutex_unlock(&d.mu);
    seda_remote_stats rst;
    seda_remote_stats_get(st, &rst);
    assert_int_equal(rst.completions_dropped, 0);
    assert_true(wait_idle(origin));
    assert_true(wait_idle(b));
    assert_books(origin);
    assert_books(b);
    seda_bus_free(b);
    seda_bus_free(origin);
    natsd_cleanup(&srv);
    rec_destroy(&rr);
    done_destroy(&d);
}

/* A publisher writing into a server that stopped answering (SIGSTOP):
 * the socket's buffers fill and the write blocks, holding the client's
 * lock.  Before, the ping that finds a silent server waited for that
 * lock, so the connection was never given up (the publisher stayed
 * blocked for as long as the server was stopped, minutes in a network
 * partition).  Now every write has a deadline: the connection is given
 * up within its bound (docs/remote.md: 11 s), the publisher hears
 * "unavailable", and once the server answers again every message that
 * was accepted is stored and completes -- none is reported dropped. */
struct stuck_pub {
    seda_bus_t *bus;
    struct done_rec *d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int accepted;               /* guarded by mu */
    int refused_rc;             /* the refusal's code (0: none); mu */
    bool ended;                 /* mu */
};

static void *stuck_publisher(void *arg)
{
    struct stuck_pub *p = arg;
    enum { SIZE = 256 * 1024, MAX = 400 };
    char *big = malloc(SIZE);
    memset(big, 'p', SIZE);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = on_done;
    o.done_ud = p->d;
    int rc = 0;
    for (int i = 0; i < MAX && rc == 0; i++) {
        rc = seda_publish(p->bus, "bulk", big, SIZE, &o);
        pthread_mutex_lock(&p->mu);
        if (rc == 0)
            p->accepted++;
        pthread_mutex_unlock(&p->mu);
    }
    free(big);
    pthread_mutex_lock(&p->mu);
    p->refused_rc = rc;
    p->ended = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void test_trust_silent_server_is_left_while_a_write_blocks(
    void **state)
{
    (void)state;
    struct natsd srv;
    assert_true(natsd_start(&srv, NULL));
    seda_bus_t *origin = new_bus(1), *b = new_bus(2);
    add_remote(origin, &(struct radd){ .name = "bulk", .stream = "STUCK",
                                       .url = srv.url, .capacity = 400 });
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "bulk", .stream = "STUCK", .url = srv.url, .consume = true,
        .capacity = 8 });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    struct done_rec d;
    done_init(&d);
    struct stuck_pub p = { .bus = origin, .d = &d };
    pthread_mutex_init(&p.mu, NULL);
    tu_cond_init(&p.cv);
    kill(srv.pid, SIGSTOP);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stuck_publisher, &p), 0);
    /* The bound is 11 s; a loaded machine is given more. */
    struct timespec ts;
    tu_abstime(25.0, &ts);
    pthread_mutex_lock(&p.mu);
    while (!p.ended && pthread_cond_timedwait(&p.cv, &p.mu, &ts) == 0) {
    }
    bool ended = p.ended;
    int accepted = p.accepted, rc = p.refused_rc;
    pthread_mutex_unlock(&p.mu);
    kill(srv.pid, SIGCONT);
    pthread_join(t, NULL);              /* ends once the server reads */
    if (!ended)
        fail_msg("the publisher was still blocked 25 s after the server "
                 "stopped answering (%d accepted)", accepted);
    assert_int_equal(rc, SEDA_EUNAVAIL);
    assert_true(accepted > 0);
    /* Everything accepted is stored and completes once the server is
     * back: nothing given up as dropped. */
    if (!done_wait(&d, accepted))
        fail_msg("%d of %d on_complete fired", d.completed, accepted);
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed, accepted);
    assert_int_equal(d.dead + d.dropped, 0);
    pthread_mutex_unlock(&d.mu);
    assert_true(wait_idle(origin));
    assert_true(wait_idle(b));
    seda_stage_t *ost = seda_bus_stage(origin, "bulk");
    seda_remote_stats ors;
    seda_remote_stats_get(ost, &ors);
    assert_true(ors.reconnects >= 1);
    assert_int_equal(ors.publish_failed, 0);
    assert_books(origin);
    assert_books(b);
    seda_bus_free(b);
    seda_bus_free(origin);
    natsd_cleanup(&srv);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    rec_destroy(&rr);
    done_destroy(&d);
}

/* ---- 3: the stream lost ---- */

/* The stream deleted under running processes (as a server restarted with
 * an empty store): before, nothing declared it again, the consumer
 * fetched nothing and the publisher re-sent in a tight loop. */
static void test_trust_lost_stream_is_declared_again(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "gone", .stream = "C3", .consume = true });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    assert_int_equal(seda_publish(b, "gone", "a", 1, NULL), 0);
    assert_true(rec_wait(&rr, 1));
    assert_true(wait_idle(b));
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, g_srv.url), NATS_OK);
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    assert_int_equal(js_DeleteStream(js, "C3", NULL, NULL), NATS_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(seda_publish(b, "gone", "b", 1, NULL), 0);
    if (!rec_wait(&rr, 6))
        fail_msg("%d of 5 handled after the stream was deleted",
                 rec_get(&rr, NULL) - 1);
    assert_true(wait_idle(b));
    seda_remote_stats rst;
    seda_remote_stats_get(st, &rst);
#ifndef TRUST_BEFORE
    assert_true(rst.redeclared >= 1);
#endif
    if (rst.republished > 100)
        fail_msg("%llu re-sends: no backoff",
                 (unsigned long long)rst.republished);
    assert_books(b);
    seda_bus_free(b);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    rec_destroy(&rr);
}

/* ---- 4: forged completions, foreign origins ---- */

static void publish_done(natsConnection *nc, const char *subject,
                         const char *id, const char *payload)
{
    struct rw_done dd = { .outcome = SEDA_COMPLETED, .id = id,
                          .stage = "far", .payload = payload,
                          .plen = strlen(payload) };
    struct rbuf body = { 0 };
    assert_int_equal(seda__rw_done_encode(&body, &dd), 0);
    assert_int_equal(natsConnection_Publish(nc, subject, body.p,
                                            (int)body.len), NATS_OK);
    seda__rbuf_free(&body);
}

/* Send a completion as a consumer does, with a reply subject, and put
 * the origin's answer ("" when none came) in ans. */
static void request_done(natsConnection *nc, const char *subject,
                         const char *id, const char *payload, char ans[8])
{
    struct rw_done dd = { .outcome = SEDA_COMPLETED, .id = id,
                          .stage = "far", .payload = payload,
                          .plen = strlen(payload) };
    struct rbuf body = { 0 };
    assert_int_equal(seda__rw_done_encode(&body, &dd), 0);
    natsMsg *r = NULL;
    ans[0] = '\0';
    if (natsConnection_Request(&r, nc, subject, body.p, (int)body.len,
                               (int64_t)(DL * 1000)) == NATS_OK) {
        snprintf(ans, 8, "%.*s", natsMsg_GetDataLength(r),
                 natsMsg_GetData(r));
        natsMsg_Destroy(r);
    }
    seda__rbuf_free(&body);
}

static void test_trust_forged_completions_and_origins_are_refused(
    void **state)
{
    (void)state;
    seda_bus_t *origin = new_bus(1);
    seda_stage_t *far = add_remote(origin, &(struct radd){
        .name = "far", .stream = "C4" });
    natsConnection *nc = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, g_srv.url), NATS_OK);
    natsSubscription *sub = NULL, *evil = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "seda.C4.far"),
                     NATS_OK);
    assert_int_equal(natsConnection_SubscribeSync(&evil, nc, "evil.>"),
                     NATS_OK);
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    struct done_rec d;
    done_init(&d);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = on_done;
    o.done_ud = &d;
    assert_int_equal(seda_publish(origin, "far", "real", 4, &o), 0);
    /* What a reader of the stage's subject sees. */
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
    struct rw_in win;
    char err[200];
    assert_int_equal(seda__rw_msg_read(m, "x:1", &win, err, sizeof err), 0);
    const struct rw_env *w = &win.env;
    assert_non_null(w->origin);
    char inbox_c[160], wrong[160];
    /* The origin's inbox with ".c" (the old, secret-less subject), and
     * its own subject with another secret. */
    snprintf(inbox_c, sizeof inbox_c, "%s", w->origin);
    char *cut = strstr(inbox_c, ".c");
    assert_non_null(cut);
    cut[2] = '\0';
    snprintf(wrong, sizeof wrong, "%s", w->origin);
    wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == '0' ? '1' : '0';
    publish_done(nc, inbox_c, w->id, "forged");
    publish_done(nc, wrong, w->id, "forged");
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    char id[SEDA_ID_MAX], real[160], ans[8];
    snprintf(id, sizeof id, "%s", w->id);
    snprintf(real, sizeof real, "%s", w->origin);
#ifndef TRUST_BEFORE
    /* A refused completion is answered too, so its sender stops sending
     * it (unanswered, a consumer re-sent each for a minute, and under
     * load they crowded out the completions still to come). */
    request_done(nc, wrong, id, "forged", ans);
    assert_string_equal(ans, "-NO");
#endif
    seda__rw_in_free(&win);
    natsMsg_Destroy(m);
#ifndef TRUST_BEFORE
    double end = seda_now() + DL;
    seda_remote_stats rst;
    do {
        seda_remote_stats_get(far, &rst);
    } while (rst.completions_refused < 3 && seda_now() < end && (nap(0.02), 1));
    assert_int_equal(rst.completions_refused, 3);
#else
    (void)far;
    nap(1);
#endif
    pthread_mutex_lock(&d.mu);
    int fired = d.completed + d.dead + d.dropped;
    pthread_mutex_unlock(&d.mu);
    if (fired)
        fail_msg("a forged completion ended on_complete (payload '%s')",
                 d.payload);
    /* A foreign message naming another subject as its origin. */
    struct rw_env fw = { .id = "evil-1", .origin = "evil.sink",
                         .attempts = 1, .rhop = 1, .payload = "e",
                         .plen = 1 };
    natsMsg *fm = NULL;
    assert_int_equal(seda__rw_msg_new(&fm, "seda.C4.far", NULL, "evil-1",
                                      &fw, 0, NULL), 0);
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    assert_int_equal(js_PublishMsg(NULL, js, fm, NULL, NULL), NATS_OK);
    natsMsg_Destroy(fm);
    /* The consumer: the real one is handled and completes at its origin
     * with the real payload; the foreign one is dead-lettered. */
    seda_bus_t *b = new_bus(1);
    struct rec rr, rd;
    rec_init(&rr);
    rec_init(&rd);
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "far", .stream = "C4", .dlq = "dlq", .consume = true });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    assert_true(done_wait(&d, 1));
    assert_true(rec_wait(&rd, 1));
    assert_true(wait_idle(b));
    assert_true(wait_idle(origin));
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed, 1);
    assert_string_equal(d.payload, "real");
    pthread_mutex_unlock(&d.mu);
    /* The real completion again (a re-send): acknowledged, not fired. */
    request_done(nc, real, id, "again", ans);
    assert_string_equal(ans, "+OK");
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed + d.dead + d.dropped, 1);
    pthread_mutex_unlock(&d.mu);
    assert_int_equal(rec_get(&rr, NULL), 1);
    assert_string_equal(rd.last_reason, "bad_message");
    assert_non_null(strstr(rd.last_detail, "origin"));
    assert_int_equal(natsSubscription_NextMsg(&m, evil, 300), NATS_TIMEOUT);
    assert_books(b);
    assert_books(origin);
    seda_bus_free(b);
    seda_bus_free(origin);
    jsCtx_Destroy(js);
    natsSubscription_Destroy(sub);
    natsSubscription_Destroy(evil);
    natsConnection_Destroy(nc);
    rec_destroy(&rr);
    rec_destroy(&rd);
    done_destroy(&d);
}

/* ---- 5: credentials ---- */

static void test_trust_stats_never_show_the_password(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1);
    char url[160];
    snprintf(url, sizeof url, "nats://alice:s3cret@127.0.0.1:%d",
             g_srv.port);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "cred", .stream = "C5", .url = url });
    seda_remote_stats rst;
    assert_int_equal(seda_remote_stats_get(st, &rst), 0);
    assert_null(strstr(rst.url, "s3cret"));
    assert_null(strstr(rst.url, "alice"));
    assert_non_null(strstr(rst.url, "127.0.0.1"));
    seda_bus_free(b);
}

/* ---- 6: over the server's max_payload ---- */

static void test_trust_too_large_is_refused_counted_and_said(void **state)
{
    (void)state;
    struct natsd srv;
    assert_true(natsd_prepare(&srv));
    snprintf(srv.conf, sizeof srv.conf, "%s/small.conf", srv.dir);
    FILE *f = fopen(srv.conf, "w");
    assert_non_null(f);
    fprintf(f, "max_payload: 4096\n");
    fclose(f);
    assert_true(natsd_start(&srv, &srv));
    seda_bus_t *b = new_bus(2);
    struct rec ra, rd;
    rec_init(&ra);
    rec_init(&rd);
    ra.grow = 10000;                    /* the hop's payload: too large */
    { seda_stage_opts so; seda_stage_opts_init(&so); so.name = "a"; so.dead_letter = "dlq"; seda_stage_t *sa; char e[256]; assert_int_equal(seda_stage_add(b, &so, &sa, e, sizeof e), 0); seda_stage_consume(sa, record, &ra); }
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *big = add_remote(b, &(struct radd){
        .name = "big", .stream = "C6", .url = srv.url, .dlq = "dlq" });
    char *p = malloc(10000);
    memset(p, 'y', 10000);
    assert_int_equal(seda_publish(b, "big", p, 10000, NULL),
                     SEDA_ETOOLARGE);
    free(p);
    assert_string_equal(seda_strerror(SEDA_ETOOLARGE), "too_large");
    seda_stage_stats ss;
    seda_stage_stats_get(big, &ss);
    assert_int_equal(ss.dropped, 1);
    /* A hop: dead-lettered, saying why, with the server's limit. */
    static const char *const slip[] = { "big" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.slip = slip;
    o.nslip = 1;
    assert_int_equal(seda_publish(b, "a", "small", 5, &o), 0);
    assert_true(rec_wait(&rd, 1));
    assert_true(wait_idle(b));
    assert_string_equal(rd.last_reason, "hop_refused");
    assert_non_null(strstr(rd.last_detail, "too_large"));
    assert_non_null(strstr(rd.last_detail, "4096"));
    assert_books(b);
    seda_bus_free(b);
    natsd_cleanup(&srv);
    rec_destroy(&ra);
    rec_destroy(&rd);
}

/* ---- 7: a hop into a reconnecting remote stage ---- */

/* Local stage "a" (durable: journaled) -> remote "r"; the server away
 * for about a second while hops go out.  Before, every hop was
 * dead-lettered hop_refused at once (out of the journal too). */
static void hop_reconnect(bool durable)
{
    struct natsd srv;
    assert_true(natsd_start(&srv, NULL));
    char data[300];
    snprintf(data, sizeof data, "%s/data", srv.dir);
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    bo.hop_timeout = 15;
    if (durable)
        bo.data_dir = data;
    seda_bus_t *b;
    assert_int_equal(seda_bus_new(&bo, &b), 0);
    if (durable) {
        char e[256];
        if (seda_bus_open_journal(b, e, sizeof e) != 0)
            fail_msg("seda_bus_open_journal: %s", e);
    }
    struct rec ra, rr, rd;
    rec_init(&ra);
    rec_init(&rr);
    rec_init(&rd);
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    {
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "a";
        so.dead_letter = "dlq";
        so.durable = durable ? SEDA_AT_LEAST_ONCE : SEDA_MEMORY;
        seda_stage_t *sa;
        char e[256];
        if (seda_stage_add(b, &so, &sa, e, sizeof e) != 0)
            fail_msg("seda_stage_add: %s", e);
        seda_stage_consume(sa, record, &ra);
    }
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "r", .stream = durable ? "C7D" : "C7", .url = srv.url,
        .dlq = "dlq",
        .consume = true });
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    static const char *const slip[] = { "r" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.slip = slip;
    o.nslip = 1;
    assert_int_equal(seda_publish(b, "a", "before", 6, &o), 0);
    assert_true(rec_wait(&rr, 1));
    assert_true(wait_idle(b));
    natsd_stop(&srv);
    /* Wait until the client noticed. */
    double end = seda_now() + DL;
    seda_remote_stats rst;
    do {
        seda_remote_stats_get(st, &rst);
    } while (strcmp(rst.state, "connected") == 0 && seda_now() < end &&
             (nap(0.02), 1));
    assert_string_not_equal(rst.state, "connected");
    for (int i = 0; i < 10; i++)
        assert_int_equal(seda_publish(b, "a", "during", 6, &o), 0);
    nap(1.0);                           /* a blip of a second or so */
    assert_true(natsd_start(&srv, &srv));
    if (!rec_wait(&rr, 11))
        fail_msg("%d of 10 hops arrived; %d dead-lettered (%s)",
                 rec_get(&rr, NULL) - 1, rec_get(&rd, NULL), rd.last_reason);
    assert_true(wait_idle(b));
    assert_int_equal(rec_get(&rd, NULL), 0);
    assert_books(b);
    seda_bus_free(b);
    natsd_cleanup(&srv);
    rec_destroy(&ra);
    rec_destroy(&rr);
    rec_destroy(&rd);
}

static void test_trust_hop_waits_out_a_reconnect(void **state)
{
    (void)state;
    hop_reconnect(false);
}

/* The audit's worst case: 2 233 of the dead letters came out of a
 * durable stage's journal. */
static void test_trust_hop_from_a_durable_stage_waits_out_a_reconnect(
    void **state)
{
    (void)state;
    hop_reconnect(true);
}


/* ---- 8: pub/sub retries ---- */

struct flaky {
    pthread_mutex_t mu;
    int calls;                  /* guarded by mu */
    int fail_first;             /* nack this many calls first */
};

static bool flaky_fn(seda_env_t *env, void *ud)
{
    (void)env;
    struct flaky *f = ud;
    pthread_mutex_lock(&f->mu);
    int n = ++f->calls;
    pthread_mutex_unlock(&f->mu);
    return n > f->fail_first;
}

static int flaky_calls(struct flaky *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->calls;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void test_trust_pubsub_retry_skips_consumers_that_acked(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct flaky good = { .fail_first = 0 }, bad = { .fail_first = 1 };
    pthread_mutex_init(&good.mu, NULL);
    pthread_mutex_init(&bad.mu, NULL);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "fan", .stream = "C8", .max_attempts = 3,
        .delivery = SEDA_DELIVERY_PUBSUB, .consume = true });
    seda_stage_consume(st, flaky_fn, &good);
    seda_stage_consume(st, flaky_fn, &bad);
    assert_int_equal(seda_remote_consume(st), 0);
    assert_int_equal(seda_publish(b, "fan", "x", 1, NULL), 0);
    double end = seda_now() + DL;
    while (flaky_calls(&bad) < 2 && seda_now() < end)
        nap(0.02);
    assert_true(wait_idle(b));
    nap(0.5);
    assert_true(wait_idle(b));
    assert_int_equal(flaky_calls(&bad), 2);
    if (flaky_calls(&good) != 1)
        fail_msg("the consumer that acked was called %d times",
                 flaky_calls(&good));
    seda_stage_stats ss;
    seda_stage_stats_get(st, &ss);
    assert_int_equal(ss.dead_lettered, 0);
    assert_books(b);
    seda_bus_free(b);
    pthread_mutex_destroy(&good.mu);
    pthread_mutex_destroy(&bad.mu);
}

/* ---- 9: typed stages checked at intake ---- */

static int only_good(const seda_env_t *env, void *ud, char *err,
                     size_t errlen)
{
    (void)ud;
    size_t len;
    const char *p = seda_env_payload(env, &len);
    if (len >= 4 && memcmp(p, "good", 4) == 0)
        return 0;
    snprintf(err, errlen, "payload must start with 'good'");
    return -1;
}

static void test_trust_typed_stage_checks_what_it_takes_in(void **state)
{
    (void)state;
    /* Another publisher (a bus without the check) sends both kinds. */
    seda_bus_t *pub = new_bus(1);
    add_remote(pub, &(struct radd){ .name = "typed", .stream = "C9" });
    assert_int_equal(seda_publish(pub, "typed", "good 1", 6, NULL), 0);
    assert_int_equal(seda_publish(pub, "typed", "bad", 3, NULL), 0);
    assert_int_equal(seda_publish(pub, "typed", "good 2", 6, NULL), 0);
    assert_true(wait_idle(pub));
    seda_bus_t *b = new_bus(2);
    struct rec rr, rd;
    rec_init(&rr);
    rec_init(&rd);
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *st = add_remote(b, &(struct radd){
        .name = "typed", .stream = "C9", .dlq = "dlq", .consume = true });
    seda_stage_set_check(st, only_good, NULL);
    seda_stage_consume(st, record, &rr);
    assert_int_equal(seda_remote_consume(st), 0);
    assert_true(rec_wait(&rd, 1));
    assert_true(rec_wait(&rr, 2));
    assert_true(wait_idle(b));
    assert_int_equal(rec_get(&rr, NULL), 2);
    assert_string_equal(rd.last_reason, "type");
    assert_non_null(strstr(rd.last_detail, "good"));
    assert_books(b);
    seda_bus_free(b);
    seda_bus_free(pub);
    rec_destroy(&rr);
    rec_destroy(&rd);
}

static int group_setup(void **state)
{
    (void)state;
    return natsd_start(&g_srv, NULL) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    natsd_cleanup(&g_srv);
    nats_CloseAndWait(2000);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trust_held_messages_are_handled_once),
        cmocka_unit_test(
            test_trust_completion_over_max_payload_ends_on_complete),
        cmocka_unit_test(
            test_trust_forged_completions_and_origins_are_refused),
        cmocka_unit_test(test_trust_completions_survive_a_stopped_server),
        cmocka_unit_test(
            test_trust_silent_server_is_left_while_a_write_blocks),
        cmocka_unit_test(test_trust_lost_stream_is_declared_again),
        cmocka_unit_test(test_trust_stats_never_show_the_password),
        cmocka_unit_test(test_trust_too_large_is_refused_counted_and_said),
        cmocka_unit_test(test_trust_hop_waits_out_a_reconnect),
        cmocka_unit_test(
            test_trust_hop_from_a_durable_stage_waits_out_a_reconnect),
        cmocka_unit_test(test_trust_pubsub_retry_skips_consumers_that_acked),
        cmocka_unit_test(test_trust_typed_stage_checks_what_it_takes_in),
    };
    return cmocka_run_group_tests_name("trust", tests, group_setup,
                                       group_teardown);
}
