/* SPDX-License-Identifier: MIT */
/*
 * floors.c -- config `floor`, measured in every run: the empty Lua call
 * from C on one thread, and a one-producer/one-consumer mutex+condvar ring
 * of 1024 slots drained in batches.  Stage rows read their throughput
 * against these (floor_ratio).
 */
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

/* ---- floors ---- */

static double floor_window(void)
{
    return g_cfg.quick ? 0.3 : 1.0;
}

/* Calls per second of an empty Lua function from C (nargs 0 or 1). */
static double floor_lua_call(int nargs, long *calls, double *elapsed)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return 0;
    luaL_openlibs(L);
    if (luaL_dostring(L, "return function() end") != LUA_OK) {
        lua_close(L);
        return 0;
    }
    lua_pushlstring(L, "12345678", 8);        /* the argument */
    long n = 0;
    double t0 = seda_now(), end = t0 + floor_window(), t;
    do {
        for (int i = 0; i < 1024; i++) {
            lua_pushvalue(L, 1);
            if (nargs)
                lua_pushvalue(L, 2);
            lua_pcall(L, nargs, 0, 0);
        }
        n += 1024;
    } while ((t = seda_now()) < end);
    lua_close(L);
    *calls = n;
    *elapsed = t - t0;
    return (double)n / (t - t0);
}

#define RING_SLOTS 1024
#define RING_BATCH 32

struct ring {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    double slot[RING_SLOTS];     /* timestamps; guarded by mu */
    unsigned head, count;        /* guarded by mu */
    bool done;                   /* producer finished; guarded by mu */
    bool cwait, pwait;           /* someone sleeps; guarded by mu */
    long consumed;               /* consumer thread only */
    double end;                  /* producer deadline */
};

static void *ring_producer(void *arg)
{
    struct ring *r = arg;
    for (;;) {
        double ts = seda_now();
        bool stop = ts >= r->end;
        pthread_mutex_lock(&r->mu);
        if (stop) {
            r->done = true;
            pthread_cond_signal(&r->not_empty);
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        while (r->count == RING_SLOTS) {
            r->pwait = true;
            pthread_cond_wait(&r->not_full, &r->mu);
        }
        r->slot[(r->head + r->count) % RING_SLOTS] = ts;
        r->count++;
        if (r->cwait) {
            r->cwait = false;
            pthread_cond_signal(&r->not_empty);
        }
        pthread_mutex_unlock(&r->mu);
    }
}

static void *ring_consumer(void *arg)
{
    struct ring *r = arg;
    double batch[RING_BATCH];
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->count == 0 && !r->done) {
            r->cwait = true;
            pthread_cond_wait(&r->not_empty, &r->mu);
        }
        if (r->count == 0) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        unsigned k = r->count < RING_BATCH ? r->count : RING_BATCH;
        for (unsigned i = 0; i < k; i++)
            batch[i] = r->slot[(r->head + i) % RING_SLOTS];
        r->head = (r->head + k) % RING_SLOTS;
        r->count -= k;
        if (r->pwait) {
            r->pwait = false;
            pthread_cond_signal(&r->not_full);
        }
        pthread_mutex_unlock(&r->mu);
        for (unsigned i = 0; i < k; i++)
            rec_add(seda_now() - batch[i]);
        r->consumed += k;
    }
}

/* Items per second through the ring, one producer and one consumer. */
static double floor_ring(long *items, double *elapsed, struct latency *lat)
{
    static struct ring r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.not_empty, NULL);
    pthread_cond_init(&r.not_full, NULL);
    rec_reset();
    double t0 = seda_now();
    r.end = t0 + floor_window();
    pthread_t p, c;
    pthread_create(&c, NULL, ring_consumer, &r);
    pthread_create(&p, NULL, ring_producer, &r);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    *elapsed = seda_now() - t0;
    *items = r.consumed;
    rec_latency(lat);
    rec_reset();
    pthread_cond_destroy(&r.not_full);
    pthread_cond_destroy(&r.not_empty);
    pthread_mutex_destroy(&r.mu);
    return (double)r.consumed / *elapsed;
}

void bench_floors(void)
{
    int trials = g_cfg.quick ? 1 : 3;
    double lua[3], ring[3];
    for (int nargs = 0; nargs <= 1; nargs++)
        for (int t = 0; t < trials; t++) {
            long calls = 0;
            double el = 0;
            double rate = floor_lua_call(nargs, &calls, &el);
            if (nargs == 0)
                lua[t] = rate;
            struct row r;
            row_begin(&r, "lua", "floor");
            row_str(&r, "name", nargs ? "lua_call_1arg" : "lua_call");
            row_int(&r, "trial", t + 1);
            row_int(&r, "calls", calls);
            row_num(&r, "elapsed_ms", el * 1e3, 0);
            row_num(&r, "rate_per_s", rate, 0);
            row_end(&r);
        }
    for (int t = 0; t < trials; t++) {
        long items;
        double el;
        struct latency lat;
        ring[t] = floor_ring(&items, &el, &lat);
        struct row r;
        row_begin(&r, "c", "floor");
        row_str(&r, "name", "mutex_ring");
        row_int(&r, "trial", t + 1);
        row_int(&r, "slots", RING_SLOTS);
        row_int(&r, "batch", RING_BATCH);
        row_int(&r, "items", items);
        row_num(&r, "elapsed_ms", el * 1e3, 0);
        row_num(&r, "rate_per_s", ring[t], 0);
        row_latency(&r, &lat);
        row_end(&r);
    }
    g_cfg.floor_lua = bench_median(lua, trials);
    g_cfg.floor_ring = bench_median(ring, trials);
    bench_progress("floors: lua_call %.0f/s, mutex_ring %.0f/s",
                   g_cfg.floor_lua, g_cfg.floor_ring);
}
