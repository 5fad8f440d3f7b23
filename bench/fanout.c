/* SPDX-License-Identifier: MIT */
/*
 * fanout.c -- config `fanout` (not part of the reference workload):
 * handlers that publish, under managed blocking (the README's "Handlers
 * that publish never stall the pool").
 *
 * Four envelopes into stage `src` (concurrency 2) whose handler publishes
 * 100 000 envelopes each into stage `sink` (one consumer that only
 * counts), on a bus of 2 workers.  With `sink` at capacity 64 both workers
 * soon wait inside `src` handlers for room, and only loan threads drain
 * `sink`; the same fan-out with `sink` at a capacity that never fills
 * (524 288) is the baseline of the same run: fanout_ratio = blocking rate
 * / median baseline rate.  The clock runs from the first publish into
 * `src` until the bus is idle.  Rows carry the loan figures (loans,
 * loans_peak, max_loans) and lost = sink deliveries short of 400 000 (it
 * must be 0: nothing refused, nothing dropped).  C consumers and Lua
 * handlers; three trials per capacity (one with --quick), alternating.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "seda_lua.h"

#include "families.h"
#include "harness.h"

#define FAN_SOURCES 4
#define FAN_EACH 100000
#define FAN_BIG 524288

static atomic_long g_sunk;          /* C sink deliveries */
static atomic_long g_refused;       /* C publishes refused */

struct fan_c {
    seda_stage_t *sink;
};

static bool c_sink(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    atomic_fetch_add_explicit(&g_sunk, 1, memory_order_relaxed);
    return true;
}

static bool c_src(seda_env_t *env, void *ud)
{
    struct fan_c *f = ud;
    (void)env;
    for (long i = 0; i < FAN_EACH; i++) {
        int64_t v = i;
        if (seda_stage_publish(f->sink, &v, sizeof v, NULL) != 0)
            atomic_fetch_add_explicit(&g_refused, 1, memory_order_relaxed);
    }
    return true;
}

static const char FAN_CHUNK[] =
    "local seda, _, _, cap = ...\n"
    "local bus = seda.bus{ workers = 2 }\n"
    "bus:stage{ name = 'sink', capacity = cap, handler = function(env)\n"
    "  local p = env.payload\n"
    "end }\n"
    "bus:stage{ name = 'src', concurrency = 2, handler = function(env)\n"
    "  local publish = seda.publish\n"
    "  for i = 1, 100000 do\n"
    "    if not publish('sink', i) then seda.shared:incr('fan.refused', 1) end\n"
    "  end\n"
    "end }\n"
    "return bus\n";

struct fan_result {
    double rate;                /* sink deliveries per second */
    long delivered, refused;
    double elapsed;
    bool drained;
    seda_bus_stats bs;
};

