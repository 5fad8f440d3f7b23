/* SPDX-License-Identifier: MIT */
/*
 * capacity.c -- the stage families of the reference workload (the
 * README's Benchmarks section): the capacity curve
 * (cap1, cap8, and our cap1_table), the firehose (seq, par, chan), and
 * reload (cap1 with bus:reload every 100 ms).  A fresh bus per trial
 * (inst.c); counts come from the bus; the latency sample count is a cross-
 * check, printed only when it differs.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "families.h"
#include "harness.h"
#include "seda_lua.h"

/* ---- one trial ---- */

struct trial {
    /* in */
    bool lua;
    const char *hfile;
    int producers, stages, capacity, concurrency;
    double window;              /* > 0: windowed; else limit */
    long total_limit;           /* firehose: envelopes over all producers */
    double rate;                /* over all producers; 0: unpaced */
    double tick;                /* pacing tick, s (0: 20 ms) */
    const unsigned char *tmpl;
    size_t len;
    int ts_off, kind;
    double reload_every;        /* > 0: bus:reload("bench") this often */
    double shed_target;         /* > 0: the stage sheds (overload) */
    seda_consumer_fn consumer;  /* C rows: instead of the default */
    /* out */
    long total, delivered, errors;
    int last_err;
    double elapsed;             /* s */
    double drain_tail;          /* s */
    int depth;
    bool drained;
    int reloads, reload_failed;
    long shed;                  /* publishes refused by shedding */
    double sojourn_p99;         /* the stage's, microseconds */
    int workers;                /* pool threads of the bus */
    struct latency lat;
};

