/* SPDX-License-Identifier: MIT */
/*
 * remote_int.h -- internals shared by the remote layer's files.
 *
 *   conn.c      one NATS connection per (bus, url): its inbox, the one
 *               subscription every reply and message of the bus's remote
 *               stages arrives on, and the dispatch to them
 *   setup.c     names, and the stream and durable consumer a stage uses
 *   pub.c       publishing into a remote stage: the window of messages
 *               awaiting their JetStream acknowledgement, retries
 *   feed.c      consuming: pull requests sized by the stage's room, the
 *               messages taken in as envelopes, ack / nak / term
 *   complete.c  completions: the origin's table of on_complete callbacks
 *               waiting for their itinerary, and the message back to it
 *   rstage.c    a remote stage: the public API (include/seda_remote.h)
 *               and the hooks the core calls (core/remote.h)
 *
 * Threads.  The connection's subscription has one delivery thread (a
 * cnats thread): every PubAck, pull reply, completion and tick runs
 * there, one at a time.  Connection events (disconnected, reconnected)
 * run on cnats's callback thread.  Publishing runs on the publisher's
 * thread; settling a delivery (ack, nak, term) on the pool worker that
 * delivered it.  No Lua state is ever touched here: completions reach
 * the Lua binding through the core's done callback, which queues them.
 *
 * Lock order: rconn registry -> rconn.mu -> rstage.pmu -> rstage.fmu ->
 * rstage.cmu -> rcomp.mu -> the core's locks (stage->mu ...).  No lock of this layer
 * is held while calling into the core's admission or routing, or while
 * a done callback runs.
 */
#ifndef SEDA_REMOTE_INT_H
#define SEDA_REMOTE_INT_H

#include <nats/nats.h>

#include "core/door.h"
#include "core/remote.h"
#include "seda_remote.h"
#include "wire.h"

struct rstage;
struct rconn;
struct rcsend;

/* ---- conn.c ---- */

/* A JetStream message's reply subject, parsed ($JS.ACK.<stream>.
 * <consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>,
 * or the longer form with a domain and an account hash). */
struct rjs_meta {
    const char *stream;         /* not NUL-terminated */
    size_t stream_len;
    const char *consumer;
    size_t consumer_len;
    uint64_t delivered;         /* deliveries of this message, from 1 */
    uint64_t sseq;              /* stream sequence */
    uint64_t pending;           /* messages left for the consumer */
};
bool seda__rjs_parse_ack(const char *reply, struct rjs_meta *m);

/* What a connection hands to one of its stages.  Every call runs with no
 * lock of the connection held; the connection never calls a client after
 * seda__rconn_detach returned. */
struct rclient {
    void *ud;
    const char *stream;         /* JetStream messages of this consumer */
    const char *consumer;       /* (NULL: the stage does not consume) */
    /* A message for the consumer (takes m).  Dispatch thread. */
    void (*on_js)(void *ud, natsMsg *m, const struct rjs_meta *meta);
    /* A reply to "<inbox>.<sid>.<kind>[.<rest>]" (borrows m).  Dispatch
     * thread. */
    void (*on_reply)(void *ud, char kind, const char *rest, natsMsg *m);
    /* About every 100 ms, and after each message at most that often.
     * Dispatch thread. */
    void (*on_tick)(void *ud, int64_t now_ns);
    /* The connection is back after an outage.  cnats's callback thread. */
    void (*on_reconnect)(void *ud);
    /* No more messages wait for the dispatch thread right now (and at
     * every tick): what was gathered goes on.  Dispatch thread. */
    void (*on_flush)(void *ud);
};

struct rcomp;

/*
 * Locking:
 *   mu guards clients, busy, gone, nclients, cap, sub_done, closed_done;
 *   cv is signalled under it when a client call returns to a detach
 *   waiting for it, and when the subscription or the connection is done.
 *   The registry mutex (conn.c) guards refs and next.
 *   Immutable after seda__rconn_get returned it: nc, js, sub, bus, url,
 *   shown,
 *   low_latency, authkey, inbox, token, comp.
 *   Dispatch thread only: last_tick.
 *   Atomic (relaxed, counters): disconnects, reconnects, async_errors,
 *   completions_refused.
 */
