/* SPDX-License-Identifier: MIT */
/*
 * durable_group.c -- durable_group: 1, 8 and 64 Lua handlers (2 workers)
 * each publishing into a durable stage, sync "normal" and "full", beside
 * SQLite's own figures for the same rows in the same run.
 *
 * DESIGN
 *   - A fresh bus per trial (seda.bus{data_dir = DIR, sync = S,
 *     workers = 2}, DIR a fresh mkdtemp directory under /tmp): stage
 *     "bench" (in memory, capacity 1024, policy block, concurrency P =
 *     publishers) whose Lua handler publishes its payload into stage "d"
 *     (durable at_least_once, capacity 1M, concurrency 2, a handler that
 *     acks).  The producer is the calling (main) thread, publishing into
 *     "bench" unpaced in C for the window (2 s; --quick 0.3 s); then the
 *     bus is waited idle and shut down (60 s each).  Each handler's seda.publish waits for its
 *     group commit suspended (the worker runs the other handlers
 *     meanwhile), so with P handlers up to P publishes share a commit.
 *   - throughput_eps: envelopes delivered at "d" (each one a publish that
 *     returned true) / elapsed, the drain tail inside the clock.
 *   - publish_p50_us/p99_us: seda.now() around each handler's
 *     seda.publish (the recorder, benchrec.rec_ts), i.e. the wait for its
 *     commit.
 *   - fsyncs_per_s, group_mean: the journal's figures
 *     (seda_bus_journal_stats) over the trial; group_mean counts every
 *     write request of a commit ("d"'s drain decisions too), and
 *     publishes_per_commit the publishes alone (publishes / commits).
 *   - The reference rows ("reference": "sqlite"): a C loop on a fresh
 *     database with the journal's schema and pragmas (1 KiB pages, WAL,
 *     exclusive locking, synchronous FULL or NORMAL, autocheckpoint 4096)
 *     inserting the same rows (an 8-byte payload, a stage name, an id)
 *     for the window, one row per transaction and 64 per transaction:
 *     what the disk allows with and without grouping.  (The journal
 *     writes through a VFS shim that gathers a transaction's WAL frames
 *     into one write; the reference uses SQLite's default VFS.)
 */
#include <ftw.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "families.h"
#include "harness.h"

static const int PUBLISHERS[] = { 1, 8, 64 };

/* %s: data_dir, %s: sync.  Receives (seda, hfile, n, cap, conc). */
static const char GROUP_CHUNK[] =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{data_dir = '%s', sync = '%s', workers = 2}\n"
    "bus:stage{name = 'bench', capacity = cap, policy = 'block',\n"
    "          concurrency = conc, publish_timeout = 30, handler = hfile}\n"
    "bus:stage{name = 'd', durable = 'at_least_once', capacity = 1048576,\n"
    "          concurrency = 2, handler = function(env) end}\n"
    "return bus\n";

static const char GROUP_HANDLER[] =
    "local rec = require 'benchrec'.rec_ts\n"
    "local seda = require 'seda'\n"
    "local now, publish = seda.now, seda.publish\n"
    "return function(env)\n"
    "  local t0 = now()\n"
    "  local ok, err = publish('d', env.payload)\n"
    "  rec(t0)\n"
    "  if not ok then error('publish into d: ' .. tostring(err)) end\n"
    "end\n";

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static double window_s(void)
{
    return g_cfg.quick ? 0.3 : 2.0;
}

