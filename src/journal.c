/* SPDX-License-Identifier: MIT */
/*
 * journal.c -- the durable journal: SQLite in WAL mode, one writer thread,
 * group commit (see journal.h for the API and the on-disk schema).
 *
 * DESIGN
 *   Callers of insert, apply and delete_stage build a request on their own
 *   stack, append it to j's pending list and sleep on the request's own
 *   condition variable.  The writer thread takes the whole list at once,
 *   runs every request in ONE transaction (BEGIN IMMEDIATE ... COMMIT),
 *   then marks them all done and wakes each caller.  Concurrent publishers
 *   thus share one commit, and with synchronous=FULL one fsync, per batch.
 *   A caller alone pays one commit of its own: nothing waits to collect a
 *   batch, so the writer never adds latency.
 *
 *     caller --(append, signal if the list was empty)--> pending list
 *     writer: take list -> BEGIN; req1; req2; ...; COMMIT -> done, wake all
 *
 *   Any failure inside the group (SQLITE_FULL, SQLITE_IOERR, ...) rolls
 *   the whole group back and fails every request of it with the same code,
 *   so a caller's call either committed entirely or not at all, and rows
 *   committed before are untouched.  Arguments are checked in the caller's
 *   thread before queueing, so one bad request cannot sink a group.
 *
 *   The writer owns the write connection and its prepared statements; no
 *   other thread touches them after open.  Reads (replay, count, get) open
 *   a connection of their own per call: WAL lets them read a committed
 *   snapshot while the writer commits, and a replay callback may itself
 *   insert or apply without deadlock.
 *
 *   Dedup (idempotent publish): dedup(stage, id, seq) holds the accepted
 *   ids; seq counts up per stage, and after each insert request the rows
 *   with seq <= newest - window are deleted in the same transaction.  The
 *   writer caches each stage's next seq (loaded with max(seq) on first
 *   use) and drops the cache after a rollback.
 *
 *   Checkpoints run on a thread of their own with a connection of its own:
 *   a WAL hook on the writer's connection replaces SQLite's autocheckpoint
 *   (which would copy pages and, even at synchronous=NORMAL, fsync on the
 *   committing thread) and wakes the checkpointer once the WAL passes
 *   CKPT_FRAMES pages.  PASSIVE checkpoints never block the writer; should
 *   they fall behind, the writer truncates the WAL itself past
 *   CKPT_HARD_FRAMES.
 *
 *   The exclusive flock on DIR/seda.lock, held from open to close, keeps a
 *   second journal (this process or another) off the same directory.
 *
 *   Threads: callers (any), the writer, the checkpointer.  One mutex (mu).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal.h"

/* busy_timeout of the write connection, ms: only an outside tool (the
 * sqlite3 shell holding a write transaction) can make the writer wait. */
#define WRITER_BUSY_MS 200
/* busy_timeout of read connections, ms (WAL recovery by another one). */
#define READER_BUSY_MS 2000
/* WAL frames (pages) after a commit that wake the checkpointer. */
#define CKPT_FRAMES 4096
/* WAL frames past which the writer itself restarts and truncates the WAL
 * (the checkpointer could not catch up under sustained load). */
#define CKPT_HARD_FRAMES 65536

enum { REQ_INSERT = 1, REQ_APPLY, REQ_PURGE };

/* A queued write.  Lives on the caller's stack until done.  Locking: next
 * and done are guarded by j->mu; the writer writes rc (and the caller's
 * keys and dup flags) before setting done, and the caller reads them only
 * after seeing done under j->mu. */
struct jreq {
    int type;                   /* REQ_* */
    seda_jrec *recs;            /* INSERT: records, keys written back */
    const seda_jop *ops;        /* APPLY: the changes */
    int n;                      /* INSERT/APPLY: count */
    int window;                 /* INSERT: dedup window, <= 0 for none */
    int *dup;                   /* INSERT: dup flags out */
    const char *stage;          /* PURGE: the stage */
    int rc;                     /* result, set by the writer */
    bool done;                  /* guarded by j->mu */
    pthread_cond_t cv;          /* the caller waits here, with j->mu */
    struct jreq *next;          /* guarded by j->mu while queued */
};

