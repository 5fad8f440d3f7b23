/* SPDX-License-Identifier: MIT */
/*
 * server.c -- the HTTP/1.1 server of seda_http.h: connections, their
 * loop, deadlines, counters.
 *
 * DESIGN
 *   The server's descriptors (the listening socket, the connections, a
 *   timerfd for deadlines) are watched by
 *   a loop (seda_http_loop): the bus's workers for bus:listen (SPEC.md
 *   section 16: no thread of the server's own), else one thread of its
 *   own (ownloop.c).  Their callbacks accept, read and parse (request.c:
 *   strict framing, then nodejs http-parser), and hand each whole request
 *   to on_request on the thread that read it.  The answer comes back through
 *   seda_http_respond on any thread, which writes it at once when the
 *   socket takes it (no hop back to the loop); what the socket does not
 *   take is left to the loop (EPOLLOUT).  A connection whose request is
 *   with the application is not parsed further, so pipelined requests wait
 *   their turn and answers leave in order.
 *
 *   Deadlines (the loop, every tick): 504 for requests past timeout; a
 *   connection whose client has had client_timeout to send a whole request
 *   or read an answer is cut -- the clock runs from the connection's start
 *   or its previous answer, so a slow drip of bytes does not keep it
 *   alive.  A connection closed by the server after an error answer
 *   lingers (write side shut, what the client still sends read and
 *   dropped) so the client reads the answer instead of a reset.
 *
 *   Locking: one mutex per server (mu) guards every connection's state and
 *   buffers, every request's state, the lists, the counters and the
 *   histogram; a socket is read, written and closed only under it.
 *   Callbacks take mu and drop it around on_request only, and only in the
 *   callback of that request's connection (the loop never runs a watch's
 *   callback twice at once, so the connection cannot be given back
 *   meanwhile): pipelined input whose turn has come is served by the
 *   connection's own callback, asked for by watching EPOLLOUT too (a
 *   socket with room is ready at once).  The loop's
 *   mod and del are called under mu (the interest set of a connection is
 *   part of its state); the loop never calls back under its own locks.
 *
 *   Lifetimes: a connection is closed (unlisted, its descriptor closed,
 *   state C_CLOSED) under mu by whoever finds it done; its memory goes
 *   when the loop gives its watch back (conn_release: at once, or after a
 *   callback of it still running elsewhere returns, which finds it
 *   closed).  A request the application holds is cut loose from its
 *   connection first (r->c = NULL).  A request is freed by
 *   seda_http_respond.  The server struct is held by itself (until
 *   seda_http_server_free, which waits for every watch to be given back)
 *   and by every request the application holds, so a late respond finds
 *   its mutex.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_int.h"

/* ---- clock ---- */

int64_t seda__http_now_ns(void)
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

/*
 * Locking: mu guards everything below it but the immutable settings (o,
 * addr, port, L, own, tfd) and watches (atomic).
 */
struct seda_http_server_s {
    pthread_mutex_t mu;
    seda_http_opts o;
    char *addr;                 /* o.addr's copy */
    int port;
    seda_http_loop L;           /* the loop's operations */
    struct ownloop *own;        /* the loop of our own, or NULL */
    atomic_int watches;         /* watches not yet given back (relaxed;
                                   free waits for 0, acquire) */
    int tfd;                    /* timerfd: deadlines */
    void *lw, *tw;              /* the listener's and tfd's watches */
    int tick_ms;                /* tfd's period now (0: disarmed) */
    int lfd;                    /* listening socket, or -1 once closed */
    bool accepting;             /* lfd is watched for EPOLLIN */
    int refs;                   /* self + requests the application holds */
    bool stop;                  /* closing: callbacks return at once */
    int64_t next_conns;         /* the next walk of the connections */
    struct seda_http_req_s *waiting;    /* with the application */
    struct hconn *conns;
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
    pthread_mutex_destroy(&s->mu);
    if (s->tfd >= 0)
        close(s->tfd);
    seda__http_ownloop_free(s->own);
    free(s->addr);
    free(s);
}

