/* SPDX-License-Identifier: MIT */
/*
 * loop.c -- the I/O loop: an epoll set turned by its own thread or by the
 * threads that drive it (a bus's workers), the queue of work other threads
 * post to it, and the life of an operation (submit, cancel, complete,
 * free).
 *
 * DESIGN
 *   Every thread talks to the loop through one FIFO of tasks (struct
 *   seda__io_task) under `mu`: an op's start, a cancel request, a socket's
 *   close, a resolver's answer.  Posting to an empty queue writes the
 *   eventfd; the loop thread reads it, takes the whole queue under `mu`
 *   and runs it outside the lock.  Because a cancel is posted after the
 *   start of its op (the owner had the op only once submit returned), the
 *   FIFO runs the start first; an op cancelled before it started
 *   completes CANCELLED instead of starting.
 *
 *   An op completes on the loop thread only (seda__io_complete): its
 *   status and results are written, `completed` is stored (release), the
 *   callback runs, the loop drops its reference.  `done` (loop thread)
 *   makes a second completion impossible; the kinds complete from their
 *   own events, a timer, or their cancel function, each of which first
 *   undoes what the others could still do.  Active ops (started, not
 *   done) are on a list so the loop's end can cancel each.
 *
 *   One turn: epoll_wait until the next internal timer (timer.c), run the
 *   watches' events, then the queue, then the due timers.  A watch
 *   released during a batch of events is freed after the batch.
 *
 *   Two ways to turn.  A loop of seda_io_loop_new has a thread that does
 *   nothing else.  A driven loop (seda_io_loop_new_driven) has none: its
 *   epoll set also holds a timerfd armed to the next internal timer, so
 *   the set's descriptor (seda_io_loop_fd) is readable whenever a turn
 *   has something to do (an event, a post's eventfd, a due timer), and
 *   whoever drives it -- a bus's workers, through one watch of their
 *   readiness set -- runs non-blocking turns (seda_io_loop_run).  "The
 *   loop thread" is then the thread holding the turn, `turn`: 0 free, 1
 *   held, 2 held and asked again.  A thread that finds it held asks again
 *   (1 -> 2) and leaves; the holder, before letting go (1 -> 0), sees 2
 *   and runs another turn, so nothing asked for is left waiting for an
 *   event that already came; after a few (DRIVE_TURNS) it lets go and
 *   writes the eventfd instead, so the descriptor is ready again and the
 *   drivers take it from there (no thread is held running turns for the
 *   others).  Every step is an RMW of `turn` (acq_rel), so one holder's
 *   work happens before the next one's.  A submission to a driven loop
 *   runs the queue and the due timers inline when the turn is free (the
 *   op starts on the submitting thread: a handler's request is on the
 *   wire before its call suspends, no other thread woken); it does not
 *   poll (events are the drivers'), and if asked again meanwhile it lets
 *   go and writes the eventfd.  Other posts (cancels, closes, the
 *   resolver's answers) write the eventfd.
 *
 *   The end (seda_io_loop_free): `stopping` refuses new submissions; the
 *   thread runs the queue dry, cancels every active op, stops the resolver
 *   and curl, runs the queue again and exits; the freeing thread joins it
 *   and runs what was posted meanwhile (closes from other threads).  A
 *   driven loop's freeing thread waits for a turn still ending, takes the
 *   turn for good and does all of it itself.
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "io_int.h"

#define MAX_EVENTS 64
#define DRIVE_TURNS 4         /* turns one seda_io_loop_run runs at most */

/*
 * Locking:
 *   mu guards qhead, qtail, stopping.
 *   Immutable after seda_io_loop_new(_driven): driven, epfd, efd, tfd,
 *   thread.
 *   Atomic: turn (acq_rel RMWs only, see DESIGN).
 *   Loop thread only -- the loop's own thread, or the holder of the turn
 *   of a driven loop (and the freeing thread after the join): active,
 *   timers, graveyard, http, resolver, wake_watch, timer_watch, tfd_due.
 *   Lock order: mu is a leaf (no other lock is taken under it; the
 *   resolver's own lock is never held with it).  The turn is not a lock
 *   anyone waits for (only seda_io_loop_free, once nobody drives): a
 *   thread holding it runs callbacks, which may take the owners' locks,
 *   so an owner must not submit to a driven loop while holding a lock
 *   its callbacks take.
 */