/* A stage's dedup sequence, cached by the writer (writer-only). */
struct seqent {
    char *stage;                /* owned */
    int64_t next;               /* next seq to hand out */
    int64_t evicted;            /* seqs <= this are known deleted */
    struct seqent *link;        /* next entry */
};

enum {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_INSERT, ST_DEDUP, ST_EVICT,
    ST_MAXSEQ, ST_MOVE, ST_DELETE, ST_PURGE, ST_N
};

static const char *const stmt_sql[ST_N] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = "INSERT INTO envelopes(stage, id, attempts, sender, "
                  "headers, slip, kind, payload, published_at) "
                  "VALUES(?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [ST_DEDUP] = "INSERT OR IGNORE INTO dedup(stage, id, seq) "
                 "VALUES(?1, ?2, ?3)",
    [ST_EVICT] = "DELETE FROM dedup WHERE stage = ?1 AND seq <= ?2",
    [ST_MAXSEQ] = "SELECT coalesce(max(seq), 0) FROM dedup WHERE stage = ?1",
    [ST_MOVE] = "UPDATE envelopes SET stage = ?2, id = ?3, attempts = ?4, "
                "sender = ?5, headers = ?6, slip = ?7, kind = ?8, "
                "payload = ?9, published_at = ?10 WHERE key = ?1",
    [ST_DELETE] = "DELETE FROM envelopes WHERE key = ?1",
    [ST_PURGE] = "DELETE FROM envelopes WHERE stage = ?1",
};

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS envelopes("
    " key INTEGER PRIMARY KEY AUTOINCREMENT, stage TEXT NOT NULL,"
    " id TEXT NOT NULL, attempts INTEGER, sender TEXT, headers BLOB,"
    " slip BLOB, kind INTEGER, payload BLOB, published_at REAL);"
    "CREATE INDEX IF NOT EXISTS envelopes_stage ON envelopes(stage, key);"
    "CREATE TABLE IF NOT EXISTS dedup(stage TEXT, id TEXT, seq INTEGER,"
    " PRIMARY KEY(stage, id)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS dedup_seq ON dedup(stage, seq);"
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v);"
    "INSERT OR IGNORE INTO meta(k, v) VALUES('schema_version', 1);";

#define SELECT_COLS "SELECT key, stage, id, attempts, sender, headers, slip," \
                    " kind, payload, published_at FROM envelopes "

/*
 * Locking: mu guards head, tail, npending, hold, stop, busy, ckpt_want
 * and ckpt_stop (and each queued request's next and done).  Immutable
 * after open: dir, path, lockfd, writer, ckpter.  db, st, seqs and
 * hard_next belong to whoever set busy (under mu) until it clears it:
 * the writer thread, or a caller committing its own request inline (see
 * submit).  Checkpointer-thread only: ckdb.  Atomic: txns (relaxed
 * counter).  Only one lock; it is never held across SQLite calls.
 */
struct seda_journal {
    char *dir;                  /* the data directory */
    char *path;                 /* DIR/seda.db */
    int lockfd;                 /* DIR/seda.lock, flock()ed */
    sqlite3 *db;                /* write connection; writer-only */
    sqlite3_stmt *st[ST_N];     /* prepared statements; writer-only */
    struct seqent *seqs;        /* dedup seq cache; writer-only */
    int hard_next;              /* WAL frames for the next truncation
                                   attempt; writer-only */
    seda__mutex_t mu;           /* guards the pending list */
    pthread_cond_t work_cv;     /* the writer waits here for work */
    struct jreq *head;          /* oldest pending; guarded by mu */
    struct jreq *tail;          /* newest pending; guarded by mu */
    int npending;               /* requests queued; guarded by mu */
    bool hold;                  /* tests: take no batch; guarded by mu */
    bool stop;                  /* close began; guarded by mu */
    bool busy;                  /* a commit is running (the writer's or
                                   an inline one); guarded by mu */
    int last_group;             /* requests in the last commit; mu */
    pthread_t writer;           /* the writer thread */
    sqlite3 *ckdb;              /* checkpoint connection; ckpter only */
    pthread_cond_t ckpt_cv;     /* the checkpointer waits here */
    bool ckpt_want;             /* WAL is long; guarded by mu */
    bool ckpt_stop;             /* guarded by mu */
    pthread_t ckpter;           /* the checkpointer thread */
    atomic_uint_fast64_t txns;  /* committed transactions; relaxed */
};

