/* SPDX-License-Identifier: MIT */
/*
 * test_datadir.c -- the journal's directory and files (src/durable/
 * datadir.c): what the journal makes is private (0700, 0600), and a
 * directory, database, WAL or lock file that is not the running user's
 * own, or that group or others may write, is refused with a message
 * naming it -- root included.
 *
 * Every test works in a fresh mkdtemp directory under /tmp.  The tests
 * that hand a file to another user chown it to nobody (uid 65534) and
 * are skipped, with a message, when the process cannot (not root).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "durable/journal.h"

#include "dir_fixture.h"

#define NOBODY 65534

struct fx {
    struct dir_fx d;            /* d.sub: dir/data, the journal's directory */
};

static int fx_setup(void **state)
{
    *state = dir_fx_new(sizeof(struct fx), "datadir", "data");
    return *state ? 0 : -1;
}

static int fx_teardown(void **state)
{
    dir_fx_free(*state);
    return 0;
}

static unsigned mode_of(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        fail_msg("stat(%s): %s", path, strerror(errno));
    return (unsigned)(sb.st_mode & 0777);
}

static void file_in(const struct fx *f, const char *name, char *out,
                    size_t outlen)
{
    snprintf(out, outlen, "%s/%s", f->d.sub, name);
}

/* Open, write one row, close: a journal with something to replay. */
static void make_journal(const char *dir)
{
    struct seda_journal *j = NULL;
    char err[512];
    int rc = seda__journal_open(dir, false, &j, err, sizeof err);
    if (rc != 0)
        fail_msg("journal_open(%s): %d %s", dir, rc, err);
    seda_jrec r = {
        .stage = "pay", .id = "evil", .attempts = 1, .payload = "x",
        .plen = 1,
    };
    assert_int_equal(seda__journal_insert(j, &r, 1, 0, NULL), 0);
    seda__journal_close(j);
}

/* Expect opening dir to be refused with -EPERM and a message holding
 * every given fragment. */
