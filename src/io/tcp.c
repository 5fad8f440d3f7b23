/* SPDX-License-Identifier: MIT */
/*
 * tcp.c -- TCP sockets for cosockets: connect, send and receive as ops of
 * the loop (the receive patterns over the read buffer are tcp_recv.c's).
 *
 * DESIGN
 *   A socket (struct seda_io_tcp_s) is owned by one thread (its owner),
 *   which submits its ops one at a time (`busy`, an atomic exchange,
 *   refuses a second with -EBUSY) and frees it; its descriptor, watch
 *   and read buffer are worked by the loop thread while an op is
 *   pending.  The owner reads them (fd, buffered bytes, addresses) only
 *   between ops: an op's completion is ordered before the owner's next
 *   step by whatever the callback signals it with.
 *
 *   The pending op (`op`) is what the socket's epoll events drive: a
 *   connect waits for writability then reads SO_ERROR (and tries the next
 *   address on a failure), a send writes until done or EAGAIN, a receive
 *   first looks in the buffer, then reads until its pattern is satisfied
 *   or EAGAIN.  Every op has a deadline timer.  Whatever ends an op (its
 *   event, its timer, a cancel, the socket's close) first stops the
 *   others (disarm, unwatch), clears `op` and `busy`, then completes it;
 *   the op never touches the socket after that, so a socket may be freed
 *   with results still held by its ops.
 *
 *   Freeing posts the socket's close task: on the loop thread the pending
 *   op (if any) completes CANCELLED, the descriptor is closed and the
 *   socket's memory goes to the loop's graveyard (the watch is the
 *   socket's first member), freed after the current batch of events.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io_int.h"
#include "tcp.h"

static const struct seda__io_kind tcp_kind;

/* ---- ending an op ---- */

/* Detach R from its socket and complete it (loop thread). */
void seda__io_tcp_end(struct tcp_op *r, int status, const char *msg)
{
    seda_io_tcp_t *s = r->s;
    seda__io_timer_disarm(r->op.loop, &r->timer);
    if (r->job) {
        r->job->ud = NULL;      /* its answer will be dropped */
        r->job = NULL;
    }
    if (s) {
        if (s->w.fd >= 0)
            seda__io_watch_set(s->loop, &s->w, 0);
        s->op = NULL;
        r->s = NULL;
        /* Pairs with the owner's exchange in claim(): the owner may
         * submit again once it knows this op completed. */
        atomic_store_explicit(&s->busy, false, memory_order_release);
    }
    if (msg)
        seda__io_complete(&r->op, status, "%s", msg);
    else
        seda__io_complete(&r->op, status, NULL);
}

int seda__io_tcp_errno_status(int e)
{
    switch (e) {
    case ECONNREFUSED: return SEDA_IO_REFUSED;
    case ETIMEDOUT: return SEDA_IO_TIMEOUT;
    case EPIPE:
    case ECONNRESET:
    case ECONNABORTED: return SEDA_IO_CLOSED;
    default: return SEDA_IO_OTHER;
    }
}

/* ---- send ---- */

static void send_progress(struct tcp_op *r)
{
    seda_io_tcp_t *s = r->s;
    while (r->sent < r->len) {
        ssize_t n = send(s->w.fd, r->data + r->sent, r->len - r->sent,
                         MSG_NOSIGNAL);
        if (n > 0) {
            r->sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            seda__io_watch_set(s->loop, &s->w, EPOLLOUT);
            return;
        }
        int e = n < 0 ? errno : EPIPE;
        int st = seda__io_tcp_errno_status(e);
        seda__io_tcp_end(r, st, st == SEDA_IO_CLOSED ? "closed" : strerror(e));
        return;
    }
    seda__io_tcp_end(r, SEDA_IO_OK, NULL);
}

/* ---- connect ---- */

static void close_fd(seda_io_tcp_t *s)
{
    if (s->w.fd < 0)
        return;
    seda__io_watch_set(s->loop, &s->w, 0);
    close(s->w.fd);
    s->w.fd = -1;
    s->w.events = 0;
}

