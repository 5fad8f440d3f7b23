/* SPDX-License-Identifier: MIT */
/*
 * journal.c -- the durable journal: SQLite in WAL mode on one connection,
 * group commit by whichever caller is committing (see journal.h for the
 * API and the on-disk schema).
 *
 * DESIGN
 *   One connection, opened in EXCLUSIVE locking mode: the process holds
 *   the database lock from open to close (the flock on DIR/seda.lock
 *   already keeps every other user out), so SQLite keeps the WAL index in
 *   heap memory and a transaction makes no file-lock system calls.  New
 *   databases use 1 KiB pages: a small transaction writes a few short WAL
 *   frames instead of a few 4 KiB ones.  Both halve the cost of a
 *   one-envelope commit on this kind of machine.
 *
 *   Callers build a request on their own stack and append it to j's
 *   pending list.  If nobody is committing, the caller becomes the LEADER:
 *   it takes the whole list, runs it as ONE transaction (BEGIN IMMEDIATE
 *   ... COMMIT), marks every request of it done and wakes their callers,
 *   and repeats while its own request is not done.  Then, if more arrived
 *   meanwhile, it hands the lead to the oldest waiter and returns.
 *   Concurrent publishers thus share one commit, and with
 *   synchronous=FULL one fsync, per group; a caller alone commits its own
 *   request with no thread hand-off at all.
 *
 *   An async request (insert_async: a publish whose publisher does not
 *   wait -- a suspended handler, on_durable, an HTTP request;
 *   apply_async: a drain batch's acknowledgements) has no
 *   caller to lead: it is the journal's (heap) and its done callback is
 *   called by whoever commits it, with no lock held, right after the
 *   commit.  When the lead falls to one (nobody leads, or a leader passes
 *   the lead on and the oldest request is async), the COMMITTER leads: a
 *   thread of the journal, started by the first async request, that
 *   commits until nothing is queued.  It commits an async request even
 *   when the journal is idle, so its publisher's thread goes on at once
 *   and what it publishes meanwhile joins the next group.  With
 *   group_wait, a group the committer starts with an async request first
 *   waits until that request has waited group_wait (arrivals queue), or
 *   until a caller that does wait queues: holding a thread is not what
 *   group_wait trades.  A LAZY request (apply_async: a drain batch's
 *   acknowledgements, which may be lost in a crash) starts no commit:
 *   it waits in the list for the next group someone else starts, and a
 *   leader that finds only lazy requests left goes idle instead of
 *   passing the lead; the committer commits them alone once the oldest
 *   has waited LAZY_NS.  A waiter spins briefly (a
 *   commit takes microseconds) before it sleeps on its own condition
 *   variable.  A leader holding nothing but one drain batch's decisions
 *   waits up to DEFER_NS for company first: with one publisher and one
 *   consumer, the publisher's next insert then shares the consumer's
 *   commit, and each envelope costs one commit instead of two.
 *
 *     caller --append--> pending list --(no leader? lead)--> BEGIN;
 *       req1; req2; ...; COMMIT -> done, wake the others -> pass the lead
 *
 *   Any failure inside the group (SQLITE_FULL, SQLITE_IOERR, ...) rolls
 *   the whole group back and fails every request of it with the same code,
 *   so a caller's call either committed entirely or not at all, and rows
 *   committed before are untouched.  Arguments are checked in the caller's
 *   thread before queueing, so one bad request cannot sink a group.
 *
 *   Reads (replay, get, count, scan) queue like writes but are never
 *   grouped: a read leads on its own thread, copies the rows it selects
 *   out of SQLite, passes the lead on, and only then calls the caller's
 *   callback, so a callback may itself insert or apply.
 *
 *   Row keys come from a counter (max(key) + 1 at open), so a key is never
 *   reused while a process runs, without SQLite's AUTOINCREMENT table
 *   write per insert.
 *
 *   Dedup (idempotent publish): dedup(stage, id, seq) holds the accepted
 *   ids; seq counts up per stage, and after each insert request the rows
 *   with seq <= newest - window are deleted in the same transaction.  The
 *   leader caches each stage's next seq (loaded with max(seq) on first
 *   use) and drops the cache after a rollback.
 *
 *   Checkpoints are SQLite's automatic ones (wal_autocheckpoint), run by
 *   the committing leader every CKPT_FRAMES WAL pages: with no other
 *   connection they always complete, and the WAL then starts over.
 *
 *   The database itself (schema, statements, opening the connection) is
 *   journal_db.c's; the writer (the requests a group runs, the reads,
 *   leading and the committer thread) is journal_commit.c's; the types
 *   the files share are in journal_int.h.
 *
 *   Threads: the committer, once an async request came.  One mutex (mu).
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

/* ---- the write API ---- */