struct rconn {
    seda__mutex_t mu;
    pthread_cond_t cv;
    natsConnection *nc;
    jsCtx *js;                  /* stream and consumer management */
    natsSubscription *sub;      /* "<inbox>.>", with a 100 ms tick */
    const void *bus;            /* the bus whose stages share it */
    char *url;                  /* owned: one url, or several joined
                                   by commas (cnats tries each) */
    char *authkey;              /* owned: the rauth fields joined, to
                                   share a connection only with stages
                                   that prove themselves alike */
    char shown[256];            /* url with any user info as "***" */
    bool low_latency;           /* each message written at once */
    char inbox[64];             /* "_INBOX.<nuid>" */
    size_t inbox_len;
    char token[64];             /* the nuid: names this process's ids */
    struct rcomp *comp;         /* completions (complete.c) */
    struct rclient *clients;    /* indexed by sid; guarded by mu */
    int *busy;                  /* calls running per client; mu */
    bool *gone;                 /* detached clients; mu */
    int nclients;               /* guarded by mu */
    int cap;                    /* guarded by mu */
    bool sub_done;              /* no more dispatch calls; mu */
    bool closed_done;           /* cnats's closed callback ran; mu */
    int64_t last_tick;          /* dispatch thread only */
    char server[256];           /* the server connected to (redacted);
                                   guarded by mu */
    int64_t lost_at;            /* when the connection was lost (ns; 0:
                                   up); cnats's callback thread only */
    atomic_bool closing;        /* put is closing it: no loss is said
                                   (release on set / acquire on read) */
    int refs;                   /* registry mutex */
    struct rconn *next;         /* registry mutex */
    atomic_uint_fast64_t disconnects;
    atomic_uint_fast64_t reconnects;
    atomic_uint_fast64_t async_errors;
    atomic_uint_fast64_t completions_refused; /* on no entry's subject */
};

/* How a connection proves itself (seda_remote_opts' TLS and
 * authentication fields; each NULL when not used). */
struct rauth {
    const char *ca, *cert, *key;    /* TLS (any set: TLS on) */
    const char *creds;              /* .creds file */
    const char *user, *password;
    const char *token;
};

/* The connection of bus to url (low_latency: cnats's send-asap, each
 * message written at once; else writes are coalesced), connected (and
 * its subscription up) or shared with the bus's other remote stages of
 * the same setting.  Returns 0 and a reference,
 * or a negative code with err naming the url and the reason (a server
 * that does not answer fails within connect_timeout seconds).  Main
 * thread of the declaring program; blocks while connecting. */
int seda__rconn_get(const void *bus, const char *url, double connect_timeout,
                    bool low_latency, const struct rauth *auth,
                    struct rconn **out, char *err, size_t errlen);

/* The connection settings every NATS connection of this layer has: the
 * servers (url, several joined by commas), the connect timeout, reconnects
 * forever, pings and the write deadline (a silent server given up within
 * 11 s), and, unless auth is NULL, TLS and authentication. */
natsStatus seda__rconn_options(natsOptions *o, const char *url,
                               double timeout, const struct rauth *auth);
/* ro's url and urls as one connection string, joined by commas; -1 when
 * they do not fit in size. */
int seda__rconn_join_urls(const seda_remote_opts *ro, char *urls,
                          size_t size);

/* Drop a reference; the last one flushes what is buffered, closes the
 * connection and waits (bounded) until no callback runs.  Not from a
 * callback of this connection. */
void seda__rconn_put(struct rconn *c);

/* Register a client; returns its sid (>= 0) or SEDA_ENOMEM.  Detach
 * waits until no call to it runs, and none starts later. */
int seda__rconn_attach(struct rconn *c, const struct rclient *cl);
void seda__rconn_detach(struct rconn *c, int sid);

