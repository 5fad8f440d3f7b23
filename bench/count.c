/* SPDX-License-Identifier: MIT */
/*
 * count.c -- the C runtime's own throughput check (config `count`,
 * not part of the reference workload).
 *
 * One producer thread -> one stage (capacity 1024, policy block,
 * concurrency 1) -> a C consumer that only counts; then two producers into
 * one stage with concurrency 2.  The same with a Lua handler that reads
 * env.payload and acks (handler "lua": issue 3's figure, reported beside
 * the empty-Lua-call floor of the same run).  Each trial publishes 8-byte timestamps
 * (written just before each publish) for the calibration window (2 s; 0.3 s
 * with --quick) on a fresh bus, then shuts down; the clock runs from the
 * first publish until shutdown reports drained.  Five trials per producer
 * count (two with --quick), one and two producers alternating; bench/report
 * shows the median.
 *
 * Unlike the cap1 rows, the consumer records no latency: this is the
 * bus's hand-off rate, which cap1's C rows also pay a clock read and an
 * array store per envelope on top of.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "families.h"
#include "harness.h"

static atomic_long g_counted;

static bool count_consume(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    atomic_fetch_add_explicit(&g_counted, 1, memory_order_relaxed);
    return true;
}

struct count_prod {
    pthread_t th;
    seda_stage_t *st;
    double start, end;          /* seda_now() times */
    long published;
    int err;
};

static void *count_producer(void *arg)
{
    struct count_prod *p = arg;
    bench_sleep_until(p->start);
    for (;;) {
        /* Look at the clock once per 256 publishes, as a tight loop would. */
        for (int i = 0; i < 256; i++) {
            double ts = seda_now();
            int rc = seda_stage_publish(p->st, &ts, sizeof ts, NULL);
            if (rc != 0) {
                p->err = rc;
                return NULL;
            }
            p->published++;
        }
        if (seda_now() >= p->end)
            return NULL;
    }
}

/* The stage under test ("bench", from inst_open): C -- count_consume;
 * Lua -- the handler file hfile. */
static void count_trial(const char *hfile, int np, int trial, double window)
{
    struct inst in;
    if (inst_open(&in, hfile != NULL, NULL, hfile, 1, 1024, np,
                  count_consume) != 0)
        return;
    seda_stage_t *st = in.st[0];
    atomic_store(&g_counted, 0);
    struct count_prod p[2];
    memset(p, 0, sizeof p);
    double start = seda_now() + 0.01;
    int started = 0;
    for (int i = 0; i < np; i++) {
        p[i].st = st;
        p[i].start = start;
        p[i].end = start + window;
        if (pthread_create(&p[i].th, NULL, count_producer, &p[i]) != 0)
            break;
        started++;
    }
    long published = 0;
    int perr = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(p[i].th, NULL);
        published += p[i].published;
        if (p[i].err)
            perr = p[i].err;
    }
    int drained = inst_shutdown(&in, 60);
    double elapsed = seda_now() - start;
    long counted = hfile ? inst_delivered(&in) : atomic_load(&g_counted);
    inst_close(&in);

    double thr = (double)published / elapsed;
    struct row r;
    row_begin(&r, hfile ? "lua" : "c", "count");
    row_int(&r, "trial", trial);
    row_int(&r, "producers", np);
    row_int(&r, "concurrency", np);
    row_int(&r, "capacity", 1024);
    row_int(&r, "total", published);
    row_int(&r, "delivered", counted);
    row_int(&r, "elapsed_ms", (long long)(elapsed * 1e3 + 0.5));
    row_num(&r, "throughput_eps", thr, 0);
    row_bool(&r, "drained", drained == 0 && counted == published &&
                            started == np && perr == 0);
    row_int(&r, "workers", g_cfg.cpus);
    if (hfile) {
        row_str(&r, "floor", "lua_call");
        row_num(&r, "floor_ratio",
                g_cfg.floor_lua > 0 ? thr / g_cfg.floor_lua : 0, 4);
    }
    row_end(&r);
}

void bench_count(void)
{
    int trials = g_cfg.quick ? 2 : 5;
    double window = g_cfg.calib_s;
    char *hfile = NULL;
    if (g_cfg.want_lua) {
        hfile = bench_write_file("h_count.lua",
                                 "return function(env)\n"
                                 "  local p = env.payload\n"
                                 "end\n");
        if (!hfile)
            return;
    }
    for (int h = 0; h < 2; h++) {
        if (h == 0 ? !g_cfg.want_c : !hfile)
            continue;
        /* One and two producers alternate, so a machine that speeds up
         * or slows down over the minute favours neither. */
        for (int t = 1; t <= trials; t++)
            for (int np = 1; np <= 2; np++) {
                bench_progress("count/%s P=%d trial %d/%d", h ? "lua" : "c",
                               np, t, trials);
                count_trial(h ? hfile : NULL, np, t, window);
            }
    }
    free(hfile);
}
