/* SPDX-License-Identifier: MIT */
/*
 * rstage.c -- a remote stage: declaring it (include/seda_remote.h), and
 * the hooks the core calls for it (core/remote.h): an envelope entering
 * it goes to JetStream; an envelope taken in from JetStream is settled
 * there.
 *
 * DESIGN
 *   Identity.  An envelope's id is unique within its process; across
 *   processes it travels as its remote id: its custom id when it has one
 *   (a durable or remote publish's `id`, or an envelope taken in, whose
 *   id is already remote), else "<nuid>:<seq>" with the connection's
 *   nuid.  The message's Nats-Msg-Id is the remote id on its first
 *   remote hop and "<rid>#<hop>" on later ones, so the same envelope can
 *   visit several remote stages (JetStream deduplicates per stream) and a
 *   re-send or a redelivered source's re-publish of one hop is stored
 *   once.
 *
 *   Entering (any thread: a publisher, or the worker routing a hop).
 *   Refused at once ("unavailable") while the connection is down; else a
 *   window slot (pub.c), the message built (wire.c), and the envelope's
 *   done callback moved out of it: a publisher's on_complete into the
 *   connection's completion table (complete.c), or, for an envelope this
 *   process took in from another remote stage, its remote state (struct
 *   rctx) into the message's record.  The envelope itself is freed once
 *   the message is sent; the record reports the end (published below).
 *
 *   Taking in (the dispatch thread, feed.c): the message decoded, an
 *   envelope made with its remote state as its done callback's argument
 *   (its receipt: the reply subject to ack, nak or term; the origin's
 *   completion subject), admitted into the stage's queue.  Garbage is
 *   dead-lettered with reason bad_message and termed.
 *
 *   Settling (the worker that delivered it).  ack: the envelope is routed
 *   on as any ack is (seda__route_ack), and the source message is
 *   acked afterwards -- unless the next hop is itself a remote stage,
 *   which claims the receipt and acks the source only once JetStream
 *   stored the hop (so a crash between the two loses nothing).  nack with
 *   attempts left: nak, with the stage's retry delay; JetStream
 *   redelivers it, to any process.  Out of attempts (max_deliver): term,
 *   and the envelope is dead-lettered locally as any other.
 *
 *   Ending (the envelope's done callback, rctx_done): an envelope that
 *   is still in the stage that took it in (a shutdown swept it) is given
 *   back with a nak; otherwise its origin, if it asked, hears how the
 *   itinerary ended (complete.c).
 *
 *   Accounting (per process): a publish into a remote stage counts as
 *   accepted; once JetStream stored it the itinerary has left this
 *   process (handed_off); taking a message in is a new acceptance here; a
 *   nak hands it back.  So accepted == completed + dead_lettered +
 *   dropped + handed_off + in_system holds in every process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "remote_int.h"

/* ---- an envelope taken in ---- */

void seda__rctx_free(struct rctx *c)
{
    if (!c)
        return;
    seda__free(c->reply);
    seda__free(c->origin);
    seda__free(c);
}

/* A settling worker offers the receipt of the envelope it routes to a
 * remote hop reached on the same thread (saved and restored around
 * nested routing). */
struct claim {
    const seda_env_t *env;
    char *reply;                /* taken by the hop, or acked after */
    struct rstage *rs;
};
static _Thread_local struct claim *tls_claim;

/* ---- a message out: a pub.c record's argument ---- */

struct rmsg {
    struct rstage *rs;          /* the stage published into */
    bool dead;                  /* a dead letter: its end is counted */
    struct rctx *ctx;           /* the envelope's remote state, or NULL */
    char *src_reply;            /* the message it came from: ack once
                                   stored, nak if given up; or NULL */
    struct rstage *src_rs;
    char rid[SEDA_ID_MAX];
    uint64_t serial;            /* its completion entry, or 0 */
};

static void rid_of(struct rstage *rs, const seda_env_t *env, char *rid)
{
    if (env->ext && env->ext->id)
        snprintf(rid, SEDA_ID_MAX, "%s", env->ext->id);
    else
        snprintf(rid, SEDA_ID_MAX, "%s:%llu", rs->conn->token,
                 (unsigned long long)env->seq);
}

