/* SPDX-License-Identifier: MIT */
/*
 * pipeline.c -- config `pipeline`: stages p1..p4 with a Lua handler that
 * increments p.n and assigns env.payload; the slip {p2, p3, p4}; a C done
 * callback counts completions, checks n == 4 in the final bytes and records
 * the itinerary latency from the envelope's publish time.  The same
 * pipeline with C consumers (handler "c": stages bench0..bench3, each
 * consumer increments n in the encoded bytes and sets the payload, the
 * work a hop's handler does) is the row the Lua one is read against.
 */
#include <malloc.h>
#include <errno.h>
#include <math.h>
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

/* ---- pipeline ---- */

static const char PIPE_CHUNK[] =
    "local seda, hfile, n, cap, conc = ...\n"
    "local bus = seda.bus{}\n"
    "for i = 1, 4 do\n"
    "  bus:stage{name = 'p' .. i, capacity = cap, policy = 'block',\n"
    "            concurrency = conc, publish_timeout = 30, handler = hfile}\n"
    "end\n"
    "return bus\n";

static atomic_long g_pipe_done, g_pipe_failed, g_pipe_bad;

static void pipe_done(seda_env_t *env, int outcome, void *ud)
{
    (void)ud;
    if (outcome != SEDA_COMPLETED) {
        atomic_fetch_add_explicit(&g_pipe_failed, 1, memory_order_relaxed);
        return;
    }
    rec_add(seda_now() - seda_env_published_at(env));
    /* n == 4: the key "n" (short string 0x21 'n') then small int 0x84. */
    size_t len;
    const unsigned char *p = seda_env_payload(env, &len);
    bool ok = false;
    for (size_t i = 0; i + 3 <= len && !ok; i++)
        ok = p[i] == 0x21 && p[i + 1] == 'n' && p[i + 2] == 0x84;
    if (!ok || seda_env_payload_kind(env) != 1)
        atomic_fetch_add_explicit(&g_pipe_bad, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_pipe_done, 1, memory_order_relaxed);
}

/* A C hop: n + 1 in the encoded record (the key "n", short string 0x21
 * 'n', then its small integer 0x80 + n), as a new payload. */
static bool pipe_consume(seda_env_t *env, void *ud)
{
    (void)ud;
    size_t len;
    const unsigned char *p = seda_env_payload(env, &len);
    unsigned char buf[64];
    if (len > sizeof buf)
        return false;
    memcpy(buf, p, len);
    for (size_t i = 0; i + 2 < len; i++)
        if (buf[i] == 0x21 && buf[i + 1] == 'n' && buf[i + 2] >= 0x80 &&
            buf[i + 2] < 0xff) {
            buf[i + 2]++;
            return seda_env_set_payload_kind(env, buf, len, 1) == 0;
        }
    return false;
}

