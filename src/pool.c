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
 *   admission calls seda__pool_kick, so what it queued gets another
 *   worker (a handler filling a full stage would otherwise wait on the
 *   very drain task it queued).  A worker routing a hop into a full
 *   stage may also take that stage's queued drain task out of the ring
 *   (seda__pool_take) and run it itself (see help_drain in stage.c): with
 *   every worker waiting there, nobody else would.  Stop sets `stopping`
 *   (release), wakes
 *   everyone and joins; a worker leaves as soon as it sees the flag, without
 *   taking more tasks.
 *
 *   Each worker publishes its identity in thread-local storage so the bus
 *   can tell when a publish comes from one of its own workers (hop timeout)
 *   and handlers can reach their per-worker data (the Lua state).
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "pool.h"

struct task {
    seda__task_fn fn;
    void *arg;
};

struct worker {
    struct seda_pool *pool;     /* immutable */
    int index;                  /* immutable */
    pthread_t tid;              /* written before start, read at join */
    pthread_cond_t cv;          /* this worker sleeps here */
    bool parked;                /* on the idle stack; guarded by pool mu */
};

/*
 * Locking:
 *   mu guards: ring, mask, head, count, idle, parked (the idle stack and
 *   each worker's parked flag), target.
 *   resize_mu guards workers, cap, joined (resize and stop hold it; it is
 *   taken before mu).
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
    struct worker **parked;     /* idle stack, most recent last; mu */
    atomic_uint pending;        /* mirror of count for spinners: written
                                   under mu (release), read without it
                                   (acquire) as a hint only */
    atomic_int spinning;        /* workers spinning before sleep (relaxed;
                                   the decision is re-checked under mu) */
    atomic_bool stopping;       /* release/acquire, see pool.h */
    bool joined;                /* guarded by resize_mu */
    seda__mutex_t resize_mu;    /* serialises resize and stop; outermost */
    atomic_int n;               /* running threads: written under mu and
                                   resize_mu, read relaxed for stats */
    int target;                 /* workers with index >= target exit;
                                   guarded by mu */
    struct worker **workers;    /* cap entries; guarded by resize_mu */
    int cap;                    /* guarded by resize_mu */
    seda_worker_start_fn start;
    seda_worker_stop_fn stop;
    void *ud;
    void *owner;
};

/* How long an idle worker watches for new tasks before sleeping.  A
 * kernel wake-up costs microseconds on a VM; a stage whose producer is a
 * little slower than its consumer would otherwise pay one per batch.  The
 * spin is bounded: an idle pool sleeps after this. */
#define SPIN_NS 20000


/* Spin (mu not held) until a task may be pending or SPIN_NS passes.  The
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
        if (i < 64)
            seda__cpu_relax();
        else
            sched_yield();              /* let a runnable thread have it */
        if ((i & 15) == 0 && seda__now_ns() >= end)
            break;
    }
    atomic_fetch_sub_explicit(&p->spinning, 1, memory_order_relaxed);
}

/* Take w off the idle stack (mu held). */
static void unpark(struct seda_pool *p, struct worker *w)
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
    struct worker *w = p->parked[--p->idle];
    w->parked = false;
    pthread_cond_signal(&w->cv);
}

/* Wake every parked worker (mu held): stop and resize. */
static void wake_all(struct seda_pool *p)
{
    while (p->idle > 0)
        wake_one(p);
}