static void connect_fail(struct tcp_op *r)
{
    int e = r->last_errno ? r->last_errno : ECONNREFUSED;
    seda__io_tcp_end(r, seda__io_tcp_errno_status(e),
                     e == ECONNREFUSED ? "connection refused" : strerror(e));
}

/* Try the addresses from ai_next on until one connects or is in progress. */
static void connect_next(struct tcp_op *r)
{
    seda_io_tcp_t *s = r->s;
    while (r->ai_next) {
        struct addrinfo *a = r->ai_next;
        r->ai_next = a->ai_next;
        close_fd(s);
        int fd = socket(a->ai_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            r->last_errno = errno;
            continue;
        }
        s->w.fd = fd;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            s->connected = true;
            seda__io_tcp_end(r, SEDA_IO_OK, NULL);
            return;
        }
        if (errno == EINPROGRESS) {
            int rc = seda__io_watch_set(s->loop, &s->w, EPOLLOUT);
            if (rc == 0)
                return;
            r->last_errno = -rc;
            continue;
        }
        r->last_errno = errno;
    }
    close_fd(s);
    connect_fail(r);
}

static void connect_progress(struct tcp_op *r)
{
    seda_io_tcp_t *s = r->s;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(s->w.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0) {
        s->connected = true;
        seda__io_tcp_end(r, SEDA_IO_OK, NULL);
        return;
    }
    r->last_errno = err;
    connect_next(r);
}

static void on_resolved(seda_io_loop_t *loop, struct seda__io_resolve_job *j)
{
    (void)loop;
    struct tcp_op *r = j->ud;
    if (!r) {
        seda__io_resolve_free(j);       /* the connect ended meanwhile */
        return;
    }
    r->job = NULL;
    if (j->gai != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s: %s", r->host, gai_strerror(j->gai));
        seda__io_resolve_free(j);
        seda__io_tcp_end(r, SEDA_IO_DNS, msg);
        return;
    }
    r->ai = r->ai_next = j->res;
    r->ai_owned = true;
    j->res = NULL;
    seda__io_resolve_free(j);
    connect_next(r);
}

/* ---- the op ---- */

static void on_event(seda_io_loop_t *loop, struct seda__io_watch *w,
                     uint32_t ev)
{
    (void)loop;
    (void)ev;
    seda_io_tcp_t *s = (seda_io_tcp_t *)w;
    struct tcp_op *r = s->op;
    if (!r) {
        seda__io_watch_set(s->loop, w, 0);  /* nobody waits: stop */
        return;
    }
    switch (r->what) {
    case CONNECT: connect_progress(r); break;
    case SEND: send_progress(r); break;
    case RECV: seda__io_tcp_recv_progress(r); break;
    }
}

static void on_deadline(seda_io_loop_t *loop, struct seda__io_timer *t)
{
    (void)loop;
    struct tcp_op *r = (struct tcp_op *)((char *)t -
                                         offsetof(struct tcp_op, timer));
    if (r->what == RECV && r->s)
        seda__io_tcp_take(r, true);
    if (r->what == CONNECT && r->s)
        close_fd(r->s);
    seda__io_tcp_end(r, SEDA_IO_TIMEOUT, "timeout");
}

static void tcp_start(seda_io_op_t *op)
{
    struct tcp_op *r = (struct tcp_op *)op;
    seda_io_tcp_t *s = r->s;
    s->op = r;
    if (r->deadline &&
        seda__io_timer_arm(op->loop, &r->timer, r->deadline) != 0) {
        seda__io_tcp_end(r, SEDA_IO_OTHER, "out of memory");
        return;
    }
    switch (r->what) {
    case CONNECT: {
        struct addrinfo hints = {
            .ai_socktype = SOCK_STREAM,
            .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
        };
        struct addrinfo *res = NULL;
        if (getaddrinfo(r->host, r->port, &hints, &res) == 0) {
            r->ai = r->ai_next = res;   /* numeric: no lookup, no wait */
            r->ai_owned = true;
            connect_next(r);
            return;
        }
        struct seda__io_resolve_job *j = calloc(1, sizeof *j);
        if (j && (j->host = strdup(r->host)) != NULL) {
            memcpy(j->port, r->port, sizeof j->port);
            j->done = on_resolved;
            j->ud = r;
            if (seda__io_resolve(op->loop, j) == 0) {
                r->job = j;     /* tcp_end detaches it */
                return;
            }
        }
        seda__io_resolve_free(j);
        seda__io_tcp_end(r, SEDA_IO_OTHER, "cannot start a name lookup");
        return;
    }
    case SEND:
        send_progress(r);
        return;
    case RECV:
        seda__io_tcp_recv_progress(r);
        return;
    }
}

