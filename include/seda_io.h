/* SPDX-License-Identifier: MIT */
/*
 * seda_io.h -- the I/O loop (SPEC.md section 12): timers, an HTTP client and
 * TCP sockets whose operations never block their caller.
 *
 * A loop (seda_io_loop_t) is an epoll set turned by one thread at a time.
 * Operations are submitted from any thread; each one's completion callback
 * fires EXACTLY ONCE, on the loop thread, with a status: SEDA_IO_OK, an
 * error, a timeout, or SEDA_IO_CANCELLED.  The layer uses libc, pthreads
 * and libcurl only; it knows nothing of the bus or of Lua.
 *
 * THE LOOP THREAD
 *   A loop made by seda_io_loop_new has a thread of its own.  A loop made
 *   by seda_io_loop_new_driven has none: the threads that drive it (a
 *   bus's workers, which watch seda_io_loop_fd in their readiness set and
 *   call seda_io_loop_run when it is readable) take turns, one at a time,
 *   and "the loop thread" below means the thread running the current
 *   turn.  A submission to a driven loop may run that turn itself, so the
 *   callbacks of any of the loop's ops may run on the submitting thread
 *   before the submission returns: submit holding no lock a callback
 *   takes.  Host names are resolved by one resolver thread per loop,
 *   started by the first connect to a name (never for a numeric address).
 *
 * OWNERSHIP OF AN OPERATION
 *   A submission that returns 0 hands the caller an op (seda_io_op_t *)
 *   and promises one callback.  The op is held twice: by the caller (the
 *   owner) and by the loop.  The loop lets go when the callback returns;
 *   the owner lets go with seda_io_op_free, exactly once, at any time:
 *   inside the callback, after it, or before it (then the op is cancelled
 *   first and the callback still fires, but the owner must not touch the
 *   op after seda_io_op_free).  Memory is freed when both have let go.
 *   So the op, its status and its results are readable from the moment the
 *   callback starts until the owner frees it, from any thread that knows
 *   the callback has fired (the callback's own signal to that thread, a
 *   mutex or an eventfd, gives the ordering).
 *
 *   seda_io_cancel may be called until seda_io_op_free, from any thread,
 *   any number of times, also from inside callbacks: if the op has not
 *   completed when the loop thread handles the request, it completes
 *   SEDA_IO_CANCELLED; if it completed first, the callback reports what
 *   happened and the cancel does nothing.
 *
 * A submission that succeeds sets *opp before the callback can run (the
 * callback may run before the submission returns).  A failed submission
 * (a negative errno returned) has no effect: no op, no callback, *opp
 * untouched.
 */
#ifndef SEDA_IO_H
#define SEDA_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct seda_io_loop_s seda_io_loop_t;
typedef struct seda_io_op_s seda_io_op_t;
typedef struct seda_io_tcp_s seda_io_tcp_t;

/* A completion callback: runs on the loop thread, once per op.  It must
 * not block; it may submit, cancel and free ops (this one included). */
typedef void (*seda_io_cb)(seda_io_op_t *op, void *ud);

/*
 * An op's status (seda_io_op_status).  Outside the errno range, so that
 * seda_io_strerror can name these as well as the -errno values the
 * submission functions return.  The name of each (seda_io_strerror) is the
 * word after SEDA_IO_, lower-case: "ok", "timeout", "refused", ...
 */
enum seda_io_status {
    SEDA_IO_OK = 0,
    SEDA_IO_TIMEOUT = -10001,   /* the op's deadline passed */
    SEDA_IO_REFUSED = -10002,   /* connection refused (or reset on connect) */
    SEDA_IO_DNS = -10003,       /* the host name could not be resolved */
    SEDA_IO_TLS = -10004,       /* TLS handshake or certificate failure */
    SEDA_IO_TOO_LARGE = -10005, /* a response over the op's size limit */
    SEDA_IO_CLOSED = -10006,    /* the peer closed (or reset) the connection */
    SEDA_IO_CANCELLED = -10007, /* seda_io_cancel, op freed early, or the
                                   loop was freed */
    SEDA_IO_OTHER = -10008,     /* anything else; seda_io_op_message says */
};

