/* SPDX-License-Identifier: MIT */
/*
 * testutil.h -- shared helpers for the cmocka tests of the bus contract.
 *
 * Concurrency tests never order events with sleeps and never hang: a
 * consumer that must be held blocks on a gate until the test opens it, the
 * test waits for events on latches and counters, and every wait takes a
 * deadline.  A missed deadline is reported to the caller (false), which
 * fails the test with a message.  Waits on the test thread use
 * TU_WAIT(...), which fails the running test when the deadline passes.
 *
 * Nothing here calls cmocka from a non-test thread: consumers and done
 * callbacks record what they saw in mutex-protected or atomic state, and
 * the test thread checks it.
 *
 * All helpers are static inline so each test file gets its own copy and
 * unused ones cost nothing.
 */
#ifndef SEDA_TESTUTIL_H
#define SEDA_TESTUTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "seda.h"

/* Seconds every wait gets before the test is failed. */
#define TU_DEADLINE 10.0

/* Fail the running test unless cond_expr (a call returning bool) is true;
 * what describes the event that did not happen. */
#define TU_WAIT(cond_expr, what)                                          \
    do {                                                                  \
        if (!(cond_expr))                                                 \
            fail_msg("deadline of %.0f s passed waiting for %s",          \
                     (double)TU_DEADLINE, (what));                        \
    } while (0)

/* ---- time ---- */

static inline void tu_abstime(double timeout, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(long)timeout;
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((timeout - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec += 1;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Busy-wait for secs on the monotonic clock: a per-envelope cost inside a
 * consumer, never a way to order events. */
static inline void tu_spin(double secs)
{
    double end = seda_now() + secs;
    while (seda_now() < end) {
    }
}

static inline void tu_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* ---- gate: closed until opened; waiters block on it ---- */

typedef struct tu_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;        /* guarded by mu */
    int waiting;      /* threads blocked in tu_gate_wait; guarded by mu */
    int entered;      /* total calls of tu_gate_wait; guarded by mu */
} tu_gate;

static inline void tu_gate_init(tu_gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    tu_cond_init(&g->cv);
    g->open = false;
    g->waiting = 0;
    g->entered = 0;
}

static inline void tu_gate_destroy(tu_gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static inline void tu_gate_open(tu_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static inline void tu_gate_close(tu_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = false;
    pthread_mutex_unlock(&g->mu);
}

/* Block until the gate is open; false if timeout passed first. */
static inline bool tu_gate_wait(tu_gate *g, double timeout)
{
    struct timespec ts;
    tu_abstime(timeout, &ts);
    bool ok = true;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    g->waiting++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) != 0 && !g->open) {
            ok = false;
            break;
        }
    }
    g->waiting--;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* Wait until at least n threads are blocked in (or have entered) the gate. */
static inline bool tu_gate_wait_waiters(tu_gate *g, int n, double timeout)
{
    struct timespec ts;
    tu_abstime(timeout, &ts);
    bool ok = true;
    pthread_mutex_lock(&g->mu);
    while (g->waiting < n) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) != 0 &&
            g->waiting < n) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* ---- counter: an event count the test can wait on ---- */

typedef struct tu_counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long n;           /* guarded by mu */
} tu_counter;

static inline void tu_counter_init(tu_counter *c)
{
    pthread_mutex_init(&c->mu, NULL);
    tu_cond_init(&c->cv);
    c->n = 0;
}

