/* SPDX-License-Identifier: MIT */
/*
 * test_remote.c -- cmocka tests of remote stages through the C API, each
 * against a real nats-server (tests/remote/natsd.h) started for this
 * file (one test starts its own, to stop and restart it).
 *
 * Covers, in one process: publish -> JetStream -> consume, every
 * envelope once, and the books balancing with handed_off; a slip local
 * -> remote -> local completing with its done callback at the origin
 * (through the origin's inbox), and a completion sent to an origin that
 * is gone counted dropped; nack -> redelivery by JetStream -> term
 * after max_attempts -> the local dead-letter stage with x-dead-reason;
 * bytes that are no envelope dead-lettered as bad_message; the server
 * stopped (publish refuses "unavailable" at once) and restarted
 * (publishes and consumption resume, nothing lost); a custom id
 * published twice stored once; declaration errors naming the field;
 * and repeated lifecycles leaving no thread or descriptor behind.  The
 * two-process properties (shared load, kill -9) are in
 * tests/remote/test_*.sh.
 *
 * Every wait has a deadline (DL seconds) and fails the test with what
 * did not happen; nothing sleeps to order events.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <nats/nats.h>

#include "natsd.h"
#include "seda.h"
#include "seda_remote.h"
#include "testutil.h"

#define DL 20.0

static struct natsd g_srv;              /* the file's server */

/* ---- a recording consumer ---- */

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;                  /* guarded by mu */
    int distinct;               /* guarded by mu */
    int attempts[16];           /* attempts seen, first 16 calls; mu */
    double at[16];              /* when (seda_now), first 16 calls; mu */
    char ids[4096][64];         /* ids seen (first 4096); guarded by mu */
    char last_payload[256];     /* guarded by mu */
    char last_reason[64];       /* x-dead-reason of the last; mu */
    char last_from[64];         /* x-dead-from of the last; mu */
    char last_detail[160];      /* x-dead-detail of the last; mu */
    char last_tenant[64];       /* header "tenant" of the last; mu */
    char last_abc[64];          /* header "abc" of the last; mu */
    bool nack;                  /* set before use */
    const char *set_payload;    /* replaces the payload when not NULL */
};

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    tu_cond_init(&r->cv);
}

