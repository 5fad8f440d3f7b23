/* SPDX-License-Identifier: MIT */
/*
 * count.c -- the C API by example: one stage, one C consumer, a routing
 * slip and a completion callback.  Built by `make` (build/<variant>/
 * examples/count); the README shows it.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "seda.h"

static atomic_long counted;     /* relaxed: a counter only */
static atomic_long completed;   /* relaxed: a counter only */

static bool count(seda_env_t *env, void *ud)
{
    (void)ud;
    size_t len;
    (void)seda_env_payload(env, &len);
    if (len == 0)
        return false;                   /* nack: empty payloads retry */
    atomic_fetch_add_explicit(&counted, 1, memory_order_relaxed);
    /* Headers set here travel to the next hop. */
    return seda_env_set_header(env, "counted", "yes") == 0;
}

static bool sink(seda_env_t *env, void *ud)
{
    (void)ud;
    return seda_env_header(env, "counted") != NULL;
}

static void done(seda_env_t *env, int outcome, void *ud)
{
    (void)env;
    (void)ud;
    if (outcome == SEDA_COMPLETED)
        atomic_fetch_add_explicit(&completed, 1, memory_order_relaxed);
}

int main(void)
{
    seda_bus_t *bus;
    int rc = seda_bus_new(NULL, &bus);          /* workers = CPUs */
    if (rc) {
        fprintf(stderr, "bus: %s\n", seda_strerror(rc));
        return 1;
    }
    char err[256];
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "count";
    so.max_attempts = 3;
    seda_stage_t *st;
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0 ||
        seda_stage_consume(st, count, NULL) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    so.name = "sink";
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0 ||
        seda_stage_consume(st, sink, NULL) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }

    const char *slip[] = { "sink" };
    seda_publish_opts po;
    seda_publish_opts_init(&po);
    po.slip = slip;
    po.nslip = 1;
    po.done = done;
    for (int i = 0; i < 1000; i++) {
        char msg[32];
        int n = snprintf(msg, sizeof msg, "event %d", i);
        if ((rc = seda_publish(bus, "count", msg, (size_t)n, &po)) != 0)
            fprintf(stderr, "publish: %s\n", seda_strerror(rc));
    }
    rc = seda_bus_shutdown(bus, 5.0);           /* 0 when fully drained */
    seda_bus_stats bs;
    seda_bus_stats_get(bus, &bs);
    printf("drained=%s counted=%ld completed=%ld accepted=%llu\n",
           rc == 0 ? "yes" : "no", atomic_load(&counted),
           atomic_load(&completed), (unsigned long long)bs.accepted);
    seda_bus_free(bus);
    return rc == 0 && bs.completed == 1000 ? 0 : 1;
}
