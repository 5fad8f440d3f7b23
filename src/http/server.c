/* SPDX-License-Identifier: MIT */
/*
 * server.c -- the HTTP/1.1 server of seda_http.h on libmicrohttpd.
 *
 * DESIGN
 *   libmicrohttpd (MHD) runs its own epoll thread(s) and parses requests;
 *   this file adds what the bus needs around it:
 *     - answers from any thread: a request whose body is complete goes to
 *       on_request and its connection is suspended (MHD_suspend_connection)
 *       until seda_http_respond stores the answer and resumes it; MHD then
 *       calls the access handler again, which queues the stored answer.
 *       A suspended connection is not read, so a pipelined request behind
 *       it waits its turn and answers leave in order.
 *     - deadlines: a reaper thread answers 504 for requests past timeout,
 *       and cuts (shutdown(2)) connections whose client has had
 *       client_timeout to send a whole request or read an answer; MHD's
 *       own timeout is only an idle one, which a slow drip defeats.
 *     - counters and a windowed latency histogram (stats).
 *
 *   Locking: one mutex per server (mu) guards every request's state and
 *   answer, the waiting and connection lists, the counters and the
 *   histogram.  MHD_suspend_connection and MHD_resume_connection are called
 *   with mu held, so "answered" and "suspended" never cross: lock order
 *   mu -> MHD's internal mutexes; MHD calls our callbacks without holding
 *   its own.
 *
 *   Lifetimes: a request is held by the server (until MHD's completed
 *   notification) and, from on_request to seda_http_respond, by the
 *   application; the server struct is held by itself (until
 *   seda_http_server_free) and by every request the application holds, so
 *   a late respond finds its mutex.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "seda_http.h"

/* ---- clock ---- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t secs_ns(double s)
{
    return s <= 0 ? 0 : s > 1e9 ? (int64_t)1e18 : (int64_t)(s * 1e9);
}

/* ---- latency window: WIN_SLOTS one-second slots of log buckets ---- */

#define WIN_SLOTS 10
#define NBUCKETS 128            /* 4 per power of two of microseconds */

struct hist_slot {
    int64_t sec;                /* the second it counts, or -1 */
    uint64_t n[NBUCKETS];
    double max_us;
};

static int bucket_of(double us)
{
    if (us < 1)
        return 0;
    int b = (int)(log2(us) * 4) + 1;
    return b >= NBUCKETS ? NBUCKETS - 1 : b;
}

static double bucket_top(int b)
{
    return b == 0 ? 1 : exp2((double)b / 4);
}

/* ---- structs ---- */

struct hconn {
    struct hconn *prev, *next;  /* the server's list; guarded by mu */
    int fd;                     /* immutable */
    int64_t clock_ns;           /* the client's phase began; guarded by mu */
    bool busy;                  /* a request is with the application: the
                                   client's clock stops; guarded by mu */
    bool cut;                   /* shut down for slowness; guarded by mu */
};

enum { R_READING, R_WAITING, R_ANSWERED, R_GONE };

struct seda_http_req_s {
    seda_http_server_t *srv;
    struct MHD_Connection *conn;
    struct hconn *hc;           /* or NULL */
    int refs;                   /* guarded by srv->mu */
    int state;                  /* R_*; guarded by srv->mu */
    bool suspended;             /* guarded by srv->mu */
    bool too_large;             /* MHD thread only */
    bool counted;               /* in srv->active; guarded by srv->mu */
    char *method, *path;
    int nh, nq;
    char **hdr, **q;            /* 2 * nh, 2 * nq strings */
    unsigned char *body;
    size_t len, cap;
    double arrived;
    int64_t arrived_ns, deadline_ns;
    struct MHD_Response *resp;  /* the answer; guarded by srv->mu */
    int status;
    struct seda_http_req_s *wprev, *wnext; /* waiting list; guarded by mu */
};

/*
 * Locking: mu guards everything below it but the immutable settings
 * (daemon, port, o, lfd) and stop (read by the reaper under mu).
 */
