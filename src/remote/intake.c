/* SPDX-License-Identifier: MIT */
/*
 * intake.c -- a message from a remote stage's consumer becomes an
 * envelope in the stage's queue.
 *
 * DESIGN
 *   Runs on the connection's dispatch thread, one message at a time.  The
 *   body is decoded (wire.c) and the NATS headers unescaped; the envelope
 *   gets the message's remote id as its id, JetStream's delivery count
 *   as its attempts, and its remote state (receipt, origin, hop count:
 *   struct rctx) as its done callback's argument, then enters the stage's
 *   queue like a first publish (counted accepted here).  Messages that
 *   arrive together (JetStream answers a pull request with a burst) are
 *   gathered and admitted in one step when the connection has nothing
 *   more queued for this thread, so a burst wakes the stage's drain task
 *   once, not once per message.  The capacity
 *   cannot be exceeded by what was asked for (feed.c keeps held +
 *   outstanding within it), so admission does not wait; if it refuses
 *   anyway (the bus closing, a message beyond the room) the message is
 *   given back with a nak and the next process takes it.
 *
 *   A typed stage's check (accepts) runs here too: a message from
 *   another publisher that breaks the type is dead-lettered with reason
 *   type (x-dead-detail saying why) and termed, never handled.
 *
 *   A message that is not a seda envelope of a version this build reads
 *   -- anyone may publish on the stage's subject -- is never handed to a
 *   handler: its bytes become the payload of an envelope (kind raw, its
 *   headers as they came) that is dead-lettered with reason bad_message
 *   and an x-dead-detail header saying what was wrong, and the message
 *   is termed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "remote_int.h"

/* The message's headers as key, value pairs, every one as it came (the
 * first value of each).  The strings live in *b; *kv (owned, seda__free)
 * points into it.  Returns the number of pairs (0 out of memory). */
static int raw_headers(natsMsg *m, struct rbuf *b, const char ***kv)
{
    const char **keys = NULL;
    int nk = 0;
    *kv = NULL;
    if (natsMsgHeader_Keys(m, &keys, &nk) != NATS_OK || nk == 0)
        return 0;
    size_t *off = seda__calloc((size_t)nk * 2, sizeof *off);
    int n = 0, rc = 0;
    for (int i = 0; off && i < nk && rc == 0; i++) {
        const char *v = NULL;
        if (natsMsgHeader_Get(m, keys[i], &v) != NATS_OK || !v)
            continue;
        off[2 * n] = b->len;
        rc = seda__rbuf_put(b, keys[i], strlen(keys[i]) + 1);
        off[2 * n + 1] = b->len;
        rc = rc ? rc : seda__rbuf_put(b, v, strlen(v) + 1);
        n++;
    }
    free((void *)keys);                 /* cnats allocates it with malloc */
    const char **out = off && rc == 0
                           ? seda__calloc((size_t)(n ? 2 * n : 1),
                                          sizeof *out) : NULL;
    for (int i = 0; out && i < 2 * n; i++)
        out[i] = (const char *)b->p + off[i];
    seda__free(off);
    *kv = out;
    return out ? n : 0;
}

