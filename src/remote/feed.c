/* SPDX-License-Identifier: MIT */
/*
 * feed.c -- consuming a remote stage: pull requests sized by the room
 * the stage has, the messages they bring, and settling them.
 *
 * DESIGN
 *   No thread waits for messages.  The stage sends JetStream pull
 *   requests ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>, batch and
 *   expires, reply "<inbox>.<sid>.p.<n>") and the messages come to the
 *   connection's dispatch thread as the server has them, which takes each
 *   in as an envelope and admits it into the stage's queue; the pool's
 *   drain tasks deliver it like any other, and the worker that settles
 *   it sends +ACK, -NAK (with the retry delay) or +TERM to its reply
 *   subject.  That is how a drain task learns that messages are waiting:
 *   they are in its queue.
 *
 *   Room.  held counts messages taken in and not yet settled;
 *   outstanding those asked for and not yet delivered.  Requests keep
 *   held + outstanding within the stage's capacity (so a process holds
 *   at most capacity unacknowledged messages: the others get the rest),
 *   each asking for a quarter of it, so that a few are out at once and
 *   the server, which serves waiting requests in turn, spreads a backlog
 *   over every process.  A message brings outstanding down by one; a
 *   request that ends unfilled ends with a 408 (expired) or another
 *   status carrying Nats-Pending-Messages, its undelivered count.
 *   Settling brings held down and asks for more.
 *
 *   Outages.  Requests sent before a reconnect are void (the server may
 *   have forgotten them): outstanding goes back to zero, their late
 *   statuses are ignored (request numbers up to epoch_n), and new ones go
 *   out.  As every request expires within EXPIRES_NS, outstanding is also
 *   reset when nothing can still be out after that; a message that comes
 *   beyond the room anyway is admitted if the queue has room, else naked.
 *
 *   Held messages are kept alive.  A message taken in may wait in the
 *   local queue behind others; past ack_wait JetStream would give it
 *   again (to this process or another) while it is still held, and it
 *   would be handled twice.  So every held message is entered by its
 *   stream sequence (hheld), and each one not settled for a third of
 *   ack_wait is told "+WPI" (in progress: JetStream restarts its
 *   ack_wait), from the tick; and a copy that comes while the first is
 *   held (same stream sequence: a redelivery that overtook the +WPI) is
 *   not taken in again: it gets a +WPI of its own and is dropped, counted
 *   in held_twice (the first copy's ack settles the message: JetStream
 *   acks by stream sequence).  And the feed never asks for more than can
 *   start within ack_wait: the rate at which the stage settles (a moving
 *   average, once known) times half of ack_wait bounds held +
 *   outstanding, below the capacity.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote_int.h"

#define EXPIRES_NS  10000000000LL   /* a pull request's life */
#define GRACE_NS     2000000000LL   /* ... and its last status's way back */

static int chunk_of(int cap)
{
    int c = (cap + 3) / 4;
    return c < 1 ? 1 : c > 256 ? 256 : c;
}