static void unwatch_locked(seda_http_server_t *s);

/* Set c's epoll interest to ev (mu held). */
static void interest(seda_http_server_t *s, struct hconn *c, uint32_t ev)
{
    if (c->fd < 0 || c->events == ev)
        return;
    s->L.mod(c->w, ev);
    c->events = ev;
}

/* c has input to parse whose turn has come: its own callback parses it,
 * called at once as its socket has room (mu held). */
static void make_ready(seda_http_server_t *s, struct hconn *c)
{
    interest(s, c, EPOLLIN | EPOLLOUT);
}

/* ---- answers ---- */

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
    int64_t now = seda__http_now_ns();
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

static void waiting_remove(seda_http_server_t *s, struct seda_http_req_s *r)
{
    if (r->wprev)
        r->wprev->wnext = r->wnext;
    else if (s->waiting == r)
        s->waiting = r->wnext;
    if (r->wnext)
        r->wnext->wprev = r->wprev;
    r->wprev = r->wnext = NULL;
    s->st.waiting--;
}

/* The connection's answer is written: reading again, lingering, or (its
 * input pipelined) ready to parse (mu held). */
static void answer_done(seda_http_server_t *s, struct hconn *c)
{
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_off = 0;
    c->clock_ns = seda__http_now_ns();
    if (c->close_after) {
        shutdown(c->fd, SHUT_WR);
        c->state = C_LINGER;
        interest(s, c, EPOLLIN);
        return;
    }
    c->state = C_READ;
    if (seda__http_conn_pending(c))
        make_ready(s, c);
    else
        interest(s, c, EPOLLIN);
}

/* Write what c has to send (mu held; any thread).  Never blocks. */
static void flush(seda_http_server_t *s, struct hconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->state = C_WRITE;
            interest(s, c, EPOLLOUT);
            return;
        }
        /* The client is gone: the loop closes it (it sees the error). */
        c->state = C_DEAD;
        shutdown(c->fd, SHUT_RDWR);
        interest(s, c, EPOLLIN);
        return;
    }
    answer_done(s, c);
}

/* Queue an answer of status on c and write it (mu held).  Takes out. */
static void send_answer(seda_http_server_t *s, struct hconn *c, char *out,
                        size_t len, int status)
{
    count_answer(s, status);
    c->clock_ns = seda__http_now_ns();  /* the client's time to read it */
    c->out = out;
    c->out_len = len;
    c->out_off = 0;
    c->state = C_WRITE;
    flush(s, c);
}

/* An answer of the server's own (400, 413, 431, 501, 504, 503 closed). */
static char *simple_answer(int status, const char *reason,
                           const struct seda_http_req_s *r, bool close,
                           size_t *len)
{
    char body[200];
    int n = snprintf(body, sizeof body, "%d %s\n", status, reason);
    const char *hv[] = { "Content-Type", "text/plain; charset=utf-8",
                         "Seda-Reason", reason, "Retry-After", "1" };
    return seda__http_format(status, hv, status == 503 ? 3 : 2, body,
                             (size_t)n, r, close, len);
}

/* Refuse what c sent with status and close after (mu held). */
void seda__http_refuse(seda_http_server_t *s, struct hconn *c, int status,
                       const char *reason)
{
    size_t len;
    char *out = simple_answer(status, reason, NULL, true, &len);
    if (status == 413)
        s->st.too_large++;
    if (!out) {
        c->state = C_DEAD;
        shutdown(c->fd, SHUT_RDWR);
        return;
    }
    c->close_after = true;
    send_answer(s, c, out, len, status);
}