static void tcp_cancel(seda_io_op_t *op)
{
    struct tcp_op *r = (struct tcp_op *)op;
    if (r->what == RECV && r->s)
        seda__io_tcp_take(r, true);
    if (r->what == CONNECT && r->s)
        close_fd(r->s);
    seda__io_tcp_end(r, SEDA_IO_CANCELLED, NULL);
}

static void tcp_destroy(seda_io_op_t *op)
{
    struct tcp_op *r = (struct tcp_op *)op;
    if (r->ai_owned && r->ai)
        freeaddrinfo(r->ai);
    free(r->host);
    free(r->data);
    free(r->out);
    free(r);
}

static const struct seda__io_kind tcp_kind = {
    .name = "tcp",
    .start = tcp_start,
    .cancel = tcp_cancel,
    .destroy = tcp_destroy,
};

/* ---- sockets ---- */

static void run_close(seda_io_loop_t *loop, struct seda__io_task *t)
{
    seda_io_tcp_t *s = (seda_io_tcp_t *)((char *)t -
                                         offsetof(seda_io_tcp_t, close_task));
    if (s->op)
        tcp_cancel(&s->op->op);
    close_fd(s);
    free(s->rbuf);
    s->rbuf = NULL;
    seda__io_watch_release(loop, &s->w);        /* frees s */
}

int seda_io_tcp_new(seda_io_loop_t *loop, seda_io_tcp_t **sp)
{
    seda_io_tcp_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->w.fd = -1;
    s->w.fn = on_event;
    s->loop = loop;
    atomic_init(&s->busy, false);
    s->close_task.run = run_close;
    *sp = s;
    return 0;
}

void seda_io_tcp_free(seda_io_tcp_t *s)
{
    if (s)
        seda__io_post(s->loop, &s->close_task);
}

/* Take S for a new op (owner's thread): 0 or -EBUSY. */
static int claim(seda_io_tcp_t *s)
{
    /* Pairs with the release store in tcp_end. */
    if (atomic_exchange_explicit(&s->busy, true, memory_order_acq_rel))
        return -EBUSY;
    return 0;
}

static struct tcp_op *op_new(seda_io_tcp_t *s, enum what what, double timeout)
{
    struct tcp_op *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->s = s;
    r->what = what;
    r->deadline = seda__io_deadline(timeout);
    seda__io_timer_init(&r->timer, on_deadline);
    return r;
}

static int submit(seda_io_tcp_t *s, struct tcp_op *r, seda_io_cb cb, void *ud,
                  seda_io_op_t **opp)
{
    int rc = seda__io_submit(s->loop, &r->op, &tcp_kind, cb, ud, opp);
    if (rc != 0) {
        tcp_destroy(&r->op);
        atomic_store_explicit(&s->busy, false, memory_order_release);
    }
    return rc;
}

int seda_io_tcp_connect(seda_io_tcp_t *s, const char *host, int port,
                        double timeout, seda_io_cb cb, void *ud,
                        seda_io_op_t **opp)
{
    if (!host || !*host || port <= 0 || port > 65535)
        return -EINVAL;
    int rc = claim(s);
    if (rc != 0)
        return rc;
    if (s->connected || s->w.fd >= 0) {
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -EINVAL;
    }
    struct tcp_op *r = op_new(s, CONNECT, timeout);
    if (!r || !(r->host = strdup(host))) {
        if (r)
            tcp_destroy(&r->op);
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -ENOMEM;
    }
    snprintf(r->port, sizeof r->port, "%d", port);
    return submit(s, r, cb, ud, opp);
}