struct seda_io_loop_s {
    pthread_mutex_t mu;
    struct seda__io_task *qhead;    /* posted work; guarded by mu */
    struct seda__io_task *qtail;    /* guarded by mu */
    bool stopping;                  /* refuse submissions; guarded by mu */
    int epfd;                       /* the epoll instance */
    int efd;                        /* eventfd: work was posted */
    bool driven;                    /* no thread: seda_io_loop_run */
    int tfd;                        /* driven: timerfd, the next timer */
    atomic_int turn;                /* driven: 0 free, 1 held, 2 again */
    pthread_t thread;
    struct seda__io_watch wake_watch; /* efd's watch */
    struct seda__io_watch timer_watch; /* tfd's watch (driven) */
    uint64_t tfd_due;               /* what tfd is armed to; 0: not */
    seda_io_op_t *active;           /* started, not done */
    struct seda__io_timers timers;  /* internal timers */
    struct seda__io_watch *graveyard; /* released watches to free */
    struct seda__io_http *http;     /* http.c's, or NULL */
    struct seda__io_resolver *resolver; /* resolve.c's, or NULL */
    _Atomic uint64_t http_idle_ns;  /* seda_io_http_set_idle's (relaxed:
                                       a setting read when armed) */
};

/* ---- time ---- */

uint64_t seda__io_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t seda__io_deadline(double seconds)
{
    if (!(seconds > 0))
        return 0;
    if (seconds > 1e9)
        seconds = 1e9;
    return seda__io_now() + (uint64_t)(seconds * 1e9);
}

/* ---- names ---- */

const char *seda_io_strerror(int code)
{
    switch (code) {
    case SEDA_IO_OK: return "ok";
    case SEDA_IO_TIMEOUT: return "timeout";
    case SEDA_IO_REFUSED: return "refused";
    case SEDA_IO_DNS: return "dns";
    case SEDA_IO_TLS: return "tls";
    case SEDA_IO_TOO_LARGE: return "too_large";
    case SEDA_IO_CLOSED: return "closed";
    case SEDA_IO_CANCELLED: return "cancelled";
    case SEDA_IO_OTHER: return "other";
    case -EBUSY: return "another operation of the socket is pending";
    case -ECANCELED: return "the loop is stopping";
    case -EINVAL: return "invalid argument";
    case -ENOMEM: return "out of memory";
    case -EAGAIN: return "resource temporarily unavailable";
    case -EMFILE: return "too many open files";
    case -ENOTCONN: return "not connected";
    default: return "unknown";
    }
}

/* ---- the task queue ---- */

/* Append T to the queue; whether it was empty.  mu held. */
static bool enqueue_locked(seda_io_loop_t *loop, struct seda__io_task *t)
{
    t->next = NULL;
    bool was_empty = loop->qhead == NULL;
    if (loop->qtail)
        loop->qtail->next = t;
    else
        loop->qhead = t;
    loop->qtail = t;
    return was_empty;
}

/* Wake the loop after a post to an empty queue.  The queue was empty, so
 * the loop has taken (or will take) everything before; it reads the
 * eventfd before taking the queue, so this write is seen by a later turn
 * at worst. */
static void wake(seda_io_loop_t *loop)
{
    uint64_t one = 1;
    ssize_t w = write(loop->efd, &one, sizeof one);
    (void)w;                    /* EAGAIN: the counter is already set */
}

void seda__io_post(seda_io_loop_t *loop, struct seda__io_task *t)
{
    pthread_mutex_lock(&loop->mu);
    bool was_empty = enqueue_locked(loop, t);
    pthread_mutex_unlock(&loop->mu);
    if (was_empty)
        wake(loop);
}

/* Run everything posted so far (loop thread, or the freeing thread after
 * the join).  Returns whether anything ran. */
static bool run_queue(seda_io_loop_t *loop)
{
    pthread_mutex_lock(&loop->mu);
    struct seda__io_task *t = loop->qhead;
    loop->qhead = loop->qtail = NULL;
    pthread_mutex_unlock(&loop->mu);
    bool any = t != NULL;
    while (t) {
        struct seda__io_task *next = t->next;
        t->run(loop, t);        /* may free t */
        t = next;
    }
    return any;
}

