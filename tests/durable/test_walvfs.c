/* SPDX-License-Identifier: MIT */
/*
 * test_walvfs.c -- the WAL-buffering VFS (src/durable/walvfs.c): what a commit
 * returned is in the file when the process dies right after, whatever the
 * transaction's size; a later reader without the shim sees every row.
 *
 * Every test works in a fresh mkdtemp directory under /tmp.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "durable/journal.h"

#include "dir_fixture.h"

struct fx {
    struct dir_fx d;            /* d.sub: dir/t.db, the database */
};

static int fx_setup(void **state)
{
    *state = dir_fx_new(sizeof(struct fx), "walvfs", "t.db");
    return *state ? 0 : -1;
}

static int fx_teardown(void **state)
{
    dir_fx_free(*state);
    return 0;
}

static sqlite3 *open_shim(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(seda__walvfs_register(), SQLITE_OK);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE |
                                     SQLITE_OPEN_CREATE, SEDA_JOURNAL_VFS),
                     SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE;"
                                  "PRAGMA page_size=1024;"
                                  "PRAGMA journal_mode=WAL;"
                                  "PRAGMA synchronous=NORMAL;"
                                  "PRAGMA wal_autocheckpoint=0;"
                                  "CREATE TABLE t(k INTEGER PRIMARY KEY,"
                                  " v BLOB)", NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

/* Insert rows [from, to) in one transaction, each with a blob of size. */
static void insert_rows(sqlite3 *db, int from, int to, int size)
{
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1, "
                                        "zeroblob(?2))", -1, &s, NULL),
                     SQLITE_OK);
    for (int k = from; k < to; k++) {
        sqlite3_bind_int(s, 1, k);
        sqlite3_bind_int(s, 2, size);
        assert_int_equal(sqlite3_step(s), SQLITE_DONE);
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL),
                     SQLITE_OK);
}

/* Rows in t, read through the default VFS (no shim), -1 on error. */
static long count_plain(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    long n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) ==
            SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        n = (long)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return n;
}

/* A child commits transactions of 1, 3, 40 and 2000 rows (one frame,
 * a few, many, more than the shim's buffer) and dies without closing:
 * every committed row must be in the WAL. */
static void test_walvfs_commit_survives_process_death(void **state)
{
    struct fx *f = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *db = open_shim(f->d.sub);
        insert_rows(db, 0, 1, 8);
        insert_rows(db, 1, 4, 8);
        insert_rows(db, 4, 44, 100);
        insert_rows(db, 44, 2044, 300);
        _exit(0);               /* no close: no flush but the commits' */
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(count_plain(f->d.sub), 2044);
}

/* Through the shim, reads see what was just written (within and across
 * transactions), and a closed database reads the same without it. */
static void test_walvfs_reads_see_writes(void **state)
{
    struct fx *f = *state;
    sqlite3 *db = open_shim(f->d.sub);
    for (int t = 0; t < 50; t++)
        insert_rows(db, t * 10, t * 10 + 10, 64 + t);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), sum(length(v))"
                                        " FROM t", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 500);
    long bytes = 0;
    for (int t = 0; t < 50; t++)
        bytes += 10L * (64 + t);
    assert_int_equal(sqlite3_column_int64(s, 1), bytes);
    sqlite3_finalize(s);
    /* A checkpoint reads the WAL back through the shim. */
    assert_int_equal(sqlite3_wal_checkpoint_v2(db, NULL,
                                               SQLITE_CHECKPOINT_TRUNCATE,
                                               NULL, NULL), SQLITE_OK);
    insert_rows(db, 500, 510, 8);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(count_plain(f->d.sub), 510);
}

/* ---- what recovery discards is counted ---- */

/* A child commits 12 transactions of one row each (the table made
 * first) and dies without closing: the WAL holds them all. */
static void crash_with_wal(const struct fx *f)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *db = open_shim(f->d.sub);
        for (int t = 0; t < 12; t++)
            insert_rows(db, t, t + 1, 200);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static long long wal_size(const struct fx *f)
{
    char p[128];
    snprintf(p, sizeof p, "%s-wal", f->d.sub);
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long long n = ftell(fp);
    fclose(fp);
    return n;
}

/* Overwrite n bytes of the WAL at off with a fixed pseudo-random run. */
static void scribble(const struct fx *f, long off, int n)
{
    char p[128];
    snprintf(p, sizeof p, "%s-wal", f->d.sub);
    FILE *fp = fopen(p, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, off, SEEK_SET), 0);
    unsigned x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        fputc((int)(x >> 16) & 0xff, fp);
    }
    fclose(fp);
}

/* Open through the shim (recovery runs at the first read) and return
 * what it says recovery discarded; *rows gets the rows left (-1: the
 * table itself was lost). */