/* url (one, or several joined by commas) with the user info of each
 * (user, password, token) replaced by "***", into buf: what stats,
 * reports and errors show.  Cannot fail (truncates). */
void seda__rconn_redact(const char *url, char *buf, size_t len);

/* svc_opts.c: o checked as seda_nsvc_new needs it (names, version, queue,
 * endpoints and their subjects).  Returns 0, or SEDA_EINVAL with err
 * naming the service, the endpoint and what is wrong.  Any thread. */
int seda__nsvc_opts_check(const seda_nsvc_opts *o, char *err, size_t errlen);

/* True while the connection is up (requests and publishes can go out). */
bool seda__rconn_up(struct rconn *c);
/* Wait until the connection is up, or the deadline (monotonic ns), or
 * it is closed; true when up.  Blocks; no lock of this layer held. */
bool seda__rconn_wait_up(struct rconn *c, int64_t deadline_ns);
bool seda__rconn_closed(struct rconn *c);
/* "connected", "reconnecting", "disconnected", "closed", ... */
const char *seda__rconn_state(struct rconn *c);

/* The subject "<inbox>.<sid>.<kind>[.<n>]" into buf; returns buf. */
char *seda__rconn_reply(struct rconn *c, int sid, char kind, uint64_t n,
                        bool with_n, char *buf, size_t len);

/* A message's status header (100, 404, 408, 409, 503, ...) or 0, and
 * its Nats-Pending-Messages (0 when absent). */
int seda__rjs_status(natsMsg *m, uint64_t *pending);

/* Publish data to subject with reply (NULL: none); fire and forget.
 * Returns 0 or SEDA_EUNAVAIL when the connection is not up. */
int seda__rconn_send(struct rconn *c, const char *subject, const char *reply,
                     const void *data, size_t len);

/* Report a problem of the connection (stderr, at most one line a
 * second per connection; the rest are counted). */
