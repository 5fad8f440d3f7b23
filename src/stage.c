/* SPDX-License-Identifier: MIT */
/*
 * stage.c -- admission control and the drain task.
 *
 * DESIGN
 *   Admission (any thread) takes the stage lock once: room below capacity
 *   means push and maybe schedule; otherwise the policy decides (refuse,
 *   discard, evict the head, or wait on not_full until the deadline).
 *
 *   Scheduling: `running` counts drain tasks queued in the pool or running.
 *   A push schedules one only while running < concurrency, so an idle stage
 *   costs nothing and a busy one never floods the pool.  A drain task takes
 *   up to `batch` envelopes in one lock round, delivers them with no lock
 *   held, then in one more lock round folds its counters in, requeues its
 *   nacks at the head, and either resubmits itself (queue not empty: the
 *   permit passes to the new task, which goes to the back of the pool's
 *   FIFO so other stages get their turn) or gives the permit back.
 *
 *   The ring holds capacity + concurrency * batch slots: admissions stop at
 *   capacity, and the headroom guarantees that every envelope a drain task
 *   took can go back to the head (retry, or an interrupted batch at stop).
 *
 *   Invariant: the queue is non-empty only while running > 0 (until the
 *   pool is stopped, after which the bus sweeps it).
 *
 * HOW IT WORKS: the lock-free publish path
 *   A stage's queue is two parts: an inbox that publishers append to
 *   without the stage lock (an intrusive multi-producer queue: exchange the
 *   tail, then link the old tail to the new node), and a small ring at the
 *   head for envelopes that must go first (nack retries, an interrupted
 *   batch, replays).  Consumers (drain tasks, evictions, sweeps) take from
 *   the ring, then the inbox, always under the stage lock, so the inbox
 *   has a single consumer at a time.  qcount counts both parts.
 *
 *   A publish takes the lock-free path when the stage is a plain push
 *   stage and the bus is open: fetch_add(qcount) reserves room (over
 *   capacity: undo, take the locked path, where the policy decides), the
 *   envelope goes into the inbox, and if fewer drain tasks run than the
 *   stage allows (read of running), the publisher takes the lock to
 *   schedule one.  The race with a drain task that is about to give its
 *   permit back is closed Dekker-style, all seq_cst: the publisher does
 *   qcount++ then reads running; the task does running-- then reads
 *   qcount.  Whichever comes second sees the other, so either the
 *   publisher schedules or the task carries on; an envelope is never left
 *   behind.  Between a publisher's exchange and its link the inbox may
 *   look empty while qcount says otherwise: takers treat that as "not yet"
 *   and look again.
 *
 *   Worked example: capacity 2, qcount 2.  A third publisher's fetch_add
 *   returns 2 (not below 2), it undoes to 2 and takes the locked path,
 *   where the policy (reject, wait, evict) applies to the exact state.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "bus.h"
#include "stage.h"


/* ---- the two-part queue ---- */

static inline seda_env_t *env_of_link(struct env_link *l)
{
    return (seda_env_t *)((char *)l - offsetof(seda_env_t, link));
}

/* Append to the inbox.  Any thread, lock or not. */
static void inbox_push(struct seda_stage_s *st, seda_env_t *env)
{
    atomic_store_explicit(&env->link.next, NULL, memory_order_relaxed);
    /* acq_rel: release publishes env's contents to the taker that finds
     * it through prev->next; acquire orders us after the previous tail's
     * publisher. */
    struct env_link *prev = atomic_exchange_explicit(&st->in_tail,
                                                     &env->link,
                                                     memory_order_acq_rel);
    SEDA__CHAOS();                      /* the "link on its way" window */
    /* Release: pairs with the acquire load of next in inbox_pop. */
    atomic_store_explicit(&prev->next, &env->link, memory_order_release);
}

/* Take the inbox's oldest envelope (mu held); NULL when empty or when a
 * publisher is between its exchange and its link (look again later). */
static seda_env_t *inbox_pop(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    struct env_link *head = st->in_head;
    struct env_link *next = atomic_load_explicit(&head->next,
                                                 memory_order_acquire);
    if (head == &st->in_stub) {
        if (!next)
            return NULL;
        st->in_head = head = next;
        next = atomic_load_explicit(&head->next, memory_order_acquire);
    }
    if (next) {
        st->in_head = next;
        return env_of_link(head);
    }
    if (head != atomic_load_explicit(&st->in_tail, memory_order_acquire))
        return NULL;                    /* a link is on its way */
    /* head is the last node: put the stub behind it to take it out. */
    atomic_store_explicit(&st->in_stub.next, NULL, memory_order_relaxed);
    struct env_link *prev = atomic_exchange_explicit(&st->in_tail,
                                                     &st->in_stub,
                                                     memory_order_acq_rel);
    atomic_store_explicit(&prev->next, &st->in_stub, memory_order_release);
    next = atomic_load_explicit(&head->next, memory_order_acquire);
    if (next) {
        st->in_head = next;
        return env_of_link(head);
    }
    return NULL;
}

