/* SPDX-License-Identifier: MIT */
/*
 * pub.c -- publishing into a remote stage: the window of messages sent
 * and not yet acknowledged by JetStream, and what happens to each.
 *
 * DESIGN
 *   A publish does not wait for JetStream: it holds a slot of the
 *   stage's window (capacity slots; a full window is the stage's
 *   back-pressure, under its policy), sends the message with the reply
 *   subject "<inbox>.<sid>.a.<n>" and keeps it in a record until the
 *   PubAck for n arrives on the connection's dispatch thread.  So one
 *   producer reaches the asynchronous publish rate of the connection,
 *   not one message per round trip.  The record then reports how the
 *   message ended (seda__rstage_published): stored; stored before (a
 *   duplicate: our own re-send, or the publisher's repeat of an id);
 *   or given up (counted dropped, with the reason).
 *
 *   Re-sends.  The message's Nats-Msg-Id makes a re-send harmless within
 *   the stream's duplicate window, so every doubt is settled by sending
 *   again: a PubAck not back within ATTEMPT_NS (checked by the
 *   connection's tick), JetStream answering "no responders" or a 503
 *   (not ready), and every message out when the connection comes back
 *   after an outage (what was written before it broke may or may not
 *   have arrived).  While the connection is down a record due again is
 *   parked; the reconnect sends it.  A record past its deadline (the
 *   publish timeout, or hop_timeout for a hop) is given up -- unless it
 *   is in doubt: a send of it was never answered, so JetStream may have
 *   stored it (the connection broke before the PubAck came back).  One
 *   in doubt goes on being sent until an answer settles it (a PubAck
 *   says stored, or stored before: a duplicate), up to DOUBT_MARGIN
 *   before the duplicate window since its first send closes; only then,
 *   when a re-send could store it twice, is it given up.  "No
 *   responders" and JetStream's 503 say that send stored nothing; with
 *   every send so answered it is not in doubt.  JetStream's 503 (no
 *   quorum, a leader being elected) is not a lost stream: the stream is
 *   not declared again for it.
 *
 *   Records are found by n through a chained hash and kept in a list in
 *   order of their last send, so the tick looks only at the oldest.
 *   Every send happens under pmu (a PubAck racing the send cannot free
 *   the message under it); outcomes are reported after pmu is let go.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"
#include "remote_int.h"

#define ATTEMPT_NS  2000000000LL    /* a PubAck later than this: re-send */
#define DOUBT_MARGIN 10000000000LL  /* given up this long before the
                                       duplicate window closes */
#define DUP_DEFAULT 120000000000LL  /* JetStream's duplicate window, for a
                                       stream this process did not make */

/* May a send of r have been stored, and may it still be sent again
 * without risk of storing it twice? (pmu held) */
static bool in_doubt(const struct rstage *rs, const struct rpub_rec *r,
                     int64_t now)
{
    int64_t dup = rs->dup_ns > 0 ? rs->dup_ns : DUP_DEFAULT;
    return r->sends > r->refused && now < r->first_sent + dup - DOUBT_MARGIN;
}

/* ---- records ---- */

static void list_remove(struct rstage *rs, struct rpub_rec *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        rs->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        rs->tail = r->prev;
    r->prev = r->next = NULL;
}

static void list_append(struct rstage *rs, struct rpub_rec *r)
{
    r->next = NULL;
    r->prev = rs->tail;
    if (rs->tail)
        rs->tail->next = r;
    else
        rs->head = r;
    rs->tail = r;
}

static int hash_grow(struct rstage *rs)
{
    uint32_t size = rs->hash ? (rs->hmask + 1) * 2 : 256;
    struct rpub_rec **h = seda__calloc(size, sizeof *h);
    if (!h)
        return SEDA_ENOMEM;
    for (struct rpub_rec *r = rs->head; r; r = r->next) {
        uint32_t b = (uint32_t)r->n & (size - 1);
        r->hnext = h[b];
        h[b] = r;
    }
    seda__free(rs->hash);
    rs->hash = h;
    rs->hmask = size - 1;
    return 0;
}

