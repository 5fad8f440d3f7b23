/* SPDX-License-Identifier: MIT */
/*
 * durable.c -- durable stages: the glue between the bus and its journal
 * (src/journal.c, one SQLite database per bus).
 *
 * DESIGN
 *   A journaled envelope carries its row key (env->ext->jkey).  The rules:
 *
 *   publish   hold a queue slot under the stage's policy, insert the rows
 *             (one group commit; exactly_once refuses known ids), then
 *             queue.  publish returns only after the commit, and a failed
 *             commit gives the slot back and returns SEDA_EIO.
 *   drain     a durable stage's batch is delivered first, then every
 *             routing decision of the batch is written in ONE transaction
 *             (hop to a durable stage = MOVE the row; completion, hop to
 *             an in-memory stage or a discarded dead letter = DELETE;
 *             dead letter to a durable DLQ = MOVE with the x-dead
 *             headers; a dead letter its durable dead-letter stage is
 *             done with = KEEP: the row stays, marked done, for
 *             seda-lua dlq), and only then do the hops, completions and
 *             dead letters take effect in memory.  A crash before the commit
 *             replays the whole batch (at-least-once); after it, nothing
 *             is replayed twice.  Envelopes whose decision is already in
 *             the journal are flagged ENV_JDONE so routing does not write
 *             again.
 *   outside a batch (pull acks, hops from in-memory stages into durable
 *             ones, a hop the next stage refused after the MOVE) the same
 *             steps are written one envelope at a time.
 *   restart   seda_stage_replay requeues a durable stage's rows in key
 *             (publish) order before anything new.
 *   shutdown  swept envelopes keep their rows: they come back next time.
 *
 *   Blobs: headers are "key\0value\0..." and the slip "stage\0..." in
 *   visiting order; both are readable with the sqlite3 tool.
 */
#include <stdio.h>
#include <string.h>

#include "core/bus.h"
#include "journal.h"

/* ---- records ---- */

struct recbuf {
    char id[SEDA_ID_MAX];
    char *hdr;                  /* owned blob */
    size_t hlen;
    char *slip;                 /* owned blob */
    size_t slen;
};

static void recbuf_free(struct recbuf *rb)
{
    seda__free(rb->hdr);
    seda__free(rb->slip);
    rb->hdr = rb->slip = NULL;
}

/* Append s and its NUL to *p (grown as needed). */
static bool blob_add(char **p, size_t *len, size_t *cap, const char *s)
{
    size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        while (c < *len + n)
            c *= 2;
        char *np = seda__realloc(*p, c);
        if (!np)
            return false;
        *p = np;
        *cap = c;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    return true;
}

/* Describe env as a row of `stage`: its slip without the first skip hops,
 * its headers plus the extra pairs (NULL-terminated k, v list).  Returns 0
 * or SEDA_ENOMEM. */
static int build_rec(const seda_env_t *env, const char *stage, int attempts,
                     int skip, const char *const *extra, struct recbuf *rb,
                     seda_jrec *rec)
{
    memset(rb, 0, sizeof *rb);
    size_t hcap = 0, scap = 0;
    bool ok = true;
    int nh = seda_env_header_count(env);
    for (int i = 0; i < nh && ok; i++) {
        const char *k, *v;
        seda_env_header_at(env, i, &k, &v);
        bool replaced = false;
        for (int j = 0; extra && extra[j] && !replaced; j += 2)
            replaced = strcmp(extra[j], k) == 0;
        if (!replaced)
            ok = blob_add(&rb->hdr, &rb->hlen, &hcap, k) &&
                 blob_add(&rb->hdr, &rb->hlen, &hcap, v);
    }
    for (int j = 0; extra && extra[j] && ok; j += 2)
        ok = blob_add(&rb->hdr, &rb->hlen, &hcap, extra[j]) &&
             blob_add(&rb->hdr, &rb->hlen, &hcap, extra[j + 1]);
    int ns = seda_env_slip_count(env);
    for (int i = skip; i < ns && ok; i++)
        ok = blob_add(&rb->slip, &rb->slen, &scap, seda_env_slip_at(env, i));
    if (!ok) {
        recbuf_free(rb);
        return SEDA_ENOMEM;
    }
    seda_env_id(env, rb->id);
    size_t plen;
    const void *p = seda_env_payload(env, &plen);
    *rec = (seda_jrec){
        .key = seda__env_jkey(env),
        .stage = stage,
        .id = rb->id,
        .attempts = attempts,
        .sender = seda_env_sender(env),
        .headers = rb->hdr, .hlen = rb->hlen,
        .slip = rb->slip, .slen = rb->slen,
        .kind = seda_env_payload_kind(env),
        .payload = p, .plen = plen,
        .published_at = seda_env_published_at(env),
        /* The wall clock when it was published: now, less its age on the
         * monotonic clock.  Written by insert only (a MOVE keeps it). */
        .published_wall = seda__journal_wall() -
                          (seda_now() - seda_env_published_at(env)),
    };
    return 0;
}

