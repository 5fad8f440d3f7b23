/* SPDX-License-Identifier: MIT */
/*
 * ready.c -- the pool's readiness set: descriptors the workers watch
 * (SPEC.md section 16), one epoll set and an eventfd for the pool's own
 * wake-ups.
 *
 * DESIGN
 *   A watch is a descriptor, the events it waits for and a callback.  The
 *   epoll set names a watch by slot and generation (the event's 64 bits),
 *   never by pointer, so an event fetched before its watch was removed
 *   finds the slot's generation moved on and is dropped.  One watch's
 *   callback never runs on two threads at once: a worker that fetches an
 *   event for a watch whose callback is running elsewhere leaves the
 *   events with it (pend), and that thread runs the callback again
 *   before letting go.  Removing a watch (seda_watch_del) gives its ud
 *   back through release: at once when its callback is not running, else
 *   on the thread running it, when it returns -- so nobody waits, and a
 *   callback may remove its own watch.
 *
 *   The pool (pool.c) decides who waits here and when; this file only
 *   waits (seda__ready_wait: epoll_wait, the eventfd drained), runs
 *   callbacks (seda__ready_dispatch) and wakes a waiter (seda__ready_kick).
 *
 *   Locking: mu guards the slot table, the free list and every watch's
 *   busy, dead, pend and release.  A watch's fd, fn and ud are immutable.
 *   The callback runs without mu.  nwatch is atomic (relaxed: a hint for
 *   the pool, which re-checks by waiting).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ready.h"

struct seda_watch_s {
    struct seda_ready *rd;      /* immutable */
    int fd;                     /* immutable */
    uint32_t slot;              /* immutable */
    seda_watch_fn fn;           /* immutable */
    void *ud;                   /* immutable */
    bool busy;                  /* its callback runs; guarded by mu */
    bool dead;                  /* removed; guarded by mu */
    uint32_t pend;              /* events fetched while busy; mu */
    seda_watch_release_fn release;      /* guarded by mu */
};

struct slot {
    struct seda_watch_s *w;     /* or NULL (free) */
    uint32_t gen;
};

#define KICK_SLOT UINT32_MAX

struct seda_ready {
    int ep;                     /* immutable */
    int evfd;                   /* immutable */
    seda__mutex_t mu;
    struct slot *slots;         /* guarded by mu */
    uint32_t nslots, cap;       /* guarded by mu */
    uint32_t *free;             /* free slot indices; guarded by mu */
    uint32_t nfree;             /* guarded by mu */
    atomic_int nwatch;          /* watches now (relaxed) */
};

int seda__ready_new(struct seda_ready **out)
{
    struct seda_ready *rd = seda__calloc(1, sizeof *rd);
    if (!rd)
        return SEDA_ENOMEM;
    rd->ep = epoll_create1(EPOLL_CLOEXEC);
    rd->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e = { .events = EPOLLIN, .data.u64 = KICK_SLOT };
    if (rd->ep < 0 || rd->evfd < 0 ||
        epoll_ctl(rd->ep, EPOLL_CTL_ADD, rd->evfd, &e) != 0) {
        int rc = -errno;
        if (rd->ep >= 0)
            close(rd->ep);
        if (rd->evfd >= 0)
            close(rd->evfd);
        seda__free(rd);
        return rc;
    }
    seda__mutex_init(&rd->mu);
    atomic_init(&rd->nwatch, 0);
    *out = rd;
    return 0;
}

void seda__ready_free(struct seda_ready *rd)
{
    if (!rd)
        return;
    close(rd->ep);
    close(rd->evfd);
    for (uint32_t i = 0; i < rd->nslots; i++)
        if (rd->slots[i].w)
            seda__free(rd->slots[i].w);   /* never given back: a leak of
                                             the owner's, not freed twice */
    seda__mutex_destroy(&rd->mu);
    seda__free(rd->slots);
    seda__free(rd->free);
    seda__free(rd);
}

bool seda__ready_any(const struct seda_ready *rd)
{
    return rd && atomic_load_explicit(&((struct seda_ready *)rd)->nwatch,
                                      memory_order_relaxed) > 0;
}

/* A free slot (mu held), or UINT32_MAX. */
static uint32_t slot_take(struct seda_ready *rd)
{
    if (rd->nfree > 0)
        return rd->free[--rd->nfree];
    if (rd->nslots == rd->cap) {
        uint32_t cap = rd->cap ? 2 * rd->cap : 64;
        struct slot *s = seda__realloc(rd->slots, sizeof *s * cap);
        if (!s)
            return UINT32_MAX;
        rd->slots = s;
        uint32_t *f = seda__realloc(rd->free, sizeof *f * cap);
        if (!f)
            return UINT32_MAX;
        rd->free = f;
        rd->cap = cap;
    }
    rd->slots[rd->nslots] = (struct slot){ NULL, 0 };
    return rd->nslots++;
}

