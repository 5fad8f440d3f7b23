/* SPDX-License-Identifier: MIT */
/*
 * dir_fixture.h -- the durable tests' temporary directories: each test
 * works in a fresh mkdtemp directory under /tmp, removed with everything
 * in it at teardown (test_journal.c, test_datadir.c, test_durable.c).
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

#endif /* SEDA_DIR_FIXTURE_H */