/* A dead letter whose dead-letter stage st is done with it (acked,
 * failed, forwarded out of durable stages, evicted): it arrived at st as
 * a dead letter, so it carries x-dead-reason and came from elsewhere
 * (a stage dead-lettering an envelope names itself in x-dead-from, and
 * is never its own dead-letter stage).  Its row is kept, marked done,
 * instead of deleted (see journal.h). */
static bool keep_dead(const struct seda_stage_s *st, const seda_env_t *env)
{
    const char *from = seda_env_header(env, "x-dead-from");
    return seda_env_header(env, "x-dead-reason") && from &&
           strcmp(from, st->name) != 0;
}

static void report_io(struct seda_stage_s *st, const char *what, int rc)
{
    char msg[160];
    snprintf(msg, sizeof msg, "journal: %s failed (%s); the journal may "
             "replay this envelope after a restart", what,
             seda_strerror(rc));
    seda_stage_report(st, msg);
}

/* ---- opening ---- */

static const struct seda__store_ops journal_ops;
static void forget_row(struct seda_stage_s *st, seda_env_t *env, bool keep);

/* Serialises opening: two threads declaring durable stages at once open
 * the journal once (its flock would refuse the second). */
static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;

int seda_bus_open_journal(seda_bus_t *b, char *err, size_t errlen)
{
    int rc = 0;
    pthread_mutex_lock(&open_mu);
    if (!seda__bus_store(b)) {
        struct seda_journal *j;
        char e[512];
        rc = seda__journal_open(b->data_dir, !b->sync_normal, &j, e,
                                sizeof e);
        if (rc == 0)
            seda__bus_set_store(b, &journal_ops, j);
        else if (err && errlen)
            snprintf(err, errlen, "%s", e);
    }
    pthread_mutex_unlock(&open_mu);
    return rc;
}

/* The public stage constructor: the core's, with the journal as the store
 * of a durable stage. */
int seda_stage_add(seda_bus_t *b, const seda_stage_opts *o,
                   seda_stage_t **out, char *err, size_t errlen)
{
    return seda__stage_add(b, o, out, err, errlen, seda_bus_open_journal);
}

static struct seda_journal *journal_of(struct seda_stage_s *st)
{
    return seda__bus_store(st->bus);
}

/* ---- publishing ---- */

static int durable_publish(struct seda_stage_s *st, seda_env_t **envs,
                          int n, double timeout, int *rc)
{
    *rc = 0;
    int held = 0;
    for (; held < n; held++) {
        if ((*rc = seda__stage_reserve(st, timeout)) != 0)
            break;
    }
    seda_jrec *recs = seda__calloc((size_t)(held ? held : 1), sizeof *recs);
    struct recbuf *rbs = seda__calloc((size_t)(held ? held : 1),
                                      sizeof *rbs);
    int *dup = seda__calloc((size_t)(held ? held : 1), sizeof *dup);
    int built = 0, r = 0;
    if (!recs || !rbs || !dup)
        r = SEDA_ENOMEM;
    for (; r == 0 && built < held; built++)
        r = build_rec(envs[built], st->name, seda_env_attempts(envs[built]),
                      0, NULL, &rbs[built], &recs[built]);
    if (r == 0 && held > 0)
        r = seda__journal_insert(journal_of(st), recs, held,
                                 st->durable == SEDA_EXACTLY_ONCE
                                     ? st->dedup_window : 0, dup);
    int accepted = 0;
    for (int i = 0; i < held; i++) {
        bool ok = r == 0 && !dup[i] &&
                  seda__env_set_jkey(envs[i], recs[i].key) == 0;
        if (ok && accepted == i) {
            seda__stage_fill(st, envs[i]);
            accepted++;
            continue;
        }
        /* Refused (or after a refusal: publish stops at the first). */
        if (ok)
            forget_row(st, envs[i], false);
        seda__stage_unreserve(st);
        if (*rc == 0)
            *rc = r == -EIO ? SEDA_EIO : r ? r : dup[i] ? SEDA_EDUP : 0;
        envs[i]->done = NULL;
        seda__env_free(envs[i]);
    }
    for (int i = held; i < n; i++) {
        envs[i]->done = NULL;
        seda__env_free(envs[i]);
    }
    for (int i = 0; i < built; i++)
        recbuf_free(&rbs[i]);
    seda__free(recs);
    seda__free(rbs);
    seda__free(dup);
    return accepted;
}