/* Run bus:reload("bench") on the main state; true when it succeeded. */
static bool do_reload(lua_State *L)
{
    lua_getfield(L, -1, "reload");
    lua_pushvalue(L, -2);
    lua_pushliteral(L, "bench");
    if (lua_pcall(L, 2, 2, 0) != LUA_OK) {
        fprintf(stderr, "bench: reload: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        return false;
    }
    bool ok = lua_toboolean(L, -2);
    if (!ok)
        fprintf(stderr, "bench: reload: %s\n", lua_tostring(L, -1));
    lua_pop(L, 2);
    return ok;
}

static int run_trial(struct trial *t)
{
    struct inst in;
    struct prod p[INST_MAX_STAGES];
    int np = t->producers;

    rec_reset();
    if (inst_open(&in, t->lua, NULL, t->hfile, t->stages, t->capacity,
                  t->concurrency, t->consumer) != 0)
        return -1;
    if (t->shed_target > 0) {
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.shed_target = t->shed_target;
        if (seda_stage_tune_admission(in.st[0], &so, SEDA_TUNE_SHED, NULL,
                                      0) != 0) {
            inst_close(&in);
            return -1;
        }
    }
    double start = seda_now() + 0.01;
    memset(p, 0, sizeof p);
    for (int i = 0; i < np; i++) {
        p[i].tolerate = t->shed_target > 0 ? SEDA_ESHED : 0;
        p[i].st = in.st[in.nst > 1 ? i % in.nst : 0];
        p[i].start = start;
        p[i].deadline = t->window > 0 ? start + t->window : 0;
        p[i].limit = t->total_limit / np + (i < t->total_limit % np);
        p[i].rate = t->rate / np;
        p[i].tick = t->tick;
        p[i].tmpl = t->tmpl;
        p[i].len = t->len;
        p[i].ts_off = t->ts_off;
        p[i].kind = t->kind;
    }
    t->workers = seda_bus_workers(in.bus);
    if (prods_start(p, np) != 0) {
        inst_close(&in);
        return -1;
    }
    t->reloads = t->reload_failed = 0;
    if (t->reload_every > 0 && in.L) {
        double next = start + t->reload_every;
        while (next < start + t->window) {
            bench_sleep_until(next);
            if (do_reload(in.L))
                t->reloads++;
            else
                t->reload_failed++;
            next += t->reload_every;
        }
    }
    prods_join(p, np);
    double end = start;
    t->total = t->errors = t->shed = 0;
    t->last_err = 0;
    for (int i = 0; i < np; i++) {
        t->total += p[i].published;
        t->errors += p[i].errors;
        t->shed += p[i].tolerated;
        if (p[i].errors)
            t->last_err = p[i].last_err;
        if (p[i].end > end)
            end = p[i].end;
    }
    t->depth = inst_depth(&in);
    seda_stage_stats ss;
    seda_stage_stats_get(in.st[0], &ss);
    t->sojourn_p99 = ss.sojourn_p99;
    double t_sd = seda_now();
    int rc = inst_shutdown(&in, 60);
    double t_done = seda_now();
    t->drain_tail = t_done - t_sd;
    t->drained = rc == 0;
    t->elapsed = t->window > 0 ? end - start : t_done - start;
    t->delivered = inst_delivered(&in);
    inst_close(&in);
    rec_latency(&t->lat);
    return 0;
}

/* Fields every stage row ends with: drained, the latency source, the
 * floor, and anything that went wrong. */
static void row_tail(struct row *r, const struct trial *t, double thr)
{
    row_bool(r, "drained", t->drained);
    row_int(r, "workers", t->workers);
    row_str(r, "latency", "array");
    row_str(r, "floor", t->lua ? "lua_call" : "mutex_ring");
    double fl = t->lua ? g_cfg.floor_lua : g_cfg.floor_ring;
    row_num(r, "floor_ratio", fl > 0 ? thr / fl : NAN, 4);
    if (t->lat.n != (size_t)t->delivered)
        row_int(r, "samples", (long long)t->lat.n);
    if (t->lat.truncated)
        row_bool(r, "samples_truncated", true);
    if (t->delivered != t->total)
        row_int(r, "lost", t->total - t->delivered);
    if (t->errors) {
        row_int(r, "publish_errors", t->errors);
        row_str(r, "publish_error", seda_strerror(t->last_err));
    }
}

static void cap_row(const char *config, const struct trial *t, int trial,
                    double frac, double target, double maxr)
{
    struct row r;
    double thr = t->elapsed > 0 ? (double)t->delivered / t->elapsed : 0;
    row_begin(&r, t->lua ? "lua" : "c", config);
    row_int(&r, "trial", trial);
    row_int(&r, "producers", t->producers);
    row_int(&r, "concurrency", t->concurrency);
    row_int(&r, "channels", t->stages);
    row_int(&r, "capacity", t->capacity);
    row_num(&r, "load_fraction", frac, 1);
    row_num(&r, "target_rate_eps", target, 0);
    row_int(&r, "total", t->total);
    row_int(&r, "delivered", t->delivered);
    row_num(&r, "elapsed_ms", t->elapsed * 1e3, 0);
    row_num(&r, "throughput_eps", thr, 0);
    row_int(&r, "end_of_window_depth", t->depth);
    row_num(&r, "drain_tail_ms", t->drain_tail * 1e3, 0);
    row_latency(&r, &t->lat);
    row_tail(&r, t, thr);
    if (frac == 0)
        row_num(&r, "achieved_rate_eps",
                t->elapsed > 0 ? (double)t->total / t->elapsed : 0, 0);
    row_num(&r, "max_throughput_eps", maxr, 0);
    if (t->tick > 0)
        row_num(&r, "tick_ms", t->tick * 1e3, 1);
    if (t->kind == 1) {
        row_str(&r, "payload", "table5");
        row_int(&r, "payload_bytes", (long long)t->len);
    }
    if (t->reload_every > 0) {
        row_int(&r, "reloads", t->reloads);
        row_int(&r, "reload_failed", t->reload_failed);
        row_bool(&r, "delivered_eq_published", t->delivered == t->total);
    }
    row_end(&r);
}

static char *g_hfile, *g_hfile_table;

static const char *handler_file(bool table)
{
    if (!g_hfile)
        g_hfile = bench_write_file(
            "h.lua", "local rec = require 'benchrec'.rec\n"
                     "return function(env) rec(env.payload) end\n");
    if (!g_hfile_table)
        g_hfile_table = bench_write_file(
            "h_table.lua",
            "local rec = require 'benchrec'.rec_ts\n"
            "return function(env)\n"
            "  local p = env.payload\n"
            "  rec(p.value, p.name)\n"
            "end\n");
    return table ? g_hfile_table : g_hfile;
}

static unsigned char g_tbl[256];
static size_t g_tbl_len;
static int g_tbl_off = -1;

static void set_payload(struct trial *t, bool table)
{
    static const double zero = 0;
    if (table && g_tbl_off < 0 &&
        bench_encode_table("{id = 12345, name = 'sensor-17', value = "
                           "12345.678901, ok = true, tags = 'a,b'}",
                           g_tbl, sizeof g_tbl, &g_tbl_len, &g_tbl_off) != 0)
        table = false;
    if (table) {
        t->tmpl = g_tbl;
        t->len = g_tbl_len;
        t->ts_off = g_tbl_off;
        t->kind = 1;
    } else {
        t->tmpl = (const unsigned char *)&zero;
        t->len = sizeof zero;
        t->ts_off = 0;
        t->kind = 0;
    }
}

/* ---- capacity curve ---- */

/* The calibrated maximum of the last cap1 run in this process, per
 * handler (cap1_smooth sweeps against it when cap1 ran first). */
static double g_cap1_max[2];

void bench_capacity(const char *config, bool lua)
{
    bool table = strcmp(config, "cap1_table") == 0;
    /* cap1_smooth: cap1's sweep paced in 1 ms ticks instead of 20 ms, so
     * a tick's burst (load 0.5 of ~9 M/s: 4500, not 90 000) does not fill
     * the queue: its latency is the bus's, not queueing behind a burst. */
    bool smooth = strcmp(config, "cap1_smooth") == 0;
    int P = strcmp(config, "cap8") == 0 ? g_cfg.producers : 1;
    struct trial t;
    memset(&t, 0, sizeof t);
    t.lua = lua;
    t.hfile = lua ? handler_file(table) : NULL;
    t.producers = P;
    t.stages = 1;
    t.capacity = 1024;
    t.concurrency = P;
    set_payload(&t, table);
    if (lua && !t.hfile)
        return;

    struct trial cal[2];
    double maxr = smooth ? g_cap1_max[lua] : 0;
    bool calibrate = maxr == 0;
    for (int i = 0; calibrate && i < g_cfg.calib_runs; i++) {
        bench_progress("%s/%s calibrate %d/%d", config, lua ? "lua" : "c",
                       i + 1, g_cfg.calib_runs);
        cal[i] = t;
        cal[i].window = g_cfg.calib_s;
        if (run_trial(&cal[i]) != 0)
            return;
        double r = (double)cal[i].total / cal[i].elapsed;
        if (r > maxr)
            maxr = r;
    }
    for (int i = 0; calibrate && i < g_cfg.calib_runs; i++)
        cap_row(config, &cal[i], i + 1, 0, 0, maxr);
    if (strcmp(config, "cap1") == 0)
        g_cap1_max[lua] = maxr;

    static const double fr[] = { 0.5, 1.0, 1.5 };
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < g_cfg.sweep_trials; k++) {
            bench_progress("%s/%s load %.1f trial %d/%d", config,
                           lua ? "lua" : "c", fr[f], k + 1,
                           g_cfg.sweep_trials);
            struct trial s = t;
            s.window = g_cfg.window_s;
            s.rate = maxr * fr[f];
            s.tick = smooth ? 0.001 : 0;
            if (run_trial(&s) != 0)
                return;
            cap_row(config, &s, k + 1, fr[f], s.rate, maxr);
        }
}

