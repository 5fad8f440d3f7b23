/* SPDX-License-Identifier: MIT */
/*
 * durable.c -- durable stages: durable1, durable_batch,
 * durable_pipeline, each with sync "normal" and sync "full".
 *
 * DESIGN
 *   - A fresh bus per trial, made from Lua on a fresh main lua_State
 *     (seda.bus{data_dir = DIR, sync = S}) so that handlers are Lua; DIR
 *     is a fresh mkdtemp directory under /tmp, removed after the trial.
 *     The producer is the calling (main) thread, publishing in C on the
 *     core bus behind the Lua one (seda_lua_tobus).
 *   - durable1: stage "bench" (durable = "at_least_once", capacity 1024,
 *     policy block, concurrency 1), one seda_stage_publish per envelope.
 *     durable_batch: the same stage, seda_publish_many in batches of 100
 *     (one journal commit per call).  The handler is the recorder of the
 *     other Lua rows (benchrec.rec(env.payload)); the payload is the
 *     8-byte double timestamp, written just before the call (a batch's
 *     envelopes all carry the time its call began).
 *   - durable_pipeline: stages d1..d4, all durable, the slip {d2, d3, d4};
 *     the producer feeds d1 with seda_publish_many in batches of 100; the
 *     Lua handler reads env.payload and acks; a C done callback counts
 *     completions and records the itinerary latency from the envelope's
 *     publish time.  d1 holds 65536, d2..d4 1M (2 CPUs run 4 stages: a hop
 *     must never wait for room while the worker that would make it is
 *     itself waiting).
 *   - Window: the producer publishes unpaced until the window ends (2 s;
 *     --quick 0.3 s); then shutdown (60 s) drains.  elapsed is from the
 *     first publish to shutdown reporting drained, so the drain tail is
 *     inside the clock; throughput = delivered (pipeline: completed
 *     itineraries) / elapsed.
 *   - Publish latency: seda_now() around each publish call, one sample per
 *     call (per batch for publish_many), kept in an array; nearest rank.
 *     End-to-end latency: the recorder arrays (bench.c).
 *   - After the bus is freed the journal is opened read-only and its rows
 *     counted (journal_rows_left): after a drained shutdown every
 *     itinerary has ended, so anything left would be replayed by the next
 *     process -- a runtime bug.
 */
#include <ftw.h>
#include <math.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "families.h"
#include "harness.h"

#define DUR_BATCH 100
#define PUB_CAP ((size_t)32 << 20)   /* publish samples (128 MiB virtual) */

enum dkind { D_ONE, D_BATCH, D_PIPE };

static const char *const DUR_CONFIGS[] = {
    "durable1", "durable_batch", "durable_pipeline"
};

/* %s: data_dir, %s: sync.  Receives (seda, hfile, n, cap, conc). */
static const char DUR_CHUNK[] =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{data_dir = '%s', sync = '%s'}\n"
    "bus:stage{name = 'bench', capacity = cap, policy = 'block',\n"
    "          concurrency = conc, publish_timeout = 30, handler = hfile,\n"
    "          durable = 'at_least_once'}\n"
    "return bus\n";

static const char DPIPE_CHUNK[] =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{data_dir = '%s', sync = '%s'}\n"
    "for i = 1, 4 do\n"
    "  bus:stage{name = 'd' .. i, capacity = i == 1 and cap or 1048576,\n"
    "            policy = 'block', concurrency = conc, publish_timeout = 30,\n"
    "            handler = hfile, durable = 'at_least_once'}\n"
    "end\n"
    "return bus\n";

static atomic_long g_dp_done, g_dp_failed;