/* Not an envelope: dead-letter its bytes with reason bad_message. */
static void bad_message(struct rstage *rs, natsMsg *m,
                        const struct rjs_meta *meta, const char *why,
                        const struct rw_env *w)
{
    struct seda_stage_s *st = rs->st;
    struct rbuf hb = { 0 };
    const char **kv = NULL;
    int nh = raw_headers(m, &hb, &kv);
    char id[SEDA_ID_MAX];
    snprintf(id, sizeof id, "%s:%llu", rs->stream,
             (unsigned long long)meta->sseq);
    /* Its metadata was read, and it names a seda origin (a seda process
     * published it, the body is what failed): that origin hears of the
     * dead letter, by the id it awaits. */
    struct rctx *ctx = NULL;
    if (w && w->origin && seda__rcomp_origin_ok(w->origin) &&
        (ctx = seda__calloc(1, sizeof *ctx)) &&
        !(ctx->origin = seda__strdup(w->origin))) {
        seda__free(ctx);
        ctx = NULL;
    }
    if (ctx) {
        ctx->rs = rs;
        ctx->rhop = w->rhop;
    }
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.id = ctx ? w->id : id;
    o.headers = kv;
    o.nheaders = nh;
    int rc;
    seda_env_t *env = seda__env_new(natsMsg_GetData(m),
                                    (size_t)natsMsg_GetDataLength(m), &o,
                                    &rc);
    if (env) {
        char detail[200];
        snprintf(detail, sizeof detail, "%s", why);
        seda_env_set_header(env, "x-dead-detail", detail);
        env->at = st;
        env->attempts = (uint16_t)(meta->delivered < 65535
                                       ? meta->delivered : 65535);
        if (ctx) {
            env->done = seda__rctx_done;
            env->done_ud = ctx;
            ctx = NULL;
        }
        seda__stage_count_remote(st, SEDA__REMOTE_ACCEPTED);
        seda__route_dead_letter(st, env, "bad_message", NULL);
    } else {
        char msg[200];
        snprintf(msg, sizeof msg, "out of memory dead-lettering a bad "
                 "message (%s); it is termed", why);
        seda_stage_report(st, msg);
    }
    seda__rctx_free(ctx);
    atomic_fetch_add_explicit(&rs->bad_messages, 1, memory_order_relaxed);
    seda__rfeed_settle(rs, natsMsg_GetReply(m), RF_TERM, 0);
    seda__free(kv);
    seda__rbuf_free(&hb);
}

/* Does content type ct (parameters ignored) name format f? */
static bool names(const char *ct, const seda_remote_format *f)
{
    size_t n = strcspn(ct, "; \t");
    return strlen(f->content_type) == n &&
           strncasecmp(ct, f->content_type, n) == 0;
}

/* The payload of a message (docs/wire.md, "The body"): its kind, and its
 * bytes when a format decoded it (*body, malloc'd; NULL: the body as it
 * is).  0, or -1 with err saying why it cannot be read. */
static int payload_in(struct rstage *rs, const struct rw_env *w, int *kind,
                      void **body, size_t *blen, char *err, size_t errlen)
{
    const char *ct = w->content_type;
    *body = NULL;
    *kind = seda__rw_type_kind(ct);
    if (*kind >= 0)
        return 0;
    const seda_remote_format *f = NULL;
    if (!ct) {
        f = rs->format;
        *kind = 0;                      /* a foreign client's bytes */
    } else if (rs->format && names(ct, rs->format)) {
        f = rs->format;
    } else {
        for (int i = 0; rs->readers && rs->readers[i] && !f; i++)
            if (names(ct, rs->readers[i]))
                f = rs->readers[i];
        if (!f) {
            snprintf(err, errlen, "Content-Type '%.60s' is not one this "
                     "stage reads (application/x-seda, application/json, "
                     "application/msgpack, application/octet-stream)", ct);
            return -1;
        }
    }
    if (!f)
        return 0;
    return f->decode(w->payload, w->plen, kind, body, blen, err, errlen)
               ? -1 : 0;
}

void seda__rstage_intake_flush(struct rstage *rs)
{
    int n = rs->ngather;
    if (n == 0)
        return;
    rs->ngather = 0;
    int rc = 0;
    int done = seda__stage_admit_many(rs->st, rs->gather, n, 0, &rc);
    /* Refused (the bus closing, no room after all): back to JetStream,
     * for another process.  The envelope's done callback gives it back:
     * its receipt is still in its remote state. */
    for (int i = done; i < n; i++) {
        seda_env_t *env = rs->gather[i];
        env->at = rs->st;
        struct rctx *ctx = env->done_ud;
        seda__rfeed_settle(rs, ctx->reply, RF_NAK, 0);
        env->done = NULL;
        seda__env_free(env);
        seda__rctx_free(ctx);
    }
}