static void rec_destroy(struct rec *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

static bool record(seda_env_t *env, void *ud)
{
    struct rec *r = ud;
    char id[SEDA_ID_MAX];
    seda_env_id(env, id);
    size_t len;
    const void *p = seda_env_payload(env, &len);
    const char *reason = seda_env_header(env, "x-dead-reason");
    const char *from = seda_env_header(env, "x-dead-from");
    const char *detail = seda_env_header(env, "x-dead-detail");
    const char *tenant = seda_env_header(env, "tenant");
    const char *abc = seda_env_header(env, "abc");
    pthread_mutex_lock(&r->mu);
    bool seen = false;
    int n = r->distinct < 4096 ? r->distinct : 4096;
    for (int i = 0; i < n && !seen; i++)
        seen = strcmp(r->ids[i], id) == 0;
    if (!seen && r->distinct < 4096)
        snprintf(r->ids[r->distinct], sizeof r->ids[0], "%.63s", id);
    if (!seen)
        r->distinct++;
    if (r->calls < 16) {
        r->attempts[r->calls] = seda_env_attempts(env);
        r->at[r->calls] = seda_now();
    }
    r->calls++;
    snprintf(r->last_payload, sizeof r->last_payload, "%.*s",
             (int)(len < 255 ? len : 255), (const char *)p);
    snprintf(r->last_reason, sizeof r->last_reason, "%s",
             reason ? reason : "");
    snprintf(r->last_from, sizeof r->last_from, "%s", from ? from : "");
    snprintf(r->last_detail, sizeof r->last_detail, "%s",
             detail ? detail : "");
    snprintf(r->last_tenant, sizeof r->last_tenant, "%s",
             tenant ? tenant : "");
    snprintf(r->last_abc, sizeof r->last_abc, "%s", abc ? abc : "");
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (r->set_payload)
        seda_env_set_payload(env, r->set_payload, strlen(r->set_payload));
    return !r->nack;
}

/* Wait until calls >= n (or distinct >= n); false at the deadline. */
static bool rec_wait(struct rec *r, int n, bool distinct)
{
    struct timespec ts;
    tu_abstime(DL, &ts);
    pthread_mutex_lock(&r->mu);
    while ((distinct ? r->distinct : r->calls) < n &&
           pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0) {
    }
    bool ok = (distinct ? r->distinct : r->calls) >= n;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static int rec_calls(struct rec *r)
{
    pthread_mutex_lock(&r->mu);
    int n = r->calls;
    pthread_mutex_unlock(&r->mu);
    return n;
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

static seda_stage_t *add_remote(seda_bus_t *b, const char *name,
                                const char *stream, int max_attempts,
                                const char *dlq, const char *url)
{
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = name;
    so.max_attempts = max_attempts;
    so.dead_letter = dlq;
    so.capacity = 64;
    seda_remote_opts ro;
    seda_remote_opts_init(&ro);
    ro.url = url ? url : g_srv.url;
    ro.stream = stream;
    ro.consume = true;
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

/* The books balance at a quiet moment. */
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

/* ---- done callbacks ---- */

struct done_rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int completed, other;       /* guarded by mu */
    char id[SEDA_ID_MAX];       /* the last completed; guarded by mu */
    char to[SEDA_NAME_MAX + 1];
    char payload[64];
};

static void on_done(seda_env_t *env, int outcome, void *ud)
{
    struct done_rec *d = ud;
    pthread_mutex_lock(&d->mu);
    if (outcome == SEDA_COMPLETED) {
        d->completed++;
        seda_env_id(env, d->id);
        snprintf(d->to, sizeof d->to, "%s", seda_env_to(env));
        size_t len;
        const char *p = seda_env_payload(env, &len);
        snprintf(d->payload, sizeof d->payload, "%.*s", (int)len, p);
    } else {
        d->other++;
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* ---- tests ---- */

static void test_remote_publish_consume_each_once(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec r;
    rec_init(&r);
    seda_stage_t *st = add_remote(b, "work", "T1", 1, NULL, NULL);
    assert_true(seda_stage_is_remote(st));
    assert_int_equal(seda_remote_consume(st), SEDA_EINVAL); /* no consumer */
    seda_stage_consume(st, record, &r);
    assert_int_equal(seda_remote_consume(st), 0);
    for (int i = 0; i < 500; i++) {
        char p[32];
        int n = snprintf(p, sizeof p, "m%d", i);
        assert_int_equal(seda_publish(b, "work", p, (size_t)n, NULL), 0);
    }
    if (!rec_wait(&r, 500, true))
        fail_msg("%d of 500 delivered", rec_calls(&r));
    assert_true(wait_idle(b));
    assert_int_equal(rec_calls(&r), 500);      /* none twice */
    seda_remote_stats rst;
    assert_int_equal(seda_remote_stats_get(st, &rst), 0);
    assert_string_equal(rst.state, "connected");
    assert_string_equal(rst.stream, "T1");
    assert_string_equal(rst.consumer, "seda_work");
    assert_string_equal(rst.subject, "seda.T1.work");
    assert_int_equal(rst.published, 500);
    assert_int_equal(rst.fetched, 500);
    assert_int_equal(rst.acked, 500);
    assert_int_equal(rst.publishing, 0);
    assert_int_equal(rst.held, 0);
    seda_bus_stats s;
    seda_bus_stats_get(b, &s);
    /* Published here (accepted, then handed to JetStream), and taken in
     * here (accepted again, completed). */
    assert_int_equal(s.accepted, 1000);
    assert_int_equal(s.handed_off, 500);
    assert_int_equal(s.completed, 500);
    assert_int_equal(s.in_system, 0);
    assert_books(b);
    assert_int_equal(seda_bus_shutdown(b, 5), 0);
    seda_bus_free(b);
    rec_destroy(&r);
}

static void test_remote_slip_local_remote_local_completes(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec ra, rr, rz;
    rec_init(&ra);
    rec_init(&rr);
    rec_init(&rz);
    seda_stage_consume(add_local(b, "a"), record, &ra);
    seda_stage_t *r = add_remote(b, "r", "T2", 1, NULL, NULL);
    rr.set_payload = "enriched";
    seda_stage_consume(r, record, &rr);
    assert_int_equal(seda_remote_consume(r), 0);
    rz.set_payload = "final";
    seda_stage_consume(add_local(b, "z"), record, &rz);
    struct done_rec d = { .completed = 0 };
    pthread_mutex_init(&d.mu, NULL);
    tu_cond_init(&d.cv);
    static const char *const slip[] = { "r", "z" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.slip = slip;
    o.nslip = 2;
    o.done = on_done;
    o.done_ud = &d;
    assert_int_equal(seda_publish(b, "a", "start", 5, &o), 0);
    assert_true(rec_wait(&rz, 1, false));
    assert_true(wait_idle(b));
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed, 1);
    assert_int_equal(d.other, 0);
    assert_string_equal(d.payload, "final");
    assert_string_equal(d.to, "z");
    pthread_mutex_unlock(&d.mu);
    /* The origin's id; the remote hop saw the remote id ("<nuid>:<id>"). */
    assert_string_equal(d.id, ra.ids[0]);
    assert_non_null(strchr(rr.ids[0], ':'));
    assert_string_equal(strchr(rr.ids[0], ':') + 1, ra.ids[0]);
    assert_string_equal(rz.ids[0], rr.ids[0]);
    seda_remote_stats rst;
    seda_remote_stats_get(r, &rst);
    assert_int_equal(rst.completions_sent, 1);
    assert_int_equal(rst.completions_received, 1);
    assert_int_equal(rst.awaiting, 0);
    assert_books(b);
    assert_int_equal(seda_bus_shutdown(b, 5), 0);
    seda_bus_free(b);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
    rec_destroy(&ra);
    rec_destroy(&rr);
    rec_destroy(&rz);
}

static void test_remote_nack_redelivered_with_backoff_then_termed_to_dlq(
    void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec rr, rd;
    rec_init(&rr);
    rec_init(&rd);
    rr.nack = true;
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *r = add_remote(b, "flaky", "T3", 3, "dlq", NULL);
    /* The stage's retry backoff is the nak's delay: 0.2 s, then 0.4 s. */
    char err[128];
    seda_stage_opts ro;
    seda_stage_opts_init(&ro);
    ro.retry_backoff = 0.2;
    ro.retry_max_backoff = 1.0;
    ro.retry_multiplier = 2.0;
    ro.retry_jitter = false;
    assert_int_equal(seda_stage_tune_admission(r, &ro, SEDA_TUNE_RETRY, err,
                                               sizeof err), 0);
    seda_stage_consume(r, record, &rr);
    seda_remote_consume(r);
    assert_int_equal(seda_publish(b, "flaky", "x", 1, NULL), 0);
    assert_true(rec_wait(&rd, 1, false));
    assert_true(wait_idle(b));
    pthread_mutex_lock(&rr.mu);
    assert_int_equal(rr.calls, 3);             /* max_attempts, no more */
    for (int i = 0; i < 3; i++)
        assert_int_equal(rr.attempts[i], i + 1); /* JetStream's count */
    /* Lower bounds only: redelivered no sooner than the backoff. */
    assert_true(rr.at[1] - rr.at[0] >= 0.2);
    assert_true(rr.at[2] - rr.at[1] >= 0.4);
    pthread_mutex_unlock(&rr.mu);
    assert_string_equal(rd.last_reason, "max_attempts");
    assert_string_equal(rd.last_from, "flaky");
    assert_string_equal(rd.last_payload, "x");
    seda_remote_stats rst;
    seda_remote_stats_get(r, &rst);
    assert_int_equal(rst.naked, 2);
    assert_int_equal(rst.termed, 1);
    seda_stage_stats ss;
    seda_stage_stats_get(r, &ss);
    assert_int_equal(ss.nacked, 3);
    assert_int_equal(ss.dead_lettered, 1);
    assert_books(b);
    seda_bus_free(b);
    rec_destroy(&rr);
    rec_destroy(&rd);
}

/* Publish data on a subject with a plain cnats connection, with the
 * header key: val when key is not NULL. */
static void raw_publish(const char *subject, const void *data, int len,
                        const char *key, const char *val)
{
    natsConnection *nc = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, g_srv.url), NATS_OK);
    jsCtx *js = NULL;
    assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    natsMsg *m = NULL;
    assert_int_equal(natsMsg_Create(&m, subject, NULL, data, len), NATS_OK);
    if (key)
        assert_int_equal(natsMsgHeader_Set(m, key, val), NATS_OK);
    assert_int_equal(js_PublishMsg(NULL, js, m, NULL, NULL), NATS_OK);
    natsMsg_Destroy(m);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

static void test_remote_bad_metadata_is_dead_lettered_bad_message(
    void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec rr, rd;
    rec_init(&rr);
    rec_init(&rd);
    seda_stage_consume(add_local(b, "dlq"), record, &rd);
    seda_stage_t *r = add_remote(b, "in", "T4", 2, "dlq", NULL);
    seda_stage_consume(r, record, &rr);
    seda_remote_consume(r);
    raw_publish("seda.T4.in", "x", 1, "Seda-Priority", "urgent");
    raw_publish("seda.T4.in", "x", 1, "Content-Type", "text/x-unknown");
    raw_publish("seda.T4.in", "x", 1, "Seda-Slip", "a,not a stage");
    assert_true(rec_wait(&rd, 3, false));
    assert_true(wait_idle(b));
    assert_int_equal(rec_calls(&rr), 0);       /* never to the handler */
    assert_string_equal(rd.last_reason, "bad_message");
    assert_string_equal(rd.last_from, "in");
    assert_non_null(strstr(rd.last_detail, "Seda-Slip"));
    seda_remote_stats rst;
    seda_remote_stats_get(r, &rst);
    assert_int_equal(rst.bad_messages, 3);
    assert_int_equal(rst.termed, 3);
    /* And a good one still goes through. */
    assert_int_equal(seda_publish(b, "in", "ok", 2, NULL), 0);
    assert_true(rec_wait(&rr, 1, false));
    assert_true(wait_idle(b));
    assert_books(b);
    seda_bus_free(b);
    rec_destroy(&rr);
    rec_destroy(&rd);
}

/* Any NATS client takes part: a plain message (no Seda-* header) is
 * handled with its headers and body as they came; what seda publishes
 * carries the user's headers as plain NATS headers. */
static void test_remote_foreign_client_headers_plain(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *r = add_remote(b, "in", "T9", 2, NULL, NULL);
    seda_stage_consume(r, record, &rr);
    natsConnection *nc = NULL;
    assert_int_equal(natsConnection_ConnectTo(&nc, g_srv.url), NATS_OK);
    natsSubscription *sub = NULL;
    assert_int_equal(natsConnection_SubscribeSync(&sub, nc, "seda.T9.in"),
                     NATS_OK);
    assert_int_equal(natsConnection_Flush(nc), NATS_OK);
    seda_remote_consume(r);
    raw_publish("seda.T9.in", "{\"n\":1}", 7, "tenant", "acme");
    assert_true(rec_wait(&rr, 1, false));
    pthread_mutex_lock(&rr.mu);
    assert_string_equal(rr.last_payload, "{\"n\":1}");
    assert_string_equal(rr.last_tenant, "acme");
    pthread_mutex_unlock(&rr.mu);
    natsMsg *m = NULL;
    assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
    natsMsg_Destroy(m);
    /* Headers whose keys begin one another ("a", "abc": cnats's map would
     * mix them) still arrive whole; "tenant" is a plain header. */
    static const char *const hdr[] = { "a", "1", "abc", "2", "tenant", "x" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.headers = hdr;
    o.nheaders = 3;
    assert_int_equal(seda_publish(b, "in", "p", 1, &o), 0);
    assert_int_equal(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK);
    const char *v = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "tenant", &v), NATS_OK);
    assert_string_equal(v, "x");
    assert_int_equal(natsMsgHeader_Get(m, "Seda-Id", &v), NATS_OK);
    assert_int_equal(natsMsg_GetDataLength(m), 1);
    natsMsg_Destroy(m);
    assert_true(rec_wait(&rr, 2, false));
    assert_true(wait_idle(b));
    pthread_mutex_lock(&rr.mu);
    assert_string_equal(rr.last_tenant, "x");
    assert_string_equal(rr.last_abc, "2");
    pthread_mutex_unlock(&rr.mu);
    assert_books(b);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    seda_bus_free(b);
    rec_destroy(&rr);
}

static void test_remote_custom_id_stored_once(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(2);
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *r = add_remote(b, "once", "T5", 1, NULL, NULL);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.id = "order-17";
    assert_int_equal(seda_publish(b, "once", "a", 1, &o), 0);
    assert_int_equal(seda_publish(b, "once", "a", 1, &o), 0);
    assert_true(wait_idle(b));
    seda_stage_consume(r, record, &rr);
    seda_remote_consume(r);
    assert_true(rec_wait(&rr, 1, false));
    assert_true(wait_idle(b));
    seda_remote_stats rst;
    seda_remote_stats_get(r, &rst);
    assert_int_equal(rst.published, 1);
    assert_int_equal(rst.duplicates, 1);
    assert_int_equal(rec_calls(&rr), 1);
    assert_string_equal(rr.ids[0], "order-17");
    seda_stage_stats ss;
    seda_stage_stats_get(r, &ss);
    assert_int_equal(ss.dropped, 1);            /* the repeat, counted */
    assert_books(b);
    /* An in-memory stage still refuses custom ids. */
    add_local(b, "mem");
    assert_int_equal(seda_publish(b, "mem", "a", 1, &o), SEDA_EINVAL);
    seda_bus_free(b);
    rec_destroy(&rr);
}

static void test_remote_declare_errors_name_the_field(void **state)
{
    (void)state;
    seda_bus_t *b = new_bus(1);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "x";
    seda_remote_opts ro;
    seda_remote_opts_init(&ro);
    seda_stage_t *st;
    char err[512];
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), SEDA_EINVAL);
    assert_non_null(strstr(err, "stage 'x': remote: url"));
    ro.url = g_srv.url;
    ro.stream = "bad.name";
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), SEDA_EINVAL);
    assert_non_null(strstr(err, "stream"));
    ro.stream = "T6";
    so.policy = SEDA_POLICY_DROP_OLDEST;
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), SEDA_EINVAL);
    assert_non_null(strstr(err, "drop_oldest"));
    so.policy = SEDA_POLICY_BLOCK;
    char dead[64];
    snprintf(dead, sizeof dead, "nats://127.0.0.1:%d", natsd_free_port());
    ro.url = dead;
    ro.connect_timeout = 0.5;
    double t0 = seda_now();
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), SEDA_EUNAVAIL);
    assert_non_null(strstr(err, "cannot connect to"));
    assert_true(seda_now() - t0 < 5);
    assert_null(seda_bus_stage(b, "x"));       /* nothing was added */
    ro.url = g_srv.url;
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), 0);
    assert_int_equal(seda_remote_stage_add(b, &so, &ro, &st, err,
                                           sizeof err), SEDA_EEXIST);
    assert_string_equal(seda_strerror(SEDA_EUNAVAIL), "unavailable");
    seda_bus_free(b);
}