/* ---- ops ---- */

static void op_unref(seda_io_op_t *op)
{
    if (atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) != 1)
        return;
    op->kind->destroy(op);
}

static void active_add(seda_io_loop_t *loop, seda_io_op_t *op)
{
    op->aprev = NULL;
    op->anext = loop->active;
    if (loop->active)
        loop->active->aprev = op;
    loop->active = op;
}

static void active_remove(seda_io_loop_t *loop, seda_io_op_t *op)
{
    if (op->aprev)
        op->aprev->anext = op->anext;
    else
        loop->active = op->anext;
    if (op->anext)
        op->anext->aprev = op->aprev;
    op->anext = op->aprev = NULL;
}

static void run_start(seda_io_loop_t *loop, struct seda__io_task *t)
{
    seda_io_op_t *op = (seda_io_op_t *)((char *)t -
                                        offsetof(seda_io_op_t, start_task));
    op->started = true;
    active_add(loop, op);
    /* Pairs with the acq_rel exchange in seda_io_cancel. */
    if (atomic_load_explicit(&op->cancel_req, memory_order_acquire))
        seda__io_complete(op, SEDA_IO_CANCELLED, NULL);
    else
        op->kind->start(op);
}

static void run_cancel(seda_io_loop_t *loop, struct seda__io_task *t)
{
    (void)loop;
    seda_io_op_t *op = (seda_io_op_t *)((char *)t -
                                        offsetof(seda_io_op_t, cancel_task));
    if (op->started && !op->done)
        op->kind->cancel(op);
    op_unref(op);               /* the queued cancel's reference */
}

static bool turn_take(seda_io_loop_t *loop);
static void run_turns(seda_io_loop_t *loop, bool poll, int max);

int seda__io_submit(seda_io_loop_t *loop, seda_io_op_t *op,
                    const struct seda__io_kind *kind, seda_io_cb cb, void *ud,
                    seda_io_op_t **opp)
{
    op->kind = kind;
    op->loop = loop;
    op->cb = cb;
    op->ud = ud;
    atomic_init(&op->refs, 2);
    atomic_init(&op->cancel_req, false);
    atomic_init(&op->completed, false);
    op->started = op->done = false;
    op->status = SEDA_IO_OK;
    op->msg[0] = '\0';
    op->anext = op->aprev = NULL;
    op->start_task.run = run_start;
    op->cancel_task.run = run_cancel;
    /* Checked and queued under one lock: once seda_io_loop_free has set
     * `stopping`, no submission gets in, and every one that got in is
     * started (then cancelled) by the thread before it exits. */
    pthread_mutex_lock(&loop->mu);
    if (loop->stopping) {
        pthread_mutex_unlock(&loop->mu);
        return -ECANCELED;
    }
    *opp = op;                  /* before the callback can run */
    bool was_empty = enqueue_locked(loop, &op->start_task);
    pthread_mutex_unlock(&loop->mu);
    if (loop->driven) {
        /* Start it here (the queue and the due timers: the events are
         * the watchers', whose readiness brings them), or have the
         * holder of the turn run another. */
        if (turn_take(loop))
            run_turns(loop, false, 1);
    } else if (was_empty)
        wake(loop);
    return 0;
}

void seda__io_complete(seda_io_op_t *op, int status, const char *fmt, ...)
{
    if (op->done)
        return;                 /* never twice (a bug upstream: ignore) */
    op->done = true;
    active_remove(op->loop, op);
    op->status = status;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(op->msg, sizeof op->msg, fmt, ap);
        va_end(ap);
    }
    /* Pairs with the acquire loads in seda_io_cancel / seda_io_op_free. */
    atomic_store_explicit(&op->completed, true, memory_order_release);
    if (op->cb)
        op->cb(op, op->ud);
    op_unref(op);               /* the loop's reference */
}

