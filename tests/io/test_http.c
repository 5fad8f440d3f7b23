/* SPDX-License-Identifier: MIT */
/*
 * test_http.c -- seda_io_http_request against a tiny HTTP/1.1 server of
 * the test's own (a thread per connection on 127.0.0.1, a free port):
 * GET and POST with headers and body echoed, response headers lower-cased
 * and joined, a timeout, a refused port, a connection closed without an
 * answer, https to a plain server (tls), responses over max_size (by
 * Content-Length and chunked), keep-alive reuse (the server counts its
 * connections), 200 requests at once, cancel and loop free mid-request.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "seda_io.h"
#include "testutil.h"

/* ---- the server ---- */

#define MAX_CONNS 512

typedef struct server {
    int lfd;
    int port;
    pthread_t acceptor;
    pthread_mutex_t mu;
    int conns[MAX_CONNS];       /* descriptors; guarded by mu */
    pthread_t threads[MAX_CONNS]; /* guarded by mu */
    int nconn;                  /* accepted so far; guarded by mu */
    bool stopping;              /* guarded by mu */
} server_t;

typedef struct conn {
    server_t *sv;
    int fd;
} conn_t;

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool write_fmt(int fd, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return n > 0 && write_all(fd, buf, (size_t)n);
}

/* The value of header NAME (case-insensitive) in HEAD, copied to OUT. */
static bool header_of(const char *head, const char *name, char *out,
                      size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t len = e ? (size_t)(e - v) : strlen(v);
            if (len >= outlen)
                len = outlen - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return true;
        }
    }
    return false;
}