void seda__rfeed_request(struct rstage *rs)
{
    if (!atomic_load_explicit(&rs->consuming, memory_order_acquire) ||
        atomic_load_explicit(&rs->closing, memory_order_acquire) ||
        seda_bus_closed(rs->bus) || !seda__rconn_up(rs->conn) ||
        atomic_load_explicit(&rs->need_setup, memory_order_acquire))
        return;
    int cap = seda__stage_capacity(rs->st);
    int chunk = chunk_of(cap);
    struct rreq send[8];
    int ns = 0;
    int64_t now = seda__now_ns();
    seda__mutex_lock(&rs->fmu);
    int limit = cap;
    if (rs->rate > 0) {
        /* What can start within half of ack_wait at the settling rate. */
        double can = rs->rate * (double)rs->ack_wait_ns / 2e9;
        if (can < (double)limit)
            limit = can < 2 ? 2 : (int)can;
        if (limit > cap)
            limit = cap;
    }
    int room = limit - rs->held - rs->outstanding;
    while (ns < 8 && room > 0 && (room >= chunk || rs->outstanding == 0)) {
        int batch = room < chunk ? room : chunk;
        struct rreq r = { ++rs->req_n, batch };
        rs->reqs[r.n % RS_REQS] = r;
        rs->outstanding += batch;
        rs->last_expires = now + EXPIRES_NS;
        room -= batch;
        send[ns++] = r;
    }
    seda__mutex_unlock(&rs->fmu);
    char subj[256], reply[128], body[96];
    snprintf(subj, sizeof subj, "$JS.API.CONSUMER.MSG.NEXT.%s.%s",
             rs->stream, rs->consumer);
    for (int i = 0; i < ns; i++) {
        int len = snprintf(body, sizeof body,
                           "{\"batch\":%d,\"expires\":%lld}", send[i].batch,
                           (long long)EXPIRES_NS);
        seda__rconn_reply(rs->conn, rs->sid, 'p', send[i].n, true, reply,
                          sizeof reply);
        if (seda__rconn_send(rs->conn, subj, reply, body, (size_t)len)) {
            /* Down meanwhile: this one never went out. */
            seda__mutex_lock(&rs->fmu);
            rs->outstanding -= send[i].batch;
            if (rs->outstanding < 0)
                rs->outstanding = 0;
            seda__mutex_unlock(&rs->fmu);
        }
    }
}

/* The held entry of sseq's bucket slot (fmu held). */
static struct rheld **held_slot(struct rstage *rs, uint64_t sseq)
{
    struct rheld **p = &rs->hheld[sseq % RS_HELD_BUCKETS];
    while (*p && (*p)->sseq != sseq)
        p = &(*p)->next;
    return p;
}

void seda__rfeed_on_js(struct rstage *rs, natsMsg *m,
                       const struct rjs_meta *meta)
{
    const char *reply = natsMsg_GetReply(m);
    int64_t now = seda__now_ns();
    /* Allocated before the lock; without memory the message is still
     * taken in, only not kept alive. */
    struct rheld *h = seda__calloc(1, sizeof *h);
    char *r = h ? seda__strdup(reply) : NULL;
    seda__mutex_lock(&rs->fmu);
    if (rs->outstanding > 0)
        rs->outstanding--;
    struct rheld **p = held_slot(rs, meta->sseq);
    bool again = *p != NULL;
    if (again) {
        (*p)->wpi_at = now;
    } else {
        if (h && r) {
            h->sseq = meta->sseq;
            h->reply = r;
            h->wpi_at = now;
            *p = h;
            h = NULL;
            r = NULL;
        }
        rs->held++;
    }
    seda__mutex_unlock(&rs->fmu);
    seda__free(r);
    seda__free(h);
    if (again) {
        /* Still held here (queued or being handled): not a second
         * handling.  In progress, said on this copy's subject too. */
        natsConnection_Publish(rs->conn->nc, reply, "+WPI", 4);
        atomic_fetch_add_explicit(&rs->held_twice, 1, memory_order_relaxed);
        natsMsg_Destroy(m);
        seda__rfeed_request(rs);
        return;
    }
    atomic_fetch_add_explicit(&rs->fetched, 1, memory_order_relaxed);
    seda__rstage_intake(rs, m, meta);
}

void seda__rfeed_close(struct rstage *rs)
{
    seda__mutex_lock(&rs->fmu);
    for (int b = 0; b < RS_HELD_BUCKETS; b++)
        for (struct rheld *h = rs->hheld[b], *n; h; h = n) {
            n = h->next;
            seda__free(h->reply);
            seda__free(h);
        }
    memset(rs->hheld, 0, sizeof rs->hheld);
    seda__mutex_unlock(&rs->fmu);
}

/* Tick: +WPI for each message held a third of ack_wait since it came or
 * was last said in progress; and the settling rate.  fmu taken; the
 * in-progress acks are buffered writes. */
