/* SPDX-License-Identifier: MIT */
/*
 * journal_int.h -- what journal.c (the API that builds requests, open
 * and close), journal_commit.c (running requests: group commit, reads,
 * the committer thread) and journal_db.c (the database: schema,
 * statements, opening) share.  Not a
 * public header; journal.h is the API.
 */
#ifndef SEDA_JOURNAL_INT_H
#define SEDA_JOURNAL_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "journal.h"

enum { REQ_INSERT = 1, REQ_APPLY, REQ_PURGE, REQ_READ, REQ_COUNT };

/* What a waiting request's state says (jreq.state). */
enum { JR_WAIT, JR_DONE, JR_LEAD };

/* A row copied out of SQLite for a read; rec's pointers point into it. */
struct jrow {
    struct jrow *next;
    seda_jrec rec;
    char data[];
};

/* A queued request.  Lives on the caller's stack until it returns (an
 * async one on the heap, until its done callback returned).
 * Locking: next and sleeping are guarded by j->mu; state is stored under
 * j->mu with release order and may be read without it (acquire) by its
 * caller, who reads rc, keys, dup flags, rows and count only after seeing
 * JR_DONE. */
struct jreq {
    int type;                   /* REQ_* */
    seda_jrec *recs;            /* INSERT: records, keys written back */
    const seda_jop *ops;        /* APPLY: the changes */
    int n;                      /* INSERT/APPLY: count */
    int window;                 /* INSERT: dedup window, <= 0 for none */
    int *dup;                   /* INSERT: dup flags out */
    const char *stage;          /* PURGE, COUNT: the stage */
    const char *sql;            /* READ: the SELECT (binds ?1, ?2) */
    const char *a, *b;          /* READ: texts for ?1 and ?2 (or NULL) */
    struct jrow *rows;          /* READ: rows, in order; caller frees */
    int64_t count;              /* READ: rows; COUNT: the count */
    int quarantined;            /* APPLY: rows quarantined (leader) */
    int rc;                     /* result, set by the leader */
    seda_jdone_fn done;         /* async (insert_async): called once with
                                   rc by the leader, mu not held; the
                                   request is the journal's (malloc'd) and
                                   freed after; NULL: a caller waits */
    void *done_ud;
    int64_t t0;                 /* queued at */
    bool lazy;                  /* async, and no hurry (apply_async): it
                                   rides with the next group someone
                                   else starts, or waits LAZY_NS for
                                   one; immutable once queued */
    atomic_int state;           /* JR_*; see above */
    bool sleeping;              /* the caller waits on cv; mu */
    pthread_cond_t cv;          /* the caller sleeps here, with j->mu */
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
    ST_MAXSEQ, ST_MOVE, ST_DELETE, ST_DELRANGE, ST_PURGE, ST_KEEP,
    ST_QUARANTINE, ST_RETRY, ST_N
};

#define ROW_COLS "key, stage, id, attempts, sender, headers, slip, kind," \
                 " payload, published_at, published_wall, done_at"
#define SELECT_COLS "SELECT " ROW_COLS ", due_wall FROM envelopes "

/*
 * Locking: mu guards head, tail, hold, stop and busy (and each queued
 * request's next and sleeping).  npending is written under mu and read
 * without it (relaxed) by a deferring leader and by tests.  Immutable
 * after open: dir, path, lockfd, wal_lost.  db, st, seqs and next_key
 * belong to the leader -- whoever set busy (under mu) -- until it clears
 * busy or passes the lead.  Atomic: txns, reqs, grp_max, fsyncs,
 * quarantined (relaxed counters).  Only one lock; it is never held
 * across SQLite calls.  The committer thread (started by the first async
 * request) leads when asked: go, cstop, cstarted, gwaiting and nwaiting
 * are guarded by mu, commit_cv is signalled under it.  group_wait_ns and
 * group_end are immutable after open (set before any request).
 */