/* ---- single steps ---- */

static int durable_enter(struct seda_stage_s *to, seda_env_t *env)
{
    seda_jrec rec;
    struct recbuf rb;
    int rc = build_rec(env, to->name, seda_env_attempts(env), 0, NULL, &rb,
                       &rec);
    if (rc == 0)
        rc = seda__journal_insert(journal_of(to), &rec, 1, 0, NULL);
    if (rc == 0)
        rc = seda__env_set_jkey(env, rec.key);
    recbuf_free(&rb);
    if (rc)
        report_io(to, "insert", rc);
    return rc;
}

static int durable_move(struct seda_stage_s *from, struct seda_stage_s *to,
                       seda_env_t *env, int skip_slip)
{
    seda_jop op = { .op = SEDA_JOP_MOVE };
    struct recbuf rb;
    int rc = build_rec(env, to->name, 1, skip_slip, NULL, &rb, &op.rec);
    if (rc == 0)
        rc = seda__journal_apply(journal_of(from), &op, 1);
    recbuf_free(&rb);
    if (rc)
        report_io(from, "move", rc);
    return rc;
}

/* Remove env's row (keep: keep a dead letter's, marked done). */
static void forget_row(struct seda_stage_s *st, seda_env_t *env, bool keep)
{
    struct seda_journal *j = journal_of(st);
    int64_t key = seda__env_jkey(env);
    if (!j || !key)
        return;
    seda_jop op = { .op = keep ? SEDA_JOP_KEEP : SEDA_JOP_DELETE };
    op.rec.key = key;
    int rc = seda__journal_apply(j, &op, 1);
    if (rc)
        report_io(st, keep ? "keep" : "delete", rc);
    seda__env_set_jkey(env, 0);
}

static void durable_forget(struct seda_stage_s *st, seda_env_t *env)
{
    forget_row(st, env, keep_dead(st, env));
}

/* ---- a drain batch ---- */

static void durable_batch(struct seda_stage_s *st, seda_env_t **envs,
                         const int *res, int n)
{
    struct seda_bus_s *b = st->bus;
    struct seda_journal *j = journal_of(st);
    if (!j || n == 0)
        return;
    seda_jop ops[256];
    struct recbuf rbs[256];
    int nops = 0;
    for (int i = 0; i < n && nops < 256; i++) {
        seda_env_t *env = envs[i];
        int64_t key = seda__env_jkey(env);
        if (!key || res[i] == DR_RETRY)
            continue;
        const char *reason = res[i] == DR_DEAD_MAX ? "max_attempts"
                           : res[i] == DR_DEAD_NOCONS ? "no_consumers"
                                                      : NULL;
        struct seda_stage_s *to = NULL;
        if (!reason) {
            const char *next = seda_env_slip_at(env, 0);
            if (!next) {
                ops[nops].op = keep_dead(st, env) ? SEDA_JOP_KEEP
                                                  : SEDA_JOP_DELETE;
                ops[nops].rec = (seda_jrec){ .key = key };  /* completion */
                rbs[nops].hdr = rbs[nops].slip = NULL;
                env->flags |= ENV_JDONE;
                nops++;
                continue;
            }
            to = seda__bus_lookup(b, next);
            if (!to)
                reason = "no_such_stage";
        }
        if (reason) {
            const char *dlq = st->dead_letter ? st->dead_letter
                                              : b->dead_letter;
            to = dlq && strcmp(dlq, st->name) != 0 ? seda__bus_lookup(b, dlq)
                                                   : NULL;
        }
        if (to && to->durable) {
            const char *extra[] = { "x-dead-reason", reason, "x-dead-from",
                                    st->name, NULL };
            ops[nops].op = SEDA_JOP_MOVE;
            if (build_rec(env, to->name, 1,
                          reason ? seda_env_slip_count(env) : 1,
                          reason ? extra : NULL, &rbs[nops],
                          &ops[nops].rec) != 0)
                continue;               /* no flag: routing writes it */
        } else {
            ops[nops].op = keep_dead(st, env) ? SEDA_JOP_KEEP
                                              : SEDA_JOP_DELETE;
            ops[nops].rec = (seda_jrec){ .key = key };
            rbs[nops].hdr = rbs[nops].slip = NULL;
        }
        env->flags |= ENV_JDONE;
        nops++;
    }
    int rc = nops ? seda__journal_apply(j, ops, nops) : 0;
    if (rc)
        report_io(st, "batch commit", rc);
    for (int i = 0; i < nops; i++) {
        if (ops[i].op == SEDA_JOP_MOVE)
            recbuf_free(&rbs[i]);
    }
    /* Rows deleted (or kept) above are no longer the envelopes' (the
     * flag tells routing not to write again; a later durable hop inserts
     * anew). */
    for (int i = 0; i < n; i++) {
        if (!(envs[i]->flags & ENV_JDONE))
            continue;
        for (int k = 0; k < nops; k++)
            if (ops[k].op != SEDA_JOP_MOVE &&
                ops[k].rec.key == seda__env_jkey(envs[i])) {
                seda__env_set_jkey(envs[i], 0);
                break;
            }
    }
}