/* ---- errors ---- */

static int sqlite_errno(int rc)
{
    return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* Error for a failed open step, with a message naming path.  Returns the
 * negative errno. */
static int open_error(int rc, sqlite3 *db, const char *path, const char *dir,
                      char *err, size_t errlen)
{
    int e;
    char what[256];
    switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        e = -EILSEQ;
        snprintf(what, sizeof what, "not a database (corrupt?)");
        break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        e = -EBUSY;
        path = dir;
        snprintf(what, sizeof what, "locked by another process");
        break;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH: {
        int se = db ? sqlite3_system_errno(db) : 0;
        e = se > 0 ? -se : -EACCES;
        snprintf(what, sizeof what, "not writable: %s",
                 se > 0 ? strerror(se) : (db ? sqlite3_errmsg(db)
                                             : sqlite3_errstr(rc)));
        break;
    }
    case SQLITE_NOMEM:
        e = -ENOMEM;
        snprintf(what, sizeof what, "out of memory");
        break;
    default:
        e = -EIO;
        snprintf(what, sizeof what, "%s",
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        break;
    }
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", path, what);
    return e;
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
}

/* ---- the writer ---- */

static void seqs_drop(struct seda_journal *j)
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
        rc = bind_rec(s, rec);
        if (rc == SQLITE_OK)
            rc = exec_stmt(s);
        if (rc != SQLITE_OK)
            return rc;
        rec->key = sqlite3_last_insert_rowid(j->db);
    }
    return e ? evict(j, e, r->window) : SQLITE_OK;
}

static int do_apply(struct seda_journal *j, struct jreq *r)
{
    for (int i = 0; i < r->n; i++) {
        const seda_jop *op = &r->ops[i];
        sqlite3_stmt *s = j->st[op->op == SEDA_JOP_MOVE ? ST_MOVE : ST_DELETE];
        int rc = sqlite3_bind_int64(s, 1, op->rec.key);
        if (rc == SQLITE_OK && op->op == SEDA_JOP_MOVE)
            rc = bind_rec(s, &op->rec);
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

/* Run the requests of batch in one transaction and set each one's rc.
 * Writer only. */
static void run_group(struct seda_journal *j, struct jreq *batch)
{
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
        atomic_fetch_add_explicit(&j->txns, 1, memory_order_relaxed);
    } else {
        /* SQLite may already have rolled back (FULL, IOERR, NOMEM). */
        if (!sqlite3_get_autocommit(j->db))
            exec_stmt(j->st[ST_ROLLBACK]);
        seqs_drop(j);
    }
    int e = rc == SQLITE_OK ? 0 : sqlite_errno(rc);
    for (struct jreq *r = batch; r; r = r->next)
        r->rc = e;
}

/* sqlite3_wal_hook callback, on the writer thread after each commit with
 * the WAL's length in frames.  Replaces SQLite's autocheckpoint, which
 * would copy pages and fsync on the writer's (the publishers') time. */
static int wal_hook(void *ud, sqlite3 *db, const char *name, int frames)
{
    struct seda_journal *j = ud;
    if (frames < CKPT_FRAMES) {
        j->hard_next = CKPT_HARD_FRAMES;
    } else if (frames >= j->hard_next) {
        /* Bound the WAL: copy it all and restart it now, waiting briefly
         * for a checkpoint or reader in progress.  A reader that keeps an
         * old snapshot (a slow replay) can make this fail; then it is
         * retried only after CKPT_FRAMES more frames, so the stall stays
         * rare.  Failure is harmless. */
        j->hard_next = frames + CKPT_FRAMES;
        sqlite3_busy_timeout(db, 50);
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE,
                                  NULL, NULL);
        sqlite3_busy_timeout(db, WRITER_BUSY_MS);
    } else {
        seda__mutex_lock(&j->mu);
        if (!j->ckpt_want) {
            j->ckpt_want = true;
            pthread_cond_signal(&j->ckpt_cv);
        }
        seda__mutex_unlock(&j->mu);
    }
    return SQLITE_OK;
}

