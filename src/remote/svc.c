/* SPDX-License-Identifier: MIT */
/*
 * svc.c -- NATS services as NATS's own clients make them (the "micro"
 * protocol, include/seda_remote.h): endpoints answering requests in a
 * queue group, errors in the Nats-Service-Error headers, and discovery
 * on $SRV.PING|INFO|STATS[.<name>[.<id>]].
 *
 * DESIGN
 *   Written on cnats's core subscriptions (its own micro API is not in
 *   every packaged version).  A service has a connection of its own (the
 *   remote stages' settings: reconnects, the stale bound, TLS), one queue
 *   subscription per endpoint, and one subscription on "$SRV.>" that
 *   answers the discovery requests naming this service (or none).  Each
 *   subscription delivers on its own cnats thread.
 *
 *   A request is handed to the owner's callback, which answers it once,
 *   from any thread, whenever its work ends.  With a timeout, requests
 *   not answered are kept in arrival order (so in order of their
 *   deadlines) and a thread of the service answers those past it 504; the
 *   owner's later answer is then only let go of.  The timeout thread
 *   copies what it sends under the lock, so a request is only ever freed
 *   by its owner's answer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remote_int.h"

struct nep {
    struct seda_nsvc *svc;
    int idx;
    char *name, *subject;
    natsSubscription *sub;
    /* Guarded by the service's mu. */
    uint64_t num_requests, num_errors;
    int64_t processing_time;
    char last_error[200];
};

struct seda_nsvc_req {
    struct seda_nsvc *svc;
    int ep;
    natsMsg *m;
    int64_t t0;                 /* arrival (monotonic ns) */
    int64_t deadline;           /* answered 504 then (0: never) */
    bool answered;              /* guarded by svc->mu */
    bool listed;                /* in the pending list; svc->mu */
    struct seda_nsvc_req *prev, *next;  /* pending list; svc->mu */
};

/*
 * Immutable after seda_nsvc_new: nc, the names, id, started, eps (their
 * name, subject, sub), disc, fn, ud, timeout_ns.  mu guards the endpoint
 * figures, the pending list, stopping, subs_done and closed_done (cv is
 * its condition).
 */
struct seda_nsvc {
    natsConnection *nc;
    char *name, *version, *description, *queue;
    char id[32];
    char started[64];           /* RFC 3339, UTC */
    char shown[256];            /* the url, user info as "***" */
    int nep;
    struct nep *eps;
    natsSubscription *disc;     /* "$SRV.>" */
    seda_nsvc_fn fn;
    void *ud;
    int64_t timeout_ns;
    seda__mutex_t mu;
    pthread_cond_t cv;
    struct seda_nsvc_req *head, *tail;
    bool stopping;              /* the timeout thread ends */
    bool stopped;               /* unsubscribed */
    int subs_done;              /* subscriptions whose thread ended */
    int subs;                   /* subscriptions made */
    bool closed_done;           /* cnats's closed callback ran */
    bool thread_on;
    pthread_t thread;
    int64_t lost_at;            /* cnats's callback thread only */
};

/* ---- small things ---- */

/* JSON string s, quoted, at b (NUL-ended; truncated at n).  Returns the
 * length written. */
static size_t jstr(char *b, size_t n, const char *s)
{
    size_t o = 0;
#define PUT(c) do { if (o + 1 < n) b[o] = (c); o++; } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') {
            PUT('\\');
            PUT((char)*p);
        } else if (*p < 0x20) {
            char u[8];
            snprintf(u, sizeof u, "\\u%04x", *p);
            for (int i = 0; u[i]; i++)
                PUT(u[i]);
        } else {
            PUT((char)*p);
        }
    }
    PUT('"');
#undef PUT
    if (n)
        b[o < n ? o : n - 1] = '\0';
    return o;
}