/* Give r its answer (mu held).  Takes out. */
static void answer_locked(seda_http_server_t *s, struct seda_http_req_s *r,
                          char *out, size_t len, int status)
{
    r->state = R_ANSWERED;
    waiting_remove(s, r);
    record_latency(s, r->arrived_ns);
    if (status == 504)
        s->st.timeouts++;
    struct hconn *c = r->c;
    if (!c) {
        free(out);
        return;
    }
    c->req = NULL;
    r->c = NULL;
    if (c->state != C_APP) {    /* died meanwhile */
        free(out);
        return;
    }
    send_answer(s, c, out, len, status);
}

int seda_http_respond(seda_http_req_t *r, int status,
                      const char *const *headers, int nheaders,
                      const void *body, size_t len)
{
    seda_http_server_t *s = r->srv;
    int rc = 0;
    if (status < 100 || status > 999)
        status = 500;
    size_t olen = 0;
    char *out = seda__http_format(status, headers, nheaders, body, len,
                                  r, r->close, &olen);
    if (!out) {
        rc = -ENOMEM;
        status = 500;
        out = simple_answer(500, "out_of_memory", r, true, &olen);
    }
    pthread_mutex_lock(&s->mu);
    if (r->state == R_WAITING && out) {
        answer_locked(s, r, out, olen, status);
        out = NULL;
    } else if (rc == 0) {
        rc = 1;
    }
    free(out);
    seda__http_req_free(r);
    server_release_locked(s);           /* the request's hold; unlocks */
    return rc;
}

/* ---- the deadlines' clock ---- */

#define TICK_MS 10              /* with requests waiting: 504s on time */
#define IDLE_TICK_MS 100        /* with connections only: slow clients */

/* The timerfd's period for what is open now (mu held): a syscall only
 * when it changes. */
static void tick_arm(seda_http_server_t *s)
{
    int ms = s->stop ? 0 : s->waiting ? TICK_MS : s->conns ? IDLE_TICK_MS : 0;
    if (ms == s->tick_ms)
        return;
    struct itimerspec its = { 0 };
    its.it_interval.tv_nsec = its.it_value.tv_nsec = (long)ms * 1000000;
    timerfd_settime(s->tfd, 0, &its, NULL);
    s->tick_ms = ms;
}

/* ---- handing a request over ---- */

/* r, just parsed on c, goes to the application (mu held; dropped around
 * on_request). */
void seda__http_hand_over(seda_http_server_t *s, struct hconn *c,
                          struct seda_http_req_s *r)
{
    r->srv = s;
    r->c = c;
    r->state = R_WAITING;
    r->arrived_ns = seda__http_now_ns();
    r->arrived = (double)r->arrived_ns / 1e9;
    r->deadline_ns = r->arrived_ns + secs_ns(s->o.timeout);
    c->req = r;
    c->state = C_APP;
    c->close_after = r->close;
    s->refs++;                          /* held by that request */
    r->wnext = s->waiting;
    if (s->waiting)
        s->waiting->wprev = r;
    s->waiting = r;
    s->st.waiting++;
    s->st.requests++;
    tick_arm(s);
    pthread_mutex_unlock(&s->mu);
    s->o.on_request(r, s->o.ud);
    pthread_mutex_lock(&s->mu);
}

/* ---- connections ---- */

static void conn_release(void *ud)
{
    struct hconn *c = ud;
    seda_http_server_t *s = c->srv;
    seda__http_conn_free(c);
    atomic_fetch_sub_explicit(&s->watches, 1, memory_order_release);
}

static void server_watch_release(void *ud)
{
    seda_http_server_t *s = ud;
    atomic_fetch_sub_explicit(&s->watches, 1, memory_order_release);
}