/* Publish until it is refused "unavailable" (the client noticed the
 * outage), counting what was accepted. */
static void test_remote_outage_refuses_then_resumes(void **state)
{
    (void)state;
    struct natsd srv;
    assert_true(natsd_start(&srv, NULL));
    seda_bus_t *b = new_bus(2);
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *r = add_remote(b, "svc", "T7", 1, NULL, srv.url);
    seda_stage_consume(r, record, &rr);
    seda_remote_consume(r);
    assert_int_equal(seda_publish(b, "svc", "before", 6, NULL), 0);
    assert_true(rec_wait(&rr, 1, false));
    assert_true(wait_idle(b));
    natsd_stop(&srv);
    /* Refused at once, not after a publish timeout, once the client saw
     * the connection go. */
    double end = seda_now() + DL;
    int rc = 0;
    while ((rc = seda_publish(b, "svc", "during", 6, NULL)) == 0 &&
           seda_now() < end)
        natsd_nap();
    assert_int_equal(rc, SEDA_EUNAVAIL);
    double t0 = seda_now();
    assert_int_equal(seda_publish(b, "svc", "during", 6, NULL),
                     SEDA_EUNAVAIL);
    assert_true(seda_now() - t0 < 0.5);
    seda_remote_stats rst;
    seda_remote_stats_get(r, &rst);
    assert_string_not_equal(rst.state, "connected");
    int accepted_during = 0;
    seda_bus_stats s;
    seda_bus_stats_get(b, &s);
    accepted_during = (int)s.accepted - 2;     /* "before": published, in */
    assert_true(natsd_start(&srv, &srv));
    end = seda_now() + DL;
    while ((rc = seda_publish(b, "svc", "after", 5, NULL)) != 0 &&
           seda_now() < end)
        natsd_nap();
    assert_int_equal(rc, 0);
    /* Everything accepted arrives (the ones sent as the server went are
     * re-sent; JetStream keeps one of each), none twice. */
    assert_true(wait_idle(b));
    seda_bus_stats_get(b, &s);
    assert_books(b);
    assert_int_equal(s.dropped, 0);
    assert_true(rec_wait(&rr, 2 + accepted_during, true));
    assert_true(wait_idle(b));
    assert_int_equal(rec_calls(&rr), 2 + accepted_during);
    seda_remote_stats_get(r, &rst);
    assert_string_equal(rst.state, "connected");
    assert_true(rst.reconnects >= 1);
    seda_bus_free(b);
    natsd_cleanup(&srv);
    rec_destroy(&rr);
}

