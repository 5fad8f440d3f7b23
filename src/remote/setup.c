/* SPDX-License-Identifier: MIT */
/*
 * setup.c -- the stream and the durable consumer behind a remote stage:
 * found, or created when missing, when the stage is declared.
 *
 * DESIGN
 *   Every process that declares a remote stage runs this, in any order
 *   and perhaps at once, so it looks before it creates: an existing
 *   stream is used as it is (its subjects are widened to cover the
 *   stage's subject when they do not), and an existing consumer is used
 *   with its own settings, which are then the stage's effective ones
 *   (max_deliver is the attempts after which this process terms a
 *   message; a consumer created by another process with other settings
 *   is reported, not changed: js_AddConsumer would silently update it).
 *   Two processes creating the same stream or consumer at the same
 *   moment send the same configuration, which JetStream accepts twice;
 *   a stream created meanwhile with other subjects is looked up again.
 *
 *   Streams are created with WorkQueue retention (a message is removed
 *   once acked or termed: the stream is the stage's queue), file storage,
 *   and a duplicate window that covers a publisher's re-sends (the
 *   envelope's id is the Nats-Msg-Id).
 */
#include <stdio.h>
#include <string.h>

#include "remote_int.h"

void seda__rsetup_name(const char *stage, char *buf)
{
    size_t i = 0;
    for (; stage[i] && i < SEDA_NAME_MAX; i++) {
        char ch = stage[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        buf[i] = ok ? ch : '_';
    }
    buf[i] = '\0';
}

/* Does a stream subject pattern (with * and >) cover subject? */
static bool covers(const char *pat, const char *subj)
{
    for (;;) {
        const char *pd = strchr(pat, '.'), *sd = strchr(subj, '.');
        size_t pl = pd ? (size_t)(pd - pat) : strlen(pat);
        size_t sl = sd ? (size_t)(sd - subj) : strlen(subj);
        if (pl == 1 && pat[0] == '>')
            return true;
        if (!(pl == 1 && pat[0] == '*') &&
            (pl != sl || memcmp(pat, subj, pl) != 0))
            return false;
        if (!pd || !sd)
            return !pd && !sd;
        pat = pd + 1;
        subj = sd + 1;
    }
}

static bool stream_covers(const jsStreamConfig *cfg, const char *subject)
{
    for (int i = 0; i < cfg->SubjectsLen; i++)
        if (covers(cfg->Subjects[i], subject))
            return true;
    return false;
}

static const char *last_error(void)
{
    const char *e = nats_GetLastError(NULL);
    return e ? e : "";
}

/* Widen an existing stream's subjects to cover subject. */
static int widen(struct rconn *c, const jsStreamInfo *si,
                 const char *subject, char *err, size_t errlen)
{
    jsStreamConfig cfg = *si->Config;
    int n = cfg.SubjectsLen;
    const char **subs = seda__calloc((size_t)n + 1, sizeof *subs);
    if (!subs)
        return SEDA_ENOMEM;
    for (int i = 0; i < n; i++)
        subs[i] = cfg.Subjects[i];
    subs[n] = subject;
    cfg.Subjects = subs;
    cfg.SubjectsLen = n + 1;
    jsErrCode jerr = 0;
    jsStreamInfo *out = NULL;
    natsStatus s = js_UpdateStream(&out, c->js, &cfg, NULL, &jerr);
    seda__free(subs);
    jsStreamInfo_Destroy(out);
    if (s != NATS_OK) {
        snprintf(err, errlen, "stream '%s' does not take subject '%s' and "
                 "could not be widened: %s (JetStream error %d) %s",
                 cfg.Name, subject, natsStatus_GetText(s), (int)jerr,
                 last_error());
        return SEDA_EINVAL;
    }
    return 0;
}

/* The tap's RePublish of stream (source: wide, its seda subjects). */
static void tap_cfg(jsRePublish *rp, const char *stream, const char *wide,
                    char *dest, size_t len)
{
    snprintf(dest, len, "seda-tap.%s.>", stream);
    jsRePublish_Init(rp);
    rp->Source = wide;
    rp->Destination = dest;
}

/* Turn the tap on for an existing stream that has none (servers that
 * cannot change RePublish, 2.9, refuse: the error says what to do). */
static int add_tap(struct rconn *c, const jsStreamInfo *si, char *err,
                   size_t errlen)
{
    jsStreamConfig cfg = *si->Config;
    char wide[SEDA_NAME_MAX + 16], dest[SEDA_NAME_MAX + 16];
    snprintf(wide, sizeof wide, "seda.%s.>", cfg.Name);
    jsRePublish rp;
    tap_cfg(&rp, cfg.Name, wide, dest, sizeof dest);
    cfg.RePublish = &rp;
    jsErrCode jerr = 0;
    jsStreamInfo *out = NULL;
    natsStatus s = js_UpdateStream(&out, c->js, &cfg, NULL, &jerr);
    jsStreamInfo_Destroy(out);
    if (s != NATS_OK) {
        snprintf(err, errlen, "stream '%s' was made without the tap and "
                 "the server cannot add it (%s, JetStream error %d%s%s): "
                 "declare tap = true where the stream is first made, or "
                 "delete the stream", cfg.Name, natsStatus_GetText(s),
                 (int)jerr, *last_error() ? ": " : "", last_error());
        return SEDA_EINVAL;
    }
    return 0;
}

static int ensure_stream(struct rconn *c, const char *stream,
                         const char *subject, int64_t dup_ns, int replicas,
                         bool tap, bool *created, char *err, size_t errlen)
{
    int nopeers = 0;
    for (int tries = 0; tries < 4; tries++) {
        jsStreamInfo *si = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_GetStreamInfo(&si, c->js, stream, NULL, &jerr);
        if (s == NATS_OK) {
            int rc = stream_covers(si->Config, subject)
                         ? 0 : widen(c, si, subject, err, errlen);
            if (rc == 0 && tap && !si->Config->RePublish)
                rc = add_tap(c, si, err, errlen);
            jsStreamInfo_Destroy(si);
            return rc;
        }
        if (s == NATS_TIMEOUT && tries < 3)
            continue;   /* a cluster electing a leader: ask again */
        if (s != NATS_NOT_FOUND) {
            snprintf(err, errlen, "cannot look up stream '%s': %s%s%s",
                     stream, natsStatus_GetText(s),
                     s == NATS_NO_RESPONDERS || s == NATS_TIMEOUT
                         ? " (is JetStream enabled on the server? "
                           "nats-server -js)" : "",
                     last_error());
            return SEDA_EUNAVAIL;
        }
        char wide[SEDA_NAME_MAX + 16];
        snprintf(wide, sizeof wide, "seda.%s.>", stream);
        const char *subjects[2] = { wide, subject };
        jsStreamConfig cfg;
        jsStreamConfig_Init(&cfg);
        cfg.Name = stream;
        cfg.Subjects = subjects;
        cfg.SubjectsLen = covers(wide, subject) ? 1 : 2;
        cfg.Retention = js_WorkQueuePolicy;
        cfg.Storage = js_FileStorage;
        cfg.Duplicates = dup_ns;
        cfg.Replicas = replicas > 0 ? replicas : 1;
        /* The tap (docs/wire.md, "Watching a stage"): every message the
         * stream stores is also sent to seda-tap.<stream>.<stage>, so
         * anyone can watch a stage without taking its work (WorkQueue
         * retention allows one consumer per subject). */
        char dest[SEDA_NAME_MAX + 16];
        jsRePublish rp;
        tap_cfg(&rp, stream, wide, dest, sizeof dest);
        cfg.RePublish = tap ? &rp : NULL;
        jerr = 0;
        s = js_AddStream(&si, c->js, &cfg, NULL, &jerr);
        jsStreamInfo_Destroy(si);
        if (s == NATS_OK) {
            if (created)
                *created = true;
            return 0;
        }
        if (s == NATS_TIMEOUT && jerr == 0)
            continue;   /* a replicated stream may take longer: look */
        if (jerr == JSClusterNoPeersErr && nopeers++ < 40) {
            /* A cluster still forming (not all its peers known yet):
             * wait and ask again, up to 10 s in all. */
            nats_Sleep(250);
            tries--;
            continue;
        }
        if (jerr != JSStreamNameExistErr) {
            snprintf(err, errlen, "cannot create stream '%s': %s "
                     "(JetStream error %d) %s", stream,
                     natsStatus_GetText(s), (int)jerr, last_error());
            return SEDA_EINVAL;
        }
        /* Created meanwhile by another process: look again. */
    }
    snprintf(err, errlen, "stream '%s' keeps changing while it is set up",
             stream);
    return SEDA_EUNAVAIL;
}

static void take_cfg(const jsConsumerConfig *cc, struct rcons_cfg *got)
{
    got->ack_wait_ns = cc->AckWait;
    got->max_deliver = cc->MaxDeliver > 0 && cc->MaxDeliver < 65536
                           ? (int)cc->MaxDeliver : -1;
    got->max_ack_pending = cc->MaxAckPending > 0 &&
                                   cc->MaxAckPending < INT32_MAX
                               ? (int)cc->MaxAckPending : -1;
}

int seda__rsetup_ensure(struct rconn *c, const char *stream,
                        const char *subject, const char *consumer,
                        int64_t dup_window_ns, int replicas, bool tap,
                        const struct rcons_cfg *want,
                        struct rcons_cfg *got, char *err, size_t errlen)
{
    bool created = false;
    int rc = ensure_stream(c, stream, subject, dup_window_ns, replicas, tap,
                           &created, err, errlen);
    memset(got, 0, sizeof *got);
    got->stream_created = created;
    if (rc || !consumer)
        return rc;
    for (int tries = 0; tries < 2; tries++) {
        jsConsumerInfo *ci = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_GetConsumerInfo(&ci, c->js, stream, consumer, NULL,
                                          &jerr);
        if (s == NATS_OK) {
            const jsConsumerConfig *cc = ci->Config;
            if (cc->DeliverSubject && *cc->DeliverSubject)
                snprintf(err, errlen, "consumer '%s' of stream '%s' is a "
                         "push consumer; a remote stage needs a pull "
                         "consumer (name another with consumer =)",
                         consumer, stream);
            else if (!cc->FilterSubject ||
                     strcmp(cc->FilterSubject, subject) != 0)
                snprintf(err, errlen, "consumer '%s' of stream '%s' takes "
                         "'%s', not '%s' (name another with consumer =)",
                         consumer, stream,
                         cc->FilterSubject ? cc->FilterSubject : "everything",
                         subject);
            else if (cc->AckPolicy != js_AckExplicit)
                snprintf(err, errlen, "consumer '%s' of stream '%s' does "
                         "not ack explicitly", consumer, stream);
            else
                rc = 1;
            if (rc == 1) {
                take_cfg(cc, got);
                got->differs = got->ack_wait_ns != want->ack_wait_ns ||
                               got->max_deliver != want->max_deliver ||
                               got->max_ack_pending != want->max_ack_pending;
                rc = 0;
            } else {
                rc = SEDA_EINVAL;
            }
            jsConsumerInfo_Destroy(ci);
            return rc;
        }
        if (s != NATS_NOT_FOUND) {
            snprintf(err, errlen, "cannot look up consumer '%s' of stream "
                     "'%s': %s %s", consumer, stream, natsStatus_GetText(s),
                     last_error());
            return SEDA_EUNAVAIL;
        }
        jsConsumerConfig cc;
        jsConsumerConfig_Init(&cc);
        cc.Durable = consumer;
        cc.AckPolicy = js_AckExplicit;
        cc.AckWait = want->ack_wait_ns;
        cc.MaxDeliver = want->max_deliver;
        cc.MaxAckPending = want->max_ack_pending;
        cc.FilterSubject = subject;
        cc.DeliverPolicy = js_DeliverAll;
        jerr = 0;
        s = js_AddConsumer(&ci, c->js, stream, &cc, NULL, &jerr);
        if (s == NATS_OK) {
            take_cfg(ci->Config, got);
            got->created = true;
            jsConsumerInfo_Destroy(ci);
            return 0;
        }
        if (tries == 1 || jerr == 0) {
            snprintf(err, errlen, "cannot create consumer '%s' of stream "
                     "'%s': %s (JetStream error %d) %s", consumer, stream,
                     natsStatus_GetText(s), (int)jerr, last_error());
            return SEDA_EINVAL;
        }
    }
    snprintf(err, errlen, "consumer '%s' of stream '%s' could not be set up",
             consumer, stream);
    return SEDA_EINVAL;
}