struct seda_journal {
    char *dir;                  /* the data directory */
    char *path;                 /* DIR/seda.db */
    int lockfd;                 /* DIR/seda.lock, flock()ed */
    sqlite3 *db;                /* the connection; leader only */
    sqlite3_stmt *st[ST_N];     /* prepared statements; leader only */
    struct seqent *seqs;        /* dedup seq cache; leader only */
    int64_t next_key;           /* key of the next insert; leader only */
    int defer_score;            /* see defer_now; leader only */
    unsigned defer_probe;       /* see defer_now; leader only */
    seda__mutex_t mu;           /* guards the pending list */
    pthread_cond_t idle_cv;     /* close waits here for the last leader */
    struct jreq *head;          /* oldest pending; guarded by mu */
    struct jreq *tail;          /* newest pending; guarded by mu */
    atomic_int npending;        /* requests queued; see above */
    bool hold;                  /* tests: nobody leads; guarded by mu */
    bool stop;                  /* close began; guarded by mu */
    bool busy;                  /* a leader is running; guarded by mu */
    atomic_uint_fast64_t txns;  /* committed transactions; relaxed */
    atomic_uint_fast64_t reqs;  /* write requests they held; relaxed */
    atomic_uint_fast64_t grp_max; /* most requests in one; relaxed */
    atomic_uint_fast64_t fsyncs; /* fsyncs of the commits; relaxed */
    int64_t group_wait_ns;      /* see seda__journal_set_group_wait */
    void (*group_end)(void);    /* see seda__journal_set_group_end;
                                   immutable after it */
    pthread_t committer;        /* runs async requests' commits */
    bool cstarted;              /* committer started; mu */
    bool go;                    /* committer: lead now (busy is set for
                                   it); mu */
    bool cstop;                 /* committer: exit; mu */
    bool gwaiting;              /* committer in group_wait; mu */
    int nwaiting;               /* queued requests whose caller waits
                                   (not async): they end a group_wait;
                                   mu */
    int nlazy;                  /* queued lazy requests; mu */
    atomic_int lazy_open;       /* lazy requests whose done callback has
                                   not returned (acq_rel) */
    atomic_int user_open;       /* the user's work in flight, see
                                   seda__journal_user_open (acq_rel) */
    bool flush_lazy;            /* committer: lead even when only lazy
                                   requests are queued; mu */
    pthread_cond_t commit_cv;   /* the committer waits here, with mu */
    atomic_uint_fast64_t quarantined; /* rows quarantined; relaxed */
    struct seda_wal_discard wal_lost; /* what recovery dropped at open;
                                         immutable after open */
};


/* ---- journal_db.c ---- */

/* Process-wide SQLite settings, before SQLite's first use (once). */
SEDA__API void seda__jdb_init(void);

/* The directory and files of j (j->dir, j->path set): make the
 * directory, check that it and the files are to be trusted (datadir.h),
 * open and flock DIR/seda.lock into j->lockfd, and create a new database
 * file private.  Returns 0 or a negative errno with err naming the path;
 * j's fields are released by the caller either way. */
SEDA__API int seda__jdb_files(struct seda_journal *j, char *err,
                              size_t errlen);

/* Open j->path into j->db, set it up (exclusive WAL, pragmas, schema,
 * version check), prepare j->st and load j->next_key.  Returns 0 or a
 * negative errno with err set; j's fields are released by the caller
 * either way. */
SEDA__API int seda__jdb_setup(struct seda_journal *j, bool sync_full,
                              char *err, size_t errlen);

/* ---- journal_commit.c ---- */

/* The lone-drain-commit score's ceiling, and its value at open. */
#define SEDA__JOURNAL_DEFER_MAX 16

/* Run r and return its result (0 or a negative errno), or -ECANCELED
 * when close began, -ENOMEM if a wait could not be set up.  Takes
 * j->mu. */
SEDA__API int seda__journal_commit_submit(struct seda_journal *j,
                                          struct jreq *r);

/* Queue an async request r (the journal's from here on when it returns
 * 0).  Returns 0, -ECANCELED after close began, -EAGAIN when the
 * committer could not be started.  Takes j->mu. */
SEDA__API int seda__journal_commit_submit_async(struct seda_journal *j,
                                                struct jreq *r);

/* Nobody leads but requests wait (hold was just lifted, or close began):
 * make the oldest waiter the leader.  j->mu held. */
SEDA__API void seda__journal_commit_wake_leader(struct seda_journal *j);

/* Drop the leader's cache of each stage's next dedup seq. */
SEDA__API void seda__journal_commit_seqs_drop(struct seda_journal *j);

/* Free a read's copied rows. */
SEDA__API void seda__journal_commit_rows_free(struct jrow *w);

#endif /* SEDA_JOURNAL_INT_H */