void seda_io_cancel(seda_io_op_t *op)
{
    if (!op)
        return;
    /* Pairs with the release store in seda__io_complete: a completed op
     * needs nothing (and its loop may be gone). */
    if (atomic_load_explicit(&op->completed, memory_order_acquire))
        return;
    if (atomic_exchange_explicit(&op->cancel_req, true, memory_order_acq_rel))
        return;                 /* already requested */
    atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
    seda__io_post(op->loop, &op->cancel_task);
}

void seda_io_op_free(seda_io_op_t *op)
{
    if (!op)
        return;
    seda_io_cancel(op);
    op_unref(op);
}

int seda_io_op_status(const seda_io_op_t *op)
{
    return op->status;
}

const char *seda_io_op_message(const seda_io_op_t *op)
{
    return op->msg;
}

/* ---- watches ---- */

int seda__io_watch_set(seda_io_loop_t *loop, struct seda__io_watch *w,
                       uint32_t events)
{
    if (events == w->events)
        return 0;
    struct epoll_event ev = { .events = events, .data.ptr = w };
    int op = w->events == 0 ? EPOLL_CTL_ADD
           : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    int rc = epoll_ctl(loop->epfd, op, w->fd, &ev);
    if (rc != 0 && op == EPOLL_CTL_MOD && errno == ENOENT) {
        /* The descriptor was closed and reopened under us (libcurl may
         * close a socket it still reports): epoll forgot it. */
        rc = epoll_ctl(loop->epfd, EPOLL_CTL_ADD, w->fd, &ev);
    }
    if (rc != 0) {
        int e = errno;
        if (op == EPOLL_CTL_DEL) {      /* closed already: nothing to do */
            w->events = 0;
            return 0;
        }
        return -e;
    }
    w->events = events;
    return 0;
}

void seda__io_watch_release(seda_io_loop_t *loop, struct seda__io_watch *w)
{
    seda__io_watch_set(loop, w, 0);
    w->dead = true;
    w->next = loop->graveyard;
    loop->graveyard = w;
}

static void bury(seda_io_loop_t *loop)
{
    while (loop->graveyard) {
        struct seda__io_watch *w = loop->graveyard;
        loop->graveyard = w->next;
        free(w);
    }
}

static void on_wake(seda_io_loop_t *loop, struct seda__io_watch *w,
                    uint32_t ev)
{
    (void)loop;
    (void)ev;
    uint64_t n;
    ssize_t r = read(w->fd, &n, sizeof n);
    (void)r;                    /* EAGAIN: a spurious wake, harmless */
}

struct seda__io_http **seda__io_http_slot(seda_io_loop_t *loop)
{
    return &loop->http;
}

void seda_io_http_set_idle(seda_io_loop_t *loop, double seconds)
{
    if (!(seconds > 0))
        seconds = SEDA_IO_HTTP_IDLE_DEFAULT;
    if (seconds > 1e9)
        seconds = 1e9;
    atomic_store_explicit(&loop->http_idle_ns, (uint64_t)(seconds * 1e9),
                          memory_order_relaxed);
}

uint64_t seda__io_http_idle_ns(seda_io_loop_t *loop)
{
    return atomic_load_explicit(&loop->http_idle_ns, memory_order_relaxed);
}

struct seda__io_resolver **seda__io_resolver_slot(seda_io_loop_t *loop)
{
    return &loop->resolver;
}

struct seda__io_timers *seda__io_timers_of(seda_io_loop_t *loop)
{
    return &loop->timers;
}

/* ---- turning ---- */

static _Thread_local seda_io_loop_t *current_loop;

int seda_io_loop_is_current(const seda_io_loop_t *loop)
{
    return current_loop == loop;
}

static bool is_stopping(seda_io_loop_t *loop)
{
    pthread_mutex_lock(&loop->mu);
    bool s = loop->stopping;
    pthread_mutex_unlock(&loop->mu);
    return s;
}

/* One turn: the events (waiting up to MS, -1: no bound), the queue, the
 * due timers.  Loop thread. */
