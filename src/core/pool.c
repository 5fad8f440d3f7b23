/* SPDX-License-Identifier: MIT */
/*
 * pool.c -- the shared worker pool (see pool.h).
 *
 * DESIGN
 *   Tasks live in a ring guarded by pool->mu.  A worker loops: take the
 *   head task, drop the lock, run it.  With nothing to do it sleeps on
 *   its own condition variable, on an idle stack; submit wakes the most
 *   recently parked worker (its cache is warmest, and a stage's drain task
 *   keeps coming back to the same worker) only when someone sleeps, so a busy
 *   pool pays no wake-up syscalls.  Before sleeping, an idle worker spins
 *   for up to SPIN_NS watching `pending`; submit skips the wake-up while
 *   anyone spins, and for the first task queued by a worker that comes
 *   straight back for it (`prompt`; not from inside a consumer call,
 *   which may run or wait for long).  A worker about to block in
 *   admission calls seda__pool_block_begin, so what it queued gets another
 *   worker (a handler filling a full stage would otherwise wait on the
 *   very drain task it queued).  A worker routing a hop into a full
 *   stage may also take that stage's queued drain task out of the ring
 *   (seda__pool_take) and run it itself (see help_drain in stage.c): with
 *   every worker waiting there, nobody else would.  Stop sets `stopping`
 *   (release), wakes
 *   everyone and joins; a worker leaves as soon as it sees the flag, without
 *   taking more tasks.
 *
 *   Managed blocking (loans): a worker about to wait inside a consumer
 *   call or a hop (room in a full stage, a pull receive) brackets the wait
 *   with seda__pool_block_begin/end.  While `blocked` threads wait, the
 *   pool keeps `lent` loan threads in service (lent <= min(blocked,
 *   max_loans)), so `target` threads stay runnable and the drain tasks the
 *   waiters depend on keep running.  A loan thread is an ordinary worker
 *   (same task ring, same idle stack) whose index is SEDA_LOAN_INDEX0 +
 *   its slot.  When the waits end, lent > blocked: a loan thread retires
 *   at its next task boundary (a parked one is woken for it) and becomes
 *   a spare, kept warm for LOAN_KEEP_NS for the next loan, then exits.
 *   Its worker data (the Lua state) is made lazily, on the first
 *   seda_worker_data() call, and the first LOAN_KEEP_DATA slots keep it
 *   after their thread exits, so a loan in steady state costs neither a
 *   thread nor a state.  The same shape as Java's ForkJoinPool
 *   compensation (managedBlock) and Go's hand-off of a P when its M
 *   blocks in a system call -- with a hard bound, since their users'
 *   common complaint is thread explosion under many blocked tasks.
 *
 *   Readiness (SPEC.md section 16): descriptors watched through
 *   seda_watch_add (ready.c) are served by these same workers, no thread
 *   of their own.  With watches registered, one idle worker at a time
 *   waits in epoll_wait instead of on its condition variable (the
 *   poller; the others park as before), with the next timed task as its
 *   deadline; a submit that finds no parked worker kicks the poller
 *   (eventfd).  The poller runs the callbacks of what it got itself --
 *   a request read there is published there and, the ring being FIFO and
 *   the submit prompt, its drain task is usually this worker's next
 *   (run to completion) -- and a worker that takes a task while nobody
 *   polls and a worker is parked wakes that one to poll.  A busy worker
 *   looks (epoll_wait, timeout 0) between tasks when nobody polls, at
 *   most every LOOK_NS, as Go's scheduler polls the network between
 *   goroutines: readiness is served within about a task's time even with
 *   every worker busy.  With watches registered an idle worker does not
 *   spin before it parks: it would take the poller's next task (the
 *   request it just read) from under it, and compete with the network
 *   for the cores; the idle wait is epoll_wait or a condition variable.
 *
 *   The keeper: a thread of the pool's own, made with it, that runs no
 *   task.  A handler may hold its worker for seconds, and with every
 *   worker inside one, nobody would look: a request refused at the door
 *   would wait for a handler to end for its 503.  So a worker that takes
 *   a task leaving no worker parked and nobody polling arms the keeper;
 *   armed, it wakes every KEEP_NS, and when nobody has looked for that
 *   long it looks itself (as a busy worker does between tasks, and as
 *   Go's sysmon polls the network when no P has for a while): what it
 *   reads is refused at the door at once or queued for the workers.  It
 *   disarms (and sleeps until armed again) as soon as a worker is parked.
 *   So readiness waits at most about KEEP_NS, whatever the handlers do,
 *   and an idle pool's keeper costs nothing.
 *
 *   Each worker publishes its identity in thread-local storage so the bus
 *   can tell when a publish comes from one of its own workers (hop timeout)
 *   and handlers can reach their per-worker data (the Lua state).
 */
