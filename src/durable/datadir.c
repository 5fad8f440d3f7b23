/* SPDX-License-Identifier: MIT */
/*
 * datadir.c -- the journal's directory and files: private when made,
 * trusted only when owned by the running user and not writable by
 * anyone else (see datadir.h for the rules and why).
 *
 * DESIGN
 *   The checks use the effective uid, as the kernel does for access.  A
 *   directory is checked after mkdir -p (so a directory someone else made
 *   first, in a race with us, is refused too); the database, its WAL and
 *   the lock file are checked before SQLite opens them, and the lock file
 *   once more through its descriptor (fstat), which cannot be swapped
 *   under us.  Files are created with O_EXCL | O_NOFOLLOW, so a planted
 *   symbolic link is never followed into creating or truncating
 *   something else.  Nothing here is ever chmod-ed or chown-ed: a path
 *   that fails the rules is reported, and the user decides.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "datadir.h"

char *seda__datadir_join(const char *dir, const char *name)
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

/* " (name)" for uid, or "" when it has no name. */
static void user_name(uid_t uid, char *out, size_t outlen)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    out[0] = '\0';
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(out, outlen, " (%s)", res->pw_name);
}

int seda__datadir_check(const char *path, const struct stat *sb, char *err,
                        size_t errlen)
{
    struct stat own;
    if (!sb) {
        if (lstat(path, &own) != 0)
            return errno == ENOENT ? 0 : -errno;
        sb = &own;
        if (S_ISLNK(sb->st_mode)) {
            if (err && errlen)
                snprintf(err, errlen, "%s: a symbolic link: not trusted "
                         "(the journal's files must be plain files)", path);
            return -EPERM;
        }
    }
    uid_t me = geteuid();
    if (sb->st_uid != me) {
        if (err && errlen) {
            char who[96], mine[96];
            user_name(sb->st_uid, who, sizeof who);
            user_name(me, mine, sizeof mine);
            snprintf(err, errlen, "%s: owned by uid %lu%s, not by this "
                     "process (uid %lu%s): not trusted (a journal is "
                     "replayed as if published here; use a data_dir of "
                     "your own)", path, (unsigned long)sb->st_uid, who,
                     (unsigned long)me, mine);
        }
        return -EPERM;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        if (err && errlen)
            snprintf(err, errlen, "%s: writable by group or others (mode "
                     "%04o): not trusted (chmod go-w %s)", path,
                     (unsigned)(sb->st_mode & 07777), path);
        return -EPERM;
    }
    return 0;
}

int seda__datadir_prepare(const char *dir, char *err, size_t errlen)
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
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            e = errno;
        *c = saved;
        if (e || saved == '\0')
            break;
    }
    seda__free(p);
    struct stat sb;
    if (!e && stat(dir, &sb) != 0)
        e = errno;
    else if (!e && !S_ISDIR(sb.st_mode))
        e = ENOTDIR;
    if (e) {
        if (err && errlen)
            snprintf(err, errlen, "%s: not writable: %s", dir, strerror(e));
        return -e;
    }
    return seda__datadir_check(dir, &sb, err, errlen);
}

int seda__datadir_touch(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (errno == EEXIST)
        return 0;               /* checked by seda__datadir_check */
    int e = errno;
    if (err && errlen)
        snprintf(err, errlen, "%s: not writable: %s", path, strerror(e));
    return -e;
}
