/* SPDX-License-Identifier: MIT */
/*
 * journal_db.c -- the journal's database: its schema and statements, and
 * setting up the one connection (exclusive WAL, 1 KiB pages for a new
 * database, the WAL-coalescing VFS of walvfs.c), with errors that name
 * the path and the problem.  The requests, group commit and reads are
 * journal.c's (see there and journal.h); the directory and the trust in
 * its files are datadir.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datadir.h"
#include "journal_int.h"

/* busy_timeout, ms: only an outside tool (the sqlite3 shell holding a
 * lock when the journal opens) can make the connection wait. */
#define BUSY_MS 200
/* WAL pages between automatic checkpoints. */
#define CKPT_FRAMES "4096"
/* Page size of a new database. */
#define PAGE_SIZE "1024"

static const char *const stmt_sql[ST_N] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = "INSERT INTO envelopes(key, stage, id, attempts, sender, "
                  "headers, slip, kind, payload, published_at, "
                  "published_wall) "
                  "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [ST_DEDUP] = "INSERT OR IGNORE INTO dedup(stage, id, seq) "
                 "VALUES(?1, ?2, ?3)",
    [ST_EVICT] = "DELETE FROM dedup WHERE stage = ?1 AND seq <= ?2",
    [ST_MAXSEQ] = "SELECT coalesce(max(seq), 0) FROM dedup WHERE stage = ?1",
    [ST_MOVE] = "UPDATE envelopes SET stage = ?2, id = ?3, attempts = ?4, "
                "sender = ?5, headers = ?6, slip = ?7, kind = ?8, "
                "payload = ?9, published_at = ?10, done_at = NULL, "
                "due_wall = NULL "
                "WHERE key = ?1",
    [ST_DELETE] = "DELETE FROM envelopes WHERE key = ?1",
    [ST_DELRANGE] = "DELETE FROM envelopes WHERE key BETWEEN ?1 AND ?2",
    [ST_PURGE] = "DELETE FROM envelopes WHERE stage = ?1 AND done_at IS NULL",
    [ST_KEEP] = "UPDATE envelopes SET done_at = ?2 WHERE key = ?1",
    [ST_QUARANTINE] = "INSERT OR REPLACE INTO quarantine SELECT " ROW_COLS
                      ", ?2 FROM envelopes WHERE key = ?1",
    [ST_RETRY] = "UPDATE envelopes SET attempts = ?2, due_wall = ?3 "
                 "WHERE key = ?1",
};

/* A new database gets schema 3 outright; an existing one keeps its
 * tables and version, and upgrade_sql takes version 1 to 2, upgrade3_sql
 * 2 to 3. */
static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS envelopes("
    " key INTEGER PRIMARY KEY, stage TEXT NOT NULL,"
    " id TEXT NOT NULL, attempts INTEGER, sender TEXT, headers BLOB,"
    " slip BLOB, kind INTEGER, payload BLOB, published_at REAL,"
    " published_wall REAL, done_at REAL, due_wall REAL);"
    "CREATE TABLE IF NOT EXISTS dedup(stage TEXT, id TEXT, seq INTEGER,"
    " PRIMARY KEY(stage, id)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS dedup_seq ON dedup(stage, seq);"
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v);"
    "CREATE TABLE IF NOT EXISTS quarantine("
    " key INTEGER PRIMARY KEY, stage TEXT, id TEXT, attempts INTEGER,"
    " sender TEXT, headers BLOB, slip BLOB, kind INTEGER, payload BLOB,"
    " published_at REAL, published_wall REAL, done_at REAL, reason TEXT);"
    "INSERT OR IGNORE INTO meta(k, v) VALUES('schema_version', 3);";

/* Schema 1 -> 2: the wall-clock publish time and kept dead letters. */
static const char upgrade_sql[] =
    "ALTER TABLE envelopes ADD COLUMN published_wall REAL;"
    "ALTER TABLE envelopes ADD COLUMN done_at REAL;"
    "UPDATE meta SET v = 2 WHERE k = 'schema_version';";

/* Schema 2 -> 3: a retry's due time (a retry backoff survives a
 * restart). */
static const char upgrade3_sql[] =
    "ALTER TABLE envelopes ADD COLUMN due_wall REAL;"
    "UPDATE meta SET v = 3 WHERE k = 'schema_version';";

