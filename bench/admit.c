/* SPDX-License-Identifier: MIT */
/*
 * admit.c -- config `admit` (not part of WORKLOAD.md's reference
 * workload): what a stage's `admit` rule costs a publisher.
 *
 * A rule runs in the publisher's own Lua state, so the producer here is
 * the main Lua state itself: a loop of bus:publish into one stage
 * (capacity 1024, block, concurrency 1, a Lua handler) for the
 * calibration window, then bus:wait().  Two shapes (the rows' "shape"):
 *   cap1   the "cap1 Lua": as WORKLOAD.md's cap1, the producer
 *          writes the timestamp just before each publish
 *          (bus:publish("bench", seda.now())) and the handler reads
 *          env.payload and records the latency (benchrec.rec_ts);
 *   count  the lighter pair of the first rows (no "shape" field there):
 *          bus:publish("bench", i), a handler that only reads
 *          env.payload.  Producer and consumer cost about the same, so
 *          the rule's cost shows in full whenever the producer is the
 *          slower of the two.
 * Trials alternate without and with a trivial rule
 * (`admit = function(env, stage) return true end`); rows carry the
 * throughput (publishes per second, clock from the first publish to
 * idle) and, with the rule, admit_ratio = its rate / the median rate
 * without one in that shape (target >= 0.85 for cap1).  Three trials
 * each (one with --quick).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "families.h"
#include "harness.h"
#include "seda_lua.h"

static const char ADMIT_CHUNK[] =
    "local seda, hfile, window, with, stamp = ...\n"
    "local bus = seda.bus{}\n"
    "local o = { name = 'bench', capacity = 1024, handler = hfile }\n"
    "if with then o.admit = function(env, stage) return true end end\n"
    "bus:stage(o)\n"
    "local publish, now, n, t0 = bus.publish, seda.now, 0, seda.now()\n"
    "local t_end = t0 + window\n"
    "repeat\n"
    "  for i = 1, 256 do\n"
    "    if publish(bus, 'bench', stamp and now() or i) then n = n + 1 end\n"
    "  end\n"
    "until now() >= t_end\n"
    "local idle = bus:wait(60)\n"
    "local el = seda.now() - t0\n"
    "local delivered = bus:stats('bench').delivered\n"
    "bus:shutdown(10)\n"
    "return n, el, delivered, idle\n";

struct admit_res {
    long n, delivered;
    double elapsed;
    bool drained;
};

static int admit_trial(const char *hfile, bool with, bool stamp,
                       struct admit_res *out)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return -1;
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 0);
    int rc = -1;
    if (luaL_loadstring(L, ADMIT_CHUNK) != LUA_OK)
        goto out;
    lua_pushvalue(L, 1);
    lua_pushstring(L, hfile);
    lua_pushnumber(L, g_cfg.calib_s);
    lua_pushboolean(L, with);
    lua_pushboolean(L, stamp);
    if (lua_pcall(L, 5, 4, 0) != LUA_OK)
        goto out;
    out->n = (long)lua_tointeger(L, -4);
    out->elapsed = lua_tonumber(L, -3);
    out->delivered = (long)lua_tointeger(L, -2);
    out->drained = lua_toboolean(L, -1);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench: admit: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return rc;
}

/* One shape: trials alternating without and with the rule, then rows. */
static int admit_shape(const char *shape, const char *hfile, bool stamp,
                       int trials)
{
    struct admit_res res[2][3];
    double rate[2][3];
    for (int t = 0; t < trials; t++)
        for (int w = 0; w < 2; w++) {
            bench_progress("admit/lua %s %s trial %d/%d", shape,
                           w ? "with a rule" : "without", t + 1, trials);
            if (admit_trial(hfile, w, stamp, &res[w][t]) != 0)
                return -1;
            rate[w][t] = res[w][t].elapsed > 0
                             ? (double)res[w][t].n / res[w][t].elapsed : 0;
        }
    double base[3];
    memcpy(base, rate[0], sizeof base);
    double without = bench_median(base, trials);
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < trials; t++) {
            struct row r;
            row_begin(&r, "lua", "admit");
            row_int(&r, "trial", t + 1);
            row_bool(&r, "admit", w == 1);
            row_str(&r, "shape", shape);
            row_int(&r, "producers", 1);
            row_str(&r, "producer", "main Lua state");
            row_int(&r, "capacity", 1024);
            row_int(&r, "total", res[w][t].n);
            row_int(&r, "delivered", res[w][t].delivered);
            row_num(&r, "elapsed_ms", res[w][t].elapsed * 1e3, 0);
            row_num(&r, "throughput_eps", rate[w][t], 0);
            if (w == 1)
                row_num(&r, "admit_ratio",
                        without > 0 ? rate[w][t] / without : 0, 4);
            row_bool(&r, "drained", res[w][t].drained &&
                                        res[w][t].delivered == res[w][t].n);
            row_end(&r);
        }
    return 0;
}

void bench_admit(void)
{
    int trials = g_cfg.quick ? 1 : 3;
    char *hcap1 = bench_write_file("h_admit_cap1.lua",
                                   "local rec = require 'benchrec'.rec_ts\n"
                                   "return function(env)\n"
                                   "  rec(env.payload)\n"
                                   "end\n");
    char *hcount = bench_write_file("h_admit.lua",
                                    "return function(env)\n"
                                    "  local p = env.payload\n"
                                    "end\n");
    if (hcap1 && hcount && admit_shape("cap1", hcap1, true, trials) == 0)
        admit_shape("count", hcount, false, trials);
    free(hcap1);
    free(hcount);
}