static void dpipe_done(seda_env_t *env, int outcome, void *ud)
{
    (void)ud;
    if (outcome != SEDA_COMPLETED) {
        atomic_fetch_add_explicit(&g_dp_failed, 1, memory_order_relaxed);
        return;
    }
    rec_add(seda_now() - seda_env_published_at(env));
    atomic_fetch_add_explicit(&g_dp_done, 1, memory_order_relaxed);
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0)
        fprintf(stderr, "bench: cannot remove %s\n", path);
    return 0;
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Rows left in DIR/seda.db's envelopes table; -1 if it cannot be read. */
static long journal_rows(const char *dir)
{
    char path[512];
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    long n = -1;
    snprintf(path, sizeof path, "%s/seda.db", dir);
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM envelopes", -1, &s,
                           NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        n = (long)sqlite3_column_int64(s, 0);
    else
        fprintf(stderr, "bench: journal %s: %s\n", path,
                db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_finalize(s);
    sqlite3_close(db);
    return n;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double rank(const float *v, size_t n, double p)
{
    return n ? v[(size_t)floor(p * (double)(n - 1))] : NAN;
}

struct dres {
    long total, delivered, hops, errors, failed;
    int last_err;
    double elapsed, window, drain_tail;
    int depth, workers;
    int batch, capacity;        /* envelopes per publish call; stage's */
    bool drained;
    long journal_left;
    uint64_t dead, dropped;
    size_t calls;
    double pub_p50, pub_p99, pub_p999, pub_max;
    struct latency lat;
};

/* The producer (this thread): publish for r->window seconds from start
 * into the first stage of in, r->batch envelopes a call, each call's time
 * in pub (up to PUB_CAP); stops at the first failed publish. */
static void dur_publish(struct inst *in, enum dkind kind, double start,
                        struct dres *r, float *pub)
{
    int B = r->batch;
    double bufs[DUR_BATCH];
    const void *ps[DUR_BATCH];
    size_t lens[DUR_BATCH];
    for (int i = 0; i < B; i++) {
        ps[i] = &bufs[i];
        lens[i] = sizeof bufs[i];
    }
    static const char *const slip[] = { "d2", "d3", "d4" };
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.timeout = 30;
    if (kind == D_PIPE) {
        o.slip = slip;
        o.nslip = 3;
        o.done = dpipe_done;
    }
    seda_stage_t *st = in->st[0];
    const char *to = seda_stage_name(st);
    double deadline = start + r->window;
    bench_sleep_until(start);
    for (;;) {
        double now = seda_now();
        if (now >= deadline)
            break;
        for (int i = 0; i < B; i++)
            bufs[i] = now;
        int got, err = 0;
        double t0 = seda_now();
        if (B == 1) {
            err = seda_stage_publish(st, &bufs[0], sizeof bufs[0], &o);
            got = err == 0;
        } else {
            got = seda_publish_many(in->bus, to, ps, lens, B, &o, &err);
        }
        double t1 = seda_now();
        if (r->calls < PUB_CAP)
            pub[r->calls] = (float)((t1 - t0) * 1e6);
        r->calls++;
        r->total += got;
        if (got < B) {
            r->errors += B - got;
            r->last_err = err;
            break;
        }
    }
}

/* After the window: shut the instance down (bounded), and take what it
 * delivered, its stats, the journal's leftover rows and the latencies
 * into r; in is closed.  end: when publishing ended. */
static void dur_finish(struct inst *in, enum dkind kind, const char *dir,
                       double start, double end, struct dres *r)
{
    r->depth = inst_depth(in);
    int rc = inst_shutdown(in, 60);
    double t_done = seda_now();
    r->drain_tail = t_done - end;
    r->drained = rc == 0;
    r->elapsed = t_done - start;
    r->hops = inst_delivered(in);
    r->delivered = kind == D_PIPE ? atomic_load(&g_dp_done) : r->hops;
    r->failed = atomic_load(&g_dp_failed);
    seda_bus_stats bs;
    seda_bus_stats_get(in->bus, &bs);
    r->dead = bs.dead_lettered;
    r->dropped = bs.dropped;
    inst_close(in);
    r->journal_left = journal_rows(dir);
    rec_latency(&r->lat);
}

/* The publish-time ranks of the first calls (pub, sorted here). */
static void dur_publish_ranks(float *pub, struct dres *r)
{
    size_t np = r->calls < PUB_CAP ? r->calls : PUB_CAP;
    qsort(pub, np, sizeof *pub, cmp_float);
    r->pub_p50 = rank(pub, np, 0.5);
    r->pub_p99 = rank(pub, np, 0.99);
    r->pub_p999 = rank(pub, np, 0.999);
    r->pub_max = np ? pub[np - 1] : NAN;
}

/* The trial's row, and its progress line. */
static void dur_row(enum dkind kind, const char *sync, int trial,
                    const struct dres *r)
{
    const char *config = DUR_CONFIGS[kind];
    double thr = r->elapsed > 0 ? (double)r->delivered / r->elapsed : 0;
    struct row w;
    row_begin(&w, "lua", config);
    row_str(&w, "sync", sync);
    row_int(&w, "trial", trial);
    row_int(&w, "producers", 1);
    row_int(&w, "total", r->total);
    row_int(&w, "delivered", r->delivered);
    row_num(&w, "elapsed_ms", r->elapsed * 1e3, 0);
    row_num(&w, "throughput_eps", thr, 0);
    row_num(&w, "publish_p50_us", r->pub_p50, 2);
    row_num(&w, "publish_p99_us", r->pub_p99, 2);
    row_latency(&w, &r->lat);
    row_bool(&w, "drained", r->drained);
    row_str(&w, "durable", "at_least_once");
    row_int(&w, "batch", r->batch);
    row_int(&w, "publish_calls", (long long)r->calls);
    row_num(&w, "publish_p999_us", r->pub_p999, 2);
    row_num(&w, "publish_max_us", r->pub_max, 2);
    row_int(&w, "capacity", r->capacity);
    row_int(&w, "concurrency", 1);
    row_num(&w, "window_ms", r->window * 1e3, 0);
    row_int(&w, "end_of_window_depth", r->depth);
    row_num(&w, "drain_tail_ms", r->drain_tail * 1e3, 0);
    row_int(&w, "workers", r->workers);
    row_str(&w, "latency", "array");
    if (kind == D_PIPE) {
        row_int(&w, "stages", 4);
        row_num(&w, "itineraries_per_s", thr, 0);
        row_num(&w, "handler_calls_per_s",
                r->elapsed > 0 ? (double)r->hops / r->elapsed : 0, 0);
        row_int(&w, "hops_delivered", r->hops);
        row_str(&w, "latency_from", "published_at");
        if (r->failed)
            row_int(&w, "not_completed", r->failed);
    }
    row_str(&w, "floor", "lua_call");
    double calls_s = r->elapsed > 0 ? (double)r->hops / r->elapsed : 0;
    row_num(&w, "floor_ratio",
            g_cfg.floor_lua > 0 ? calls_s / g_cfg.floor_lua : NAN, 4);
    row_int(&w, "journal_rows_left", r->journal_left);
    if (r->lat.n != (size_t)r->delivered)
        row_int(&w, "samples", (long long)r->lat.n);
    if (r->dead || r->dropped) {
        row_int(&w, "dead_lettered", (long long)r->dead);
        row_int(&w, "dropped", (long long)r->dropped);
    }
    if (r->delivered != r->total)
        row_int(&w, "lost", r->total - r->delivered);
    if (r->errors) {
        row_int(&w, "publish_errors", r->errors);
        row_str(&w, "publish_error", seda_strerror(r->last_err));
    }
    row_end(&w);
    bench_progress("%s/%s trial %d: %.0f/s, publish p99 %.0f us, "
                   "e2e p99 %.0f us%s", config, sync, trial, thr, r->pub_p99,
                   r->lat.p99, r->drained ? "" : ", NOT DRAINED");
}

static void dur_trial(enum dkind kind, const char *hfile, bool full,
                      int trial)
{
    const char *sync = full ? "full" : "normal";
    char dtmpl[] = "/tmp/seda-bench-dur-XXXXXX";
    char *dir = mkdtemp(dtmpl);
    char chunk[1024];
    struct inst in;
    struct dres r;
    float *pub = NULL;
    memset(&r, 0, sizeof r);
    r.journal_left = -1;
    if (!dir) {
        fprintf(stderr, "bench: mkdtemp failed\n");
        return;
    }
    snprintf(chunk, sizeof chunk, kind == D_PIPE ? DPIPE_CHUNK : DUR_CHUNK,
             dir, sync);
    atomic_store(&g_dp_done, 0);
    atomic_store(&g_dp_failed, 0);
    rec_reset();
    r.capacity = kind == D_PIPE ? 65536 : 1024;
    if (inst_open(&in, true, chunk, hfile, kind == D_PIPE ? 4 : 1,
                  r.capacity, 1, NULL) != 0)
        goto out_dir;
    pub = mmap(NULL, PUB_CAP * sizeof *pub, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pub == MAP_FAILED) {
        pub = NULL;
        inst_close(&in);
        goto out_dir;
    }
    r.workers = seda_bus_workers(in.bus);
    r.batch = kind == D_ONE ? 1 : DUR_BATCH;
    r.window = g_cfg.quick ? 0.3 : 2.0;
    double start = seda_now() + 0.01;
    dur_publish(&in, kind, start, &r, pub);
    dur_finish(&in, kind, dir, start, seda_now(), &r);
    dur_publish_ranks(pub, &r);
    dur_row(kind, sync, trial, &r);
    munmap(pub, PUB_CAP * sizeof *pub);
out_dir:
    rm_tree(dir);
}

void bench_durable(const char *config)
{
    enum dkind kind = D_ONE;
    for (int k = 0; k < 3; k++)
        if (strcmp(config, DUR_CONFIGS[k]) == 0)
            kind = (enum dkind)k;
    char *hfile = bench_write_file(
        kind == D_PIPE ? "h_dpipe.lua" : "h_dur.lua",
        kind == D_PIPE ? "return function(env) local p = env.payload end\n"
                       : "local rec = require 'benchrec'.rec\n"
                         "return function(env) rec(env.payload) end\n");
    if (!hfile)
        return;
    int trials = g_cfg.quick ? 1 : 2;
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < trials; t++) {
            bench_progress("%s/lua sync=%s trial %d/%d", config,
                           s ? "full" : "normal", t + 1, trials);
            dur_trial(kind, hfile, s == 1, t + 1);
        }
    free(hfile);
}