/* The checkpointer: copies committed WAL pages into the database (PASSIVE:
 * never blocks the writer) when the WAL grows past CKPT_FRAMES.  Once a
 * checkpoint has copied everything, the writer's next transaction starts
 * the WAL over from its beginning. */
static void *ckpt_main(void *arg)
{
    struct seda_journal *j = arg;
    seda__mutex_lock(&j->mu);
    for (;;) {
        while (!j->ckpt_want && !j->ckpt_stop)
            seda__cond_wait(&j->ckpt_cv, &j->mu, INT64_MAX);
        if (j->ckpt_stop)
            break;
        j->ckpt_want = false;
        seda__mutex_unlock(&j->mu);
        sqlite3_wal_checkpoint_v2(j->ckdb, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                  NULL, NULL);
        seda__mutex_lock(&j->mu);
    }
    seda__mutex_unlock(&j->mu);
    return NULL;
}

static void *writer_main(void *arg)
{
    struct seda_journal *j = arg;
    seda__mutex_lock(&j->mu);
    for (;;) {
        while (j->busy || ((!j->head || j->hold) && !j->stop))
            seda__cond_wait(&j->work_cv, &j->mu, INT64_MAX);
        if (!j->head)
            break;                      /* stop, and nothing pending */
        struct jreq *batch = j->head;
        j->head = j->tail = NULL;
        j->last_group = j->npending;
        j->npending = 0;
        j->busy = true;
        seda__mutex_unlock(&j->mu);
        run_group(j, batch);
        seda__mutex_lock(&j->mu);
        j->busy = false;
        /* Read next before done: the caller may return (and its request
         * vanish) as soon as it sees done. */
        for (struct jreq *r = batch, *nx; r; r = nx) {
            nx = r->next;
            r->done = true;
            pthread_cond_signal(&r->cv);
        }
    }
    seda__mutex_unlock(&j->mu);
    return NULL;
}

/* Run r and return its result, or -ECANCELED when close began,
 * -ENOMEM/-EAGAIN if a wait could not be set up.  A caller that is alone
 * (nothing being committed or waiting, and the last commit was a single
 * request) commits r itself: handing it to the writer thread and back
 * costs two thread wake-ups, more than the commit of one small
 * transaction.  Otherwise r joins the queue, which the writer commits as
 * one group once the running commit ends.  Takes j->mu. */
static int submit(struct seda_journal *j, struct jreq *r)
{
    r->done = false;
    r->next = NULL;
    r->rc = 0;
    seda__mutex_lock(&j->mu);
    if (j->stop) {
        seda__mutex_unlock(&j->mu);
        return -ECANCELED;
    }
    /* Inline only while callers come one at a time (the last commit was
     * a single request): with several at once, the writer's groups
     * share one transaction among them. */
    if (!j->busy && !j->head && !j->hold && j->last_group <= 1) {
        j->busy = true;
        seda__mutex_unlock(&j->mu);
        run_group(j, r);
        seda__mutex_lock(&j->mu);
        j->busy = false;
        /* Whatever queued meanwhile is the writer's now (and a close
         * waits for us to finish). */
        if (j->head || j->stop)
            pthread_cond_signal(&j->work_cv);
        seda__mutex_unlock(&j->mu);
        return r->rc;
    }
    if (seda__cond_init(&r->cv) != 0) {
        seda__mutex_unlock(&j->mu);
        return -ENOMEM;
    }
    if (j->tail) {
        j->tail->next = r;      /* the writer is busy or already woken */
    } else {
        j->head = r;
        pthread_cond_signal(&j->work_cv);
    }
    j->tail = r;
    j->npending++;
    while (!r->done)
        seda__cond_wait(&r->cv, &j->mu, INT64_MAX);
    int rc = r->rc;
    seda__mutex_unlock(&j->mu);
    pthread_cond_destroy(&r->cv);
    return rc;
}

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
    return submit(j, &r);
}

