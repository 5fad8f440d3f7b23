/* SPDX-License-Identifier: MIT */
/*
 * clock.c -- time: the monotonic clock for deadlines, and the cheaper
 * TSC-based one for timestamps where the CPU's TSC can be trusted.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "seda_int.h"

/* ---- time ---- */

/* A cheaper clock for timestamps.  clock_gettime costs ~30 ns on a VM with
 * kvm-clock, and every publish takes a timestamp; the TSC costs ~10 ns.
 * When the CPU says its TSC is constant and never stops, it is calibrated
 * once against CLOCK_MONOTONIC over 5 ms and used for seda_now() and
 * envelope timestamps.  Deadlines handed to condition variables keep using
 * CLOCK_MONOTONIC itself (seda__now_ns), so calibration error never skews
 * a timeout.  Written once under pthread_once, then only read. */
static struct {
    double ns_per_tick;
    uint64_t tick0;
    int64_t ns0;
    bool ok;
} g_tsc;
static pthread_once_t g_tsc_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
#include <stdio.h>
#include <x86intrin.h>

static bool tsc_reliable(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return false;
    char line[4096];
    bool constant = false, nonstop = false;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    return constant && nonstop;
}

/* One (TSC, CLOCK_MONOTONIC) pair: the clock read bracketed by two TSC
 * reads, the tightest bracket of a few tries, its midpoint. */
static void tsc_sample(uint64_t *tsc, int64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) {
        uint64_t t1 = __rdtsc();
        int64_t n = seda__now_ns();
        uint64_t t2 = __rdtsc();
        if (t2 > t1 && t2 - t1 < best) {
            best = t2 - t1;
            *tsc = t1 + (t2 - t1) / 2;
            *ns = n;
        }
    }
}

static void tsc_init(void)
{
    if (!tsc_reliable())
        return;
    /* 5 ms between two tight samples: a few ns of read jitter against
     * 5 ms is a few ppm (a single 2 ms span with loose reads measured
     * 115 ppm fast on a VM: 11 ms after 100 s). */
    uint64_t ta = 0, tb = 0;
    int64_t a = 0, b = 0;
    tsc_sample(&ta, &a);
    while (seda__now_ns() - a < 5000000)
        ;
    tsc_sample(&tb, &b);
    if (tb <= ta || b <= a)
        return;
    g_tsc.ns_per_tick = (double)(b - a) / (double)(tb - ta);
    g_tsc.tick0 = tb;
    g_tsc.ns0 = b;
    g_tsc.ok = true;
}

/* 0: not calibrated yet, 1: TSC, 2: fall back.  Release after g_tsc is
 * written (in tsc_once), acquire here. */
static atomic_int g_tsc_state;

static void tsc_once(void)
{
    tsc_init();
    atomic_store_explicit(&g_tsc_state, g_tsc.ok ? 1 : 2,
                          memory_order_release);
}

int64_t seda__clock_ns(void)
{
    int state = atomic_load_explicit(&g_tsc_state, memory_order_acquire);
    if (SEDA__UNLIKELY(state == 0)) {
        pthread_once(&g_tsc_once, tsc_once);
        state = atomic_load_explicit(&g_tsc_state, memory_order_acquire);
    }
    if (state != 1)
        return seda__now_ns();
    return g_tsc.ns0 + (int64_t)((double)(int64_t)(__rdtsc() - g_tsc.tick0)
                                 * g_tsc.ns_per_tick);
}
#else
int64_t seda__clock_ns(void)
{
    (void)g_tsc_once;
    (void)g_tsc;
    return seda__now_ns();
}
#endif

double seda_now(void)
{
    return (double)seda__clock_ns() / 1e9;
}

int64_t seda__deadline(double timeout)
{
    if (timeout < 0 || timeout >= SEDA__FOREVER_S)
        return INT64_MAX;
    return seda__now_ns() + (int64_t)(timeout * 1e9);
}

