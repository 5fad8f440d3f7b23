/* SPDX-License-Identifier: MIT */
/*
 * durable.c -- durable stages: the glue between the bus and its journal
 * (journal.c, one SQLite database per bus).
 *
 * DESIGN
 *   A journaled envelope carries its row key (env->ext->jkey).  The rules:
 *
 *   publish   hold a queue slot under the stage's policy, insert the rows
 *             (one group commit; exactly_once refuses known ids), then
 *             queue.  publish returns only after the commit, and a failed
 *             commit gives the slot back and returns SEDA_EIO.  With
 *             on_durable the same steps run, but the commit is the
 *             journal's committer's: publish returns once the row is
 *             queued, and the journal's callback (apub_done) queues the
 *             envelope or gives the slot back, then tells the publisher.
 *   drain     a durable stage's batch is delivered first, then every
 *             routing decision of the batch is written in ONE transaction
 *             (hop to a durable stage = MOVE the row; completion, hop to
 *             an in-memory stage or a discarded dead letter = DELETE;
 *             dead letter to a durable DLQ = MOVE with the x-dead
 *             headers; a dead letter its durable dead-letter stage is
 *             done with = KEEP: the row stays, marked done, for
 *             seda-lua dlq).  A batch with a MOVE among its decisions
 *             waits for that commit, and only then do the hops,
 *             completions and dead letters take effect in memory: a crash
 *             before the commit replays the whole batch (at-least-once);
 *             after it, nothing is replayed twice.  A batch without one
 *             (every decision only acknowledges) queues its commit for
 *             the journal's next group and goes on (ack_async): a crash
 *             before that commit replays those envelopes, as the
 *             at-least-once promise allows, and the worker never waits
 *             for an fsync of acknowledgements.  Envelopes whose
 *             decision is written (or queued) are flagged ENV_JDONE so
 *             routing does not write again.
 *   outside a batch (pull acks, a hop the next stage refused after the
 *             MOVE, a dead letter from memory into a durable DLQ) the
 *             same steps are written one envelope at a time.  A hop from
 *             an in-memory stage into a durable one (durable_enter_async)
 *             is a publish without a publisher: the slot is held in the
 *             next stage, the row queued for the next group, and the
 *             envelope queued there when it commits; the worker goes on.
 *             A failed commit is reported and the envelope goes on without
 *             a row (as durable_enter's failure).
 *   restart   seda_stage_replay requeues a durable stage's rows in key
 *             (publish) order before anything new (durable_replay.c).
 *   shutdown  swept envelopes keep their rows: they come back next time.
 *
 *   Blobs: headers are "key\0value\0..." and the slip "stage\0..." in
 *   visiting order; both are readable with the sqlite3 tool.
 */
#include <stdio.h>
#include <string.h>

#include "core/door.h"
#include "core/store.h"
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
           strcmp(from, seda_stage_name(st)) != 0;
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
static void apub_group_end(void);

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
        rc = seda__journal_open(seda__bus_data_dir(b), !seda__bus_sync_normal(b), &j, e,
                                sizeof e);
        if (rc == 0) {
            seda__journal_set_group_wait(
                j, (int64_t)(seda__bus_group_wait(b) * 1e9));
            seda__journal_set_group_end(j, apub_group_end);
            seda__bus_set_store(b, &journal_ops, j);
        }
        else if (err && errlen)
            snprintf(err, errlen, "%s", e);
    }
    pthread_mutex_unlock(&open_mu);
    return rc;
}


static struct seda_journal *journal_of(struct seda_stage_s *st)
{
    return seda__bus_store(seda__stage_bus(st));
}

