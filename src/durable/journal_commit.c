/* SPDX-License-Identifier: MIT */
/*
 * journal_commit.c -- the journal's writer: the requests a group runs in
 * one transaction (insert, apply, purge, the dedup window), the reads a
 * leader runs for a reader, and the leading itself: the pending list,
 * whichever caller is committing, the committer thread that leads for
 * async requests, group_wait, the lazy acknowledgements.  journal.c has
 * the design (its DESIGN comment), the API that builds requests, and
 * open and close; journal_int.h the types both files use.
 *
 * Threads: any caller of the journal's API (a waiting request leads on
 * its own thread), and the committer.  One mutex (j->mu).
 */
#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datadir.h"
#include "journal_int.h"

/* How long a waiter spins before it sleeps, ns. */
#define SPIN_NS 40000
/* How long a leader alone with a drain's decisions waits for company (a
 * publisher's next insert) to share its commit, ns: a commit costs about
 * 10 us here, a publisher returns for its next one within a few. */
#define DEFER_NS 5000
#define DEFER_MAX SEDA__JOURNAL_DEFER_MAX
/* How long a lazy request (a drain batch's acknowledgements) waits for
 * a group someone else starts before the committer commits it alone, ns:
 * acknowledgements need no fsync of their own while publishes keep
 * committing, and a crash loses at most this much of them (replayed:
 * at-least-once). */
#define LAZY_NS 2000000
#define DEFER_PROBE 32          /* with score 0, one lone commit in this
                                   many still waits, to notice a change */

/* ---- errors ---- */

static int sqlite_errno(int rc)
{
    return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* ---- binding and reading rows ---- */

static int bind_blob(sqlite3_stmt *s, int i, const void *p, size_t n)
{
    return sqlite3_bind_blob(s, i, p ? p : "", (int)n, SQLITE_STATIC);
}

static int bind_text(sqlite3_stmt *s, int i, const char *t)
{
    return t ? sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC)
             : sqlite3_bind_null(s, i);
}

/* Bind rec's fields to ?2..?10 (ST_INSERT, ST_MOVE). */
static int bind_rec(sqlite3_stmt *s, const seda_jrec *r)
{
    int rc = bind_text(s, 2, r->stage);
    if (rc == SQLITE_OK)
        rc = bind_text(s, 3, r->id);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(s, 4, r->attempts);
    if (rc == SQLITE_OK)
        rc = bind_text(s, 5, r->sender);
    if (rc == SQLITE_OK)
        rc = bind_blob(s, 6, r->headers, r->hlen);
    if (rc == SQLITE_OK)
        rc = bind_blob(s, 7, r->slip, r->slen);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int(s, 8, r->kind);
    if (rc == SQLITE_OK)
        rc = bind_blob(s, 9, r->payload, r->plen);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_double(s, 10, r->published_at);
    return rc;
}

/* Bind seconds at ?i, NULL for 0 (unknown). */
static int bind_time(sqlite3_stmt *s, int i, double t)
{
    return t != 0 ? sqlite3_bind_double(s, i, t) : sqlite3_bind_null(s, i);
}

/* Step a statement that returns no rows, then reset it.  Returns an
 * SQLite result code (SQLITE_OK on success). */
static int exec_stmt(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    int rrc = sqlite3_reset(s);
    return rc == SQLITE_DONE ? SQLITE_OK : (rrc != SQLITE_OK ? rrc : rc);
}