void seda__rstage_intake(struct rstage *rs, natsMsg *m,
                         const struct rjs_meta *meta)
{
    struct seda_stage_s *st = rs->st;
    const char *reply = natsMsg_GetReply(m);
    if (atomic_load_explicit(&rs->closing, memory_order_acquire) ||
        seda_bus_closed(rs->bus)) {
        seda__rfeed_settle(rs, reply, RF_NAK, 0);   /* for another process */
        natsMsg_Destroy(m);
        return;
    }
    struct rw_in in;
    char err[200], fid[SEDA_ID_MAX];
    snprintf(fid, sizeof fid, "%s:%llu", rs->stream,
             (unsigned long long)meta->sseq);
    int rc = seda__rw_msg_read(m, fid, &in, err, sizeof err);
    const struct rw_env *w = &in.env;
    bool read_ok = rc == 0;
    if (rc == 0 && w->origin && !seda__rcomp_origin_ok(w->origin)) {
        /* Only seda's own completion subjects: never a wildcard or any
         * other subject a foreign message could make us publish to. */
        snprintf(err, sizeof err, "Seda-Origin: the origin is not a seda "
                 "completion subject (_INBOX.<token>.c.<secret>)");
        rc = -1;
    }
    int kind = 0;
    void *body = NULL;
    size_t blen = 0;
    if (rc == 0)
        rc = payload_in(rs, w, &kind, &body, &blen, err, sizeof err);
    if (rc != 0) {
        bad_message(rs, m, meta, err, read_ok ? w : NULL);
        seda__rw_in_free(&in);
        natsMsg_Destroy(m);
        return;
    }
    struct rctx *ctx = seda__calloc(1, sizeof *ctx);
    seda_env_t *env = NULL;
    if (ctx && (ctx->reply = seda__strdup(reply)) &&
        (!w->origin || (ctx->origin = seda__strdup(w->origin)))) {
        ctx->rs = rs;
        ctx->rhop = w->rhop;
        seda_publish_opts o;
        seda_publish_opts_init(&o);
        o.id = w->id;
        o.sender = w->sender;
        o.headers = in.hdr;
        o.nheaders = in.nh;
        o.slip = w->slip;
        o.nslip = w->nslip;
        o.kind = kind;
        o.priority = w->priority;
        env = body ? seda__env_new(body, blen, &o, &rc)
                   : seda__env_new(w->payload, w->plen, &o, &rc);
    }
    bool last = env && rs->max_deliver > 0 &&
                meta->delivered >= (uint64_t)rs->max_deliver &&
                meta->delivered > (uint64_t)rs->max_attempts;
    if (env)
        env->attempts = (uint16_t)(meta->delivered < 65535
                                       ? meta->delivered : 65535);
    char twhy[200];
    bool typed_out = env && !last &&
                     seda__stage_check(st, env, twhy, sizeof twhy) != 0;
    if (typed_out) {
        /* A typed stage (accepts): anyone may publish on its subject, so
         * what does not fit the type never reaches a handler.  Dead-
         * lettered with reason type (the origin hears of it), termed. */
        env->at = st;
        seda__stage_count_remote(st, SEDA__REMOTE_ACCEPTED);
        seda__rfeed_settle(rs, reply, RF_TERM, 0);
        seda__free(ctx->reply);
        ctx->reply = NULL;
        env->done = seda__rctx_done;
        env->done_ud = ctx;
        (void)seda_env_set_header(env, "x-dead-detail", twhy);
        seda__route_dead_letter(st, env, "type", NULL);
    } else if (last) {
        /* JetStream's last delivery, its earlier ones lost (processes
         * died holding it, or overran ack_wait): dead-lettered without
         * running the handler again, so a message that kills its
         * handler's process cannot stop every consumer in turn, and none
         * is stranded. */
        env->at = st;
        seda__stage_count_remote(st, SEDA__REMOTE_ACCEPTED);
        seda__rfeed_settle(rs, reply, RF_TERM, 0);
        seda__free(ctx->reply);         /* settled: the origin is told */
        ctx->reply = NULL;
        env->done = seda__rctx_done;
        env->done_ud = ctx;
        seda__route_dead_letter(st, env, "max_attempts", NULL);
    } else if (env) {
        env->done = seda__rctx_done;
        env->done_ud = ctx;
        rs->gather[rs->ngather++] = env;
        if (rs->ngather == RS_GATHER)
            seda__rstage_intake_flush(rs);
    } else {
        if (rc == SEDA_EINVAL) {
            bad_message(rs, m, meta, "an envelope field is invalid (an id, "
                        "a header or the slip out of seda's bounds)", NULL);
        } else {
            /* Out of memory: another process may have room. */
            seda_stage_report(st, "out of memory taking a message in; it "
                              "is given back to JetStream");
            seda__rfeed_settle(rs, reply, RF_NAK, 0);
        }
        seda__rctx_free(ctx);
    }
    free(body);                         /* the format's, with malloc */
    seda__rw_in_free(&in);
    natsMsg_Destroy(m);
}
