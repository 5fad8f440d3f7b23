/* SPDX-License-Identifier: MIT */
/*
 * seda_remote.h -- remote stages: a stage backed by a NATS JetStream
 * stream, shared by every process that declares it.
 *
 * A remote stage is declared in every process that uses it.  Publishing
 * into it (seda_publish, a slip hop, a dead letter) appends a message to
 * the stage's subject; each process that added consumers to it and
 * called seda_remote_consume takes messages from one durable pull
 * consumer shared by all of them, so the stage's work spreads over every
 * process and host.  Ack, nack and dead letter map to JetStream's ack,
 * nak (with the stage's retry delay) and term; max_attempts is the
 * consumer's max_deliver; capacity bounds the messages a process holds
 * unacknowledged (and the consumer's max_ack_pending) and, on the
 * publishing side, the messages awaiting their JetStream acknowledgement.
 *
 * Link with -lsedaremote -lseda and libnats (pkg-config libnats).
 */
#ifndef SEDA_REMOTE_H
#define SEDA_REMOTE_H

#include "seda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A payload format of remote stages (docs/wire.md): how a payload is
 * written as a message body and read back.  The Lua binding brings
 * "json", "msgpack" and "raw" (over the Lua codec's bytes); a C program
 * may bring its own.  Every function may be called from any thread at
 * once, keeps no state and does not block. */
typedef struct seda_remote_format {
    const char *name;          /* "json" */
    const char *content_type;  /* "application/json": the Content-Type
                                  written, and read back */
    /* Write a payload (its kind and bytes) as a body: 0 with *out
     * (malloc'd; the caller frees it with free) and *outlen, or non-zero
     * with err naming what cannot be written ("payload.items[3]: JSON
     * cannot carry a binary string").  A kind the format does not know
     * (0, raw bytes from C, for the Lua binding's) may be passed through
     * (*out NULL: the payload is the body as it is). */
    int (*encode)(int kind, const void *p, size_t len, void **out,
                  size_t *outlen, char *err, size_t errlen);
    /* Read a body: 0 with *kind, *out (malloc'd, or NULL for "the body
     * as it is") and *outlen, or non-zero with err saying what is wrong
     * (the message is dead-lettered bad_message with it). */
    int (*decode)(const void *p, size_t len, int *kind, void **out,
                  size_t *outlen, char *err, size_t errlen);
} seda_remote_format;

typedef struct seda_remote_opts {
    const char *url;           /* "nats://127.0.0.1:4222" (required unless
                                  urls names some); user info
                                  ("nats://user:pass@host") is never shown
                                  in stats or reports */
    const char *const *urls;   /* more servers of the same cluster (nurls
                                  of them): the connection tries each and
                                  moves to another when one dies */
    int nurls;
    int replicas;              /* the stream's replicas when this call
                                  creates it (0: 1); 3 on a 3-server
                                  cluster keeps a stream working when one
                                  server dies */
    const char *stream;        /* JetStream stream ("SEDA") */
    const char *subject;       /* the stage's subject
                                  ("seda.<stream>.<stage>") */
    const char *consumer;      /* durable consumer ("seda_<stage>", the
                                  stage name with [^A-Za-z0-9_-] as _) */
    double ack_wait;           /* seconds a process may hold a message
                                  before JetStream gives it to another
                                  (0: twice handler_timeout, else 30) */
    int max_ack_pending;       /* the consumer's bound on unacknowledged
                                  messages over all processes (0:
                                  capacity) */
    double connect_timeout;    /* seconds to reach the server when the
                                  stage is declared (2) */
    double dedup_window;       /* the stream's duplicate window, seconds,
                                  when this call creates it (120) */
    bool low_latency;          /* write each message at once (cnats's
                                  send-asap: ~0.1 ms a hop instead of up
                                  to ~1 ms, at the cost of a system call
                                  per message and so of throughput); by
                                  default writes are coalesced (false) */
    /* TLS and authentication (docs/wire.md, reference.md).  Each NULL
     * when not used; the strings are file paths or secrets, never shown
     * in stats or reports. */
    const char *tls_ca;        /* PEM file of the CA that signed the
                                  server's certificate: TLS on (also for
                                  tls:// urls, with the system's CAs) */
    const char *tls_cert;      /* PEM client certificate (with tls_key):
                                  mutual TLS */
    const char *tls_key;
    const char *creds;         /* a NATS .creds file (user JWT and nkey
                                  seed) */
    const char *user;          /* user and password */
    const char *password;
    const char *token;         /* an authentication token */
    const seda_remote_format *format; /* payloads written (and a body
                                  without Content-Type read) in this
                                  format; NULL: the payload's bytes as
                                  they are, Content-Type by their kind
                                  (application/x-seda for the Lua codec,
                                  application/octet-stream for raw) */
    const seda_remote_format *const *readers; /* NULL-terminated: more
                                  formats a message's Content-Type may
                                  name (NULL: none); borrowed, must
                                  outlive the stage */
    bool tap;                  /* the stream republishes every message it
                                  stores to seda-tap.<stream>.<stage>, so
                                  any client can watch a stage (made so,
                                  or turned on, by this declaration; off
                                  by default: it costs the server a
                                  publish per message) */
    const char *const *reach;  /* subjects a "nats:<subject>" hop after
                                  this stage may publish to, besides those
                                  this program's own slips name (nreach
                                  NATS subject patterns: tokens separated
                                  by dots, "*" one token, ">" the rest);
                                  NULL: only the program's own.  Copied */
    int nreach;
    bool consume;              /* this process will consume the stage
                                  (seda_remote_consume): the durable
                                  consumer is found or created now.  A
                                  process that only publishes leaves it
                                  to those that consume (false) */
} seda_remote_opts;

/* Whether PAT is a pattern seda_remote_opts.reach may list: tokens of
 * [A-Za-z0-9_:-] separated by single dots, "*" for one token, ">" as the
 * last for one or more.  Cannot fail; any thread. */
bool seda_remote_reach_valid(const char *pat);

/* Fill o (the caller's) with the defaults (url NULL).  Cannot fail; any
 * thread. */
void seda_remote_opts_init(seda_remote_opts *o);

/* Add a remote stage: connect (or share the bus's connection to the
 * same url), find or create the stream (and, with ro->consume, the
 * durable consumer: an existing one keeps its settings, and its
 * max_deliver bounds the stage's attempts), then add the stage.  Options of so apply as for seda_stage_add, except:
 * durable and pull are refused, and policy drop_oldest (a message handed
 * to JetStream cannot be taken back).  On failure nothing is added and
 * err names the stage and the reason ("stage 'enrich': remote: cannot
 * connect to nats://127.0.0.1:4222: ...").  Returns 0 and *out, or
 * SEDA_EINVAL, SEDA_EEXIST, SEDA_EUNAVAIL, SEDA_ENOMEM.  Blocks while
 * it talks to the server; not from a worker. */
int seda_remote_stage_add(seda_bus_t *bus, const seda_stage_opts *so,
                          const seda_remote_opts *ro, seda_stage_t **out,
                          char *err, size_t errlen);

/* Start taking messages from the stage's consumer into this process
 * (after seda_stage_consume added its consumers).  A remote stage
 * without it only publishes.  Returns 0, or SEDA_EINVAL (not a remote
 * stage, declared without ro->consume, or no consumers).  Any thread. */
int seda_remote_consume(seda_stage_t *st);

/* True when st is a remote stage. */
bool seda_stage_is_remote(const seda_stage_t *st);

/* A remote stage's figures.  Counters count since the stage was added,
 * in this process. */
typedef struct seda_remote_stats {
    char state[16];            /* the connection: "connected",
                                  "reconnecting", "disconnected", ... */
    char url[256];             /* user info shown as "***" */
    char stream[SEDA_NAME_MAX + 1];
    char consumer[SEDA_NAME_MAX + 1];
    char subject[160];
    bool consuming;            /* seda_remote_consume was called */
    /* publishing */
    uint64_t published;        /* stored by JetStream (acknowledged) */
    uint64_t duplicates;       /* acknowledged as a duplicate */
    uint64_t publish_failed;   /* given up (counted dropped) */
    uint64_t republished;      /* sent again after a timeout or outage */
    int publishing;            /* awaiting their acknowledgement now */
    /* consuming */
    uint64_t fetched;          /* messages taken in */
    uint64_t acked, naked, termed;
    uint64_t bad_messages;     /* not seda envelopes: dead-lettered */
    uint64_t held_twice;       /* a copy of a message held here came again
                                  (JetStream redelivered it): dropped, not
                                  handled twice */
    uint64_t in_progress;      /* in-progress acks (+WPI) sent for held
                                  messages waiting their turn */
    int held;                  /* taken in, not yet settled */
    /* the consumer, as JetStream last said (-1: not known yet) */
    int64_t js_pending;        /* messages not yet delivered */
    int64_t js_ack_pending;    /* delivered, not yet acknowledged */
    int64_t js_redelivered;
    int64_t js_waiting;        /* pull requests waiting */
    double js_age;             /* seconds since JetStream said so */
    /* completions */
    int awaiting;              /* on_complete callbacks waiting here */
    uint64_t completions_sent; /* to the process that published */
    uint64_t completions_received;
    uint64_t completions_dropped; /* their origin was gone */
    uint64_t completions_lost; /* awaited here when the bus stopped */
    uint64_t completions_resent;   /* sent again: no "+OK" in time */
    uint64_t completions_too_large;/* final payload over max_payload: sent
                                      as a dead letter (too_large) */
    uint64_t completions_refused;  /* received for no awaited message
                                      (forged, or on another subject) */
    uint64_t reconnects;
    uint64_t redeclared;       /* the stream or consumer was missing and
                                  was created again (reported on stderr) */
} seda_remote_stats;

/* Fill out with st's figures; asks JetStream for the consumer's counts
 * in the background when they are older than half a second (js_age says
 * how old those in out are).  Returns 0, or SEDA_EINVAL when st is not a
 * remote stage.  Any thread. */
int seda_remote_stats_get(seda_stage_t *st, seda_remote_stats *out);

/* ---- NATS services (the micro protocol) ----
 *
 * A service answers NATS requests as the services of NATS's own clients
 * do (their "micro" framework): each endpoint subscribes its subject in
 * a queue group, so the processes running one service share its
 * requests; an error is an answer with the headers Nats-Service-Error
 * (the description) and Nats-Service-Error-Code; and the service answers
 * discovery on $SRV.PING, $SRV.INFO and $SRV.STATS (bare, .<name>, and
 * .<name>.<id>) with the io.nats.micro.v1 JSON (ping_response,
 * info_response, stats_response), so `nats micro ls` and the clients'
 * service clients list it.  The service has a connection of its own,
 * with the remote stages' settings (reconnects forever, a silent server
 * given up within 11 s, urls, TLS, authentication). */
typedef struct seda_nsvc seda_nsvc_t;
typedef struct seda_nsvc_req seda_nsvc_req_t;

/* A request of endpoint ep (its index in the options), on one of the
 * service's subscription threads.  The callee owns req until it answers
 * it (seda_nsvc_respond or seda_nsvc_respond_error, exactly once, from
 * any thread). */
typedef void (*seda_nsvc_fn)(seda_nsvc_req_t *req, int ep, void *ud);

typedef struct seda_nsvc_opts {
    const seda_remote_opts *conn;   /* url, urls, connect_timeout, TLS and
                                       authentication (other fields
                                       unused) */
    const char *name;          /* [A-Za-z0-9_-]+ */
    const char *version;       /* semantic version ("1.0.0") */
    const char *description;   /* or NULL */
    const char *queue;         /* queue group ("q") */
    int nendpoints;
    const char *const *ep_names;    /* endpoint names */
    const char *const *ep_subjects; /* their subjects */
    double timeout;            /* a request not answered in this many
                                  seconds is answered 504 (0: never) */
    seda_nsvc_fn on_request;
    void *ud;
} seda_nsvc_opts;

/* Connect, subscribe the endpoints and the discovery subjects: 0 and
 * *out, or SEDA_EINVAL (a bad name, version or subject: err says which),
 * SEDA_EUNAVAIL (the server), SEDA_ENOMEM.  Blocks while connecting. */
int seda_nsvc_new(const seda_nsvc_opts *o, seda_nsvc_t **out, char *err,
                  size_t errlen);
/* The service's id (a NUID, shown by discovery). */
const char *seda_nsvc_id(const seda_nsvc_t *s);
/* Stop taking requests (unsubscribe everything) and wait (bounded) until
 * no request callback runs; answers still go out.  Idempotent; main
 * thread. */
void seda_nsvc_stop(seda_nsvc_t *s);
/* Free: every request must have been answered.  Main thread. */
void seda_nsvc_free(seda_nsvc_t *s);

/* A request's subject, reply subject (NULL: nobody waits for an answer),
 * body, and headers (i from 0; values of a header given twice come
 * once each). */
const char *seda_nsvc_req_subject(const seda_nsvc_req_t *r);
const char *seda_nsvc_req_reply(const seda_nsvc_req_t *r);
const void *seda_nsvc_req_data(const seda_nsvc_req_t *r, size_t *len);
int seda_nsvc_req_header_count(const seda_nsvc_req_t *r);
void seda_nsvc_req_header_at(const seda_nsvc_req_t *r, int i,
                             const char **name, const char **value);

/* Answer r with data and nh header pairs (hv: name, value, ...), and
 * let go of it.  A request answered already (504 past the timeout) or
 * without a reply subject is only let go of.  Counted in the endpoint's
 * num_requests and processing_time. */
void seda_nsvc_respond(seda_nsvc_req_t *r, const char *const *hv, int nh,
                       const void *data, size_t len);
/* Answer r with an error (code: 503, 500, ...; desc its description),
 * counted in num_errors and last_error too. */
void seda_nsvc_respond_error(seda_nsvc_req_t *r, int code,
                             const char *desc);

/* An endpoint's figures (the stats_response's). */
typedef struct seda_nsvc_ep_stats {
    uint64_t num_requests, num_errors;
    int64_t processing_time;   /* ns, in all */
    char last_error[200];
} seda_nsvc_ep_stats;
void seda_nsvc_ep_stats_get(seda_nsvc_t *s, int ep, seda_nsvc_ep_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* SEDA_REMOTE_H */