/* ---- firehose ---- */

void bench_firehose(const char *config, bool lua)
{
    int P = strcmp(config, "seq") == 0 ? 1 : g_cfg.producers;
    struct trial t;
    memset(&t, 0, sizeof t);
    t.lua = lua;
    t.hfile = lua ? handler_file(false) : NULL;
    if (lua && !t.hfile)
        return;
    t.producers = P;
    t.stages = strcmp(config, "chan") == 0 ? P : 1;
    t.concurrency = strcmp(config, "par") == 0 ? P : 1;
    t.capacity = 262144;
    t.total_limit = g_cfg.fire_total;
    set_payload(&t, false);
    for (int k = 0; k < g_cfg.fire_trials; k++) {
        bench_progress("%s/%s trial %d/%d", config, lua ? "lua" : "c", k + 1,
                       g_cfg.fire_trials);
        struct trial s = t;
        if (run_trial(&s) != 0)
            return;
        struct row r;
        double thr = s.elapsed > 0 ? (double)s.delivered / s.elapsed : 0;
        row_begin(&r, lua ? "lua" : "c", config);
        row_int(&r, "trial", k + 1);
        row_int(&r, "producers", s.producers);
        row_int(&r, "concurrency", s.concurrency);
        row_int(&r, "channels", s.stages);
        row_int(&r, "total", s.total);
        row_int(&r, "delivered", s.delivered);
        row_num(&r, "elapsed_ms", s.elapsed * 1e3, 0);
        row_num(&r, "throughput_eps", thr, 0);
        row_latency(&r, &s.lat);
        row_tail(&r, &s, thr);
        row_end(&r);
    }
}

