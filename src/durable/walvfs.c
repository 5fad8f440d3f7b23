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
 * DISCARDED FRAMES
 *   When SQLite opens a WAL after a crash it keeps the frames up to the
 *   last commit frame whose checksum chain is intact, and drops the rest
 *   without a word: a damaged header drops the whole log, a damaged
 *   frame drops it and everything after it.  That is where journaled
 *   envelopes would vanish silently, so on opening a WAL the shim reads
 *   it once, the way SQLite's recovery does (the header's magic,
 *   version, page size and checksum; per frame the salt, a non-zero
 *   page number and the running checksum), and counts what recovery
 *   will drop: the frames of the current log (those carrying the
 *   header's salt) after the last valid commit, a cut-short last frame
 *   included; with a damaged header, every byte of the file.  Frames of
 *   an older log (another salt: already checkpointed) are not counted.
 *   seda__walvfs_discarded() hands the figures and the cause to the
 *   journal, which reports them.
 *
 * THREADS: the VFS is registered once (pthread_once); a file object is
 *   used by one connection, which SQLite never enters from two threads at
 *   once here (the journal's leader owns it).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "journal.h"

/* Bytes buffered before a forced flush.  The unix VFS writes at most
 * 128 KiB - 1 per call (seekAndWriteFd masks the count with 0x1ffff). */
#define WAL_BUF (64 * 1024)
#define FRAME_HDR 24              /* WAL frame header size */
#define WAL_HDR 32                /* WAL header size */
#define WAL_MAGIC 0x377f0682      /* | 1: big-endian checksums */
#define WAL_VERSION 3007000

struct wfile {
    sqlite3_file base;            /* our methods */
    unsigned char *buf;           /* WAL only: the run, NULL otherwise */
    sqlite3_int64 off;            /* file offset of buf[0] */
    int len;                      /* bytes in buf */
    bool commit;                  /* a commit frame's header was seen */
    struct seda_wal_discard lost; /* WAL only: what recovery drops */
    sqlite3_file *real;           /* the real file, right after us */
};

static const sqlite3_io_methods g_methods;
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

/* fsyncs of this thread (seda__walvfs_thread_syncs). */
static _Thread_local uint64_t t_syncs;

uint64_t seda__walvfs_thread_syncs(void)
{
    return t_syncs;
}

static int w_sync(sqlite3_file *p, int flags)
{
    struct wfile *f = (struct wfile *)p;
    int rc = flush(f);
    if (rc != SQLITE_OK)
        return rc;
    t_syncs++;
    return f->real->pMethods->xSync(f->real, flags);
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

/* ---- what recovery will discard ---- */

/* SQLite's WAL checksum: 32-bit words, big-endian when big, summed in
 * pairs into s[0], s[1] (n is a multiple of 8). */
static void wal_cksum(bool big, const unsigned char *p, size_t n,
                      uint32_t s[2])
{
    uint32_t s1 = s[0], s2 = s[1];
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint32_t x0 = big ? get4(p + i)
                          : (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 |
                            (uint32_t)p[i + 2] << 16 |
                            (uint32_t)p[i + 3] << 24;
        uint32_t x1 = big ? get4(p + i + 4)
                          : (uint32_t)p[i + 4] | (uint32_t)p[i + 5] << 8 |
                            (uint32_t)p[i + 6] << 16 |
                            (uint32_t)p[i + 7] << 24;
        s1 += x0 + s2;
        s2 += x1 + s1;
    }
    s[0] = s1;
    s[1] = s2;
}

static bool page_size_ok(uint32_t ps)
{
    return ps >= 512 && ps <= 65536 && (ps & (ps - 1)) == 0;
}

/* The page size of the database whose WAL is wal_path ("<db>-wal"), from
 * its header, or 0. */
static uint32_t db_page_size(const char *wal_path)
{
    size_t n = strlen(wal_path);
    if (n < 5 || strcmp(wal_path + n - 4, "-wal") != 0)
        return 0;
    char *db = malloc(n - 3);
    if (!db)
        return 0;
    memcpy(db, wal_path, n - 4);
    db[n - 4] = '\0';
    unsigned char h[2];
    int fd = open(db, O_RDONLY | O_CLOEXEC);
    free(db);
    if (fd < 0)
        return 0;
    ssize_t got = pread(fd, h, 2, 16);
    close(fd);
    if (got != 2)
        return 0;
    uint32_t ps = (uint32_t)h[0] << 8 | h[1];
    return ps == 1 ? 65536 : page_size_ok(ps) ? ps : 0;
}

/* Where a write killed midway stops: the kernel copies a write into the
 * page cache a page at a time and gives up between pages when the
 * writer has a fatal signal pending. */
#define KILL_CUT 4096

/* Read the WAL f (just opened; name is its path) as SQLite's recovery
 * will, and record in f->lost what it will discard.  A read error leaves
 * f->lost empty: recovery will meet the same error and fail loudly. */
static void scan_wal(struct wfile *f, const char *name)
{
    sqlite3_file *r = f->real;
    sqlite3_int64 size = 0;
    unsigned char hdr[WAL_HDR];
    if (r->pMethods->xFileSize(r, &size) != SQLITE_OK || size == 0)
        return;
    struct seda_wal_discard *d = &f->lost;
    if (size < WAL_HDR ||
        r->pMethods->xRead(r, hdr, WAL_HDR, 0) != SQLITE_OK) {
        d->bytes = size;
        snprintf(d->why, sizeof d->why, "a %lld-byte file, shorter than "
                 "the WAL header", (long long)size);
        return;
    }
    uint32_t magic = get4(hdr), ps = get4(hdr + 8);
    bool big = magic & 1;
    uint32_t ck[2] = { 0, 0 };
    wal_cksum(big, hdr, 24, ck);
    const char *bad = (magic & ~1u) != WAL_MAGIC ? "bad magic number"
                    : get4(hdr + 4) != WAL_VERSION ? "unknown version"
                    : !page_size_ok(ps) ? "bad page size"
                    : ck[0] != get4(hdr + 24) || ck[1] != get4(hdr + 28)
                        ? "header checksum mismatch" : NULL;
    if (bad) {
        uint32_t dps = db_page_size(name);
        d->bytes = size;
        d->frames = dps ? (size - WAL_HDR + dps + FRAME_HDR - 1) /
                              (dps + FRAME_HDR) : 0;
        snprintf(d->why, sizeof d->why, "the WAL header is damaged (%s): "
                 "the whole log is ignored", bad);
        return;
    }
    sqlite3_int64 fsz = (sqlite3_int64)ps + FRAME_HDR;
    unsigned char *fr = malloc((size_t)fsz);
    if (!fr)
        return;
    /* Walk the log: valid frames extend the chain; the first invalid one
     * ends it (why_at says why).  Past that, frames of this log (its
     * salt) are what recovery drops. */
    sqlite3_int64 nfull = (size - WAL_HDR) / fsz, commit = 0, last_own = 0;
    sqlite3_int64 i = 0, broken = 0;
    const char *why_at = NULL;
    for (; i < nfull; i++) {
        if (r->pMethods->xRead(r, fr, (int)fsz, WAL_HDR + i * fsz) !=
            SQLITE_OK)
            break;
        bool own = memcmp(fr + 8, hdr + 16, 8) == 0;
        if (own)
            last_own = i + 1;
        if (why_at)
            continue;
        if (!own) {
            why_at = "";                /* an older log: a clean end */
        } else if (get4(fr) == 0) {
            why_at = "a frame with page number 0";
        } else {
            wal_cksum(big, fr, 8, ck);
            wal_cksum(big, fr + FRAME_HDR, (size_t)ps, ck);
            if (ck[0] != get4(fr + 16) || ck[1] != get4(fr + 20))
                why_at = "checksum mismatch";
            else if (get4(fr + 4) != 0)
                commit = i + 1;         /* a commit frame */
        }
        if (why_at)
            broken = i + 1;
    }
    sqlite3_int64 tail = size - WAL_HDR - nfull * fsz;
    bool tail_own = false;
    if (i == nfull && tail >= 16 &&
        r->pMethods->xRead(r, fr, 16, WAL_HDR + nfull * fsz) == SQLITE_OK)
        tail_own = memcmp(fr + 8, hdr + 16, 8) == 0;
    free(fr);
    if (tail_own || (tail > 0 && last_own == nfull && nfull > commit)) {
        last_own = nfull + 1;           /* a cut-short last frame */
    }
    if (last_own <= commit)
        return;                         /* nothing of this log dropped */
    if ((!why_at || !*why_at) && size % KILL_CUT == 0) {
        /* The log ends, with no damaged frame, inside a transaction that
         * never committed, at a page-cache boundary: a write (this VFS
         * writes a transaction in one) cut short by the process's death
         * (the kernel stops a killed writer's write between pages).
         * Nothing acknowledged was journaled there: not a loss.  (A log
         * damaged by truncation to such a size looks the same.) */
        return;
    }
    d->frames = last_own - commit;
    sqlite3_int64 end = WAL_HDR + last_own * fsz;
    d->bytes = (end < size ? end : size) - (WAL_HDR + commit * fsz);
    if (why_at && *why_at)
        snprintf(d->why, sizeof d->why, "%s at frame %lld, after the last "
                 "valid commit (frame %lld)", why_at, (long long)broken,
                 (long long)commit);
    else if (last_own > nfull)
        snprintf(d->why, sizeof d->why, "the log is cut short in frame "
                 "%lld, after the last valid commit (frame %lld)",
                 (long long)last_own, (long long)commit);
    else
        snprintf(d->why, sizeof d->why, "frames after the last commit "
                 "(frame %lld) were never committed (a transaction cut "
                 "short)", (long long)commit);
}

int seda__walvfs_discarded(sqlite3 *db, struct seda_wal_discard *out)
{
    memset(out, 0, sizeof *out);
    sqlite3_file *wal = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
                             &wal) != SQLITE_OK || !wal ||
        wal->pMethods != &g_methods)
        return -1;
    *out = ((struct wfile *)wal)->lost;
    return 0;
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
    if (f->buf && name)
        scan_wal(f, name);
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