/* Envelopes queued (both parts, and held reservations).  A hint without
 * mu; exact with mu held and no lock-free publisher mid-way. */

/* Take up to n envelopes, the ring first (mu held).  qcount goes down by
 * what was taken.  May return fewer than are counted while publishers
 * are mid-way (see inbox_pop). */
uint32_t seda__stage_take(struct seda_stage_s *st, seda_env_t **out,
                          uint32_t n)
{
    SEDA__ASSERT_HELD(&st->mu);
    uint32_t got = seda__queue_pop_many(&st->q, (void **)out, n);
    while (got < n) {
        seda_env_t *e = inbox_pop(st);
        if (!e)
            break;
        out[got++] = e;
    }
    if (got)
        atomic_fetch_sub_explicit(&st->qcount, got, memory_order_seq_cst);
    return got;
}

/* Put env back at the head (mu held; the ring has room by construction:
 * see seda__queue_reserve calls). */
void seda__stage_push_head(struct seda_stage_s *st, seda_env_t *env)
{
    SEDA__ASSERT_HELD(&st->mu);
    seda__queue_push_front(&st->q, env);
    atomic_fetch_add_explicit(&st->qcount, 1, memory_order_seq_cst);
}

/* Take everything queued right now, waiting out publishers mid-way
 * (mu held; used where the count must reach zero: sweeps). */
static uint32_t q_take_all_of(struct seda_stage_s *st, seda_env_t **out,
                              uint32_t n)
{
    uint32_t got = seda__stage_take(st, out, n);
    /* A publisher counted in qcount either links its envelope or undoes
     * its count shortly; neither needs this lock. */
    for (unsigned spin = 0;
         got == 0 && seda__stage_qcount(st) > (uint32_t)st->reserved; spin++) {
        if (spin < 64)
            seda__cpu_relax();
        else
            sched_yield();
        got = seda__stage_take(st, out, n);
    }
    return got;
}

uint32_t seda__stage_depth(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    return seda__stage_qcount(st) - (uint32_t)st->reserved;
}

seda_env_t *seda__stage_take_one(struct seda_stage_s *st)
{
    seda_env_t *e = NULL;
    return seda__stage_take(st, &e, 1) ? e : NULL;
}

/* ---- creation ---- */

#define FAIL(...) do { \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return SEDA_EINVAL; \
    } while (0)

int seda__stage_new(struct seda_bus_s *bus, const seda_stage_opts *o,
                    struct seda_stage_s **out, char *err, size_t errlen)
{
    if (!o)
        FAIL("stage: options are required");
    const char *nm = o->name;
    if (!nm || !*nm)
        FAIL("stage: name is required");
    if (!seda__valid_name(nm))
        FAIL("stage '%.80s': name must be 1-%d characters of "
             "[A-Za-z0-9_.:-]", nm, SEDA_NAME_MAX);
    if (o->capacity <= 0)
        FAIL("stage '%s': capacity must be > 0 (got %d)", nm, o->capacity);
    if (o->capacity > (1 << 26))
        FAIL("stage '%s': capacity must be <= %d (got %d)", nm, 1 << 26,
             o->capacity);
    if (o->concurrency <= 0)
        FAIL("stage '%s': concurrency must be > 0 (got %d)", nm,
             o->concurrency);
    if (o->concurrency > 4096)
        FAIL("stage '%s': concurrency must be <= 4096 (got %d)", nm,
             o->concurrency);
    if (o->max_attempts <= 0)
        FAIL("stage '%s': max_attempts must be > 0 (got %d)", nm,
             o->max_attempts);
    if (o->max_attempts > 65535)
        FAIL("stage '%s': max_attempts must be <= 65535 (got %d)", nm,
             o->max_attempts);
    if (!seda_policy_name(o->policy))
        FAIL("stage '%s': unknown policy (%d)", nm, o->policy);
    if (!seda_delivery_name(o->delivery))
        FAIL("stage '%s': unknown delivery (%d)", nm, o->delivery);
    if (!(o->publish_timeout >= 0))
        FAIL("stage '%s': publish_timeout must be >= 0", nm);
    if (!(o->handler_timeout >= 0))
        FAIL("stage '%s': handler_timeout must be >= 0", nm);
    if (o->dead_letter && !seda__valid_name(o->dead_letter))
        FAIL("stage '%s': dead_letter is not a valid stage name", nm);
    if (o->pull && !(o->ack_timeout > 0))
        FAIL("stage '%s': ack_timeout must be > 0", nm);
    if (o->durable < SEDA_MEMORY || o->durable > SEDA_EXACTLY_ONCE)
        FAIL("stage '%s': unknown durable mode (%d)", nm, o->durable);
    if (o->durable == SEDA_EXACTLY_ONCE && o->dedup_window <= 0)
        FAIL("stage '%s': dedup_window must be > 0", nm);