/* Build the message for env (docs/wire.md) to subject, with reply (or
 * NULL) and Nats-Msg-Id msgid_in (NULL: the remote id, "#<hop>" after
 * the first hop): 0, SEDA_ETYPE (the stage's format cannot carry the
 * payload: why says so), or another code. */
static int build(struct rstage *rs, const seda_env_t *env, const char *rid,
                 uint32_t rhop, const char *origin, const char *subject,
                 const char *reply, const char *msgid_in, natsMsg **out,
                 char *why, size_t whylen)
{
    int ns = seda_env_slip_count(env), nh = seda_env_header_count(env);
    const char *small[32];
    size_t want = (size_t)ns + 2 * (size_t)nh;
    const char **a = want <= 32 ? small
                                : seda__malloc(sizeof *a * (want ? want : 1));
    if (!a)
        return SEDA_ENOMEM;
    const char **slip = a, **hdr = a + ns;
    for (int i = 0; i < ns; i++)
        slip[i] = seda_env_slip_at(env, i);
    for (int i = 0; i < nh; i++)
        seda_env_header_at(env, i, &hdr[2 * i], &hdr[2 * i + 1]);
    size_t plen;
    const void *p = seda_env_payload(env, &plen);
    void *body = NULL;
    size_t blen = 0;
    int kind = seda_env_payload_kind(env);
    if (rs->format && rs->format->encode(kind, p, plen, &body, &blen, why,
                                         whylen) != 0) {
        if (a != small)
            seda__free(a);
        return SEDA_ETYPE;
    }
    struct rw_env w = {
        .id = rid, .origin = origin, .sender = seda_env_sender(env),
        .content_type = rs->format ? rs->format->content_type : NULL,
        .kind = kind,
        .priority = seda_env_priority(env),
        .attempts = seda_env_attempts(env), .rhop = rhop, .nslip = ns,
        .slip = slip, .payload = body ? body : p, .plen = body ? blen : plen,
    };
    char msgid[SEDA_ID_MAX + 16];
    if (rhop == 1)
        snprintf(msgid, sizeof msgid, "%s", rid);
    else
        snprintf(msgid, sizeof msgid, "%s#%u", rid, rhop);
    if (!msgid_in)
        msgid_in = msgid;
    int rc = seda__rw_msg_new(out, subject, reply, msgid_in, &w, nh, hdr);
    if (a != small)
        seda__free(a);
    free(body);                         /* the format's, with malloc */
    return rc;
}

/* ---- the core's hooks ---- */

/* msg is over the server's max_payload: say so on stderr, and on env (its
 * caller still owns it: a hop's dead letter carries the detail). */
static void too_large(struct rstage *rs, seda_env_t *env, natsMsg *msg)
{
    int64_t limit = natsConnection_GetMaxPayload(rs->conn->nc);
    size_t plen = 0;
    seda_env_payload(env, &plen);
    char why[200];
    snprintf(why, sizeof why, "too_large: the message (payload %zu bytes, "
             "%d with seda's fields) is over the server's max_payload of "
             "%lld bytes", plen, natsMsg_GetDataLength(msg),
             (long long)limit);
    (void)seda_env_set_header(env, "x-dead-detail", why);
    seda_stage_report(rs->st, why);
}