static void group_trial(const char *hfile, bool full, int pubs, int trial)
{
    const char *sync = full ? "full" : "normal";
    char dtmpl[] = "/tmp/seda-bench-grp-XXXXXX";
    char *dir = mkdtemp(dtmpl);
    if (!dir) {
        fprintf(stderr, "bench: mkdtemp failed\n");
        return;
    }
    char chunk[1024];
    snprintf(chunk, sizeof chunk, GROUP_CHUNK, dir, sync);
    rec_reset();
    struct inst in;
    if (inst_open(&in, true, chunk, hfile, 2, 1024, pubs, NULL) != 0) {
        rm_tree(dir);
        return;
    }
    seda_stage_t *src = in.st[0], *d = in.st[1];
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.timeout = 30;
    double start = seda_now() + 0.01, deadline = start + window_s();
    long total = 0, errors = 0;
    int last_err = 0;
    bench_sleep_until(start);
    for (double now = seda_now(); now < deadline; now = seda_now()) {
        int rc = seda_stage_publish(src, &now, sizeof now, &o);
        if (rc) {
            errors++;
            last_err = rc;
            break;
        }
        total++;
    }
    int depth = inst_depth(&in);
    double end = seda_now();
    /* Idle first: a handler still queued at shutdown would find "d"
     * closed. */
    int rc = seda_bus_wait_idle(in.bus, 60);
    if (rc == 0)
        rc = inst_shutdown(&in, 60);
    double done = seda_now();
    double elapsed = done - start;
    seda_stage_stats ds;
    seda_stage_stats_get(d, &ds);
    seda_journal_stats js;
    seda_bus_journal_stats(in.bus, &js);
    seda_bus_stats bs;
    seda_bus_stats_get(in.bus, &bs);
    int workers = seda_bus_workers(in.bus);
    inst_close(&in);
    struct latency lat;
    rec_latency(&lat);
    double thr = elapsed > 0 ? (double)ds.delivered / elapsed : 0;
    struct row w;
    row_begin(&w, "lua", "durable_group");
    row_str(&w, "sync", sync);
    row_int(&w, "trial", trial);
    row_int(&w, "publishers", pubs);
    row_int(&w, "producers", 1);
    row_int(&w, "total", total);
    row_int(&w, "delivered", (long long)ds.delivered);
    row_num(&w, "elapsed_ms", elapsed * 1e3, 0);
    row_num(&w, "throughput_eps", thr, 0);
    row_num(&w, "publish_p50_us", lat.p50, 2);
    row_num(&w, "publish_p99_us", lat.p99, 2);
    row_num(&w, "publish_p999_us", lat.p999, 2);
    row_num(&w, "publish_max_us", lat.max, 2);
    row_int(&w, "publish_samples", (long long)lat.n);
    row_num(&w, "fsyncs_per_s",
            elapsed > 0 ? (double)js.fsyncs / elapsed : 0, 0);
    row_num(&w, "group_mean",
            js.commits ? (double)js.requests / (double)js.commits : 0, 2);
    row_num(&w, "publishes_per_commit",
            js.commits ? (double)ds.delivered / (double)js.commits : 0, 2);
    row_int(&w, "group_max", (long long)js.group_max);
    row_int(&w, "commits", (long long)js.commits);
    row_int(&w, "fsyncs", (long long)js.fsyncs);
    row_bool(&w, "drained", rc == 0);
    row_str(&w, "durable", "at_least_once");
    row_int(&w, "capacity", 1024);
    row_int(&w, "concurrency", pubs);
    row_int(&w, "workers", workers);
    row_num(&w, "window_ms", window_s() * 1e3, 0);
    row_int(&w, "end_of_window_depth", depth);
    row_num(&w, "drain_tail_ms", (done - end) * 1e3, 0);
    row_int(&w, "loans_peak", bs.loans_peak);
    row_str(&w, "latency", "array");
    row_str(&w, "latency_of", "publish");
    if ((long long)ds.delivered != total)
        row_int(&w, "lost", total - (long long)ds.delivered);
    if (errors) {
        row_int(&w, "publish_errors", errors);
        row_str(&w, "publish_error", seda_strerror(last_err));
    }
    row_end(&w);
    bench_progress("durable_group/%s publishers %d trial %d: %.0f/s, "
                   "publish p99 %.0f us, %.0f fsyncs/s, %.1f publishes a "
                   "commit%s", sync, pubs, trial, thr, lat.p99,
                   elapsed > 0 ? (double)js.fsyncs / elapsed : 0,
                   js.commits ? (double)ds.delivered / (double)js.commits
                              : 0, rc == 0 ? "" : ", NOT DRAINED");
    rm_tree(dir);
}

/* ---- SQLite alone ---- */

static const char REF_SCHEMA[] =
    "CREATE TABLE envelopes("
    " key INTEGER PRIMARY KEY, stage TEXT NOT NULL,"
    " id TEXT NOT NULL, attempts INTEGER, sender TEXT, headers BLOB,"
    " slip BLOB, kind INTEGER, payload BLOB, published_at REAL,"
    " published_wall REAL, done_at REAL, due_wall REAL);";