static void turn(seda_io_loop_t *loop, int ms)
{
    struct epoll_event evs[MAX_EVENTS];
    int n = epoll_wait(loop->epfd, evs, MAX_EVENTS, ms);
    if (n < 0)
        n = 0;                  /* EINTR; EBADF/EINVAL cannot happen */
    for (int i = 0; i < n; i++) {
        struct seda__io_watch *w = evs[i].data.ptr;
        if (!w->dead)
            w->fn(loop, w, evs[i].events);
    }
    bury(loop);
    /* The queue before the timers, which fire up to the time read before
     * the queue was taken: a sleep submitted (its due time read, then
     * posted) before that is armed before they fire, so it fires in its
     * due order. */
    uint64_t now = seda__io_now();
    run_queue(loop);
    seda__io_timers_run(loop, &loop->timers, now);
    bury(loop);
}

/* The end, on the loop thread: every op completes. */
static void finish(seda_io_loop_t *loop)
{
    run_queue(loop);
    while (loop->active)
        loop->active->kind->cancel(loop->active);
    seda__io_resolver_stop(loop);
    while (run_queue(loop)) {
        while (loop->active)
            loop->active->kind->cancel(loop->active);
    }
    seda__io_http_free(loop);
    bury(loop);
}

static void *loop_main(void *arg)
{
    seda_io_loop_t *loop = arg;
    current_loop = loop;
    for (;;) {
        turn(loop, seda__io_timers_wait_ms(&loop->timers, seda__io_now()));
        if (is_stopping(loop))
            break;
    }
    finish(loop);
    current_loop = NULL;
    return NULL;
}

/* Take the turn (true), or leave the holder asked to run another
 * (false).  Any thread. */
static bool turn_take(seda_io_loop_t *loop)
{
    int s = atomic_load_explicit(&loop->turn, memory_order_relaxed);
    for (;;) {
        if (s == 0) {
            if (atomic_compare_exchange_weak_explicit(
                    &loop->turn, &s, 1, memory_order_acq_rel,
                    memory_order_relaxed))
                return true;
        } else if (s == 1) {
            if (atomic_compare_exchange_weak_explicit(
                    &loop->turn, &s, 2, memory_order_acq_rel,
                    memory_order_relaxed))
                return false;
        } else {
            return false;       /* asked already */
        }
    }
}

/* Let go of the turn (true), or, asked again meanwhile, keep it for
 * another (false).  The holder. */
static bool turn_give(seda_io_loop_t *loop)
{
    int held = 1;
    if (atomic_compare_exchange_strong_explicit(&loop->turn, &held, 0,
                                                memory_order_acq_rel,
                                                memory_order_relaxed))
        return true;
    /* 2: back to 1 (an RMW, so what the asker did before asking happens
     * before the turn this one runs). */
    atomic_exchange_explicit(&loop->turn, 1, memory_order_acq_rel);
    return false;
}

/* The timerfd to the next internal timer (the holder of the turn).  Only
 * ever earlier while it is armed: a timer moved later (curl moves its
 * own at every step) or gone costs at most one early turn, which finds
 * nothing due and arms it anew, instead of a system call per turn. */