    struct seda_stage_s *st = seda__calloc(1, sizeof *st);
    if (!st)
        goto oom;
    uint64_t slots = (uint64_t)o->capacity +
                     (uint64_t)o->concurrency * (uint64_t)bus->batch;
    if (seda__queue_init(&st->q, (uint32_t)slots))
        goto oom;
    if (o->dead_letter && !(st->dead_letter = seda__strdup(o->dead_letter)))
        goto oom;
    if (seda__cond_init(&st->not_full))
        goto oom;
    if (seda__cond_init(&st->not_empty)) {
        pthread_cond_destroy(&st->not_full);
        goto oom;
    }
    snprintf(st->name, sizeof st->name, "%s", nm);
    st->bus = bus;
    st->capacity = o->capacity;
    st->concurrency = o->concurrency;
    st->delivery = o->delivery;
    st->policy = o->policy;
    st->max_attempts = o->max_attempts;
    st->publish_timeout = o->publish_timeout;
    st->handler_timeout = o->handler_timeout;
    st->pull = o->pull;
    st->durable = o->durable;
    st->dedup_window = o->dedup_window;
    st->ack_timeout_ns = (int64_t)(o->ack_timeout * 1e9);
    atomic_init(&st->nconsumers, 0);
    atomic_init(&st->rr, 0);
    atomic_init(&st->userdata, NULL);
    atomic_init(&st->qcount, 0);
    atomic_init(&st->in_stub.next, NULL);
    st->in_head = &st->in_stub;
    atomic_init(&st->in_tail, &st->in_stub);
    atomic_init(&st->fast_acc, 0);
    atomic_init(&st->fast_hop, 0);
    atomic_init(&st->cap_fast, o->capacity);
    atomic_init(&st->conc_fast, o->concurrency);
    atomic_init(&st->running, 0);
    atomic_init(&st->check, NULL);
    atomic_init(&st->check_ud, NULL);
    seda__mutex_init(&st->mu);
    seda__mutex_init(&st->hist_mu);
    seda__mutex_init(&st->report_mu);
    *out = st;
    return 0;
oom:
    if (st) {
        seda__queue_destroy(&st->q);
        seda__free(st->dead_letter);
        seda__free(st);
    }
    if (err && errlen)
        snprintf(err, errlen, "stage '%s': out of memory", nm);
    return SEDA_ENOMEM;
}

void seda__stage_free(struct seda_stage_s *st)
{
    if (!st)
        return;
    assert(seda__queue_count(&st->q) == 0 && seda__stage_qcount(st) == 0);
    seda__queue_destroy(&st->q);
    pthread_cond_destroy(&st->not_full);
    pthread_cond_destroy(&st->not_empty);
    seda__mutex_destroy(&st->mu);
    seda__mutex_destroy(&st->hist_mu);
    seda__mutex_destroy(&st->report_mu);
    seda__free(st->dead_letter);
    seda__free(st);
}


/* ---- public accessors ---- */

const char *seda_stage_name(const seda_stage_t *st) { return st->name; }

double seda_stage_handler_timeout(const seda_stage_t *st)
{
    return st->handler_timeout;
}

int seda_stage_consume(seda_stage_t *st, seda_consumer_fn fn, void *ud)
{
    if (!fn || st->pull)
        return SEDA_EINVAL;
    seda__mutex_lock(&st->mu);          /* serialises adders */
    int n = atomic_load_explicit(&st->nconsumers, memory_order_relaxed);
    if (n >= SEDA_MAX_CONSUMERS) {
        seda__mutex_unlock(&st->mu);
        return SEDA_ERANGE;
    }
    st->cons[n] = (struct consumer){ fn, ud };
    /* Release: pairs with the acquire in deliver(); cons[n] is visible to
     * any drain task that sees the new count. */
    atomic_store_explicit(&st->nconsumers, n + 1, memory_order_release);
    seda__mutex_unlock(&st->mu);
    return n;
}

