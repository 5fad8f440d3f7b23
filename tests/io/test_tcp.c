/* SPDX-License-Identifier: MIT */
/*
 * test_tcp.c -- the TCP socket ops (seda_io_tcp_*) against peers of the
 * test's own (a thread per test on 127.0.0.1, a free port, blocking
 * I/O): connect, send, receive a line (CRLF and LF; every CR dropped as
 * LuaSocket does), n bytes and "*a"; partial data on close and on
 * timeout; a refused connect; a host name through the resolver thread;
 * one op at a time; a large send across partial writes; freeing a socket
 * with an op pending; addresses.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "seda_io.h"
#include "testutil.h"

/* ---- the peer ---- */

typedef struct peer {
    int lfd;
    int port;
    pthread_t thread;
    void (*script)(struct peer *p, int fd);
    tu_gate gate;               /* the script waits on it where it must */
    long got;                   /* bytes the script read; after join */
} peer_t;

static void *peer_main(void *arg)
{
    peer_t *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd >= 0) {
        p->script(p, fd);
        close(fd);
    }
    return NULL;
}

static void peer_start(peer_t *p, void (*script)(peer_t *, int))
{
    memset(p, 0, sizeof *p);
    tu_gate_init(&p->gate);
    p->script = script;
    p->lfd = tu_listen_loopback(16, &p->port);
    assert_int_equal(pthread_create(&p->thread, NULL, peer_main, p), 0);
}

static void peer_stop(peer_t *p)
{
    tu_gate_open(&p->gate);
    shutdown(p->lfd, SHUT_RDWR);        /* an accept still waiting ends */
    pthread_join(p->thread, NULL);
    close(p->lfd);
    tu_gate_destroy(&p->gate);
}

static void put(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* Read up to and with the next LF (blocking). */
static void get_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap && recv(fd, buf + n, 1, 0) == 1)
        if (buf[n++] == '\n')
            break;
    buf[n] = '\0';
}

/* ---- the client ---- */

typedef struct fixture {
    seda_io_loop_t *loop;
    tu_counter done;
    peer_t peer;
} fixture_t;

static void on_done(seda_io_op_t *op, void *ud)
{
    (void)op;
    tu_counter_add(ud, 1);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    if (seda_io_loop_new(&f->loop) != 0)
        return -1;
    tu_counter_init(&f->done);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    seda_io_loop_free(f->loop);
    tu_counter_destroy(&f->done);
    free(f);
    return 0;
}

/* Wait for OP's callback; its status. */
static int wait_op(fixture_t *f, seda_io_op_t *op, long *seen)
{
    (void)op;
    TU_WAIT(tu_counter_wait_ge(&f->done, ++*seen, TU_DEADLINE), "an op");
    return seda_io_op_status(op);
}

static seda_io_tcp_t *connect_ok(fixture_t *f, int port, long *seen)
{
    seda_io_tcp_t *s;
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_new(f->loop, &s), 0);
    assert_int_equal(seda_io_tcp_connect(s, "127.0.0.1", port, 5, on_done,
                                         &f->done, &op), 0);
    assert_int_equal(wait_op(f, op, seen), SEDA_IO_OK);
    seda_io_op_free(op);
    return s;
}

static void send_ok(fixture_t *f, seda_io_tcp_t *s, const char *data,
                    long *seen)
{
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_send(s, data, strlen(data), 5, on_done,
                                      &f->done, &op), 0);
    assert_int_equal(wait_op(f, op, seen), SEDA_IO_OK);
    assert_int_equal(seda_io_tcp_sent(op), strlen(data));
    seda_io_op_free(op);
}

/* Receive; check status and data. */
static void recv_is(fixture_t *f, seda_io_tcp_t *s, enum seda_io_recv_mode m,
                    size_t n, double timeout, int status, const char *want,
                    long *seen)
{
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_receive(s, m, n, timeout, on_done, &f->done,
                                         &op), 0);
    assert_int_equal(wait_op(f, op, seen), status);
    size_t len;
    const char *d = seda_io_op_data(op, &len);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(d, want, len);
    seda_io_op_free(op);
}