static int remote_enter(struct seda_stage_s *st, seda_env_t *env,
                        double timeout, bool hop)
{
    struct rstage *rs = seda__stage_remote_ctx(st);
    int64_t deadline = seda__publish_deadline(rs->bus, timeout);
    if (!seda__rconn_up(rs->conn) && hop &&
        !atomic_load_explicit(&rs->closing, memory_order_acquire)) {
        /* A hop waits out a reconnect up to its timeout (hop_timeout), as
         * a hop into a full stage waits for room: a broker blip is not a
         * reason to dead-letter (and a durable source keeps its row
         * meanwhile).  A worker lends its thread while it waits. */
        struct seda_pool *loaned = seda__pool_current_owner()
                                       ? seda__pool_loan_block_begin() : NULL;
        seda__rconn_wait_up(rs->conn, deadline);
        seda__pool_loan_block_end(loaned);
    }
    if (!seda__rconn_up(rs->conn)) {
        seda__stage_count_dropped(st);      /* a refusal, as any other */
        if (hop)
            (void)seda_env_set_header(env, "x-dead-detail", "unavailable: "
                                      "the NATS server was not reachable "
                                      "within hop_timeout");
        return SEDA_EUNAVAIL;
    }
    int rc = seda__rpub_reserve(rs, deadline);
    if (rc)
        return rc;
    struct rmsg *m = seda__calloc(1, sizeof *m);
    if (!m) {
        seda__rpub_unreserve(rs);
        return SEDA_ENOMEM;
    }
    m->rs = rs;
    m->dead = env->flags & ENV_DEAD;
    struct rctx *ctx = env->done == seda__rctx_done ? env->done_ud : NULL;
    rid_of(rs, env, m->rid);
    uint32_t rhop = ctx ? ctx->rhop + 1 : 1;
    char origin[128];
    if (env->done && !ctx) {
        /* Registered before the send: the completion may overtake the
         * PubAck.  Its secret names the completion's subject. */
        char local[SEDA_ID_MAX], secret[33];
        m->serial = seda__rcomp_await(rs->conn, rs, m->rid,
                                      seda_env_id(env, local), env->done,
                                      env->done_ud, secret);
        if (!m->serial)
            rc = SEDA_ENOMEM;
        snprintf(origin, sizeof origin, "%s.c.%s", rs->conn->inbox,
                 m->serial ? secret : "");
    }
    const char *og = ctx ? ctx->origin : env->done ? origin : NULL;
    uint64_t n = seda__rpub_next(rs);
    natsMsg *msg = NULL;
    char why[240], reply[128];
    seda__rconn_reply(rs->conn, rs->sid, 'a', n, true, reply, sizeof reply);
    if (rc == 0)
        rc = build(rs, env, m->rid, rhop, og, rs->subject, reply, NULL, &msg,
                   why, sizeof why);
    struct claim *cl = tls_claim && tls_claim->env == env ? tls_claim : NULL;
    if (rc == 0) {
        m->ctx = ctx;
        if (cl) {
            m->src_reply = cl->reply;
            m->src_rs = cl->rs;
        }
        /* Settling an accepted message may take longer than the wait for
         * room: a hop gets the stage's publish timeout too. */
        int64_t settle = seda__now_ns() +
                         seda__secs_to_ns(seda__stage_publish_timeout(st));
        bool user_dup = !hop && rhop == 1 && env->ext && env->ext->id;
        rc = seda__rpub_send(rs, msg, n, settle > deadline ? settle
                                                          : deadline,
                             user_dup, m);
    } else {
        seda__rpub_unreserve(rs);
    }
    if (rc) {
        if (rc == SEDA_ETOOLARGE)
            too_large(rs, env, msg);
        if (rc == SEDA_ETYPE) {
            /* A check (the binding's) normally refuses it first. */
            (void)seda_env_set_header(env, "x-dead-detail", why);
            seda_stage_report(st, why);
        }
        natsMsg_Destroy(msg);
        if (m->serial)      /* not sent: env keeps its done callback */
            seda__rcomp_forget(rs->conn, m->rid, m->serial);
        seda__free(m);
        if (rc == SEDA_EUNAVAIL || rc == SEDA_ETOOLARGE)
            seda__stage_count_dropped(st);
        return rc;
    }
    /* Sent: the record owns what the envelope carried. */
    if (cl)
        cl->reply = NULL;
    env->done = NULL;
    env->done_ud = NULL;
    if (!hop)
        seda__stage_count_remote(st, SEDA__REMOTE_ACCEPTED);
    seda__env_free(env);
    return 0;
}