struct seda_http_server_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* the reaper's sleep; stop wakes it */
    struct MHD_Daemon *daemon;
    seda_http_opts o;
    char *addr;                 /* o.addr's copy */
    int port;
    int lfd;                    /* listening socket, or -1 once quiesced */
    int qfd;                    /* the quiesced listening socket, kept open
                                   until MHD_stop_daemon has returned: MHD's
                                   thread may still use it (its header says
                                   so), and a number closed early could be
                                   reused under it; -1 if none.  Written by
                                   the first quiesce (under mu's flag),
                                   read by free after the daemon stopped */
    int refs;                   /* self + requests the application holds */
    bool stop;
    bool quiesced;
    pthread_t reaper;
    bool reaper_on;
    struct seda_http_req_s *waiting;    /* with the application */
    struct hconn *conns;
    int active;                 /* requests begun and not completed */
    seda_http_stats st;
    struct hist_slot win[WIN_SLOTS];
};

/* ---- server references ---- */

static void server_release_locked(seda_http_server_t *s)
{
    if (--s->refs > 0) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->addr);
    free(s);
}

/* ---- requests ---- */

static void strv_free(char **v, int n)
{
    if (!v)
        return;
    for (int i = 0; i < 2 * n; i++)
        free(v[i]);
    free(v);
}

static void req_free(struct seda_http_req_s *r)
{
    if (r->resp)
        MHD_destroy_response(r->resp);
    free(r->method);
    free(r->path);
    strv_free(r->hdr, r->nh);
    strv_free(r->q, r->nq);
    free(r->body);
    free(r);
}

/* Drop one reference (mu held; it stays held). */
static void req_unref_locked(struct seda_http_req_s *r)
{
    if (--r->refs == 0)
        req_free(r);
}

static void waiting_remove(seda_http_server_t *s, struct seda_http_req_s *r)
{
    if (r->wprev)
        r->wprev->wnext = r->wnext;
    else if (s->waiting == r)
        s->waiting = r->wnext;
    if (r->wnext)
        r->wnext->wprev = r->wprev;
    r->wprev = r->wnext = NULL;
}

struct kv_collect {
    char **v;
    int n, cap;
    bool lower;
    bool failed;
};

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *value)
{
    (void)kind;
    struct kv_collect *c = cls;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        char **v = realloc(c->v, sizeof *v * 2 * (size_t)cap);
        if (!v) {
            c->failed = true;
            return MHD_NO;
        }
        c->v = v;
        c->cap = cap;
    }
    char *k = strdup(key ? key : "");
    char *val = strdup(value ? value : "");
    if (!k || !val) {
        free(k);
        free(val);
        c->failed = true;
        return MHD_NO;
    }
    if (c->lower)
        for (char *p = k; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    c->v[2 * c->n] = k;
    c->v[2 * c->n + 1] = val;
    c->n++;
    return MHD_YES;
}

/* ---- answers ---- */

static struct MHD_Response *make_response(const char *const *hv, int nh,
                                          const void *body, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return NULL;
    for (int i = 0; i < nh; i++) {
        if (!hv[2 * i] || !hv[2 * i + 1])
            continue;
        /* A header that MHD refuses (a bad name) is left out. */
        (void)MHD_add_response_header(resp, hv[2 * i], hv[2 * i + 1]);
    }
    return resp;
}

static struct MHD_Response *simple_response(int status, const char *reason)
{
    char body[160];
    int n = snprintf(body, sizeof body, "%d %s\n", status, reason);
    const char *hv[] = { "Content-Type", "text/plain; charset=utf-8",
                         "Seda-Reason", reason, "Retry-After", "1" };
    return make_response(hv, status == 503 ? 3 : 2, body, (size_t)n);
}

static void count_answer(seda_http_server_t *s, int status)
{
    int cls = status / 100;
    if (cls >= 1 && cls <= 5)
        s->st.responses[cls]++;
    if (status == 503)
        s->st.responses[0]++;
}

static void record_latency(seda_http_server_t *s, int64_t from_ns)
{
    int64_t now = now_ns();
    double us = (double)(now - from_ns) / 1e3;
    seda_http_hist_add(&s->st.latency, us / 1e6);
    int64_t sec = now / 1000000000;
    struct hist_slot *h = &s->win[sec % WIN_SLOTS];
    if (h->sec != sec) {
        memset(h->n, 0, sizeof h->n);
        h->max_us = 0;
        h->sec = sec;
    }
    h->n[bucket_of(us)]++;
    if (us > h->max_us)
        h->max_us = us;
}

/* Store an answer for a waiting request and wake its connection (mu
 * held).  Takes resp. */