/* Close c (mu held): its memory goes when the loop gives it back. */
static void conn_close(seda_http_server_t *s, struct hconn *c)
{
    if (c->req) {                       /* with the application: cut loose */
        c->req->c = NULL;
        c->req = NULL;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.open_connections--;
    int fd = c->fd;
    c->fd = -1;
    c->state = C_CLOSED;
    c->prev = c->next = NULL;
    s->L.del(c->w, conn_release);       /* c may be gone after this */
    close(fd);
    if (!s->accepting && s->lfd >= 0 &&
        s->st.open_connections < s->o.max_connections) {
        s->L.mod(s->lw, EPOLLIN);
        s->accepting = true;
    }
}

static void on_conn(void *ud, uint32_t ev);

static void accept_some(seda_http_server_t *s)
{
    for (int i = 0; i < 64 && s->lfd >= 0; i++) {
        if (s->st.open_connections >= s->o.max_connections) {
            /* At the limit: the rest wait in the backlog. */
            s->L.mod(s->lw, 0);
            s->accepting = false;
            break;
        }
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;              /* EAGAIN, or a client already gone */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct hconn *c = seda__http_conn_new(s, fd);
        if (!c) {
            close(fd);
            continue;
        }
        c->clock_ns = seda__http_now_ns();
        c->events = EPOLLIN;
        if (s->L.add(s->L.ctx, fd, EPOLLIN, on_conn, c, &c->w) != 0) {
            close(fd);
            seda__http_conn_free(c);
            continue;
        }
        atomic_fetch_add_explicit(&s->watches, 1, memory_order_relaxed);
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->st.connections++;
        s->st.open_connections++;
    }
    /* Every way out: a new connection's client_timeout needs the clock
     * running (it stops when no connection is open), even when the
     * client never sends a whole request. */
    tick_arm(s);
}

/* Read once from c into its buffer: >0 bytes read, 0 would block, -1 the
 * client closed or failed (mu held). */
static int read_some(struct hconn *c)
{
    if (seda__http_conn_reserve(c, 16384) != 0)
        return -1;
    for (;;) {
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            return 1;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
}

/* Parse what c holds, reading more while it needs it (mu held). */
static void conn_serve(seda_http_server_t *s, struct hconn *c)
{
    for (int rounds = 0; rounds < 64; rounds++) {
        if (c->state != C_READ)
            return;
        int rc = seda__http_parse(s, c);
        if (rc > 0)
            continue;           /* a request went; maybe another follows */
        if (rc < 0 || c->state != C_READ)
            return;             /* refused (answer queued), or closed */
        int got = read_some(c);
        if (got == 0)
            return;
        if (got < 0) {
            conn_close(s, c);
            return;
        }
    }
    /* A long pipeline: the rest on the next turn, after other clients. */
    if (c->state == C_READ)
        make_ready(s, c);
}

/* c is ready to be read (or was asked to parse what it holds). */
static void serve_ready(seda_http_server_t *s, struct hconn *c)
{
    if (c->events & EPOLLOUT)
        interest(s, c, EPOLLIN);        /* asked once: asked again below */
    conn_serve(s, c);
}

static void on_event(seda_http_server_t *s, struct hconn *c, uint32_t ev)
{
    switch (c->state) {
    case C_READ:
        serve_ready(s, c);
        return;
    case C_WRITE:
        if (ev & (EPOLLERR | EPOLLHUP)) {
            conn_close(s, c);
            return;
        }
        flush(s, c);
        if (c->state == C_READ)
            serve_ready(s, c);
        return;
    case C_APP:
        /* Pipelined input (or the client left): not read until the
         * answer is out.  Only a hang-up is acted on. */
        if (ev & (EPOLLERR | EPOLLHUP))
            conn_close(s, c);
        else
            interest(s, c, 0);
        return;
    case C_LINGER: {
        char sink[4096];
        ssize_t n;
        for (int i = 0; i < 16; i++) {
            n = recv(c->fd, sink, sizeof sink, 0);
            if (n <= 0)
                break;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                       errno != EINTR))
            conn_close(s, c);
        return;
    }
    default:
        conn_close(s, c);
    }
}

/* ---- deadlines ---- */

static void reap(seda_http_server_t *s, int64_t now, bool conns)
{
    for (struct seda_http_req_s *r = s->waiting, *next; r; r = next) {
        next = r->wnext;
        if (now < r->deadline_ns)
            continue;
        size_t len;
        char *out = simple_answer(504, "timeout", r, r->close, &len);
        if (out)
            answer_locked(s, r, out, len, 504);
    }
    if (!conns)
        return;
    int64_t limit = secs_ns(s->o.client_timeout);
    for (struct hconn *c = s->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == C_APP || now - c->clock_ns < limit)
            continue;
        /* Idle between requests counts too: a kept-open connection
         * holds a slot of max_connections. */
        if (c->state != C_LINGER && c->state != C_DEAD)
            s->st.slow_clients++;
        conn_close(s, c);
    }
}