void seda__rstage_published(struct rstage *rs, void *ud, int result,
                            const char *why, bool last)
{
    struct rmsg *m = ud;
    struct seda_stage_s *st = rs->st;
    char msg[320];
    if (result >= 0) {
        atomic_fetch_add_explicit(result ? &rs->duplicates : &rs->published,
                                  1, memory_order_relaxed);
        if (m->src_reply)
            seda__rfeed_settle(m->src_rs, m->src_reply, RF_ACK, 0);
        if (result == 1) {
            /* The publisher's repeat of an id JetStream already holds:
             * not stored again, so this itinerary ends here, dropped. */
            if (!m->dead)
                seda__stage_count_remote(st, SEDA__REMOTE_LOST);
            if (m->serial)
                seda__rcomp_cancel(rs->conn, m->rid, m->serial,
                                   SEDA_DROPPED);
        } else if (!m->dead) {
            seda__stage_count_remote(st, SEDA__REMOTE_HANDED);
        }
    } else if (m->src_reply) {
        /* A hop from a message taken in: give that message back, so it is
         * handled again (by any process) and the hop re-sent. */
        atomic_fetch_add_explicit(&rs->publish_failed, 1,
                                  memory_order_relaxed);
        seda__rfeed_settle(m->src_rs, m->src_reply, RF_NAK, 0);
        if (!m->dead)
            seda__stage_count_remote(st, SEDA__REMOTE_HANDED);
        snprintf(msg, sizeof msg, "a hop into this stage failed (%s); the "
                 "message it came from is given back to JetStream", why);
        seda_stage_report(st, msg);
    } else {
        atomic_fetch_add_explicit(&rs->publish_failed, 1,
                                  memory_order_relaxed);
        if (!m->dead)
            seda__stage_count_remote(st, SEDA__REMOTE_LOST);
        if (m->serial)
            seda__rcomp_cancel(rs->conn, m->rid, m->serial, SEDA_DROPPED);
        if (m->ctx && m->ctx->origin) {
            struct rw_done d = { .outcome = SEDA_DROPPED, .id = m->rid,
                                 .stage = seda_stage_name(st) };
            seda__rcomp_send(rs, m->ctx->origin, &d);
        }
        snprintf(msg, sizeof msg, "a message was given up and counted "
                 "dropped: %s", why);
        seda_stage_report(st, msg);
    }
    seda__free(m->src_reply);
    seda__rctx_free(m->ctx);
    seda__free(m);
    if (last)
        seda__bus_idle_notify(rs->bus);     /* nothing awaits JetStream */
}

/* ---- results on a plain subject: "nats:<subject>" hops ---- */

/* env's payload (in rs's format), its id, Content-Type and user headers
 * and what is left of its slip, published to subject with a core NATS
 * publish (no origin: it is the secret of the completion's subject).
 * 0, or a negative code with why. */
static int nats_out(struct rstage *rs, const seda_env_t *env,
                    const char *subject, char *why, size_t whylen)
{
    char rid[SEDA_ID_MAX];
    rid_of(rs, env, rid);
    natsMsg *m = NULL;
    /* Its own dedup id: a stream that keeps the subject stores it once,
     * and never takes it for the envelope's stage message. */
    char msgid[SEDA_ID_MAX + SEDA_NAME_MAX + 8];
    snprintf(msgid, sizeof msgid, "%s@%s", rid, subject);
    int rc = build(rs, env, rid, 1, NULL, subject, NULL, msgid, &m, why,
                   whylen);
    if (rc == 0 && natsConnection_PublishMsg(rs->conn->nc, m) != NATS_OK) {
        snprintf(why, whylen, "nats:%s: the NATS server is not reachable",
                 subject);
        rc = SEDA_EUNAVAIL;
    } else if (rc != 0 && rc != SEDA_ETYPE) {
        snprintf(why, whylen, "nats:%s: %s", subject, seda_strerror(rc));
    }
    natsMsg_Destroy(m);
    return rc;
}

bool seda__reach_valid(const char *pat)
{
    if (!pat || !*pat)
        return false;
    const char *p = pat;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0)
            return false;               /* an empty token */
        if (n == 1 && (*p == '*' || *p == '>')) {
            if (*p == '>' && dot)
                return false;           /* ">" is last */
        } else {
            for (size_t i = 0; i < n; i++) {
                char c = p[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      c == ':'))
                    return false;
            }
        }
        if (!dot)
            return true;
        p = dot + 1;
    }
}

bool seda_remote_reach_valid(const char *pat)
{
    return seda__reach_valid(pat);
}