static int check_rec(const seda_jrec *r)
{
    if (!r->stage || !r->id)
        return -EINVAL;
    if (r->hlen > INT_MAX || r->slen > INT_MAX || r->plen > INT_MAX)
        return -E2BIG;
    if ((!r->headers && r->hlen) || (!r->slip && r->slen) ||
        (!r->payload && r->plen))
        return -EINVAL;
    return 0;
}

int seda__journal_insert(struct seda_journal *j, seda_jrec *recs, int n,
                         int dedup_window, int *dup)
{
    if (!j || n < 0 || (n > 0 && !recs) || (dedup_window > 0 && !dup))
        return -EINVAL;
    if (n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        int rc = check_rec(&recs[i]);
        if (rc)
            return rc;
    }
    struct jreq r = {
        .type = REQ_INSERT, .recs = recs, .n = n,
        .window = dedup_window > 0 ? dedup_window : 0, .dup = dup,
    };
    return seda__journal_commit_submit(j, &r);
}

int seda__journal_insert_async(struct seda_journal *j, seda_jrec *recs,
                               int n, int dedup_window, int *dup,
                               seda_jdone_fn done, void *ud)
{
    if (!j || n <= 0 || !recs || (dedup_window > 0 && !dup) || !done)
        return -EINVAL;
    for (int i = 0; i < n; i++) {
        int rc = check_rec(&recs[i]);
        if (rc)
            return rc;
    }
    struct jreq *r = seda__calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->type = REQ_INSERT;
    r->recs = recs;
    r->n = n;
    r->window = dedup_window > 0 ? dedup_window : 0;
    r->dup = dup;
    r->done = done;
    r->done_ud = ud;
    int rc = seda__journal_commit_submit_async(j, r);
    if (rc)
        seda__free(r);
    return rc;
}

void seda__journal_set_group_end(struct seda_journal *j, void (*fn)(void))
{
    j->group_end = fn;
}

void seda__journal_set_group_wait(struct seda_journal *j, int64_t ns)
{
    j->group_wait_ns = ns > 0 ? ns : 0;
}

void seda__journal_groups(struct seda_journal *j, struct seda_jgroups *out)
{
    out->txns = atomic_load_explicit(&j->txns, memory_order_relaxed);
    out->reqs = atomic_load_explicit(&j->reqs, memory_order_relaxed);
    out->max = atomic_load_explicit(&j->grp_max, memory_order_relaxed);
    out->fsyncs = atomic_load_explicit(&j->fsyncs, memory_order_relaxed);
}

/* Check apply's arguments.  Returns 0, -EINVAL or -E2BIG. */
static int check_ops(const seda_jop *ops, int n)
{
    for (int i = 0; i < n; i++) {
        if (ops[i].op == SEDA_JOP_MOVE) {
            int rc = check_rec(&ops[i].rec);
            if (rc)
                return rc;
        } else if (ops[i].op == SEDA_JOP_QUARANTINE) {
            if (!ops[i].reason)
                return -EINVAL;
        } else if (ops[i].op == SEDA_JOP_RETRY) {
            if (ops[i].rec.attempts < 1 || ops[i].rec.attempts > 65535 ||
                !(ops[i].rec.due_wall >= 0))
                return -EINVAL;
        } else if (ops[i].op != SEDA_JOP_DELETE &&
                   ops[i].op != SEDA_JOP_KEEP) {
            return -EINVAL;
        }
    }
    return 0;
}

int seda__journal_apply(struct seda_journal *j, const seda_jop *ops, int n)
{
    if (!j || n < 0 || (n > 0 && !ops))
        return -EINVAL;
    if (n == 0)
        return 0;
    int rc = check_ops(ops, n);
    if (rc)
        return rc;
    struct jreq r = { .type = REQ_APPLY, .ops = ops, .n = n };
    return seda__journal_commit_submit(j, &r);
}