/* ---- reload ---- */

/* cap1 with a Lua handler and bus:reload("bench") every 100 ms on the main
 * state: trial 1 unpaced, trial 2 paced at trial 1's achieved rate. */
void bench_reload(void)
{
    struct trial t;
    memset(&t, 0, sizeof t);
    t.lua = true;
    t.hfile = handler_file(false);
    if (!t.hfile)
        return;
    t.producers = 1;
    t.stages = 1;
    t.capacity = 1024;
    t.concurrency = 1;
    t.window = g_cfg.window_s;
    t.reload_every = 0.1;
    set_payload(&t, false);
    double maxr = 0;
    for (int k = 0; k < 2; k++) {
        bench_progress("reload/lua trial %d/2 (%s)", k + 1,
                       k ? "load 1.0" : "unpaced");
        struct trial s = t;
        s.rate = k ? maxr : 0;
        if (run_trial(&s) != 0)
            return;
        if (k == 0)
            maxr = (double)s.total / s.elapsed;
        cap_row("reload", &s, k + 1, k ? 1.0 : 0, s.rate, maxr);
    }
}

/* ---- overload ---- */

/* cap1 at load 1.5 for the sweep window, without and with adaptive
 * shedding (shed = {target = 0.005}): goodput (deliveries per second of
 * the window) against the calibrated capacity, and the stage's p99
 * sojourn against the full-queue delay.  One calibration run (the
 * capacity config's first step), then two trials each, alternating. */
