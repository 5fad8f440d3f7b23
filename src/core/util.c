/* SPDX-License-Identifier: MIT */
/*
 * util.c -- the allocator hook, the monotonic clock, lock wrappers, error
 * words and enum names: small pieces every other module uses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "seda_int.h"

/* ---- allocation ---- */

/* Set once before any other call (seda_set_allocator says so), then only
 * read: no lock needed. */
static void *(*g_malloc)(size_t) = malloc;
static void *(*g_realloc)(void *, size_t) = realloc;
static void (*g_free)(void *) = free;

void seda_set_allocator(void *(*malloc_fn)(size_t),
                        void *(*realloc_fn)(void *, size_t),
                        void (*free_fn)(void *))
{
    g_malloc = malloc_fn ? malloc_fn : malloc;
    seda__custom_alloc = malloc_fn || realloc_fn || free_fn;
    g_realloc = realloc_fn ? realloc_fn : realloc;
    g_free = free_fn ? free_fn : free;
}

void *seda__malloc(size_t n) { return g_malloc(n ? n : 1); }

bool seda__custom_alloc;


void *seda__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    void *p = g_malloc(bytes ? bytes : 1);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void *seda__realloc(void *p, size_t n)
{
    return p ? g_realloc(p, n ? n : 1) : g_malloc(n ? n : 1);
}

void seda__free(void *p)
{
    if (p)
        g_free(p);
}

char *seda__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = seda__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

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

/* ---- locks ---- */

void seda__mutex_init(seda__mutex_t *mu)
{
    /* Adaptive: our critical sections are a few dozen instructions, so a
     * contended lock spins briefly before sleeping in the kernel. */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&mu->m, &a);
    pthread_mutexattr_destroy(&a);
#ifdef SEDA_DEBUG
    atomic_init(&mu->held, false);
#endif
}

void seda__mutex_destroy(seda__mutex_t *mu)
{
    pthread_mutex_destroy(&mu->m);
}

int seda__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return -rc;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return -rc;
}

int seda__cond_wait(pthread_cond_t *cv, seda__mutex_t *mu,
                    int64_t deadline_ns)
{
    SEDA__ASSERT_HELD(mu);
#ifdef SEDA_DEBUG
    atomic_store_explicit(&mu->held, false, memory_order_relaxed);
#endif
    int rc;
    if (deadline_ns == INT64_MAX) {
        rc = pthread_cond_wait(cv, &mu->m);
    } else {
        struct timespec ts = {
            .tv_sec = deadline_ns / 1000000000,
            .tv_nsec = deadline_ns % 1000000000,
        };
        rc = pthread_cond_timedwait(cv, &mu->m, &ts);
    }
#ifdef SEDA_DEBUG
    atomic_store_explicit(&mu->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&mu->held, true, memory_order_relaxed);
#endif
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

/* ---- chaos ---- */

#ifdef SEDA_DEBUG
#include <sched.h>

void seda__chaos(void)
{
    /* A cheap per-thread xorshift: yield about one time in eight. */
    static _Thread_local uint32_t x = 2463534242u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    if ((x & 7) == 0)
        sched_yield();
}
#endif

/* ---- names ---- */

bool seda__valid_name(const char *name)
{
    if (!name || !*name)
        return false;
    size_t n = 0;
    for (const char *p = name; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
              c == '-'))
            return false;
    }
    return n <= SEDA_NAME_MAX;
}

const char *seda_strerror(int rc)
{
    switch (rc) {
    case SEDA_OK: return "ok";
    case SEDA_EFULL: return "full";
    case SEDA_ETIMEDOUT: return "timeout";
    case SEDA_EDROPPED: return "dropped";
    case SEDA_EPAUSED: return "paused";
    case SEDA_ECLOSED: return "closed";
    case SEDA_ENOSTAGE: return "no_such_stage";
    case SEDA_EEXIST: return "exists";
    case SEDA_EINVAL: return "invalid";
    case SEDA_ENOMEM: return "nomem";
    case SEDA_ERANGE: return "range";
    case SEDA_ETYPE: return "type";
    case SEDA_EDUP: return "duplicate";
    case SEDA_EIO: return "io";
    case SEDA_ESHED: return "shed";
    case SEDA_EUNAVAIL: return "unavailable";
    case SEDA_ETOOLARGE: return "too_large";
    default: return "error";
    }
}

static const char *const policy_names[] = {
    "block", "reject", "drop_newest", "drop_oldest", NULL
};
static const char *const delivery_names[] = { "p2p", "pubsub", NULL };

static int parse(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

int seda_policy_parse(const char *name) { return parse(policy_names, name); }
int seda_delivery_parse(const char *name)
{
    return parse(delivery_names, name);
}

const char *seda_policy_name(int p)
{
    return p >= 0 && p <= SEDA_POLICY_DROP_OLDEST ? policy_names[p] : NULL;
}

const char *seda_delivery_name(int d)
{
    return d >= 0 && d <= SEDA_DELIVERY_PUBSUB ? delivery_names[d] : NULL;
}