/* ---- tests ---- */

static void script_patterns(peer_t *p, int fd)
{
    char line[64];
    get_line(fd, line, sizeof line);
    if (strcmp(line, "PING\r\n") != 0)
        return;
    put(fd, "+PONG\r\nline2\nin\rner\r\n12345rest of it");
    tu_gate_wait(&p->gate, TU_DEADLINE);
    put(fd, " and more");
}

static void test_tcp_patterns(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_patterns);
    seda_io_tcp_t *s = connect_ok(f, f->peer.port, &seen);
    send_ok(f, s, "PING\r\n", &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "+PONG", &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "line2", &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "inner", &seen);
    recv_is(f, s, SEDA_IO_RECV_BYTES, 5, 5, SEDA_IO_OK, "12345", &seen);
    tu_gate_open(&f->peer.gate);        /* the peer sends more, closes */
    recv_is(f, s, SEDA_IO_RECV_ALL, 0, 5, SEDA_IO_OK, "rest of it and more",
            &seen);
    /* After "*a" the peer is gone: "*a" again is closed with "" (as
     * LuaSocket's recvall: OK only when it read something), a line too. */
    recv_is(f, s, SEDA_IO_RECV_ALL, 0, 5, SEDA_IO_CLOSED, "", &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_CLOSED, "", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);
}

static void script_abc_close(peer_t *p, int fd)
{
    (void)p;
    put(fd, "abc\r");
}

static void test_tcp_partial_on_close(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_abc_close);
    seda_io_tcp_t *s = connect_ok(f, f->peer.port, &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_CLOSED, "abc", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);

    peer_start(&f->peer, script_abc_close);
    s = connect_ok(f, f->peer.port, &seen);
    recv_is(f, s, SEDA_IO_RECV_BYTES, 10, 5, SEDA_IO_CLOSED, "abc\r", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);
}

static void script_slow(peer_t *p, int fd)
{
    put(fd, "par");
    tu_gate_wait(&p->gate, TU_DEADLINE);
    put(fd, "tial\nnext\n");
    tu_gate_wait(&p->gate, TU_DEADLINE);
}

static void test_tcp_receive_timeout(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_slow);
    seda_io_tcp_t *s = connect_ok(f, f->peer.port, &seen);
    double t0 = seda_now();
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 0.2, SEDA_IO_TIMEOUT, "par", &seen);
    assert_true(seda_now() - t0 >= 0.19);
    tu_gate_open(&f->peer.gate);
    /* The partial data left the buffer, as in LuaSocket. */
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "tial", &seen);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "next", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);
}

static void test_tcp_refused(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    int port;
    close(tu_listen_loopback(16, &port));
    seda_io_tcp_t *s;
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_new(f->loop, &s), 0);
    assert_int_equal(seda_io_tcp_connect(s, "127.0.0.1", port, 5, on_done,
                                         &f->done, &op), 0);
    assert_int_equal(wait_op(f, op, &seen), SEDA_IO_REFUSED);
    seda_io_op_free(op);
    seda_io_tcp_free(s);
}

static void script_hello(peer_t *p, int fd)
{
    (void)p;
    put(fd, "hello\n");
}