/* The schema version in meta (0 when missing).  Returns an SQLite code. */
static int read_version(sqlite3 *db, int64_t *version)
{
    sqlite3_stmt *s = NULL;
    *version = 0;
    int rc = sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = "
                                "'schema_version'", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        *version = sqlite3_column_int64(s, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    return rc;
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

int seda__jdb_files(struct seda_journal *j, char *err, size_t errlen)
{
    const char *dir = j->dir;
    char *lockpath = seda__datadir_join(dir, SEDA_JOURNAL_LOCK);
    char *walpath = seda__datadir_join(dir, SEDA_JOURNAL_FILE "-wal");
    int rc = lockpath && walpath ? 0 : -ENOMEM;
    if (rc == 0)
        rc = seda__datadir_prepare(dir, err, errlen);
    if (rc == 0)
        rc = seda__datadir_check(lockpath, NULL, err, errlen);
    if (rc == 0) {
        j->lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                         0600);
        if (j->lockfd < 0) {
            rc = -errno;
            if (err && errlen)
                snprintf(err, errlen, "%s: not writable: %s", lockpath,
                         strerror(-rc));
        }
    }
    if (rc == 0) {
        /* Through the descriptor: the file we hold, whatever the path
         * says by now. */
        struct stat sb;
        rc = fstat(j->lockfd, &sb) == 0
                 ? seda__datadir_check(lockpath, &sb, err, errlen) : -errno;
    }
    if (rc == 0 && flock(j->lockfd, LOCK_EX | LOCK_NB) != 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: %s", dir, rc == -EBUSY
                     ? "locked by another process" : strerror(-rc));
    }
    /* The database and its WAL are ours, or refused; a new database is
     * made private here, and SQLite gives its WAL the same mode. */
    if (rc == 0)
        rc = seda__datadir_check(j->path, NULL, err, errlen);
    if (rc == 0)
        rc = seda__datadir_check(walpath, NULL, err, errlen);
    if (rc == 0)
        rc = seda__datadir_touch(j->path, err, errlen);
    seda__free(walpath);
    seda__free(lockpath);
    return rc;
}

int seda__jdb_setup(struct seda_journal *j, bool sync_full, char *err,
                    size_t errlen)
{
    int rc = sqlite3_open_v2(j->path, &j->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                             SQLITE_OPEN_NOMUTEX,
                             seda__walvfs_register() == SQLITE_OK
                                 ? SEDA_JOURNAL_VFS : NULL);
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    sqlite3_extended_result_codes(j->db, 1);
    if (sqlite3_db_readonly(j->db, "main") == 1)
        return open_error(SQLITE_READONLY, j->db, j->path, j->dir, err,
                          errlen);
    sqlite3_busy_timeout(j->db, BUSY_MS);
    /* Exclusive before WAL, so that the WAL index lives in heap memory;
     * the page size applies only to a new database.  journal_mode reads
     * the header first: garbage fails there. */
    sqlite3_stmt *s = NULL;
    rc = sqlite3_exec(j->db, "PRAGMA locking_mode=EXCLUSIVE;"
                      "PRAGMA page_size=" PAGE_SIZE, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(j->db, "PRAGMA journal_mode=WAL", -1, &s,
                                NULL);
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
                          "PRAGMA cache_size=-16384;"
                          "PRAGMA wal_autocheckpoint=" CKPT_FRAMES,
                          NULL, NULL, NULL);
    int64_t version = 0;
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(j->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(j->db, schema_sql, NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = read_version(j->db, &version);
        if (rc == SQLITE_OK && version == 1) {
            /* Old rows keep NULL in the new columns: an unknown wall
             * clock, and live (kept dead letters did not exist). */
            rc = sqlite3_exec(j->db, upgrade_sql, NULL, NULL, NULL);
            if (rc == SQLITE_OK)
                version = 2;
        }
        if (rc == SQLITE_OK && version == 2) {
            /* Old rows keep NULL: due now. */
            rc = sqlite3_exec(j->db, upgrade3_sql, NULL, NULL, NULL);
            if (rc == SQLITE_OK)
                version = 3;
        }
        if (rc == SQLITE_OK)
            rc = sqlite3_exec(j->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK && !sqlite3_get_autocommit(j->db))
            sqlite3_exec(j->db, "ROLLBACK", NULL, NULL, NULL);
    }
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
    /* Keys are never reused, quarantined ones included. */
    rc = sqlite3_prepare_v2(j->db, "SELECT max(coalesce((SELECT max(key) "
                            "FROM envelopes), 0), coalesce((SELECT "
                            "max(key) FROM quarantine), 0))", -1, &s, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        j->next_key = sqlite3_column_int64(s, 0) + 1;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_OK)
        return open_error(rc, j->db, j->path, j->dir, err, errlen);
    return 0;
}



/* Before SQLite's first use in this process (later it refuses, and
 * nothing changes): no global memory statistics, whose mutex every
 * sqlite3_malloc and sqlite3_free would otherwise take. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

void seda__jdb_init(void)
{
    pthread_once(&g_once, init_once);
}

