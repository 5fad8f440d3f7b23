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
 *   Completions are tied to their message.  Each entry has a secret of
 *   128 random bits, and the message names "<inbox>.c.<secret>" as its
 *   origin: a completion is taken only on the subject of its own entry,
 *   with the entry's remote id.  So nobody who did not see the message
 *   can end an on_complete (ids are easy to guess, secrets are not), a
 *   completion for one message cannot end another's, and a completion on
 *   any other subject is refused, counted (completions_refused) and
 *   reported.  (Whoever can read the stage's messages sees the secret
 *   too: NATS permissions on the stage's subject are what keep readers
 *   out.)  The consumer takes an origin only in exactly that form
 *   (seda__rcomp_origin_ok), so a foreign message cannot make it publish
 *   to another subject.
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
#include <sys/random.h>

#include "remote_int.h"

bool seda__rcomp_origin_ok(const char *origin)
{
    /* "_INBOX.<nuid>.c.<32 hex>": a literal subject of this form only. */
    if (!origin || strncmp(origin, "_INBOX.", 7) != 0)
        return false;
    const char *p = origin + 7;
    size_t n = 0;
    for (; (p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= 'a' && p[n] <= 'z') ||
           (p[n] >= '0' && p[n] <= '9'); n++) {
    }
    if (n == 0 || n > 40 || strncmp(p + n, ".c.", 3) != 0)
        return false;
    p += n + 3;
    for (n = 0; (p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f');
         n++) {
    }
    return n == 32 && p[n] == '\0';
}

/* An awaited completion.  Guarded by the table's mu while in the table;
 * whoever takes it out (under mu) owns it. */
struct rcomp_entry {
    char *rid;                  /* owned key */
    char *local_id;             /* owned: the id the publisher knows */
    uint64_t serial;            /* names the entry */
    seda_done_fn done;
    void *ud;
    struct rstage *rs;          /* the stage it left through */
    char secret[33];            /* 32 hex digits: its origin's last token */
    struct rcomp_entry *next;   /* hash chain, oldest first */
};

/* Completions taken, remembered by the first 64 bits of their secret,
 * so that one coming again (re-sent, or a redelivered message completed
 * twice) is told from a forgery.  Sized for a minute of completions at
 * a thousand a second; one older than that is answered all the same
 * (seda__rcomp_on_msg), only counted refused. */
#define RECENT 65536

struct rcomp {
    seda__mutex_t mu;
    uint64_t *recent;           /* ring of the last RECENT; guarded by mu */
    unsigned recent_n;          /* next slot; guarded by mu */
    struct rcomp_entry **hash;  /* guarded by mu */
    uint32_t mask;              /* buckets - 1; guarded by mu */
    int n;                      /* entries; guarded by mu */
    uint64_t serial;            /* last serial given; guarded by mu */
};

/* A secret's first 16 hex digits as a number (never 0: 0 marks an empty
 * slot of the ring). */
static uint64_t fingerprint(const char *secret)
{
    uint64_t v = 0;
    for (int i = 0; i < 16 && secret[i]; i++) {
        char ch = secret[i];
        v = v << 4 | (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
    }
    return v ? v : 1;
}

/* Remember secret as taken (a re-sent completion is acknowledged). */
static void recent_add(struct rcomp *t, const char *secret)
{
    uint64_t f = fingerprint(secret);
    seda__mutex_lock(&t->mu);
    if (t->recent)
        t->recent[t->recent_n++ % RECENT] = f;
    seda__mutex_unlock(&t->mu);
}

static bool recent_has(struct rcomp *t, const char *secret)
{
    uint64_t f = fingerprint(secret);
    bool has = false;
    seda__mutex_lock(&t->mu);
    for (unsigned i = 0; t->recent && i < RECENT && !has; i++)
        has = t->recent[i] == f;
    seda__mutex_unlock(&t->mu);
    return has;
}

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
    t->recent = seda__calloc(RECENT, sizeof *t->recent);   /* or none */
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
    seda__free(t->recent);
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
                           seda_done_fn done, void *ud, char secret[33])
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
    unsigned char rnd[16];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t k = getrandom(rnd + got, sizeof rnd - got, 0);
        if (k <= 0) {
            entry_free(e);              /* no secret, no entry */
            return 0;
        }
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(e->secret + 2 * i, 3, "%02x", rnd[i]);
    snprintf(secret, 33, "%s", e->secret);
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

/* Take the entry of rid with serial (0: any) and secret (NULL: any). */
static struct rcomp_entry *take(struct rcomp *t, const char *rid,
                                uint64_t serial, const char *secret)
{
    seda__mutex_lock(&t->mu);
    struct rcomp_entry *e = NULL;
    for (struct rcomp_entry **p = &t->hash[hash_str(rid) & t->mask]; *p;
         p = &(*p)->next) {
        if (strcmp((*p)->rid, rid) == 0 &&
            (serial == 0 || (*p)->serial == serial) &&
            (!secret || strcmp((*p)->secret, secret) == 0)) {
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
        seda_log_write(SEDA_LOG_ERROR, seda_stage_name(rs->st),
                       "remote stage: out of memory ending an on_complete "
                       "callback; it is lost");
    }
    atomic_fetch_add_explicit(&rs->progress, 1, memory_order_relaxed);
    if (atomic_fetch_sub_explicit(&rs->awaiting, 1,
                                  memory_order_relaxed) == 1)
        seda__bus_idle_notify(rs->bus);     /* none awaited any more */
    entry_free(e);
}

void seda__rcomp_forget(struct rconn *c, const char *rid, uint64_t serial)
{
    struct rcomp_entry *e = take(c->comp, rid, serial, NULL);
    if (e) {
        atomic_fetch_sub_explicit(&e->rs->awaiting, 1, memory_order_relaxed);
        entry_free(e);
    }
}

bool seda__rcomp_cancel(struct rconn *c, const char *rid, uint64_t serial,
                        int outcome)
{
    struct rcomp_entry *e = take(c->comp, rid, serial, NULL);
    if (e)
        fire(e, outcome, NULL);
    return e != NULL;
}

void seda__rcomp_on_msg(struct rconn *c, natsMsg *m, const char *secret)
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
    struct rcomp_entry *e = strlen(secret) == 32
                                ? take(c->comp, d.id, 0, secret) : NULL;
    bool known = e != NULL;
    if (!e) {
        /* Not an entry's: a completion that came again (re-sent, or a
         * redelivered message completed twice: the callback ran once), or
         * one that names no entry of this secret -- forged, or for
         * another message.  Told apart by the recent secrets. */
        known = strlen(secret) == 32 && recent_has(c->comp, secret);
        if (!known) {
            atomic_fetch_add_explicit(&c->completions_refused, 1,
                                      memory_order_relaxed);
            seda__rconn_report(c, "a completion for '%.80s' was refused: "
                               "it names no message this process awaits",
                               d.id);
        }
    }
    /* Answered either way, so the sender stops re-sending it: "+OK"
     * when taken now or before, "-NO" when refused.  A refused one from
     * a seda consumer is a completion that came again after the last
     * RECENT were taken (an origin slow to answer under load gets its
     * completions re-sent); unanswered, each would be re-sent for a
     * minute and crowd out the completions still to come. */
    const char *reply = natsMsg_GetReply(m);
    if (reply && *reply)
        natsConnection_Publish(c->nc, reply, known ? "+OK" : "-NO", 3);
    if (e) {
        recent_add(c->comp, secret);
        atomic_fetch_add_explicit(&e->rs->completions_received, 1,
                                  memory_order_relaxed);
        fire(e, d.outcome, &d);
    }
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

/* ---- sending completions: acknowledged, re-sent, bounded ---- */

#define CSEND_EVERY_NS  1000000000LL    /* no answer within: send again,
                                           then 2, 4 and 8 s apart */
#define CSEND_LIFE_NS  60000000000LL    /* then give up, loudly */
#define CSEND_MAX       65536           /* completions awaiting an answer */
#define CSEND_NOBODY_NS 10000000000LL   /* no-responders only, this long:
                                           the origin is gone */

/* A completion sent and not yet acknowledged by its origin.  Guarded by
 * the stage's cmu while in its list. */
struct rcsend {
    uint64_t n;                 /* its reply number */
    char *origin;               /* owned */
    void *body;                 /* owned */
    size_t len;
    char id[SEDA_ID_MAX];       /* the itinerary's, for reports */
    int sends;
    int64_t nobody_since;       /* first no-responders answer of the
                                   current run of them (0: none) */
    int64_t sent;               /* last sent (monotonic ns) */
    int64_t deadline;
    struct rcsend *next;
};

static void csend_free(struct rcsend *x)
{
    seda__free(x->origin);
    seda__free(x->body);
    seda__free(x);
}

static void csend_out(struct rstage *rs, struct rcsend *x)
{
    char reply[128];
    seda__rconn_reply(rs->conn, rs->sid, 'x', x->n, true, reply,
                      sizeof reply);
    /* Buffered by cnats while reconnecting; what is lost goes again. */
    natsConnection_PublishRequest(rs->conn->nc, x->origin, reply, x->body,
                                  (int)x->len);
}

static void given_up(struct rstage *rs, const char *id, const char *why)
{
    atomic_fetch_add_explicit(&rs->completions_dropped, 1,
                              memory_order_relaxed);
    char msg[300];
    snprintf(msg, sizeof msg, "the completion of '%.80s' could not be "
             "delivered to its origin (%s): its on_complete does not fire",
             id, why);
    seda_stage_report(rs->st, msg);
}

void seda__rcomp_send(struct rstage *rs, const char *origin,
                      const struct rw_done *d)
{
    if (!seda__rcomp_origin_ok(origin)) {
        given_up(rs, d->id, "not a seda completion subject");
        return;
    }
    struct rbuf b = { 0 };
    int64_t limit = natsConnection_GetMaxPayload(rs->conn->nc);
    int rc = seda__rw_done_encode(&b, d);
    if (rc == 0 && limit > 0 && (int64_t)b.len + 1024 > limit) {
        /* The final payload does not fit: the origin hears that the
         * itinerary ended, dead-lettered with reason too_large, and why
         * (its payload stays where it ended: the handler's stage). */
        char detail[200];
        snprintf(detail, sizeof detail, "the final payload (%zu bytes) is "
                 "over the server's max_payload of %lld bytes", d->plen,
                 (long long)limit);
        const char *hdr[4] = { "x-dead-reason", "too_large",
                               "x-dead-detail", detail };
        struct rw_done small = *d;
        small.outcome = SEDA_DEAD_LETTERED;
        small.payload = NULL;
        small.plen = 0;
        small.nh = 2;
        small.hdr = hdr;
        b.len = 0;
        rc = seda__rw_done_encode(&b, &small);
        atomic_fetch_add_explicit(&rs->completions_too_large, 1,
                                  memory_order_relaxed);
        char msg[400];
        snprintf(msg, sizeof msg, "the completion of '%.80s': %s; its "
                 "origin sees it dead-lettered (too_large)", d->id, detail);
        seda_stage_report(rs->st, msg);
    }
    struct rcsend *x = rc == 0 ? seda__calloc(1, sizeof *x) : NULL;
    if (!x || !(x->origin = seda__strdup(origin))) {
        if (x)
            csend_free(x);
        seda__rbuf_free(&b);
        given_up(rs, d->id, "out of memory");
        return;
    }
    x->body = b.p;                      /* taken */
    x->len = b.len;
    snprintf(x->id, sizeof x->id, "%s", d->id ? d->id : "?");
    int64_t now = seda__now_ns();
    x->sent = now;
    x->deadline = now + CSEND_LIFE_NS;
    x->sends = 1;
    seda__mutex_lock(&rs->cmu);
    bool full = rs->ncsend >= CSEND_MAX;
    if (!full) {
        x->n = ++rs->csend_n;
        x->next = rs->csend;
        rs->csend = x;
        rs->ncsend++;
        csend_out(rs, x);               /* under cmu: a "+OK" waits */
    }
    seda__mutex_unlock(&rs->cmu);
    if (full) {
        given_up(rs, x->id, "too many completions unacknowledged");
        csend_free(x);
        return;
    }
    atomic_fetch_add_explicit(&rs->completions_sent, 1, memory_order_relaxed);
}

/* Take completion n out of rs's list (cmu taken). */
static struct rcsend *csend_take(struct rstage *rs, uint64_t n)
{
    seda__mutex_lock(&rs->cmu);
    struct rcsend *x = NULL;
    for (struct rcsend **p = &rs->csend; *p; p = &(*p)->next)
        if ((*p)->n == n) {
            x = *p;
            *p = x->next;
            rs->ncsend--;
            break;
        }
    seda__mutex_unlock(&rs->cmu);
    return x;
}

void seda__rcomp_on_reply(struct rstage *rs, uint64_t n, natsMsg *m)
{
    uint64_t pending;
    int status = seda__rjs_status(m, &pending);
    if (status != 0 && status != 503)
        return;                         /* not an answer */
    if (status == 503) {
        /* Nobody listens: the origin is gone, or reconnecting (to another
         * server of a cluster, say, where its interest takes a moment to
         * spread).  Sent again (by the tick) CSEND_EVERY_NS apart until
         * nobody has listened for CSEND_NOBODY_NS: a count of answers
         * gave up within a few seconds, inside a server's restart. */
        int64_t now = seda__now_ns();
        seda__mutex_lock(&rs->cmu);
        struct rcsend *y = rs->csend;
        while (y && y->n != n)
            y = y->next;
        if (y && y->nobody_since == 0)
            y->nobody_since = now;
        bool keep = y && now - y->nobody_since < CSEND_NOBODY_NS;
        seda__mutex_unlock(&rs->cmu);
        if (keep)
            return;
    }
    struct rcsend *x = csend_take(rs, n);
    if (!x)
        return;                         /* answered already */
    if (status == 503)                  /* nobody listened: origin gone */
        atomic_fetch_add_explicit(&rs->completions_dropped, 1,
                                  memory_order_relaxed);
    atomic_fetch_add_explicit(&rs->progress, 1, memory_order_relaxed);
    csend_free(x);
}

void seda__rcomp_tick(struct rstage *rs, int64_t now)
{
    struct rcsend *dead = NULL;
    bool up = seda__rconn_up(rs->conn);
    seda__mutex_lock(&rs->cmu);
    for (struct rcsend **p = &rs->csend; *p;) {
        struct rcsend *x = *p;
        if (now >= x->deadline) {
            *p = x->next;
            rs->ncsend--;
            x->next = dead;
            dead = x;
            continue;
        }
        if (up && now - x->sent >= CSEND_EVERY_NS << (x->sends < 4
                                                      ? x->sends - 1 : 3)) {
            csend_out(rs, x);
            x->sent = now;
            x->sends++;
            atomic_fetch_add_explicit(&rs->completions_resent, 1,
                                      memory_order_relaxed);
        }
        p = &x->next;
    }
    seda__mutex_unlock(&rs->cmu);
    for (struct rcsend *x = dead, *n; x; x = n) {
        n = x->next;
        char why[120];
        snprintf(why, sizeof why, "no answer in %lld s, sent %d times",
                 (long long)(CSEND_LIFE_NS / 1000000000LL), x->sends);
        given_up(rs, x->id, why);
        csend_free(x);
    }
}

bool seda__rcomp_sending(struct rstage *rs)
{
    seda__mutex_lock(&rs->cmu);
    bool any = rs->ncsend > 0;
    seda__mutex_unlock(&rs->cmu);
    return any;
}

void seda__rcomp_close_sends(struct rstage *rs)
{
    seda__mutex_lock(&rs->cmu);
    struct rcsend *x = rs->csend;
    rs->csend = NULL;
    rs->ncsend = 0;
    seda__mutex_unlock(&rs->cmu);
    for (struct rcsend *n; x; x = n) {
        n = x->next;
        if (x->sends > 0 && x->n) {
            /* Sent at least once, never acknowledged: it may have
             * arrived; counted, not reported as lost. */
            atomic_fetch_add_explicit(&rs->completions_unacked, 1,
                                      memory_order_relaxed);
        }
        csend_free(x);
    }
}
