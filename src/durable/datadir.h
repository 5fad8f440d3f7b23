/* SPDX-License-Identifier: MIT */
/*
 * datadir.h -- the journal's directory and files: made private, and
 * trusted only when they are the running user's own.
 *
 * A journal holds payloads (often personal data) and, on restart, is
 * replayed into handlers as if just published.  So whoever can write the
 * directory or the files in it can make this process handle messages it
 * never accepted, and whoever can read them can read every payload.  The
 * rules (datadir.c):
 *
 *   - what this process creates is private: directories 0700, files 0600
 *     (the WAL takes the database file's mode: SQLite copies it);
 *   - an existing data directory, database, WAL or lock file is trusted
 *     only if it is owned by the process's effective uid and is not
 *     writable by group or others; otherwise opening fails with -EPERM
 *     and a message naming the path, its owner or mode, and the fix.
 *
 * Root gets no exception: a directory another user prepared is refused
 * by root too (root could read it, but replaying it would act on that
 * user's behalf).
 */
#ifndef SEDA_DATADIR_H
#define SEDA_DATADIR_H

#include <stddef.h>
#include <sys/stat.h>

#include "core/seda_int.h"

/* mkdir -p dir (new directories 0700), then check that dir is a directory
 * the process may trust (see above).  Returns 0, or a negative errno with
 * err naming the path:
 *   -EPERM   "DIR: owned by uid N, not by this process (uid M): not
 *            trusted (...)" or "DIR: writable by group or others (mode
 *            0777): not trusted (chmod go-w DIR)"
 *   -ENOTDIR, -EACCES, ...  "PATH: not writable: <strerror>"
 *   -ENOMEM
 * Any thread. */
SEDA__API int seda__datadir_prepare(const char *dir, char *err,
                                    size_t errlen);

/* Check the file at path, if it exists, as the rules above say (sb:
 * what stat said, or NULL to lstat path here, when a symbolic link is
 * refused too).  A missing file passes.  Returns 0, -EPERM (err says
 * why, as above), or another negative errno from lstat.  Any thread. */
SEDA__API int seda__datadir_check(const char *path, const struct stat *sb,
                                  char *err, size_t errlen);

/* Create path as an empty private file (0600) if it does not exist yet,
 * without following a symbolic link there.  Returns 0 (made, or already
 * there) or a negative errno with err set.  Any thread. */
SEDA__API int seda__datadir_touch(const char *path, char *err,
                                  size_t errlen);

/* dir + "/" + name, malloc'd (seda__free), or NULL. */
SEDA__API char *seda__datadir_join(const char *dir, const char *name);

#endif /* SEDA_DATADIR_H */