static struct rpub_rec *hash_take(struct rstage *rs, uint64_t n)
{
    if (!rs->hash)
        return NULL;
    for (struct rpub_rec **p = &rs->hash[(uint32_t)n & rs->hmask]; *p;
         p = &(*p)->hnext) {
        if ((*p)->n == n) {
            struct rpub_rec *r = *p;
            *p = r->hnext;
            list_remove(rs, r);
            rs->inflight--;
            return r;
        }
    }
    return NULL;
}

/* A finished record, for report() after pmu is let go. */
struct done {
    struct rpub_rec *r;
    int result;
    bool last;                  /* the window was empty after it */
    char why[160];
};

static void report(struct rstage *rs, struct done *d)
{
    natsMsg_Destroy(d->r->msg);
    void *ud = d->r->ud;
    seda__free(d->r);
    atomic_fetch_add_explicit(&rs->progress, 1, memory_order_relaxed);
    seda__rstage_published(rs, ud, d->result, d->why, d->last);
}

/* Wake publishers waiting for room (pmu held). */
static void room_freed(struct rstage *rs)
{
    if (rs->waiters > 0)
        pthread_cond_broadcast(&rs->room);
}

/* ---- the window ---- */

int seda__rpub_reserve(struct rstage *rs, int64_t deadline_ns)
{
    struct seda_stage_s *st = rs->st;
    struct seda_pool *loaned = NULL;
    bool on_pool = seda__pool_current_owner() != NULL;
    int rc = 0;
    seda__mutex_lock(&rs->pmu);
    for (;;) {
        if (atomic_load_explicit(&rs->closing, memory_order_acquire) ||
            seda__bus_stopping(rs->bus)) {
            rc = SEDA_ECLOSED;
            break;
        }
        int cap = seda__stage_capacity(st);
        if (rs->inflight + rs->reserved < cap) {
            rs->reserved++;
            break;
        }
        seda__mutex_unlock(&rs->pmu);
        /* The stage's policy decides (and counts a refusal); a block
         * policy waits for room until the deadline. */
        rc = seda__stage_full_answer(st);
        if (rc == 0 && seda__now_ns() >= deadline_ns) {
            rc = SEDA_ETIMEDOUT;
            seda__stage_count_dropped(st);
        }
        if (rc != 0) {
            seda__mutex_lock(&rs->pmu);
            break;
        }
        if (on_pool && !loaned) {
            /* A worker about to wait: the pool lends a thread meanwhile
             * (managed blocking), so the stages this wait depends on
             * keep draining. */
            loaned = seda__pool_loan_block_begin();
            on_pool = loaned != NULL;
        }
        seda__mutex_lock(&rs->pmu);
        if (rs->inflight + rs->reserved <
            seda__stage_capacity(st))
            continue;
        rs->waiters++;
        seda__cond_wait(&rs->room, &rs->pmu, deadline_ns);
        rs->waiters--;
    }
    seda__mutex_unlock(&rs->pmu);
    seda__pool_loan_block_end(loaned);
    return rc;
}

void seda__rpub_unreserve(struct rstage *rs)
{
    seda__mutex_lock(&rs->pmu);
    rs->reserved--;
    room_freed(rs);
    seda__mutex_unlock(&rs->pmu);
}

uint64_t seda__rpub_next(struct rstage *rs)
{
    seda__mutex_lock(&rs->pmu);
    uint64_t n = ++rs->next_n;
    seda__mutex_unlock(&rs->pmu);
    return n;
}