static void respond(int fd, const char *method, const char *path,
                    const char *head, const char *body, size_t blen)
{
    char val[256] = "";
    if (strcmp(path, "/close") == 0) {
        shutdown(fd, SHUT_RDWR);        /* no answer at all */
        return;
    }
    if (strcmp(path, "/hang") == 0) {
        /* Answer nothing; wait for the client to give up and close. */
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll(&p, 1, 20000);
        return;
    }
    if (strncmp(path, "/big?n=", 7) == 0 || strncmp(path, "/chunked?n=", 11) == 0) {
        bool chunked = path[1] == 'c';
        size_t n = (size_t)atol(strchr(path, '=') + 1);
        char *b = malloc(n ? n : 1);
        memset(b, 'x', n);
        if (chunked) {
            write_fmt(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            for (size_t off = 0; off < n; off += 4096) {
                size_t c = n - off < 4096 ? n - off : 4096;
                if (!write_fmt(fd, "%zx\r\n", c) || !write_all(fd, b + off, c) ||
                    !write_all(fd, "\r\n", 2))
                    break;
            }
            write_all(fd, "0\r\n\r\n", 5);
        } else {
            write_fmt(fd, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", n);
            write_all(fd, b, n);
        }
        free(b);
        return;
    }
    header_of(head, "X-Test", val, sizeof val);
    write_fmt(fd, "HTTP/1.1 %s\r\nContent-Length: %zu\r\nX-Method: %s\r\n"
              "X-Echo-Test: %s\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
              "X-Path: %s\r\n\r\n",
              strcmp(path, "/missing") == 0 ? "404 Not Found" : "200 OK",
              blen, method, val, path);
    write_all(fd, body, blen);
}

static void *conn_main(void *arg)
{
    conn_t *c = arg;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        char *end;
        buf[len] = '\0';
        while (!(end = strstr(buf, "\r\n\r\n"))) {
            if (len == cap)
                goto out;
            ssize_t n = recv(c->fd, buf + len, cap - len, 0);
            if (n <= 0)
                goto out;
            len += (size_t)n;
            buf[len] = '\0';
            if (buf[0] == 0x16) {
                /* A TLS ClientHello: answer in plain HTTP, as a server
                 * that speaks no TLS would. */
                write_fmt(c->fd, "HTTP/1.1 400 Bad Request\r\n\r\n");
                goto out;
            }
        }
        size_t hlen = (size_t)(end - buf) + 4;
        char cl[32] = "0";
        header_of(buf, "Content-Length", cl, sizeof cl);
        size_t blen = (size_t)atol(cl);
        while (len < hlen + blen) {
            if (len == cap)
                goto out;
            ssize_t n = recv(c->fd, buf + len, cap - len, 0);
            if (n <= 0)
                goto out;
            len += (size_t)n;
        }
        char method[16] = "", path[256] = "";
        sscanf(buf, "%15s %255s", method, path);
        char *head = strndup(buf, hlen);
        char *body = malloc(blen + 1);
        memcpy(body, buf + hlen, blen);
        memmove(buf, buf + hlen + blen, len - hlen - blen);
        len -= hlen + blen;
        respond(c->fd, method, path, head, body, blen);
        free(head);
        free(body);
    }
out:
    free(buf);
    free(c);
    return NULL;
}

static void *acceptor_main(void *arg)
{
    server_t *sv = arg;
    for (;;) {
        int fd = accept(sv->lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;        /* the listener was shut down */
        }
        pthread_mutex_lock(&sv->mu);
        if (sv->stopping || sv->nconn == MAX_CONNS) {
            pthread_mutex_unlock(&sv->mu);
            close(fd);
            continue;
        }
        conn_t *c = malloc(sizeof *c);
        c->sv = sv;
        c->fd = fd;
        sv->conns[sv->nconn] = fd;
        if (pthread_create(&sv->threads[sv->nconn], NULL, conn_main, c) != 0) {
            close(fd);
            free(c);
        } else {
            sv->nconn++;
        }
        pthread_mutex_unlock(&sv->mu);
    }
}

static void server_start(server_t *sv)
{
    memset(sv, 0, sizeof *sv);
    pthread_mutex_init(&sv->mu, NULL);
    sv->lfd = tu_listen_loopback(512, &sv->port);
    assert_int_equal(pthread_create(&sv->acceptor, NULL, acceptor_main, sv), 0);
}

static int server_conns(server_t *sv)
{
    pthread_mutex_lock(&sv->mu);
    int n = sv->nconn;
    pthread_mutex_unlock(&sv->mu);
    return n;
}

static void server_stop(server_t *sv)
{
    pthread_mutex_lock(&sv->mu);
    sv->stopping = true;
    pthread_mutex_unlock(&sv->mu);
    shutdown(sv->lfd, SHUT_RDWR);
    pthread_join(sv->acceptor, NULL);
    close(sv->lfd);
    for (int i = 0; i < sv->nconn; i++)
        shutdown(sv->conns[i], SHUT_RDWR);
    for (int i = 0; i < sv->nconn; i++) {
        pthread_join(sv->threads[i], NULL);
        close(sv->conns[i]);
    }
    pthread_mutex_destroy(&sv->mu);
}

/* ---- the client side ---- */

typedef struct waiter {
    tu_counter done;
} waiter_t;

static void on_done(seda_io_op_t *op, void *ud)
{
    (void)op;
    waiter_t *w = ud;
    tu_counter_add(&w->done, 1);
}

typedef struct fixture {
    server_t sv;
    seda_io_loop_t *loop;
    waiter_t w;
    char url[128];
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    server_start(&f->sv);
    if (seda_io_loop_new(&f->loop) != 0)
        return -1;
    tu_counter_init(&f->w.done);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    seda_io_loop_free(f->loop);
    server_stop(&f->sv);
    tu_counter_destroy(&f->w.done);
    free(f);
    return 0;
}

static const char *url(fixture_t *f, const char *path)
{
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d%s", f->sv.port, path);
    return f->url;
}

/* Run REQ to its end; the op (the caller frees it). */
static seda_io_op_t *run(fixture_t *f, struct seda_io_http_req *req)
{
    seda_io_op_t *op = NULL;
    long before = tu_counter_get(&f->w.done);
    assert_int_equal(seda_io_http_request(f->loop, req, on_done, &f->w, &op), 0);
    TU_WAIT(tu_counter_wait_ge(&f->w.done, before + 1, TU_DEADLINE),
            "the request");
    return op;
}

static const char *hdr(seda_io_op_t *op, const char *name)
{
    for (size_t i = 0; i < seda_io_http_nheaders(op); i++) {
        const char *n, *v;
        assert_int_equal(seda_io_http_header(op, i, &n, &v), 0);
        if (strcmp(n, name) == 0)
            return v;
    }
    return NULL;
}

static void test_http_get_with_headers(void **state)
{
    fixture_t *f = *state;
    const char *h[] = { "X-Test: hello there" };
    struct seda_io_http_req req = {
        .url = url(f, "/echo"), .headers = h, .nheaders = 1, .timeout = 5,
    };
    seda_io_op_t *op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
    assert_int_equal(seda_io_http_status(op), 200);
    assert_string_equal(hdr(op, "x-method"), "GET");
    assert_string_equal(hdr(op, "x-echo-test"), "hello there");
    assert_string_equal(hdr(op, "set-cookie"), "a=1, b=2");
    assert_string_equal(hdr(op, "content-length"), "0");
    size_t len;
    seda_io_http_body(op, &len);
    assert_int_equal(len, 0);
    seda_io_op_free(op);

    req.url = url(f, "/missing");
    op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
    assert_int_equal(seda_io_http_status(op), 404);
    seda_io_op_free(op);
}

static void test_http_post_with_body(void **state)
{
    fixture_t *f = *state;
    const char *h[] = { "Content-Type: text/plain", "X-Test: posted" };
    char body[5000];
    memset(body, 'b', sizeof body);
    body[0] = '\0';             /* binary-safe: a NUL inside */
    struct seda_io_http_req req = {
        .method = "POST", .url = url(f, "/echo"), .headers = h,
        .nheaders = 2, .body = body, .body_len = sizeof body, .timeout = 5,
    };
    seda_io_op_t *op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
    assert_int_equal(seda_io_http_status(op), 200);
    assert_string_equal(hdr(op, "x-method"), "POST");
    assert_string_equal(hdr(op, "x-echo-test"), "posted");
    size_t len;
    const char *b = seda_io_http_body(op, &len);
    assert_int_equal(len, sizeof body);
    assert_memory_equal(b, body, sizeof body);
    seda_io_op_free(op);

    req.method = "PUT";
    req.body = "x";
    req.body_len = 1;
    op = run(f, &req);
    assert_string_equal(hdr(op, "x-method"), "PUT");
    b = seda_io_http_body(op, &len);
    assert_int_equal(len, 1);
    seda_io_op_free(op);
}

static void test_http_timeout(void **state)
{
    fixture_t *f = *state;
    struct seda_io_http_req req = { .url = url(f, "/hang"), .timeout = 0.3 };
    double t0 = seda_now();
    seda_io_op_t *op = run(f, &req);
    double took = seda_now() - t0;
    assert_int_equal(seda_io_op_status(op), SEDA_IO_TIMEOUT);
    assert_true(took >= 0.29);
    assert_true(took < 5.0);
    assert_true(strlen(seda_io_op_message(op)) > 0);
    seda_io_op_free(op);
}

static void test_http_refused(void **state)
{
    fixture_t *f = *state;
    int port;
    int fd = tu_listen_loopback(512, &port);
    close(fd);                  /* nobody listens there now */
    char u[64];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/", port);
    struct seda_io_http_req req = { .url = u, .timeout = 5 };
    seda_io_op_t *op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_REFUSED);
    seda_io_op_free(op);
}