static void keep_alive(struct rstage *rs, int64_t now)
{
    int64_t every = rs->ack_wait_ns / 3;
    uint64_t sent = 0;
    seda__mutex_lock(&rs->fmu);
    if (rs->held > 0 && every > 0) {
        for (int b = 0; b < RS_HELD_BUCKETS; b++)
            for (struct rheld *h = rs->hheld[b]; h; h = h->next)
                if (now - h->wpi_at >= every) {
                    natsConnection_Publish(rs->conn->nc, h->reply, "+WPI",
                                           4);
                    h->wpi_at = now;
                    sent++;
                }
    }
    if (rs->rate_at == 0) {
        rs->rate_at = now;
    } else if (now - rs->rate_at >= 1000000000LL) {
        /* Measured only while there was work: an idle second says
         * nothing about how fast the stage goes. */
        if (rs->rate_n > 0 || rs->held > 0) {
            double inst = (double)rs->rate_n * 1e9 /
                          (double)(now - rs->rate_at);
            rs->rate = rs->rate > 0 ? 0.7 * rs->rate + 0.3 * inst : inst;
            if (rs->rate <= 0)
                rs->rate = 0.01;        /* stuck: ask for the least */
        }
        rs->rate_n = 0;
        rs->rate_at = now;
    }
    seda__mutex_unlock(&rs->fmu);
    if (sent)
        atomic_fetch_add_explicit(&rs->in_progress, sent,
                                  memory_order_relaxed);
}

void seda__rfeed_on_status(struct rstage *rs, uint64_t n, natsMsg *m)
{
    uint64_t pending;
    int status = seda__rjs_status(m, &pending);
    if (status == 0 || status == 100)
        return;                         /* a heartbeat: nothing ends */
    bool has_count = false;
    const char *pm = NULL;
    if (natsMsgHeader_Get(m, "Nats-Pending-Messages", &pm) == NATS_OK && pm)
        has_count = true;
    seda__mutex_lock(&rs->fmu);
    if (n > rs->epoch_n) {
        int left = has_count ? (int)(pending < (uint64_t)INT32_MAX
                                     ? pending : INT32_MAX)
                 : rs->reqs[n % RS_REQS].n == n ? rs->reqs[n % RS_REQS].batch
                 : 0;
        rs->outstanding -= left;
        if (rs->outstanding < 0)
            rs->outstanding = 0;
    }
    seda__mutex_unlock(&rs->fmu);
    const char *desc = NULL;
    natsMsgHeader_Get(m, "Description", &desc);
    /* The consumer (or its stream) is gone: declared again, loudly,
     * before any more requests go out. */
    if (status == 503 || (status == 409 && desc &&
                          strstr(desc, "Consumer Deleted"))) {
        seda__rstage_need_setup(rs, status == 503
                                        ? "a pull request had no "
                                          "responders (the consumer is "
                                          "missing, or its stream is "
                                          "electing a leader)"
                                        : "its consumer was deleted");
        return;
    }
    /* Expiry, and a server going down, end requests as a matter of
     * course; anything else (too many waiting requests) is said. */
    if (status != 404 && status != 408 &&
        !(status == 409 && desc && (strstr(desc, "Shutdown") ||
                                    strstr(desc, "Leadership"))))
        seda__rconn_report(rs->conn, "stage '%s': a pull request ended with "
                           "%d %s", seda_stage_name(rs->st), status, desc ? desc : "");
    seda__rfeed_request(rs);
}

void seda__rfeed_tick(struct rstage *rs, int64_t now)
{
    keep_alive(rs, now);
    seda__mutex_lock(&rs->fmu);
    if (rs->outstanding > 0 && now > rs->last_expires + GRACE_NS)
        rs->outstanding = 0;            /* none can still be out */
    seda__mutex_unlock(&rs->fmu);
    seda__rfeed_request(rs);
}