int seda__rpub_send(struct rstage *rs, natsMsg *msg, uint64_t n,
                    int64_t deadline_ns, bool user_dup, void *ud)
{
    struct rpub_rec *r = seda__calloc(1, sizeof *r);
    if (!r) {
        seda__rpub_unreserve(rs);
        return SEDA_ENOMEM;
    }
    r->n = n;
    r->msg = msg;
    r->deadline = deadline_ns;
    r->user_dup = user_dup;
    r->ud = ud;
    seda__mutex_lock(&rs->pmu);
    if ((!rs->hash || (uint32_t)rs->inflight > rs->hmask) &&
        hash_grow(rs) != 0 && !rs->hash) {
        rs->reserved--;
        room_freed(rs);
        seda__mutex_unlock(&rs->pmu);
        seda__free(r);
        return SEDA_ENOMEM;
    }
    /* Refused when the connection is down: cnats would buffer it, but
     * the publisher is to hear "unavailable" at once instead. */
    natsStatus s = seda__rconn_up(rs->conn)
                       ? natsConnection_PublishMsg(rs->conn->nc, msg)
                       : NATS_CONNECTION_DISCONNECTED;
    rs->reserved--;
    if (s != NATS_OK) {
        room_freed(rs);
        seda__mutex_unlock(&rs->pmu);
        seda__free(r);
        return s == NATS_MAX_PAYLOAD ? SEDA_ETOOLARGE : SEDA_EUNAVAIL;
    }
    r->sent = seda__now_ns();
    r->first_sent = r->sent;
    r->sends = 1;
    uint32_t b = (uint32_t)n & rs->hmask;
    r->hnext = rs->hash[b];
    rs->hash[b] = r;
    list_append(rs, r);
    rs->inflight++;
    seda__mutex_unlock(&rs->pmu);
    return 0;
}

/* ---- outcomes ---- */

/* Re-send r now (pmu held): it goes to the end of the list.  Parked
 * instead when the connection is down. */
static void resend(struct rstage *rs, struct rpub_rec *r, int64_t now)
{
    list_remove(rs, r);
    list_append(rs, r);
    r->sent = now;
    if (!seda__rconn_up(rs->conn) ||
        natsConnection_PublishMsg(rs->conn->nc, r->msg) != NATS_OK) {
        r->parked = true;
        return;
    }
    r->parked = false;
    r->sends++;
    atomic_fetch_add_explicit(&rs->republished, 1, memory_order_relaxed);
}

/* The JSON error's description into why (best effort), and its code. */
static int api_error(const char *body, int len, char *why, size_t n)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%.*s", len, body);
    const char *c = strstr(tmp, "\"code\":");
    int code = c ? atoi(c + 7) : 0;
    const char *d = strstr(tmp, "\"description\":\"");
    if (d) {
        d += 15;
        const char *e = strchr(d, '"');
        snprintf(why, n, "JetStream: %.*s", e ? (int)(e - d) : 100, d);
    } else {
        snprintf(why, n, "JetStream refused the message");
    }
    return code;
}

void seda__rpub_on_reply(struct rstage *rs, uint64_t n, natsMsg *reply)
{
    uint64_t pending;
    int status = seda__rjs_status(reply, &pending);
    const char *body = natsMsg_GetData(reply);
    int len = natsMsg_GetDataLength(reply);
    struct done d = { NULL, 0, false, "" };
    bool retry = false;
    if (status == 503) {
        retry = true;                   /* no stream listens (yet) */
        seda__rstage_need_setup(rs, "a publish had no responders (the "
                                    "stream is missing, or electing a "
                                    "leader, or restoring)");
    } else if (len > 0 && memmem(body, (size_t)len, "\"error\"", 7)) {
        int code = api_error(body, len, d.why, sizeof d.why);
        retry = code == 503;            /* JetStream not ready: no quorum */
        if (code == 404)
            seda__rstage_need_setup(rs, d.why);
        else if (retry)
            seda__rconn_report(rs->conn, "stage '%s': %s (publishes are "
                               "sent again until it is back)",
                               seda_stage_name(rs->st), d.why);
        d.result = SEDA_EIO;
    } else if (len > 0 && memmem(body, (size_t)len, "\"seq\"", 5)) {
        bool dup = memmem(body, (size_t)len, "\"duplicate\"", 11) != NULL;
        d.result = dup ? 1 : 0;
    } else {
        snprintf(d.why, sizeof d.why, "an answer that is no PubAck");
        d.result = SEDA_EIO;
    }
    seda__mutex_lock(&rs->pmu);
    struct rpub_rec *r = NULL;
    if (retry) {
        /* Not taken: the next tick sends it again. */
        for (struct rpub_rec *h = rs->hash ? rs->hash[(uint32_t)n &
                                                      rs->hmask] : NULL;
             h; h = h->hnext)
            if (h->n == n) {
                h->parked = true;
                h->refused++;       /* that send stored nothing */
            }
        seda__mutex_unlock(&rs->pmu);
        return;
    }
    r = hash_take(rs, n);
    if (r)
        room_freed(rs);
    d.last = rs->inflight == 0 && rs->reserved == 0;
    seda__mutex_unlock(&rs->pmu);
    if (!r)
        return;                         /* settled already (a re-send's) */
    /* A duplicate of our own re-send is the message stored. */
    if (d.result == 1 && (r->sends > 1 || !r->user_dup))
        d.result = 0;
    d.r = r;
    report(rs, &d);
}