static void test_http_closed_and_tls(void **state)
{
    fixture_t *f = *state;
    struct seda_io_http_req req = { .url = url(f, "/close"), .timeout = 5 };
    seda_io_op_t *op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_CLOSED);
    assert_true(strlen(seda_io_op_message(op)) > 0);
    seda_io_op_free(op);
    /* https to a server that speaks plain HTTP: the handshake fails. */
    char u[64];
    snprintf(u, sizeof u, "https://127.0.0.1:%d/", f->sv.port);
    req.url = u;
    op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_TLS);
    seda_io_op_free(op);
}

static void test_http_too_large(void **state)
{
    fixture_t *f = *state;
    /* By Content-Length, before the body. */
    struct seda_io_http_req req = {
        .url = url(f, "/big?n=5000"), .timeout = 5, .max_size = 1024,
    };
    seda_io_op_t *op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_TOO_LARGE);
    seda_io_op_free(op);
    /* While receiving (chunked: no length announced). */
    req.url = url(f, "/chunked?n=100000");
    op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_TOO_LARGE);
    size_t len;
    seda_io_http_body(op, &len);
    assert_true(len <= 1024);
    seda_io_op_free(op);
    /* At the limit is fine. */
    req.url = url(f, "/chunked?n=1024");
    op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
    seda_io_http_body(op, &len);
    assert_int_equal(len, 1024);
    seda_io_op_free(op);
    /* The default limit lets a large body through. */
    req.url = url(f, "/big?n=3000000");
    req.max_size = 0;
    op = run(f, &req);
    assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
    seda_io_http_body(op, &len);
    assert_int_equal(len, 3000000);
    seda_io_op_free(op);
}

