/* SPDX-License-Identifier: MIT */
/*
 * codec_loop.c -- round-trip speed of the payload codec.
 *
 * Encodes and decodes a small record (the typical sensor payload) in one
 * lua_State on one thread, reusing one output buffer, and prints one JSON
 * line with the mean time per round trip.  Usage:
 *
 *     codec_loop [iterations [state]]   (default 2000000, worker)
 *
 * state is how the lua_State is made:
 *   worker        (default) seda__l_worker_newstate(): the allocator and the
 *                 collector mode of the states Lua handlers run in
 *                 (lworker.c: per-state small-block free lists,
 *                 generational collection), plus the standard libraries;
 *   incremental   luaL_newstate(): the C library's allocator, Lua's
 *                 default incremental collector;
 *   generational  luaL_newstate() switched to generational collection.
 * The JSON field "gc" names the choice.  Rows before the worker state was
 * the default (no "state" argument) measured "incremental".
 *
 * Build (not part of `make`):
 *     make && cc -std=c11 -D_GNU_SOURCE -pthread -O2 -Iinclude -Isrc -Isrc/lua \
 *         $(pkg-config --cflags lua5.4) bench/codec_loop.c \
 *         build/release/libsedalua.a build/release/libseda.a \
 *         $(pkg-config --libs lua5.4) -lsqlite3 -lm -o codec_loop
 *
 * DESIGN
 *   - Single-threaded; the decoded copy is popped each round so the
 *     garbage collector's work is part of the measured cost, as it would be
 *     in a handler.
 *   - The best of five runs is reported, to keep scheduler noise out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "seda_lua_admin.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 2000000;
    const char *gc = argc > 2 ? argv[2] : "worker";
    int worker = strcmp(gc, "incremental") != 0 &&
                 strcmp(gc, "generational") != 0;
    lua_State *L = worker ? seda__l_worker_newstate() : luaL_newstate();
    seda_wbuf b = {0};
    char err[256];
    double best = 0;

    if (L == NULL || iters <= 0)
        return 1;
    luaL_openlibs(L);
    if (worker)
        gc = "worker";
    else if (strcmp(gc, "generational") == 0)
        lua_gc(L, LUA_GCGEN, 0, 0);
    if (luaL_dostring(L, "return {id = 12345, name = 'sensor-17', "
                         "value = 21.5, ok = true, tags = 'a,b'}") != 0) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        return 1;
    }
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            b.len = 0;
            if (seda__codec_encode(L, 1, &b, "payload", err, sizeof err) ||
                seda__codec_decode(L, b.p, b.len, err, sizeof err)) {
                fprintf(stderr, "bench_codec: %s\n", err);
                return 1;
            }
            lua_pop(L, 1);
        }
        double ns = (now_ns() - t0) / (double)iters;
        if (run == 0 || ns < best)
            best = ns;
    }
    printf("{\"language\":\"c\",\"handler\":\"lua\",\"config\":\"codec\","
           "\"ns_per_roundtrip\":%.1f,\"bytes\":%zu,\"iterations\":%ld,"
           "\"gc\":\"%s\"}\n",
           best, b.len, iters, gc);
    seda__codec_wbuf_free(&b);
    if (worker)
        seda__l_worker_closestate(L);
    else
        lua_close(L);
    return 0;
}
