/* SPDX-License-Identifier: MIT */
/*
 * pool_int.h -- the pool's insides, shared by pool.c (the task ring, the
 * workers and their idle wait), pool_ready.c (readiness and the keeper)
 * and pool_loan.c (managed blocking); see pool.c's DESIGN.  Nothing
 * outside these three files includes it.
 */
#ifndef SEDA_POOL_INT_H
#define SEDA_POOL_INT_H

#include <errno.h>
#include <string.h>

#include "pool.h"
#include "ready.h"
#include "timeheap.h"

/* Shared by the three files; internal names. */
#define tls_worker seda__pool_tls_worker
#define tls_looking seda__pool_tls_looking
#define tls_data seda__pool_tls_data
#define tls_data_set seda__pool_tls_data_set
#define tls_block_depth seda__pool_tls_block_depth
#define tls_block_t0 seda__pool_tls_block_t0
#define tls_blocked_ns seda__pool_tls_blocked_ns
#define wake_one seda__pool_wake_one
#define unpark seda__pool_unpark
#define kick seda__pool_kick
#define poll_wanted seda__pool_poll_wanted
#define poll_ready seda__pool_poll_ready
#define keeper_start seda__pool_keeper_start
#define loan_retire seda__pool_loan_retire
#define slots_grow seda__pool_slots_grow
#define worker_main seda__pool_worker_main

struct task {
    seda__task_fn fn;
    void *arg;
};

struct seda_worker_s {
    struct seda_pool *pool;     /* immutable */
    int index;                  /* immutable */
    int slot;                   /* loan slot, -1 (regular) or -2 (the
                                   keeper); immutable */
    pthread_t tid;              /* written before start, read at join */
    pthread_cond_t cv;          /* this worker sleeps here */
    bool parked;                /* on the idle stack; guarded by pool mu */
    bool spare;                 /* loan thread waiting to be lent again;
                                   guarded by pool mu */
    bool mail;                  /* woken to run the mail hook before its
                                   next task (seda_worker_wake); guarded
                                   by pool mu */
};

/* A loan slot: at most one thread at a time, and the worker data it
 * keeps between threads.  All fields guarded by pool mu. */
struct loan_slot {
    bool busy;                  /* a thread runs here, or is being made */
    bool joinable;              /* tid has been started and not joined */
    pthread_t tid;              /* the slot's latest thread */
    bool has_data;              /* data holds a kept start() value */
    void *data;
};

/*
 * Locking:
 *   mu guards: ring, mask, head, count, idle, parked and parked_cap (the
 *   idle stack and each worker's parked flag), target.
 *   resize_mu guards workers, cap, joined (resize and stop hold it; it is
 *   taken before mu).
 *   loan_mu serialises making and joining loan threads (block_begin and
 *   stop; taken before mu, after resize_mu, never while a stage lock is
 *   held).  The loan fields below are guarded by mu.
 *   Immutable after seda__pool_new: start, stop, ud, owner.
 *   Atomic: stopping (release in stop / acquire in readers).
 *   Lock order: stage->mu may be held when taking pool->mu, never the
 *   reverse.
 */