int seda_stage_tune(seda_stage_t *st, int capacity, int concurrency,
                    int policy, char *err, size_t errlen)
{
    const char *nm = st->name;
    if (capacity > (1 << 26))
        FAIL("stage '%s': capacity must be <= %d (got %d)", nm, 1 << 26,
             capacity);
    if (concurrency > 4096)
        FAIL("stage '%s': concurrency must be <= 4096 (got %d)", nm,
             concurrency);
    if (policy >= 0 && !seda_policy_name(policy))
        FAIL("stage '%s': unknown policy (%d)", nm, policy);
    struct seda_bus_s *b = st->bus;
    int nsched = 0;
    seda__mutex_lock(&st->mu);
    int cap = capacity > 0 ? capacity : st->capacity;
    int conc = concurrency > 0 ? concurrency : st->concurrency;
    uint64_t slots = (uint64_t)cap + (uint64_t)conc * (uint64_t)b->batch;
    /* The ring must also hold what is queued now plus what is in flight
     * (a shrink below the current depth keeps everything). */
    uint64_t need = seda__queue_count(&st->q) + (uint64_t)st->in_flight +
                    (uint64_t)conc * (uint64_t)b->batch;
    if (need > slots)
        slots = need;
    int rc = seda__queue_reserve(&st->q, (uint32_t)slots);
    if (rc == 0 && conc > st->concurrency)
        rc = seda__pool_reserve(b->pool, conc - st->concurrency);
    if (rc == 0) {
        st->capacity = cap;
        st->concurrency = conc;
        if (policy >= 0)
            st->policy = policy;
        atomic_store_explicit(&st->cap_fast, cap, memory_order_relaxed);
        atomic_store_explicit(&st->conc_fast, conc, memory_order_relaxed);
        int run = atomic_load_explicit(&st->running, memory_order_relaxed);
        while (!st->pull && run < st->concurrency &&
               (uint32_t)run < seda__stage_qcount(st) - (uint32_t)st->reserved) {
            run++;
            nsched++;
        }
        atomic_store_explicit(&st->running, run, memory_order_seq_cst);
        pthread_cond_broadcast(&st->not_full);
    }
    seda__mutex_unlock(&st->mu);
    if (rc) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': out of memory", nm);
        return rc;
    }
    while (nsched-- > 0)
        seda__stage_schedule(st);
    return 0;
}

void seda_stage_set_check(seda_stage_t *st, seda_check_fn fn, void *ud)
{
    atomic_store_explicit(&st->check_ud, ud, memory_order_relaxed);
    /* Release: pairs with the acquire in seda__stage_check; check_ud is
     * visible to whoever sees fn. */
    atomic_store_explicit(&st->check, fn, memory_order_release);
}

static _Thread_local char tls_check_error[256];

const char *seda_last_check_error(void) { return tls_check_error; }

int seda__stage_check(struct seda_stage_s *st, const seda_env_t *env,
                      char *err, size_t errlen)
{
    seda_check_fn fn = atomic_load_explicit(&st->check,
                                            memory_order_acquire);
    if (!fn)
        return 0;
    void *ud = atomic_load_explicit(&st->check_ud, memory_order_relaxed);
    if (fn(env, ud, err, errlen) == 0)
        return 0;
    snprintf(tls_check_error, sizeof tls_check_error, "%s", err);
    seda__mutex_lock(&st->mu);
    st->c.invalid++;
    seda__mutex_unlock(&st->mu);
    return SEDA_ETYPE;
}

void seda_stage_set_userdata(seda_stage_t *st, void *ud)
{
    /* Release: pairs with the acquire in seda_stage_userdata. */
    atomic_store_explicit(&st->userdata, ud, memory_order_release);
}

void *seda_stage_userdata(const seda_stage_t *st)
{
    return atomic_load_explicit(&((seda_stage_t *)st)->userdata,
                                memory_order_acquire);
}

void seda_stage_report(seda_stage_t *st, const char *msg)
{
    int64_t now = seda__now_ns();
    uint64_t suppressed = 0;
    bool print = false;
    seda__mutex_lock(&st->report_mu);
    if (now - st->report_window >= 1000000000) {
        suppressed = st->report_suppressed;
        st->report_suppressed = 0;
        st->report_window = now;
        st->report_lines = 0;
    }
    if (st->report_lines < 5) {
        st->report_lines++;
        print = true;
    } else {
        st->report_suppressed++;
    }
    seda__mutex_unlock(&st->report_mu);
    seda__mutex_lock(&st->mu);
    st->c.errors++;
    seda__mutex_unlock(&st->mu);
    if (suppressed)
        fprintf(stderr, "seda: stage '%s': %llu similar errors suppressed\n",
                st->name, (unsigned long long)suppressed);
    if (print)
        fprintf(stderr, "seda: stage '%s': %s\n", st->name, msg);
}

/* ---- ending an envelope ---- */

void seda__stage_count_dropped(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    st->c.dropped++;
    seda__mutex_unlock(&st->mu);
}

void seda__counters_fold(struct stage_counters *into,
                         const struct stage_counters *from)
{
    into->enqueued += from->enqueued;
    into->delivered += from->delivered;
    into->nacked += from->nacked;
    into->dropped += from->dropped;
    into->dead_lettered += from->dead_lettered;
    into->errors += from->errors;
    into->completed += from->completed;
    into->invalid += from->invalid;
    into->accepted += from->accepted;
    into->it_dead += from->it_dead;
    into->it_lost += from->it_lost;
}

