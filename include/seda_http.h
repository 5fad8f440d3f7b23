/* SPDX-License-Identifier: MIT */
/*
 * seda_http.h -- an HTTP/1.1 server whose requests are answered later, from
 * any thread (SPEC.md section 13: the ingress of bus:listen).
 *
 * A server (seda_http_server_t) owns its listening socket and one epoll
 * loop.  When a whole request has arrived (request line, headers and a
 * body of at most max_body bytes) the server calls on_request on its loop
 * with the request; the application answers it with seda_http_respond,
 * then or later, from any thread, and that thread writes the answer when
 * the socket takes it (the loop writes the rest).  Meanwhile no thread
 * waits on the connection, and pipelined requests behind it wait unread,
 * so they are answered in order.  The layer uses libc, pthreads and nodejs
 * http-parser only; it knows nothing of the bus or of Lua.
 *
 * OWNERSHIP OF A REQUEST
 *   Every request given to on_request must be answered with
 *   seda_http_respond exactly once; that call gives the request back (the
 *   pointer is dead after it).  A request the server gave up on first
 *   (timeout passed: it answered 504 itself; the client went away; the
 *   server is stopping: 503) still takes its seda_http_respond, which then
 *   only lets go (and returns 1).
 *
 * What the server answers by itself, closing the connection after: 400
 * for a malformed request, read strictly (RFC 9112): a bare CR, a NUL or
 * another control character in the head, a folded header line, a space
 * before a header's colon, Content-Length repeated or beside
 * Transfer-Encoding, on HTTP/1.1 no Host or two, %00 in the target; 501
 * for a transfer coding other than chunked; 413 for a body over max_body;
 * 431 for a head over max_header.  And 504 when the application did not
 * answer within timeout (the connection stays open).  A client that takes longer than client_timeout to send a whole
 * request (or to read an answer) is disconnected: the clock runs from the
 * connection's start or its previous answer, so a slow drip of bytes does
 * not keep it alive.
 */
#ifndef SEDA_HTTP_H
#define SEDA_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct seda_http_server_s seda_http_server_t;
typedef struct seda_http_req_s seda_http_req_t;

/* A whole request has arrived.  Runs where the server's loop runs
 * callbacks (its thread, or a worker of the bus); must not block.
 * The request's accessors are valid until it is answered. */
typedef void (*seda_http_request_fn)(seda_http_req_t *req, void *ud);

/* The readiness a server's descriptors are watched with.  A server given
 * none (opts.loop NULL) runs one thread of its own around an epoll set;
 * bus:listen gives the bus's (seda_watch_add: the workers serve the
 * sockets, and a request is read, published and often run on the same
 * worker).  add watches fd for events and sets *watch; mod changes the
 * events; del stops watching and gives ud back through release, at once
 * or, when fn is running, once it returns.  fn never runs on two threads
 * at once for one watch, and must tolerate stale events. */
typedef void (*seda_http_ready_fn)(void *ud, uint32_t events);
typedef void (*seda_http_release_fn)(void *ud);
typedef struct seda_http_loop {
    void *ctx;
    int (*add)(void *ctx, int fd, uint32_t events, seda_http_ready_fn fn,
               void *ud, void **watch);
    int (*mod)(void *watch, uint32_t events);
    void (*del)(void *watch, seda_http_release_fn release);
} seda_http_loop;

typedef struct seda_http_opts {
    const char *addr;          /* "ADDR:PORT", "[V6]:PORT" or "PORT" (binds
                                  127.0.0.1); port 0 picks a free one */
    int max_connections;       /* open connections at most (1024) */
    size_t max_header;         /* bytes of request line + headers (16 KiB) */
    size_t max_body;           /* body bytes (1 MiB) */
    double timeout;            /* seconds until the server answers 504 (30) */
    double client_timeout;     /* seconds a client has to send one request
                                  or read one answer (10) */
    seda_http_request_fn on_request;
    void *ud;                  /* passed to on_request */
    const seda_http_loop *loop; /* NULL: a thread of the server's own
                                   (copied; ctx must outlive the server) */
} seda_http_opts;