static void answer_locked(seda_http_server_t *s, struct seda_http_req_s *r,
                          struct MHD_Response *resp, int status)
{
    r->resp = resp;
    r->status = status;
    r->state = R_ANSWERED;
    waiting_remove(s, r);
    s->st.waiting--;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

int seda_http_respond(seda_http_req_t *r, int status,
                      const char *const *headers, int nheaders,
                      const void *body, size_t len)
{
    seda_http_server_t *s = r->srv;
    int rc = 0;
    if (status < 100 || status > 999)
        status = 500;
    struct MHD_Response *resp = make_response(headers, nheaders, body, len);
    if (!resp) {
        rc = -ENOMEM;
        status = 500;
        resp = simple_response(500, "out_of_memory");
    }
    pthread_mutex_lock(&s->mu);
    if (r->state == R_WAITING && resp) {
        answer_locked(s, r, resp, status);
        resp = NULL;
    } else if (rc == 0) {
        rc = 1;
    }
    if (resp)
        MHD_destroy_response(resp);
    req_unref_locked(r);
    server_release_locked(s);           /* the request's hold; unlocks */
    return rc;
}

/* ---- MHD callbacks ---- */

static struct hconn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result queue(struct MHD_Connection *c,
                             struct MHD_Response *resp, int status)
{
    if (!resp)
        return MHD_NO;
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* An answer the server makes at once (413, 500): counted, the client's
 * clock restarted. */
static enum MHD_Result queue_own(seda_http_server_t *s,
                                 struct seda_http_req_s *r, int status,
                                 const char *reason)
{
    pthread_mutex_lock(&s->mu);
    count_answer(s, status);
    if (status == 413)
        s->st.too_large++;
    if (r->hc)
        r->hc->clock_ns = now_ns();
    pthread_mutex_unlock(&s->mu);
    return queue(r->conn, simple_response(status, reason), status);
}

static enum MHD_Result count_bytes(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value)
{
    (void)kind;
    size_t *n = cls;
    *n += (key ? strlen(key) : 0) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* A request's first call: its record, counted active; refused at once
 * when its headers or announced body are over the limits. */
static enum MHD_Result request_begin(seda_http_server_t *s,
                                     struct MHD_Connection *c,
                                     const char *url, const char *method,
                                     void **con_cls)
{
    struct seda_http_req_s *r = calloc(1, sizeof *r);
    if (!r)
        return MHD_NO;
    r->srv = s;
    r->conn = c;
    r->hc = conn_of(c);
    r->refs = 1;
    r->method = strdup(method ? method : "");
    r->path = strdup(url ? url : "/");
    if (!r->method || !r->path) {
        req_free(r);
        return MHD_NO;
    }
    pthread_mutex_lock(&s->mu);
    s->active++;
    r->counted = true;
    pthread_mutex_unlock(&s->mu);
    *con_cls = r;
    /* The request line and headers, as sent (about: the query is
     * counted decoded); MHD's memory pool bounds them too. */
    size_t hbytes = strlen(r->method) + strlen(r->path) + 12;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_bytes, &hbytes);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, count_bytes,
                              &hbytes);
    if (hbytes > s->o.max_header) {
        r->too_large = true;
        return queue_own(s, r, 431, "header_too_large");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
        r->too_large = true;
        return queue_own(s, r, 413, "too_large");
    }
    return MHD_YES;
}

/* A chunk of the body: kept, up to max_body (past it the request is
 * answered 413 once the body is read). */
static enum MHD_Result request_body(seda_http_server_t *s,
                                    struct seda_http_req_s *r,
                                    const char *upload, size_t *size)
{
    if (!r->too_large) {
        if (r->len + *size > s->o.max_body) {
            r->too_large = true;
        } else {
            if (r->len + *size > r->cap) {
                size_t cap = r->cap ? r->cap : 1024;
                while (cap < r->len + *size)
                    cap *= 2;
                unsigned char *b = realloc(r->body, cap);
                if (!b)
                    return MHD_NO;
                r->body = b;
                r->cap = cap;
            }
            memcpy(r->body + r->len, upload, *size);
            r->len += *size;
        }
    }
    *size = 0;
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c,
                                 const char *url, const char *method,
                                 const char *version, const char *upload,
                                 size_t *size, void **con_cls)
{
    (void)version;
    seda_http_server_t *s = cls;
    struct seda_http_req_s *r = *con_cls;
    if (!r)
        return request_begin(s, c, url, method, con_cls);
    if (*size)
        return request_body(s, r, upload, size);

    pthread_mutex_lock(&s->mu);
    int state = r->state;
    pthread_mutex_unlock(&s->mu);
    if (state == R_READING) {
        if (r->too_large)
            return queue_own(s, r, 413, "too_large");
        struct kv_collect h = { .lower = true }, q = { 0 };
        MHD_get_connection_values(c, MHD_HEADER_KIND, collect, &h);
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect, &q);
        r->hdr = h.v;
        r->nh = h.n;
        r->q = q.v;
        r->nq = q.n;
        if (h.failed || q.failed)
            return queue_own(s, r, 500, "out_of_memory");
        r->arrived_ns = now_ns();
        r->arrived = (double)r->arrived_ns / 1e9;
        r->deadline_ns = r->arrived_ns + secs_ns(s->o.timeout);
        pthread_mutex_lock(&s->mu);
        r->state = R_WAITING;
        r->refs++;                      /* the application's */
        s->refs++;                      /* held by that request */
        r->wnext = s->waiting;
        if (s->waiting)
            s->waiting->wprev = r;
        s->waiting = r;
        s->st.waiting++;
        s->st.requests++;
        if (r->hc)
            r->hc->busy = true;
        pthread_mutex_unlock(&s->mu);
        s->o.on_request(r, s->o.ud);
        pthread_mutex_lock(&s->mu);
        if (r->state == R_WAITING) {
            r->suspended = true;
            MHD_suspend_connection(c);
            pthread_mutex_unlock(&s->mu);
            return MHD_YES;
        }
        pthread_mutex_unlock(&s->mu);
    }
    /* Answered (now or after a resume). */
    pthread_mutex_lock(&s->mu);
    struct MHD_Response *resp = r->resp;
    int status = r->status;
    r->resp = NULL;
    count_answer(s, status);
    if (status == 504)
        s->st.timeouts++;
    record_latency(s, r->arrived_ns);
    if (r->hc) {
        r->hc->busy = false;
        r->hc->clock_ns = now_ns();
    }
    pthread_mutex_unlock(&s->mu);
    return queue(c, resp, status);
}