/* The name of an op status ("timeout", ...) or the text of a -errno value
 * returned by a submission; "unknown" otherwise.  Static string; any
 * thread; cannot fail. */
const char *seda_io_strerror(int code);

/* ---- the loop ---- */

/* Make a loop and start its thread.  0 and *loopp set, or -ENOMEM, -EMFILE
 * (no descriptors), -EAGAIN (no thread).  Any thread. */
int seda_io_loop_new(seda_io_loop_t **loopp);

/* Make a loop without a thread, for the caller's threads to drive (see
 * the head of this file).  0 and *loopp set, or -ENOMEM, -EMFILE.  Any
 * thread. */
int seda_io_loop_new_driven(seda_io_loop_t **loopp);

/* A driven loop's descriptor: readable (EPOLLIN, level-triggered; it is
 * an epoll set, so it may be watched by another) whenever a turn has
 * something to do; -1 for a loop with its own thread.  Owned by the loop.
 * Any thread. */
int seda_io_loop_fd(const seda_io_loop_t *loop);

/* Drive LOOP: run turns, never waiting, until nothing is due now.  If
 * another thread is running a turn, have it run one more and return at
 * once (what readiness it was called for is not lost).  Does nothing on
 * a loop with its own thread.  Any thread, a callback's included (it
 * then returns at once); never blocks. */
void seda_io_loop_run(seda_io_loop_t *loop);

/* Stop the loop: every pending op completes SEDA_IO_CANCELLED (its callback
 * fires, on the loop thread, before this returns), the thread is joined and
 * the memory freed.  Ops the owners have not freed stay valid until they
 * are.  Every TCP socket of the loop must have been freed (see
 * seda_io_tcp_free) before.  NULL is a no-op.  Must not be called on the
 * loop thread (from a callback).  Blocks until the thread has exited.  A
 * driven loop: nobody may drive it any more (its descriptor unwatched,
 * no seda_io_loop_run to come); a turn still ending is waited for, then
 * the freeing thread is the loop thread for the cancellations. */
void seda_io_loop_free(seda_io_loop_t *loop);

/* Whether the calling thread is LOOP's thread (for a driven loop: runs
 * its turn now).  Any thread. */
int seda_io_loop_is_current(const seda_io_loop_t *loop);

/* ---- operations (all kinds) ---- */

/* Request cancellation (see the head of this file).  Any thread; never
 * blocks; idempotent.  NULL is a no-op. */
void seda_io_cancel(seda_io_op_t *op);

/* The owner lets go of OP (see the head of this file).  NULL is a no-op.
 * Any thread; never blocks. */
void seda_io_op_free(seda_io_op_t *op);

/* The op's status: SEDA_IO_OK or one of enum seda_io_status.  Meaningful
 * from the callback on. */
int seda_io_op_status(const seda_io_op_t *op);

/* Details of a failed op (curl's error text, the syscall that failed...),
 * or "" when there are none.  Owned by the op. */
const char *seda_io_op_message(const seda_io_op_t *op);

/* ---- timers ---- */

/* An op that completes SEDA_IO_OK after SECONDS (<= 0: on the next turn of
 * the loop).  Ops due at the same moment complete in submission order.
 * 0 and *opp set, or -EINVAL (SECONDS is NaN), -ENOMEM, -ECANCELED (the
 * loop is being freed).  Any thread; never blocks. */
int seda_io_sleep(seda_io_loop_t *loop, double seconds, seda_io_cb cb,
                  void *ud, seda_io_op_t **opp);

/* ---- HTTP client (libcurl multi, connections reused per loop) ---- */

#define SEDA_IO_HTTP_MAX_SIZE_DEFAULT ((size_t)16 << 20)    /* 16 MiB */