int seda_io_tcp_send(seda_io_tcp_t *s, const void *data, size_t len,
                     double timeout, seda_io_cb cb, void *ud,
                     seda_io_op_t **opp)
{
    int rc = claim(s);
    if (rc != 0)
        return rc;
    if (!s->connected) {
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -EINVAL;
    }
    struct tcp_op *r = op_new(s, SEND, timeout);
    if (r && len > 0 && !(r->data = malloc(len))) {
        tcp_destroy(&r->op);
        r = NULL;
    }
    if (!r) {
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -ENOMEM;
    }
    if (len > 0)
        memcpy(r->data, data, len);
    r->len = len;
    return submit(s, r, cb, ud, opp);
}

int seda_io_tcp_receive(seda_io_tcp_t *s, enum seda_io_recv_mode mode,
                        size_t n, double timeout, seda_io_cb cb, void *ud,
                        seda_io_op_t **opp)
{
    if (mode != SEDA_IO_RECV_LINE && mode != SEDA_IO_RECV_ALL &&
        mode != SEDA_IO_RECV_BYTES)
        return -EINVAL;
    int rc = claim(s);
    if (rc != 0)
        return rc;
    if (!s->connected) {
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -EINVAL;
    }
    struct tcp_op *r = op_new(s, RECV, timeout);
    if (r && !(r->out = malloc(1))) {
        tcp_destroy(&r->op);
        r = NULL;
    }
    if (!r) {
        atomic_store_explicit(&s->busy, false, memory_order_release);
        return -ENOMEM;
    }
    r->out[0] = '\0';
    r->mode = mode;
    r->want = mode == SEDA_IO_RECV_BYTES ? n : 0;
    return submit(s, r, cb, ud, opp);
}

const char *seda_io_op_data(const seda_io_op_t *op, size_t *len)
{
    if (op->kind != &tcp_kind || !((const struct tcp_op *)op)->out) {
        *len = 0;
        return "";
    }
    const struct tcp_op *r = (const struct tcp_op *)op;
    *len = r->outlen;
    return r->out;
}

size_t seda_io_tcp_sent(const seda_io_op_t *op)
{
    if (op->kind != &tcp_kind)
        return 0;
    return ((const struct tcp_op *)op)->sent;
}

int seda_io_tcp_shutdown(seda_io_tcp_t *s, int how)
{
    if (s->w.fd < 0 || !s->connected)
        return -ENOTCONN;
    return shutdown(s->w.fd, how) == 0 ? 0 : -errno;
}

static int addr_text(const struct sockaddr_storage *ss, char *host,
                     size_t hostlen, int *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        if (!inet_ntop(AF_INET, &a->sin_addr, host, (socklen_t)hostlen))
            return -errno;
        *port = ntohs(a->sin_port);
        return 0;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        if (!inet_ntop(AF_INET6, &a->sin6_addr, host, (socklen_t)hostlen))
            return -errno;
        *port = ntohs(a->sin6_port);
        return 0;
    }
    return -EAFNOSUPPORT;
}

int seda_io_tcp_peername(seda_io_tcp_t *s, char *host, size_t hostlen,
                         int *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (s->w.fd < 0 || !s->connected)
        return -ENOTCONN;
    if (getpeername(s->w.fd, (struct sockaddr *)&ss, &len) != 0)
        return -errno;
    return addr_text(&ss, host, hostlen, port);
}

int seda_io_tcp_sockname(seda_io_tcp_t *s, char *host, size_t hostlen,
                         int *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (s->w.fd < 0)
        return -ENOTCONN;
    if (getsockname(s->w.fd, (struct sockaddr *)&ss, &len) != 0)
        return -errno;
    return addr_text(&ss, host, hostlen, port);
}

int seda_io_tcp_fd(const seda_io_tcp_t *s)
{
    return s->connected ? s->w.fd : -1;
}

size_t seda_io_tcp_buffered(const seda_io_tcp_t *s)
{
    return s->rlen - s->rpos;
}

int seda_io_tcp_alive(seda_io_tcp_t *s)
{
    if (s->w.fd < 0 || !s->connected || s->eof || s->rlen > s->rpos)
        return 0;
    char c;
    ssize_t n = recv(s->w.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