#include <errno.h>
#include <string.h>

#include "pool.h"
#include "ready.h"
#include "timeheap.h"

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

/* How long an idle worker watches for new tasks before it parks.  A
 * kernel wake-up costs microseconds on a VM; a stage whose producer is a
 * little slower than its consumer would otherwise pay one per batch.  The
 * watch is cpu_relax only (PAUSE: the sibling hyperthread and the
 * producer keep the core's issue slots) and short: no sched_yield loop,
 * which on a small machine puts the spinner back on the run queue beside
 * the threads doing the work, and no stretching to the pool's recent idle
 * gaps (it spun up to a millisecond at a time with a producer paced in
 * 1 ms ticks: a core's worth of CPU for half a core's worth of work).  An
 * idle pool is asleep after SPIN_NS. */
#define SPIN_NS 20000

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


/* Spin (mu not held) until a task may be pending or SPIN_NS pass.  The
 * caller re-checks under mu either way. */
static void spin_for_work(struct seda_pool *p)
{
    /* One spinner at a time: on a small machine more would steal the
     * cores that producers and busy workers need. */
    int expect = 0;
    if (!atomic_compare_exchange_strong_explicit(&p->spinning, &expect, 1,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    int64_t end = seda__now_ns() + SPIN_NS;
    for (unsigned i = 1;; i++) {
        /* Acquire: pairs with the release store in seda__pool_submit. */
        if (atomic_load_explicit(&p->pending, memory_order_acquire) ||
            atomic_load_explicit(&p->stopping, memory_order_acquire))
            break;
        seda__cpu_relax();
        if ((i & 15) == 0 && seda__now_ns() >= end)
            break;
    }
    atomic_fetch_sub_explicit(&p->spinning, 1, memory_order_relaxed);
}

/* Take w off the idle stack (mu held). */
static void unpark(struct seda_pool *p, struct seda_worker_s *w)
{
    for (int i = 0; i < p->idle; i++) {
        if (p->parked[i] == w) {
            memmove(&p->parked[i], &p->parked[i + 1],
                    sizeof(p->parked[0]) * (size_t)(p->idle - i - 1));
            p->idle--;
            break;
        }
    }
    w->parked = false;
}

/* Wake the most recently parked worker (mu held). */
static void wake_one(struct seda_pool *p)
{
    struct seda_worker_s *w = p->parked[--p->idle];
    w->parked = false;
    pthread_cond_signal(&w->cv);
}

static _Thread_local struct seda_worker_s *tls_worker;

/* Wake the worker waiting for readiness (mu held); not when that is the
 * caller (running what it got: it looks again before it waits). */
static void kick(struct seda_pool *p)
{
    if (p->poller && !p->kicked && p->poller != tls_worker) {
        p->kicked = true;
        seda__ready_kick(p->rd);
    }
}

/* Wake every parked worker (mu held): stop and resize. */
static void wake_all(struct seda_pool *p)
{
    while (p->idle > 0)
        wake_one(p);
    kick(p);
}

/* Whether an idle worker should wait for readiness (mu held): watches
 * are registered and nobody waits for them. */
static bool poll_wanted(const struct seda_pool *p)
{
    return p->rd && !p->poller && seda__ready_any(p->rd);
}

/* Wait for readiness until due (or a look, when due is now), run what
 * came (mu held; dropped while waiting and running).  Returns how many
 * events came. */
static int poll_ready(struct seda_pool *p, struct seda_worker_s *w,
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

static _Thread_local bool tls_looking;  /* callbacks run inside a task */
static _Thread_local void *tls_data;
static _Thread_local bool tls_data_set; /* tls_data holds start()'s value */
/* seda's own waits on this thread (block_begin/end): nesting depth, the
 * clock at the outermost begin, the time summed since the last take. */
static _Thread_local int tls_block_depth;
static _Thread_local int64_t tls_block_t0;
static _Thread_local int64_t tls_blocked_ns;

/* More loan threads in service than waits to cover (mu held). */
static bool loan_excess(const struct seda_pool *p)
{
    return p->lent > p->blocked;
}

/* Whether w must stop taking tasks (mu held): the pool stops, a shrink
 * retired it, or it is a loan thread no longer needed. */
static bool must_leave(const struct seda_pool *p, const struct seda_worker_s *w)
{
    if (atomic_load_explicit(&p->stopping, memory_order_acquire))
        return true;
    return w->slot < 0 ? w->index >= p->target : loan_excess(p);
}

/* A loan thread whose loan ended waits as a spare (mu held) until it is
 * lent again (true), or LOAN_KEEP_NS pass or the pool stops (false: it
 * exits). */
static bool loan_retire(struct seda_pool *p, struct seda_worker_s *w)
{
    p->lent--;
    w->spare = true;
    p->spares[p->nspare++] = w;
    int64_t until = seda__now_ns() + LOAN_KEEP_NS;
    while (w->spare &&
           !atomic_load_explicit(&p->stopping, memory_order_acquire) &&
           seda__cond_wait(&w->cv, &p->mu, until) != ETIMEDOUT)
        ;
    if (!w->spare)
        return true;                    /* lent again: lent counts it */
    for (int i = 0; i < p->nspare; i++) {
        if (p->spares[i] == w) {
            p->spares[i] = p->spares[--p->nspare];
            break;
        }
    }
    w->spare = false;
    return false;
}

/* Room on the idle stack for one more sleeper (mu held).  Workers and
 * loan threads both park there, and a thread inside nested waits (a
 * blocked worker helping another stage's drain that blocks again) counts
 * as several waits with a loan each, so the sleepers can outnumber the
 * workers: the stack grows as needed.  0 or SEDA_ENOMEM. */
static int parked_room(struct seda_pool *p)
{
    if (p->idle < p->parked_cap)
        return 0;
    int cap = p->parked_cap ? p->parked_cap * 2 : 8;
    struct seda_worker_s **pk = seda__realloc(p->parked, sizeof *pk * (size_t)cap);
    if (!pk)
        return SEDA_ENOMEM;
    p->parked = pk;
    p->parked_cap = cap;
    return 0;
}

static void *worker_main(void *arg)
{
    struct seda_worker_s *w = arg;
    struct seda_pool *p = w->pool;
    tls_worker = w;
    if (w->slot < 0) {
        /* A loan thread makes its data lazily (seda_worker_data). */
        tls_data = p->start ? p->start(w->index, p->ud) : NULL;
        tls_data_set = true;
    }

    seda__mutex_lock(&p->mu);
    for (;;) {
        /* With watches, no spin: a worker that would take the poller's
         * next task from under it (a request it read and published) is
         * not wanted, and the cores are the network's too. */
        if (p->count == 0 && !must_leave(p, w) &&
            !(p->rd && seda__ready_any(p->rd))) {
            seda__mutex_unlock(&p->mu);
            spin_for_work(p);
            seda__mutex_lock(&p->mu);
        }
        while (p->count == 0 && !must_leave(p, w) &&
               !seda__timeheap_due(&p->timers) && !w->mail) {
            int64_t due = seda__timeheap_next(&p->timers);
            if (poll_wanted(p)) {
                /* The pool's one waiter on readiness (see DESIGN). */
                poll_ready(p, w, due);
                continue;
            }
            if (parked_room(p) != 0) {
                /* No memory to park: look again in a millisecond. */
                int64_t soon = seda__now_ns() + 1000000;
                seda__cond_wait(&w->cv, &p->mu, due < soon ? due : soon);
                continue;
            }
            /* Park on the idle stack: a submit wakes the most recently
             * parked worker, whose cache is the warmest.  With timed
             * tasks waiting, until the next one is due. */
            p->parked[p->idle++] = w;
            w->parked = true;
            seda__cond_wait(&w->cv, &p->mu, due);
            if (w->parked)
                unpark(p, w);           /* woken by a broadcast or due */
        }
        if (w->mail && p->mail_fn &&
            !atomic_load_explicit(&p->stopping, memory_order_acquire)) {
            /* Mail first: what it resumes holds its stage's permit and
             * goes before new work (seda_worker_wake). */
            seda_worker_mail_fn fn = p->mail_fn;
            w->mail = false;
            seda__mutex_unlock(&p->mu);
            fn(w->index, tls_data, p->ud);
            seda__mutex_lock(&p->mu);
            continue;
        }
        if (must_leave(p, w)) {
            if (atomic_load_explicit(&p->stopping, memory_order_acquire))
                break;
            /* Retired by a shrink, or a loan that ended.  A submit may
             * have counted on us (we were spinning, or it came from our
             * own task and expected us to take it next): hand queued work
             * to a sleeper. */
            if (p->count > 0 && p->idle > 0)
                wake_one(p);
            if (w->slot >= 0 && loan_retire(p, w))
                continue;
            break;
        }
        if (seda__timeheap_due(&p->timers)) {
            /* A due timed task goes before the ring's next one. */
            struct seda__timed d = seda__timeheap_pop(&p->timers);
            if (p->count > 0 && p->idle > 0)
                wake_one(p);
            seda__mutex_unlock(&p->mu);
            d.fn(d.arg);
            seda__mutex_lock(&p->mu);
            continue;
        }
        if (p->count == 0)
            continue;                   /* woken for a timer not yet due */
        if (poll_wanted(p)) {
            /* Busy, and nobody waits for readiness: look first. */
            int64_t now = seda__now_ns();
            if (now - atomic_load_explicit(&p->looked_ns,
                                           memory_order_relaxed) >= LOOK_NS) {
                atomic_store_explicit(&p->looked_ns, now,
                                      memory_order_relaxed);
                poll_ready(p, w, now);
                /* mu was dropped.  Take a task now if one is left (a
                 * look slower than LOOK_NS must not start another). */
                if (p->count == 0 || must_leave(p, w))
                    continue;
            }
        }
        struct task t = p->ring[p->head];
        p->head = (p->head + 1) & p->mask;
        p->count--;
        atomic_store_explicit(&p->pending, p->count, memory_order_relaxed);
        /* More work than this worker: pass the wake-up on so a sleeper
         * is not left idle beside a queued task. */
        if (p->count > 0 && p->idle > 0)
            wake_one(p);
        /* Nobody would wait for readiness while this task runs: a parked
         * worker does, or with none left, the keeper watches. */
        else if (p->idle > 0 && poll_wanted(p))
            wake_one(p);
        else if (p->idle == 0 && p->keeper && !p->keeper_armed &&
                 poll_wanted(p)) {
            p->keeper_armed = true;
            pthread_cond_signal(&p->keeper->cv);
        }
        seda__mutex_unlock(&p->mu);
        t.fn(t.arg);
        seda__mutex_lock(&p->mu);
    }
    bool keep = false;
    if (w->slot >= 0) {
        struct loan_slot *ls = &p->slots[w->slot];
        /* A slot among the first few keeps the data for its next thread,
         * unless the pool is going away. */
        keep = tls_data_set && w->slot < LOAN_KEEP_DATA &&
               !atomic_load_explicit(&p->stopping, memory_order_acquire);
        if (keep) {
            ls->data = tls_data;
            ls->has_data = true;
        }
        ls->busy = false;               /* joinable stays: stop joins it */
    }
    seda__mutex_unlock(&p->mu);

    if (p->stop && tls_data_set && !keep)
        p->stop(w->index, tls_data, p->ud);
    tls_data = NULL;
    tls_data_set = false;
    tls_worker = NULL;
    if (w->slot >= 0) {
        /* Nothing refers to a loan thread's worker once busy is clear. */
        pthread_cond_destroy(&w->cv);
        seda__free(w);
    }
    return NULL;
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
static void keeper_start(struct seda_pool *p)
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

/* Start workers [from, to).  resize_mu held.  Returns 0 or -EAGAIN /
 * SEDA_ENOMEM; on failure the workers started so far keep running and n
 * says how many there are. */
static int start_workers(struct seda_pool *p, int from, int to)
{
    if (to > p->cap) {
        struct seda_worker_s **w = seda__realloc(p->workers,
                                          sizeof *w * (size_t)to);
        if (!w)
            return SEDA_ENOMEM;
        p->workers = w;
        /* The idle stack holds at most every worker; grown under mu
         * since sleepers reach it. */
        seda__mutex_lock(&p->mu);
        struct seda_worker_s **pk = to <= p->parked_cap ? p->parked
                             : seda__realloc(p->parked,
                                             sizeof *pk * (size_t)to);
        if (pk && to > p->parked_cap) {
            p->parked = pk;
            p->parked_cap = to;
        }
        seda__mutex_unlock(&p->mu);
        if (!pk)
            return SEDA_ENOMEM;
        p->cap = to;
    }
    for (int i = from; i < to; i++) {
        struct seda_worker_s *w = seda__calloc(1, sizeof *w);
        if (!w)
            return SEDA_ENOMEM;
        if (seda__cond_init(&w->cv) != 0) {
            seda__free(w);
            return SEDA_ENOMEM;
        }
        w->pool = p;
        w->index = i;
        w->slot = -1;
        seda__mutex_lock(&p->mu);
        p->target = i + 1;
        seda__mutex_unlock(&p->mu);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            pthread_cond_destroy(&w->cv);
            seda__free(w);
            seda__mutex_lock(&p->mu);
            p->target = i;
            seda__mutex_unlock(&p->mu);
            return -EAGAIN;
        }
        p->workers[i] = w;
        atomic_store_explicit(&p->n, i + 1, memory_order_relaxed);
    }
    return 0;
}

/* Stop and join workers [to, n).  resize_mu held. */
static void stop_workers(struct seda_pool *p, int to)
{
    int n = atomic_load_explicit(&p->n, memory_order_relaxed);
    seda__mutex_lock(&p->mu);
    p->target = to;
    wake_all(p);
    seda__mutex_unlock(&p->mu);
    for (int i = n - 1; i >= to; i--) {
        pthread_join(p->workers[i]->tid, NULL);
        pthread_cond_destroy(&p->workers[i]->cv);
        seda__free(p->workers[i]);
        p->workers[i] = NULL;
        atomic_store_explicit(&p->n, i, memory_order_relaxed);
    }
}

/* Make room for max loan slots (mu held).  0 or SEDA_ENOMEM. */
static int slots_grow(struct seda_pool *p, int max)
{
    if (max <= p->nslots)
        return 0;
    struct loan_slot *sl = seda__realloc(p->slots, sizeof *sl * (size_t)max);
    if (!sl)
        return SEDA_ENOMEM;
    p->slots = sl;
    memset(&sl[p->nslots], 0, sizeof *sl * (size_t)(max - p->nslots));
    struct seda_worker_s **sp = seda__realloc(p->spares, sizeof *sp * (size_t)max);
    if (!sp)
        return SEDA_ENOMEM;
    p->spares = sp;
    p->nslots = max;
    return 0;
}

int seda__pool_new(int n, int max_loans, seda_worker_start_fn start,
                   seda_worker_stop_fn stop, void *ud, void *owner,
                   struct seda_pool **out)
{
    if (n <= 0 || max_loans > SEDA_MAX_LOANS)
        return SEDA_EINVAL;
    struct seda_pool *p = seda__calloc(1, sizeof *p);
    if (!p)
        return SEDA_ENOMEM;
    p->ring = seda__malloc(sizeof *p->ring * 16);
    if (!p->ring) {
        seda__free(p);
        return SEDA_ENOMEM;
    }
    p->mask = 15;
    seda__mutex_init(&p->mu);
    seda__mutex_init(&p->resize_mu);
    seda__mutex_init(&p->loan_mu);
    p->max_loans_set = max_loans >= 0;
    p->max_loans = max_loans >= 0 ? max_loans
                 : 4 * n < SEDA_MAX_LOANS ? 4 * n : SEDA_MAX_LOANS;
    int rc = slots_grow(p, p->max_loans);
    if (rc) {
        seda__pool_free(p);
        return rc;
    }
    atomic_init(&p->stopping, false);
    atomic_init(&p->pending, 0);
    atomic_init(&p->spinning, 0);
    atomic_init(&p->has_rd, false);
    atomic_init(&p->looked_ns, 0);
    atomic_init(&p->n, 0);
    p->start = start;
    p->stop = stop;
    p->ud = ud;
    p->owner = owner;
    seda__mutex_lock(&p->resize_mu);
    rc = start_workers(p, 0, n);
    if (rc == 0)
        keeper_start(p);
    seda__mutex_unlock(&p->resize_mu);
    if (rc) {
        seda__pool_free(p);             /* unwinds the ones running */
        return rc;
    }
    *out = p;
    return 0;
}

int seda__pool_resize(struct seda_pool *p, int n)
{
    if (n <= 0 || n > 1024)
        return SEDA_EINVAL;
    seda__mutex_lock(&p->resize_mu);
    int rc = 0;
    if (p->joined) {
        rc = SEDA_ECLOSED;
    } else {
        int cur = atomic_load_explicit(&p->n, memory_order_relaxed);
        if (!p->max_loans_set) {
            /* The default bound follows the pool: 4 * workers. */
            int max = 4 * n < SEDA_MAX_LOANS ? 4 * n : SEDA_MAX_LOANS;
            seda__mutex_lock(&p->mu);
            if (slots_grow(p, max) == 0)
                p->max_loans = max;
            seda__mutex_unlock(&p->mu);
        }
        if (n > cur)
            rc = start_workers(p, cur, n);
        else if (n < cur)
            stop_workers(p, n);
    }
    seda__mutex_unlock(&p->resize_mu);
    return rc;
}

int seda__pool_reserve(struct seda_pool *p, int more)
{
    seda__mutex_lock(&p->mu);
    uint32_t want = p->reserved + (uint32_t)more;
    if (want > p->mask + 1) {
        uint32_t size = p->mask + 1;
        while (size < want)
            size <<= 1;
        struct task *r = seda__malloc(sizeof *r * size);
        if (!r) {
            seda__mutex_unlock(&p->mu);
            return SEDA_ENOMEM;
        }
        for (uint32_t i = 0; i < p->count; i++)
            r[i] = p->ring[(p->head + i) & p->mask];
        seda__free(p->ring);
        p->ring = r;
        p->mask = size - 1;
        p->head = 0;
    }
    p->reserved = want;
    seda__mutex_unlock(&p->mu);
    return 0;
}

int seda__pool_submit(struct seda_pool *p, seda__task_fn fn, void *arg,
                      bool prompt)
{
    /* From one of our own workers that returns promptly, the caller takes
     * the next task itself, so one queued task needs no wake-up. */
    bool self = prompt && tls_worker && tls_worker->pool == p &&
                !tls_looking;   /* a task runs on: it is not coming back */
    seda__mutex_lock(&p->mu);
    if (atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        seda__mutex_unlock(&p->mu);
        return SEDA_ECLOSED;
    }
    assert(p->count <= p->mask);
    p->ring[(p->head + p->count) & p->mask] = (struct task){ fn, arg };
    p->count++;
    /* Release: pairs with the acquire in spin_for_work. */
    atomic_store_explicit(&p->pending, p->count, memory_order_release);
    /* A spinning worker will take one task (and re-checks under mu before
     * it sleeps), so wake a sleeper only for tasks beyond the spinners. */
    if (p->count > (uint32_t)atomic_load_explicit(&p->spinning,
                                                  memory_order_relaxed) +
                       (self ? 1u : 0u)) {
        if (p->idle > 0)
            wake_one(p);
        else
            kick(p);            /* the one waiting for readiness */
    }
    seda__mutex_unlock(&p->mu);
    return 0;
}

/* Count a loan started (mu held). */
static void lend(struct seda_pool *p)
{
    p->lent++;
    p->loans++;
    if (p->lent > p->lent_peak)
        p->lent_peak = p->lent;
}

/* Start a loan thread in slot k, reserved (busy) and counted in lent by
 * the caller.  loan_mu held, mu not held.  On failure the loan is undone
 * (the waiter goes on without one, as with max_loans reached). */
static void loan_start(struct seda_pool *p, int k)
{
    seda__mutex_lock(&p->mu);
    bool stop = atomic_load_explicit(&p->stopping, memory_order_acquire);
    bool join = p->slots[k].joinable;
    pthread_t old = p->slots[k].tid;
    p->slots[k].joinable = false;
    seda__mutex_unlock(&p->mu);
    if (join)
        pthread_join(old, NULL);        /* it exited: quick */
    struct seda_worker_s *w = stop ? NULL : seda__calloc(1, sizeof *w);
    pthread_t tid;
    if (w && seda__cond_init(&w->cv) == 0) {
        w->pool = p;
        w->index = SEDA_LOAN_INDEX0 + k;
        w->slot = k;
        if (pthread_create(&tid, NULL, worker_main, w) == 0) {
            seda__mutex_lock(&p->mu);
            p->slots[k].tid = tid;
            p->slots[k].joinable = true;
            seda__mutex_unlock(&p->mu);
            return;
        }
        pthread_cond_destroy(&w->cv);
    }
    seda__free(w);
    seda__mutex_lock(&p->mu);
    p->slots[k].busy = false;
    p->lent--;
    p->loans--;
    seda__mutex_unlock(&p->mu);
}

struct seda_pool *seda__pool_block_begin(void)
{
    if (!tls_worker)
        return NULL;
    struct seda_pool *p = tls_worker->pool;
    int k = -1;
    seda__mutex_lock(&p->mu);
    if (atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        seda__mutex_unlock(&p->mu);
        return NULL;
    }
    p->blocked++;
    /* The caller will not come back for the tasks it queued: a sleeper
     * takes them. */
    if (p->idle > 0 &&
        p->count > (uint32_t)atomic_load_explicit(&p->spinning,
                                                  memory_order_relaxed))
        wake_one(p);
    if (p->lent < p->blocked && p->lent < p->max_loans) {
        if (p->nspare > 0) {
            struct seda_worker_s *w = p->spares[--p->nspare];
            w->spare = false;
            pthread_cond_signal(&w->cv);
            lend(p);
        } else {
            for (int i = 0; i < p->nslots && i < p->max_loans; i++) {
                if (!p->slots[i].busy) {
                    k = i;
                    break;
                }
            }
            if (k >= 0) {
                p->slots[k].busy = true;
                lend(p);
            }
        }
    }
    if (p->lent < p->blocked)
        p->uncovered++;                 /* this wait holds a worker */
    seda__mutex_unlock(&p->mu);
    if (k >= 0) {
        seda__mutex_lock(&p->loan_mu);
        loan_start(p, k);
        seda__mutex_unlock(&p->loan_mu);
    }
    if (tls_block_depth++ == 0)
        tls_block_t0 = seda__clock_ns();
    return p;
}

int64_t seda__pool_blocked_take(void)
{
    int64_t ns = tls_blocked_ns;
    tls_blocked_ns = 0;
    return ns;
}

bool seda__pool_in_block(void)
{
    return tls_block_depth > 0;
}

void seda__pool_block_end(struct seda_pool *p)
{
    if (!p)
        return;
    if (tls_block_depth > 0 && --tls_block_depth == 0)
        tls_blocked_ns += seda__clock_ns() - tls_block_t0;
    seda__mutex_lock(&p->mu);
    p->blocked--;
    if (loan_excess(p) && p->poller && p->poller->slot >= 0)
        kick(p);                /* a loan thread waits for readiness */
    if (loan_excess(p)) {
        /* A loan thread asleep on the idle stack retires now; one that is
         * running retires when its task returns. */
        for (int i = p->idle - 1; i >= 0; i--) {
            struct seda_worker_s *w = p->parked[i];
            if (w->slot >= 0) {
                unpark(p, w);
                pthread_cond_signal(&w->cv);
                break;
            }
        }
    }
    seda__mutex_unlock(&p->mu);
}

uint64_t seda__pool_uncovered(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    uint64_t n = p->uncovered;
    seda__mutex_unlock(&p->mu);
    return n;
}

void seda__pool_loan_stats(struct seda_pool *p, int *lent, uint64_t *loans,
                           int *peak, int *max_loans)
{
    seda__mutex_lock(&p->mu);
    *lent = p->lent;
    *loans = p->loans;
    *peak = p->lent_peak;
    *max_loans = p->max_loans;
    seda__mutex_unlock(&p->mu);
}

int seda__pool_idle(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    int n = p->idle;
    seda__mutex_unlock(&p->mu);
    return n;
}

bool seda__pool_self_mail(void)
{
    struct seda_worker_s *w = tls_worker;
    if (!w)
        return false;
    seda__mutex_lock(&w->pool->mu);
    bool mail = w->mail;
    seda__mutex_unlock(&w->pool->mu);
    return mail;
}

bool seda__pool_loans_exhausted(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    bool out = p->lent >= p->max_loans && p->blocked > p->lent;
    seda__mutex_unlock(&p->mu);
    return out;
}

int seda__pool_submit_at(struct seda_pool *p, int64_t due, seda__task_fn fn,
                         void *arg)
{
    seda__mutex_lock(&p->mu);
    if (atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        seda__mutex_unlock(&p->mu);
        return SEDA_ECLOSED;
    }
    if (seda__timeheap_push(&p->timers, due, fn, arg) != 0) {
        seda__mutex_unlock(&p->mu);
        return SEDA_ENOMEM;
    }
    /* A new earliest due time: a sleeper must wait for it, not for the
     * one it went to sleep with (busy workers look at each boundary). */
    if (p->timers.v[0].arg == arg && p->timers.v[0].fn == fn) {
        if (p->idle > 0)
            wake_one(p);
        kick(p);                /* it waits with the old deadline */
    }
    seda__mutex_unlock(&p->mu);
    return 0;
}

int seda__pool_timers(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    int n = p->timers.n;
    seda__mutex_unlock(&p->mu);
    return n;
}

void seda__pool_drop_timers(struct seda_pool *p,
                            void (*each)(seda__task_fn fn, void *arg,
                                         void *ud),
                            void *ud)
{
    for (;;) {
        seda__mutex_lock(&p->mu);
        if (p->timers.n == 0) {
            seda__mutex_unlock(&p->mu);
            return;
        }
        struct seda__timed t = seda__timeheap_pop(&p->timers);
        seda__mutex_unlock(&p->mu);
        each(t.fn, t.arg, ud);
    }
}

bool seda__pool_take(struct seda_pool *p, seda__task_fn fn, void *arg)
{
    bool found = false;
    seda__mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->count; i++) {
        struct task *t = &p->ring[(p->head + i) & p->mask];
        if (t->fn != fn || t->arg != arg)
            continue;
        /* Close the gap: the tasks after it move up one, in order. */
        for (uint32_t k = i; k + 1 < p->count; k++)
            p->ring[(p->head + k) & p->mask] =
                p->ring[(p->head + k + 1) & p->mask];
        p->count--;
        atomic_store_explicit(&p->pending, p->count, memory_order_release);
        found = true;
        break;
    }
    seda__mutex_unlock(&p->mu);
    return found;
}

void seda__pool_stop(struct seda_pool *p)
{
    seda__mutex_lock(&p->resize_mu);
    seda__mutex_lock(&p->mu);
    /* Release: pairs with the acquire loads in worker_main and drain tasks;
     * everything done before stop is visible to a worker that sees it. */
    atomic_store_explicit(&p->stopping, true, memory_order_release);
    wake_all(p);
    for (int i = 0; i < p->nspare; i++)
        pthread_cond_signal(&p->spares[i]->cv);
    if (p->keeper)
        pthread_cond_signal(&p->keeper->cv);
    seda__mutex_unlock(&p->mu);
    if (p->joined) {
        seda__mutex_unlock(&p->resize_mu);
        return;
    }
    stop_workers(p, 0);
    if (p->keeper)
        pthread_join(p->keeper->tid, NULL);
    /* Loan threads: a block_begin that started one before it saw the
     * flag has finished starting it once loan_mu is ours. */
    seda__mutex_lock(&p->loan_mu);
    for (int i = 0; i < p->nslots; i++) {
        seda__mutex_lock(&p->mu);
        bool join = p->slots[i].joinable;
        pthread_t tid = p->slots[i].tid;
        p->slots[i].joinable = false;
        seda__mutex_unlock(&p->mu);
        if (join)
            pthread_join(tid, NULL);
    }
    seda__mutex_unlock(&p->loan_mu);
    p->joined = true;
    seda__mutex_unlock(&p->resize_mu);
    seda__mutex_lock(&p->mu);
    p->count = 0;               /* discarded; the bus sweeps the stages */
    atomic_store_explicit(&p->pending, 0, memory_order_relaxed);
    seda__mutex_unlock(&p->mu);
}

bool seda__pool_stopping(const struct seda_pool *p)
{
    return atomic_load_explicit(&p->stopping, memory_order_acquire);
}

void seda__pool_free(struct seda_pool *p)
{
    if (!p)
        return;
    seda__pool_stop(p);
    /* Worker data kept by loan slots whose threads exited: stopped here,
     * on the freeing thread (no worker uses it any more). */
    for (int i = 0; i < p->nslots; i++)
        if (p->slots[i].has_data && p->stop)
            p->stop(SEDA_LOAN_INDEX0 + i, p->slots[i].data, p->ud);
    if (p->keeper) {
        pthread_cond_destroy(&p->keeper->cv);
        seda__free(p->keeper);
    }
    seda__mutex_destroy(&p->mu);
    seda__mutex_destroy(&p->resize_mu);
    seda__mutex_destroy(&p->loan_mu);
    seda__free(p->slots);
    seda__free(p->spares);
    seda__timeheap_free(&p->timers);
    seda__ready_free(p->rd);
    seda__free(p->ring);
    seda__free(p->workers);
    seda__free(p->parked);
    seda__free(p);
}

int seda__pool_size(const struct seda_pool *p)
{
    return atomic_load_explicit(&((struct seda_pool *)p)->n,
                                memory_order_relaxed);
}

unsigned seda__pool_pending(const struct seda_pool *p)
{
    return atomic_load_explicit(&((struct seda_pool *)p)->pending,
                                memory_order_relaxed);
}

void *seda__pool_current_owner(void)
{
    return tls_worker ? tls_worker->pool->owner : NULL;
}

int seda_worker_index(void) { return tls_worker ? tls_worker->index : -1; }

seda_worker_t *seda_worker_self(void)
{
    struct seda_worker_s *w = tls_worker;
    return w && w->slot == -1 ? w : NULL;
}

void seda_worker_wake(seda_worker_t *w)
{
    struct seda_pool *p = w->pool;
    seda__mutex_lock(&p->mu);
    w->mail = true;
    if (w->parked) {
        unpark(p, w);
        pthread_cond_signal(&w->cv);
    } else if (p->poller == w) {
        kick(p);
    }
    seda__mutex_unlock(&p->mu);
}

void *seda_block_begin(void)
{
    return seda__pool_block_begin();
}

void seda_block_end(void *token)
{
    seda__pool_block_end(token);
}

void seda__pool_set_mail(struct seda_pool *p, seda_worker_mail_fn fn)
{
    seda__mutex_lock(&p->mu);
    p->mail_fn = fn;
    seda__mutex_unlock(&p->mu);
}

void *seda_worker_data(void)
{
    struct seda_worker_s *w = tls_worker;
    if (SEDA__UNLIKELY(w && !tls_data_set)) {
        /* A loan thread's first use: the data its slot kept, else new. */
        struct seda_pool *p = w->pool;
        struct loan_slot *ls;
        seda__mutex_lock(&p->mu);
        ls = &p->slots[w->slot];
        bool kept = ls->has_data;
        if (kept) {
            tls_data = ls->data;
            ls->has_data = false;
            ls->data = NULL;
        }
        seda__mutex_unlock(&p->mu);
        if (!kept)
            tls_data = p->start ? p->start(w->index, p->ud) : NULL;
        tls_data_set = true;
    }
    return tls_data;
}

int seda__pool_watch(struct seda_pool *p, int fd, uint32_t events,
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

void seda__pool_look(struct seda_pool *p)
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