/* ---- the callbacks ---- */

static void on_conn(void *ud, uint32_t ev)
{
    struct hconn *c = ud;
    seda_http_server_t *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (c->state != C_CLOSED && !s->stop)
        on_event(s, c, ev);
    pthread_mutex_unlock(&s->mu);
}

static void on_listen(void *ud, uint32_t ev)
{
    (void)ev;
    seda_http_server_t *s = ud;
    pthread_mutex_lock(&s->mu);
    if (!s->stop)
        accept_some(s);
    pthread_mutex_unlock(&s->mu);
}

static void on_tick(void *ud, uint32_t ev)
{
    (void)ev;
    seda_http_server_t *s = ud;
    uint64_t v;
    ssize_t n = read(s->tfd, &v, sizeof v);
    (void)n;
    pthread_mutex_lock(&s->mu);
    if (!s->stop) {
        int64_t now = seda__http_now_ns();
        bool conns = now >= s->next_conns;
        if (conns)
            s->next_conns = now + (int64_t)IDLE_TICK_MS * 1000000;
        reap(s, now, conns);
        tick_arm(s);
    }
    pthread_mutex_unlock(&s->mu);
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
}

int seda_http_server_new(const seda_http_opts *o, seda_http_server_t **out,
                         char *err, size_t errlen)
{
    if (!o || !o->addr || !o->on_request || o->max_connections < 1) {
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
    s->lfd = s->tfd = -1;
    atomic_init(&s->watches, 0);
    for (int i = 0; i < WIN_SLOTS; i++)
        s->win[i].sec = -1;
    pthread_mutex_init(&s->mu, NULL);
    int rc = s->addr ? 0 : -ENOMEM;
    if (rc == 0) {
        s->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (s->tfd < 0) {
            rc = -errno;
            snprintf(err, errlen, "timerfd: %s", strerror(errno));
        }
    }
    if (rc == 0) {
        if (o->loop) {
            s->L = *o->loop;
        } else if ((rc = seda__http_ownloop_new(&s->own, &s->L)) != 0) {
            snprintf(err, errlen, "epoll: %s", strerror(-rc));
        }
    }
    if (rc == 0) {
        int fd = seda__http_listen_on(o->addr, &s->port, err, errlen);
        if (fd < 0)
            rc = fd;
        else
            s->lfd = fd;
    }
    /* The watches: the server's two, then connections. */
    /* What a callback reads is set before its watch exists: a worker may
     * run it as soon as the add returns (the add and the dispatch take
     * the loop's lock, so these writes are seen). */
    bool watched = rc == 0;
    if (rc == 0) {
        atomic_fetch_add_explicit(&s->watches, 1, memory_order_relaxed);
        if ((rc = s->L.add(s->L.ctx, s->tfd, EPOLLIN, on_tick, s,
                           &s->tw)) != 0)
            atomic_fetch_sub_explicit(&s->watches, 1, memory_order_relaxed);
    }
    if (rc == 0) {
        atomic_fetch_add_explicit(&s->watches, 1, memory_order_relaxed);
        s->accepting = true;
        if ((rc = s->L.add(s->L.ctx, s->lfd, EPOLLIN, on_listen, s,
                           &s->lw)) != 0) {
            atomic_fetch_sub_explicit(&s->watches, 1, memory_order_relaxed);
            s->accepting = false;
        }
    }
    if (watched && rc)
        snprintf(err, errlen, "cannot watch the sockets: %s",
                 strerror(rc < 0 ? -rc : rc));
    if (rc == 0 && s->own && seda__http_ownloop_start(s->own) != 0) {
        snprintf(err, errlen, "cannot start a thread");
        rc = -EAGAIN;
    }
    if (rc != 0) {
        pthread_mutex_lock(&s->mu);
        unwatch_locked(s);
        pthread_mutex_unlock(&s->mu);
        seda__http_ownloop_stop(s->own);
        if (s->lfd >= 0)
            close(s->lfd);
        pthread_mutex_lock(&s->mu);
        server_release_locked(s);
        return rc;
    }
    *out = s;
    return 0;
}

size_t seda__http_max_header(const seda_http_server_t *s)
{
    return s->o.max_header;
}

size_t seda__http_max_body(const seda_http_server_t *s)
{
    return s->o.max_body;
}

int seda_http_server_port(const seda_http_server_t *s)
{
    return s->port;
}

/* Stop accepting (mu held). */
static void quiesce_locked(seda_http_server_t *s)
{
    if (s->lw) {
        s->L.del(s->lw, server_watch_release);
        s->lw = NULL;
    }
    if (s->lfd >= 0) {
        close(s->lfd);
        s->lfd = -1;
        s->accepting = false;
    }
}

/* Every watch given back (mu held): the server's, the connections'. */
static void unwatch_locked(seda_http_server_t *s)
{
    s->stop = true;
    quiesce_locked(s);
    while (s->conns)
        conn_close(s, s->conns);
    if (s->tw) {
        s->L.del(s->tw, server_watch_release);
        s->tw = NULL;
    }
}

void seda_http_server_quiesce(seda_http_server_t *s)
{
    pthread_mutex_lock(&s->mu);
    quiesce_locked(s);
    pthread_mutex_unlock(&s->mu);
}

/* Requests begun and not yet answered and written (mu held). */
static bool busy_locked(seda_http_server_t *s)
{
    for (struct hconn *c = s->conns; c; c = c->next)
        if (c->state == C_APP || c->state == C_WRITE ||
            (c->state == C_READ && seda__http_conn_pending(c)))
            return true;
    return false;
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
    int64_t end = seda__http_now_ns() + secs_ns(grace);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool busy = busy_locked(s);
        pthread_mutex_unlock(&s->mu);
        if (!busy || seda__http_now_ns() >= end)
            break;
        sleep_ms(5);
    }
    /* What is still with the application: 503, then a moment to send. */
    pthread_mutex_lock(&s->mu);
    bool any = s->waiting != NULL;
    while (s->waiting) {
        struct seda_http_req_s *r = s->waiting;
        size_t len;
        char *out = simple_answer(503, "closed", r, true, &len);
        if (!out)
            break;
        answer_locked(s, r, out, len, 503);
    }
    pthread_mutex_unlock(&s->mu);
    if (any)
        for (int i = 0; i < 40; i++) {
            pthread_mutex_lock(&s->mu);
            bool busy = busy_locked(s);
            pthread_mutex_unlock(&s->mu);
            if (!busy)
                break;
            sleep_ms(5);
        }
    pthread_mutex_lock(&s->mu);
    while (s->waiting) {                /* out of memory above */
        struct seda_http_req_s *r = s->waiting;
        r->state = R_ANSWERED;          /* its respond only lets go */
        waiting_remove(s, r);
    }
    unwatch_locked(s);
    pthread_mutex_unlock(&s->mu);
    /* A callback still running elsewhere gives its watch back when it
     * returns (it finds the server stopped). */
    while (atomic_load_explicit(&s->watches, memory_order_acquire) > 0)
        sleep_ms(1);
    seda__http_ownloop_stop(s->own);
    pthread_mutex_lock(&s->mu);
    server_release_locked(s);
}

void seda_http_server_stats(seda_http_server_t *s, seda_http_stats *out)
{
    uint64_t n[NBUCKETS] = { 0 };
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    int64_t sec = seda__http_now_ns() / 1000000000;
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