static struct seda_wal_discard reopen(const struct fx *f, long *rows)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->d.sub, &db, SQLITE_OPEN_READWRITE,
                                     SEDA_JOURNAL_VFS), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    *rows = -1;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, NULL) ==
            SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        *rows = (long)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    struct seda_wal_discard d;
    assert_int_equal(seda__walvfs_discarded(db, &d), 0);
    sqlite3_close(db);
    return d;
}

static void test_walvfs_clean_crash_discards_nothing(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    assert_int_equal(rows, 12);
    assert_int_equal(d.frames, 0);
    assert_int_equal(d.bytes, 0);
    assert_string_equal(d.why, "");
}

/* The report's first case: 200 random bytes at offset 100 break the
 * first frame's checksum, so recovery drops the whole log. */
static void test_walvfs_counts_frames_after_a_bad_checksum(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    long long size = wal_size(f);
    scribble(f, 100, 200);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    assert_true(rows <= 0);
    assert_int_equal(d.frames, (size - 32) / (1024 + 24));
    assert_int_equal(d.bytes, size - 32);
    assert_non_null(strstr(d.why, "checksum mismatch at frame 1"));
}

static void test_walvfs_counts_a_damaged_header(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    long long size = wal_size(f);
    scribble(f, 0, 32);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    assert_true(rows <= 0);
    assert_int_equal(d.bytes, size);
    assert_int_equal(d.frames, (size - 32) / (1024 + 24));
    assert_non_null(strstr(d.why, "WAL header is damaged"));
}

/* Damage in a later frame: what came before it stays, the rest is
 * counted. */
static void test_walvfs_counts_only_what_follows_the_damage(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    long long size = wal_size(f);
    long long frames = (size - 32) / (1024 + 24);
    long at = 32 + (long)(frames - 3) * (1024 + 24) + 500;
    scribble(f, at, 10);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    print_message("rows %ld frames %lld bytes %lld: %s\n", rows, d.frames, d.bytes, d.why);
    assert_true(rows >= 0 && rows < 12);
    assert_true(d.frames >= 3 && d.frames <= frames);
    assert_int_equal(d.bytes, d.frames * (1024 + 24));
    assert_non_null(strstr(d.why, "checksum mismatch"));
}

static void test_walvfs_counts_a_truncated_log(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    char p[128];
    snprintf(p, sizeof p, "%s-wal", f->d.sub);
    assert_true(wal_size(f) > 5000);
    assert_int_equal(truncate(p, 5000), 0);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    print_message("rows %ld frames %lld bytes %lld: %s\n", rows, d.frames, d.bytes, d.why);
    assert_true(rows < 12);
    assert_true(d.frames >= 1);
    assert_true(d.bytes > 0 && d.bytes <= 5000 - 32);
    assert_true(d.why[0] != '\0');
}

/* A process killed while writing a transaction: the log goes on past the
 * last commit with frames of this log, up to a page-cache boundary, and
 * holds no commit.  SQLite drops the unfinished transaction; nothing
 * acknowledged was lost, so nothing is reported. */
static void test_walvfs_unfinished_write_is_not_a_loss(void **state)
{
    struct fx *f = *state;
    crash_with_wal(f);
    char p[128];
    snprintf(p, sizeof p, "%s-wal", f->d.sub);
    long long size = wal_size(f);
    long long fsz = 1024 + 24;
    /* The last frame again, as the next one (its salt is this log's, its
     * checksum no longer chains), cut where a killed write stops. */
    unsigned char *fr = malloc((size_t)fsz);
    assert_non_null(fr);
    FILE *fp = fopen(p, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (long)(size - fsz), SEEK_SET), 0);
    assert_int_equal(fread(fr, 1, (size_t)fsz, fp), (size_t)fsz);
    fr[4] = fr[5] = fr[6] = fr[7] = 0;          /* not a commit */
    long long end = (size / 4096 + 1) * 4096;
    if (end - size < 24)
        end += 4096;
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    for (long long off = size; off < end; off += fsz) {
        size_t n = (size_t)(end - off < fsz ? end - off : fsz);
        assert_int_equal(fwrite(fr, 1, n, fp), n);
    }
    fclose(fp);
    free(fr);
    assert_int_equal(wal_size(f) % 4096, 0);
    long rows;
    struct seda_wal_discard d = reopen(f, &rows);
    print_message("size %lld -> %lld: rows %ld frames %lld bytes %lld: %s\n",
                  size, end, rows, d.frames, d.bytes, d.why);
    assert_int_equal(rows, 12);
    assert_int_equal(d.frames, 0);
    assert_int_equal(d.bytes, 0);
    assert_string_equal(d.why, "");
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_walvfs_commit_survives_process_death),
        T(test_walvfs_reads_see_writes),
        T(test_walvfs_clean_crash_discards_nothing),
        T(test_walvfs_counts_frames_after_a_bad_checksum),
        T(test_walvfs_counts_a_damaged_header),
        T(test_walvfs_counts_only_what_follows_the_damage),
        T(test_walvfs_counts_a_truncated_log),
        T(test_walvfs_unfinished_write_is_not_a_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