void bench_overload(bool lua)
{
    struct trial t;
    memset(&t, 0, sizeof t);
    t.lua = lua;
    t.hfile = lua ? handler_file(false) : NULL;
    if (lua && !t.hfile)
        return;
    t.producers = 1;
    t.stages = 1;
    t.capacity = 1024;
    t.concurrency = 1;
    set_payload(&t, false);
    bench_progress("overload/%s calibrate", lua ? "lua" : "c");
    struct trial cal = t;
    cal.window = g_cfg.calib_s;
    if (run_trial(&cal) != 0)
        return;
    double maxr = (double)cal.total / cal.elapsed;
    for (int k = 0; k < 2 * g_cfg.sweep_trials; k++) {
        bool shed = k % 2 == 1;
        bench_progress("overload/%s load 1.5 %s trial %d/%d",
                       lua ? "lua" : "c", shed ? "shed" : "no shed",
                       k / 2 + 1, g_cfg.sweep_trials);
        struct trial s = t;
        s.window = g_cfg.window_s;
        s.rate = maxr * 1.5;
        s.shed_target = shed ? 0.005 : 0;
        if (run_trial(&s) != 0)
            return;
        struct row r;
        /* Goodput: what the window delivered (the drain tail is not in
         * it: shutdown drains what is queued at the end). */
        double good = s.elapsed > 0 ? (double)(s.delivered - s.depth) /
                                          s.elapsed : 0;
        row_begin(&r, lua ? "lua" : "c", "overload");
        row_int(&r, "trial", k / 2 + 1);
        row_int(&r, "producers", 1);
        row_int(&r, "concurrency", 1);
        row_int(&r, "capacity", 1024);
        row_num(&r, "load_fraction", 1.5, 1);
        row_num(&r, "target_rate_eps", s.rate, 0);
        row_num(&r, "max_throughput_eps", maxr, 0);
        row_num(&r, "shed_target_ms", s.shed_target * 1e3, 1);
        row_int(&r, "total", s.total);
        row_int(&r, "delivered", s.delivered);
        row_int(&r, "shed", s.shed);
        row_num(&r, "elapsed_ms", s.elapsed * 1e3, 0);
        row_num(&r, "goodput_eps", good, 0);
        row_num(&r, "goodput_ratio", maxr > 0 ? good / maxr : 0, 4);
        row_num(&r, "sojourn_p99_us", s.sojourn_p99, 1);
        row_int(&r, "end_of_window_depth", s.depth);
        row_num(&r, "drain_tail_ms", s.drain_tail * 1e3, 0);
        row_latency(&r, &s.lat);
        row_tail(&r, &s, good);
        row_end(&r);
    }
}

/* ---- overload with a slow handler ---- */

/* The same overload with a 100 us handler, where the full queue (1024)
 * is a 100 ms delay against the 5 ms target: the case shedding is for.
 * The C consumer also keeps the longest sojourn of each 100 ms of the
 * window, so the rows carry the sojourn over time (the README's chart). */
#define SLOW_US 100
#define SERIES_MS 100
#define SERIES_N 64
static _Atomic(double) g_series[SERIES_N];  /* max sojourn, seconds */
static double g_series_t0;                  /* written before the run */

static bool slow_consume(seda_env_t *env, void *ud)
{
    size_t len;
    const void *p = seda_env_payload(env, &len);
    double ts;
    (void)ud;
    if (len < sizeof ts)
        return false;
    memcpy(&ts, p, sizeof ts);
    double now = seda_now();
    double lat = now - ts;
    rec_add(lat);
    long b = (long)((now - g_series_t0) * 1e3 / SERIES_MS);
    if (b >= 0 && b < SERIES_N) {
        double cur = atomic_load_explicit(&g_series[b],
                                          memory_order_relaxed);
        if (lat > cur)     /* one consumer (concurrency 1): no race */
            atomic_store_explicit(&g_series[b], lat, memory_order_relaxed);
    }
    double until = now + SLOW_US * 1e-6;
    while (seda_now() < until)
        ;
    return true;
}

/* tick: the pacing tick (0: the sweep's 20 ms, rows `overload_slow`;
 * else rows `overload_smooth` with tick_ms).  At 20 ms a tick's burst is
 * 30 ms of work, so the last of each burst waits ~20 ms whatever the
 * policy, unless a third of each burst is refused: there p99 <= 15 ms and
 * goodput >= 0.95 cannot both hold.  A 1 ms tick takes that arithmetic
 * out and leaves the controller's own behaviour. */
