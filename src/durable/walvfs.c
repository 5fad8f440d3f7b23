/* SPDX-License-Identifier: MIT */
/*
 * walvfs.c -- an SQLite VFS that writes each WAL transaction with one
 * system call: a shim over the default (unix) VFS that buffers the
 * write-ahead log's sequential writes and issues them together.
 *
 * WHY
 *   SQLite appends a transaction to the WAL one frame at a time, and each
 *   frame is two writes (24-byte header, then the page).  A one-envelope
 *   commit is a few frames, and on a virtual machine a write system call
 *   costs about 1.5 us -- most of what the commit costs.  Gathering the
 *   frames and writing them at once makes a small commit one pwrite.
 *
 * HOW IT WORKS
 *   Only files opened as a WAL (SQLITE_OPEN_WAL) are buffered; every
 *   other file, and every other method, goes straight to the real VFS.
 *   A write that continues the buffered run (offset == end of the run)
 *   and fits is appended; anything else first flushes the run.  The
 *   frame header of a transaction's last frame says so (bytes 4..7, the
 *   database size after the commit, are nonzero only there), so the
 *   shim flushes right after that frame's page arrives, INSIDE SQLite's
 *   write call: a failed flush (disk full) is the commit's failure, and
 *   SQLite rolls back exactly as it would have without the shim.  Until
 *   the next transaction's first write, every write is flushed at once
 *   (padding frames, a page written in two parts around a sync point).
 *   Reads, syncs, truncation, size queries, locks and close flush first,
 *   so SQLite never sees the file without what it wrote.
 *
 *   Durability is unchanged: a commit returns only after its frames are
 *   in the operating system (synchronous=NORMAL) or on disk (FULL; the
 *   sync flushes first).  A write error leaves the run dropped, as a
 *   failed write would have left those bytes unwritten.
 *
 * THREADS: the VFS is registered once (pthread_once); a file object is
 *   used by one connection, which SQLite never enters from two threads at
 *   once here (the journal's leader owns it).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "journal.h"

/* Bytes buffered before a forced flush.  The unix VFS writes at most
 * 128 KiB - 1 per call (seekAndWriteFd masks the count with 0x1ffff). */
#define WAL_BUF (64 * 1024)
#define FRAME_HDR 24              /* WAL frame header size */

struct wfile {
    sqlite3_file base;            /* our methods */
    unsigned char *buf;           /* WAL only: the run, NULL otherwise */
    sqlite3_int64 off;            /* file offset of buf[0] */
    int len;                      /* bytes in buf */
    bool commit;                  /* a commit frame's header was seen */
    sqlite3_file *real;           /* the real file, right after us */
};

static sqlite3_vfs g_vfs;
static sqlite3_vfs *g_real;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_rc = SQLITE_ERROR;

static int flush(struct wfile *f)
{
    if (f->len == 0)
        return SQLITE_OK;
    int rc = f->real->pMethods->xWrite(f->real, f->buf, f->len, f->off);
    f->len = 0;
    return rc;
}

static int w_close(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    int crc = f->real->pMethods ? f->real->pMethods->xClose(f->real)
                                : SQLITE_OK;
    free(f->buf);
    f->buf = NULL;
    return rc != SQLITE_OK ? rc : crc;
}

static int w_read(sqlite3_file *p, void *b, int n, sqlite3_int64 off)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xRead(f->real, b, n, off);
}

