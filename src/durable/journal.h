/* SPDX-License-Identifier: MIT */
/*
 * journal.h -- the durable journal behind durable stages: one SQLite
 * database in WAL mode per bus, on one connection; whatever is queued when
 * a commit starts goes into that one transaction (group commit).
 *
 * The journal knows nothing about buses or stages beyond their names: it
 * stores rows (seda_jrec) under a stage name, moves them between stages,
 * deletes them, remembers accepted ids for idempotent publish, and hands
 * them back in their original order on replay.  The blobs (headers, slip,
 * payload) are opaque to it.
 *
 * ON-DISK FORMAT (schema version 2; readable with the sqlite3 tool, e.g.
 * `sqlite3 DIR/seda.db "SELECT key, stage, id FROM envelopes"`):
 *
 *   DIR/seda.db       the database (DIR/seda.db-wal: its WAL; no -shm:
 *                     the connection holds the database exclusively)
 *   DIR/seda.lock     empty file; flock()ed exclusively while a journal is
 *                     open, so a second bus or process fails with "locked"
 *   (DIR is made 0700 and the files 0600; see datadir.h)
 *
 *   envelopes(key INTEGER PRIMARY KEY,   -- order of publish; kept across
 *                                        moves, never reused while a
 *                                        process runs (databases made by
 *                                        older builds say AUTOINCREMENT)
 *             stage TEXT NOT NULL,       -- stage the envelope waits at
 *             id TEXT NOT NULL,          -- envelope id
 *             attempts INTEGER,          -- deliveries tried so far
 *             sender TEXT,               -- NULL when none
 *             headers BLOB,              -- the bus's encoding (k\0v\0...)
 *             slip BLOB,                 -- remaining itinerary (bus's)
 *             kind INTEGER,              -- payload kind
 *             payload BLOB,
 *             published_at REAL,         -- seconds, the bus's clock
 *             published_wall REAL,       -- seconds since the epoch (v2)
 *             done_at REAL)              -- a kept dead letter: when its
 *                                        -- dead-letter stage was done
 *                                        -- with it; NULL: live (v2)
 *
 *   dedup(stage TEXT, id TEXT, seq INTEGER,   -- ids accepted by
 *         PRIMARY KEY(stage, id)) WITHOUT ROWID  exactly_once stages; seq
 *   INDEX dedup_seq ON dedup(stage, seq)         counts up per stage and
 *                                                only the newest
 *                                                dedup_window are kept
 *   meta(k TEXT PRIMARY KEY, v)   -- ('schema_version', 2)
 *
 *   quarantine(key INTEGER PRIMARY KEY, stage, id, attempts, sender,
 *              headers, slip, kind, payload, published_at,  -- as in
 *              published_wall, done_at,   envelopes, byte for byte;
 *              reason TEXT)      reason: what replay found wrong with
 *                                the row
 *   (added without a version change: older builds ignore the table)
 *
 *   A durable envelope is exactly one row of envelopes while it is
 *   unacknowledged; a hop rewrites the row (new stage, same key); completion
 *   deletes it.  Dead letters are rows whose headers hold x-dead-reason:
 *   a live one waits in its stage like any row; one its dead-letter stage
 *   is done with is KEPT (done_at set) instead of deleted: never replayed
 *   or counted again, only listed (seda-lua dlq) until purged.  A schema 1
 *   journal is upgraded in place when opened (the two columns are added,
 *   NULL in its rows).
 *
 * THREADS: every function is thread-safe unless it says otherwise.  The
 * journal has one thread of its own, the committer, started by the first
 * async request (insert_async, apply_async): it commits the requests
 * nobody waits for.  Writes
 * (insert, apply, delete_stage) block until committed, by the caller
 * itself, by the caller whose commit was running when they arrived, or by
 * the committer.  Reads (replay,
 * count, get, scan) wait their turn on the same connection, copy the rows
 * and call back with the journal free, and see only committed rows.  While
 * a journal is open nothing else (not even the sqlite3 tool) can read
 * DIR/seda.db.
 */