void bench_overload_slow(bool lua, double tick)
{
    const char *cfg = tick > 0 ? "overload_smooth" : "overload_slow";
    static char *hslow;
    if (lua && !hslow)
        hslow = bench_write_file(
            "h_slow.lua",
            "local rec = require 'benchrec'.rec\n"
            "local now = seda.now\n"
            "return function(env)\n"
            "  rec(env.payload)\n"
            "  local d = now() + 0.0001\n"
            "  while now() < d do end\n"
            "end\n");
    struct trial t;
    memset(&t, 0, sizeof t);
    t.lua = lua;
    t.hfile = lua ? hslow : NULL;
    if (lua && !t.hfile)
        return;
    t.consumer = lua ? NULL : slow_consume;
    t.producers = 1;
    t.stages = 1;
    t.capacity = 1024;
    t.concurrency = 1;
    set_payload(&t, false);
    bench_progress("%s/%s calibrate", cfg, lua ? "lua" : "c");
    struct trial cal = t;
    cal.window = g_cfg.calib_s;
    g_series_t0 = seda_now() + 1e9;         /* no series while calibrating */
    if (run_trial(&cal) != 0)
        return;
    double maxr = (double)cal.total / cal.elapsed;
    for (int k = 0; k < 2 * g_cfg.sweep_trials; k++) {
        bool shed = k % 2 == 1;
        bench_progress("%s/%s load 1.5 %s trial %d/%d", cfg,
                       lua ? "lua" : "c", shed ? "shed" : "no shed",
                       k / 2 + 1, g_cfg.sweep_trials);
        struct trial s = t;
        s.window = g_cfg.window_s;
        s.rate = maxr * 1.5;
        s.tick = tick;
        s.shed_target = shed ? 0.005 : 0;
        for (int i = 0; i < SERIES_N; i++)
            atomic_store(&g_series[i], 0.0);
        g_series_t0 = seda_now() + 0.01;    /* run_trial's start */
        if (run_trial(&s) != 0)
            return;
        double good = s.elapsed > 0 ? (double)(s.delivered - s.depth) /
                                          s.elapsed : 0;
        struct row r;
        row_begin(&r, lua ? "lua" : "c", cfg);
        row_int(&r, "trial", k / 2 + 1);
        row_int(&r, "handler_us", SLOW_US);
        if (tick > 0)
            row_num(&r, "tick_ms", tick * 1e3, 1);
        row_int(&r, "capacity", 1024);
        row_num(&r, "load_fraction", 1.5, 1);
        row_num(&r, "target_rate_eps", s.rate, 0);
        row_num(&r, "max_throughput_eps", maxr, 0);
        row_num(&r, "shed_target_ms", s.shed_target * 1e3, 1);
        row_int(&r, "total", s.total);
        row_int(&r, "delivered", s.delivered);
        row_int(&r, "shed", s.shed);
        row_num(&r, "elapsed_ms", s.elapsed * 1e3, 0);
        row_num(&r, "goodput_eps", good, 0);
        row_num(&r, "goodput_ratio", maxr > 0 ? good / maxr : 0, 4);
        row_num(&r, "sojourn_p99_us", s.sojourn_p99, 1);
        row_latency(&r, &s.lat);
        if (!lua) {
            char js[SERIES_N * 12 + 4];
            size_t n = 0;
            int nb = (int)(s.elapsed * 1e3 / SERIES_MS);
            if (nb > SERIES_N)
                nb = SERIES_N;
            js[n++] = '[';
            for (int i = 0; i < nb && n < sizeof js - 16; i++)
                n += (size_t)snprintf(js + n, sizeof js - n, "%s%.2f",
                                      i ? "," : "",
                                      atomic_load(&g_series[i]) * 1e3);
            js[n++] = ']';
            js[n] = 0;
            row_int(&r, "series_bucket_ms", SERIES_MS);
            row_json(&r, "series_max_sojourn_ms", js);
        }
        row_tail(&r, &s, good);
        row_end(&r);
    }
}