/* Fill rec from the current row of a SELECT_COLS statement. */
static void read_row(sqlite3_stmt *s, seda_jrec *r)
{
    r->key = sqlite3_column_int64(s, 0);
    r->stage = (const char *)sqlite3_column_text(s, 1);
    r->id = (const char *)sqlite3_column_text(s, 2);
    r->attempts = sqlite3_column_int(s, 3);
    r->sender = (const char *)sqlite3_column_text(s, 4);
    r->headers = sqlite3_column_blob(s, 5);
    r->hlen = (size_t)sqlite3_column_bytes(s, 5);
    r->slip = sqlite3_column_blob(s, 6);
    r->slen = (size_t)sqlite3_column_bytes(s, 6);
    r->kind = sqlite3_column_int(s, 7);
    r->payload = sqlite3_column_blob(s, 8);
    r->plen = (size_t)sqlite3_column_bytes(s, 8);
    r->published_at = sqlite3_column_double(s, 9);
    r->published_wall = sqlite3_column_double(s, 10);    /* NULL: 0 */
    r->done_at = sqlite3_column_double(s, 11);
    r->due_wall = sqlite3_column_double(s, 12);          /* NULL: 0 */
    r->reason = sqlite3_column_count(s) > 13
                    ? (const char *)sqlite3_column_text(s, 13) : NULL;
}

/* ---- the writer ---- */

void seda__journal_commit_seqs_drop(struct seda_journal *j)
{
    struct seqent *e = j->seqs;
    while (e) {
        struct seqent *nx = e->link;
        seda__free(e->stage);
        seda__free(e);
        e = nx;
    }
    j->seqs = NULL;
}

/* The dedup seq entry of stage, loaded on first use.  Writer only, inside
 * a transaction.  Returns an SQLite result code. */
static int seq_get(struct seda_journal *j, const char *stage,
                   struct seqent **out)
{
    for (struct seqent *e = j->seqs; e; e = e->link) {
        if (strcmp(e->stage, stage) == 0) {
            *out = e;
            return SQLITE_OK;
        }
    }
    sqlite3_stmt *s = j->st[ST_MAXSEQ];
    int rc = bind_text(s, 1, stage);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(s);
    int64_t max = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    int rrc = sqlite3_reset(s);
    if (rc != SQLITE_ROW)
        return rrc != SQLITE_OK ? rrc : rc;
    struct seqent *e = seda__malloc(sizeof *e);
    char *name = seda__strdup(stage);
    if (!e || !name) {
        seda__free(e);
        seda__free(name);
        return SQLITE_NOMEM;
    }
    e->stage = name;
    e->next = max + 1;
    e->evicted = 0;
    e->link = j->seqs;
    j->seqs = e;
    *out = e;
    return SQLITE_OK;
}

/* Forget e's ids older than the newest window. */
static int evict(struct seda_journal *j, struct seqent *e, int window)
{
    int64_t upto = e->next - 1 - window;
    if (upto <= e->evicted)
        return SQLITE_OK;
    sqlite3_stmt *s = j->st[ST_EVICT];
    int rc = bind_text(s, 1, e->stage);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(s, 2, upto);
    if (rc == SQLITE_OK)
        rc = exec_stmt(s);
    if (rc == SQLITE_OK)
        e->evicted = upto;
    return rc;
}

static int do_insert(struct seda_journal *j, struct jreq *r)
{
    struct seqent *e = NULL;
    for (int i = 0; i < r->n; i++) {
        seda_jrec *rec = &r->recs[i];
        int rc;
        if (r->window > 0) {
            if (!e || strcmp(e->stage, rec->stage) != 0) {
                if (e && (rc = evict(j, e, r->window)) != SQLITE_OK)
                    return rc;
                if ((rc = seq_get(j, rec->stage, &e)) != SQLITE_OK)
                    return rc;
            }
            sqlite3_stmt *d = j->st[ST_DEDUP];
            rc = bind_text(d, 1, rec->stage);
            if (rc == SQLITE_OK)
                rc = bind_text(d, 2, rec->id);
            if (rc == SQLITE_OK)
                rc = sqlite3_bind_int64(d, 3, e->next);
            if (rc == SQLITE_OK)
                rc = exec_stmt(d);
            if (rc != SQLITE_OK)
                return rc;
            if (sqlite3_changes(j->db) == 0) {
                r->dup[i] = 1;
                rec->key = 0;
                continue;
            }
            r->dup[i] = 0;
            e->next++;
        }
        sqlite3_stmt *s = j->st[ST_INSERT];
        rc = sqlite3_bind_int64(s, 1, j->next_key);
        if (rc == SQLITE_OK)
            rc = bind_rec(s, rec);
        if (rc == SQLITE_OK)
            rc = bind_time(s, 11, rec->published_wall);
        if (rc == SQLITE_OK)
            rc = exec_stmt(s);
        if (rc != SQLITE_OK)
            return rc;
        rec->key = j->next_key++;   /* a rollback leaves a gap: harmless */
    }
    return e ? evict(j, e, r->window) : SQLITE_OK;
}