static void test_tcp_host_name(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_hello);
    seda_io_tcp_t *s;
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_new(f->loop, &s), 0);
    /* "localhost" may resolve to ::1 first; the peer listens on 127.0.0.1
     * only, so that also checks that the next address is tried. */
    assert_int_equal(seda_io_tcp_connect(s, "localhost", f->peer.port, 5,
                                         on_done, &f->done, &op), 0);
    assert_int_equal(wait_op(f, op, &seen), SEDA_IO_OK);
    seda_io_op_free(op);
    char host[64];
    int port;
    assert_int_equal(seda_io_tcp_peername(s, host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, f->peer.port);
    assert_int_equal(seda_io_tcp_sockname(s, host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_true(port > 0);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "hello", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);

    /* A name that does not exist (.invalid never does). */
    assert_int_equal(seda_io_tcp_new(f->loop, &s), 0);
    assert_int_equal(seda_io_tcp_connect(s, "no-such-host.invalid", 80, 10,
                                         on_done, &f->done, &op), 0);
    int st = wait_op(f, op, &seen);
    assert_true(st == SEDA_IO_DNS || st == SEDA_IO_TIMEOUT);
    seda_io_op_free(op);
    seda_io_tcp_free(s);
}

static void script_hold(peer_t *p, int fd)
{
    (void)fd;
    tu_gate_wait(&p->gate, TU_DEADLINE);
}

static void test_tcp_one_op_at_a_time_and_free_pending(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_hold);
    seda_io_tcp_t *s = connect_ok(f, f->peer.port, &seen);
    seda_io_op_t *op, *op2 = NULL;
    assert_int_equal(seda_io_tcp_receive(s, SEDA_IO_RECV_LINE, 0, 30, on_done,
                                         &f->done, &op), 0);
    assert_int_equal(seda_io_tcp_receive(s, SEDA_IO_RECV_LINE, 0, 30, on_done,
                                         &f->done, &op2), -EBUSY);
    assert_int_equal(seda_io_tcp_send(s, "x", 1, 30, on_done, &f->done, &op2),
                     -EBUSY);
    assert_null(op2);
    seda_io_tcp_free(s);        /* the pending receive is cancelled */
    assert_int_equal(wait_op(f, op, &seen), SEDA_IO_CANCELLED);
    seda_io_op_free(op);
    peer_stop(&f->peer);
}

static void script_count(peer_t *p, int fd)
{
    char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0)
        p->got += n;
    char line[32];
    snprintf(line, sizeof line, "%ld\n", p->got);
    put(fd, line);
}

static void test_tcp_large_send(void **state)
{
    fixture_t *f = *state;
    long seen = 0;
    peer_start(&f->peer, script_count);
    seda_io_tcp_t *s = connect_ok(f, f->peer.port, &seen);
    size_t n = 8u << 20;        /* far over the socket buffers */
    char *big = malloc(n);
    memset(big, 'z', n);
    seda_io_op_t *op;
    assert_int_equal(seda_io_tcp_send(s, big, n, 20, on_done, &f->done, &op), 0);
    free(big);                  /* copied at submission */
    assert_int_equal(wait_op(f, op, &seen), SEDA_IO_OK);
    assert_int_equal(seda_io_tcp_sent(op), n);
    seda_io_op_free(op);
    assert_int_equal(seda_io_tcp_shutdown(s, SHUT_WR), 0);
    recv_is(f, s, SEDA_IO_RECV_LINE, 0, 5, SEDA_IO_OK, "8388608", &seen);
    seda_io_tcp_free(s);
    peer_stop(&f->peer);
}

static void test_tcp_bad_state(void **state)
{
    fixture_t *f = *state;
    seda_io_tcp_t *s;
    seda_io_op_t *op = NULL;
    assert_int_equal(seda_io_tcp_new(f->loop, &s), 0);
    assert_int_equal(seda_io_tcp_send(s, "x", 1, 1, on_done, &f->done, &op),
                     -EINVAL);
    assert_int_equal(seda_io_tcp_receive(s, SEDA_IO_RECV_LINE, 0, 1, on_done,
                                         &f->done, &op), -EINVAL);
    assert_int_equal(seda_io_tcp_connect(s, "127.0.0.1", 0, 1, on_done,
                                         &f->done, &op), -EINVAL);
    assert_null(op);
    assert_int_equal(seda_io_tcp_fd(s), -1);
    char host[64];
    int port;
    assert_int_equal(seda_io_tcp_peername(s, host, sizeof host, &port),
                     -ENOTCONN);
    seda_io_tcp_free(s);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_tcp_patterns),
        T(test_tcp_partial_on_close),
        T(test_tcp_receive_timeout),
        T(test_tcp_refused),
        T(test_tcp_host_name),
        T(test_tcp_one_op_at_a_time_and_free_pending),
        T(test_tcp_large_send),
        T(test_tcp_bad_state),
    };
    return cmocka_run_group_tests_name("io_tcp", tests, NULL, NULL);
}