#ifndef SEDA_JOURNAL_H
#define SEDA_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/seda_int.h"
#include "journal_admin.h"

/* SEDA_JOURNAL_FILE, the row and change types, and open, close, apply,
 * scan and quarantined are declared in journal_admin.h (the dlq tool
 * uses them). */

#define SEDA_JOURNAL_LOCK "seda.lock"
#define SEDA_JOURNAL_SCHEMA 3

/* The wall clock in seconds since the epoch (published_wall, done_at). */
static inline double seda__journal_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The SQLite VFS the journal opens its database with (walvfs.c): the
 * default one, with each WAL transaction written in one system call. */
#define SEDA_JOURNAL_VFS "seda-wal"

/* Register SEDA_JOURNAL_VFS (once per process; later calls return the
 * first result).  Returns SQLITE_OK or an SQLite error code.  Any
 * thread. */
SEDA__API int seda__walvfs_register(void);

/* What SQLite's recovery drops of a WAL found at open (a crash's damaged
 * or cut-short log; see walvfs.c "DISCARDED FRAMES"). */
struct seda_wal_discard {
    long long frames;           /* frames dropped (a cut-short one too) */
    long long bytes;            /* bytes of the file they occupy */
    char why[160];              /* the cause, "" when nothing dropped */
};

/* fsyncs made through SEDA_JOURNAL_VFS by the calling thread so far (a
 * connection is used by one thread at a time: the journal's leader reads
 * it before and after its SQLite calls). */
SEDA__API uint64_t seda__walvfs_thread_syncs(void);

/* The discard figures of db's WAL as it was opened through
 * SEDA_JOURNAL_VFS.  Returns 0, or -1 (no WAL open, or not through the
 * shim: *out is zeroed).  The thread that owns db. */
struct sqlite3;
SEDA__API int seda__walvfs_discarded(struct sqlite3 *db,
                                     struct seda_wal_discard *out);

/* Insert n records (one publish or publish_many) in one transaction, and
 * write each new row's key into recs[i].key.  When dedup_window > 0, a
 * record whose (stage, id) was accepted before (and is still among the
 * newest dedup_window ids of its stage) is not inserted: dup[i] is set to
 * 1 and recs[i].key to 0; the others get dup[i] = 0.  dup may be NULL
 * when dedup_window <= 0.  Accepted ids are remembered in the same
 * transaction, and older ones beyond the window are forgotten.
 * Returns 0, -EIO (disk full or I/O error: nothing of this call was
 * committed), -E2BIG (a blob over 2 GiB), -ENOMEM, -EINVAL, or
 * -ECANCELED after close began.  Any thread; blocks until committed. */
SEDA__API int seda__journal_insert(struct seda_journal *j, seda_jrec *recs,
                                   int n, int dedup_window, int *dup);

/* Called once when an async insert's commit ended: rc 0 (committed, keys
 * and dup flags written) or as seda__journal_insert's.  Runs on the thread
 * that committed (the journal's committer, or a caller leading a group),
 * with no journal lock held: it may queue other requests, but must not
 * wait for one. */
typedef void (*seda_jdone_fn)(int rc, void *ud);

/* seda__journal_insert without waiting: the request joins the next group
 * commit (the journal's committer thread leads it when no caller does),
 * and done(rc, ud) is called when it ended.  recs and dup must stay valid
 * until then.  Returns 0 (done will be called exactly once), or a
 * negative errno before anything was queued (done is not called). */
SEDA__API int seda__journal_insert_async(struct seda_journal *j,
                                         seda_jrec *recs, int n,
                                         int dedup_window, int *dup,
                                         seda_jdone_fn done, void *ud);

/* seda__journal_apply without waiting: the changes join the next group
 * commit (after every request queued before them, so a later request
 * naming the same rows sees them applied), and done(rc, ud) is called
 * when it ended, as for insert_async, but with no hurry: the request
 * does not start a commit of its own while others keep coming (it rides
 * with the next group a publish starts), and is committed alone only
 * after waiting a few ms for one.  ops must stay valid until then.
 * Returns 0 (done will be called exactly once), or a negative errno
 * before anything was queued (done is not called). */
