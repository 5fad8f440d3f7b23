/* SPDX-License-Identifier: MIT */
/*
 * inst.c -- buses under test (C consumers, or Lua handlers on a bus made
 * from Lua), producer threads, and pre-encoded table payloads.
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
 *     publish.  Pacing: a 20 ms tick (or the producer's own, cap1_smooth's
 *     1 ms) publishes max(1, round(rate x tick)) back to back, then
 *     sleeps out what is left of the tick.  A window
 *     ends at its deadline even in the middle of a tick.
 *   - Counts come from the bus: total = publishes accepted, delivered = the
 *     stages' delivered counters after shutdown.  The latency sample count
 *     is a cross-check, printed only when it differs.
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

#include "harness.h"
#include "seda_lua.h"
#include "seda_lua_admin.h"

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
    if (rc != 0 && rc == p->tolerate) {
        p->tolerated++;
        return true;
    }
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
        double tk = p->tick > 0 ? p->tick : 0.02;
        long per_tick = lround(p->rate * tk);
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
            if (!stop && seda_now() < tick + tk)
                bench_sleep_until(tick + tk);
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

/* ---- table payloads ---- */

int bench_encode_table(const char *expr, unsigned char *buf, size_t cap,
                       size_t *len, int *ts_off)
{
    lua_State *L = luaL_newstate();
    seda_wbuf b = { 0 };
    char err[256];
    int rc = -1;
    if (!L)
        return -1;
    luaL_openlibs(L);
    lua_pushfstring(L, "return %s", expr);
    if (luaL_dostring(L, lua_tostring(L, -1)) != LUA_OK) {
        fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
        goto out;
    }
    if (seda__codec_encode(L, -1, &b, "payload", err, sizeof err) != 0) {
        fprintf(stderr, "bench: encode: %s\n", err);
        goto out;
    }
    double s = BENCH_TS_SENTINEL;
    uint64_t bits;
    unsigned char pat[9];
    memcpy(&bits, &s, sizeof bits);
    pat[0] = 0x03;
    for (int i = 0; i < 8; i++)
        pat[1 + i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i + sizeof pat <= b.len; i++)
        if (memcmp(b.p + i, pat, sizeof pat) == 0) {
            *ts_off = (int)i + 1;
            rc = 0;
            break;
        }
    if (rc != 0 || b.len > cap) {
        fprintf(stderr, "bench: cannot place the timestamp in %s\n", expr);
        rc = -1;
        goto out;
    }
    memcpy(buf, b.p, b.len);
    *len = b.len;
out:
    seda__codec_wbuf_free(&b);
    lua_close(L);
    return rc;
}