/* The most header lines one response may carry (a repeated name counts
 * each time); past it the request fails TOO_LARGE.  libcurl bounds a
 * header line (100 KB) and a response's headers (300 KB) itself; those
 * fail TOO_LARGE too. */
#define SEDA_IO_HTTP_MAX_HEADERS 1000

/* A request.  Everything is copied at submission: the caller may free or
 * reuse the strings when seda_io_http_request returns. */
struct seda_io_http_req {
    const char *method;         /* "GET" when NULL */
    const char *url;            /* required */
    const char *const *headers; /* "Name: value" lines, nheaders of them */
    size_t nheaders;
    const char *body;           /* request body, or NULL */
    size_t body_len;
    double timeout;             /* whole request, seconds; <= 0: none */
    size_t max_size;            /* response body limit; 0: the default */
    int follow;                 /* follow redirects (at most 10) */
};

/* Start REQ.  The op completes SEDA_IO_OK when a response came (whatever
 * its HTTP status), else TIMEOUT, REFUSED, DNS, TLS, TOO_LARGE (the
 * Content-Length or the body received over max_size, more than
 * SEDA_IO_HTTP_MAX_HEADERS header lines, a header line or the headers over
 * libcurl's bounds; the message says which), CLOSED (empty reply) or
 * OTHER, with curl's message.  0 and *opp set, or -EINVAL (no url, or
 * a header line without ':'), -ENOMEM, -ECANCELED.  Any thread; never
 * blocks. */
int seda_io_http_request(seda_io_loop_t *loop,
                         const struct seda_io_http_req *req,
                         seda_io_cb cb, void *ud, seda_io_op_t **opp);

/* The connection cache.  A finished request leaves its connection for the
 * next request to the same host; at most SEDA_IO_HTTP_MAX_IDLE_CONNS idle
 * ones stay beside those of the requests running (past it the oldest is
 * closed), and when the last request of a burst of more than that at
 * once ends, the whole cache is closed.  libcurl drops a dead one (the server
 * closed its side) when it next looks for a connection, which an idle
 * loop never does: so once no request has run for the idle time (default
 * SEDA_IO_HTTP_IDLE_DEFAULT seconds), the whole cache is closed.
 * seda_io_http_set_idle sets LOOP's idle time (<= 0: the default); any
 * thread, from the next idle period on. */
#define SEDA_IO_HTTP_MAX_IDLE_CONNS 64
#define SEDA_IO_HTTP_IDLE_DEFAULT 30.0
void seda_io_http_set_idle(seda_io_loop_t *loop, double seconds);

/* The response of an OK http op: its HTTP status (0 before a response). */
int seda_io_http_status(const seda_io_op_t *op);

/* The response's headers: their count, and the I-th pair (0-based) with
 * names lower-cased and repeated names joined with ", " in one pair, in
 * the order first seen.  0 / -EINVAL when I is out of range.  Owned by the
 * op. */
size_t seda_io_http_nheaders(const seda_io_op_t *op);
int seda_io_http_header(const seda_io_op_t *op, size_t i,
                        const char **name, const char **value);

/* The response body and its length (also of a TOO_LARGE op: the part read,
 * never over the limit).  Owned by the op; "" when none. */
const char *seda_io_http_body(const seda_io_op_t *op, size_t *len);

/* ---- TCP sockets ---- */

/* How seda_io_tcp_receive reads (LuaSocket's patterns). */
enum seda_io_recv_mode {
    SEDA_IO_RECV_LINE = 1,      /* "*l": up to LF, without the LF and
                                   without any CR (LuaSocket drops every
                                   CR of a line, not only the last) */
    SEDA_IO_RECV_ALL = 2,       /* "*a": until the peer closes (then OK,
                                   or CLOSED when nothing came) */
    SEDA_IO_RECV_BYTES = 3,     /* exactly n bytes */
};

/* A socket of LOOP, not connected.  0 and *sp set, or -ENOMEM.  Owned by
 * the caller, who frees it with seda_io_tcp_free.  Any thread. */