int seda__journal_apply_async(struct seda_journal *j, const seda_jop *ops,
                              int n, seda_jdone_fn done, void *ud)
{
    if (!j || n <= 0 || !ops || !done)
        return -EINVAL;
    int rc = check_ops(ops, n);
    if (rc)
        return rc;
    struct jreq *r = seda__calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->type = REQ_APPLY;
    r->ops = ops;
    r->n = n;
    r->done = done;
    r->done_ud = ud;
    r->lazy = true;
    atomic_fetch_add_explicit(&j->lazy_open, 1, memory_order_acq_rel);
    rc = seda__journal_commit_submit_async(j, r);
    if (rc) {
        atomic_fetch_sub_explicit(&j->lazy_open, 1, memory_order_acq_rel);
        seda__free(r);
    }
    return rc;
}

int seda__journal_lazy_open(struct seda_journal *j)
{
    return atomic_load_explicit(&j->lazy_open, memory_order_acquire);
}

int seda__journal_user_open(struct seda_journal *j, int delta)
{
    return atomic_fetch_add_explicit(&j->user_open, delta,
                                     memory_order_acq_rel) + delta;
}

int seda__journal_delete_stage(struct seda_journal *j, const char *stage)
{
    if (!j || !stage)
        return -EINVAL;
    struct jreq r = { .type = REQ_PURGE, .stage = stage };
    return seda__journal_commit_submit(j, &r);
}

void seda__journal_wal_discarded(struct seda_journal *j,
                                 struct seda_wal_discard *out)
{
    *out = j->wal_lost;
}

uint64_t seda__journal_quarantine_count(struct seda_journal *j)
{
    return atomic_load_explicit(&j->quarantined, memory_order_relaxed);
}

uint64_t seda__journal_txns(struct seda_journal *j)
{
    return atomic_load_explicit(&j->txns, memory_order_relaxed);
}

void seda__journal_hold(struct seda_journal *j, bool hold)
{
    seda__mutex_lock(&j->mu);
    j->hold = hold;
    seda__journal_commit_wake_leader(j);
    seda__mutex_unlock(&j->mu);
}

int seda__journal_pending(struct seda_journal *j)
{
    return atomic_load_explicit(&j->npending, memory_order_relaxed);
}

/* ---- reads ---- */

/* Run a SELECT_COLS query with bound texts a (and b), then call cb per
 * row with the journal free again.  *rows gets the number of rows.
 * Returns 0, -EIO, -ENOMEM or -ECANCELED. */
static int query_rows(struct seda_journal *j, const char *sql,
                      const char *a, const char *b,
                      int (*cb)(const seda_jrec *, void *), void *ud,
                      int64_t *rows)
{
    struct jreq r = { .type = REQ_READ, .sql = sql, .a = a, .b = b };
    int rc = seda__journal_commit_submit(j, &r);
    *rows = r.count;
    bool more = rc == 0;
    for (struct jrow *w = r.rows; w && more; w = w->next)
        more = cb(&w->rec, ud) == 0;
    seda__journal_commit_rows_free(r.rows);
    return rc;
}

int seda__journal_replay(struct seda_journal *j, const char *stage,
                         int (*cb)(const seda_jrec *rec, void *ud), void *ud)
{
    if (!j || !stage || !cb)
        return -EINVAL;
    int64_t rows;
    return query_rows(j, SELECT_COLS "WHERE stage = ?1 AND done_at IS NULL "
                      "ORDER BY key", stage, NULL, cb, ud, &rows);
}

int seda__journal_get(struct seda_journal *j, const char *stage,
                      const char *id, int (*cb)(const seda_jrec *, void *),
                      void *ud)
{
    if (!j || !stage || !id || !cb)
        return -EINVAL;
    int64_t rows;
    int rc = query_rows(j, SELECT_COLS "WHERE stage = ?1 AND id = ?2 "
                        "AND done_at IS NULL ORDER BY key", stage, id, cb,
                        ud, &rows);
    return rc ? rc : rows ? 0 : -ENOENT;
}

int seda__journal_scan(struct seda_journal *j, const char *where,
                       const char *arg, int (*cb)(const seda_jrec *, void *),
                       void *ud)
{
    if (!j || !where || !cb)
        return -EINVAL;
    size_t n = sizeof SELECT_COLS + strlen(where) + sizeof " ORDER BY key";
    char *sql = seda__malloc(n);
    if (!sql)
        return -ENOMEM;
    snprintf(sql, n, SELECT_COLS "%s ORDER BY key", where);
    int64_t rows;
    int rc = query_rows(j, sql, arg, NULL, cb, ud, &rows);
    seda__free(sql);
    return rc;
}

