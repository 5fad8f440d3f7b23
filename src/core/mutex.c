/* SPDX-License-Identifier: MIT */
/*
 * mutex.c -- the lock wrappers (an owner recorded in debug builds for
 * SEDA__ASSERT_HELD), condition variables on the monotonic clock with
 * deadlines, and the debug builds' chaos yield that shakes schedules at
 * the points that matter (SEDA__CHAOS).
 */
#include <errno.h>
#include <string.h>

#include "seda_int.h"

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