/* A run of deletes of consecutive keys (a drain batch of one producer's
 * envelopes, typically) is one range delete: the keys are unique, so the
 * range holds exactly the rows named. */
static int do_apply(struct seda_journal *j, struct jreq *r)
{
    for (int i = 0; i < r->n; i++) {
        const seda_jop *op = &r->ops[i];
        int last = i;
        if (op->op == SEDA_JOP_DELETE)
            while (last + 1 < r->n && r->ops[last + 1].op == SEDA_JOP_DELETE &&
                   r->ops[last + 1].rec.key == r->ops[last].rec.key + 1)
                last++;
        int rc;
        if (op->op == SEDA_JOP_QUARANTINE) {
            sqlite3_stmt *q = j->st[ST_QUARANTINE];
            rc = sqlite3_bind_int64(q, 1, op->rec.key);
            if (rc == SQLITE_OK)
                rc = bind_text(q, 2, op->reason);
            if (rc == SQLITE_OK)
                rc = exec_stmt(q);
            if (rc != SQLITE_OK)
                return rc;
            r->quarantined += sqlite3_changes(j->db);
        }
        sqlite3_stmt *s = j->st[op->op == SEDA_JOP_MOVE ? ST_MOVE
                                : op->op == SEDA_JOP_KEEP ? ST_KEEP
                                : op->op == SEDA_JOP_RETRY ? ST_RETRY
                                : last > i ? ST_DELRANGE : ST_DELETE];
        rc = sqlite3_bind_int64(s, 1, op->rec.key);
        if (rc == SQLITE_OK && last > i)
            rc = sqlite3_bind_int64(s, 2, r->ops[last].rec.key);
        i = last;
        if (rc == SQLITE_OK && op->op == SEDA_JOP_MOVE)
            rc = bind_rec(s, &op->rec);
        if (rc == SQLITE_OK && op->op == SEDA_JOP_RETRY) {
            rc = sqlite3_bind_int(s, 2, op->rec.attempts);
            if (rc == SQLITE_OK)
                rc = op->rec.due_wall > 0
                         ? sqlite3_bind_double(s, 3, op->rec.due_wall)
                         : sqlite3_bind_null(s, 3);
        }
        if (rc == SQLITE_OK && op->op == SEDA_JOP_KEEP)
            rc = sqlite3_bind_double(s, 2, op->rec.done_at != 0
                                     ? op->rec.done_at : seda__journal_wall());
        if (rc == SQLITE_OK)
            rc = exec_stmt(s);
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

static int do_purge(struct seda_journal *j, struct jreq *r)
{
    sqlite3_stmt *s = j->st[ST_PURGE];
    int rc = bind_text(s, 1, r->stage);
    return rc == SQLITE_OK ? exec_stmt(s) : rc;
}

/* Run the write requests of batch in one transaction and set each one's
 * rc.  Leader only. */
static void run_group(struct seda_journal *j, struct jreq *batch)
{
    uint64_t syncs = seda__walvfs_thread_syncs();
    int rc = exec_stmt(j->st[ST_BEGIN]);
    for (struct jreq *r = batch; r && rc == SQLITE_OK; r = r->next) {
        switch (r->type) {
        case REQ_INSERT: rc = do_insert(j, r); break;
        case REQ_APPLY: rc = do_apply(j, r); break;
        default: rc = do_purge(j, r); break;
        }
    }
    if (rc == SQLITE_OK)
        rc = exec_stmt(j->st[ST_COMMIT]);
    if (rc == SQLITE_OK) {
        uint64_t n = 0;
        for (struct jreq *r = batch; r; r = r->next)
            n++;
        atomic_fetch_add_explicit(&j->txns, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&j->reqs, n, memory_order_relaxed);
        if (n > atomic_load_explicit(&j->grp_max, memory_order_relaxed))
            atomic_store_explicit(&j->grp_max, n, memory_order_relaxed);
        for (struct jreq *r = batch; r; r = r->next)
            if (r->quarantined)
                atomic_fetch_add_explicit(&j->quarantined,
                                          (uint64_t)r->quarantined,
                                          memory_order_relaxed);
    } else {
        /* SQLite may already have rolled back (FULL, IOERR, NOMEM). */
        if (!sqlite3_get_autocommit(j->db))
            exec_stmt(j->st[ST_ROLLBACK]);
        seda__journal_commit_seqs_drop(j);
    }
    atomic_fetch_add_explicit(&j->fsyncs,
                              seda__walvfs_thread_syncs() - syncs,
                              memory_order_relaxed);
    int e = rc == SQLITE_OK ? 0 : sqlite_errno(rc);
    for (struct jreq *r = batch; r; r = r->next)
        r->rc = e;
}

/* ---- reads (run by the leader on the reader's own thread) ---- */

void seda__journal_commit_rows_free(struct jrow *w)
{
    while (w) {
        struct jrow *nx = w->next;
        seda__free(w);
        w = nx;
    }
}

/* Copy n bytes of src to *p and advance it; NULL stays NULL. */
static const void *put(char **p, const void *src, size_t n)
{
    if (!src)
        return NULL;
    void *at = *p;
    memcpy(at, src, n);
    *p += n;
    return at;
}

/* The current row of a SELECT_COLS statement as a jrow, or NULL. */
static struct jrow *copy_row(sqlite3_stmt *s)
{
    seda_jrec r;
    read_row(s, &r);
    size_t ls = strlen(r.stage) + 1, li = strlen(r.id) + 1;
    size_t lsn = r.sender ? strlen(r.sender) + 1 : 0;
    size_t lr = r.reason ? strlen(r.reason) + 1 : 0;
    struct jrow *w = seda__malloc(sizeof *w + ls + li + lsn + lr + r.hlen +
                                  r.slen + r.plen);
    if (!w)
        return NULL;
    char *p = w->data;
    w->next = NULL;
    w->rec = r;
    w->rec.stage = put(&p, r.stage, ls);
    w->rec.id = put(&p, r.id, li);
    w->rec.sender = put(&p, r.sender, lsn);
    w->rec.reason = put(&p, r.reason, lr);
    w->rec.headers = put(&p, r.headers, r.hlen);
    w->rec.slip = put(&p, r.slip, r.slen);
    w->rec.payload = put(&p, r.payload, r.plen);
    return w;
}

/* Run a READ (rows copied into r->rows) or COUNT request.  Returns an
 * SQLite result code. */
static int run_read(struct seda_journal *j, struct jreq *r)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(j->db, r->sql, -1, &s, NULL);
    if (rc == SQLITE_OK && r->a)
        rc = bind_text(s, 1, r->a);
    if (rc == SQLITE_OK && r->b)
        rc = bind_text(s, 2, r->b);
    struct jrow **tail = &r->rows;
    while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        if (r->type == REQ_COUNT) {
            r->count = sqlite3_column_int64(s, 0);
            continue;
        }
        struct jrow *w = copy_row(s);
        if (!w) {
            rc = SQLITE_NOMEM;
            break;
        }
        *tail = w;
        tail = &w->next;
        r->count++;
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_DONE)
        return SQLITE_OK;
    seda__journal_commit_rows_free(r->rows);
    r->rows = NULL;
    return rc;
}

