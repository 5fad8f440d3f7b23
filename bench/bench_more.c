/* SPDX-License-Identifier: MIT */
/*
 * bench_more.c -- the configs beyond the reference workload: codec,
 * pipeline, memory; and the pre-encoded table payloads they share with
 * cap1_table.
 *
 * DESIGN
 *   - Table payloads are encoded once, before any clock, with the bus's own
 *     codec; the float that carries the timestamp is found by its sentinel
 *     value and overwritten in place before each publish (floats are always
 *     tag 0x03 + 8 little-endian bytes, so the length never changes).
 *   - codec: encode + decode of the 5-field record in one lua_State set up
 *     as a worker's (seda__lw_newstate: the workers' small-block allocator
 *     and generational collector), one output buffer reused, the decoded
 *     copy dropped each round so the collector's work is counted -- what
 *     a hop costs a Lua handler.
 *   - pipeline: stages p1..p4 with a Lua handler that increments p.n and
 *     assigns env.payload; the slip {p2, p3, p4}; a C done callback counts
 *     completions, checks n == 4 in the final bytes and records the
 *     itinerary latency from the envelope's publish time.
 *   - memory: N envelopes held in one stage whose only consumer is blocked
 *     on a gate; bytes per envelope = RSS growth from before the bus was
 *     made (after malloc_trim) to after the last publish, over N.  The
 *     queue's ring is included, as it is part of what holding N costs.
 */
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bench.h"
#include "lua/lcodec.h"
#include "lua/lseda.h"

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
    seda__wbuf_free(&b);
    lua_close(L);
    return rc;
}

/* ---- codec ---- */

void bench_codec(void)
{
    long iters = g_cfg.quick ? 100000 : 1000000;
    int trials = g_cfg.quick ? 1 : 3;
    /* A state like a handler's: the workers' allocator and collector. */
    lua_State *L = seda__lw_newstate();
    seda_wbuf b = { 0 };
    char err[256];
    if (!L)
        return;
    if (luaL_dostring(L, "return {id = 12345, name = 'sensor-17', "
                         "value = 21.5, ok = true, tags = 'a,b'}") != 0) {
        fprintf(stderr, "bench: %s\n", lua_tostring(L, -1));
        seda__lw_closestate(L);
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
    seda__wbuf_free(&b);
    seda__lw_closestate(L);
}

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

static void pipeline_trial(const char *hfile, int np, int trial,
                           const unsigned char *tmpl, size_t len, int off)
{
    static const char *const slip[] = { "p2", "p3", "p4" };
    long total = g_cfg.quick ? 20000 : 100000;
    struct inst in;
    struct prod p[INST_MAX_STAGES];

    atomic_store(&g_pipe_done, 0);
    atomic_store(&g_pipe_failed, 0);
    atomic_store(&g_pipe_bad, 0);
    rec_reset();
    if (inst_open(&in, true, PIPE_CHUNK, hfile, 4, 262144, np, NULL) != 0)
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
        p[i].slip = slip;
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
    row_begin(&r, "lua", "pipeline");
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
    row_str(&r, "floor", "lua_call");
    row_num(&r, "floor_ratio",
            g_cfg.floor_lua > 0 ? (double)hops / elapsed / g_cfg.floor_lua
                                : 0, 4);
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
    for (int i = 0; i < (ps[1] > 1 ? 2 : 1); i++)
        for (int t = 0; t < trials; t++) {
            bench_progress("pipeline/lua P=%d trial %d/%d", ps[i], t + 1,
                           trials);
            pipeline_trial(hfile, ps[i], t + 1, tmpl, len, off);
        }
    free(hfile);
}

/* ---- memory ---- */

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;                  /* guarded by mu */
};

static bool gate_consume(seda_env_t *env, void *ud)
{
    struct gate *g = (struct gate *)seda_stage_userdata(seda_env_stage(env));
    (void)ud;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return true;
}

static long rss_bytes(void)
{
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * sysconf(_SC_PAGESIZE);
}

static void memory_trial(const char *kind_name, const unsigned char *payload,
                         size_t len, int kind)
{
    const long N = 1000000;
    struct gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                      false };
    struct inst in;

    bench_progress("memory %s: %ld envelopes", kind_name, N);
    rec_reset();
    malloc_trim(0);
    long rss0 = rss_bytes();
    if (inst_open(&in, false, NULL, NULL, 1, (int)N, 1, gate_consume) != 0)
        return;
    seda_stage_set_userdata(in.st[0], &g);
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.timeout = 5;
    o.kind = kind;
    long published = 0;
    int err = 0;
    for (long i = 0; i < N; i++) {
        int rc = seda_stage_publish(in.st[0], payload, len, &o);
        if (rc != 0) {
            err = rc;
            break;
        }
        published++;
    }
    long rss1 = rss_bytes();
    seda_stage_stats s;
    seda_stage_stats_get(in.st[0], &s);
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    int rc = inst_shutdown(&in, 60);
    long delivered = inst_delivered(&in);
    inst_close(&in);

    struct row r;
    row_begin(&r, "c", "memory");
    row_int(&r, "trial", 1);
    row_str(&r, "payload", kind_name);
    row_int(&r, "payload_bytes", (long long)len);
    row_int(&r, "headers", 0);
    row_int(&r, "count", published);
    row_int(&r, "capacity", N);
    row_int(&r, "depth", s.depth);
    row_int(&r, "in_flight", s.in_flight);
    row_int(&r, "rss_delta_bytes", rss1 - rss0);
    row_num(&r, "bytes_per_envelope",
            published ? (double)(rss1 - rss0) / (double)published : 0, 1);
    row_int(&r, "delivered", delivered);
    row_bool(&r, "drained", rc == 0);
    if (err)
        row_str(&r, "publish_error", seda_strerror(err));
    row_end(&r);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
}

void bench_memory(void)
{
    unsigned char tmpl[256];
    size_t len;
    int off;
    if (bench_encode_table("{id = 12345, name = 'sensor-17', value = "
                           "12345.678901, ok = true, tags = 'a,b'}",
                           tmpl, sizeof tmpl, &len, &off) == 0)
        memory_trial("table5", tmpl, len, 1);
    double raw = 1.0;
    memory_trial("raw8", (const unsigned char *)&raw, sizeof raw, 0);
}