/* The request ended: its answer went out or the connection died. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    seda_http_server_t *s = cls;
    struct seda_http_req_s *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    if (r->state == R_WAITING) {        /* closed while suspended */
        waiting_remove(s, r);
        s->st.waiting--;
    }
    r->state = R_GONE;
    if (r->hc) {
        r->hc->busy = false;
        r->hc->clock_ns = now_ns();
    }
    if (r->counted)
        s->active--;
    req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    seda_http_server_t *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        struct hconn *h = calloc(1, sizeof *h);
        *socket_context = h;
        if (!h)
            return;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        h->fd = ci ? ci->connect_fd : -1;
        pthread_mutex_lock(&s->mu);
        h->clock_ns = now_ns();
        h->next = s->conns;
        if (s->conns)
            s->conns->prev = h;
        s->conns = h;
        s->st.connections++;
        s->st.open_connections++;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    struct hconn *h = *socket_context;
    if (!h)
        return;
    /* MHD closes the descriptor after this: the reaper, which shuts
     * descriptors down under mu, never touches a closed one. */
    pthread_mutex_lock(&s->mu);
    if (h->prev)
        h->prev->next = h->next;
    else
        s->conns = h->next;
    if (h->next)
        h->next->prev = h->prev;
    s->st.open_connections--;
    pthread_mutex_unlock(&s->mu);
    free(h);
    *socket_context = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    (void)fmt;
    (void)ap;                   /* a client's misbehaviour is not news */
}

/* ---- the reaper ---- */

#define REAP_NS 10000000        /* 10 ms */

/* Every REAP_NS the waiting requests' deadlines; every tenth time the
 * connections' (a walk of every open connection). */
static void reap(seda_http_server_t *s, int64_t now, bool conns)
{
    for (struct seda_http_req_s *r = s->waiting, *next; r; r = next) {
        next = r->wnext;
        if (now < r->deadline_ns)
            continue;
        struct MHD_Response *resp = simple_response(504, "timeout");
        if (resp)
            answer_locked(s, r, resp, 504);
    }
    if (!conns)
        return;
    int64_t limit = secs_ns(s->o.client_timeout);
    for (struct hconn *h = s->conns; h; h = h->next) {
        if (h->busy || h->cut || h->fd < 0 || now - h->clock_ns < limit)
            continue;
        h->cut = true;
        s->st.slow_clients++;
        shutdown(h->fd, SHUT_RDWR);
    }
}