void seda__rfeed_reconnect(struct rstage *rs)
{
    seda__mutex_lock(&rs->fmu);
    rs->epoch_n = rs->req_n;
    rs->outstanding = 0;
    seda__mutex_unlock(&rs->fmu);
    seda__rfeed_request(rs);
}

void seda__rfeed_settle(struct rstage *rs, const char *reply, int how,
                        int64_t delay_ns)
{
    char body[64];
    int len;
    if (how == RF_ACK) {
        len = snprintf(body, sizeof body, "+ACK");
        atomic_fetch_add_explicit(&rs->acked, 1, memory_order_relaxed);
    } else if (how == RF_TERM) {
        len = snprintf(body, sizeof body, "+TERM");
        atomic_fetch_add_explicit(&rs->termed, 1, memory_order_relaxed);
    } else {
        len = delay_ns > 0
                  ? snprintf(body, sizeof body, "-NAK {\"delay\": %lld}",
                             (long long)delay_ns)
                  : snprintf(body, sizeof body, "-NAK");
        atomic_fetch_add_explicit(&rs->naked, 1, memory_order_relaxed);
    }
    /* Not refused while reconnecting: cnats keeps it for the server
     * (JetStream may have redelivered meanwhile: at least once). */
    natsConnection_Publish(rs->conn->nc, reply, body, len);
    struct rjs_meta meta;
    struct rheld *h = NULL;
    bool known = seda__rjs_parse_ack(reply, &meta);
    seda__mutex_lock(&rs->fmu);
    if (known) {
        struct rheld **p = held_slot(rs, meta.sseq);
        if ((h = *p) != NULL)
            *p = h->next;
    }
    if (rs->held > 0)
        rs->held--;
    rs->rate_n++;
    seda__mutex_unlock(&rs->fmu);
    if (h) {
        seda__free(h->reply);
        seda__free(h);
    }
    atomic_fetch_add_explicit(&rs->progress, 1, memory_order_relaxed);
    seda__rfeed_request(rs);
}

/* ---- the consumer's counts ---- */

static int64_t json_int(const char *body, const char *key)
{
    const char *p = strstr(body, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

void seda__rfeed_refresh_info(struct rstage *rs)
{
    int64_t now = seda__now_ns();
    seda__mutex_lock(&rs->fmu);
    bool due = now - rs->info_at >= 500000000LL;
    if (due)
        rs->info_at = now;
    seda__mutex_unlock(&rs->fmu);
    if (!due)
        return;
    char subj[256], reply[128];
    snprintf(subj, sizeof subj, "$JS.API.CONSUMER.INFO.%s.%s", rs->stream,
             rs->consumer);
    seda__rconn_reply(rs->conn, rs->sid, 'i', 0, false, reply, sizeof reply);
    seda__rconn_send(rs->conn, subj, reply, "", 0);
}

void seda__rfeed_on_info(struct rstage *rs, natsMsg *m)
{
    int len = natsMsg_GetDataLength(m);
    char *body = seda__malloc((size_t)len + 1);
    if (!body)
        return;
    memcpy(body, natsMsg_GetData(m), (size_t)len);
    body[len] = '\0';
    if (!strstr(body, "\"error\"")) {
        atomic_store_explicit(&rs->js_pending,
                              json_int(body, "\"num_pending\":"),
                              memory_order_relaxed);
        atomic_store_explicit(&rs->js_ack_pending,
                              json_int(body, "\"num_ack_pending\":"),
                              memory_order_relaxed);
        atomic_store_explicit(&rs->js_redelivered,
                              json_int(body, "\"num_redelivered\":"),
                              memory_order_relaxed);
        atomic_store_explicit(&rs->js_waiting,
                              json_int(body, "\"num_waiting\":"),
                              memory_order_relaxed);
        atomic_store_explicit(&rs->js_at, seda__now_ns(),
                              memory_order_relaxed);
    }
    seda__free(body);
}
