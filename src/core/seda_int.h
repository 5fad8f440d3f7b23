/* SPDX-License-Identifier: MIT */
/*
 * seda_int.h -- internals shared by the core modules.
 *
 * Allocation goes through seda__malloc & co so a test can replace the
 * allocator (seda_set_allocator) and fail the Nth allocation.  Locks are
 * wrapped so debug builds can assert who holds them.  Condition variables
 * run on CLOCK_MONOTONIC, and every wait takes a deadline.
 *
 * LOCK ORDER (global): bus->mu  ->  stage->mu  ->  pool->mu  ->  bus->idle_mu.
 * A function that takes two locks says so at its top.  No Lua code ever runs
 * while a seda lock is held.
 */
#ifndef SEDA_SEDA_INT_H
#define SEDA_SEDA_INT_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "seda.h"

#define SEDA__API __attribute__((visibility("hidden")))

#define SEDA__LIKELY(x)   __builtin_expect(!!(x), 1)
#define SEDA__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- allocation ---- */

SEDA__API void *seda__malloc(size_t n);
SEDA__API void *seda__calloc(size_t n, size_t size);
SEDA__API void *seda__realloc(void *p, size_t n);
SEDA__API void seda__free(void *p);
SEDA__API char *seda__strdup(const char *s);
/* True once seda_set_allocator installed a custom allocator (caches then
 * stand aside).  Set before any other call, then only read. */
SEDA__API extern bool seda__custom_alloc;

/* ---- time ---- */

/* Monotonic nanoseconds. */
static inline int64_t seda__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Timestamp clock in ns (TSC-backed when reliable, else the monotonic
 * clock); what seda_now() reads.  Not for deadlines. */
SEDA__API int64_t seda__clock_ns(void);

/* Deadline in monotonic ns for a timeout in seconds; < 0 means never
 * (INT64_MAX). */
SEDA__API int64_t seda__deadline(double timeout);

/* A duration of s >= 0 seconds in ns.  Past SEDA__FOREVER_S (about 31
 * years; also inf) it is SEDA__FOREVER_NS, which a monotonic clock
 * reading can still be added to without overflow: a timeout that large
 * never fires. */
#define SEDA__FOREVER_S 1e9
#define SEDA__FOREVER_NS (INT64_MAX / 2)
static inline int64_t seda__secs_to_ns(double s)
{
    return s >= SEDA__FOREVER_S ? SEDA__FOREVER_NS : (int64_t)(s * 1e9);
}

/* ---- locks ---- */

typedef struct seda__mutex {
    pthread_mutex_t m;
#ifdef SEDA_DEBUG
    _Atomic(pthread_t) owner;   /* holder, for asserts (relaxed) */
    atomic_bool held;           /* relaxed; debug only */
#endif
} seda__mutex_t;

SEDA__API void seda__mutex_init(seda__mutex_t *mu);
SEDA__API void seda__mutex_destroy(seda__mutex_t *mu);

static inline void seda__mutex_lock(seda__mutex_t *mu)
{
    pthread_mutex_lock(&mu->m);
#ifdef SEDA_DEBUG
    atomic_store_explicit(&mu->owner, pthread_self(), memory_order_relaxed);
    atomic_store_explicit(&mu->held, true, memory_order_relaxed);
#endif
}

static inline void seda__mutex_unlock(seda__mutex_t *mu)
{
#ifdef SEDA_DEBUG
    atomic_store_explicit(&mu->held, false, memory_order_relaxed);
#endif
    pthread_mutex_unlock(&mu->m);
}

#ifdef SEDA_DEBUG
/* True when the calling thread holds mu.  For assert() only. */
static inline bool seda__mutex_held(seda__mutex_t *mu)
{
    return atomic_load_explicit(&mu->held, memory_order_relaxed) &&
           pthread_equal(atomic_load_explicit(&mu->owner,
                                              memory_order_relaxed),
                         pthread_self());
}
#define SEDA__ASSERT_HELD(mu) assert(seda__mutex_held(mu))
#else
#define SEDA__ASSERT_HELD(mu) ((void)0)
#endif

/* Condition variable on CLOCK_MONOTONIC. */
SEDA__API int seda__cond_init(pthread_cond_t *cv);

/* Wait on cv (mu held) until signalled or deadline_ns passes.  Returns 0
 * when woken (possibly spuriously), ETIMEDOUT past the deadline.  Callers
 * loop on their predicate. */
SEDA__API int seda__cond_wait(pthread_cond_t *cv, seda__mutex_t *mu,
                              int64_t deadline_ns);

/* ---- chaos ----
 * In debug builds (make asan / tsan), SEDA__CHAOS() marks a point inside a
 * lock-free hand-off where a thread sometimes yields, widening race
 * windows so the tests that target them (test_stage_inbox_*) hit them.
 * Compiled out of release builds. */
#ifdef SEDA_DEBUG
SEDA__API void seda__chaos(void);
#define SEDA__CHAOS() seda__chaos()
#else
#define SEDA__CHAOS() ((void)0)
#endif

/* A spin-wait hint to the CPU. */
static inline void seda__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Start fetching the cache line at p for writing.  __builtin_prefetch(p, 1)
 * emits a read prefetch on baseline x86-64, which leaves a line another
 * core wrote in the shared state, so the store still waits for the
 * other core to let it go; PREFETCHW asks for it exclusive.  (A no-op on
 * the few x86-64 CPUs without it.) */
static inline void seda__prefetchw(const void *p)
{
#if defined(__x86_64__)
    __asm__ __volatile__("prefetchw %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p, 1, 3);
#endif
}

/* ---- misc ---- */

/* True when name matches [A-Za-z0-9_.:-]{1,SEDA_NAME_MAX}. */
SEDA__API bool seda__valid_name(const char *name);

#endif /* SEDA_SEDA_INT_H */