void seda__env_end(struct seda_stage_s *st, seda_env_t *env, int outcome,
                   struct stage_counters *tally)
{
    if (!(env->flags & ENV_DEAD)) {
        struct stage_counters one = { 0 };
        struct stage_counters *c = tally ? tally : &one;
        if (outcome == SEDA_COMPLETED)
            c->completed++;
        else if (outcome == SEDA_DROPPED)
            c->it_lost++;
        if (!tally) {
            seda__mutex_lock(&st->mu);
            seda__counters_fold(&st->c, &one);
            seda__mutex_unlock(&st->mu);
        }
    }
    if (env->done) {
        seda_done_fn done = env->done;
        env->done = NULL;
        done(env, outcome, env->done_ud);
    }
    seda__env_free(env);
}

/* Evicted or swept: the stage already counted dropped (and it_lost). */
static void end_dropped(seda_env_t *env)
{
    if (env->done) {
        seda_done_fn done = env->done;
        env->done = NULL;
        done(env, SEDA_DROPPED, env->done_ud);
    }
    seda__env_free(env);
}

/* ---- admission ---- */


/* Push env (lock held, room checked).  Returns true when the caller must
 * submit a drain task after unlocking. */
static bool push_locked(struct seda_stage_s *st, seda_env_t *env, bool hop)
{
    SEDA__ASSERT_HELD(&st->mu);
    env->at = st;
    if (hop)
        env->enq_ts = seda__clock_ns();
    inbox_push(st, env);
    atomic_fetch_add_explicit(&st->qcount, 1, memory_order_seq_cst);
    st->c.enqueued++;
    if (!hop)
        st->c.accepted++;
    if (st->pull) {
        if (st->receivers > 0)
            pthread_cond_signal(&st->not_empty);
        return false;
    }
    int run = atomic_load_explicit(&st->running, memory_order_relaxed);
    if (run < st->concurrency) {
        atomic_store_explicit(&st->running, run + 1, memory_order_seq_cst);
        return true;
    }
    return false;
}

void seda__stage_schedule(struct seda_stage_s *st)
{
    if (seda__pool_submit(st->bus->pool, seda__stage_drain, st) != 0) {
        /* Pool stopping: give the permit back; the bus sweeps the queue. */
        seda__mutex_lock(&st->mu);
        atomic_fetch_sub_explicit(&st->running, 1, memory_order_seq_cst);
        seda__mutex_unlock(&st->mu);
    }
}

/* Decide for one offered envelope with the lock held.  Returns 0 when
 * admitted (*sched says whether to schedule, *victim an evicted envelope to
 * end after unlocking), 1 when the caller must wait for room, or a
 * negative refusal. */
static int offer_locked(struct seda_stage_s *st, seda_env_t *env, bool hop,
                        bool *sched, seda_env_t **victim)
{
    struct seda_bus_s *b = st->bus;
    if (!hop && atomic_load_explicit(&b->closed, memory_order_acquire))
        return SEDA_ECLOSED;
    if (atomic_load_explicit(&b->stopping, memory_order_acquire))
        return SEDA_ECLOSED;
    if (seda__stage_qcount(st) < (uint32_t)st->capacity) {
        if (env) {
            *sched |= push_locked(st, env, hop);
        } else {
            st->reserved++;             /* a slot held for a journal write */
            atomic_fetch_add_explicit(&st->qcount, 1, memory_order_seq_cst);
        }
        return 0;
    }
    switch (st->policy) {
    case SEDA_POLICY_REJECT:
        st->c.dropped++;
        return SEDA_EFULL;
    case SEDA_POLICY_DROP_NEWEST:
        st->c.dropped++;
        return SEDA_EDROPPED;
    case SEDA_POLICY_DROP_OLDEST: {
        seda_env_t *old = NULL;
        if (q_take_all_of(st, &old, 1) == 0)
            old = NULL;                 /* only reservations are held */
        st->c.dropped++;
        if (old && !(old->flags & ENV_DEAD))
            st->c.it_lost++;
        *victim = old;
        if (env) {
            *sched |= push_locked(st, env, hop);
        } else {
            st->reserved++;
            atomic_fetch_add_explicit(&st->qcount, 1, memory_order_seq_cst);
        }
        return 0;
    }
    default:
        return 1;
    }
}

/* How long a blocked publisher watches for room before sleeping. */
#define ROOM_SPIN_NS 50000

/* Spin (no lock held) until the depth hint shows room, ROOM_SPIN_NS pass
 * or the deadline comes.  The caller re-checks under the lock. */