void seda__rpub_tick(struct rstage *rs, int64_t now)
{
    struct done dead[32];
    int nd = 0;
    bool up = seda__rconn_up(rs->conn);
    seda__mutex_lock(&rs->pmu);
    /* The list is in order of the last send, so the first record that is
     * neither parked nor due ends the walk; a re-sent record moves to the
     * end, which the budget keeps this walk from reaching again. */
    int budget = rs->inflight;
    struct rpub_rec *next;
    for (struct rpub_rec *r = rs->head; r && budget-- > 0 && nd < 32;
         r = next) {
        next = r->next;
        if (now >= r->deadline && !in_doubt(rs, r, now)) {
            hash_take(rs, r->n);
            dead[nd].r = r;
            dead[nd].result = SEDA_ETIMEDOUT;
            dead[nd].last = false;
            if (r->sends > r->refused)
                snprintf(dead[nd].why, sizeof dead[nd].why,
                         "JetStream did not acknowledge it within the "
                         "duplicate window (sent %d times; it may have "
                         "been stored)", r->sends);
            else
                snprintf(dead[nd].why, sizeof dead[nd].why,
                         "JetStream did not store it within the publish "
                         "timeout (sent %d times, refused each time)",
                         r->sends);
            nd++;
        } else if (r->parked) {
            /* Backoff: 100 ms after the first send, doubling to 5 s, and
             * none while the stream is being declared again. */
            int64_t wait = 100000000LL << (r->sends < 6 ? r->sends - 1 : 5);
            if (wait > 5000000000LL)
                wait = 5000000000LL;
            if (up && now - r->sent >= wait &&
                !atomic_load_explicit(&rs->need_setup,
                                      memory_order_acquire))
                resend(rs, r, now);
        } else if (now - r->sent >= ATTEMPT_NS) {
            resend(rs, r, now);
        } else {
            break;
        }
    }
    if (nd) {
        room_freed(rs);
        dead[nd - 1].last = rs->inflight == 0 && rs->reserved == 0;
    }
    seda__mutex_unlock(&rs->pmu);
    for (int i = 0; i < nd; i++)
        report(rs, &dead[i]);
}

void seda__rpub_reconnect(struct rstage *rs)
{
    int64_t now = seda__now_ns();
    seda__mutex_lock(&rs->pmu);
    /* Everything out goes again (dedup makes that harmless); what was
     * written before the outage may never have arrived. */
    int n = rs->inflight;
    for (struct rpub_rec *r = rs->head; r && n-- > 0; r = rs->head)
        resend(rs, r, now);
    seda__mutex_unlock(&rs->pmu);
}

void seda__rpub_close(struct rstage *rs)
{
    for (;;) {
        struct done d = { NULL, SEDA_ECLOSED, true, "the bus stopped "
                          "before JetStream acknowledged it" };
        seda__mutex_lock(&rs->pmu);
        struct rpub_rec *r = rs->head;
        if (r)
            hash_take(rs, r->n);
        seda__mutex_unlock(&rs->pmu);
        if (!r)
            break;
        d.r = r;
        report(rs, &d);
    }
    seda__mutex_lock(&rs->pmu);
    seda__free(rs->hash);
    rs->hash = NULL;
    seda__mutex_unlock(&rs->pmu);
}
