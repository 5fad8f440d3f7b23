/* SPDX-License-Identifier: MIT */
/*
 * bench_stage.c -- buses under test, producer threads, and the stage
 * families: capacity curve (cap1, cap8, cap1_table), firehose (seq, par,
 * chan) and reload.
 *
 * DESIGN
 *   - A fresh bus per trial.  C rows: seda_bus_new + a C consumer that
 *     reads the 8-byte double timestamp from the payload, records the
 *     latency and acks.  Lua rows: a fresh main lua_State creates the bus
 *     and its stages from Lua (bus:stage with a handler file), and C
 *     producer threads publish to the core bus behind it
 *     (seda_lua_tobus), exactly as in the C case.
 *   - Producers start together at a time set a few ms ahead; each writes
 *     the timestamp into its own copy of the payload just before each
 *     publish.  Pacing: a 20 ms tick publishes max(1, round(rate x 0.02))
 *     back to back, then sleeps out what is left of the tick.  A window
 *     ends at its deadline even in the middle of a tick.
 *   - Counts come from the bus: total = publishes accepted, delivered = the
 *     stages' delivered counters after shutdown.  The latency sample count
 *     is a cross-check, printed only when it differs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bench.h"
#include "seda_lua.h"

/* ---- buses under test ---- */

const char *const INST_STAGES_CHUNK =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{}\n"
    "for i = 1, n do\n"
    "  bus:stage{name = n == 1 and 'bench' or ('bench' .. (i - 1)),\n"
    "            capacity = cap, policy = 'block', concurrency = conc,\n"
    "            publish_timeout = 30, handler = hfile}\n"
    "end\n"
    "return bus\n";

static bool c_consume(seda_env_t *env, void *ud)
{
    size_t len;
    const void *p = seda_env_payload(env, &len);
    double ts;
    (void)ud;
    if (len < sizeof ts)
        return false;
    memcpy(&ts, p, sizeof ts);
    rec_add(seda_now() - ts);
    return true;
}

static int open_c(struct inst *in, int n, int capacity, int concurrency,
                  seda_consumer_fn fn)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    int rc = seda_bus_new(&bo, &in->bus);
    if (rc != 0) {
        fprintf(stderr, "bench: seda_bus_new: %s\n", seda_strerror(rc));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char name[32], err[256];
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        if (n == 1)
            snprintf(name, sizeof name, "bench");
        else
            snprintf(name, sizeof name, "bench%d", i);
        so.name = name;
        so.capacity = capacity;
        so.concurrency = concurrency;
        so.policy = SEDA_POLICY_BLOCK;
        so.publish_timeout = 30;
        rc = seda_stage_add(in->bus, &so, &in->st[i], err, sizeof err);
        if (rc != 0) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        seda_stage_consume(in->st[i], fn ? fn : c_consume,
                           (void *)(intptr_t)i);
    }
    in->nst = n;
    return 0;
}

static int open_lua(struct inst *in, const char *chunk, const char *hfile,
                    int n, int capacity, int concurrency)
{
    lua_State *L = in->L = luaL_newstate();
    if (!L)
        return -1;
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 0);
    if (luaL_loadstring(L, chunk) != LUA_OK) {
        fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
        return -1;
    }
    lua_pushvalue(L, 1);
    lua_pushstring(L, hfile);
    lua_pushinteger(L, n);
    lua_pushinteger(L, capacity);
    lua_pushinteger(L, concurrency);
    if (lua_pcall(L, 5, 1, 0) != LUA_OK) {
        fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
        return -1;
    }
    /* The bus object stays at the top of the stack (index 2). */
    in->bus = seda_lua_tobus(L, -1);
    if (!in->bus) {
        fprintf(stderr, "bench: the chunk did not return a bus\n");
        return -1;
    }
    in->nst = seda_bus_stage_count(in->bus);
    if (in->nst > INST_MAX_STAGES)
        in->nst = INST_MAX_STAGES;
    for (int i = 0; i < in->nst; i++)
        in->st[i] = seda_bus_stage_at(in->bus, i);
    return 0;
}

int inst_open(struct inst *in, bool lua, const char *chunk,
              const char *hfile, int n, int capacity, int concurrency,
              seda_consumer_fn fn)
{
    memset(in, 0, sizeof *in);
    in->lua = lua;
    int rc = lua ? open_lua(in, chunk ? chunk : INST_STAGES_CHUNK, hfile, n,
                            capacity, concurrency)
                 : open_c(in, n, capacity, concurrency, fn);
    if (rc != 0)
        inst_close(in);
    return rc;
}

int inst_shutdown(struct inst *in, double timeout)
{
    return seda_bus_shutdown(in->bus, timeout);
}

void inst_close(struct inst *in)
{
    if (in->lua) {
        if (in->L)
            lua_close(in->L);   /* collects the bus: seda_bus_free */
    } else {
        seda_bus_free(in->bus);
    }
    memset(in, 0, sizeof *in);
}