int seda__journal_quarantined(struct seda_journal *j,
                              int (*cb)(const seda_jrec *, void *), void *ud)
{
    if (!j || !cb)
        return -EINVAL;
    int64_t rows;
    return query_rows(j, "SELECT " ROW_COLS ", NULL, reason FROM quarantine "
                      "ORDER BY key", NULL, NULL, cb, ud, &rows);
}

int seda__journal_count(struct seda_journal *j, const char *stage,
                        int64_t *n)
{
    if (!j || !stage || !n)
        return -EINVAL;
    struct jreq r = {
        .type = REQ_COUNT, .a = stage,
        .sql = "SELECT count(*) FROM envelopes WHERE stage = ?1 AND "
               "done_at IS NULL",
    };
    int rc = seda__journal_commit_submit(j, &r);
    *n = r.count;
    return rc;
}

/* ---- open and close ---- */

/* Release everything of a journal whose writer is not running. */
static void journal_free(struct seda_journal *j)
{
    for (int i = 0; i < ST_N; i++)
        sqlite3_finalize(j->st[i]);
    sqlite3_close(j->db);       /* checkpoints, drops the WAL */
    seda__journal_commit_seqs_drop(j);
    if (j->lockfd >= 0)
        close(j->lockfd);       /* releases the flock */
    seda__free(j->dir);
    seda__free(j->path);
    seda__free(j);
}

int seda__journal_open(const char *dir, bool sync_full,
                       struct seda_journal **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    seda__jdb_init();
    if (!dir || !dir[0] || !out)
        return -EINVAL;
    if (!sqlite3_threadsafe()) {
        if (err && errlen)
            snprintf(err, errlen, "%s: SQLite built without threads", dir);
        return -ENOTSUP;
    }
    struct seda_journal *j = seda__calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->lockfd = -1;
    j->dir = seda__strdup(dir);
    j->path = seda__datadir_join(dir, SEDA_JOURNAL_FILE);
    int rc = j->dir && j->path ? 0 : -ENOMEM;
    if (rc == 0)
        rc = seda__jdb_files(j, err, errlen);
    if (rc == 0)
        rc = seda__jdb_setup(j, sync_full, err, errlen);
    if (rc != 0) {
        journal_free(j);
        return rc;
    }
    if (seda__cond_init(&j->idle_cv) != 0) {
        journal_free(j);
        return -ENOMEM;
    }
    if (seda__cond_init(&j->commit_cv) != 0) {
        pthread_cond_destroy(&j->idle_cv);
        journal_free(j);
        return -ENOMEM;
    }
    /* What recovery dropped of a WAL a crash left behind: said once, on
     * stderr, and kept for the stats (seda_bus_journal_stats). */
    if (seda__walvfs_discarded(j->db, &j->wal_lost) == 0 &&
        (j->wal_lost.frames || j->wal_lost.bytes))
    {
        char line[PATH_MAX + 256];
        snprintf(line, sizeof line, "journal %s-wal: %lld frame%s (%lld "
                 "bytes) discarded by recovery: %s; envelopes journaled in "
                 "them are lost", j->path, j->wal_lost.frames,
                 j->wal_lost.frames == 1 ? "" : "s", j->wal_lost.bytes,
                 j->wal_lost.why);
        seda_log_write(SEDA_LOG_ERROR, NULL, line);
    }
    seda__mutex_init(&j->mu);
    atomic_init(&j->txns, 0);
    atomic_init(&j->reqs, 0);
    atomic_init(&j->grp_max, 0);
    atomic_init(&j->fsyncs, 0);
    atomic_init(&j->quarantined, 0);
    atomic_init(&j->user_open, 0);
    j->defer_score = SEDA__JOURNAL_DEFER_MAX;
    *out = j;
    return 0;
}

void seda__journal_close(struct seda_journal *j)
{
    if (!j)
        return;
    seda__mutex_lock(&j->mu);
    j->stop = true;
    j->hold = false;
    pthread_cond_signal(&j->commit_cv);     /* ends a group_wait */
    seda__journal_commit_wake_leader(j);
    while (j->busy)
        seda__cond_wait(&j->idle_cv, &j->mu, INT64_MAX);
    bool started = j->cstarted;
    j->cstop = true;
    pthread_cond_signal(&j->commit_cv);
    seda__mutex_unlock(&j->mu);
    if (started)
        pthread_join(j->committer, NULL);
    pthread_cond_destroy(&j->commit_cv);
    pthread_cond_destroy(&j->idle_cv);
    seda__mutex_destroy(&j->mu);
    journal_free(j);
}