static void test_http_keepalive_reuses_connection(void **state)
{
    fixture_t *f = *state;
    struct seda_io_http_req req = { .url = url(f, "/echo"), .timeout = 5 };
    for (int i = 0; i < 3; i++) {
        seda_io_op_t *op = run(f, &req);
        assert_int_equal(seda_io_op_status(op), SEDA_IO_OK);
        seda_io_op_free(op);
    }
    assert_int_equal(server_conns(&f->sv), 1);
}

static void test_http_many_concurrent(void **state)
{
    fixture_t *f = *state;
    enum { N = 200 };
    seda_io_op_t *ops[N];
    char body[N][16];
    for (int i = 0; i < N; i++) {
        int n = snprintf(body[i], sizeof body[i], "req %d", i);
        struct seda_io_http_req req = {
            .method = "POST", .url = url(f, "/echo"), .body = body[i],
            .body_len = (size_t)n, .timeout = 20,
        };
        assert_int_equal(seda_io_http_request(f->loop, &req, on_done, &f->w,
                                              &ops[i]), 0);
    }
    TU_WAIT(tu_counter_wait_ge(&f->w.done, N, 30), "200 requests");
    for (int i = 0; i < N; i++) {
        assert_int_equal(seda_io_op_status(ops[i]), SEDA_IO_OK);
        size_t len;
        const char *b = seda_io_http_body(ops[i], &len);
        assert_int_equal(len, strlen(body[i]));
        assert_memory_equal(b, body[i], len);
        seda_io_op_free(ops[i]);
    }
}

static void test_http_cancel_and_free_mid_request(void **state)
{
    fixture_t *f = *state;
    struct seda_io_http_req req = { .url = url(f, "/hang"), .timeout = 30 };
    seda_io_op_t *op, *op2;
    assert_int_equal(seda_io_http_request(f->loop, &req, on_done, &f->w, &op), 0);
    assert_int_equal(seda_io_http_request(f->loop, &req, on_done, &f->w, &op2), 0);
    /* Both connected before the cancel, so curl is mid-transfer. */
    double end = seda_now() + TU_DEADLINE;
    while (server_conns(&f->sv) < 2 && seda_now() < end)
        sched_yield();
    seda_io_cancel(op);
    TU_WAIT(tu_counter_wait_ge(&f->w.done, 1, TU_DEADLINE), "the cancel");
    assert_int_equal(seda_io_op_status(op), SEDA_IO_CANCELLED);
    seda_io_op_free(op);
    /* The other is cancelled by the loop's end (teardown's free would do
     * it too; here it is checked). */
    seda_io_loop_free(f->loop);
    assert_int_equal(tu_counter_get(&f->w.done), 2);
    assert_int_equal(seda_io_op_status(op2), SEDA_IO_CANCELLED);
    seda_io_op_free(op2);
    assert_int_equal(seda_io_loop_new(&f->loop), 0);
}

static void test_http_bad_arguments(void **state)
{
    fixture_t *f = *state;
    seda_io_op_t *op = NULL;
    struct seda_io_http_req req = { .url = NULL };
    assert_int_equal(seda_io_http_request(f->loop, &req, on_done, &f->w, &op),
                     -EINVAL);
    const char *h[] = { "no colon here" };
    req.url = url(f, "/");
    req.headers = h;
    req.nheaders = 1;
    assert_int_equal(seda_io_http_request(f->loop, &req, on_done, &f->w, &op),
                     -EINVAL);
    assert_null(op);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_http_get_with_headers),
        T(test_http_post_with_body),
        T(test_http_timeout),
        T(test_http_refused),
        T(test_http_closed_and_tls),
        T(test_http_too_large),
        T(test_http_keepalive_reuses_connection),
        T(test_http_many_concurrent),
        T(test_http_cancel_and_free_mid_request),
        T(test_http_bad_arguments),
    };
    return cmocka_run_group_tests_name("io_http", tests, NULL, NULL);
}
