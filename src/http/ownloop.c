/* SPDX-License-Identifier: MIT */
/*
 * ownloop.c -- the loop a server runs on when it is given none
 * (seda_http_opts.loop NULL): one thread of its own around one epoll set,
 * behind the same seda_http_loop the bus's workers offer.
 *
 * Its thread alone runs callbacks, so one watch's callback never runs
 * twice at once.  A removed watch (any thread) is marked dead, taken out
 * of the set and put in the graveyard, which the loop empties -- releasing
 * each -- after the batch of events it is running (an event of that
 * batch may name it, and is dropped; the next batch cannot).  Once the
 * loop has stopped, a removed watch is released at once.
 *
 * Locking: gmu guards the graveyard and stopped.  dead and stop are
 * atomic (release/acquire).  The other fields are immutable while the
 * thread runs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "http_int.h"

struct owatch {
    struct ownloop *l;
    int fd;
    seda_http_ready_fn fn;
    void *ud;
    atomic_bool dead;
    seda_http_release_fn release;       /* written before dead */
    struct owatch *next;        /* the graveyard */
};

struct ownloop {
    int ep, evfd;
    pthread_t tid;
    bool started;
    atomic_bool stop;
    pthread_mutex_t gmu;
    struct owatch *grave;       /* guarded by gmu */
    bool stopped;               /* the thread was joined; guarded by gmu */
};

static char tag_stop;

static int ow_add(void *ctx, int fd, uint32_t events, seda_http_ready_fn fn,
                  void *ud, void **watch)
{
    struct ownloop *l = ctx;
    struct owatch *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    *w = (struct owatch){ .l = l, .fd = fd, .fn = fn, .ud = ud };
    atomic_init(&w->dead, false);
    struct epoll_event e = { .events = events, .data.ptr = w };
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
        int rc = -errno;
        free(w);
        return rc;
    }
    *watch = w;
    return 0;
}

static int ow_mod(void *watch, uint32_t events)
{
    struct owatch *w = watch;
    struct epoll_event e = { .events = events, .data.ptr = w };
    return epoll_ctl(w->l->ep, EPOLL_CTL_MOD, w->fd, &e) != 0 ? -errno : 0;
}

static void kick(struct ownloop *l)
{
    uint64_t one = 1;
    ssize_t n = write(l->evfd, &one, sizeof one);
    (void)n;                    /* EAGAIN: already set */
}

static void ow_del(void *watch, seda_http_release_fn release)
{
    struct owatch *w = watch;
    struct ownloop *l = w->l;
    epoll_ctl(l->ep, EPOLL_CTL_DEL, w->fd, NULL);
    w->release = release;
    atomic_store_explicit(&w->dead, true, memory_order_release);
    pthread_mutex_lock(&l->gmu);
    bool now = l->stopped;
    if (!now) {
        w->next = l->grave;
        l->grave = w;
    }
    pthread_mutex_unlock(&l->gmu);
    if (now) {
        if (release)
            release(w->ud);
        free(w);
    } else {
        kick(l);
    }
}

/* Release what was removed (the loop thread between batches, or after
 * it stopped). */
static void bury(struct ownloop *l, bool stopped)
{
    pthread_mutex_lock(&l->gmu);
    struct owatch *g = l->grave;
    l->grave = NULL;
    if (stopped)
        l->stopped = true;
    pthread_mutex_unlock(&l->gmu);
    while (g) {
        struct owatch *w = g;
        g = w->next;
        if (w->release)
            w->release(w->ud);
        free(w);
    }
}

static void *loop_main(void *arg)
{
    struct ownloop *l = arg;
    struct epoll_event evs[64];
    while (!atomic_load_explicit(&l->stop, memory_order_acquire)) {
        int n = epoll_wait(l->ep, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &tag_stop) {
                uint64_t v;
                ssize_t r = read(l->evfd, &v, sizeof v);
                (void)r;
                continue;
            }
            struct owatch *w = evs[i].data.ptr;
            if (!atomic_load_explicit(&w->dead, memory_order_acquire))
                w->fn(w->ud, evs[i].events);
        }
        bury(l, false);
    }
    return NULL;
}

static const seda_http_loop own_ops = {
    .add = ow_add, .mod = ow_mod, .del = ow_del,
};

int seda__http_ownloop_new(struct ownloop **out, seda_http_loop *ops)
{
    struct ownloop *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->ep = -1;
    l->evfd = -1;
    pthread_mutex_init(&l->gmu, NULL);
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e = { .events = EPOLLIN, .data.ptr = &tag_stop };
    if (l->ep < 0 || l->evfd < 0 ||
        epoll_ctl(l->ep, EPOLL_CTL_ADD, l->evfd, &e) != 0) {
        int rc = -errno;
        seda__http_ownloop_free(l);
        return rc;
    }
    atomic_init(&l->stop, false);
    *ops = own_ops;
    ops->ctx = l;
    *out = l;
    return 0;
}

int seda__http_ownloop_start(struct ownloop *l)
{
    if (pthread_create(&l->tid, NULL, loop_main, l) != 0)
        return -EAGAIN;
    l->started = true;
    return 0;
}

void seda__http_ownloop_stop(struct ownloop *l)
{
    if (!l || !l->started)
        return;
    atomic_store_explicit(&l->stop, true, memory_order_release);
    kick(l);
    pthread_join(l->tid, NULL);
    l->started = false;
    bury(l, true);
}

void seda__http_ownloop_free(struct ownloop *l)
{
    if (!l)
        return;
    seda__http_ownloop_stop(l);
    if (l->ep >= 0)
        close(l->ep);
    if (l->evfd >= 0)
        close(l->evfd);
    bury(l, true);
    pthread_mutex_destroy(&l->gmu);
    free(l);
}