/* ---- leading ---- */

/* Set r's state and wake its caller if it sleeps.  mu held.  sleeping is
 * read first: once state says JR_DONE a spinning caller may return, and
 * r with it; a sleeping one cannot before we release mu. */
static void finish(struct jreq *r, int state)
{
    bool sleeping = r->sleeping;
    atomic_store_explicit(&r->state, state, memory_order_release);
    if (sleeping)
        pthread_cond_signal(&r->cv);
}

/* Give the lead (busy is set) to the oldest request: its caller, or the
 * committer when nobody waits for it.  mu held. */
static void pass_lead(struct seda_journal *j)
{
    if (j->head->done) {
        j->go = true;
        pthread_cond_signal(&j->commit_cv);
    } else {
        finish(j->head, JR_LEAD);
    }
}

/* Nobody leads but requests wait (hold was just lifted, or close began):
 * make the oldest waiter the leader.  mu held. */
void seda__journal_commit_wake_leader(struct seda_journal *j)
{
    if (j->head && !j->busy && !j->hold) {
        j->busy = true;
        pass_lead(j);
    }
}

/* Whether a lone drain commit should wait for company now.  The score
 * follows how often waiting found some: when it rarely does (drains of
 * several stages and no publisher, say), every wait is 5 us the journal
 * sits idle, so then only one lone commit in DEFER_PROBE tries.  Leader
 * only. */
