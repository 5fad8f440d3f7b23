/* SPDX-License-Identifier: MIT */
/*
 * dir_fixture.h -- the durable tests' temporary directories: each test
 * works in a fresh mkdtemp directory under /tmp, removed with everything
 * in it at teardown (test_journal.c, test_datadir.c, test_durable.c,
 * test_walvfs.c).  A test's fixture struct begins with a struct dir_fx
 * and is made and freed by dir_fx_new and dir_fx_free.
 */
#ifndef SEDA_DIR_FIXTURE_H
#define SEDA_DIR_FIXTURE_H

#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int dir_rm_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Make /tmp/seda-TAG-XXXXXX into dir (n bytes); false on failure. */
static inline bool dir_make(char *dir, size_t n, const char *tag)
{
    snprintf(dir, n, "/tmp/seda-%s-XXXXXX", tag);
    return mkdtemp(dir) != NULL;
}

/* Remove dir and everything under it (symbolic links not followed). */
static inline void dir_remove(const char *dir)
{
    nftw(dir, dir_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The first member of a test's fixture: its directory and the path in it
 * the test works on. */
struct dir_fx {
    char dir[64];               /* mkdtemp result */
    char sub[96];               /* dir/NAME: the data directory or file */
};

/* A zeroed fixture of size bytes (a struct beginning with a struct
 * dir_fx) with a fresh directory /tmp/seda-TAG-XXXXXX and sub naming
 * dir/name; NULL when either cannot be made (nothing is left made). */
static inline void *dir_fx_new(size_t size, const char *tag,
                               const char *name)
{
    struct dir_fx *d = calloc(1, size);
    if (!d)
        return NULL;
    if (!dir_make(d->dir, sizeof d->dir, tag)) {
        free(d);
        return NULL;
    }
    snprintf(d->sub, sizeof d->sub, "%s/%s", d->dir, name);
    return d;
}

/* Remove the fixture's directory with everything in it, and free it. */
static inline void dir_fx_free(void *fx)
{
    struct dir_fx *d = fx;
    dir_remove(d->dir);
    free(d);
}

#endif /* SEDA_DIR_FIXTURE_H */
