/* SPDX-License-Identifier: MIT */
/*
 * complete.c -- on_complete across processes: the origin's table of
 * itineraries that left it, and the completion message that comes back.
 *
 * DESIGN
 *   When an envelope with a done callback (on_complete in Lua) leaves its
 *   process for a remote stage, the callback stays: it is entered in the
 *   connection's table under the envelope's remote id, and the message
 *   carries the origin's subject "<inbox>.c".  Whichever process ends
 *   the itinerary (completed, dead-lettered, or dropped after it left the
 *   stage that took it in) publishes a small completion message there
 *   with a reply subject of its own; the origin's dispatch thread finds
 *   the entry, builds an envelope from the message (the final payload,
 *   headers and sender, the id the publisher knows) and calls done, which
 *   for Lua queues the callback for the main state.  If nobody listens on
 *   the origin's subject any more (the process is gone), the server
 *   answers the reply subject with "no responders" and the sender counts
 *   the completion dropped.
 *
 *   An entry is registered before the message is sent (the completion may
 *   overtake the PubAck) and removed by whoever comes first: the
 *   completion, the publish giving up (cancel, by remote id and serial:
 *   the entry may already be gone), or the bus closing.  Two entries may
 *   share a remote id (a publisher repeating a custom id); a completion
 *   ends the oldest.
 *
 * Locking: mu guards the table (a leaf lock: no other lock is taken under
 * it, and done never runs under it).
 */
#include <stdio.h>
#include <string.h>

#include "remote_int.h"

/* An awaited completion.  Guarded by the table's mu while in the table;
 * whoever takes it out (under mu) owns it. */
struct rcomp_entry {
    char *rid;                  /* owned key */
    char *local_id;             /* owned: the id the publisher knows */
    uint64_t serial;            /* names the entry */
    seda_done_fn done;
    void *ud;
    struct rstage *rs;          /* the stage it left through */
    struct rcomp_entry *next;   /* hash chain, oldest first */
};

struct rcomp {
    seda__mutex_t mu;
    struct rcomp_entry **hash;  /* guarded by mu */
    uint32_t mask;              /* buckets - 1; guarded by mu */
    int n;                      /* entries; guarded by mu */
    uint64_t serial;            /* last serial given; guarded by mu */
};