bool seda__reach_match(const char *pat, const char *subject)
{
    const char *p = pat, *s = subject;
    for (;;) {
        const char *pd = strchr(p, '.'), *sd = strchr(s, '.');
        size_t pn = pd ? (size_t)(pd - p) : strlen(p);
        size_t sn = sd ? (size_t)(sd - s) : strlen(s);
        if (pn == 1 && *p == '>')
            return sn > 0;              /* one or more tokens left */
        if (!(pn == 1 && *p == '*') && (pn != sn || memcmp(p, s, pn) != 0))
            return false;
        if (!pd || !sd)
            return !pd && !sd;          /* both end here */
        p = pd + 1;
        s = sd + 1;
    }
}

/* Whether a nats: hop after rs may publish to SUBJECT (HOP is
 * "nats:<subject>"): a subject this program's own slips name, or one the
 * stage's reach lists.  A slip that came in a message names any subject
 * its sender chose, and the hop publishes with this process's
 * credentials. */
static bool reach_ok(struct rstage *rs, const char *hop, const char *subject)
{
    if (seda__bus_own_hop(rs->bus, hop))
        return true;
    for (int i = 0; i < rs->nreach; i++)
        if (seda__reach_match(rs->reach[i], subject))
            return true;
    return false;
}

/* Publish env's leading "nats:" hops (popping them), then route it on
 * as any ack (the itinerary completes when nothing is left).  A hop that
 * cannot be published, or may not (out of the stage's reach),
 * dead-letters the envelope (hop_refused, with x-dead-detail). */
static void route_nats(struct rstage *rs, seda_env_t *env,
                       struct stage_counters *tally)
{
    const char *next;
    while ((next = seda_env_slip_at(env, 0)) &&
           strncmp(next, "nats:", 5) == 0) {
        char subject[SEDA_NAME_MAX + 1], why[240];
        snprintf(subject, sizeof subject, "%s", next + 5);
        bool ok = reach_ok(rs, next, subject);
        seda__env_slip_pop(env);
        if (!ok) {
            snprintf(why, sizeof why, "nats:%s: the subject is out of the "
                     "reach of stage '%s' (remote.reach lists where a slip that "
                     "came in a message may send results; this program's "
                     "own slips may send anywhere)", subject,
                     seda_stage_name(rs->st));
            (void)seda_env_set_header(env, "x-dead-detail", why);
            seda_stage_report(rs->st, why);
            seda__route_dead_letter(rs->st, env, "hop_refused", tally);
            return;
        }
        if (nats_out(rs, env, subject, why, sizeof why) != 0) {
            (void)seda_env_set_header(env, "x-dead-detail", why);
            seda_stage_report(rs->st, why);
            seda__route_dead_letter(rs->st, env, "hop_refused", tally);
            return;
        }
    }
    seda__route_ack(rs->st, env, tally);
}

/* The delay of a nak: the stage's retry backoff before the
 * next attempt, as a local retry would wait; 0 without one. */
static int64_t retry_delay_ns(struct seda_stage_s *st, int attempts)
{
    return seda__route_backoff_ns(st, attempts + 1);
}

static void remote_settle(struct seda_stage_s *st, seda_env_t *env, int res,
                          struct stage_counters *tally)
{
    struct rstage *rs = seda__stage_remote_ctx(st);
    struct rctx *ctx = env->done == seda__rctx_done ? env->done_ud : NULL;
    char *reply = ctx ? ctx->reply : NULL;
    if (ctx)
        ctx->reply = NULL;
    if (res == DR_RETRY && seda_env_attempts(env) >= rs->max_attempts)
        res = DR_DEAD_MAX;              /* JetStream would not redeliver */
    if (res == DR_ACK) {
        tally->delivered++;
        struct claim c = { env, reply, rs };
        struct claim *saved = tls_claim;
        tls_claim = &c;
        route_nats(rs, env, tally);
        tls_claim = saved;
        if (c.reply)
            seda__rfeed_settle(rs, c.reply, RF_ACK, 0);
        seda__free(c.reply);
    } else if (res == DR_RETRY) {
        tally->nacked++;
        tally->it_remote++;             /* given back to JetStream */
        if (reply)
            seda__rfeed_settle(rs, reply, RF_NAK,
                               retry_delay_ns(st, seda_env_attempts(env)));
        seda__free(reply);
        env->done = NULL;
        seda__rctx_free(ctx);
        seda__env_free(env);
    } else {
        if (res == DR_DEAD_MAX)
            tally->nacked++;
        if (reply)
            seda__rfeed_settle(rs, reply, RF_TERM, 0);
        seda__free(reply);
        seda__route_dead_letter(st, env, res == DR_DEAD_MAX ? "max_attempts"
                                                          : "no_consumers",
                                tally);
    }
}