/* Request latency since a server started, as a Prometheus histogram
 * wants it: n[i] answers that took at most seda_http_hist_le[i] seconds
 * and more than the bound before it (n[SEDA_HTTP_HIST_N]: over the last
 * bound), their count and their sum in seconds.  A server fills one with
 * seda_http_hist_add, once per answer, when the answer is queued (the
 * time since the whole request arrived), under the lock that guards its
 * counters; seda_http_server_stats copies it out. */
#define SEDA_HTTP_HIST_N 18
extern const double seda_http_hist_le[SEDA_HTTP_HIST_N];
typedef struct seda_http_hist {
    uint64_t n[SEDA_HTTP_HIST_N + 1];
    uint64_t count;
    double sum;                /* seconds */
} seda_http_hist;

/* Count one answer that took seconds (negative counts as 0).  No lock of
 * its own: the caller's guards h.  Cannot fail. */
void seda_http_hist_add(seda_http_hist *h, double seconds);

/* What a server counts (seda_http_server_stats). */
typedef struct seda_http_stats {
    uint64_t requests;         /* whole requests handed to the application */
    uint64_t responses[6];     /* answers by class: [1] 1xx .. [5] 5xx;
                                  [0] 503s (also counted in [5]) */
    uint64_t timeouts;         /* 504s the server gave */
    uint64_t too_large;        /* 413s */
    uint64_t slow_clients;     /* connections cut at client_timeout */
    uint64_t connections;      /* accepted so far */
    int open_connections;      /* open now */
    int waiting;               /* requests with the application now */
    /* Latency from a request's arrival (whole) to its answer being queued,
     * over the last ~10 s, in microseconds, and how many it covers. */
    double latency_p50, latency_p99, latency_max;
    uint64_t latency_count;
    /* The same latency since the server started (seda_http_hist_add). */
    seda_http_hist latency;
} seda_http_stats;

/* Defaults into o (the caller's).  Cannot fail; any thread. */
void seda_http_opts_init(seda_http_opts *o);

/* Bind, listen and start serving.  Returns 0 with *out set, or a negative
 * errno: -EINVAL (a bad address, err says why), -EADDRINUSE, -ENOMEM, ...
 * err (errlen bytes, the caller's) gets a message on failure.  Any thread. */
int seda_http_server_new(const seda_http_opts *o, seda_http_server_t **out,
                         char *err, size_t errlen);

/* The port it listens on (useful after port 0). */
int seda_http_server_port(const seda_http_server_t *s);

/* Stop accepting connections (the listening socket is closed); open
 * connections are still served.  Idempotent; any thread. */
void seda_http_server_quiesce(seda_http_server_t *s);

/* Quiesce, wait up to grace seconds for the requests with the application
 * to be answered and their answers sent, answer those still waiting 503
 * (reason "closed"), and stop and free the server.  NULL is ignored.  Not
 * from a server thread (on_request).  After it, seda_http_respond on a
 * request still held only lets go. */
void seda_http_server_free(seda_http_server_t *s, double grace);

/* A snapshot of the counters.  Any thread; cannot fail. */
void seda_http_server_stats(seda_http_server_t *s, seda_http_stats *out);

/* The request (valid until answered; strings NUL-terminated, the server's;
 * the path and the query's keys and values percent-decoded, '+' a space in
 * the query; header values as sent, without surrounding blanks). */
const char *seda_http_req_method(const seda_http_req_t *r);
const char *seda_http_req_path(const seda_http_req_t *r);
int seda_http_req_header_count(const seda_http_req_t *r);
/* The i-th header: name in lower case, and value. */
void seda_http_req_header_at(const seda_http_req_t *r, int i,
                             const char **name, const char **value);
int seda_http_req_query_count(const seda_http_req_t *r);
void seda_http_req_query_at(const seda_http_req_t *r, int i,
                            const char **key, const char **value);
const void *seda_http_req_body(const seda_http_req_t *r, size_t *len);
/* The monotonic time (seconds) the whole request had arrived. */
double seda_http_req_arrived(const seda_http_req_t *r);

/* Answer r: status, headers (nheaders name/value pairs, copied) and body
 * (copied).  Gives r back.  Returns 0 when the answer goes out, 1 when the
 * server had given up on r (the answer is dropped), -ENOMEM (r is answered
 * 500 and given back all the same).  Any thread; never blocks. */
int seda_http_respond(seda_http_req_t *r, int status,
                      const char *const *headers, int nheaders,
                      const void *body, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* SEDA_HTTP_H */