static inline void tu_counter_destroy(tu_counter *c)
{
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

static inline long tu_counter_add(tu_counter *c, long d)
{
    pthread_mutex_lock(&c->mu);
    c->n += d;
    long v = c->n;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return v;
}

static inline long tu_counter_get(tu_counter *c)
{
    pthread_mutex_lock(&c->mu);
    long v = c->n;
    pthread_mutex_unlock(&c->mu);
    return v;
}

/* Wait until the count is at least n; false if timeout passed first. */
static inline bool tu_counter_wait_ge(tu_counter *c, long n, double timeout)
{
    struct timespec ts;
    tu_abstime(timeout, &ts);
    bool ok = true;
    pthread_mutex_lock(&c->mu);
    while (c->n < n) {
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0 && c->n < n) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* ---- latch: counts down to zero once ---- */

typedef tu_counter tu_latch;

static inline void tu_latch_init(tu_latch *l, long count)
{
    tu_counter_init(l);
    l->n = count;
}

static inline void tu_latch_count_down(tu_latch *l)
{
    tu_counter_add(l, -1);
}

static inline bool tu_latch_wait(tu_latch *l, double timeout)
{
    struct timespec ts;
    tu_abstime(timeout, &ts);
    bool ok = true;
    pthread_mutex_lock(&l->mu);
    while (l->n > 0) {
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) != 0 && l->n > 0) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

/* ---- rendezvous: n parties meet; proves n workers run at once ---- */

typedef struct tu_rendezvous {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int parties;      /* immutable */
    int arrived;      /* guarded by mu */
} tu_rendezvous;

static inline void tu_rendezvous_init(tu_rendezvous *r, int parties)
{
    pthread_mutex_init(&r->mu, NULL);
    tu_cond_init(&r->cv);
    r->parties = parties;
    r->arrived = 0;
}

static inline void tu_rendezvous_destroy(tu_rendezvous *r)
{
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

/* Arrive and wait for the others; false on timeout. */
static inline bool tu_rendezvous_arrive(tu_rendezvous *r, double timeout)
{
    struct timespec ts;
    tu_abstime(timeout, &ts);
    bool ok = true;
    pthread_mutex_lock(&r->mu);
    r->arrived++;
    pthread_cond_broadcast(&r->cv);
    while (r->arrived < r->parties) {
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0 &&
            r->arrived < r->parties) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* ---- id set: thread-safe multiset of 64-bit ids ---- */

typedef struct tu_idset {
    pthread_mutex_t mu;
    uint64_t *keys;   /* open addressing; guarded by mu */
    uint8_t *used;    /* slot occupied; guarded by mu */
    uint32_t *counts; /* times each key was added; guarded by mu */
    size_t cap;       /* power of two; guarded by mu */
    size_t size;      /* distinct keys; guarded by mu */
    size_t dups;      /* adds of a key already present; guarded by mu */
} tu_idset;

static inline void tu_idset_init(tu_idset *s)
{
    pthread_mutex_init(&s->mu, NULL);
    s->cap = 1024;
    s->keys = calloc(s->cap, sizeof *s->keys);
    s->used = calloc(s->cap, sizeof *s->used);
    s->counts = calloc(s->cap, sizeof *s->counts);
    s->size = 0;
    s->dups = 0;
}

static inline void tu_idset_destroy(tu_idset *s)
{
    free(s->keys);
    free(s->used);
    free(s->counts);
    pthread_mutex_destroy(&s->mu);
}

static inline size_t tu_idset_slot(const uint64_t *keys,
                                   const uint8_t *used, size_t cap,
                                   uint64_t key)
{
    uint64_t h = (key ^ (key >> 29)) * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (cap - 1);
    while (used[i] && keys[i] != key)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Add key; returns how many times it has now been added (1 = first). */
static inline uint32_t tu_idset_add(tu_idset *s, uint64_t key)
{
    pthread_mutex_lock(&s->mu);
    if ((s->size + 1) * 2 > s->cap) {
        size_t ncap = s->cap * 2;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        uint8_t *nu = calloc(ncap, sizeof *nu);
        uint32_t *nc = calloc(ncap, sizeof *nc);
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->used[i])
                continue;
            size_t j = tu_idset_slot(nk, nu, ncap, s->keys[i]);
            nk[j] = s->keys[i];
            nu[j] = 1;
            nc[j] = s->counts[i];
        }
        free(s->keys);
        free(s->used);
        free(s->counts);
        s->keys = nk;
        s->used = nu;
        s->counts = nc;
        s->cap = ncap;
    }
    size_t i = tu_idset_slot(s->keys, s->used, s->cap, key);
    if (!s->used[i]) {
        s->keys[i] = key;
        s->used[i] = 1;
        s->size++;
    } else {
        s->dups++;
    }
    uint32_t n = ++s->counts[i];
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Times key was added (0 = never). */
static inline uint32_t tu_idset_count(tu_idset *s, uint64_t key)
{
    pthread_mutex_lock(&s->mu);
    size_t i = tu_idset_slot(s->keys, s->used, s->cap, key);
    uint32_t n = s->used[i] ? s->counts[i] : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static inline size_t tu_idset_size(tu_idset *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->size;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static inline size_t tu_idset_dups(tu_idset *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->dups;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- process resources (for leak checks) ---- */

/* Threads of this process from /proc/self/status; -1 if unreadable. */
static inline int tu_thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "Threads:", 8) == 0) {
            n = atoi(line + 8);
            break;
        }
    }
    fclose(f);
    return n;
}

/* The kernel clears a joined thread's tid before it drops the thread from
 * /proc/self/task, so a count read right after pthread_join may still see
 * it: wait, up to timeout seconds, for the count to become want. */
static inline bool tu_wait_threads(int want, double timeout)
{
    double end = seda_now() + timeout;
    while (tu_thread_count() != want) {
        if (seda_now() > end)
            return false;
        struct timespec nap = {0, 1000000}; /* polling back-off only */
        nanosleep(&nap, NULL);
    }
    return true;
}

/* Open file descriptors (entries of /proc/self/fd, minus the one opendir
 * itself holds); -1 if unreadable. */
static inline int tu_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.')
            n++;
    }
    closedir(d);
    return n - 1;
}

/* ---- stats polling ---- */

/* Poll a stage's stats until pred holds or timeout passes (a wait with a
 * deadline for a state the public API only exposes through stats). */
static inline bool tu_stage_wait(seda_stage_t *st,
                                 bool (*pred)(const seda_stage_stats *, long),
                                 long arg, double timeout)
{
    double end = seda_now() + timeout;
    seda_stage_stats s;
    for (;;) {
        seda_stage_stats_get(st, &s);
        if (pred(&s, arg))
            return true;
        if (seda_now() > end)
            return false;
        struct timespec nap = {0, 200000}; /* polling back-off only */
        nanosleep(&nap, NULL);
    }
}

static inline bool tu_pred_in_flight_eq(const seda_stage_stats *s, long n)
{
    return s->in_flight == n;
}

static inline bool tu_pred_depth_eq(const seda_stage_stats *s, long n)
{
    return s->depth == n;
}

/* Payload helpers: envelopes in these tests carry a uint64 or a string. */
static inline uint64_t tu_env_u64(seda_env_t *env)
{
    size_t len = 0;
    const void *p = seda_env_payload(env, &len);
    uint64_t v = UINT64_MAX;
    if (p != NULL && len == sizeof v)
        memcpy(&v, p, sizeof v);
    return v;
}

static inline int tu_publish_u64(seda_bus_t *bus, const char *to, uint64_t v,
                                 const seda_publish_opts *o)
{
    return seda_publish(bus, to, &v, sizeof v, o);
}

/* Iterations for stress loops: small by default, large with STRESS=1. */
static inline int tu_iterations(int normal, int stress)
{
    const char *s = getenv("STRESS");
    return (s != NULL && s[0] != '\0' && strcmp(s, "0") != 0) ? stress
                                                               : normal;
}

/* ---- sockets ---- */

/* A TCP socket listening on 127.0.0.1 at a free port (*port), with room
 * for backlog connections not yet accepted; fails the running test when
 * it cannot be made.  The caller closes it.  Test thread only. */
static inline int tu_listen_loopback(int backlog, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail_msg("socket: %s", strerror(errno));
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, backlog) != 0)
        fail_msg("listening on 127.0.0.1: %s", strerror(errno));
    socklen_t alen = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
        fail_msg("getsockname: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}

#endif /* SEDA_TESTUTIL_H */