static bool remote_idle(struct seda_stage_s *st, uint64_t *sum)
{
    struct rstage *rs = seda__stage_remote_ctx(st);
    seda__mutex_lock(&rs->pmu);
    bool idle = rs->inflight == 0 && rs->reserved == 0;
    seda__mutex_unlock(&rs->pmu);
    /* Taken in and not settled: queued, being handled, or still gathered
     * by the dispatch thread. */
    seda__mutex_lock(&rs->fmu);
    if (rs->held > 0)
        idle = false;
    seda__mutex_unlock(&rs->fmu);
    if (atomic_load_explicit(&rs->awaiting, memory_order_relaxed) > 0)
        idle = false;
    if (seda__rcomp_sending(rs))        /* a completion not yet taken */
        idle = false;
    *sum += atomic_load_explicit(&rs->progress, memory_order_relaxed);
    return idle;
}

void seda__rstage_free(struct rstage *rs)
{
    for (int i = 0; i < rs->nreach; i++)
        seda__free(rs->reach[i]);
    seda__free(rs->reach);
    seda__free(rs->stream);
    seda__free(rs->subject);
    seda__free(rs->consumer);
    pthread_cond_destroy(&rs->room);
    seda__mutex_destroy(&rs->pmu);
    seda__mutex_destroy(&rs->fmu);
    seda__mutex_destroy(&rs->cmu);
    seda__free(rs);
}

static void remote_close(struct seda_stage_s *st)
{
    struct rstage *rs = seda__stage_remote_ctx(st);
    atomic_store_explicit(&rs->closing, true, memory_order_release);
    seda__rconn_detach(rs->conn, rs->sid);   /* no more callbacks */
    seda__rstage_intake_flush(rs);           /* nothing left gathered */
    seda__rpub_close(rs);
    seda__rfeed_close(rs);
    seda__rcomp_close_sends(rs);
    seda__rcomp_close_stage(rs->conn, rs);
    seda__rconn_put(rs->conn);
    seda__rstage_free(rs);
}

const struct seda__remote_ops seda__rstage_ops = {
    .enter = remote_enter,
    .settle = remote_settle,
    .idle = remote_idle,
    .close = remote_close,
};

/* ---- ending an envelope taken in (its done callback) ---- */

void seda__rctx_done(seda_env_t *env, int outcome, void *ud)
{
    struct rctx *ctx = ud;
    struct rstage *rs = ctx->rs;
    if (ctx->reply) {
        /* Never handled here (a shutdown swept it): give it back. */
        seda__rfeed_settle(rs, ctx->reply, RF_NAK, 0);
    } else if (ctx->origin) {
        char id[SEDA_ID_MAX];
        int nh = outcome == SEDA_COMPLETED ? seda_env_header_count(env) : 0;
        const char *small[32];
        const char **hdr = nh <= 16 ? small
                                    : seda__malloc(sizeof *hdr * 2 *
                                                   (size_t)nh);
        if (!hdr)
            nh = 0, hdr = small;
        for (int i = 0; i < nh; i++)
            seda_env_header_at(env, i, &hdr[2 * i], &hdr[2 * i + 1]);
        size_t plen = 0;
        const void *p = outcome == SEDA_COMPLETED
                            ? seda_env_payload(env, &plen) : NULL;
        struct rw_done d = {
            .outcome = outcome, .kind = seda_env_payload_kind(env),
            .id = seda_env_id(env, id), .stage = seda_env_to(env),
            .sender = outcome == SEDA_COMPLETED ? seda_env_sender(env)
                                                : NULL,
            .nh = nh, .hdr = hdr, .payload = p, .plen = plen,
        };
        if (!d.stage)
            d.stage = seda_stage_name(rs->st);
        seda__rcomp_send(rs, ctx->origin, &d);
        if (hdr != small)
            seda__free(hdr);
    }
    seda__rctx_free(ctx);
}