int seda_io_tcp_new(seda_io_loop_t *loop, seda_io_tcp_t **sp);

/* Close and free S: its pending op, if any, completes SEDA_IO_CANCELLED
 * (on the loop thread; that callback may come after this returns), the
 * descriptor is closed on the loop thread.  NULL is a no-op.  Any thread,
 * loop thread included; never blocks. */
void seda_io_tcp_free(seda_io_tcp_t *s);

/*
 * The operations of a socket.  One at a time: a submission while another
 * op of S has not completed returns -EBUSY.  Each returns 0 and *opp set,
 * or -EBUSY, -ENOMEM, -EINVAL (bad argument, or the wrong state: connect
 * on a connected socket, send/receive on one that is not), -ECANCELED
 * (the loop is being freed).  TIMEOUT <= 0 means none.  Any thread; never
 * block.
 */

/* Connect to HOST (numeric address, or a name resolved by getaddrinfo on
 * the loop's resolver thread, never on the loop thread) and PORT; every
 * address is tried in turn within TIMEOUT.  Completes OK, REFUSED,
 * TIMEOUT, DNS or OTHER. */
int seda_io_tcp_connect(seda_io_tcp_t *s, const char *host, int port,
                        double timeout, seda_io_cb cb, void *ud,
                        seda_io_op_t **opp);

/* Send LEN bytes of DATA (copied at submission), across partial writes.
 * Completes OK (all sent), CLOSED, TIMEOUT or OTHER; seda_io_tcp_sent
 * tells how much went out either way. */
int seda_io_tcp_send(seda_io_tcp_t *s, const void *data, size_t len,
                     double timeout, seda_io_cb cb, void *ud,
                     seda_io_op_t **opp);

/* Receive in MODE (N bytes for SEDA_IO_RECV_BYTES; ignored otherwise),
 * through the socket's read buffer (bytes past the request stay there for
 * the next receive).  Completes OK, CLOSED, TIMEOUT or OTHER; on an error
 * the data read so far is the op's (seda_io_op_data), as LuaSocket returns
 * it as `partial`, and is no longer in the buffer. */
int seda_io_tcp_receive(seda_io_tcp_t *s, enum seda_io_recv_mode mode,
                        size_t n, double timeout, seda_io_cb cb, void *ud,
                        seda_io_op_t **opp);

/* What a receive op read (the line without its end, the bytes, or the
 * partial data on an error), and its length.  Owned by the op. */
const char *seda_io_op_data(const seda_io_op_t *op, size_t *len);

/* Bytes a send op wrote (all of them when OK). */
size_t seda_io_tcp_sent(const seda_io_op_t *op);

/* shutdown(2) S: HOW is SHUT_RD, SHUT_WR or SHUT_RDWR.  0, -ENOTCONN, or
 * another -errno.  The owner's thread, with no op of S pending. */
int seda_io_tcp_shutdown(seda_io_tcp_t *s, int how);

/* The peer's or the local address of a connected S as text ("127.0.0.1",
 * "::1") and port.  0, -ENOTCONN or -errno.  The owner's thread. */
int seda_io_tcp_peername(seda_io_tcp_t *s, char *host, size_t hostlen,
                         int *port);
int seda_io_tcp_sockname(seda_io_tcp_t *s, char *host, size_t hostlen,
                         int *port);

/* The descriptor (-1 when not connected), and the bytes waiting in the
 * read buffer.  The owner's thread, with no op of S pending. */
int seda_io_tcp_fd(const seda_io_tcp_t *s);
size_t seda_io_tcp_buffered(const seda_io_tcp_t *s);

/* Whether a connected idle S still looks usable: no data waiting and the
 * peer has not closed (a non-blocking peek).  For connection pools.  The
 * owner's thread, with no op of S pending. */
int seda_io_tcp_alive(seda_io_tcp_t *s);

#ifdef __cplusplus
}
#endif

#endif /* SEDA_IO_H */