int seda__journal_apply(struct seda_journal *j, const seda_jop *ops, int n)
{
    if (!j || n < 0 || (n > 0 && !ops))
        return -EINVAL;
    if (n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].op == SEDA_JOP_MOVE) {
            int rc = check_rec(&ops[i].rec);
            if (rc)
                return rc;
        } else if (ops[i].op != SEDA_JOP_DELETE) {
            return -EINVAL;
        }
    }
    struct jreq r = { .type = REQ_APPLY, .ops = ops, .n = n };
    return submit(j, &r);
}

int seda__journal_delete_stage(struct seda_journal *j, const char *stage)
{
    if (!j || !stage)
        return -EINVAL;
    struct jreq r = { .type = REQ_PURGE, .stage = stage };
    return submit(j, &r);
}

uint64_t seda__journal_txns(struct seda_journal *j)
{
    return atomic_load_explicit(&j->txns, memory_order_relaxed);
}

void seda__journal_hold(struct seda_journal *j, bool hold)
{
    seda__mutex_lock(&j->mu);
    j->hold = hold;
    pthread_cond_signal(&j->work_cv);
    seda__mutex_unlock(&j->mu);
}

int seda__journal_pending(struct seda_journal *j)
{
    seda__mutex_lock(&j->mu);
    int n = j->npending;
    seda__mutex_unlock(&j->mu);
    return n;
}

/* ---- reads ---- */

/* Open a read connection and prepare sql on it.  Returns 0 or -EIO. */
static int reader_open(struct seda_journal *j, const char *sql,
                       sqlite3 **db, sqlite3_stmt **s)
{
    *db = NULL;
    *s = NULL;
    int rc = sqlite3_open_v2(j->path, db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(*db, READER_BUSY_MS);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(*db, sql, -1, s, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(*db);
        *db = NULL;
        return sqlite_errno(rc);
    }
    return 0;
}

static void reader_close(sqlite3 *db, sqlite3_stmt *s)
{
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* Run a SELECT_COLS query with bound texts a (and b), calling cb per row.
 * *rows gets the number of rows seen.  Returns 0, -EIO or -ENOMEM. */
static int query_rows(struct seda_journal *j, const char *sql,
                      const char *a, const char *b,
                      int (*cb)(const seda_jrec *, void *), void *ud,
                      int64_t *rows)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    int rc = reader_open(j, sql, &db, &s);
    if (rc)
        return rc;
    int src = bind_text(s, 1, a);
    if (src == SQLITE_OK && b)
        src = bind_text(s, 2, b);
    *rows = 0;
    while (src == SQLITE_OK && (src = sqlite3_step(s)) == SQLITE_ROW) {
        seda_jrec rec;
        read_row(s, &rec);
        ++*rows;
        if (cb(&rec, ud) != 0) {
            src = SQLITE_DONE;
            break;
        }
        src = SQLITE_OK;
    }
    rc = src == SQLITE_DONE ? 0 : sqlite_errno(src);
    reader_close(db, s);
    return rc;
}

int seda__journal_replay(struct seda_journal *j, const char *stage,
                         int (*cb)(const seda_jrec *rec, void *ud), void *ud)
{
    if (!j || !stage || !cb)
        return -EINVAL;
    int64_t rows;
    return query_rows(j, SELECT_COLS "WHERE stage = ?1 ORDER BY key",
                      stage, NULL, cb, ud, &rows);
}

int seda__journal_get(struct seda_journal *j, const char *stage,
                      const char *id, int (*cb)(const seda_jrec *, void *),
                      void *ud)
{
    if (!j || !stage || !id || !cb)
        return -EINVAL;
    int64_t rows;
    int rc = query_rows(j, SELECT_COLS "WHERE stage = ?1 AND id = ?2 "
                        "ORDER BY key", stage, id, cb, ud, &rows);
    return rc ? rc : rows ? 0 : -ENOENT;
}

int seda__journal_count(struct seda_journal *j, const char *stage,
                        int64_t *n)
{
    if (!j || !stage || !n)
        return -EINVAL;
    sqlite3 *db;
    sqlite3_stmt *s;
    int rc = reader_open(j, "SELECT count(*) FROM envelopes WHERE stage = ?1",
                         &db, &s);
    if (rc)
        return rc;
    int src = bind_text(s, 1, stage);
    if (src == SQLITE_OK)
        src = sqlite3_step(s);
    if (src == SQLITE_ROW) {
        *n = sqlite3_column_int64(s, 0);
        rc = 0;
    } else {
        rc = sqlite_errno(src);
    }
    reader_close(db, s);
    return rc;
}

/* ---- open and close ---- */

/* mkdir -p dir.  Returns 0 or a negative errno with err set. */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char *p = seda__strdup(dir);
    if (!p)
        return -ENOMEM;
    int e = 0;
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0')
            continue;
        char saved = *c;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            e = errno;
        *c = saved;
        if (e || saved == '\0')
            break;
    }
    struct stat sb;
    if (!e && stat(dir, &sb) != 0)
        e = errno;
    else if (!e && !S_ISDIR(sb.st_mode))
        e = ENOTDIR;
    seda__free(p);
    if (e && err && errlen)
        snprintf(err, errlen, "%s: not writable: %s", dir, strerror(e));
    return -e;
}

