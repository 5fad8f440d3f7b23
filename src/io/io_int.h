/* SPDX-License-Identifier: MIT */
/*
 * io_int.h -- what the files of the I/O layer share: the loop's parts
 * (tasks posted to its thread, descriptor watches, internal timers) and the
 * common head of every operation.  "The loop thread" and "loop thread
 * only" mean the thread running the loop's turn: its own thread, or, for
 * a driven loop, whichever thread holds the turn (loop.c, DESIGN).
 * loop.c owns struct seda_io_loop_s and
 * struct seda_io_op_s; timer.c the timer heap and seda_io_sleep; http.c
 * the curl multi; tcp.c sockets; resolve.c the resolver thread.
 */
#ifndef SEDA_IO_INT_H
#define SEDA_IO_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "seda_io.h"

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

#define SEDA__IO_MSG_MAX 256        /* an op's message (CURL_ERROR_SIZE) */

struct seda__io_http;
struct seda__io_resolver;

/* Work for the loop thread, queued from any thread (seda__io_post) and run
 * there in the order posted. */
struct seda__io_task {
    struct seda__io_task *next;     /* queue link; guarded by loop->mu */
    void (*run)(seda_io_loop_t *loop, struct seda__io_task *t);
};

/* A descriptor the loop polls (loop thread only).  fn gets the epoll
 * events; a released watch (seda__io_watch_release) gets no more. */
struct seda__io_watch {
    int fd;
    uint32_t events;                /* registered with epoll; 0: none */
    bool dead;                      /* released: skip its events */
    void (*fn)(seda_io_loop_t *loop, struct seda__io_watch *w, uint32_t ev);
    struct seda__io_watch *next;    /* the loop's graveyard */
};

/* An internal timer (loop thread only), in the loop's heap while armed. */
struct seda__io_timer {
    uint64_t due;                   /* CLOCK_MONOTONIC, ns */
    uint64_t seq;                   /* arming order, for ties */
    size_t slot;                    /* heap index; SIZE_MAX when unarmed */
    void (*fire)(seda_io_loop_t *loop, struct seda__io_timer *t);
};

/* What a kind of op does on the loop thread. */
struct seda__io_kind {
    const char *name;
    void (*start)(seda_io_op_t *op);    /* begin; may complete at once */
    void (*cancel)(seda_io_op_t *op);   /* stop what start began and
                                           complete CANCELLED */
    void (*destroy)(seda_io_op_t *op);  /* free the kind's parts; any
                                           thread, last reference */
};

/*
 * The head of every op (each kind's struct begins with one).
 * Locking:
 *   Immutable after submission: kind, loop, cb, ud.
 *   Atomic: refs (acq_rel on release, relaxed on take), cancel_req
 *   (acq_rel exchange: the first requester posts cancel_task),
 *   completed (release by the loop thread after status and results are
 *   written, before the callback / acquire by readers: seda_io_cancel and
 *   seda_io_op_free).
 *   Loop thread only until completed, then read-only: status, msg,
 *   started, done, the active-list links and the kind's results.
 *   start_task and cancel_task are queue links guarded by loop->mu while
 *   queued.
 */
struct seda_io_op_s {
    const struct seda__io_kind *kind;
    seda_io_loop_t *loop;
    seda_io_cb cb;
    void *ud;
    atomic_int refs;                /* owner + loop + a queued cancel */
    atomic_bool cancel_req;         /* seda_io_cancel was called */
    atomic_bool completed;          /* status and results are final */
    bool started;                   /* kind->start ran (loop thread) */
    bool done;                      /* completed (loop thread) */
    int status;                     /* enum seda_io_status */
    char msg[SEDA__IO_MSG_MAX];     /* details, or "" */
    struct seda__io_task start_task;
    struct seda__io_task cancel_task;
    seda_io_op_t *anext, *aprev;    /* the loop's active ops */
};

/* ---- loop.c ---- */

/* Initialise OP's head, set *OPP and post its start; the op then holds
 * two references (owner, loop).  0, or -ECANCELED (the loop is stopping:
 * nothing posted, *OPP untouched, the caller frees OP).  Any thread. */
SEDA__API int seda__io_submit(seda_io_loop_t *loop, seda_io_op_t *op,
                              const struct seda__io_kind *kind,
                              seda_io_cb cb, void *ud, seda_io_op_t **opp);

/* Complete OP with STATUS and a printf-style message (NULL: none): set the
 * results final, run the callback, drop the loop's reference.  Loop thread
 * only; once per op (the kinds see to it). */