void seda__rconn_report(struct rconn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- setup.c ---- */

/* A stream or consumer name derived from a stage name: its bytes with
 * every byte outside [A-Za-z0-9_-] as '_'.  buf holds SEDA_NAME_MAX + 1. */
void seda__rsetup_name(const char *stage, char *buf);

/* The effective consumer settings (the existing consumer's when one was
 * found: it is shared, its settings rule). */
struct rcons_cfg {
    bool stream_created;        /* this call created the stream */
    int64_t ack_wait_ns;
    int max_deliver;            /* -1: unlimited */
    int max_ack_pending;
    bool created;               /* this call created it */
    bool differs;               /* an existing one has other settings */
};

/* Look up the stream (create it, WorkQueue retention, file storage,
 * subjects "seda.<stream>.>" and subject, dedup window dup_window_ns,
 * replicas copies (0: 1), and with tap republishing what it stores to
 * "seda-tap.<stream>.>", when missing; add subject to an existing stream
 * that does not cover it, and the tap to one that has none),
 * then, unless consumer is NULL, the durable consumer (created with the
 * wanted settings when missing; an existing one must filter subject; got
 * says which settings apply).  Returns 0, or a
 * negative code with err naming the stream or consumer and the reason.
 * Blocks for a few JetStream API requests. */
int seda__rsetup_ensure(struct rconn *c, const char *stream,
                        const char *subject, const char *consumer,
                        int64_t dup_window_ns, int replicas, bool tap,
                        const struct rcons_cfg *want,
                        struct rcons_cfg *got, char *err, size_t errlen);

/* ---- a remote stage (rstage.c; pub.c, feed.c and complete.c work on
 * its parts) ---- */

/* A message this process published and JetStream has not acknowledged
 * yet (pub.c).  Every field is guarded by its stage's pmu while the
 * record is in the window (the hash and the list); whoever takes it out
 * (hash_take, under pmu) owns it from then on. */
struct rpub_rec {
    uint64_t n;                 /* reply number, unique in the stage */
    natsMsg *msg;               /* kept to send again */
    int64_t deadline;           /* give up then (monotonic ns) */
    int64_t sent;               /* last sent (monotonic ns) */
    int sends;                  /* times sent */
    int refused;                /* sends answered "not stored" (no
                                   responders, JetStream 503): while
                                   sends > refused, one may have been
                                   stored (the record is in doubt) */
    int64_t first_sent;         /* first send (monotonic ns) */
    bool parked;                /* due again while the connection is down */
    bool user_dup;              /* a first hop: a duplicate is the
                                   publisher's repeat, not our re-send */
    void *ud;                   /* rstage.c's per-message state */
    struct rpub_rec *prev;      /* list in order of the last send */
    struct rpub_rec *next;
    struct rpub_rec *hnext;     /* hash chain by n */
};

/* A pull request this process sent (feed.c): the last RS_REQS are kept
 * to find the size of one that ends with a status but no count. */
struct rreq {
    uint64_t n;                 /* its number (its reply subject) */
    int batch;                  /* messages asked for */
};
#define RS_REQS 16
#define RS_GATHER 64            /* envelopes admitted together, at most */

/* Deliveries a consumer allows beyond max_attempts: those lost with a
 * process that died holding them, or that overran ack_wait.  The last one
 * is dead-lettered without running the handler, and its dead letter may
 * reach the origin before the completion of a process still holding an
 * earlier copy: a stream's leader failing over loses keep-alives and
 * acks for a few seconds, which with 2 was enough (a short ack_wait) to
 * end an itinerary that completed as a dead letter.  4 needs four
 * ack_waits of such loss in a row. */
#define RS_LOST_DELIVERIES 4

/* A message taken in and not yet settled (feed.c), by stream sequence:
 * kept alive with in-progress acks while it waits, and a second copy of
 * it (JetStream redelivering it) is recognised.  Guarded by fmu. */
struct rheld {
    uint64_t sseq;              /* stream sequence */
    char *reply;                /* owned: the first copy's ack subject */
    int64_t wpi_at;             /* taken in, or last said in progress */
    struct rheld *next;         /* hash chain */
};
#define RS_HELD_BUCKETS 256

/*
 * Locking:
 *   pmu guards the publishing window: inflight, reserved, waiters,
 *   next_n, hash, hmask, head, tail (room is its condition).
 *   fmu guards the feed: held, outstanding, reqs, req_n, epoch_n,
 *   last_expires, last_heard, info_at, hheld, rate, rate_n, rate_at.
 *   Immutable after seda_remote_stage_add: st, bus, conn, sid, stream,
 *   subject, consumer, cfg, max_attempts, max_deliver, consume,
 *   ack_wait_ns, want, dup_ns, replicas, tap, format, readers.
 *   Dispatch thread only: setup_at, setup_backoff.
 *   Atomic: consuming, closing (release on set / acquire on read); the
 *   counters and js_* figures (relaxed: statistics, each a value of its
 *   own); awaiting (relaxed counter, read by the idle check, which scans
 *   twice).
 *   pmu and fmu are never held together, nor while calling the core.
 */
/* Whether PAT is a NATS subject pattern reach may list: tokens of
 * [A-Za-z0-9_:-] separated by single dots, a token "*", or ">" as the
 * last token (rstage.c).  NULL is not. */
SEDA__API bool seda__reach_valid(const char *pat);
/* Whether SUBJECT matches PAT (NATS rules: "*" one token, ">" one or
 * more; rstage.c). */
SEDA__API bool seda__reach_match(const char *pat, const char *subject);

struct rstage {
    struct seda_stage_s *st;
    struct seda_bus_s *bus;
    struct rconn *conn;
    int sid;                    /* the connection's client number */
    char *stream;               /* owned */
    char *subject;              /* owned */
    char *consumer;             /* owned */
    struct rcons_cfg cfg;       /* the consumer's effective settings */
    int max_attempts;           /* effective handler attempts */
    int max_deliver;            /* the consumer's (-1: unlimited, or not
                                   consuming) */
    bool consume;               /* declared to consume (the consumer was
                                   found or made) */
    int64_t ack_wait_ns;
    struct rcons_cfg want;      /* the consumer settings asked for */
    int64_t dup_ns;             /* the stream's dedup window, if made */
    int replicas;               /* the stream's replicas, if made */
    bool tap;                   /* the stream republishes to seda-tap */
    char **reach;               /* nreach patterns (owned; immutable):
                                   where a foreign slip's nats: hop may
                                   publish */
    int nreach;
    const seda_remote_format *format;   /* payloads written so, or NULL */
    const seda_remote_format *const *readers; /* more formats read by
                                   Content-Type (NULL-terminated), or
                                   NULL */
    atomic_bool need_setup;     /* stream and consumer to be declared
                                   again (after a reconnect, or JetStream
                                   said they are gone); release/acquire */
    atomic_bool setup_said;     /* a reason for need_setup was said on
                                   the log: its outcome is said too;
                                   relaxed (ordered by need_setup) */
    int64_t setup_at;           /* next attempt (dispatch thread only) */
    int64_t setup_backoff;      /* ns; doubles per failure (dispatch) */
    atomic_bool consuming;      /* seda_remote_consume was called */
    atomic_bool closing;        /* the bus is being freed */

    seda__mutex_t pmu;
    pthread_cond_t room;        /* a window slot came free */
    int inflight;               /* records: sent, not yet settled */
    int reserved;               /* slots held by publishers */
    int waiters;                /* publishers waiting for room */
    uint64_t next_n;
    struct rpub_rec **hash;     /* by n; hmask + 1 buckets */
    uint32_t hmask;
    struct rpub_rec *head;      /* oldest send first */
    struct rpub_rec *tail;

    seda__mutex_t fmu;
    int held;                   /* taken in, not yet settled */
    int outstanding;            /* asked for, not yet delivered or ended */
    struct rreq reqs[RS_REQS];  /* the last requests, by n % RS_REQS */
    uint64_t req_n;             /* requests sent */
    uint64_t epoch_n;           /* requests up to this one are void (sent
                                   before the last reconnect) */
    int64_t last_expires;       /* when the last request sent expires */
    int64_t info_at;            /* last consumer info request */
    struct rheld *hheld[RS_HELD_BUCKETS]; /* held messages by sseq */
    double rate;                /* settled a second (moving average; 0:
                                   not known yet) */
    int rate_n;                 /* settled since rate_at */
    int64_t rate_at;            /* start of the current count */

    seda__mutex_t cmu;          /* guards csend, ncsend, csend_n */
    struct rcsend *csend;       /* completions awaiting their "+OK" */
    int ncsend;
    uint64_t csend_n;

    /* Envelopes taken in and not yet admitted: the dispatch thread gathers
     * those that arrive together and admits them in one step (intake.c).
     * Dispatch thread only. */
    seda_env_t *gather[RS_GATHER];
    int ngather;

    atomic_uint_fast64_t published, duplicates, publish_failed, republished;
    atomic_uint_fast64_t fetched, acked, naked, termed, bad_messages;
    atomic_uint_fast64_t completions_sent, completions_received;
    atomic_uint_fast64_t completions_dropped, completions_lost;
    atomic_uint_fast64_t completions_resent, completions_too_large;
    atomic_uint_fast64_t completions_unacked;
    atomic_uint_fast64_t redeclared;   /* stream or consumer made again */
    atomic_uint_fast64_t held_twice;   /* a copy of a held message came
                                          again: not handled twice */
    atomic_uint_fast64_t in_progress;  /* +WPI sent */
    atomic_uint_fast64_t progress;  /* anything settled: the idle scan's */
    atomic_int awaiting;            /* on_complete callbacks awaited */
    _Atomic int64_t js_pending, js_ack_pending, js_redelivered, js_waiting;
    _Atomic int64_t js_at;          /* when those came (ns), 0 = never */
};

/* ---- declare.c ---- */

/* Mark rs's stream and consumer to be declared again (why: for the
 * report); the next tick does it, with backoff while it fails.  While
 * marked, re-sends wait and no pull request goes out.  Any thread. */
void seda__rstage_need_setup(struct rstage *rs, const char *why);
/* Dispatch thread: declare them again if marked and due. */
void seda__rstage_setup_tick(struct rstage *rs, int64_t now);

/* ---- pub.c ---- */

/* Hold a window slot for one message: waits for room under the block
 * policy until the deadline (a managed block on a pool worker), or
 * refuses (SEDA_EFULL, SEDA_EDROPPED, SEDA_ETIMEDOUT, SEDA_ECLOSED).
 * Takes pmu. */
int seda__rpub_reserve(struct rstage *rs, int64_t deadline_ns);
void seda__rpub_unreserve(struct rstage *rs);

/* The number for the next message's reply subject. */
uint64_t seda__rpub_next(struct rstage *rs);

/* Send msg (its reply subject made with n) under a held slot: 0 (msg is
 * taken; seda__rstage_published reports its end), or SEDA_EUNAVAIL or
 * SEDA_ETOOLARGE (over the server's max_payload) (the slot is given
 * back; the caller keeps msg). */
int seda__rpub_send(struct rstage *rs, natsMsg *msg, uint64_t n,
                    int64_t deadline_ns, bool user_dup, void *ud);

/* From the dispatch thread: a reply to message n; a tick (re-sends what
 * waited too long, gives up past deadlines).  From cnats's callback
 * thread: the connection is back (re-sends everything out). */
void seda__rpub_on_reply(struct rstage *rs, uint64_t n, natsMsg *reply);
void seda__rpub_tick(struct rstage *rs, int64_t now);
void seda__rpub_reconnect(struct rstage *rs);

/* Give up on every message out (bus freed).  Their owners hear of it. */
void seda__rpub_close(struct rstage *rs);

/* How a message ended, for rstage.c (no lock held): 0 stored, 1 stored
 * before (a duplicate of the publisher's own earlier message), or a
 * negative code with why.  Takes the record's ud.  last: the window was
 * empty after it (the bus's idle waiters are told). */
void seda__rstage_published(struct rstage *rs, void *ud, int result,
                            const char *why, bool last);

/* ---- feed.c ---- */

enum { RF_ACK, RF_NAK, RF_TERM };

/* Ask for as many messages as the stage has room for (no lock held; any
 * thread).  Nothing is asked while the connection is down, the stage
 * does not consume, or the bus is closing. */
void seda__rfeed_request(struct rstage *rs);

/* Dispatch thread: a message for the stage's consumer (takes m), the
 * status that ended pull request n, a tick, the consumer info reply. */
void seda__rfeed_on_js(struct rstage *rs, natsMsg *m,
                       const struct rjs_meta *meta);
void seda__rfeed_on_status(struct rstage *rs, uint64_t n, natsMsg *m);
void seda__rfeed_tick(struct rstage *rs, int64_t now);
void seda__rfeed_on_info(struct rstage *rs, natsMsg *m);
/* cnats's callback thread: requests sent before the outage are void. */
void seda__rfeed_reconnect(struct rstage *rs);

/* Settle a message taken in: ack, nak (redelivered after delay_ns) or
 * term, sent to its reply subject (buffered while the connection is
 * reconnecting); then ask for more.  Any thread. */
void seda__rfeed_settle(struct rstage *rs, const char *reply, int how,
                        int64_t delay_ns);

/* Forget every held message (the stage closes). */
void seda__rfeed_close(struct rstage *rs);

/* Ask JetStream for the consumer's counts when those held are older
 * than half a second (the reply comes to the dispatch thread). */
void seda__rfeed_refresh_info(struct rstage *rs);

/* ---- rstage.c: the hooks, and envelopes taken in ---- */

/* The remote state of an envelope taken in from JetStream: its done
 * callback's argument (seda__rctx_done).  Owned by the envelope until
 * the callback runs, or by a message record once the envelope went on to
 * a remote stage. */
struct rctx {
    struct rstage *rs;          /* the stage that took it in */
    char *reply;                /* its receipt, until settled or claimed */
    char *origin;               /* completion subject, or NULL */
    uint32_t rhop;              /* remote hops so far */
};
void seda__rctx_free(struct rctx *c);
void seda__rctx_done(seda_env_t *env, int outcome, void *ud);

/* The table the core calls (core/remote.h). */
extern const struct seda__remote_ops seda__rstage_ops;

/* Free rs's memory (its locks and names). */
void seda__rstage_free(struct rstage *rs);

/* ---- intake.c ---- */

/* Take m (a message for the consumer, counted held) in as an envelope
 * and admit it into the stage, or settle it at once (the bus is closing:
 * nak; not a seda envelope: dead-lettered with reason bad_message, and
 * termed).  Dispatch thread; no lock held. */
void seda__rstage_intake(struct rstage *rs, natsMsg *m,
                         const struct rjs_meta *meta);
/* Admit what the intake gathered (dispatch thread; and when the stage
 * closes, after the dispatch thread let go of it). */
void seda__rstage_intake_flush(struct rstage *rs);

/* ---- complete.c ---- */

/* The connection's table of itineraries that left this process with a
 * done callback (on_complete), by remote id. */
struct rcomp *seda__rcomp_new(void);
void seda__rcomp_free(struct rconn *c);

/* Await the completion of rid (published through rs; local_id is the id
 * the publisher knows): done(env, outcome, ud) fires when it comes, or
 * with SEDA_DROPPED when it is cancelled or the stage closes.  Returns a
 * serial that names the entry (0: out of memory or no randomness,
 * nothing registered), and the entry's secret (32 hex digits) into
 * secret: the message's origin is "<inbox>.c.<secret>". */
uint64_t seda__rcomp_await(struct rconn *c, struct rstage *rs,
                           const char *rid, const char *local_id,
                           seda_done_fn done, void *ud, char secret[33]);
/* Is origin a completion subject of the one form seda sends
 * ("_INBOX.<token>.c.<32 hex digits>")?  A message naming any other is
 * not taken in. */
bool seda__rcomp_origin_ok(const char *origin);
/* End the entry (rid, serial) with outcome, unless its completion came
 * first; returns whether it did.  No lock held. */
bool seda__rcomp_cancel(struct rconn *c, const char *rid, uint64_t serial,
                        int outcome);
/* Dispatch thread: a completion message ("<inbox>.c.<secret>"; secret
 * "" for any other form): taken only by the entry of that secret and
 * id, answered "+OK" on its reply subject when it was (or was before). */
void seda__rcomp_on_msg(struct rconn *c, natsMsg *m, const char *secret);
/* Remove the entry (rid, serial) without firing it (its message was not
 * sent after all). */
void seda__rcomp_forget(struct rconn *c, const char *rid, uint64_t serial);
/* End every entry of rs with SEDA_DROPPED (its bus is freed). */
void seda__rcomp_close_stage(struct rconn *c, struct rstage *rs);

/* Send a completion to origin for an envelope rs took in (counted in
 * completions_sent) and keep it until the origin answers "+OK" (its
 * reply "<inbox>.<sid>.x.<n>"): re-sent every second, given up after
 * 60 s or when nobody listened four times (the origin is gone), counted
 * in completions_dropped and reported on stderr.  One whose payload is
 * over the server's max_payload goes as a dead letter with reason
 * too_large instead.  Any thread; never blocks. */
void seda__rcomp_send(struct rstage *rs, const char *origin,
                      const struct rw_done *d);
/* Dispatch thread: the answer to completion n; a tick (re-sends). */
void seda__rcomp_on_reply(struct rstage *rs, uint64_t n, natsMsg *m);
void seda__rcomp_tick(struct rstage *rs, int64_t now);
/* Completions of rs not yet acknowledged? (the idle check) */
bool seda__rcomp_sending(struct rstage *rs);
/* Forget them (the stage closes). */
void seda__rcomp_close_sends(struct rstage *rs);

#endif /* SEDA_REMOTE_INT_H */