static void *reaper_main(void *arg)
{
    seda_http_server_t *s = arg;
    pthread_mutex_lock(&s->mu);
    unsigned tick = 0;
    while (!s->stop) {
        reap(s, now_ns(), tick++ % 10 == 0);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += REAP_NS;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the listening socket ---- */

/* Parse "PORT", "A.B.C.D:PORT" or "[V6]:PORT" into ss. */
static int parse_addr(const char *a, struct sockaddr_storage *ss,
                      socklen_t *sl, char *err, size_t errlen)
{
    char host[64] = "127.0.0.1";
    const char *port = a;
    const char *colon = strrchr(a, ':');
    if (a[0] == '[') {
        const char *close = strchr(a, ']');
        if (!close || close[1] != ':' || (size_t)(close - a - 1) >= sizeof host) {
            snprintf(err, errlen, "'%s': expected [IPV6]:PORT", a);
            return -EINVAL;
        }
        memcpy(host, a + 1, (size_t)(close - a - 1));
        host[close - a - 1] = '\0';
        port = close + 2;
    } else if (colon) {
        if ((size_t)(colon - a) >= sizeof host) {
            snprintf(err, errlen, "'%s': the address is too long", a);
            return -EINVAL;
        }
        memcpy(host, a, (size_t)(colon - a));
        host[colon - a] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) {
        snprintf(err, errlen, "'%s': the port must be a number from 0 to "
                 "65535", a);
        return -EINVAL;
    }
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *sl = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *sl = sizeof *v6;
    } else {
        snprintf(err, errlen, "'%s' is not a numeric IPv4 or IPv6 address",
                 host);
        return -EINVAL;
    }
    return 0;
}

static int listen_on(const char *addr, int *port, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    int rc = parse_addr(addr, &ss, &sl, err, errlen);
    if (rc)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return rc;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 1024) != 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", addr, strerror(errno));
        close(fd);
        return rc;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    *port = ntohs(got.ss_family == AF_INET
                      ? ((struct sockaddr_in *)&got)->sin_port
                      : ((struct sockaddr_in6 *)&got)->sin6_port);
    return fd;
}

/* ---- the server ---- */

void seda_http_opts_init(seda_http_opts *o)
{
    memset(o, 0, sizeof *o);
    o->addr = "127.0.0.1:8080";
    o->max_connections = 1024;
    o->max_header = 16384;
    o->max_body = 1048576;
    o->timeout = 30;
    o->client_timeout = 10;
    o->threads = 1;
}

int seda_http_server_new(const seda_http_opts *o, seda_http_server_t **out,
                         char *err, size_t errlen)
{
    if (!o || !o->addr || !o->on_request || o->max_connections < 1 ||
        o->threads < 1) {
        snprintf(err, errlen, "bad options");
        return -EINVAL;
    }
    seda_http_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    s->o = *o;
    s->addr = strdup(o->addr);
    s->o.addr = s->addr;
    s->refs = 1;
    s->qfd = -1;
    for (int i = 0; i < WIN_SLOTS; i++)
        s->win[i].sec = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    int fd = s->addr ? listen_on(o->addr, &s->port, err, errlen) : -ENOMEM;
    if (fd < 0) {
        pthread_mutex_lock(&s->mu);
        server_release_locked(s);
        return fd;
    }
    s->lfd = fd;
    /* The pool holds the request line and headers, and the buffers. */
    size_t mem = o->max_header + o->max_header / 2 + 4096;
    unsigned ct = (unsigned)ceil(o->client_timeout > 0 ? o->client_timeout
                                                       : 1);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_access, s,
        MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, ct,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, mem,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(o->threads > 1 ? o->threads
                                                               : 0),
        MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "%s: the HTTP server could not start", o->addr);
        close(fd);
        pthread_mutex_lock(&s->mu);
        server_release_locked(s);
        return -EIO;
    }
    if (pthread_create(&s->reaper, NULL, reaper_main, s) != 0) {
        MHD_stop_daemon(s->daemon);     /* closes fd: it was never quiesced */
        snprintf(err, errlen, "cannot start a thread");
        pthread_mutex_lock(&s->mu);
        server_release_locked(s);
        return -EAGAIN;
    }
    s->reaper_on = true;
    *out = s;
    return 0;
}