/* A growing string for the discovery answers. */
struct sb {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = seda__realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_cstr(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* "key":"value" with value escaped, after a comma unless first. */
static void sb_kv(struct sb *b, const char *k, const char *v, bool first)
{
    char tmp[1200];
    if (!first)
        sb_cstr(b, ",");
    jstr(tmp, sizeof tmp, k);
    sb_cstr(b, tmp);
    sb_cstr(b, ":");
    jstr(tmp, sizeof tmp, v ? v : "");
    sb_cstr(b, tmp);
}

static void sb_ki(struct sb *b, const char *k, long long v)
{
    char tmp[96];
    snprintf(tmp, sizeof tmp, ",\"%s\":%lld", k, v);
    sb_cstr(b, tmp);
}

/* ---- answers ---- */

static void count(struct seda_nsvc *s, int ep, int64_t t0, int code,
                  const char *desc)
{
    struct nep *e = &s->eps[ep];
    int64_t dt = seda__now_ns() - t0;
    seda__mutex_lock(&s->mu);
    e->num_requests++;
    e->processing_time += dt > 0 ? dt : 0;
    if (code) {
        e->num_errors++;
        snprintf(e->last_error, sizeof e->last_error, "%d:%s", code,
                 desc ? desc : "");
    }
    seda__mutex_unlock(&s->mu);
}

/* Send an answer to reply (nothing when reply is NULL). */
static void send_answer(struct seda_nsvc *s, const char *reply,
                        const char *const *hv, int nh, const void *data,
                        size_t len)
{
    if (!reply || !*reply)
        return;
    natsMsg *m = NULL;
    if (natsMsg_Create(&m, reply, NULL, data, (int)len) != NATS_OK)
        return;
    for (int i = 0; i < nh; i++)
        natsMsgHeader_Add(m, hv[2 * i], hv[2 * i + 1]);
    natsConnection_PublishMsg(s->nc, m);
    natsMsg_Destroy(m);
}

static void error_answer(struct seda_nsvc *s, const char *reply, int code,
                         const char *desc)
{
    char c[16], d[400];
    snprintf(c, sizeof c, "%d", code);
    /* A header value is one line. */
    size_t k = 0;
    for (; desc && desc[k] && k < sizeof d - 1; k++)
        d[k] = desc[k] == '\r' || desc[k] == '\n' ? ' ' : desc[k];
    d[k] = '\0';
    const char *hv[] = { "Nats-Service-Error", d,
                         "Nats-Service-Error-Code", c };
    send_answer(s, reply, hv, 2, NULL, 0);
}

/* Take r off the pending list (mu held); was it answered before? */
static bool settle(struct seda_nsvc *s, seda_nsvc_req_t *r)
{
    if (r->listed) {
        if (r->prev)
            r->prev->next = r->next;
        else
            s->head = r->next;
        if (r->next)
            r->next->prev = r->prev;
        else
            s->tail = r->prev;
        r->listed = false;
    }
    bool before = r->answered;
    r->answered = true;
    return before;
}

void seda_nsvc_respond(seda_nsvc_req_t *r, const char *const *hv, int nh,
                       const void *data, size_t len)
{
    struct seda_nsvc *s = r->svc;
    seda__mutex_lock(&s->mu);
    bool before = settle(s, r);
    seda__mutex_unlock(&s->mu);
    if (!before) {
        send_answer(s, natsMsg_GetReply(r->m), hv, nh, data, len);
        count(s, r->ep, r->t0, 0, NULL);
    }
    natsMsg_Destroy(r->m);
    seda__free(r);
}

void seda_nsvc_respond_error(seda_nsvc_req_t *r, int code, const char *desc)
{
    struct seda_nsvc *s = r->svc;
    seda__mutex_lock(&s->mu);
    bool before = settle(s, r);
    seda__mutex_unlock(&s->mu);
    if (!before) {
        error_answer(s, natsMsg_GetReply(r->m), code, desc);
        count(s, r->ep, r->t0, code, desc);
    }
    natsMsg_Destroy(r->m);
    seda__free(r);
}

/* The timeout thread: requests past their deadline are answered 504. */
static void *timeouts(void *arg)
{
    struct seda_nsvc *s = arg;
    seda__mutex_lock(&s->mu);
    while (!s->stopping) {
        int64_t now = seda__now_ns();
        seda_nsvc_req_t *r = s->head;
        if (r && r->deadline <= now) {
            settle(s, r);
            /* Copied under the lock: the owner may free r once it is
             * let go of. */
            char reply[256];
            const char *rp = natsMsg_GetReply(r->m);
            snprintf(reply, sizeof reply, "%s", rp ? rp : "");
            int ep = r->ep;
            int64_t t0 = r->t0;
            seda__mutex_unlock(&s->mu);
            error_answer(s, reply[0] ? reply : NULL, 504, "timeout");
            count(s, ep, t0, 504, "timeout");
            seda__mutex_lock(&s->mu);
            continue;
        }
        int64_t until = r ? r->deadline : now + 1000000000LL;
        seda__cond_wait(&s->cv, &s->mu, until);
    }
    seda__mutex_unlock(&s->mu);
    return NULL;
}

/* ---- requests ---- */

static void on_request(natsConnection *nc, natsSubscription *sub,
                       natsMsg *m, void *closure)
{
    (void)nc;
    (void)sub;
    struct nep *e = closure;
    struct seda_nsvc *s = e->svc;
    seda_nsvc_req_t *r = seda__calloc(1, sizeof *r);
    if (!r) {
        error_answer(s, natsMsg_GetReply(m), 503, "out of memory");
        count(s, e->idx, seda__now_ns(), 503, "out of memory");
        natsMsg_Destroy(m);
        return;
    }
    r->svc = s;
    r->ep = e->idx;
    r->m = m;
    r->t0 = seda__now_ns();
    if (s->timeout_ns > 0) {
        r->deadline = r->t0 + s->timeout_ns;
        seda__mutex_lock(&s->mu);
        r->listed = true;
        r->prev = s->tail;
        if (s->tail)
            s->tail->next = r;
        else
            s->head = r;
        s->tail = r;
        if (s->head == r)
            pthread_cond_broadcast(&s->cv);
        seda__mutex_unlock(&s->mu);
    }
    s->fn(r, e->idx, s->ud);
}

const char *seda_nsvc_req_subject(const seda_nsvc_req_t *r)
{
    return natsMsg_GetSubject(r->m);
}

const char *seda_nsvc_req_reply(const seda_nsvc_req_t *r)
{
    const char *rp = natsMsg_GetReply(r->m);
    return rp && *rp ? rp : NULL;
}

const void *seda_nsvc_req_data(const seda_nsvc_req_t *r, size_t *len)
{
    *len = (size_t)natsMsg_GetDataLength(r->m);
    return natsMsg_GetData(r->m);
}

int seda_nsvc_req_header_count(const seda_nsvc_req_t *r)
{
    const char **keys = NULL;
    int n = 0;
    if (natsMsgHeader_Keys(r->m, &keys, &n) != NATS_OK)
        return 0;
    free((void *)keys);
    return n;
}

void seda_nsvc_req_header_at(const seda_nsvc_req_t *r, int i,
                             const char **name, const char **value)
{
    const char **keys = NULL;
    int n = 0;
    *name = *value = NULL;
    if (natsMsgHeader_Keys(r->m, &keys, &n) != NATS_OK)
        return;
    if (i >= 0 && i < n) {
        *name = keys[i];                /* owned by the message */
        if (natsMsgHeader_Get(r->m, keys[i], value) != NATS_OK)
            *value = "";
    }
    free((void *)keys);
}

/* ---- discovery ---- */

static void head(struct sb *b, const struct seda_nsvc *s, const char *type)
{
    sb_cstr(b, "{");
    sb_kv(b, "type", type, true);
    sb_kv(b, "name", s->name, false);
    sb_kv(b, "id", s->id, false);
    sb_kv(b, "version", s->version, false);
    sb_cstr(b, ",\"metadata\":{}");
}

static void ep_head(struct sb *b, const struct seda_nsvc *s,
                    const struct nep *e)
{
    sb_cstr(b, "{");
    sb_kv(b, "name", e->name, true);
    sb_kv(b, "subject", e->subject, false);
    sb_kv(b, "queue_group", s->queue, false);
}

static void discovery_answer(struct seda_nsvc *s, const char *verb,
                             struct sb *b)
{
    if (strcmp(verb, "PING") == 0) {
        head(b, s, "io.nats.micro.v1.ping_response");
        sb_cstr(b, "}");
        return;
    }
    if (strcmp(verb, "INFO") == 0) {
        head(b, s, "io.nats.micro.v1.info_response");
        sb_kv(b, "description", s->description, false);
        sb_cstr(b, ",\"endpoints\":[");
        for (int i = 0; i < s->nep; i++) {
            if (i)
                sb_cstr(b, ",");
            ep_head(b, s, &s->eps[i]);
            sb_cstr(b, ",\"metadata\":null}");
        }
        sb_cstr(b, "]}");
        return;
    }
    head(b, s, "io.nats.micro.v1.stats_response");
    sb_kv(b, "started", s->started, false);
    sb_cstr(b, ",\"endpoints\":[");
    for (int i = 0; i < s->nep; i++) {
        struct nep *e = &s->eps[i];
        seda__mutex_lock(&s->mu);
        uint64_t nr = e->num_requests, ne = e->num_errors;
        int64_t pt = e->processing_time;
        char last[200];
        snprintf(last, sizeof last, "%s", e->last_error);
        seda__mutex_unlock(&s->mu);
        if (i)
            sb_cstr(b, ",");
        ep_head(b, s, e);
        sb_ki(b, "num_requests", (long long)nr);
        sb_ki(b, "num_errors", (long long)ne);
        sb_kv(b, "last_error", last, false);
        sb_ki(b, "processing_time", (long long)pt);
        sb_ki(b, "average_processing_time",
              nr ? (long long)(pt / (int64_t)nr) : 0);
        sb_cstr(b, "}");
    }
    sb_cstr(b, "]}");
}

/* "$SRV.<VERB>[.<name>[.<id>]]": answered when it names this service or
 * none. */
static void on_discovery(natsConnection *nc, natsSubscription *sub,
                         natsMsg *m, void *closure)
{
    (void)nc;
    (void)sub;
    struct seda_nsvc *s = closure;
    const char *subj = natsMsg_GetSubject(m) + 5;   /* after "$SRV." */
    char verb[8] = "";
    const char *dot = strchr(subj, '.');
    size_t vl = dot ? (size_t)(dot - subj) : strlen(subj);
    bool mine = vl < sizeof verb;
    if (mine) {
        memcpy(verb, subj, vl);
        verb[vl] = '\0';
        mine = strcmp(verb, "PING") == 0 || strcmp(verb, "INFO") == 0 ||
               strcmp(verb, "STATS") == 0;
    }
    if (mine && dot) {
        const char *name = dot + 1;
        const char *d2 = strchr(name, '.');
        size_t nl = d2 ? (size_t)(d2 - name) : strlen(name);
        mine = nl == strlen(s->name) && memcmp(name, s->name, nl) == 0 &&
               (!d2 || strcmp(d2 + 1, s->id) == 0);
    }
    const char *reply = natsMsg_GetReply(m);
    if (mine && reply && *reply) {
        struct sb b = { 0 };
        discovery_answer(s, verb, &b);
        if (!b.failed)
            natsConnection_Publish(s->nc, reply, b.p, (int)b.len);
        seda__free(b.p);
    }
    natsMsg_Destroy(m);
}

/* ---- connection events ---- */

static void on_sub_done(void *closure)
{
    struct seda_nsvc *s = closure;
    seda__mutex_lock(&s->mu);
    s->subs_done++;
    pthread_cond_broadcast(&s->cv);
    seda__mutex_unlock(&s->mu);
}

static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    struct seda_nsvc *s = closure;
    seda__mutex_lock(&s->mu);
    s->closed_done = true;
    pthread_cond_broadcast(&s->cv);
    seda__mutex_unlock(&s->mu);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    struct seda_nsvc *s = closure;
    seda__mutex_lock(&s->mu);
    bool quiet = s->stopped || s->lost_at;
    seda__mutex_unlock(&s->mu);
    if (quiet || natsConnection_IsClosed(nc))
        return;
    s->lost_at = seda__now_ns();
    char line[600];
    snprintf(line, sizeof line, "nats service '%s' (%s): the connection "
             "was lost; reconnecting (requests sent meanwhile are not "
             "seen)", s->name, s->shown);
    seda_log_write(SEDA_LOG_WARN, NULL, line);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    struct seda_nsvc *s = closure;
    char url[256] = "", shown[256] = "";
    if (natsConnection_GetConnectedUrl(nc, url, sizeof url) == NATS_OK)
        seda__rconn_redact(url, shown, sizeof shown);
    double away = s->lost_at ? (double)(seda__now_ns() - s->lost_at) / 1e9
                             : 0.0;
    s->lost_at = 0;
    char line[700];
    snprintf(line, sizeof line, "nats service '%s': connected again, to "
             "%s, after %.1f s", s->name, shown, away);
    seda_log_write(SEDA_LOG_INFO, NULL, line);
}

/* ---- making and freeing ---- */

static void started_now(char *buf, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%.20s.%09ldZ", base, (long)(ts.tv_nsec % 1000000000L));
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (!s)
        return NULL;
    char *d = seda__strdup(s);
    if (!d)
        *failed = true;
    return d;
}

/* Close the connection and wait (bounded) for cnats's threads to let go
 * of s. */
static bool close_conn(struct seda_nsvc *s)
{
    if (!s->nc)
        return true;
    natsConnection_Close(s->nc);
    int64_t deadline = seda__now_ns() + 10000000000LL;
    seda__mutex_lock(&s->mu);
    while ((!s->closed_done || s->subs_done < s->subs) &&
           seda__cond_wait(&s->cv, &s->mu, deadline) == 0) {
    }
    bool ok = s->closed_done && s->subs_done >= s->subs;
    seda__mutex_unlock(&s->mu);
    return ok;
}

/* Free s; when cnats may still hold it (close_conn said no), it is left
 * allocated: the safe choice. */
static void svc_free(struct seda_nsvc *s, bool wait_ok)
{
    if (!wait_ok)
        return;
    for (int i = 0; i < s->nep; i++) {
        if (s->eps[i].sub)
            natsSubscription_Destroy(s->eps[i].sub);
        seda__free(s->eps[i].name);
        seda__free(s->eps[i].subject);
    }
    if (s->disc)
        natsSubscription_Destroy(s->disc);
    if (s->nc)
        natsConnection_Destroy(s->nc);
    seda__free(s->eps);
    seda__free(s->name);
    seda__free(s->version);
    seda__free(s->description);
    seda__free(s->queue);
    pthread_cond_destroy(&s->cv);
    seda__mutex_destroy(&s->mu);
    seda__free(s);
}

/* A service for o at url (its options checked), its options copied, not
 * connected.  NULL when out of memory (nothing left allocated). */
static struct seda_nsvc *svc_alloc(const seda_nsvc_opts *o, const char *url)
{
    struct seda_nsvc *s = seda__calloc(1, sizeof *s);
    if (!s)
        return NULL;
    seda__mutex_init(&s->mu);
    seda__cond_init(&s->cv);
    bool failed = false;
    s->name = dup_or_null(o->name, &failed);
    s->version = dup_or_null(o->version, &failed);
    s->description = dup_or_null(o->description ? o->description : "",
                                 &failed);
    s->queue = dup_or_null(o->queue, &failed);
    s->eps = seda__calloc((size_t)o->nendpoints, sizeof *s->eps);
    s->nep = s->eps ? o->nendpoints : 0;
    failed = failed || !s->eps;
    for (int i = 0; i < s->nep; i++) {
        s->eps[i].svc = s;
        s->eps[i].idx = i;
        s->eps[i].name = dup_or_null(o->ep_names[i], &failed);
        s->eps[i].subject = dup_or_null(o->ep_subjects[i], &failed);
    }
    s->fn = o->on_request;
    s->ud = o->ud;
    s->timeout_ns = o->timeout > 0 ? seda__secs_to_ns(o->timeout) : 0;
    seda__rconn_redact(url, s->shown, sizeof s->shown);
    started_now(s->started, sizeof s->started);
    if (failed) {
        svc_free(s, true);
        return NULL;
    }
    return s;
}

/* Connect s to url with ro's credentials and s's callbacks (s->nc).
 * Returns 0, or SEDA_ENOMEM / SEDA_EUNAVAIL with err saying why; s is
 * the caller's to free either way. */
static int svc_connect(struct seda_nsvc *s, const seda_remote_opts *ro,
                       const char *url, char *err, size_t errlen)
{
    struct rauth auth = { ro->tls_ca, ro->tls_cert, ro->tls_key, ro->creds,
                          ro->user, ro->password, ro->token };
    natsOptions *no = NULL;
    char name[160];
    snprintf(name, sizeof name, "seda-lua service %s", s->name);
    natsStatus ns;
    if ((ns = natsOptions_Create(&no)) != NATS_OK ||
        (ns = seda__rconn_options(no, url, ro->connect_timeout, &auth)) !=
            NATS_OK ||
        (ns = natsOptions_SetName(no, name)) != NATS_OK ||
        (ns = natsOptions_SetDisconnectedCB(no, on_disconnected, s)) !=
            NATS_OK ||
        (ns = natsOptions_SetReconnectedCB(no, on_reconnected, s)) !=
            NATS_OK ||
        (ns = natsOptions_SetClosedCB(no, on_closed, s)) != NATS_OK ||
        (ns = natsConnection_Connect(&s->nc, no)) != NATS_OK) {
        const char *le = nats_GetLastError(NULL);
        snprintf(err, errlen, "service '%s': cannot connect to %s: %s%s%s",
                 s->name, s->shown, natsStatus_GetText(ns), le ? ": " : "",
                 le ? le : "");
        natsOptions_Destroy(no);
        return ns == NATS_NO_MEMORY ? SEDA_ENOMEM : SEDA_EUNAVAIL;
    }
    natsOptions_Destroy(no);
    return 0;
}

/* The service's instance id (s->id): the unique part of a new inbox. */
static natsStatus svc_name_instance(struct seda_nsvc *s)
{
    char nuid[64];
    natsInbox *ib = NULL;
    natsStatus ns = natsInbox_Create(&ib);
    if (ns == NATS_OK) {
        const char *dot = strrchr((const char *)ib, '.');
        snprintf(nuid, sizeof nuid, "%s", dot ? dot + 1 : (const char *)ib);
        natsInbox_Destroy(ib);
        snprintf(s->id, sizeof s->id, "%.22s", nuid);
    }
    return ns;
}

/* Subscribe s's endpoints (its queue group) and discovery ($SRV.>),
 * flush, and start the timeouts' thread when s has a timeout.  The first
 * failure stops the steps and is returned; what was subscribed is
 * counted in s->subs, for close_conn. */
static natsStatus svc_subscribe(struct seda_nsvc *s)
{
    natsStatus ns = NATS_OK;
    for (int i = 0; ns == NATS_OK && i < s->nep; i++) {
        ns = natsConnection_QueueSubscribe(&s->eps[i].sub, s->nc,
                                           s->eps[i].subject, s->queue,
                                           on_request, &s->eps[i]);
        if (ns == NATS_OK) {
            s->subs++;
            ns = natsSubscription_SetOnCompleteCB(s->eps[i].sub,
                                                  on_sub_done, s);
        }
        if (ns == NATS_OK)
            ns = natsSubscription_SetPendingLimits(s->eps[i].sub, 1 << 20,
                                                   256 << 20);
    }
    if (ns == NATS_OK)
        ns = natsConnection_Subscribe(&s->disc, s->nc, "$SRV.>",
                                      on_discovery, s);
    if (ns == NATS_OK) {
        s->subs++;
        ns = natsSubscription_SetOnCompleteCB(s->disc, on_sub_done, s);
    }
    if (ns == NATS_OK)
        ns = natsConnection_FlushTimeout(s->nc, 5000);
    if (ns == NATS_OK && s->timeout_ns > 0) {
        s->thread_on = pthread_create(&s->thread, NULL, timeouts, s) == 0;
        if (!s->thread_on)
            ns = NATS_NO_MEMORY;
    }
    return ns;
}

int seda_nsvc_new(const seda_nsvc_opts *o, seda_nsvc_t **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    int rc = seda__nsvc_opts_check(o, err, errlen);
    if (rc)
        return rc;
    const seda_remote_opts *ro = o->conn;
    char url[4096];
    if (seda__rconn_join_urls(ro, url, sizeof url) != 0 || !url[0]) {
        snprintf(err, errlen, "service '%s': url is required (or urls, "
                 "together under 4 KiB)", o->name);
        return SEDA_EINVAL;
    }
    struct seda_nsvc *s = svc_alloc(o, url);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return SEDA_ENOMEM;
    }
    rc = svc_connect(s, ro, url, err, errlen);
    if (rc) {
        svc_free(s, true);
        return rc;
    }
    natsStatus ns = svc_name_instance(s);
    if (ns == NATS_OK)
        ns = svc_subscribe(s);
    if (ns != NATS_OK) {
        const char *le = nats_GetLastError(NULL);
        snprintf(err, errlen, "service '%s': cannot subscribe on %s: %s%s%s",
                 s->name, s->shown, natsStatus_GetText(ns), le ? ": " : "",
                 le ? le : "");
        seda__mutex_lock(&s->mu);
        s->stopped = true;
        seda__mutex_unlock(&s->mu);
        svc_free(s, close_conn(s));
        return SEDA_EUNAVAIL;
    }
    *out = s;
    return 0;
}