static bool defer_now(struct seda_journal *j)
{
    return j->defer_score > 0 || ++j->defer_probe % DEFER_PROBE == 0;
}

static void defer_learn(struct seda_journal *j, bool company)
{
    if (company)
        j->defer_score = j->defer_score < DEFER_MAX ? j->defer_score + 1
                                                    : DEFER_MAX;
    else
        j->defer_score = j->defer_score > 2 ? j->defer_score - 2 : 0;
}

/* Whether every queued request is lazy (none, too), and close has not
 * begun: then nobody need lead yet.  mu held. */
static bool only_lazy(struct seda_journal *j)
{
    return !j->stop && j->nlazy >= atomic_load_explicit(&j->npending,
                                                         memory_order_relaxed);
}

/* Call the done callbacks of batch's async requests (and free them);
 * return the others, in order.  Leader, mu not held. */
static struct jreq *done_async(struct seda_journal *j, struct jreq *batch)
{
    struct jreq *keep = NULL, **tail = &keep;
    bool any = false;
    for (struct jreq *r = batch, *nx; r; r = nx) {
        nx = r->next;
        if (r->done) {
            /* A lazy one is no longer open when its callback runs (the
             * callback may look whether it was the last). */
            if (r->lazy)
                atomic_fetch_sub_explicit(&j->lazy_open, 1,
                                          memory_order_acq_rel);
            r->done(r->rc, r->done_ud);
            seda__free(r);
            any = true;
        } else {
            *tail = r;
            tail = &r->next;
        }
    }
    *tail = NULL;
    if (any && j->group_end)
        j->group_end();
    return keep;
}

/* Run pending requests, oldest first, until self is done (self NULL: the
 * committer, until none is left); then pass the
 * lead to the oldest waiter, or go idle.  A read runs alone and only on
 * its caller's thread: meeting someone else's read first, the leader
 * passes the lead to it and returns with self still queued.  mu held
 * (released around SQLite); busy is set for us. */