/* An origin that is gone when its itinerary completes elsewhere: the
 * completion is dropped and counted where it was sent from, and the
 * origin's callback ended (dropped) when its bus stopped. */
static void test_remote_completion_to_a_gone_origin_is_counted(void **state)
{
    (void)state;
    seda_bus_t *origin = new_bus(1);
    add_remote(origin, "far", "T9", 1, NULL, NULL);
    struct done_rec d = { .completed = 0 };
    pthread_mutex_init(&d.mu, NULL);
    tu_cond_init(&d.cv);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.done = on_done;
    o.done_ud = &d;
    assert_int_equal(seda_publish(origin, "far", "x", 1, &o), 0);
    /* Stored, then the origin goes (its inbox with it): its callback is
     * ended, dropped. */
    double end = seda_now() + DL;
    seda_remote_stats rst;
    do {
        seda_remote_stats_get(seda_bus_stage(origin, "far"), &rst);
    } while (rst.published < 1 && seda_now() < end && (natsd_nap(), 1));
    assert_int_equal(rst.published, 1);
    assert_int_equal(rst.awaiting, 1);
    seda_bus_free(origin);
    pthread_mutex_lock(&d.mu);
    assert_int_equal(d.completed, 0);
    assert_int_equal(d.other, 1);
    pthread_mutex_unlock(&d.mu);
    /* Another process (bus) handles it and sends the completion to an
     * inbox nobody listens on any more. */
    seda_bus_t *b = new_bus(1);
    struct rec rr;
    rec_init(&rr);
    seda_stage_t *r = add_remote(b, "far", "T9", 1, NULL, NULL);
    seda_stage_consume(r, record, &rr);
    seda_remote_consume(r);
    assert_true(rec_wait(&rr, 1, false));
    end = seda_now() + DL + 10;         /* given up after 10 s of nobody */
    do {
        seda_remote_stats_get(r, &rst);
    } while (rst.completions_dropped < 1 && seda_now() < end &&
             (natsd_nap(), 1));
    assert_int_equal(rst.completions_sent, 1);
    assert_int_equal(rst.completions_dropped, 1);
    assert_true(wait_idle(b));
    assert_books(b);
    seda_bus_free(b);
    rec_destroy(&rr);
    pthread_cond_destroy(&d.cv);
    pthread_mutex_destroy(&d.mu);
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_remote_lifecycles_leave_nothing(void **state)
{
    (void)state;
    int threads0 = -1, fds0 = -1;
    for (int round = 0; round < 6; round++) {
        seda_bus_t *b = new_bus(1);
        struct rec rr;
        rec_init(&rr);
        seda_stage_t *r = add_remote(b, "life", "T8", 1, NULL, NULL);
        seda_stage_consume(r, record, &rr);
        seda_remote_consume(r);
        assert_int_equal(seda_publish(b, "life", "x", 1, NULL), 0);
        assert_true(rec_wait(&rr, 1, false));
        assert_true(wait_idle(b));
        seda_bus_free(b);
        rec_destroy(&rr);
        /* cnats starts a few threads of its own once (its timers, its
         * async callbacks); the first round is the baseline.  Some of its
         * threads are detached, so their exit is waited for (bounded). */
        if (round == 0) {
            double end = seda_now() + 1;
            threads0 = count_dir("/proc/self/task");
            while (seda_now() < end) {      /* settle the baseline */
                natsd_nap();
                int t = count_dir("/proc/self/task");
                if (t < threads0)
                    threads0 = t, end = seda_now() + 1;
            }
            fds0 = count_dir("/proc/self/fd");
            continue;
        }
        double end = seda_now() + DL;
        while (count_dir("/proc/self/task") != threads0 && seda_now() < end)
            natsd_nap();
        assert_int_equal(count_dir("/proc/self/task"), threads0);
        assert_int_equal(count_dir("/proc/self/fd"), fds0);
    }
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
    nats_CloseAndWait(2000);        /* cnats's own threads and memory */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_remote_publish_consume_each_once),
        cmocka_unit_test(test_remote_slip_local_remote_local_completes),
        cmocka_unit_test(
            test_remote_nack_redelivered_with_backoff_then_termed_to_dlq),
        cmocka_unit_test(
            test_remote_bad_metadata_is_dead_lettered_bad_message),
        cmocka_unit_test(test_remote_foreign_client_headers_plain),
        cmocka_unit_test(test_remote_custom_id_stored_once),
        cmocka_unit_test(test_remote_declare_errors_name_the_field),
        cmocka_unit_test(test_remote_outage_refuses_then_resumes),
        cmocka_unit_test(test_remote_completion_to_a_gone_origin_is_counted),
        cmocka_unit_test(test_remote_lifecycles_leave_nothing),
    };
    return cmocka_run_group_tests_name("remote", tests, group_setup,
                                       group_teardown);
}