static int fan_trial(bool lua, int cap, struct fan_result *out)
{
    memset(out, 0, sizeof *out);
    seda_bus_t *bus = NULL;
    lua_State *L = NULL;
    struct fan_c fc;
    seda_stage_t *src = NULL, *sink = NULL;
    if (lua) {
        L = luaL_newstate();
        if (!L)
            return -1;
        luaL_openlibs(L);
        luaL_requiref(L, "seda", luaopen_seda, 0);
        if (luaL_loadstring(L, FAN_CHUNK) != LUA_OK) {
            fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
            lua_close(L);
            return -1;
        }
        lua_pushvalue(L, 1);
        lua_pushnil(L);
        lua_pushnil(L);
        lua_pushinteger(L, cap);
        if (lua_pcall(L, 4, 1, 0) != LUA_OK) {
            fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
            lua_close(L);
            return -1;
        }
        bus = seda_lua_tobus(L, -1);
        src = seda_bus_stage(bus, "src");
        sink = seda_bus_stage(bus, "sink");
        lua_getglobal(L, "require");
        lua_pushliteral(L, "seda");
        lua_call(L, 1, 1);
        lua_getfield(L, -1, "shared");
        lua_getfield(L, -1, "delete");
        lua_pushvalue(L, -2);
        lua_pushliteral(L, "fan.refused");
        lua_call(L, 2, 0);
        lua_pop(L, 2);
    } else {
        seda_bus_opts bo;
        seda_bus_opts_init(&bo);
        bo.workers = 2;
        if (seda_bus_new(&bo, &bus) != 0)
            return -1;
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "sink";
        so.capacity = cap;
        if (seda_stage_add(bus, &so, &sink, NULL, 0) != 0)
            return -1;
        seda_stage_consume(sink, c_sink, NULL);
        fc.sink = sink;
        seda_stage_opts_init(&so);
        so.name = "src";
        so.concurrency = 2;
        if (seda_stage_add(bus, &so, &src, NULL, 0) != 0)
            return -1;
        seda_stage_consume(src, c_src, &fc);
        atomic_store(&g_sunk, 0);
        atomic_store(&g_refused, 0);
    }
    double t0 = seda_now();
    for (int i = 0; i < FAN_SOURCES; i++) {
        int64_t v = i;
        seda_stage_publish(src, &v, sizeof v, NULL);
    }
    int idle = seda_bus_wait_idle(bus, 120);
    out->elapsed = seda_now() - t0;
    seda_bus_stats_get(bus, &out->bs);
    seda_stage_stats ss;
    seda_stage_stats_get(sink, &ss);
    out->delivered = (long)ss.delivered;
    if (lua) {
        lua_getglobal(L, "require");
        lua_pushliteral(L, "seda");
        lua_call(L, 1, 1);
        lua_getfield(L, -1, "shared");
        lua_getfield(L, -1, "get");
        lua_pushvalue(L, -2);
        lua_pushliteral(L, "fan.refused");
        lua_call(L, 2, 1);
        out->refused = (long)lua_tointeger(L, -1);
        lua_pop(L, 3);
    } else {
        out->refused = atomic_load(&g_refused);
    }
    out->drained = idle == 0 && seda_bus_shutdown(bus, 60) == 0;
    if (lua)
        lua_close(L);
    else
        seda_bus_free(bus);
    out->rate = out->elapsed > 0 ? (double)out->delivered / out->elapsed : 0;
    return 0;
}

static void fan_row(bool lua, int cap, int trial, const struct fan_result *r,
                    double base)
{
    long total = (long)FAN_SOURCES * FAN_EACH;
    struct row w;
    row_begin(&w, lua ? "lua" : "c", "fanout");
    row_int(&w, "trial", trial);
    row_int(&w, "sources", FAN_SOURCES);
    row_int(&w, "fan", FAN_EACH);
    row_int(&w, "workers", 2);
    row_int(&w, "concurrency", 2);
    row_int(&w, "capacity", cap);
    row_int(&w, "total", total);
    row_int(&w, "delivered", r->delivered);
    row_int(&w, "refused", r->refused);
    row_int(&w, "lost", total - r->delivered);
    row_int(&w, "elapsed_ms", (long long)(r->elapsed * 1e3 + 0.5));
    row_num(&w, "throughput_eps", r->rate, 0);
    row_int(&w, "loans", (long long)r->bs.loans);
    row_int(&w, "loans_peak", r->bs.loans_peak);
    row_int(&w, "max_loans", r->bs.max_loans);
    row_int(&w, "dead_lettered", (long long)r->bs.dead_lettered);
    if (base > 0)
        row_num(&w, "fanout_ratio", r->rate / base, 4);
    row_bool(&w, "drained", r->drained && r->delivered == total);
    row_end(&w);
}

void bench_fanout(void)
{
    int trials = g_cfg.quick ? 1 : 3;
    for (int h = 0; h < 2; h++) {
        bool lua = h == 1;
        if (lua ? !g_cfg.want_lua : !g_cfg.want_c)
            continue;
        struct fan_result big[3], small[3];
        double rates[3];
        for (int t = 0; t < trials; t++) {
            bench_progress("fanout/%s trial %d/%d", lua ? "lua" : "c", t + 1,
                           trials);
            if (fan_trial(lua, FAN_BIG, &big[t]) != 0 ||
                fan_trial(lua, 64, &small[t]) != 0)
                return;
            rates[t] = big[t].rate;
        }
        double base = bench_median(rates, trials);
        for (int t = 0; t < trials; t++)
            fan_row(lua, FAN_BIG, t + 1, &big[t], 0);
        for (int t = 0; t < trials; t++)
            fan_row(lua, 64, t + 1, &small[t], base);
    }
}
