/* SPDX-License-Identifier: MIT */
/*
 * http_int.h -- what the files of src/http/ share: a connection, a
 * request, and the functions between the loop (server.c), the parser
 * (request.c) and the writer (answer.c).
 */
#ifndef SEDA_HTTP_INT_H
#define SEDA_HTTP_INT_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "seda_http.h"

#define SEDA__API __attribute__((visibility("hidden")))

/* A connection's state: reading a request; its request with the
 * application; writing an answer; lingering after an answer that closes
 * it (the client's bytes read and dropped until it closes); failed. */
enum { C_READ, C_APP, C_WRITE, C_LINGER, C_DEAD, C_CLOSED };

/* A header line of the request being read, as offsets into c->in. */
struct hline {
    uint32_t no, nl, vo, vl;
};

/*
 * A connection.  Every field is guarded by the server's mu (server.c),
 * but fd (immutable while the connection is listed).
 */
struct hconn {
    struct hconn *prev, *next;  /* the server's list */
    seda_http_server_t *srv;    /* immutable */
    void *w;                    /* its watch (the loop's) */
    int fd;
    int state;                  /* C_* */
    uint32_t events;            /* the epoll interest now */
    int64_t clock_ns;           /* the client's phase began */
    bool close_after;           /* close once the answer is written */
    struct seda_http_req_s *req;        /* with the application, or NULL */
    /* input: in[0..in_len), parsed up to in_off */
    char *in;
    size_t in_len, in_cap, in_off;
    size_t scan;                /* the head's end was looked for up to here */
    bool in_body;               /* the head is parsed; reading the body */
    http_parser p;
    /* the request being read */
    size_t url_o, url_l;        /* offsets into in (the head's bytes) */
    struct hline *h;
    int nh, hcap;
    bool h_value;               /* the last callback was a value's */
    unsigned char *body;
    size_t blen, bcap;
    size_t max_body;            /* the server's (immutable) */
    bool complete;
    struct seda_http_req_s *building;   /* made at the head's end */
    int refuse;                 /* a status to refuse with, or 0 */
    char why[160];              /* and its reason */
    /* output: out[out_off..out_len) still to send */
    char *out;
    size_t out_len, out_off;
};

enum { R_WAITING, R_ANSWERED };

/* A request handed to the application: one allocation, its strings in
 * it.  srv, method .. body are immutable; c and state are guarded by the
 * server's mu; wprev/wnext too (its waiting list). */
struct seda_http_req_s {
    seda_http_server_t *srv;
    struct hconn *c;            /* NULL once the connection is gone */
    int state;                  /* R_* */
    bool head;                  /* a HEAD request: the answer has no body */
    bool close;                 /* the connection closes after the answer */
    bool keep10;                /* HTTP/1.0 keep-alive: said in the answer */
    char *method, *path;
    int nh, nq;
    char **hdr, **q;            /* 2 * nh, 2 * nq strings */
    unsigned char *body;
    size_t len;
    double arrived;
    int64_t arrived_ns, deadline_ns;
    struct seda_http_req_s *wprev, *wnext;
};

SEDA__API int64_t seda__http_now_ns(void);

/* server.c */
SEDA__API void seda__http_hand_over(seda_http_server_t *s, struct hconn *c,
                                    struct seda_http_req_s *r);
SEDA__API void seda__http_refuse(seda_http_server_t *s, struct hconn *c,
                                 int status, const char *reason);

/* request.c */
SEDA__API struct hconn *seda__http_conn_new(seda_http_server_t *s, int fd);
SEDA__API void seda__http_conn_free(struct hconn *c);
SEDA__API int seda__http_conn_reserve(struct hconn *c, size_t more);
SEDA__API bool seda__http_conn_pending(const struct hconn *c);
SEDA__API int seda__http_parse(seda_http_server_t *s, struct hconn *c);
SEDA__API void seda__http_req_free(struct seda_http_req_s *r);
SEDA__API size_t seda__http_max_header(const seda_http_server_t *s);
SEDA__API size_t seda__http_max_body(const seda_http_server_t *s);

/* ownloop.c: the loop of a server given none */
struct ownloop;
SEDA__API int seda__http_ownloop_new(struct ownloop **out, seda_http_loop *ops);
SEDA__API int seda__http_ownloop_start(struct ownloop *l);
SEDA__API void seda__http_ownloop_stop(struct ownloop *l);
SEDA__API void seda__http_ownloop_free(struct ownloop *l);

/* answer.c */
SEDA__API char *seda__http_format(int status, const char *const *hv, int nh,
                                  const void *body, size_t len,
                                  const struct seda_http_req_s *r, bool close,
                                  size_t *outlen);

/* listen.c */
SEDA__API int seda__http_listen_on(const char *addr, int *port, char *err,
                                   size_t errlen);

#endif