static void timerfd_rearm(seda_io_loop_t *loop)
{
    uint64_t due = loop->timers.n > 0 ? loop->timers.heap[0]->due : 0;
    if (due == 0 || (loop->tfd_due != 0 && loop->tfd_due <= due))
        return;
    struct itimerspec its = { { 0, 0 }, { 0, 0 } };
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000000u);
        its.it_value.tv_nsec = (long)(due % 1000000000u);
    }
    /* Cannot fail with a valid descriptor and value; a past due time
     * fires at once. */
    if (timerfd_settime(loop->tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        loop->tfd_due = due;
}

static void on_timerfd(seda_io_loop_t *loop, struct seda__io_watch *w,
                       uint32_t ev)
{
    (void)ev;
    uint64_t n;
    ssize_t r = read(w->fd, &n, sizeof n);
    (void)r;                    /* EAGAIN: stale, harmless */
    loop->tfd_due = 0;          /* expired: disarmed */
}

/* Run turns while asked, at most MAX (the turn taken).  POLL: whether the
 * first polls for events; the later ones always do (they were asked for
 * by a thread that got the loop's readiness).  Past MAX the turn is let
 * go and the eventfd written instead, so the loop's descriptor is ready
 * again and another turn is run by whoever drives it: a thread that
 * runs turns for others (a submitter inside a handler, a worker between
 * its tasks) does a bounded share of them. */
static void run_turns(seda_io_loop_t *loop, bool poll, int max)
{
    seda_io_loop_t *prev = current_loop;
    current_loop = loop;
    for (int n = 1;; n++) {
        if (poll) {
            turn(loop, 0);
        } else {
            uint64_t now = seda__io_now();
            run_queue(loop);
            seda__io_timers_run(loop, &loop->timers, now);
            bury(loop);
            poll = true;
        }
        timerfd_rearm(loop);
        if (turn_give(loop))
            break;
        if (n >= max) {
            atomic_exchange_explicit(&loop->turn, 0, memory_order_acq_rel);
            wake(loop);
            break;
        }
    }
    current_loop = prev;
}

void seda_io_loop_run(seda_io_loop_t *loop)
{
    if (loop->driven && turn_take(loop))
        run_turns(loop, true, DRIVE_TURNS);
}

int seda_io_loop_fd(const seda_io_loop_t *loop)
{
    return loop->driven ? loop->epfd : -1;
}

static int loop_make(seda_io_loop_t **loopp, bool driven)
{
    int rc = seda__io_http_global_init();
    if (rc != 0)
        return rc;
    seda_io_loop_t *loop = calloc(1, sizeof *loop);
    if (!loop)
        return -ENOMEM;
    pthread_mutex_init(&loop->mu, NULL);
    atomic_init(&loop->http_idle_ns,
                (uint64_t)(SEDA_IO_HTTP_IDLE_DEFAULT * 1e9));
    atomic_init(&loop->turn, 0);
    loop->driven = driven;
    loop->tfd = -1;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    loop->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->epfd < 0 || loop->efd < 0) {
        rc = -errno;
        goto fail;
    }
    loop->wake_watch.fd = loop->efd;
    loop->wake_watch.fn = on_wake;
    if ((rc = seda__io_watch_set(loop, &loop->wake_watch, EPOLLIN)) != 0)
        goto fail;
    if (driven) {
        loop->tfd = timerfd_create(CLOCK_MONOTONIC,
                                   TFD_NONBLOCK | TFD_CLOEXEC);
        if (loop->tfd < 0) {
            rc = -errno;
            goto fail;
        }
        loop->timer_watch.fd = loop->tfd;
        loop->timer_watch.fn = on_timerfd;
        if ((rc = seda__io_watch_set(loop, &loop->timer_watch, EPOLLIN)))
            goto fail;
    } else if (pthread_create(&loop->thread, NULL, loop_main, loop) != 0) {
        rc = -EAGAIN;
        goto fail;
    }
    *loopp = loop;
    return 0;
fail:
    if (loop->epfd >= 0)
        close(loop->epfd);
    if (loop->efd >= 0)
        close(loop->efd);
    if (loop->tfd >= 0)
        close(loop->tfd);
    pthread_mutex_destroy(&loop->mu);
    free(loop);
    return rc;
}

int seda_io_loop_new(seda_io_loop_t **loopp)
{
    return loop_make(loopp, false);
}

int seda_io_loop_new_driven(seda_io_loop_t **loopp)
{
    return loop_make(loopp, true);
}

void seda_io_loop_free(seda_io_loop_t *loop)
{
    if (!loop)
        return;
    assert(!seda_io_loop_is_current(loop));     /* would join itself */
    pthread_mutex_lock(&loop->mu);
    loop->stopping = true;
    pthread_mutex_unlock(&loop->mu);
    if (loop->driven) {
        /* Nobody drives it any more (the contract), but a turn begun
         * before may still be ending: wait for it, then hold the turn
         * for good. */
        int s = 0;
        while (!atomic_compare_exchange_weak_explicit(
                   &loop->turn, &s, 1, memory_order_acq_rel,
                   memory_order_relaxed)) {
            s = 0;
            sched_yield();
        }
    } else {
        wake(loop);
        pthread_join(loop->thread, NULL);
    }
    /* Closes posted by other threads after the thread's last look; on a
     * driven loop, everything. */
    current_loop = loop;
    finish(loop);
    current_loop = NULL;
    seda__io_timers_free(&loop->timers);
    close(loop->efd);
    close(loop->epfd);
    if (loop->tfd >= 0)
        close(loop->tfd);
    pthread_mutex_destroy(&loop->mu);
    free(loop);
}