static void lead(struct seda_journal *j, struct jreq *self)
{
    bool flush = j->flush_lazy;
    j->flush_lazy = false;
    while ((self ? atomic_load_explicit(&self->state, memory_order_relaxed)
                       != JR_DONE
                 : j->head != NULL && (flush || !only_lazy(j))) &&
           !j->hold) {
        if (j->head == self && j->tail == self && self->type == REQ_APPLY &&
            !j->stop && defer_now(j)) {
            /* Alone with a drain's decisions: wait a moment for company
             * (typically the publisher's next insert) to share the
             * commit with.  Arrivals queue behind us meanwhile. */
            seda__mutex_unlock(&j->mu);
            int64_t until = seda__clock_ns() + DEFER_NS;
            bool company = false;
            for (int i = 1; !company; i++) {
                seda__cpu_relax();
                company = atomic_load_explicit(&j->npending,
                                               memory_order_relaxed) > 1;
                if (i % 32 == 0 && seda__clock_ns() > until)
                    break;
            }
            seda__mutex_lock(&j->mu);
            defer_learn(j, company);
        }
        if (!self && j->group_wait_ns > 0 && j->head->done) {
            /* group_wait: a group the committer starts with an async
             * request (nobody's thread waits on it) waits until that
             * request has waited group_wait, for company (arrivals queue
             * behind it) -- unless a caller that does wait arrives. */
            int64_t until = j->head->t0 + j->group_wait_ns;
            j->gwaiting = true;
            while (j->nwaiting == 0 && !j->stop && seda__clock_ns() < until)
                seda__cond_wait(&j->commit_cv, &j->mu, until);
            j->gwaiting = false;
        }
        struct jreq *batch = j->head, *last = batch;
        if (batch->type >= REQ_READ && batch != self)
            break;
        int n = 1;
        if (batch->type < REQ_READ)
            while (last->next && last->next->type < REQ_READ) {
                last = last->next;
                n++;
            }
        j->head = last->next;
        if (!j->head)
            j->tail = NULL;
        last->next = NULL;
        for (struct jreq *r = batch; r; r = r->next) {
            j->nwaiting -= !r->done;
            j->nlazy -= r->lazy;
        }
        atomic_fetch_sub_explicit(&j->npending, n, memory_order_relaxed);
        seda__mutex_unlock(&j->mu);
        if (batch->type >= REQ_READ) {
            int rc = run_read(j, batch);
            batch->rc = rc == SQLITE_OK ? 0 : sqlite_errno(rc);
        } else {
            run_group(j, batch);
            batch = done_async(j, batch);
        }
        seda__mutex_lock(&j->mu);
        for (struct jreq *r = batch, *nx; r; r = nx) {
            nx = r->next;       /* read first: r may vanish once done */
            finish(r, JR_DONE);
        }
    }
    if (j->head && !j->hold && !only_lazy(j)) {
        pass_lead(j);                   /* busy stays set: it leads now */
    } else {
        j->busy = false;
        if (j->stop)
            pthread_cond_broadcast(&j->idle_cv);
        else if (j->head && !j->hold)
            pthread_cond_signal(&j->commit_cv); /* times the lazy ones */
    }
}

/* The committer: leads whenever the lead is passed to an async request
 * (go), until close. */
static void *committer_main(void *arg)
{
    struct seda_journal *j = arg;
    seda__mutex_lock(&j->mu);
    for (;;) {
        while (!j->go && !j->cstop) {
            /* Queued with nobody leading: lazy requests only.  The
             * oldest has waited LAZY_NS for company: commit them. */
            int64_t until = j->head && !j->busy && !j->hold
                                ? j->head->t0 + LAZY_NS : INT64_MAX;
            if (until != INT64_MAX && seda__clock_ns() >= until) {
                j->busy = true;
                j->go = true;
                j->flush_lazy = true;
                break;
            }
            seda__cond_wait(&j->commit_cv, &j->mu, until);
        }
        if (!j->go)
            break;
        j->go = false;
        lead(j, NULL);
    }
    seda__mutex_unlock(&j->mu);
    return NULL;
}

