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
 *   admission calls seda__pool_loan_block_begin, so what it queued gets another
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
 *   with seda__pool_loan_block_begin/end.  While `blocked` threads wait, the
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
 *
 *   Files: this one has the task ring, the workers, their idle wait and
 *   the pool's life; pool_ready.c who waits for readiness and the keeper;
 *   pool_loan.c managed blocking; pool_int.h the structures they share.
 */
#include "pool_int.h"

/* Per thread: this thread's worker (NULL off the pool), whether callbacks
 * run inside a task, the worker data, and seda's own waits on this thread
 * (block_begin/end): nesting depth, the clock at the outermost begin, the
 * time summed since the last take. */
_Thread_local struct seda_worker_s *tls_worker;
_Thread_local bool tls_looking;
_Thread_local void *tls_data;
_Thread_local bool tls_data_set;        /* tls_data holds start()'s value */
_Thread_local int tls_block_depth;
_Thread_local int64_t tls_block_t0;
_Thread_local int64_t tls_blocked_ns;

/* How long an idle worker watches for new tasks before it parks.  A
 * kernel wake-up costs microseconds on a VM; a stage whose producer is a
 * little slower than its consumer would otherwise pay one per batch.  The
 * watch is cpu_relax only (PAUSE: the sibling hyperthread and the
 * producer keep the core's issue slots), never a sched_yield loop, which
 * on a small machine puts the spinner back on the run queue beside the
 * threads doing the work.  It lasts SPIN_NS, or, when work has been
 * coming back within SPIN_MAX_NS of the pool going idle, 1.5 times that
 * recent gap (at most SPIN_MAX_NS), so a producer's short stalls do not
 * each cost a wake-up; a pool idle for longer sleeps after SPIN_NS.  (It
 * was up to a millisecond with sched_yield: under a producer paced in
 * 1 ms ticks, a core's worth of CPU for half a core's work.  A flat
 * SPIN_NS cost the one-producer hand-off a fifth of its rate.) */
#define SPIN_NS 20000
#define SPIN_MAX_NS 200000


/* Spin (mu not held) until a task may be pending or the watch's time
 * passes (see SPIN_NS).  The caller re-checks under mu either way.
 * Returns when the spin began, or 0 when another worker is the spinner
 * (only the spinner measures the gaps). */
static int64_t spin_for_work(struct seda_pool *p)
{
    /* One spinner at a time: on a small machine more would steal the
     * cores that producers and busy workers need. */
    int expect = 0;
    if (!atomic_compare_exchange_strong_explicit(&p->spinning, &expect, 1,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
        return 0;
    int64_t start = seda__now_ns();
    int64_t gap = atomic_load_explicit(&p->gap_ns, memory_order_relaxed);
    int64_t spin = gap > 0 && gap <= SPIN_MAX_NS ? gap + gap / 2 : SPIN_NS;
    int64_t end = start + (spin < SPIN_NS ? SPIN_NS
                           : spin > SPIN_MAX_NS ? SPIN_MAX_NS : spin);
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
    return start;
}

/* The spinner found work gap ns after the pool went idle. */
static void note_gap(struct seda_pool *p, int64_t gap)
{
    if (gap > 4 * SPIN_MAX_NS)
        gap = 4 * SPIN_MAX_NS;
    int64_t g = atomic_load_explicit(&p->gap_ns, memory_order_relaxed);
    atomic_store_explicit(&p->gap_ns, g ? (3 * g + gap) / 4 : gap,
                          memory_order_relaxed);
}

/* Take w off the idle stack (mu held). */
void unpark(struct seda_pool *p, struct seda_worker_s *w)
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
void wake_one(struct seda_pool *p)
{
    struct seda_worker_s *w = p->parked[--p->idle];
    w->parked = false;
    pthread_cond_signal(&w->cv);
}

/* Wake every parked worker (mu held): stop and resize. */
static void wake_all(struct seda_pool *p)
{
    while (p->idle > 0)
        wake_one(p);
    kick(p);
}

/* Whether w must stop taking tasks (mu held): the pool stops, a shrink
 * retired it, or it is a loan thread no longer needed. */
static bool must_leave(const struct seda_pool *p, const struct seda_worker_s *w)
{
    if (atomic_load_explicit(&p->stopping, memory_order_acquire))
        return true;
    return w->slot < 0 ? w->index >= p->target : loan_excess(p);
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

/* Wait (mu held; dropped while waiting) until w has something to do: a
 * task, a due timed task, mail, or leaving. */
/* Returns when its spin began, or 0 (see spin_for_work). */
static int64_t wait_for_work(struct seda_pool *p, struct seda_worker_s *w)
{
    int64_t idle_at = 0;
    /* With watches, no spin: a worker that would take the poller's
     * next task from under it (a request it read and published) is
     * not wanted, and the cores are the network's too. */
    if (p->count == 0 && !must_leave(p, w) &&
        !(p->rd && seda__ready_any(p->rd))) {
        seda__mutex_unlock(&p->mu);
        idle_at = spin_for_work(p);
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
    return idle_at;
}

/* w leaves the pool (mu held; dropped): a loan slot keeps its data or
 * the stop hook gets it, and a loan thread's worker goes. */
static void worker_exit(struct seda_pool *p, struct seda_worker_s *w)
{
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
}

void *worker_main(void *arg)
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
        int64_t idle_at = wait_for_work(p, w);
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
        if (idle_at)
            note_gap(p, seda__now_ns() - idle_at);
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
    worker_exit(p, w);
    return NULL;
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
    atomic_init(&p->gap_ns, 0);
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

void seda__pool_set_mail(struct seda_pool *p, seda_worker_mail_fn fn)
{
    seda__mutex_lock(&p->mu);
    p->mail_fn = fn;
    seda__mutex_unlock(&p->mu);
}