static void pipeline_trial(const char *hfile, int np, int trial,
                           const unsigned char *tmpl, size_t len, int off)
{
    static const char *const slip_lua[] = { "p2", "p3", "p4" };
    static const char *const slip_c[] = { "bench1", "bench2", "bench3" };
    bool lua = hfile != NULL;
    long total = g_cfg.quick ? 20000 : 100000;
    struct inst in;
    struct prod p[INST_MAX_STAGES];

    atomic_store(&g_pipe_done, 0);
    atomic_store(&g_pipe_failed, 0);
    atomic_store(&g_pipe_bad, 0);
    rec_reset();
    if (inst_open(&in, lua, PIPE_CHUNK, hfile, 4, 262144, np,
                  pipe_consume) != 0)
        return;
    double start = seda_now() + 0.01;
    memset(p, 0, sizeof p);
    for (int i = 0; i < np; i++) {
        p[i].st = in.st[0];
        p[i].start = start;
        p[i].limit = total / np + (i < total % np);
        p[i].tmpl = tmpl;
        p[i].len = len;
        p[i].ts_off = off;
        p[i].kind = 1;
        p[i].slip = lua ? slip_lua : slip_c;
        p[i].nslip = 3;
        p[i].done = pipe_done;
    }
    if (prods_start(p, np) != 0) {
        inst_close(&in);
        return;
    }
    prods_join(p, np);
    long published = 0, errors = 0;
    for (int i = 0; i < np; i++) {
        published += p[i].published;
        errors += p[i].errors;
    }
    int rc = inst_shutdown(&in, 60);
    double elapsed = seda_now() - start;
    long hops = inst_delivered(&in);
    seda_bus_stats bs;
    seda_bus_stats_get(in.bus, &bs);
    inst_close(&in);
    struct latency lat;
    rec_latency(&lat);

    long done = atomic_load(&g_pipe_done);
    double thr = (double)done / elapsed;
    struct row r;
    row_begin(&r, lua ? "lua" : "c", "pipeline");
    row_int(&r, "trial", trial);
    row_int(&r, "producers", np);
    row_int(&r, "concurrency", np);
    row_int(&r, "channels", 1);
    row_int(&r, "stages", 4);
    row_int(&r, "total", published);
    row_int(&r, "delivered", done);
    row_num(&r, "elapsed_ms", elapsed * 1e3, 0);
    row_num(&r, "throughput_eps", thr, 0);
    row_num(&r, "itineraries_per_s", thr, 0);
    row_num(&r, "handler_calls_per_s", (double)hops / elapsed, 0);
    row_latency(&r, &lat);
    row_bool(&r, "drained", rc == 0);
    row_str(&r, "latency", "array");
    row_str(&r, "latency_from", "published_at");
    double fl = lua ? g_cfg.floor_lua : g_cfg.floor_ring;
    row_str(&r, "floor", lua ? "lua_call" : "mutex_ring");
    row_num(&r, "floor_ratio", fl > 0 ? (double)hops / elapsed / fl : 0, 4);
    row_int(&r, "hops_delivered", hops);
    if (atomic_load(&g_pipe_bad))
        row_int(&r, "bad_payload", atomic_load(&g_pipe_bad));
    if (atomic_load(&g_pipe_failed))
        row_int(&r, "not_completed", atomic_load(&g_pipe_failed));
    if (bs.dead_lettered || bs.dropped) {
        row_int(&r, "dead_lettered", (long long)bs.dead_lettered);
        row_int(&r, "dropped", (long long)bs.dropped);
    }
    if (done != published)
        row_int(&r, "lost", published - done);
    if (errors)
        row_int(&r, "publish_errors", errors);
    row_end(&r);
}

void bench_pipeline(void)
{
    unsigned char tmpl[64];
    size_t len;
    int off;
    char *hfile = bench_write_file(
        "h_pipe.lua", "return function(env)\n"
                      "  local p = env.payload\n"
                      "  p.n = p.n + 1\n"
                      "  env.payload = p\n"
                      "end\n");
    if (!hfile || bench_encode_table("{ts = 12345.678901, n = 0}", tmpl,
                                     sizeof tmpl, &len, &off) != 0) {
        free(hfile);
        return;
    }
    int trials = g_cfg.quick ? 1 : 3;
    int ps[2] = { 1, g_cfg.producers };
    /* C and Lua trials alternate, so a machine that speeds up or slows
     * down over the run favours neither. */
    for (int i = 0; i < (ps[1] > 1 ? 2 : 1); i++)
        for (int t = 0; t < trials; t++)
            for (int h = 0; h < 2; h++) {
                bool lua = h == 1;
                if (lua ? !g_cfg.want_lua : !g_cfg.want_c)
                    continue;
                bench_progress("pipeline/%s P=%d trial %d/%d",
                               lua ? "lua" : "c", ps[i], t + 1, trials);
                pipeline_trial(lua ? hfile : NULL, ps[i], t + 1, tmpl, len,
                               off);
            }
    free(hfile);
}