struct seda_pool {
    seda__mutex_t mu;
    struct task *ring;          /* guarded by mu */
    uint32_t mask;              /* guarded by mu */
    uint32_t head;              /* guarded by mu */
    uint32_t count;             /* guarded by mu */
    uint32_t reserved;          /* slots promised; guarded by mu */
    int idle;                   /* sleeping workers; guarded by mu */
    seda_worker_mail_fn mail_fn;/* the mail hook; guarded by mu */
    struct seda_worker_s **parked;     /* idle stack, most recent last; mu */
    int parked_cap;             /* room in parked; guarded by mu */
    atomic_uint pending;        /* mirror of count for spinners: written
                                   under mu (release), read without it
                                   (acquire) as a hint only */
    _Atomic int64_t gap_ns;     /* recent idle gaps of the pool, a moving
                                   average the spinner keeps (relaxed: a
                                   hint for the spin's length) */
    atomic_int spinning;        /* workers spinning before sleep (relaxed;
                                   the decision is re-checked under mu) */
    atomic_bool stopping;       /* release/acquire, see pool.h */
    bool joined;                /* guarded by resize_mu */
    seda__mutex_t resize_mu;    /* serialises resize and stop; outermost */
    seda__mutex_t loan_mu;      /* serialises loan threads' start, join */
    atomic_int n;               /* running threads: written under mu and
                                   resize_mu, read relaxed for stats */
    int target;                 /* workers with index >= target exit;
                                   guarded by mu */
    /* Loans (see DESIGN); all guarded by mu. */
    int max_loans;              /* bound on lent */
    bool max_loans_set;         /* max_loans given, not 4 * workers */
    int blocked;                /* threads inside a managed block */
    int lent;                   /* loan threads in service */
    int lent_peak;              /* highest lent so far */
    uint64_t loans;             /* loans started so far */
    uint64_t uncovered;         /* waits no loan covered (max_loans
                                   reached): each can starve the stages
                                   that need a worker; guarded by mu */
    struct loan_slot *slots;    /* nslots entries */
    int nslots;
    struct seda_worker_s **spares;     /* retired loan threads, nslots room */
    int nspare;
    /* Timed tasks (seda__pool_submit_at), all guarded by mu: a min-heap by
     * due time.  Workers run a due one before the ring's next task, and
     * park with their next due time as the deadline. */
    struct seda__timeheap timers;
    struct seda_worker_s **workers;    /* cap entries; guarded by resize_mu */
    int cap;                    /* guarded by resize_mu */
    seda_worker_start_fn start;
    seda_worker_stop_fn stop;
    void *ud;
    void *owner;
    /* Readiness (ready.c; see DESIGN), guarded by mu: the set (made at
     * the first watch, then immutable until free), the worker waiting on
     * it now (blocking, or looking between tasks), whether it was kicked
     * since, and when a busy worker last looked. */
    struct seda_ready *rd;
    struct seda_worker_s *poller;
    bool poller_waits;          /* the poller blocks (an idle worker's
                                   wait), not a look */
    bool kicked;
    atomic_bool has_rd;         /* rd is set (release; read acquire
                                   without mu, then rd is immutable) */
    _Atomic int64_t looked_ns;  /* when a worker last took readiness
                                   events (relaxed: a hint, decided again
                                   under mu) */
    /* The keeper (see DESIGN): immutable after seda__pool_new (NULL when
     * its thread could not start); keeper_armed, guarded by mu: it
     * watches the pool (wakes every KEEP_NS) instead of sleeping. */
    struct seda_worker_s *keeper;
    bool keeper_armed;
};

/* How often at most a busy worker looks for readiness between tasks. */
#define LOOK_NS 10000

/* How long readiness may go unlooked-at while every worker is inside a
 * task before the keeper looks; how often an armed keeper wakes; how long
 * it stays armed with nothing to do. */
#define KEEP_NS 1000000

/* Events taken per wait. */
#define READY_BATCH 64

/* How long a retired loan thread waits to be lent again before it exits,
 * and how many slots keep their worker data after that. */
#define LOAN_KEEP_NS 2000000000
#define LOAN_KEEP_DATA 4

extern _Thread_local struct seda_worker_s *tls_worker;
extern _Thread_local bool tls_looking;  /* callbacks run inside a task */
extern _Thread_local void *tls_data;
extern _Thread_local bool tls_data_set;
extern _Thread_local int tls_block_depth;
extern _Thread_local int64_t tls_block_t0;
extern _Thread_local int64_t tls_blocked_ns;

/* pool.c */
void unpark(struct seda_pool *p, struct seda_worker_s *w);     /* mu held */
void wake_one(struct seda_pool *p);                            /* mu held */
void *worker_main(void *arg);
/* pool_ready.c */
void kick(struct seda_pool *p);                                /* mu held */
bool poll_wanted(const struct seda_pool *p);                   /* mu held */
int poll_ready(struct seda_pool *p, struct seda_worker_s *w, int64_t due);
void keeper_start(struct seda_pool *p);
/* pool_loan.c */
bool loan_retire(struct seda_pool *p, struct seda_worker_s *w); /* mu held */
int slots_grow(struct seda_pool *p, int max);                  /* mu held */

/* More loan threads in service than waits to cover (mu held). */
static inline bool loan_excess(const struct seda_pool *p)
{
    return p->lent > p->blocked;
}

#endif