SEDA__API void seda__io_complete(seda_io_op_t *op, int status,
                                 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Post T to run on LOOP's thread (any thread; always accepted: a task
 * posted while the loop stops runs before seda_io_loop_free returns). */
SEDA__API void seda__io_post(seda_io_loop_t *loop, struct seda__io_task *t);

/* Watch W->fd for EVENTS (EPOLLIN/EPOLLOUT; 0 stops watching).  0 or
 * -errno.  Loop thread only. */
SEDA__API int seda__io_watch_set(seda_io_loop_t *loop,
                                 struct seda__io_watch *w, uint32_t events);

/* Stop watching W for good; its memory (W points to the start of a
 * malloc'd block) is freed after the current batch of events, so an event
 * already fetched for it is skipped, never run on freed memory.  Does not
 * close the descriptor.  Loop thread only. */
SEDA__API void seda__io_watch_release(seda_io_loop_t *loop,
                                      struct seda__io_watch *w);

/* The loop's HTTP and resolver state slots (loop thread only; made on
 * first use by http.c / resolve.c, freed by them at the loop's end). */
SEDA__API struct seda__io_http **seda__io_http_slot(seda_io_loop_t *loop);
SEDA__API struct seda__io_resolver **seda__io_resolver_slot(
    seda_io_loop_t *loop);

/* CLOCK_MONOTONIC in ns, and seconds (<= 0: none) to a deadline in ns
 * (0: none).  Any thread. */
SEDA__API uint64_t seda__io_now(void);
SEDA__API uint64_t seda__io_deadline(double seconds);

/* ---- timer.c (the heap; loop thread only) ---- */

struct seda__io_timers {
    struct seda__io_timer **heap;   /* min-heap on (due, seq) */
    size_t n, cap;
    uint64_t seq;                   /* next arming's */
};

SEDA__API void seda__io_timer_init(struct seda__io_timer *t,
    void (*fire)(seda_io_loop_t *, struct seda__io_timer *));
/* Arm T for DUE (ns; rearming moves it).  0 or -ENOMEM. */
SEDA__API int seda__io_timer_arm(seda_io_loop_t *loop,
                                 struct seda__io_timer *t, uint64_t due);
/* Disarm T (no-op when not armed). */
SEDA__API void seda__io_timer_disarm(seda_io_loop_t *loop,
                                     struct seda__io_timer *t);
SEDA__API bool seda__io_timer_armed(const struct seda__io_timer *t);
/* Milliseconds epoll may sleep (-1: no timer). */
SEDA__API int seda__io_timers_wait_ms(struct seda__io_timers *ts,
                                      uint64_t now);
/* Fire the timers due at NOW that were armed before this call. */
SEDA__API void seda__io_timers_run(seda_io_loop_t *loop,
                                   struct seda__io_timers *ts, uint64_t now);
SEDA__API void seda__io_timers_free(struct seda__io_timers *ts);
SEDA__API struct seda__io_timers *seda__io_timers_of(seda_io_loop_t *loop);

/* ---- http.c ---- */

/* Global curl setup (once per process, any thread).  0 or -ENOMEM. */
SEDA__API int seda__io_http_global_init(void);
/* At the loop's end (loop thread, after every op completed). */
SEDA__API void seda__io_http_free(seda_io_loop_t *loop);
/* seda_io_http_set_idle's setting, in ns (loop.c keeps it).  Any thread. */
SEDA__API uint64_t seda__io_http_idle_ns(seda_io_loop_t *loop);

/* ---- resolve.c ---- */

/* A name lookup off the loop thread.  done runs on the loop thread with
 * the result (res: freeaddrinfo's to free; gai: getaddrinfo's code) and
 * the job, which it frees with seda__io_resolve_free. */
struct seda__io_resolve_job {
    struct seda__io_task task;      /* posted back with the result */
    struct seda__io_resolve_job *next; /* the resolver's queue */
    char *host;
    char port[8];
    struct addrinfo *res;
    int gai;
    void (*done)(seda_io_loop_t *loop, struct seda__io_resolve_job *j);
    void *ud;
};

/* Queue J (loop thread).  0, or -ENOMEM / -EAGAIN (no resolver thread). */
SEDA__API int seda__io_resolve(seda_io_loop_t *loop,
                               struct seda__io_resolve_job *j);
SEDA__API void seda__io_resolve_free(struct seda__io_resolve_job *j);
/* Stop and join the resolver thread (loop thread, at the loop's end); the
 * jobs it finished are posted, the rest dropped with done called (gai
 * EAI_CANCELED). */
SEDA__API void seda__io_resolver_stop(seda_io_loop_t *loop);

#endif /* SEDA_IO_INT_H */