SEDA__API int seda__journal_apply_async(struct seda_journal *j,
                                        const seda_jop *ops, int n,
                                        seda_jdone_fn done, void *ud);

/* apply_async requests whose commit has not ended yet (their done
 * callbacks see themselves no longer counted). */
SEDA__API int seda__journal_lazy_open(struct seda_journal *j);

/* A count the journal's user keeps of its own work that waits on a
 * commit (durable.c: hops from in-memory stages whose rows are not
 * committed yet, so the bus is not idle): adds delta, returns the new
 * value. */
SEDA__API int seda__journal_user_open(struct seda_journal *j, int delta);

/* fn() is called on the committing thread after the done callbacks of
 * a group's async requests (they may leave work for it: durable.c fills
 * a group's envelopes into their stages in one step).  No journal lock
 * held.  Set once, before the first request. */
SEDA__API void seda__journal_set_group_end(struct seda_journal *j,
                                           void (*fn)(void));

/* How long a commit may wait for company, ns (0, the default: commit as
 * soon as the journal is free).  Set once, before the first request. */
SEDA__API void seda__journal_set_group_wait(struct seda_journal *j,
                                            int64_t ns);

/* Group commit figures (relaxed): transactions committed, the write
 * requests they held (a publish, a drain batch's decisions, ...), the
 * largest group, and the fsyncs the database files had (the VFS counts
 * them: one per commit at sync = full, checkpoints only at normal). */
struct seda_jgroups {
    uint64_t txns, reqs, max, fsyncs;
};
SEDA__API void seda__journal_groups(struct seda_journal *j,
                                    struct seda_jgroups *out);

/* Call cb(rec, ud) for every committed live row of stage (kept dead
 * letters are not), in key order (the original publish order), until cb
 * returns non-zero.  Returns 0 (also
 * when cb stopped early), -EIO or -ENOMEM.  The rows are copied first
 * (one consistent snapshot), so cb may call insert and apply (they commit
 * independently of the replay's snapshot).  Any thread. */
SEDA__API int seda__journal_replay(struct seda_journal *j, const char *stage,
                                   int (*cb)(const seda_jrec *rec, void *ud),
                                   void *ud);

/* Store the number of live rows of stage in *n.  Returns 0 or -EIO. */
SEDA__API int seda__journal_count(struct seda_journal *j, const char *stage,
                                  int64_t *n);

/* Call cb for each live row of stage whose id is id (in key order;
 * normally one), until cb returns non-zero.  Returns 0, -ENOENT when there is no
 * such row, or -EIO. */
SEDA__API int seda__journal_get(struct seda_journal *j, const char *stage,
                                const char *id,
                                int (*cb)(const seda_jrec *, void *),
                                void *ud);

/* What recovery dropped of the WAL when the journal opened (reported on
 * stderr then).  Any thread. */
SEDA__API void seda__journal_wal_discarded(struct seda_journal *j,
                                           struct seda_wal_discard *out);

/* Rows quarantined through this journal since it was opened (relaxed). */
SEDA__API uint64_t seda__journal_quarantine_count(struct seda_journal *j);

/* Delete every live row of stage (purge), in one transaction.  Dedup memory is kept.  Returns 0, -EIO or -ECANCELED. */
SEDA__API int seda__journal_delete_stage(struct seda_journal *j,
                                         const char *stage);

/* Transactions committed so far (for tests and stats; relaxed). */
SEDA__API uint64_t seda__journal_txns(struct seda_journal *j);

/* For tests: while held, no commit starts (requests queue up and their
 * callers keep waiting; close still flushes them).  Any thread. */
SEDA__API void seda__journal_hold(struct seda_journal *j, bool hold);

/* For tests: requests queued and not yet taken by a commit. */
SEDA__API int seda__journal_pending(struct seda_journal *j);

#endif /* SEDA_JOURNAL_H */