static uint32_t hash_str(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

struct rcomp *seda__rcomp_new(void)
{
    struct rcomp *t = seda__calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->hash = seda__calloc(256, sizeof *t->hash);
    if (!t->hash) {
        seda__free(t);
        return NULL;
    }
    t->mask = 255;
    seda__mutex_init(&t->mu);
    return t;
}

static void entry_free(struct rcomp_entry *e)
{
    seda__free(e->rid);
    seda__free(e->local_id);
    seda__free(e);
}

void seda__rcomp_free(struct rconn *c)
{
    struct rcomp *t = c->comp;
    if (!t)
        return;
    /* Every stage closed before the connection: nothing is left. */
    for (uint32_t b = 0; b <= t->mask; b++)
        for (struct rcomp_entry *e = t->hash[b], *n; e; e = n) {
            n = e->next;
            entry_free(e);
        }
    seda__free(t->hash);
    seda__mutex_destroy(&t->mu);
    seda__free(t);
    c->comp = NULL;
}

static void grow(struct rcomp *t)
{
    uint32_t size = (t->mask + 1) * 2;
    struct rcomp_entry **h = seda__calloc(size, sizeof *h);
    if (!h)
        return;                         /* longer chains, still correct */
    for (uint32_t b = 0; b <= t->mask; b++) {
        /* Move each chain keeping its order (oldest first). */
        for (struct rcomp_entry *e = t->hash[b], *n; e; e = n) {
            n = e->next;
            struct rcomp_entry **p = &h[hash_str(e->rid) & (size - 1)];
            while (*p)
                p = &(*p)->next;
            e->next = NULL;
            *p = e;
        }
    }
    seda__free(t->hash);
    t->hash = h;
    t->mask = size - 1;
}

uint64_t seda__rcomp_await(struct rconn *c, struct rstage *rs,
                           const char *rid, const char *local_id,
                           seda_done_fn done, void *ud)
{
    struct rcomp *t = c->comp;
    struct rcomp_entry *e = seda__calloc(1, sizeof *e);
    if (!e || !(e->rid = seda__strdup(rid)) ||
        !(e->local_id = seda__strdup(local_id))) {
        if (e)
            entry_free(e);
        return 0;
    }
    e->done = done;
    e->ud = ud;
    e->rs = rs;
    seda__mutex_lock(&t->mu);
    if ((uint32_t)t->n > t->mask * 2)
        grow(t);
    struct rcomp_entry **p = &t->hash[hash_str(rid) & t->mask];
    while (*p)
        p = &(*p)->next;
    *p = e;
    t->n++;
    e->serial = ++t->serial;
    uint64_t serial = e->serial;
    seda__mutex_unlock(&t->mu);
    atomic_fetch_add_explicit(&rs->awaiting, 1, memory_order_relaxed);
    return serial;
}

/* Take the entry of rid with serial (0: the oldest of rid). */
static struct rcomp_entry *take(struct rcomp *t, const char *rid,
                                uint64_t serial)
{
    seda__mutex_lock(&t->mu);
    struct rcomp_entry *e = NULL;
    for (struct rcomp_entry **p = &t->hash[hash_str(rid) & t->mask]; *p;
         p = &(*p)->next) {
        if (strcmp((*p)->rid, rid) == 0 &&
            (serial == 0 || (*p)->serial == serial)) {
            e = *p;
            *p = e->next;
            t->n--;
            break;
        }
    }
    seda__mutex_unlock(&t->mu);
    return e;
}

/* Fire e's done with an envelope made from d (or a bare one when d is
 * NULL), then free e.  No lock held. */
static void fire(struct rcomp_entry *e, int outcome, const struct rw_done *d)
{
    struct rstage *rs = e->rs;
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.id = e->local_id;
    if (d) {
        o.sender = d->sender;
        o.headers = d->hdr;
        o.nheaders = d->nh;
        o.kind = d->kind;
    }
    int rc;
    seda_env_t *env = seda__env_new(d ? d->payload : NULL, d ? d->plen : 0,
                                    &o, &rc);
    if (!env && d) {
        /* Out of memory for the full copy: the callback still ends. */
        seda_publish_opts_init(&o);
        o.id = e->local_id;
        env = seda__env_new(NULL, 0, &o, &rc);
        outcome = SEDA_DROPPED;
    }
    if (env) {
        /* At the stage the itinerary ended at when this bus has one of
         * that name, else at the remote stage it left through, reporting
         * the name of the stage it ended at. */
        struct seda_stage_s *at = d ? seda__bus_lookup(rs->bus, d->stage)
                                    : NULL;
        env->at = at ? at : rs->st;
        if (d && !at && seda__env_set_to(env, d->stage) != 0)
            outcome = outcome == SEDA_COMPLETED ? SEDA_DROPPED : outcome;
        e->done(env, outcome, e->ud);
        seda__env_free(env);
    } else {
        fprintf(stderr, "seda: remote stage '%s': out of memory ending an "
                "on_complete callback; it is lost\n", seda_stage_name(rs->st));
    }
    atomic_fetch_add_explicit(&rs->progress, 1, memory_order_relaxed);
    if (atomic_fetch_sub_explicit(&rs->awaiting, 1,
                                  memory_order_relaxed) == 1)
        seda__bus_idle_notify(rs->bus);     /* none awaited any more */
    entry_free(e);
}

void seda__rcomp_forget(struct rconn *c, const char *rid, uint64_t serial)
{
    struct rcomp_entry *e = take(c->comp, rid, serial);
    if (e) {
        atomic_fetch_sub_explicit(&e->rs->awaiting, 1, memory_order_relaxed);
        entry_free(e);
    }
}

bool seda__rcomp_cancel(struct rconn *c, const char *rid, uint64_t serial,
                        int outcome)
{
    struct rcomp_entry *e = take(c->comp, rid, serial);
    if (e)
        fire(e, outcome, NULL);
    return e != NULL;
}

void seda__rcomp_on_msg(struct rconn *c, natsMsg *m)
{
    struct rw_done d;
    void *mem;
    char err[160];
    if (seda__rw_done_decode(natsMsg_GetData(m),
                             (size_t)natsMsg_GetDataLength(m), &d, &mem, err,
                             sizeof err) != 0) {
        seda__rconn_report(c, "a completion message could not be read: %s",
                           err);
        return;
    }
    struct rcomp_entry *e = take(c->comp, d.id, 0);
    if (e) {
        atomic_fetch_add_explicit(&e->rs->completions_received, 1,
                                  memory_order_relaxed);
        fire(e, d.outcome, &d);
    }
    /* No entry: its publish gave up meanwhile, or a redelivered message
     * completed twice; the callback already ran once. */
    seda__free(mem);
}

void seda__rcomp_close_stage(struct rconn *c, struct rstage *rs)
{
    struct rcomp *t = c->comp;
    for (;;) {
        struct rcomp_entry *e = NULL;
        seda__mutex_lock(&t->mu);
        for (uint32_t b = 0; b <= t->mask && !e; b++)
            for (struct rcomp_entry **p = &t->hash[b]; *p; p = &(*p)->next)
                if ((*p)->rs == rs) {
                    e = *p;
                    *p = e->next;
                    t->n--;
                    break;
                }
        seda__mutex_unlock(&t->mu);
        if (!e)
            return;
        atomic_fetch_add_explicit(&rs->completions_lost, 1,
                                  memory_order_relaxed);
        fire(e, SEDA_DROPPED, NULL);
    }
}

void seda__rcomp_send(struct rstage *rs, const char *origin,
                      const struct rw_done *d)
{
    struct rbuf b = { 0 };
    if (seda__rw_done_encode(&b, d) != 0) {
        atomic_fetch_add_explicit(&rs->completions_dropped, 1,
                                  memory_order_relaxed);
        seda__rbuf_free(&b);
        return;
    }
    char reply[128];
    seda__rconn_reply(rs->conn, rs->sid, 'x', 0, false, reply, sizeof reply);
    /* Buffered by cnats while reconnecting; refused once closed. */
    natsStatus s = natsConnection_PublishRequest(rs->conn->nc, origin, reply,
                                                 b.p, (int)b.len);
    atomic_fetch_add_explicit(s == NATS_OK ? &rs->completions_sent
                                           : &rs->completions_dropped,
                              1, memory_order_relaxed);
    seda__rbuf_free(&b);
}
