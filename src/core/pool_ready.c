/* SPDX-License-Identifier: MIT */
/*
 * pool_ready.c -- the pool's side of readiness (SPEC.md section 16): who
 * waits for it (an idle worker in epoll_wait, a busy one looking between
 * tasks), the keeper that looks while every worker is inside a task, and
 * the watch and look entry points.  See pool.c's DESIGN; the fields are
 * struct seda_pool's (pool_int.h), guarded as it says.
 */
#include "pool_int.h"

/* Wake the worker waiting for readiness (mu held); not when that is the
 * caller (running what it got: it looks again before it waits). */
void kick(struct seda_pool *p)
{
    if (p->poller && !p->kicked && p->poller != tls_worker) {
        p->kicked = true;
        seda__ready_kick(p->rd);
    }
}

/* Whether an idle worker should wait for readiness (mu held): watches
 * are registered and nobody waits for them. */
bool poll_wanted(const struct seda_pool *p)
{
    return p->rd && !p->poller && seda__ready_any(p->rd);
}

/* Wait for readiness until due (or a look, when due is now), run what
 * came (mu held; dropped while waiting and running).  Returns how many
 * events came. */
int poll_ready(struct seda_pool *p, struct seda_worker_s *w,
                      int64_t due)
{
    int ms = -1;
    if (due != INT64_MAX) {
        int64_t left = due - seda__now_ns();
        ms = left <= 0 ? 0 : left / 1000000 >= INT32_MAX ? INT32_MAX
                                                        : (int)((left + 999999) / 1000000);
    }
    p->poller = w;
    p->poller_waits = ms != 0;
    p->kicked = false;
    struct seda_ready *rd = p->rd;
    seda__mutex_unlock(&p->mu);
    struct epoll_event evs[READY_BATCH];
    int n = seda__ready_wait(rd, evs, READY_BATCH, ms);
    if (n > 0)
        seda__ready_dispatch(rd, evs, n);
    atomic_store_explicit(&p->looked_ns, seda__now_ns(),
                          memory_order_relaxed);
    seda__mutex_lock(&p->mu);
    p->poller = NULL;
    return n;
}

/* Whether the keeper should watch (mu held): readiness is watched, no
 * worker is parked (to wait for it later) and none waits for it now. */
static bool keep_wanted(const struct seda_pool *p)
{
    return p->rd && p->idle == 0 && !(p->poller && p->poller_waits) &&
           seda__ready_any(p->rd);
}

/* The keeper (see DESIGN).  Asleep until a worker takes a task and leaves
 * nobody to wait for readiness (keeper_armed); then it wakes every
 * KEEP_NS, and when nobody has looked for that long, looks itself, as a
 * busy worker does between tasks (epoll_wait, timeout 0).  Not wanted for
 * KEEP_NS (a worker parked or waiting for readiness), it disarms: a pool
 * going in and out of saturation arms it at most once a KEEP_NS. */
static void *keeper_main(void *arg)
{
    struct seda_worker_s *w = arg;
    struct seda_pool *p = w->pool;
    tls_worker = w;
    tls_data_set = true;                /* no worker data: it runs no task */
    tls_looking = true;                 /* what it publishes is for others */
    int64_t unwanted = 0;               /* since when not wanted, or 0 */
    seda__mutex_lock(&p->mu);
    while (!atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        if (!p->keeper_armed) {
            seda__cond_wait(&w->cv, &p->mu, INT64_MAX);
            continue;
        }
        int64_t now = seda__now_ns();
        if (!keep_wanted(p)) {
            if (!unwanted) {
                unwanted = now;
            } else if (now - unwanted >= KEEP_NS) {
                p->keeper_armed = false;        /* a worker is free */
                unwanted = 0;
                continue;
            }
            seda__cond_wait(&w->cv, &p->mu, unwanted + KEEP_NS);
            continue;
        }
        unwanted = 0;
        int64_t last = atomic_load_explicit(&p->looked_ns,
                                            memory_order_relaxed);
        if (p->poller || now - last < KEEP_NS) {
            int64_t until = p->poller ? now + KEEP_NS : last + KEEP_NS;
            seda__cond_wait(&w->cv, &p->mu, until);
            continue;
        }
        poll_ready(p, w, now);
        /* A worker parked meanwhile: readiness is its to wait for. */
        if (p->idle > 0 && poll_wanted(p))
            wake_one(p);
    }
    seda__mutex_unlock(&p->mu);
    tls_worker = NULL;
    return NULL;
}

/* Start the keeper (resize_mu held, before any watch).  Without it (no
 * thread to be had) busy workers still look between tasks. */
void keeper_start(struct seda_pool *p)
{
    struct seda_worker_s *w = seda__calloc(1, sizeof *w);
    if (!w)
        return;
    if (seda__cond_init(&w->cv) != 0) {
        seda__free(w);
        return;
    }
    w->pool = p;
    w->index = -1;
    w->slot = -2;
    if (pthread_create(&w->tid, NULL, keeper_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        seda__free(w);
        return;
    }
    p->keeper = w;
}

int seda__pool_ready_watch(struct seda_pool *p, int fd, uint32_t events,
                     seda_watch_fn fn, void *ud, seda_watch_t **out)
{
    seda__mutex_lock(&p->mu);
    if (atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        seda__mutex_unlock(&p->mu);
        return SEDA_ECLOSED;
    }
    if (!p->rd) {
        int rc = seda__ready_new(&p->rd);
        if (rc) {
            seda__mutex_unlock(&p->mu);
            return rc;
        }
        atomic_store_explicit(&p->has_rd, true, memory_order_release);
    }
    struct seda_ready *rd = p->rd;
    seda__mutex_unlock(&p->mu);
    int rc = seda__ready_add(rd, fd, events, fn, ud, out);
    if (rc == 0) {
        /* Every worker may be parked: one waits for readiness now. */
        seda__mutex_lock(&p->mu);
        if (p->idle > 0 && poll_wanted(p))
            wake_one(p);
        seda__mutex_unlock(&p->mu);
    }
    return rc;
}

void seda__pool_ready_look(struct seda_pool *p)
{
    struct seda_worker_s *w = tls_worker;
    if (SEDA__LIKELY(!atomic_load_explicit(&p->has_rd, memory_order_acquire)) ||
        !w || w->pool != p || !seda__ready_any(p->rd))
        return;
    int64_t now = seda__now_ns();
    if (now - atomic_load_explicit(&p->looked_ns, memory_order_relaxed) <
        LOOK_NS)
        return;
    seda__mutex_lock(&p->mu);
    if (poll_wanted(p)) {
        atomic_store_explicit(&p->looked_ns, now, memory_order_relaxed);
        tls_looking = true;
        poll_ready(p, w, now);
        tls_looking = false;
    }
    seda__mutex_unlock(&p->mu);
}
