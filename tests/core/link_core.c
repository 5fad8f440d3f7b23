/* SPDX-License-Identifier: MIT */
/*
 * link_core.c -- a C program that uses only the core and seda.h, linked
 * against libseda.a with nothing but -lpthread -lm (no SQLite): `make
 * test` builds it so (the Makefile's rule for it says how) and runs it.
 * It checks that in-memory stages work and that a durable stage, whose
 * journal this program does not link, is refused with a message that
 * says how to get one.  Exits 0 when both hold.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "seda.h"

static atomic_int handled;      /* relaxed: a counter only */

static bool take(seda_env_t *env, void *ud)
{
    (void)env;
    (void)ud;
    atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
    return true;
}

int main(void)
{
    seda_bus_opts bo;
    seda_bus_opts_init(&bo);
    bo.workers = 2;
    seda_bus_t *bus;
    if (seda_bus_new(&bo, &bus) != 0) {
        fprintf(stderr, "link_core: seda_bus_new failed\n");
        return 1;
    }
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "mem";
    char err[256];
    seda_stage_t *st;
    if (seda_stage_add(bus, &so, &st, err, sizeof err) != 0) {
        fprintf(stderr, "link_core: %s\n", err);
        return 1;
    }
    seda_stage_consume(st, take, NULL);
    for (int i = 0; i < 100; i++)
        if (seda_publish(bus, "mem", "x", 1, NULL) != 0) {
            fprintf(stderr, "link_core: publish %d refused\n", i);
            return 1;
        }
    so.name = "kept";
    so.durable = SEDA_AT_LEAST_ONCE;
    int rc = seda_stage_add(bus, &so, &st, err, sizeof err);
    bool refused = rc == SEDA_EINVAL &&
                   strstr(err, "seda_bus_open_journal") != NULL;
    bool drained = seda_bus_shutdown(bus, 10.0) == 0;
    int n = atomic_load_explicit(&handled, memory_order_relaxed);
    seda_bus_free(bus);
    if (!refused) {
        fprintf(stderr, "link_core: a durable stage without the journal: "
                "rc %d, \"%s\" (want SEDA_EINVAL naming "
                "seda_bus_open_journal)\n", rc, err);
        return 1;
    }
    if (!drained || n != 100) {
        fprintf(stderr, "link_core: drained %d, handled %d of 100\n",
                drained, n);
        return 1;
    }
    printf("link_core: 100 handled, durable refused without the journal: "
           "%s\n", err);
    return 0;
}