const char *seda_nsvc_id(const seda_nsvc_t *s)
{
    return s->id;
}

void seda_nsvc_stop(seda_nsvc_t *s)
{
    seda__mutex_lock(&s->mu);
    bool was = s->stopped;
    s->stopped = true;
    seda__mutex_unlock(&s->mu);
    if (was)
        return;
    for (int i = 0; i < s->nep; i++)
        natsSubscription_Unsubscribe(s->eps[i].sub);
    natsSubscription_Unsubscribe(s->disc);
    natsConnection_FlushTimeout(s->nc, 1000);
    /* Until every subscription's thread is done: no request callback
     * runs after (the bus may be freed next). */
    int64_t deadline = seda__now_ns() + 10000000000LL;
    seda__mutex_lock(&s->mu);
    while (s->subs_done < s->subs &&
           seda__cond_wait(&s->cv, &s->mu, deadline) == 0) {
    }
    bool done = s->subs_done >= s->subs;
    seda__mutex_unlock(&s->mu);
    if (!done)
        return;
    /* Freed now, not with the service: cnats lets go of a subscription's
     * thread (detaches it) only when the subscription is freed, and a
     * program may exit without collecting its bus. */
    for (int i = 0; i < s->nep; i++) {
        natsSubscription_Destroy(s->eps[i].sub);
        s->eps[i].sub = NULL;
    }
    natsSubscription_Destroy(s->disc);
    s->disc = NULL;
}

void seda_nsvc_free(seda_nsvc_t *s)
{
    if (!s)
        return;
    seda_nsvc_stop(s);
    if (s->thread_on) {
        seda__mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_broadcast(&s->cv);
        seda__mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    natsConnection_FlushTimeout(s->nc, 1000);   /* the last answers */
    bool ok = close_conn(s);
    if (!ok)
        seda_log_write(SEDA_LOG_WARN, NULL, "nats service: the connection "
                       "did not close in 10 s; its memory is left "
                       "allocated");
    svc_free(s, ok);
}

void seda_nsvc_ep_stats_get(seda_nsvc_t *s, int ep, seda_nsvc_ep_stats *out)
{
    memset(out, 0, sizeof *out);
    if (ep < 0 || ep >= s->nep)
        return;
    struct nep *e = &s->eps[ep];
    seda__mutex_lock(&s->mu);
    out->num_requests = e->num_requests;
    out->num_errors = e->num_errors;
    out->processing_time = e->processing_time;
    snprintf(out->last_error, sizeof out->last_error, "%s", e->last_error);
    seda__mutex_unlock(&s->mu);
}