static void expect_refused(const char *dir, const char *frag1,
                           const char *frag2)
{
    struct seda_journal *j = NULL;
    char err[512] = "";
    int rc = seda__journal_open(dir, false, &j, err, sizeof err);
    if (rc != -EPERM)
        fail_msg("journal_open(%s): %d (%s), expected -EPERM", dir, rc,
                 err);
    assert_null(j);
    if (!strstr(err, frag1) || (frag2 && !strstr(err, frag2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", err, frag1,
                 frag2 ? frag2 : "");
}

static bool can_chown(void)
{
    if (geteuid() == 0)
        return true;
    print_message("skipped: chown to another user needs root\n");
    return false;
}

/* ---- what the journal makes is private ---- */

static void test_datadir_new_journal_is_private(void **state)
{
    struct fx *f = *state;
    char nested[160], db[200], lock[200], wal[200];
    snprintf(nested, sizeof nested, "%s/a/b", f->d.sub);
    struct seda_journal *j = NULL;
    char err[512];
    assert_int_equal(seda__journal_open(nested, false, &j, err, sizeof err),
                     0);
    seda_jrec r = { .stage = "s", .id = "1", .payload = "p", .plen = 1 };
    assert_int_equal(seda__journal_insert(j, &r, 1, 0, NULL), 0);
    snprintf(db, sizeof db, "%s/seda.db", nested);
    snprintf(lock, sizeof lock, "%s/seda.lock", nested);
    snprintf(wal, sizeof wal, "%s/seda.db-wal", nested);
    /* Every directory made on the way, the database, its WAL (alive
     * while the journal is open) and the lock. */
    assert_int_equal(mode_of(f->d.sub), 0700);
    assert_int_equal(mode_of(nested), 0700);
    assert_int_equal(mode_of(db), 0600);
    assert_int_equal(mode_of(wal), 0600);
    assert_int_equal(mode_of(lock), 0600);
    seda__journal_close(j);
    assert_int_equal(mode_of(db), 0600);
}

/* ---- what others may write is refused ---- */

static void test_datadir_refuses_dir_writable_by_others(void **state)
{
    struct fx *f = *state;
    make_journal(f->d.sub);
    assert_int_equal(chmod(f->d.sub, 0770), 0);
    expect_refused(f->d.sub, "writable by group or others (mode 0770)",
                   f->d.sub);
    assert_int_equal(chmod(f->d.sub, 0703), 0);
    expect_refused(f->d.sub, "writable by group or others (mode 0703)",
                   "chmod go-w");
    assert_int_equal(chmod(f->d.sub, 0755), 0);   /* readable is allowed */
    make_journal(f->d.sub);
}

static void test_datadir_refuses_files_writable_by_others(void **state)
{
    struct fx *f = *state;
    static const char *const names[] = { "seda.db", "seda.lock" };
    make_journal(f->d.sub);
    for (int i = 0; i < 2; i++) {
        char p[200];
        file_in(f, names[i], p, sizeof p);
        assert_int_equal(chmod(p, 0666), 0);
        expect_refused(f->d.sub, p, "writable by group or others");
        assert_int_equal(chmod(p, 0600), 0);
    }
    /* A WAL left behind by a crash, writable by others. */
    char wal[200];
    file_in(f, "seda.db-wal", wal, sizeof wal);
    FILE *fp = fopen(wal, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(chmod(wal, 0622), 0);
    expect_refused(f->d.sub, wal, "mode 0622");
    assert_int_equal(unlink(wal), 0);
    make_journal(f->d.sub);
}

static void test_datadir_refuses_symlinked_db(void **state)
{
    struct fx *f = *state;
    assert_int_equal(mkdir(f->d.sub, 0700), 0);
    char target[160], db[200];
    snprintf(target, sizeof target, "%s/elsewhere", f->d.dir);
    FILE *fp = fopen(target, "w");
    assert_non_null(fp);
    fputs("precious", fp);
    fclose(fp);
    file_in(f, "seda.db", db, sizeof db);
    assert_int_equal(symlink(target, db), 0);
    expect_refused(f->d.sub, db, "symbolic link");
    struct stat sb;
    assert_int_equal(stat(target, &sb), 0);
    assert_int_equal(sb.st_size, 8);           /* untouched */
}

/* ---- what another user owns is refused, by root too ---- */

/* The report's case: nobody prepares a data_dir with a journaled row;
 * this process must not replay it. */
static void test_datadir_refuses_dir_owned_by_another_user(void **state)
{
    struct fx *f = *state;
    if (!can_chown())
        skip();
    make_journal(f->d.sub);
    char db[200], lock[200];
    file_in(f, "seda.db", db, sizeof db);
    file_in(f, "seda.lock", lock, sizeof lock);
    assert_int_equal(chown(f->d.sub, NOBODY, NOBODY), 0);
    assert_int_equal(chown(db, NOBODY, NOBODY), 0);
    assert_int_equal(chown(lock, NOBODY, NOBODY), 0);
    expect_refused(f->d.sub, "owned by uid 65534", f->d.sub);
    /* Only the files another user's: each is named. */
    assert_int_equal(chown(f->d.sub, 0, 0), 0);
    expect_refused(f->d.sub, "owned by uid 65534", lock);
    assert_int_equal(chown(lock, 0, 0), 0);
    expect_refused(f->d.sub, "owned by uid 65534", db);
    assert_int_equal(chown(db, 0, 0), 0);
    make_journal(f->d.sub);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_datadir_new_journal_is_private),
        T(test_datadir_refuses_dir_writable_by_others),
        T(test_datadir_refuses_files_writable_by_others),
        T(test_datadir_refuses_symlinked_db),
        T(test_datadir_refuses_dir_owned_by_another_user),
    };
    return cmocka_run_group_tests_name("datadir", tests, NULL, NULL);
}