int seda_http_server_port(const seda_http_server_t *s)
{
    return s->port;
}

void seda_http_server_quiesce(seda_http_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    bool first = !s->quiesced;
    s->quiesced = true;
    pthread_mutex_unlock(&s->mu);
    if (!first)
        return;
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET) {
        /* Refuse new connections now, as a close would, without giving
         * the number back: shutdown leaves the descriptor allocated. */
        shutdown(fd, SHUT_RDWR);
        s->qfd = fd;                    /* closed in free, after the stop */
    }
    s->lfd = -1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { 0, (long)ms * 1000000 };
    nanosleep(&ts, NULL);
}

void seda_http_server_free(seda_http_server_t *s, double grace)
{
    if (!s)
        return;
    seda_http_server_quiesce(s);
    int64_t end = now_ns() + secs_ns(grace);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool busy = s->active > 0 && s->st.open_connections > 0;
        pthread_mutex_unlock(&s->mu);
        if (!busy || now_ns() >= end)
            break;
        sleep_ms(5);
    }
    /* What is still with the application: 503, then a moment to send. */
    pthread_mutex_lock(&s->mu);
    bool any = s->waiting != NULL;
    while (s->waiting) {
        struct MHD_Response *resp = simple_response(503, "closed");
        if (!resp)
            break;
        answer_locked(s, s->waiting, resp, 503);
    }
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (any)
        for (int i = 0; i < 40; i++) {
            pthread_mutex_lock(&s->mu);
            bool busy = s->active > 0 && s->st.open_connections > 0;
            pthread_mutex_unlock(&s->mu);
            if (!busy)
                break;
            sleep_ms(5);
        }
    if (s->reaper_on)
        pthread_join(s->reaper, NULL);
    MHD_stop_daemon(s->daemon);
    if (s->qfd >= 0)
        close(s->qfd);                  /* no MHD thread is left to use it */
    s->qfd = -1;
    pthread_mutex_lock(&s->mu);
    server_release_locked(s);
}

void seda_http_server_stats(seda_http_server_t *s, seda_http_stats *out)
{
    uint64_t n[NBUCKETS] = { 0 };
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    int64_t sec = now_ns() / 1000000000;
    double max = 0;
    for (int i = 0; i < WIN_SLOTS; i++) {
        struct hist_slot *h = &s->win[i];
        if (h->sec < 0 || sec - h->sec >= WIN_SLOTS)
            continue;
        for (int b = 0; b < NBUCKETS; b++)
            n[b] += h->n[b];
        if (h->max_us > max)
            max = h->max_us;
    }
    pthread_mutex_unlock(&s->mu);
    uint64_t total = 0;
    for (int b = 0; b < NBUCKETS; b++)
        total += n[b];
    out->latency_count = total;
    out->latency_max = max;
    out->latency_p50 = out->latency_p99 = 0;
    if (!total)
        return;
    uint64_t want50 = (total + 1) / 2, want99 = total - total / 100, acc = 0;
    for (int b = 0; b < NBUCKETS; b++) {
        acc += n[b];
        if (!out->latency_p50 && acc >= want50)
            out->latency_p50 = fmin(bucket_top(b), max);
        if (acc >= want99) {
            out->latency_p99 = fmin(bucket_top(b), max);
            break;
        }
    }
}

/* ---- request accessors ---- */

const char *seda_http_req_method(const seda_http_req_t *r)
{
    return r->method;
}

const char *seda_http_req_path(const seda_http_req_t *r)
{
    return r->path;
}

int seda_http_req_header_count(const seda_http_req_t *r)
{
    return r->nh;
}

void seda_http_req_header_at(const seda_http_req_t *r, int i,
                             const char **name, const char **value)
{
    *name = r->hdr[2 * i];
    *value = r->hdr[2 * i + 1];
}

int seda_http_req_query_count(const seda_http_req_t *r)
{
    return r->nq;
}

void seda_http_req_query_at(const seda_http_req_t *r, int i,
                            const char **key, const char **value)
{
    *key = r->q[2 * i];
    *value = r->q[2 * i + 1];
}

const void *seda_http_req_body(const seda_http_req_t *r, size_t *len)
{
    *len = r->len;
    return r->body ? (const void *)r->body : (const void *)"";
}

double seda_http_req_arrived(const seda_http_req_t *r)
{
    return r->arrived;
}