static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = seda__malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* Release everything of a journal whose writer is not running. */
static void journal_free(struct seda_journal *j)
{
    for (int i = 0; i < ST_N; i++)
        sqlite3_finalize(j->st[i]);
    sqlite3_close(j->ckdb);
    sqlite3_close(j->db);       /* the last one: checkpoints, drops WAL */
    seqs_drop(j);
    if (j->lockfd >= 0)
        close(j->lockfd);       /* releases the flock */
    seda__free(j->dir);
    seda__free(j->path);
    seda__free(j);
}

/* Open the database, set it up and prepare the statements.  Returns 0 or
 * a negative errno with err set. */
static int db_setup(struct seda_journal *j, bool sync_full, char *err,
                    size_t errlen)
{
    int rc = sqlite3_open_v2(j->path, &j->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                             SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    sqlite3_extended_result_codes(j->db, 1);
    if (sqlite3_db_readonly(j->db, "main") == 1)
        return open_error(SQLITE_READONLY, j->db, j->path, j->dir, err,
                          errlen);
    sqlite3_busy_timeout(j->db, WRITER_BUSY_MS);
    /* journal_mode reads the header first: garbage fails here. */
    sqlite3_stmt *s = NULL;
    rc = sqlite3_prepare_v2(j->db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *mode = (const char *)sqlite3_column_text(s, 0);
        rc = mode && strcmp(mode, "wal") == 0 ? SQLITE_OK : SQLITE_CANTOPEN;
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_CANTOPEN && err && errlen) {
        snprintf(err, errlen, "%s: cannot use WAL mode here", j->path);
        return -EIO;
    }
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    rc = sqlite3_exec(j->db, sync_full ? "PRAGMA synchronous=FULL;"
                                       : "PRAGMA synchronous=NORMAL;",
                      NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(j->db, "PRAGMA temp_store=MEMORY;"
                          "PRAGMA cache_size=-16384;", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(j->db, schema_sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK && !sqlite3_get_autocommit(j->db))
            sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    int64_t version = 0;
    rc = sqlite3_prepare_v2(j->db, "SELECT v FROM meta WHERE k = "
                            "'schema_version'", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        version = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    if (version != SEDA_JOURNAL_SCHEMA) {
        if (err && errlen)
            snprintf(err, errlen, "%s: schema version %lld is not %d (%s)",
                     j->path, (long long)version, SEDA_JOURNAL_SCHEMA,
                     version > SEDA_JOURNAL_SCHEMA ? "newer than this build"
                                                   : "unknown");
        return -EPROTO;
    }
    for (int i = 0; i < ST_N; i++) {
        rc = sqlite3_prepare_v3(j->db, stmt_sql[i], -1,
                                SQLITE_PREPARE_PERSISTENT, &j->st[i], NULL);
        if (rc != SQLITE_OK)
            return open_error(rc, j->db, j->path, j->dir, err, errlen);
    }
    rc = sqlite3_open_v2(j->path, &j->ckdb, SQLITE_OPEN_READWRITE |
                         SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_busy_timeout(j->ckdb, WRITER_BUSY_MS);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(j->ckdb, sync_full ? "PRAGMA synchronous=FULL;"
                                             : "PRAGMA synchronous=NORMAL;",
                          NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return open_error(rc, j->ckdb, j->path, j->dir, err, errlen);
    j->hard_next = CKPT_HARD_FRAMES;
    sqlite3_wal_hook(j->db, wal_hook, j);
    return 0;
}

int seda__journal_open(const char *dir, bool sync_full,
                       struct seda_journal **out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
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
    j->path = join_path(dir, SEDA_JOURNAL_FILE);
    char *lockpath = join_path(dir, SEDA_JOURNAL_LOCK);
    int rc = j->dir && j->path && lockpath ? 0 : -ENOMEM;
    if (rc == 0)
        rc = make_dirs(dir, err, errlen);
    if (rc == 0) {
        j->lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (j->lockfd < 0) {
            rc = -errno;
            if (err && errlen)
                snprintf(err, errlen, "%s: not writable: %s", lockpath,
                         strerror(-rc));
        }
    }
    if (rc == 0 && flock(j->lockfd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", dir, rc == -EBUSY
                     ? "locked by another process" : strerror(-rc));
    }
    seda__free(lockpath);
    if (rc == 0)
        rc = db_setup(j, sync_full, err, errlen);
    if (rc != 0) {
        journal_free(j);
        return rc;
    }
    seda__mutex_init(&j->mu);
    if (seda__cond_init(&j->work_cv) != 0) {
        seda__mutex_destroy(&j->mu);
        journal_free(j);
        return -ENOMEM;
    }
    if (seda__cond_init(&j->ckpt_cv) != 0) {
        pthread_cond_destroy(&j->work_cv);
        seda__mutex_destroy(&j->mu);
        journal_free(j);
        return -ENOMEM;
    }
    atomic_init(&j->txns, 0);
    bool writer = pthread_create(&j->writer, NULL, writer_main, j) == 0;
    if (writer && pthread_create(&j->ckpter, NULL, ckpt_main, j) == 0) {
        *out = j;
        return 0;
    }
    if (writer) {
        seda__mutex_lock(&j->mu);
        j->stop = true;
        pthread_cond_signal(&j->work_cv);
        seda__mutex_unlock(&j->mu);
        pthread_join(j->writer, NULL);
    }
    pthread_cond_destroy(&j->ckpt_cv);
    pthread_cond_destroy(&j->work_cv);
    seda__mutex_destroy(&j->mu);
    journal_free(j);
    if (err && errlen)
        snprintf(err, errlen, "%s: cannot start the journal threads", dir);
    return -EAGAIN;
}

void seda__journal_close(struct seda_journal *j)
{
    if (!j)
        return;
    seda__mutex_lock(&j->mu);
    j->stop = true;
    pthread_cond_signal(&j->work_cv);
    seda__mutex_unlock(&j->mu);
    pthread_join(j->writer, NULL);
    seda__mutex_lock(&j->mu);
    j->ckpt_stop = true;
    pthread_cond_signal(&j->ckpt_cv);
    seda__mutex_unlock(&j->mu);
    pthread_join(j->ckpter, NULL);
    pthread_cond_destroy(&j->ckpt_cv);
    pthread_cond_destroy(&j->work_cv);
    seda__mutex_destroy(&j->mu);
    journal_free(j);
}
