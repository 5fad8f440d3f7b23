/* SPDX-License-Identifier: MIT */
/*
 * path_c.c -- the C consumer's side of bench/lua_path.sh: a bus of one
 * worker, one stage (capacity 1024, policy block, concurrency 1) whose C
 * consumer only counts, and the main thread publishing N 8-byte payloads
 * with seda_publish_many, 1 000 a call (the Lua side's shape:
 * bus:publish_many of 1 000 8-byte strings).  Run under callgrind by the
 * script twice (N = 50 000 and 150 000); the difference of the worker
 * thread's instructions over 100 000 envelopes is the C consumer's figure.
 *
 *     path_c N
 *
 * Prints "published N counted N" and exits 0 when every envelope was
 * counted and the bus drained.  Links with libseda only (the script
 * builds it: cc ... bench/path_c.c build/release/libseda.a).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "seda.h"

static atomic_long g_counted;   /* relaxed: a counter only */

static bool count_consume(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    atomic_fetch_add_explicit(&g_counted, 1, memory_order_relaxed);
    return true;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    if (n <= 0) {
        fprintf(stderr, "usage: path_c N (envelopes to publish, > 0)\n");
        return 2;
    }
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 1;
    seda_bus_t *bus;
    int rc = seda_bus_new(&bo, &bus);
    if (rc) {
        fprintf(stderr, "path_c: bus: %s\n", seda_strerror(rc));
        return 1;
    }
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "s";
    so.capacity = 1024;
    so.policy = SEDA_POLICY_BLOCK;
    seda_stage_t *st;
    char err[256];
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0 ||
        seda_stage_consume(st, count_consume, NULL) < 0) {
        fprintf(stderr, "path_c: stage: %s\n", err);
        return 1;
    }
    enum { BATCH = 1000 };
    static const char payload[8] = "abcdefgh";
    const void *ps[BATCH];
    size_t lens[BATCH];
    for (int i = 0; i < BATCH; i++) {
        ps[i] = payload;
        lens[i] = sizeof payload;
    }
    long published = 0;
    while (published < n) {
        int k = n - published < BATCH ? (int)(n - published) : BATCH;
        int perr = 0;
        int done = seda_publish_many(bus, "s", ps, lens, k, NULL, &perr);
        published += done;
        if (done < k) {
            fprintf(stderr, "path_c: publish_many: %s\n",
                    seda_strerror(perr));
            return 1;
        }
    }
    rc = seda_bus_shutdown(bus, 600.0);
    long counted = atomic_load(&g_counted);
    printf("published %ld counted %ld\n", published, counted);
    seda_bus_free(bus);
    return rc == 0 && counted == published ? 0 : 1;
}