long inst_delivered(struct inst *in)
{
    long n = 0;
    for (int i = 0; i < in->nst; i++) {
        seda_stage_stats s;
        seda_stage_stats_get(in->st[i], &s);
        n += (long)s.delivered;
    }
    return n;
}

int inst_depth(struct inst *in)
{
    int n = 0;
    for (int i = 0; i < in->nst; i++) {
        seda_stage_stats s;
        seda_stage_stats_get(in->st[i], &s);
        n += s.depth;
    }
    return n;
}

/* ---- producers ---- */

static bool publish_one(struct prod *p, unsigned char *buf,
                        const seda_publish_opts *o, double now)
{
    memcpy(buf + p->ts_off, &now, sizeof now);
    int rc = seda_stage_publish(p->st, buf, p->len, o);
    if (rc != 0) {
        p->errors++;
        p->last_err = rc;
        return false;
    }
    p->published++;
    return true;
}

static void *prod_main(void *arg)
{
    struct prod *p = arg;
    unsigned char *buf = malloc(p->len);
    if (!buf) {
        p->errors++;
        p->end = seda_now();
        return NULL;
    }
    memcpy(buf, p->tmpl, p->len);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.timeout = 30;
    o.kind = p->kind;
    o.slip = p->slip;
    o.nslip = p->nslip;
    o.done = p->done;
    o.done_ud = p->done_ud;
    double dl = p->deadline > 0 ? p->deadline : INFINITY;
    long limit = p->limit > 0 ? p->limit : -1;

    bench_sleep_until(p->start);
    if (p->rate <= 0) {
        for (;;) {
            double now = seda_now();
            if (now >= dl || p->published == limit)
                break;
            if (!publish_one(p, buf, &o, now))
                break;
        }
    } else {
        long per_tick = lround(p->rate * 0.02);
        if (per_tick < 1)
            per_tick = 1;
        bool stop = false;
        while (!stop) {
            double tick = seda_now();
            if (tick >= dl)
                break;
            for (long k = 0; k < per_tick; k++) {
                double now = seda_now();
                if (now >= dl || p->published == limit ||
                    !publish_one(p, buf, &o, now)) {
                    stop = true;
                    break;
                }
            }
            if (!stop && seda_now() < tick + 0.02)
                bench_sleep_until(tick + 0.02);
        }
    }
    p->end = seda_now();
    free(buf);
    return NULL;
}

int prods_start(struct prod *p, int n)
{
    for (int i = 0; i < n; i++)
        if (pthread_create(&p[i].th, NULL, prod_main, &p[i]) != 0) {
            fprintf(stderr, "bench: cannot start producer %d\n", i);
            prods_join(p, i);
            return -1;
        }
    return 0;
}

void prods_join(struct prod *p, int n)
{
    for (int i = 0; i < n; i++)
        pthread_join(p[i].th, NULL);
}

/* ---- one trial ---- */

struct trial {
    /* in */
    bool lua;
    const char *hfile;
    int producers, stages, capacity, concurrency;
    double window;              /* > 0: windowed; else limit */
    long total_limit;           /* firehose: envelopes over all producers */
    double rate;                /* over all producers; 0: unpaced */
    const unsigned char *tmpl;
    size_t len;
    int ts_off, kind;
    double reload_every;        /* > 0: bus:reload("bench") this often */
    /* out */
    long total, delivered, errors;
    int last_err;
    double elapsed;             /* s */
    double drain_tail;          /* s */
    int depth;
    bool drained;
    int reloads, reload_failed;
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
                  t->concurrency, NULL) != 0)
        return -1;
    double start = seda_now() + 0.01;
    memset(p, 0, sizeof p);
    for (int i = 0; i < np; i++) {
        p[i].st = in.st[in.nst > 1 ? i % in.nst : 0];
        p[i].start = start;
        p[i].deadline = t->window > 0 ? start + t->window : 0;
        p[i].limit = t->total_limit / np + (i < t->total_limit % np);
        p[i].rate = t->rate / np;
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
    t->total = t->errors = 0;
    t->last_err = 0;
    for (int i = 0; i < np; i++) {
        t->total += p[i].published;
        t->errors += p[i].errors;
        if (p[i].errors)
            t->last_err = p[i].last_err;
        if (p[i].end > end)
            end = p[i].end;
    }
    t->depth = inst_depth(&in);
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

void bench_capacity(const char *config, bool lua)
{
    bool table = strcmp(config, "cap1_table") == 0;
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
    double maxr = 0;
    for (int i = 0; i < g_cfg.calib_runs; i++) {
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
    for (int i = 0; i < g_cfg.calib_runs; i++)
        cap_row(config, &cal[i], i + 1, 0, 0, maxr);

    static const double fr[] = { 0.5, 1.0, 1.5 };
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < g_cfg.sweep_trials; k++) {
            bench_progress("%s/%s load %.1f trial %d/%d", config,
                           lua ? "lua" : "c", fr[f], k + 1,
                           g_cfg.sweep_trials);
            struct trial s = t;
            s.window = g_cfg.window_s;
            s.rate = maxr * fr[f];
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