static void journal_close(void *store)
{
    seda__journal_close(store);
}

static const struct seda__store_ops journal_ops = {
    .publish = durable_publish,
    .batch = durable_batch,
    .enter = durable_enter,
    .move = durable_move,
    .forget = durable_forget,
    .close = journal_close,
};

/* ---- replay ---- */

struct replay_ctx {
    struct seda_stage_s *st;
    seda_env_t **envs;
    int n, cap;
    int rc;
};

static int replay_one(const seda_jrec *rec, void *ud)
{
    struct replay_ctx *c = ud;
    /* Parse the blobs back into headers and slip. */
    const char *hk[128];
    const char *sl[128];
    int nh = 0, ns = 0;
    const char *p = rec->headers, *end = p ? p + rec->hlen : NULL;
    while (p && p < end && nh < 127) {
        hk[nh++] = p;
        p += strlen(p) + 1;
    }
    p = rec->slip;
    end = p ? p + rec->slen : NULL;
    while (p && p < end && ns < 128) {
        sl[ns++] = p;
        p += strlen(p) + 1;
    }
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.sender = rec->sender;
    o.headers = hk;
    o.nheaders = nh / 2;
    o.slip = sl;
    o.nslip = ns;
    o.kind = rec->kind;
    o.id = rec->id && *rec->id ? rec->id : NULL;
    int rc;
    seda_env_t *env = seda__env_new(rec->payload, rec->plen, &o, &rc);
    if (!env || seda__env_set_jkey(env, rec->key) != 0) {
        seda__env_free(env);
        c->rc = rc ? rc : SEDA_ENOMEM;
        return 1;
    }
    env->attempts = (uint16_t)(rec->attempts > 0 ? rec->attempts : 1);
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 64;
        seda_env_t **a = seda__realloc(c->envs, sizeof *a * (size_t)cap);
        if (!a) {
            seda__env_free(env);
            c->rc = SEDA_ENOMEM;
            return 1;
        }
        c->envs = a;
        c->cap = cap;
    }
    c->envs[c->n++] = env;
    return 0;
}

int seda_stage_replay(seda_stage_t *st)
{
    if (!st->durable)
        return 0;
    struct seda_journal *j = journal_of(st);
    if (!j)
        return SEDA_EINVAL;
    struct replay_ctx c = { st, NULL, 0, 0, 0 };
    int rc = seda__journal_replay(j, st->name, replay_one, &c);
    if (rc == 0)
        rc = c.rc;
    if (rc == 0)
        rc = seda__stage_requeue_front(st, c.envs, c.n);
    if (rc != 0) {
        for (int i = 0; i < c.n; i++)
            seda__env_free(c.envs[i]);
        seda__free(c.envs);
        return rc < 0 ? rc : SEDA_EIO;
    }
    seda__free(c.envs);
    return c.n;
}