/* Queue r (append, count, stamp).  mu held. */
static void enqueue(struct seda_journal *j, struct jreq *r)
{
    if (j->group_wait_ns > 0 || r->lazy)
        r->t0 = seda__clock_ns();
    j->nlazy += r->lazy;
    if (j->tail)
        j->tail->next = r;
    else
        j->head = r;
    j->tail = r;
    atomic_fetch_add_explicit(&j->npending, 1, memory_order_relaxed);
}

/* Queue an async request r (the journal's from here on when it returns
 * 0).  Returns 0, -ECANCELED after close began, -EAGAIN when the
 * committer could not be started. */
int seda__journal_commit_submit_async(struct seda_journal *j, struct jreq *r)
{
    r->rc = 0;
    r->next = NULL;
    r->rows = NULL;
    r->sleeping = false;
    atomic_init(&r->state, JR_WAIT);
    seda__mutex_lock(&j->mu);
    if (j->stop) {
        seda__mutex_unlock(&j->mu);
        return -ECANCELED;
    }
    if (!j->cstarted) {
        if (pthread_create(&j->committer, NULL, committer_main, j) != 0) {
            seda__mutex_unlock(&j->mu);
            return -EAGAIN;
        }
        j->cstarted = true;
    }
    bool first = !j->head;
    enqueue(j, r);
    if (r->lazy) {
        /* Rides with the next group; the committer times it when it is
         * the only thing queued. */
        if (first && !j->busy && !j->hold)
            pthread_cond_signal(&j->commit_cv);
    } else if (!j->busy && !j->hold) {
        /* Even when the journal is idle the committer commits it, not
         * this thread: its caller (a worker) goes on with other calls,
         * whose publishes then join the next group. */
        j->busy = true;
        j->go = true;
        pthread_cond_signal(&j->commit_cv);
    }
    seda__mutex_unlock(&j->mu);
    return 0;
}

/* Run r and return its result (0 or a negative errno), or -ECANCELED when
 * close began, -ENOMEM if a wait could not be set up.  Takes j->mu. */
int seda__journal_commit_submit(struct seda_journal *j, struct jreq *r)
{
    r->rc = 0;
    r->next = NULL;
    r->rows = NULL;
    r->count = 0;
    r->sleeping = false;
    atomic_init(&r->state, JR_WAIT);
    if (seda__cond_init(&r->cv) != 0)
        return -ENOMEM;
    seda__mutex_lock(&j->mu);
    if (j->stop) {
        seda__mutex_unlock(&j->mu);
        pthread_cond_destroy(&r->cv);
        return -ECANCELED;
    }
    enqueue(j, r);
    j->nwaiting++;
    if (j->gwaiting)
        pthread_cond_signal(&j->commit_cv);     /* a thread waits now */
    if (!j->busy && !j->hold) {
        j->busy = true;
        lead(j, r);             /* r is the head: it is done after this */
    }
    for (;;) {
        int st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (st == JR_DONE)
            break;
        if (st == JR_LEAD) {
            atomic_store_explicit(&r->state, JR_WAIT, memory_order_relaxed);
            lead(j, r);
            continue;
        }
        /* A commit takes microseconds: spin a little before sleeping. */
        seda__mutex_unlock(&j->mu);
        int64_t until = seda__clock_ns() + SPIN_NS;
        for (int i = 1; atomic_load_explicit(&r->state, memory_order_acquire)
                        == JR_WAIT; i++) {
            seda__cpu_relax();
            if (i % 64 == 0 && seda__clock_ns() > until)
                break;
        }
        seda__mutex_lock(&j->mu);
        r->sleeping = true;
        while (atomic_load_explicit(&r->state, memory_order_acquire) ==
               JR_WAIT)
            seda__cond_wait(&r->cv, &j->mu, INT64_MAX);
        r->sleeping = false;
    }
    seda__mutex_unlock(&j->mu);
    pthread_cond_destroy(&r->cv);
    return r->rc;
}

