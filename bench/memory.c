/* SPDX-License-Identifier: MIT */
/*
 * memory.c -- config `memory`: N envelopes held in one stage whose only
 * consumer is blocked on a gate; bytes per envelope = RSS growth from
 * before the bus was made (after malloc_trim) to after the last publish,
 * over N.  The queue's ring is included, as it is part of what holding N
 * costs.
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