static uint64_t key(const struct seda_ready *rd, const struct seda_watch_s *w)
{
    return (uint64_t)rd->slots[w->slot].gen << 32 | w->slot;
}

int seda__ready_add(struct seda_ready *rd, int fd, uint32_t events,
                    seda_watch_fn fn, void *ud, seda_watch_t **out)
{
    struct seda_watch_s *w = seda__calloc(1, sizeof *w);
    if (!w)
        return SEDA_ENOMEM;
    w->rd = rd;
    w->fd = fd;
    w->fn = fn;
    w->ud = ud;
    seda__mutex_lock(&rd->mu);
    uint32_t k = slot_take(rd);
    if (k == UINT32_MAX) {
        seda__mutex_unlock(&rd->mu);
        seda__free(w);
        return SEDA_ENOMEM;
    }
    w->slot = k;
    rd->slots[k].w = w;
    /* *out is written under mu, before the descriptor is watched: a
     * worker may run fn as soon as epoll_ctl returns, and fn may read
     * *out (the caller's handle of the watch); dispatch takes mu first. */
    *out = w;
    struct epoll_event e = { .events = events, .data.u64 = key(rd, w) };
    if (epoll_ctl(rd->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
        int rc = -errno;
        rd->slots[k].w = NULL;
        rd->free[rd->nfree++] = k;
        *out = NULL;
        seda__mutex_unlock(&rd->mu);
        seda__free(w);
        return rc;
    }
    atomic_fetch_add_explicit(&rd->nwatch, 1, memory_order_relaxed);
    seda__mutex_unlock(&rd->mu);
    return 0;
}

int seda_watch_mod(seda_watch_t *w, uint32_t events)
{
    struct seda_ready *rd = w->rd;
    seda__mutex_lock(&rd->mu);
    struct epoll_event e = { .events = events, .data.u64 = key(rd, w) };
    int rc = w->dead ? SEDA_EINVAL
           : epoll_ctl(rd->ep, EPOLL_CTL_MOD, w->fd, &e) != 0 ? -errno : 0;
    seda__mutex_unlock(&rd->mu);
    return rc;
}

/* w's slot to the free list, its generation moved on (mu held). */
static void slot_give(struct seda_ready *rd, struct seda_watch_s *w)
{
    rd->slots[w->slot].w = NULL;
    rd->slots[w->slot].gen++;
    rd->free[rd->nfree++] = w->slot;
}

void seda_watch_del(seda_watch_t *w, seda_watch_release_fn release)
{
    struct seda_ready *rd = w->rd;
    seda__mutex_lock(&rd->mu);
    if (w->dead) {
        seda__mutex_unlock(&rd->mu);
        return;
    }
    epoll_ctl(rd->ep, EPOLL_CTL_DEL, w->fd, NULL);
    w->dead = true;
    w->release = release;
    slot_give(rd, w);
    atomic_fetch_sub_explicit(&rd->nwatch, 1, memory_order_relaxed);
    bool now = !w->busy;
    seda__mutex_unlock(&rd->mu);
    if (now) {
        if (release)
            release(w->ud);
        seda__free(w);
    }
}

void seda__ready_kick(struct seda_ready *rd)
{
    uint64_t one = 1;
    ssize_t n = write(rd->evfd, &one, sizeof one);
    (void)n;                    /* EAGAIN: already set */
}

int seda__ready_wait(struct seda_ready *rd, struct epoll_event *evs, int max,
                     int timeout_ms)
{
    int n = epoll_wait(rd->ep, evs, max, timeout_ms);
    if (n < 0)
        return 0;               /* EINTR */
    /* The pool's own wake-up: drained here, dropped from the list. */
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 != KICK_SLOT)
            continue;
        uint64_t v;
        ssize_t r = read(rd->evfd, &v, sizeof v);
        (void)r;
        evs[i] = evs[--n];
        i--;
    }
    return n;
}

void seda__ready_dispatch(struct seda_ready *rd, const struct epoll_event *evs,
                          int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t k = (uint32_t)evs[i].data.u64;
        uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
        seda__mutex_lock(&rd->mu);
        struct seda_watch_s *w = k < rd->nslots && rd->slots[k].gen == gen
                                     ? rd->slots[k].w : NULL;
        if (!w) {
            seda__mutex_unlock(&rd->mu);
            continue;
        }
        if (w->busy) {
            w->pend |= evs[i].events;
            seda__mutex_unlock(&rd->mu);
            continue;
        }
        w->busy = true;
        uint32_t ev = evs[i].events;
        for (;;) {
            seda__mutex_unlock(&rd->mu);
            w->fn(w->ud, ev);
            seda__mutex_lock(&rd->mu);
            if (w->dead || !w->pend)
                break;
            ev = w->pend;
            w->pend = 0;
        }
        w->busy = false;
        bool gone = w->dead;
        seda_watch_release_fn release = w->release;
        seda__mutex_unlock(&rd->mu);
        if (gone) {
            if (release)
                release(w->ud);
            seda__free(w);
        }
    }
}