static void wait_for_room(struct seda_stage_s *st, int64_t deadline_ns)
{
    int64_t end = seda__now_ns() + ROOM_SPIN_NS;
    if (end > deadline_ns)
        end = deadline_ns;
    /* Relaxed: a hint, re-checked under the lock.  Any drop below the
     * depth we found full means a drain task took a batch. */
    unsigned full = seda__stage_qcount(st);
    for (unsigned i = 1;; i++) {
        if (seda__stage_qcount(st) < full)
            return;
        if (i < 64)
            seda__cpu_relax();
        else
            sched_yield();
        if ((i & 15) == 0 && seda__now_ns() >= end)
            return;
    }
}

/* The lock-free publish path (see HOW IT WORKS).  Returns 0 when env was
 * admitted, 1 when the caller must take the locked path. */
static int admit_fast(struct seda_stage_s *st, seda_env_t *env, bool hop)
{
    struct seda_bus_s *b = st->bus;
    if (st->pull)
        return 1;                       /* receivers need a signal */
    int cap = atomic_load_explicit(&st->cap_fast, memory_order_relaxed);
    if (seda__stage_qcount(st) >= (unsigned)cap)
        return 1;                       /* full: no transient over-count */
    /* seq_cst RMW: ordered before the reads of stopping and running. */
    unsigned n = atomic_fetch_add_explicit(&st->qcount, 1,
                                           memory_order_seq_cst);
    if (n >= (unsigned)cap ||
        (!hop && atomic_load_explicit(&b->closed, memory_order_seq_cst)) ||
        atomic_load_explicit(&b->stopping, memory_order_seq_cst)) {
        /* Full or closing: undo; the locked path decides exactly.  A
         * sweep that follows the store of stopping sees our increment
         * and waits for it to be undone or to show up in the inbox. */
        atomic_fetch_sub_explicit(&st->qcount, 1, memory_order_seq_cst);
        return 1;
    }
    env->at = st;
    if (hop)
        env->enq_ts = seda__clock_ns();
    inbox_push(st, env);
    atomic_fetch_add_explicit(hop ? &st->fast_hop : &st->fast_acc, 1,
                              memory_order_relaxed);
    SEDA__CHAOS();
    /* Dekker pairing: qcount++ above, then running here; a drain task
     * does running-- then reads qcount (both seq_cst). */
    if (atomic_load_explicit(&st->running, memory_order_seq_cst) <
        atomic_load_explicit(&st->conc_fast, memory_order_relaxed)) {
        bool sched = false;
        seda__mutex_lock(&st->mu);
        int run = atomic_load_explicit(&st->running, memory_order_relaxed);
        if (run < st->concurrency) {
            atomic_store_explicit(&st->running, run + 1,
                                  memory_order_seq_cst);
            sched = true;
        }
        seda__mutex_unlock(&st->mu);
        if (sched)
            seda__stage_schedule(st);
    }
    return 0;
}

int seda__stage_admit(struct seda_stage_s *st, seda_env_t *env,
                      double timeout, bool hop)
{
    if (env && admit_fast(st, env, hop) == 0)
        return 0;
    bool sched = false;
    seda_env_t *victim = NULL;
    int64_t deadline_ns = 0;            /* computed when first needed */
    bool spun = false;
    seda__mutex_lock(&st->mu);
    int rc;
    while ((rc = offer_locked(st, env, hop, &sched, &victim)) == 1) {
        if (deadline_ns == 0)
            deadline_ns = seda__bus_publish_deadline(st->bus, timeout);
        if (seda__now_ns() >= deadline_ns) {
            st->c.dropped++;
            rc = SEDA_ETIMEDOUT;
            break;
        }
        if (!spun &&
            atomic_load_explicit(&st->running, memory_order_relaxed) > 0) {
            /* A drain task is working on it: room usually appears within
             * a batch, so watch for it briefly instead of paying two
             * kernel round trips (our sleep, its wake-up) per batch. */
            spun = true;
            seda__mutex_unlock(&st->mu);
            wait_for_room(st, deadline_ns);
            seda__mutex_lock(&st->mu);
            continue;
        }
        st->waiters++;
        seda__cond_wait(&st->not_full, &st->mu, deadline_ns);
        st->waiters--;
        spun = false;
    }
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__stage_schedule(st);
    if (victim) {
        if (seda__env_jkey(victim))
            seda__durable_forget(st, victim);
        end_dropped(victim);
    }
    return rc;
}