void seda_bus_journal_stats(seda_bus_t *b, seda_journal_stats *out)
{
    memset(out, 0, sizeof *out);
    struct seda_journal *j = seda__bus_store(b);
    if (!j)
        return;
    struct seda_wal_discard d;
    seda__journal_wal_discarded(j, &d);
    out->open = true;
    out->wal_discarded_frames = (uint64_t)d.frames;
    out->wal_discarded_bytes = (uint64_t)d.bytes;
    out->quarantined = seda__journal_quarantine_count(j);
    struct seda_jgroups g;
    seda__journal_groups(j, &g);
    out->commits = g.txns;
    out->requests = g.reqs;
    out->group_max = g.max;
    out->fsyncs = g.fsyncs;
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
        r = build_rec(envs[built], seda_stage_name(st), seda_env_attempts(envs[built]),
                      0, NULL, &rbs[built], &recs[built]);
    if (r == 0 && held > 0)
        r = seda__journal_insert(journal_of(st), recs, held,
                                 seda__stage_durability(st) == SEDA_EXACTLY_ONCE
                                     ? seda__stage_dedup_window(st) : 0, dup);
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

/* One publish waiting for its commit without its publisher (on_durable):
 * the journal's callback settles it. */
struct apub {
    struct seda_stage_s *st;
    seda_env_t *env;
    seda_jrec rec;
    struct recbuf rb;
    int dup;
    int rc;                     /* the outcome, set by apub_done */
    bool hop;                   /* a hop from memory (durable_enter_async):
                                   no publisher to tell, counted in the
                                   journal's user_open until queued */
    seda_durable_fn done;
    void *ud;
};

/* A group's publishes, settled at the group's end (apub_group_end): the
 * committed ones filled into their stages, a run of one stage in one
 * step (its drain task then takes them as one batch, instead of
 * starting on the first while the committer fills the rest), then every
 * publisher told, in commit order.  The committing thread's own (one
 * group at a time per thread). */
static _Thread_local struct {
    struct apub **v;            /* in commit order */
    int n, cap;
} tl_group;

/* Tell a's publisher, and free a.  A hop has no publisher: it was
 * queued in its stage just before, and the bus may be idle now. */
static void apub_tell(struct apub *a)
{
    if (a->hop) {
        struct seda_bus_s *b = seda__stage_bus(a->st);
        seda__free(a);
        if (seda__journal_user_open(seda__bus_store(b), -1) == 0)
            seda__bus_idle_notify(b);
        return;
    }
    seda_durable_fn done = a->done;
    void *ud = a->ud;
    int rc = a->rc;
    seda__free(a);
    done(rc, ud);
}

static void apub_group_end(void)
{
    seda_env_t *run[64];
    struct seda_stage_s *st = NULL;
    int k = 0;
    for (int i = 0; i < tl_group.n; i++) {
        struct apub *a = tl_group.v[i];
        if (a->rc)
            continue;
        if (k == 64 || (k > 0 && a->st != st)) {
            seda__stage_fill_many(st, run, k);
            k = 0;
        }
        st = a->st;
        run[k++] = a->env;
    }
    if (k > 0)
        seda__stage_fill_many(st, run, k);
    for (int i = 0; i < tl_group.n; i++)
        apub_tell(tl_group.v[i]);
    /* Not kept between groups: a thread that ends leaves nothing. */
    seda__free(tl_group.v);
    tl_group.v = NULL;
    tl_group.n = tl_group.cap = 0;
}

/* The journal's callback (the committing thread, no journal lock). */
static void apub_done(int jrc, void *arg)
{
    struct apub *a = arg;
    recbuf_free(&a->rb);
    if (jrc == 0 && !a->dup) {
        /* Cannot fail: the envelope's ext was made before queueing. */
        seda__env_set_jkey(a->env, a->rec.key);
    } else if (a->hop) {
        /* As durable_enter's failure: reported, and the envelope goes on
         * into its stage without a row. */
        report_io(a->st, "insert", jrc);
        seda__env_set_jkey(a->env, 0);
    } else {
        a->rc = jrc == -EIO ? SEDA_EIO : jrc ? jrc : SEDA_EDUP;
        seda__env_set_jkey(a->env, 0);
        seda__stage_unreserve(a->st);
        a->env->done = NULL;
        seda__env_free(a->env);
        a->env = NULL;
    }
    if (tl_group.n == tl_group.cap) {
        int cap = tl_group.cap ? tl_group.cap * 2 : 64;
        struct apub **v = seda__realloc(tl_group.v, sizeof *v * (size_t)cap);
        if (v) {
            tl_group.v = v;
            tl_group.cap = cap;
        }
    }
    if (tl_group.n < tl_group.cap) {
        tl_group.v[tl_group.n++] = a;           /* apub_group_end */
        return;
    }
    /* Out of memory for the list: settle it now (out of order only
     * then). */
    if (a->rc == 0)
        seda__stage_fill(a->st, a->env);
    apub_tell(a);
}

static int durable_publish_async(struct seda_stage_s *st, seda_env_t *env,
                                 double timeout, seda_durable_fn done,
                                 void *ud)
{
    int rc = seda__stage_reserve(st, timeout);
    if (rc) {
        env->done = NULL;
        seda__env_free(env);
        return rc;
    }
    struct apub *a = seda__calloc(1, sizeof *a);
    /* The key lands in env's ext after the commit: made now (a -1 no
     * one reads: env is nobody else's yet), so that cannot fail then. */
    rc = a && seda__env_set_jkey(env, -1) == 0 ? 0 : SEDA_ENOMEM;
    if (rc == 0)
        rc = build_rec(env, seda_stage_name(st), seda_env_attempts(env), 0,
                       NULL, &a->rb, &a->rec);
    if (rc == 0) {
        a->st = st;
        a->env = env;
        a->done = done;
        a->ud = ud;
        rc = seda__journal_insert_async(
            journal_of(st), &a->rec, 1,
            seda__stage_durability(st) == SEDA_EXACTLY_ONCE
                ? seda__stage_dedup_window(st) : 0, &a->dup, apub_done, a);
        if (rc)
            recbuf_free(&a->rb);
    }
    if (rc) {
        seda__free(a);
        seda__env_set_jkey(env, 0);
        seda__stage_unreserve(st);
        env->done = NULL;
        seda__env_free(env);
        return rc == -EIO ? SEDA_EIO : rc;
    }
    return 0;
}

/* ---- single steps ---- */

/* A hop from an in-memory stage into durable stage `to`: as
 * durable_publish_async, with the slot held for hop_timeout and no
 * publisher (apub_tell).  A refused slot is the caller's to handle; any
 * later failure is durable_enter's (reported, env goes on without a
 * row), so once the slot is held this returns 0. */
static int durable_enter_async(struct seda_stage_s *to, seda_env_t *env,
                               double timeout)
{
    int rc = seda__stage_reserve(to, timeout);
    if (rc)
        return rc;
    struct seda_journal *j = journal_of(to);
    struct apub *a = seda__calloc(1, sizeof *a);
    rc = a && seda__env_set_jkey(env, -1) == 0 ? 0 : SEDA_ENOMEM;
    if (rc == 0)
        rc = build_rec(env, seda_stage_name(to), seda_env_attempts(env), 0,
                       NULL, &a->rb, &a->rec);
    if (rc == 0) {
        a->st = to;
        a->env = env;
        a->hop = true;
        seda__journal_user_open(j, 1);
        rc = seda__journal_insert_async(j, &a->rec, 1, 0, &a->dup,
                                        apub_done, a);
        if (rc) {
            recbuf_free(&a->rb);
            seda__journal_user_open(j, -1);
        }
    }
    if (rc) {
        seda__free(a);
        seda__env_set_jkey(env, 0);
        report_io(to, "insert", rc);
        seda__stage_fill(to, env);
    }
    return 0;
}

static int durable_enter(struct seda_stage_s *to, seda_env_t *env)
{
    seda_jrec rec;
    struct recbuf rb;
    int rc = build_rec(env, seda_stage_name(to), seda_env_attempts(env), 0, NULL, &rb,
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
    int rc = build_rec(env, seda_stage_name(to), 1, skip_slip, NULL, &rb, &op.rec);
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

/* A batch's acknowledgements committing without its worker: made by
 * ack_async, immutable, the journal's from its queueing until aack_done
 * (which reports a failure and frees it). */
struct aack {
    struct seda_stage_s *st;
    int n;
    seda_jop ops[];
};

/* The journal's callback (the committing thread, no journal lock). */
static void aack_done(int jrc, void *arg)
{
    struct aack *a = arg;
    if (jrc)
        report_io(a->st, "batch commit", jrc);
    struct seda_bus_s *b = seda__stage_bus(a->st);
    seda__free(a);
    /* The last one: the bus may be idle now (journal_settled). */
    if (seda__journal_lazy_open(seda__bus_store(b)) == 0)
        seda__bus_idle_notify(b);
}

/* Queue ops (no MOVE among them: nothing to free but the copy) for the
 * journal's next group without waiting.  Returns 0, or non-zero when
 * they could not be queued (the caller commits them itself). */
static int ack_async(struct seda_stage_s *st, struct seda_journal *j,
                     const seda_jop *ops, int nops)
{
    struct aack *a = seda__malloc(sizeof *a + sizeof *ops * (size_t)nops);
    if (!a)
        return SEDA_ENOMEM;
    a->st = st;
    a->n = nops;
    memcpy(a->ops, ops, sizeof *ops * (size_t)nops);
    int rc = seda__journal_apply_async(j, a->ops, nops, aack_done, a);
    if (rc)
        seda__free(a);
    return rc;
}

static void durable_batch(struct seda_stage_s *st, seda_env_t **envs,
                         const int *res, int n)
{
    struct seda_bus_s *b = seda__stage_bus(st);
    struct seda_journal *j = journal_of(st);
    if (!j || n == 0)
        return;
    seda_jop ops[256];
    struct recbuf rbs[256];
    int nops = 0;
    for (int i = 0; i < n && nops < 256; i++) {
        seda_env_t *env = envs[i];
        int64_t key = seda__env_jkey(env);
        if (!key)
            continue;
        if (res[i] == DR_RETRY) {
            /* The retry's attempt and, with a backoff, when it is due
             * (drawn once here: the timer uses the same), so a restart
             * honours both. */
            int64_t delay = seda__route_backoff_ns(st, env->attempts + 1);
            env->ext->due = delay > 0 ? seda__now_ns() + delay : 0;
            ops[nops].op = SEDA_JOP_RETRY;
            ops[nops].rec = (seda_jrec){
                .key = key, .attempts = env->attempts + 1,
                .due_wall = delay > 0 ? seda__journal_wall() + (double)delay / 1e9
                                      : 0,
            };
            rbs[nops].hdr = rbs[nops].slip = NULL;
            nops++;
            continue;
        }
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
            to = seda__route_hop_target(st, env, next);
            if (!to)
                reason = "no_such_stage";
        }
        if (reason) {
            const char *dlq = seda__stage_dead_letter(st)
                                  ? seda__stage_dead_letter(st)
                                  : seda__bus_dead_letter_name(b);
            to = dlq && strcmp(dlq, seda_stage_name(st)) != 0
                     ? seda__route_hop_target(st, env, dlq) : NULL;
        }
        if (to && seda__stage_durability(to)) {
            /* A dead letter journals every x-dead-* header the bus puts
             * on it (the error, its attempt, when, the missing stage), so
             * they survive a restart and `seda-lua dlq` shows them. */
            struct seda__dead_hdrs dh;
            if (reason)
                seda__route_dead_hdrs(st, env, reason, strcmp(reason,
                                      "no_such_stage") == 0
                                        ? seda_env_slip_at(env, 0) : NULL,
                                      seda__journal_wall(), &dh);
            ops[nops].op = SEDA_JOP_MOVE;
            if (build_rec(env, seda_stage_name(to), 1,
                          reason ? seda_env_slip_count(env) : 1,
                          reason ? dh.kv : NULL, &rbs[nops],
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
    /* Decisions that only acknowledge (completions, hops out of the
     * journal, dead letters discarded or kept, retries) need not be on
     * disk before they take effect: a crash that loses them replays the
     * envelopes (at-least-once), so they join the next group commit and
     * the worker goes on.  A MOVE must be: the next durable stage may
     * handle the envelope at once, and a replay must not bring it back
     * to this one after that; a batch with one commits in place. */
    bool moves = false;
    for (int i = 0; i < nops && !moves; i++)
        moves = ops[i].op == SEDA_JOP_MOVE;
    int rc = 0;
    if (nops && (moves || ack_async(st, j, ops, nops) != 0))
        rc = seda__journal_apply(j, ops, nops);
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

static bool journal_settled(void *store)
{
    return seda__journal_lazy_open(store) == 0 &&
           seda__journal_user_open(store, 0) == 0;
}

static const struct seda__store_ops journal_ops = {
    .publish = durable_publish,
    .publish_async = durable_publish_async,
    .batch = durable_batch,
    .enter = durable_enter,
    .enter_async = durable_enter_async,
    .move = durable_move,
    .forget = durable_forget,
    .settled = journal_settled,
    .close = journal_close,
};
