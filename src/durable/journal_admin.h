/* SPDX-License-Identifier: MIT */
/*
 * journal_admin.h -- the part of the journal (journal.h) that seda-lua's
 * dead-letter tool (src/cli/cli_dlq.c) uses on a stopped bus's
 * directory: open and close a journal, scan its rows and its quarantine,
 * and apply changes to them.  The cli includes this door, never
 * journal.h or journal_int.h; journal.h includes it for the same
 * declarations (the on-disk format and the threads are described there).
 */
#ifndef SEDA_JOURNAL_ADMIN_H
#define SEDA_JOURNAL_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

#define SEDA_JOURNAL_FILE "seda.db"

struct seda_journal;

/* One journal row.  On the way in, every pointer is borrowed for the call;
 * on the way out (replay, get callbacks), every pointer is valid only
 * during the callback.  A zero-length blob may come back as NULL. */
typedef struct seda_jrec {
    int64_t key;                /* row key: assigned by insert, kept by MOVE */
    const char *stage;          /* stage name */
    const char *id;             /* envelope id */
    int attempts;               /* deliveries tried */
    const char *sender;         /* may be NULL */
    const void *headers;        /* opaque blob */
    size_t hlen;                /* bytes at headers */
    const void *slip;           /* opaque blob: the remaining itinerary */
    size_t slen;                /* bytes at slip */
    int kind;                   /* payload kind */
    const void *payload;        /* opaque blob */
    size_t plen;                /* bytes at payload */
    double published_at;        /* seconds, the bus's monotonic clock */
    double published_wall;      /* seconds since the epoch (wall clock) at
                                   publish; 0 = unknown (a row from a
                                   schema 1 journal).  Written by insert
                                   only: a MOVE keeps the row's */
    double done_at;             /* out only: when a dead letter was done
                                   (SEDA_JOP_KEEP), seconds since the
                                   epoch; 0 = the row is live */
    double due_wall;            /* a retry's due time, seconds since the
                                   epoch (SEDA_JOP_RETRY writes it with
                                   attempts; a MOVE clears it); 0 = due
                                   now */
    const char *reason;         /* quarantined rows (read with
                                   seda__journal_quarantined): why; NULL
                                   for envelopes */
} seda_jrec;

enum { SEDA_JOP_MOVE = 1, SEDA_JOP_DELETE = 2, SEDA_JOP_KEEP = 3,
       SEDA_JOP_QUARANTINE = 4, SEDA_JOP_RETRY = 5 };

/* One state change for seda__journal_apply.  rec.key names the row. */
typedef struct seda_jop {
    int op;                     /* SEDA_JOP_* */
    seda_jrec rec;              /* MOVE: every field but published_wall
                                   and done_at is written, and the row is
                                   live again; DELETE: only key is read;
                                   KEEP: key and done_at (0: now);
                                   QUARANTINE: only key is read; RETRY:
                                   key, attempts and due_wall */
    const char *reason;         /* QUARANTINE: why (stored with the row) */
} seda_jop;

/* Open DIR/seda.db (creating DIR, with parents, and the database as
 * needed, private: 0700 and 0600) in WAL mode with synchronous=FULL
 * (sync_full) or NORMAL, take the exclusive lock on DIR/seda.lock and on
 * the database.  DIR and the files in it must be the process's own and
 * not writable by group or others (datadir.h).
 * Returns 0 and *out (free with seda__journal_close), or a negative errno
 * with a message in err (when err != NULL) naming the path and the problem:
 *   -EPERM     "PATH: owned by uid N, not by this process (uid M): not
 *              trusted (...)", "PATH: writable by group or others (mode
 *              0777): not trusted (chmod go-w PATH)", "PATH: a symbolic
 *              link: not trusted (...)"
 *   -EBUSY     "DIR: locked by another process"
 *   -ENOTDIR, -EACCES, -EROFS, ...  "PATH: not writable: <strerror>"
 *   -EILSEQ    "DIR/seda.db: not a database (corrupt?)"
 *   -EPROTO    "DIR/seda.db: schema version N is not 2 (newer than this
 *              build)"; version 1 is upgraded
 *   -EIO       "DIR/seda.db: <sqlite message>"
 *   -ENOMEM
 * Nothing is left open on failure.  Any thread; blocks on file I/O. */
SEDA__API int seda__journal_open(const char *dir, bool sync_full,
                                 struct seda_journal **out, char *err,
                                 size_t errlen);

/* Commit what is queued, close the database (checkpointing and removing
 * the WAL) and release the lock.  NULL is ignored.  No other call may be running or
 * start on j.  Blocks. */
SEDA__API void seda__journal_close(struct seda_journal *j);

/* Apply n state changes atomically: MOVE rewrites row rec.key with every
 * field of rec (a hop; the key, and so the replay order, is kept) and
 * makes it live; DELETE removes row rec.key (completion); KEEP marks row
 * rec.key done at rec.done_at (a dead letter kept on disk: no longer
 * replayed or counted); QUARANTINE moves row rec.key, as it is, from
 * envelopes into the quarantine table with reason (a row replay cannot
 * use).  A key that is not in the journal is skipped without error.  Returns 0 (all applied), or -EIO, -E2BIG,
 * -ENOMEM, -EINVAL, -ECANCELED with nothing applied.  Any thread; blocks
 * until committed. */
SEDA__API int seda__journal_apply(struct seda_journal *j, const seda_jop *ops,
                                  int n);

/* Call cb for each row matching the SQL condition where (the text after
 * "FROM envelopes ", e.g. "WHERE id = ?1"; ?1 is bound to arg when arg is
 * not NULL), kept rows included, in key order, until cb returns non-zero;
 * as replay.  For the
 * dlq tool: where is trusted SQL, never user input.  Returns 0, -EIO or
 * -ENOMEM. */
SEDA__API int seda__journal_scan(struct seda_journal *j, const char *where,
                                 const char *arg,
                                 int (*cb)(const seda_jrec *, void *),
                                 void *ud);

/* Call cb for each quarantined row, in key order (rec->reason says why
 * it was quarantined), until cb returns non-zero; as replay.  Returns 0,
 * -EIO or -ENOMEM. */
SEDA__API int seda__journal_quarantined(struct seda_journal *j,
                                        int (*cb)(const seda_jrec *, void *),
                                        void *ud);

#endif /* SEDA_JOURNAL_ADMIN_H */