int seda__stage_admit_many(struct seda_stage_s *st, seda_env_t **envs,
                           int n, double timeout, int *rc)
{
    int64_t deadline_ns = 0;            /* computed when first needed */
    bool sched = false;
    int done = 0;
    /* Evictions are rare; end them after unlocking, a few at a time. */
    seda_env_t *victims[64];
    int nv = 0;
    *rc = 0;
    seda__mutex_lock(&st->mu);
    while (done < n) {
        seda_env_t *victim = NULL;
        int r = offer_locked(st, envs[done], false, &sched, &victim);
        if (victim)
            victims[nv++] = victim;
        if (r == 0) {
            done++;
            if (nv < 64)
                continue;
        } else if (r == 1) {
            if (deadline_ns == 0)
                deadline_ns = seda__bus_publish_deadline(st->bus, timeout);
            if (seda__now_ns() >= deadline_ns) {
                st->c.dropped++;
                *rc = SEDA_ETIMEDOUT;
                break;
            }
            /* Let the drain task see the queued work while we wait. */
            if (sched) {
                seda__mutex_unlock(&st->mu);
                seda__stage_schedule(st);
                sched = false;
                seda__mutex_lock(&st->mu);
                continue;
            }
            st->waiters++;
            seda__cond_wait(&st->not_full, &st->mu, deadline_ns);
            st->waiters--;
            continue;
        } else {
            *rc = r;
            break;
        }
        /* Victim buffer full: flush it outside the lock. */
        seda__mutex_unlock(&st->mu);
        for (int i = 0; i < nv; i++)
            end_dropped(victims[i]);
        nv = 0;
        seda__mutex_lock(&st->mu);
    }
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__stage_schedule(st);
    for (int i = 0; i < nv; i++)
        end_dropped(victims[i]);
    return done;
}

void seda__stage_wake(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->not_full);
    pthread_cond_broadcast(&st->not_empty);
    seda__mutex_unlock(&st->mu);
}

int seda__stage_reserve(struct seda_stage_s *st, double timeout)
{
    return seda__stage_admit(st, NULL, timeout, false);
}

void seda__stage_fill(struct seda_stage_s *st, seda_env_t *env)
{
    seda__mutex_lock(&st->mu);
    assert(st->reserved > 0);
    st->reserved--;
    /* The slot was counted when it was held; push_locked counts again. */
    atomic_fetch_sub_explicit(&st->qcount, 1, memory_order_seq_cst);
    bool sched = push_locked(st, env, false);
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__stage_schedule(st);
}

int seda__stage_requeue_front(struct seda_stage_s *st, seda_env_t **envs,
                              int n)
{
    int nsched = 0;
    seda__mutex_lock(&st->mu);
    uint64_t need = (uint64_t)seda__queue_count(&st->q) + (uint64_t)n +
                    (uint64_t)st->capacity +
                    (uint64_t)st->concurrency * (uint64_t)st->bus->batch;
    if (need > UINT32_MAX / 2 ||
        seda__queue_reserve(&st->q, (uint32_t)need) != 0) {
        seda__mutex_unlock(&st->mu);
        return SEDA_ENOMEM;
    }
    for (int i = n - 1; i >= 0; i--) {
        envs[i]->at = st;
        seda__stage_push_head(st, envs[i]);
    }
    st->c.enqueued += (uint64_t)n;
    st->c.accepted += (uint64_t)n;
    if (st->pull) {
        pthread_cond_broadcast(&st->not_empty);
    } else {
        int run = atomic_load_explicit(&st->running, memory_order_relaxed);
        while (run < st->concurrency &&
               (uint32_t)run < seda__stage_qcount(st) - (uint32_t)st->reserved) {
            run++;
            nsched++;
        }
        atomic_store_explicit(&st->running, run, memory_order_seq_cst);
    }
    seda__mutex_unlock(&st->mu);
    while (nsched-- > 0)
        seda__stage_schedule(st);
    return 0;
}

void seda__stage_unreserve(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    assert(st->reserved > 0);
    st->reserved--;
    atomic_fetch_sub_explicit(&st->qcount, 1, memory_order_seq_cst);
    if (st->waiters > 0)
        pthread_cond_broadcast(&st->not_full);
    seda__mutex_unlock(&st->mu);
}

void seda__stage_nack(struct seda_stage_s *st, seda_env_t *env)
{
    if (env->attempts < st->max_attempts) {
        env->attempts++;
        env->enq_ts = seda__clock_ns();
        seda__mutex_lock(&st->mu);
        st->c.nacked++;
        seda__stage_push_head(st, env);
        if (st->pull && st->receivers > 0)
            pthread_cond_signal(&st->not_empty);
        seda__mutex_unlock(&st->mu);
        return;
    }
    seda__mutex_lock(&st->mu);
    st->c.nacked++;
    seda__mutex_unlock(&st->mu);
    seda__bus_dead_letter(st, env, "max_attempts", NULL);
}

/* ---- shutdown helpers ---- */

int seda__stage_sweep(struct seda_stage_s *st)
{
    int swept = st->pull ? seda__lease_sweep(st) : 0;
    for (;;) {
        seda_env_t *chunk[64];
        seda__mutex_lock(&st->mu);
        uint32_t n = q_take_all_of(st, chunk, 64);
        for (uint32_t k = 0; k < n; k++) {
            st->c.dropped++;
            if (!(chunk[k]->flags & ENV_DEAD))
                st->c.it_lost++;
        }
        if (n == 0)
            atomic_store_explicit(&st->running, 0, memory_order_seq_cst);
        seda__mutex_unlock(&st->mu);
        if (n == 0)
            return swept;
        for (uint32_t k = 0; k < n; k++)
            end_dropped(chunk[k]);
        swept += (int)n;
    }
}