static _Thread_local struct worker *tls_worker;
static _Thread_local void *tls_data;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct seda_pool *p = w->pool;
    tls_worker = w;
    tls_data = p->start ? p->start(w->index, p->ud) : NULL;

    seda__mutex_lock(&p->mu);
    for (;;) {
        if (p->count == 0 && w->index < p->target &&
            !atomic_load_explicit(&p->stopping, memory_order_acquire)) {
            seda__mutex_unlock(&p->mu);
            spin_for_work(p);
            seda__mutex_lock(&p->mu);
        }
        while (p->count == 0 && w->index < p->target &&
               !atomic_load_explicit(&p->stopping, memory_order_acquire)) {
            /* Park on the idle stack: a submit wakes the most recently
             * parked worker, whose cache is the warmest. */
            p->parked[p->idle++] = w;
            w->parked = true;
            seda__cond_wait(&w->cv, &p->mu, INT64_MAX);
            if (w->parked)
                unpark(p, w);           /* woken by a broadcast */
        }
        if (atomic_load_explicit(&p->stopping, memory_order_acquire))
            break;
        if (w->index >= p->target) {
            /* Retired by a shrink.  A submit may have counted on us (we
             * were spinning, or it came from our own task and expected us
             * to take it next): hand queued work to a sleeper. */
            if (p->count > 0 && p->idle > 0)
                wake_one(p);
            break;
        }
        struct task t = p->ring[p->head];
        p->head = (p->head + 1) & p->mask;
        p->count--;
        atomic_store_explicit(&p->pending, p->count, memory_order_relaxed);
        /* More work than this worker: pass the wake-up on so a sleeper
         * is not left idle beside a queued task. */
        if (p->count > 0 && p->idle > 0)
            wake_one(p);
        seda__mutex_unlock(&p->mu);
        t.fn(t.arg);
        seda__mutex_lock(&p->mu);
    }
    seda__mutex_unlock(&p->mu);

    if (p->stop)
        p->stop(w->index, tls_data, p->ud);
    tls_data = NULL;
    tls_worker = NULL;
    return NULL;
}

/* Start workers [from, to).  resize_mu held.  Returns 0 or -EAGAIN /
 * SEDA_ENOMEM; on failure the workers started so far keep running and n
 * says how many there are. */
static int start_workers(struct seda_pool *p, int from, int to)
{
    if (to > p->cap) {
        struct worker **w = seda__realloc(p->workers,
                                          sizeof *w * (size_t)to);
        if (!w)
            return SEDA_ENOMEM;
        p->workers = w;
        /* The idle stack holds at most every worker; grown under mu
         * since sleepers reach it. */
        seda__mutex_lock(&p->mu);
        struct worker **pk = seda__realloc(p->parked,
                                           sizeof *pk * (size_t)to);
        if (pk)
            p->parked = pk;
        seda__mutex_unlock(&p->mu);
        if (!pk)
            return SEDA_ENOMEM;
        p->cap = to;
    }
    for (int i = from; i < to; i++) {
        struct worker *w = seda__calloc(1, sizeof *w);
        if (!w)
            return SEDA_ENOMEM;
        if (seda__cond_init(&w->cv) != 0) {
            seda__free(w);
            return SEDA_ENOMEM;
        }
        w->pool = p;
        w->index = i;
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

int seda__pool_new(int n, seda_worker_start_fn start,
                   seda_worker_stop_fn stop, void *ud, void *owner,
                   struct seda_pool **out)
{
    if (n <= 0)
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
    int rc;
    atomic_init(&p->stopping, false);
    atomic_init(&p->pending, 0);
    atomic_init(&p->spinning, 0);
    atomic_init(&p->n, 0);
    p->start = start;
    p->stop = stop;
    p->ud = ud;
    p->owner = owner;
    seda__mutex_lock(&p->resize_mu);
    rc = start_workers(p, 0, n);
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
    bool self = prompt && tls_worker && tls_worker->pool == p;
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
    if (p->idle > 0 &&
        p->count > (uint32_t)atomic_load_explicit(&p->spinning,
                                                  memory_order_relaxed) +
                       (self ? 1u : 0u))
        wake_one(p);
    seda__mutex_unlock(&p->mu);
    return 0;
}

void seda__pool_kick(struct seda_pool *p)
{
    if (!tls_worker || tls_worker->pool != p)
        return;
    seda__mutex_lock(&p->mu);
    if (p->idle > 0 &&
        p->count > (uint32_t)atomic_load_explicit(&p->spinning,
                                                  memory_order_relaxed))
        wake_one(p);
    seda__mutex_unlock(&p->mu);
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
    seda__mutex_unlock(&p->mu);
    if (p->joined) {
        seda__mutex_unlock(&p->resize_mu);
        return;
    }
    stop_workers(p, 0);
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
    seda__mutex_destroy(&p->mu);
    seda__mutex_destroy(&p->resize_mu);
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

void *seda_worker_data(void) { return tls_data; }