static uint32_t get4(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static int w_write(sqlite3_file *p, const void *b, int n, sqlite3_int64 off)
{
    struct wfile *f = (struct wfile *)p;
    if (!f->buf)
        return f->real->pMethods->xWrite(f->real, b, n, off);
    /* A frame header starts a frame: after a commit frame, the next
     * transaction's first one ends the flush-every-write spell. */
    bool hdr = n == FRAME_HDR;
    if (hdr || off == 0)
        f->commit = false;
    if (f->len > 0 && (off != f->off + f->len || f->len + n > WAL_BUF)) {
        int rc = flush(f);
        if (rc != SQLITE_OK)
            return rc;
    }
    if (n > WAL_BUF)
        return f->real->pMethods->xWrite(f->real, b, n, off);
    if (f->len == 0)
        f->off = off;
    memcpy(f->buf + f->len, b, (size_t)n);
    f->len += n;
    if (hdr && get4((const unsigned char *)b + 4) != 0) {
        f->commit = true;       /* its page is next: flush after it */
        return SQLITE_OK;
    }
    return f->commit ? flush(f) : SQLITE_OK;
}

static int w_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xTruncate(f->real, size);
}

static int w_sync(sqlite3_file *p, int flags)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xSync(f->real, flags);
}

static int w_size(sqlite3_file *p, sqlite3_int64 *size)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xFileSize(f->real, size);
}

static int w_lock(sqlite3_file *p, int l)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xLock(f->real, l);
}

static int w_unlock(sqlite3_file *p, int l)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc : f->real->pMethods->xUnlock(f->real, l);
}

static int w_reserved(sqlite3_file *p, int *out)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int w_fcntl(sqlite3_file *p, int op, void *arg)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc
                           : f->real->pMethods->xFileControl(f->real, op, arg);
}

static int w_sector(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xSectorSize(f->real);
}

static int w_devchar(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int w_shmmap(sqlite3_file *p, int pg, int sz, int ext,
                    void volatile **out)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xShmMap(f->real, pg, sz, ext, out);
}

static int w_shmlock(sqlite3_file *p, int off, int n, int flags)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xShmLock(f->real, off, n, flags);
}

static void w_shmbarrier(sqlite3_file *p)
{
    struct wfile *f = (struct wfile *)p;
    f->real->pMethods->xShmBarrier(f->real);
}

static int w_shmunmap(sqlite3_file *p, int del)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xShmUnmap(f->real, del);
}

static int w_fetch(sqlite3_file *p, sqlite3_int64 off, int n, void **out)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    return rc != SQLITE_OK ? rc
                           : f->real->pMethods->xFetch(f->real, off, n, out);
}

static int w_unfetch(sqlite3_file *p, sqlite3_int64 off, void *pg)
{
    struct wfile *f = (struct wfile *)p;
    return f->real->pMethods->xUnfetch(f->real, off, pg);
}

static const sqlite3_io_methods g_methods = {
    3, w_close, w_read, w_write, w_truncate, w_sync, w_size, w_lock,
    w_unlock, w_reserved, w_fcntl, w_sector, w_devchar, w_shmmap,
    w_shmlock, w_shmbarrier, w_shmunmap, w_fetch, w_unfetch,
};

static int w_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *p,
                  int flags, int *out_flags)
{
    (void)vfs;
    struct wfile *f = (struct wfile *)p;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)(f + 1);
    if (flags & SQLITE_OPEN_WAL) {
        f->buf = malloc(WAL_BUF);
        if (!f->buf)
            return SQLITE_NOMEM;
    }
    int rc = g_real->xOpen(g_real, name, f->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        free(f->buf);
        f->buf = NULL;
        return rc;              /* p->pMethods stays NULL: no xClose */
    }
    f->base.pMethods = &g_methods;
    return SQLITE_OK;
}

static void register_once(void)
{
    g_real = sqlite3_vfs_find(NULL);
    if (!g_real)
        return;
    g_vfs = *g_real;
    g_vfs.iVersion = g_real->iVersion < 3 ? g_real->iVersion : 3;
    g_vfs.szOsFile = (int)sizeof(struct wfile) + g_real->szOsFile;
    g_vfs.zName = SEDA_JOURNAL_VFS;
    g_vfs.pNext = NULL;
    g_vfs.xOpen = w_open;
    g_rc = sqlite3_vfs_register(&g_vfs, 0);
}

int seda__walvfs_register(void)
{
    pthread_once(&g_once, register_once);
    return g_rc;
}