bool seda__stage_idle(struct seda_stage_s *st, uint64_t *sum)
{
    if (st->pull) {
        /* Queued envelopes wait for an outside receiver: they do not keep
         * the bus busy.  Leases do (in flight), until they expire. */
        seda_env_t *requeue[64];
        seda__mutex_lock(&st->mu);
        int n = seda__lease_expire(st, seda__now_ns(), requeue, 64);
        bool idle = st->leases == NULL;
        *sum += st->c.enqueued + st->c.nacked +
                atomic_load_explicit(&st->fast_acc, memory_order_relaxed);
        seda__mutex_unlock(&st->mu);
        for (int i = 0; i < n; i++)
            seda__stage_nack(st, requeue[i]);
        return idle && n == 0;
    }
    seda__mutex_lock(&st->mu);
    bool idle = atomic_load_explicit(&st->running, memory_order_seq_cst) == 0
                && seda__stage_qcount(st) == (uint32_t)st->reserved;
    *sum += st->c.enqueued +
            atomic_load_explicit(&st->fast_acc, memory_order_relaxed) +
            atomic_load_explicit(&st->fast_hop, memory_order_relaxed);
    seda__mutex_unlock(&st->mu);
    return idle;
}

/* ---- stats ---- */

void seda_stage_stats_get(seda_stage_t *st, seda_stage_stats *out)
{
    if (st->pull) {
        /* Overdue leases count as nacks before we report. */
        seda_env_t *requeue[64];
        int n;
        do {
            seda__mutex_lock(&st->mu);
            n = seda__lease_expire(st, seda__now_ns(), requeue, 64);
            seda__mutex_unlock(&st->mu);
            for (int i = 0; i < n; i++)
                seda__stage_nack(st, requeue[i]);
        } while (n == 64);
    }
    memset(out, 0, sizeof *out);
    memcpy(out->name, st->name, sizeof out->name);
    out->delivery = st->delivery;
    out->max_attempts = st->max_attempts;
    out->consumers = atomic_load_explicit(&st->nconsumers,
                                          memory_order_acquire);
    seda__mutex_lock(&st->mu);
    out->capacity = st->capacity;
    out->concurrency = st->concurrency;
    out->policy = st->policy;
    /* qcount may hold a lock-free publisher's increment for an instant
     * before it finds the stage full and takes it back: never report more
     * than the bound plus what sits at the head. */
    uint32_t d = seda__stage_qcount(st) - (uint32_t)st->reserved;
    uint32_t bound = (uint32_t)st->capacity + seda__queue_count(&st->q);
    out->depth = (int)(d < bound ? d : bound);
    out->in_flight = st->in_flight;
    out->enqueued = st->c.enqueued +
                    atomic_load_explicit(&st->fast_acc, memory_order_relaxed) +
                    atomic_load_explicit(&st->fast_hop, memory_order_relaxed);
    out->delivered = st->c.delivered;
    out->nacked = st->c.nacked;
    out->dropped = st->c.dropped;
    out->dead_lettered = st->c.dead_lettered;
    out->errors = st->c.errors;
    out->completed = st->c.completed;
    out->invalid = st->c.invalid;
    /* Rate over the newest sample and the oldest within 5 s of now. */
    int64_t now = seda__clock_ns();
    uint64_t d_now = st->c.delivered;
    for (int k = st->rate_n; k >= 1; k--) {
        int idx = (st->rate_head - k + 64) % 64;
        int64_t dt = now - st->rate[idx].t;
        if (dt <= 5000000000LL && dt > 0) {
            out->rate = (double)(d_now - st->rate[idx].delivered) * 1e9 /
                        (double)dt;
            break;
        }
    }
    seda__mutex_unlock(&st->mu);
    seda__mutex_lock(&st->hist_mu);
    out->sojourn_p50 = seda__hist_quantile(&st->sojourn, 0.50) / 1e3;
    out->sojourn_p99 = seda__hist_quantile(&st->sojourn, 0.99) / 1e3;
    out->sojourn_p999 = seda__hist_quantile(&st->sojourn, 0.999) / 1e3;
    out->sojourn_max = (double)st->sojourn.max / 1e3;
    out->service_p50 = seda__hist_quantile(&st->service, 0.50) / 1e3;
    out->service_p99 = seda__hist_quantile(&st->service, 0.99) / 1e3;
    out->service_p999 = seda__hist_quantile(&st->service, 0.999) / 1e3;
    out->service_max = (double)st->service.max / 1e3;
    seda__mutex_unlock(&st->hist_mu);
}