static void sqlite_ref(bool full, int per_txn)
{
    const char *sync = full ? "full" : "normal";
    char dtmpl[] = "/tmp/seda-bench-sql-XXXXXX";
    char *dir = mkdtemp(dtmpl);
    if (!dir)
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/ref.db", dir);
    sqlite3 *db = NULL;
    sqlite3_stmt *ins = NULL, *begin = NULL, *commit = NULL;
    char pragmas[256];
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA locking_mode=EXCLUSIVE; PRAGMA page_size=1024;"
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s;"
             "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-16384;"
             "PRAGMA wal_autocheckpoint=4096;", full ? "FULL" : "NORMAL");
    long rows = 0, txns = 0;
    double elapsed = 0;
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db, pragmas, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_exec(db, REF_SCHEMA, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO envelopes(key, stage, id, "
                           "attempts, kind, payload, published_at, "
                           "published_wall) VALUES(?1, 'd', ?2, 1, 0, ?3, "
                           "?4, ?4)", -1, &ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "BEGIN IMMEDIATE", -1, &begin, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(db, "COMMIT", -1, &commit, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench: sqlite reference: %s\n",
                db ? sqlite3_errmsg(db) : "cannot open");
        goto out;
    }
    double start = seda_now(), deadline = start + window_s(), now = start;
    bool ok = true;
    while (ok && (now = seda_now()) < deadline) {
        ok = sqlite3_step(begin) == SQLITE_DONE;
        sqlite3_reset(begin);
        for (int i = 0; ok && i < per_txn; i++) {
            char id[32];
            snprintf(id, sizeof id, "%ld", rows + 1);
            sqlite3_bind_int64(ins, 1, rows + 1);
            sqlite3_bind_text(ins, 2, id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_blob(ins, 3, &now, sizeof now, SQLITE_TRANSIENT);
            sqlite3_bind_double(ins, 4, now);
            ok = sqlite3_step(ins) == SQLITE_DONE;
            sqlite3_reset(ins);
            rows += ok;
        }
        ok = ok && sqlite3_step(commit) == SQLITE_DONE;
        sqlite3_reset(commit);
        txns += ok;
    }
    elapsed = seda_now() - start;
    if (!ok)
        fprintf(stderr, "bench: sqlite reference: %s\n", sqlite3_errmsg(db));
    struct row w;
    row_begin(&w, "c", "durable_group");
    row_str(&w, "reference", "sqlite");
    row_str(&w, "sync", sync);
    row_int(&w, "rows_per_txn", per_txn);
    row_int(&w, "total", rows);
    row_int(&w, "transactions", txns);
    row_num(&w, "elapsed_ms", elapsed * 1e3, 0);
    row_num(&w, "throughput_eps", elapsed > 0 ? (double)rows / elapsed : 0,
            0);
    row_num(&w, "txns_per_s", elapsed > 0 ? (double)txns / elapsed : 0, 0);
    row_str(&w, "sqlite_version", sqlite3_libversion());
    row_end(&w);
    bench_progress("durable_group/sqlite %s, %d rows a transaction: %.0f "
                   "rows/s", sync, per_txn,
                   elapsed > 0 ? (double)rows / elapsed : 0);
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_close(db);
    rm_tree(dir);
}

void bench_durable_group(void)
{
    char *hfile = bench_write_file("h_dgroup.lua", GROUP_HANDLER);
    if (!hfile)
        return;
    int trials = g_cfg.quick ? 1 : 2;
    for (int s = 0; s < 2; s++) {
        bool full = s == 1;
        for (int k = 0; k < 2; k++)
            sqlite_ref(full, k ? 64 : 1);
        for (size_t p = 0; p < sizeof PUBLISHERS / sizeof *PUBLISHERS; p++)
            for (int t = 0; t < trials; t++) {
                bench_progress("durable_group/lua sync=%s publishers %d "
                               "trial %d/%d", full ? "full" : "normal",
                               PUBLISHERS[p], t + 1, trials);
                group_trial(hfile, full, PUBLISHERS[p], t + 1);
            }
    }
    free(hfile);
}
