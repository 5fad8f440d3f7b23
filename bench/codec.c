/* SPDX-License-Identifier: MIT */
/*
 * codec.c -- config `codec`: encode + decode of the 5-field record in one
 * lua_State set up as a worker's (seda__l_worker_newstate: the workers' small-
 * block allocator and generational collector), one output buffer reused,
 * the decoded copy dropped each round so the collector's work is counted --
 * what a hop costs a Lua handler.
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
#include "seda_lua_admin.h"

/* ---- codec ---- */

void bench_codec(void)
{
    long iters = g_cfg.quick ? 100000 : 1000000;
    int trials = g_cfg.quick ? 1 : 3;
    /* A state like a handler's: the workers' allocator and collector. */
    lua_State *L = seda__l_worker_newstate();
    seda_wbuf b = { 0 };
    char err[256];
    if (!L)
        return;
    if (luaL_dostring(L, "return {id = 12345, name = 'sensor-17', "
                         "value = 21.5, ok = true, tags = 'a,b'}") != 0) {
        fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
        seda__l_worker_closestate(L);
        return;
    }
    for (int t = 0; t < trials; t++) {
        bench_progress("codec trial %d/%d", t + 1, trials);
        double t0 = seda_now();
        for (long i = 0; i < iters; i++) {
            b.len = 0;
            if (seda__codec_encode(L, 1, &b, "payload", err, sizeof err) ||
                seda__codec_decode(L, b.p, b.len, err, sizeof err)) {
                fprintf(stderr, "bench: codec: %s\n", err);
                goto out;
            }
            lua_pop(L, 1);
        }
        double ns = (seda_now() - t0) * 1e9 / (double)iters;
        struct row r;
        row_begin(&r, "lua", "codec");
        row_int(&r, "trial", t + 1);
        row_num(&r, "ns_per_roundtrip", ns, 1);
        row_int(&r, "bytes", (long long)b.len);
        row_int(&r, "iterations", iters);
        row_str(&r, "payload", "table5");
        row_str(&r, "state", "worker");
        row_end(&r);
    }
out:
    seda__codec_wbuf_free(&b);
    seda__l_worker_closestate(L);
}
