/* SPDX-License-Identifier: MIT */
/*
 * deliver.c -- delivering a drain task's batch: each envelope to the
 * stage's consumers, one at a time, and each result routed.
 *
 * DESIGN
 *   The per-envelope loop is a session (struct seda_batch_s, deliver.h)
 *   with two steps: take (the next envelope, its queue wait measured)
 *   and settle (its handling time measured, its result decided and
 *   routed).  Plain consumers are driven by a loop here that calls them
 *   between the two steps; a batch consumer (seda_stage_consume_batch)
 *   drives the steps itself through seda_batch_next and seda_batch_result,
 *   so a binding can run a whole batch in one call (the Lua binding: one
 *   protected call per batch) while the core keeps every per-envelope
 *   rule.  Both take the same path through take and settle, so the two
 *   kinds of consumer cannot drift apart:
 *     - one clock read per envelope: an envelope's end is the next one's
 *       start (what runs between, in the consumer or here, counts as the
 *       next one's queue wait);
 *     - a nack with attempts left (no backoff, not durable) is delivered
 *       again at once, before the rest of the batch: it is the head of
 *       the queue, and it never goes back past the capacity;
 *     - the batch is cut (the rest go back to the head, drain.c) when the
 *       bus stops, after a retry that must wait (backoff, journal), and
 *       after an envelope of SEDA_SHED_NS or more when other permits are
 *       free;
 *     - a long hold (a consumer call over the bus's hold_warn) is looked
 *       at only past that threshold, against the service time already
 *       measured: the time the thread spent in seda's own waits
 *       (managed blocking: pool.c counts it) comes off, and what is left
 *       counts and is logged (long_hold below);
 *     - a durable stage's decisions are journaled together, then routed;
 *       a batch consumer's are routed after its call (as a plain
 *       consumer's are after each call: a hop that waits for room then
 *       holds no consumer state), a plain consumer's one by one.
 *   Threads: only the drain task's own (consumers run on it).
 */
#include <stdio.h>

#include "bus.h"
#include "stage.h"

enum { DELIVER_NACK, DELIVER_ACK, DELIVER_NO_CONSUMERS };

/* The per-envelope steps are inlined into the plain consumers' loop: a
 * C consumer's hand-off is a few dozen instructions, and a call per step
 * would be a visible share of them. */
#define HOT static inline __attribute__((always_inline))

/* ---- long holds ----
 *
 * A call that holds its worker long outside seda's waits (a blocking
 * socket, a sleep, a long computation) stalls every stage the worker
 * could have drained.  It is counted in the stage's long_holds and
 * logged, at most once a minute per stage, naming the stage and the way
 * out.  Checked where the clock was read anyway: a batch's settle (the
 * service time), a suspension (the run before it) and a suspended call's
 * resumed runs (seda_pending_enter/leave). */

#define HOLD_WARN_EVERY_NS ((int64_t)60 * 1000000000)

/* ns: a run of a consumer call, seda's own waits in it not yet taken
 * off.  Cold: reached only past hold_warn_ns. */
static __attribute__((noinline, cold)) void
long_hold(struct seda_stage_s *st, int64_t ns)
{
    /* Inside managed blocking now (a blocking = true stage's whole
     * call): the worker is lent, not held. */
    if (seda__pool_loan_in_block())
        return;
    ns -= seda__pool_loan_blocked_take();
    if (ns <= st->hold_warn_ns)
        return;
    uint64_t n = atomic_fetch_add_explicit(&st->long_holds, 1,
                                           memory_order_relaxed) + 1;
    int64_t now = seda__clock_ns();
    int64_t last = atomic_load_explicit(&st->hold_warned,
                                        memory_order_relaxed);
    if (last && now - (last - 1) < HOLD_WARN_EVERY_NS)
        return;
    if (!atomic_compare_exchange_strong_explicit(&st->hold_warned, &last,
                                                 now + 1,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
        return;                         /* another thread warns */
    char msg[512];
    snprintf(msg, sizeof msg, "a handler held its worker %.3f s outside "
             "seda's waits (over hold_warn %.3g s; %llu such holds so far, "
             "this warning at most once a minute): a blocking call there "
             "stalls every stage this worker could serve; wrap it in "
             "seda.blocking(fn, ...) or declare the stage with blocking = "
             "true (C: seda_block_begin/end)", (double)ns / 1e9,
             (double)st->hold_warn_ns / 1e9, (unsigned long long)n);
    seda_log_write(SEDA_LOG_WARN, st->name, msg);
}

/* ---- taking and settling ---- */

/* The next envelope (b->open set), or NULL when the batch is over. */
HOT seda_env_t *take(struct seda_batch_s *b)
{
    if (b->cut || b->i >= b->n)
        return NULL;
    if (atomic_load_explicit(&b->st->bus->stopping, memory_order_acquire)) {
        b->cut = true;
        return NULL;
    }
    int i = b->i;
    seda_env_t *env = b->env[i];
    if (i + 1 < b->n) {
        /* The next envelope was written on the publisher's core: start
         * pulling its lines while this one is handled (for reading: an
         * ack writes nothing into it). */
        __builtin_prefetch(b->env[i + 1]);
        __builtin_prefetch((char *)b->env[i + 1] + sizeof(seda_env_t) - 1);
    }
    b->sojourn[i] = b->t - env->enq_ts;
    b->open = true;
    return env;
}

/* Count a nack that will be retried and start the envelope's next
 * attempt (its sojourn restarts at now). */
HOT void begin_retry(seda_env_t *env, struct stage_counters *tally,
                        int64_t now)
{
    tally->nacked++;
    env->attempts++;
    env->enq_ts = now;
}

/* Does the remote layer settle this result?  All of a remote stage's,
 * except a pub/sub retry after some consumers acked: that one is retried
 * here, like a local stage's, so the acks it carries (env->acked) keep
 * those consumers from being called again; the remote layer keeps the
 * message it came from alive meanwhile. */
static inline bool remote_settles(const struct seda_stage_s *st,
                                  const seda_env_t *env, int res)
{
    return st->remote_ops && !(res == DR_RETRY && env->acked);
}

/* Act on one delivery's result. */
HOT void route(struct seda_stage_s *st, seda_env_t *env, int res,
                  struct seda_batch_s *b, int64_t now)
{
    if (remote_settles(st, env, res)) {
        /* Taken in from JetStream: acked, naked or termed there. */
        st->remote_ops->settle(st, env, res, b->tally);
        return;
    }
    switch (res) {
    case DR_ACK:
        b->tally->delivered++;
        if (!env->ext && !env->done &&
            !(env->flags & (ENV_DEAD | ENV_JDONE))) {
            /* The itinerary completes here with nothing more to do: no
             * slip, no journal row (both live in ext), no callback, not
             * counted dead.  What seda__route_ack and seda__env_end
             * do then, without their calls (a third of a C consumer's
             * hand-off); keep the two in step. */
            b->tally->completed++;
            seda__env_free(env);
            break;
        }
        seda__route_ack(st, env, b->tally);
        break;
    case DR_DEAD_NOCONS:
        seda__route_dead_letter(st, env, "no_consumers", b->tally);
        break;
    case DR_RETRY:
        begin_retry(env, b->tally, now);
        b->retry[b->nretry++] = env;
        break;
    default:
        b->tally->nacked++;
        seda__route_dead_letter(st, env, "max_attempts", b->tally);
        break;
    }
}

/* Settle the open envelope with r (DELIVER_*). */
HOT void settle(struct seda_batch_s *b, int r)
{
    struct seda_stage_s *st = b->st;
    int i = b->i;
    seda_env_t *env = b->env[i];
    int64_t end = seda__clock_ns();
    b->open = false;
    b->service[i] = end - b->t;
    b->t = end;
    if (__builtin_expect(b->service[i] > st->hold_warn_ns, 0))
        long_hold(st, b->service[i]);
    int res = r == DELIVER_ACK ? DR_ACK
            : r == DELIVER_NO_CONSUMERS ? DR_DEAD_NOCONS
            : env->attempts < st->max_attempts ? DR_RETRY : DR_DEAD_MAX;
    b->res[i] = res;
    /* Decided now: once routed, a remote stage's env is gone. */
    bool local_retry = res == DR_RETRY && !remote_settles(st, env, res);
    if (local_retry && !st->durable && !b->later) {
        /* A retry goes to the head of the queue, which is where this
         * task takes its next envelope from: deliver it again now, ahead
         * of the rest of the batch (behind it in the queue), and without
         * putting it back past the capacity.  Its nacked attempt counts
         * in the histograms. */
        begin_retry(env, b->tally, end);
        int64_t so = b->sojourn[i], sv = b->service[i];
        seda__stats_latency(&st->stats, &so, &sv, 1);
        return;                         /* i stays: the same one next */
    }
    if (!st->durable && !b->defer)
        route(st, env, res, b, end);
    b->i = i + 1;
    if (local_retry) {
        /* Durable: the retry is journaled with the batch's decisions,
         * then goes back to the head, ahead of the rest of this batch
         * (behind it in the queue).  With a backoff it waits on a timer,
         * and the rest go back to the head. */
        b->cut = true;
        return;
    }
    if (b->service[i] >= SEDA_SHED_NS && i + 1 < b->n &&
        atomic_load_explicit(&st->adm.conc_fast, memory_order_relaxed) > 1) {
        /* A slow envelope (longer than a preemption would make a fast
         * one): the rest of the batch should not wait behind this task
         * when other permits are free.  It gives them back and starts
         * tasks for them (drain.c). */
        b->shed = true;
        b->cut = true;
    }
}

/* ---- consumers ---- */

int seda__consumers_add(struct seda_stage_s *st, seda_consumer_fn fn,
                        seda_batch_fn bfn, void *ud)
{
    if ((!fn && !bfn) || st->pull)
        return SEDA_EINVAL;
    struct seda_consumers *c = &st->cons;
    seda__mutex_lock(&st->mu);          /* serialises adders */
    int n = atomic_load_explicit(&c->n, memory_order_relaxed);
    if (n >= SEDA_MAX_CONSUMERS) {
        seda__mutex_unlock(&st->mu);
        return SEDA_ERANGE;
    }
    c->cons[n] = (struct consumer){ fn, bfn, ud };
    /* Release: pairs with the acquires below; cons[n] is visible to any
     * drain task that sees the new count. */
    atomic_store_explicit(&c->n, n + 1, memory_order_release);
    seda__mutex_unlock(&st->mu);
    seda__bus_wake_hops(st->bus);       /* replayed hops may wait for it */
    return n;
}

int seda_stage_consume(seda_stage_t *st, seda_consumer_fn fn, void *ud)
{
    return fn ? seda__consumers_add(st, fn, NULL, ud) : SEDA_EINVAL;
}

int seda_stage_consume_batch(seda_stage_t *st, seda_batch_fn fn, void *ud)
{
    return fn ? seda__consumers_add(st, NULL, fn, ud) : SEDA_EINVAL;
}

/* Set while this thread is inside a batch consumer's call: its binding's
 * state (a Lua state) is busy even between envelopes. */
static _Thread_local bool tls_in_batch;

bool seda__batch_busy(void)
{
    return tls_in_batch;
}

/* One envelope to the stage's consumers: round robin (p2p) or each that
 * has not acked yet (pub/sub).  A batch consumer gets a session of this
 * one envelope. */
HOT int call_one(struct consumer *c, seda_env_t *env)
{
    if (c->fn) {
        seda__env_delivery_begin(env);
        return seda__env_delivery_end(env, c->fn(env, c->ud));
    }
    struct seda_batch_s one = { .single = true, .one = env };
    bool outer = tls_in_batch;
    tls_in_batch = true;
    c->bfn(&one, c->ud);
    tls_in_batch = outer;
    if (one.open)
        seda_batch_result(&one, false);
    return one.one_state == 2 && one.one_ok;
}

HOT int deliver(struct seda_stage_s *st, seda_env_t *env)
{
    /* Acquire: pairs with the release in seda_stage_consume. */
    int n = atomic_load_explicit(&st->cons.n, memory_order_acquire);
    if (n == 0)
        return DELIVER_NO_CONSUMERS;
    if (st->delivery == SEDA_DELIVERY_P2P) {
        /* One consumer: no cursor to bump (it shares no line with what
         * publishers read, but there is no need to write at all). */
        unsigned i = n == 1 ? 0
                   : atomic_fetch_add_explicit(&st->cons.rr, 1,
                                               memory_order_relaxed);
        return call_one(&st->cons.cons[n == 1 ? 0 : i % (unsigned)n], env)
                   ? DELIVER_ACK : DELIVER_NACK;
    }
    uint64_t all = n == 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
    for (int i = 0; i < n; i++) {
        uint64_t bit = UINT64_C(1) << i;
        if (env->acked & bit)
            continue;
        if (call_one(&st->cons.cons[i], env))
            env->acked |= bit;
    }
    return (env->acked & all) == all ? DELIVER_ACK : DELIVER_NACK;
}

void seda__batch_run(struct seda_batch_s *b)
{
    struct seda_stage_s *st = b->st;
    int n0 = b->i;
    /* seda's waits before this batch are no part of its calls. */
    (void)seda__pool_loan_blocked_take();
    /* Acquire: pairs with the release in seda_stage_consume. */
    int nc = atomic_load_explicit(&st->cons.n, memory_order_acquire);
    if (nc == 1 && st->cons.cons[0].bfn) {
        /* The stage's only consumer takes the whole batch.  (With one
         * consumer pub/sub is p2p: its ack ends the hop.) */
        bool outer = tls_in_batch;
        tls_in_batch = true;
        b->defer = true;
        st->cons.cons[0].bfn(b, st->cons.cons[0].ud);
        if (b->open)
            seda_batch_result(b, false);
        b->defer = false;
        tls_in_batch = outer;
        if (!st->durable) {
            /* The batch's routing, after the call: a hop that waits for
             * room in a full stage waits outside the consumer, whose
             * state (a Lua state) is then free, so it may run that
             * stage's drain task itself (help_drain in stage.c). */
            for (int k = n0; k < b->i; k++)
                if (b->res[k] != DR_SUSPENDED)
                    route(st, b->env[k], b->res[k], b, b->t);
        }
    } else {
        /* On a copy that does not escape, so the compiler keeps the
         * session in registers. */
        struct seda_batch_s s = *b;
        seda_env_t *env;
        while ((env = take(&s)) != NULL)
            settle(&s, deliver(st, env));
        *b = s;
    }
    if (st->durable) {
        /* Every decision of the batch in one commit, then act on them. */
        seda__bus_store_ops(st->bus)->batch(st, b->env + n0, b->res + n0,
                                            b->i - n0);
        for (int k = n0; k < b->i; k++)
            route(st, b->env[k], b->res[k], b, b->t);
    }
}

/* ---- the batch consumer's side ---- */

seda_env_t *seda_batch_next(seda_batch_t *b)
{
    if (b->open)
        seda_batch_result(b, false);    /* taken, never settled: a nack */
    if (b->single) {
        if (b->one_state != 0)
            return NULL;
        b->one_state = 1;
        b->open = true;
        seda__env_delivery_begin(b->one);
        return b->one;
    }
    seda_env_t *env = take(b);
    if (env)
        seda__env_delivery_begin(env);
    return env;
}

void seda_batch_result(seda_batch_t *b, bool ok)
{
    if (!b->open)
        return;
    if (b->single) {
        b->open = false;
        b->one_state = 2;
        b->one_ok = seda__env_delivery_end(b->one, ok);
        return;
    }
    ok = seda__env_delivery_end(b->env[b->i], ok);
    settle(b, ok ? DELIVER_ACK : DELIVER_NACK);
}

/* ---- suspended calls ----
 *
 * HOW IT WORKS
 *   A suspended call holds a permit of its stage, as a drain task does:
 *   `running` counts both.  At suspension the call takes a free permit
 *   (running + 1), or, when every permit is taken, the drain task's own:
 *   the task cuts its batch (the rest go back to the head) and ends
 *   without giving it back (gave_permit).  At settle the call gives its
 *   permit back as a drain task that ends does -- or hands it to a new
 *   drain task when envelopes are queued -- with the same Dekker check
 *   against the lock-free publish path.  So a stage never runs more than
 *   `concurrency` calls, suspended or not, and a queued envelope always
 *   has a task or a permit on its way back.
 */

struct seda_pending_s {
    struct seda_stage_s *st;    /* immutable */
    seda_env_t *env;            /* the call's envelope; immutable */
    int64_t start;              /* clock at the handler's start */
    int64_t run;                /* clock at the current run's start
                                   (seda_pending_enter) */
    int64_t sojourn;            /* its queue wait, ns */
    bool failed;                /* seda_env_fail called in a run */
    struct seda__undo undo;     /* what its runs changed (a nack puts it
                                   back) */
};

seda_pending_t *seda_batch_suspend(seda_batch_t *b)
{
    if (!b->open || b->single)
        return NULL;
    struct seda_stage_s *st = b->st;
    if (st->durable)
        return NULL;
    struct seda_pending_s *p = seda__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int i = b->i;
    p->st = st;
    p->env = b->env[i];
    p->start = b->t;
    p->sojourn = b->sojourn[i];
    seda__env_suspend(p->env, &p->undo, &p->failed);
    seda__mutex_lock(&st->mu);
    if (!seda__permits_claim(&st->task, st->adm.concurrency, 0, true)) {
        b->gave_permit = true;          /* the task's permit is the call's */
        b->cut = true;
    }
    st->task.suspended++;
    seda__mutex_unlock(&st->mu);
    b->res[i] = DR_SUSPENDED;
    b->service[i] = -1;
    b->open = false;
    b->i = i + 1;
    int64_t now = seda__clock_ns();
    if (now - b->t > st->hold_warn_ns)  /* the run before the wait */
        long_hold(st, now - b->t);
    b->t = now;
    return p;
}

seda_env_t *seda_pending_env(seda_pending_t *p)
{
    return p->env;
}

void seda_pending_enter(seda_pending_t *p)
{
    seda__env_resume_begin(p->env, &p->undo, p->failed);
    (void)seda__pool_loan_blocked_take();
    p->run = seda__clock_ns();
}

void seda_pending_leave(seda_pending_t *p)
{
    p->failed = seda__env_resume_end();
    int64_t ns = seda__clock_ns() - p->run;
    if (ns > p->st->hold_warn_ns)       /* a resumed run */
        long_hold(p->st, ns);
}

/* The call is over (mu not held): its permit back, or to a drain task
 * for what is queued; counts folded in; life (ns, < 0: unknown) goes into
 * the stage's life_ns. */
static void pending_end(struct seda_stage_s *st,
                        const struct stage_counters *tally, int64_t life)
{
    bool sched = false, idle = false;
    seda__mutex_lock(&st->mu);
    seda__stats_fold(&st->stats.c, tally);
    if (life >= 0) {
        uint64_t old = st->task.life_ns, v = (uint64_t)life + 1;
        st->task.life_ns = old ? (old * 7 + v) / 8 : v;
    }
    st->task.suspended--;
    sched = seda__permits_release(&st->task, &st->in, st->adm.concurrency,
                                  seda__bus_stopping(st->bus), &idle);
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__drain_schedule(st);
    else if (idle)
        seda__bus_idle_notify(st->bus);
}

void seda_pending_settle(seda_pending_t *p, bool ok)
{
    struct seda_stage_s *st = p->st;
    seda_env_t *env = p->env;
    ok = ok && !p->failed;
    seda__env_undo_finish(env, &p->undo, ok);
    int64_t end = seda__clock_ns();
    int64_t life = end > p->start ? end - p->start : 0;
    seda__stats_latency_one(&st->stats, p->sojourn, life);
    int res = ok ? DR_ACK
            : seda__consumers_count(&st->cons) == 0 ? DR_DEAD_NOCONS
            : env->attempts < st->max_attempts ? DR_RETRY : DR_DEAD_MAX;
    struct stage_counters tally = { 0 };
    seda__free(p);
    if (res == DR_RETRY && !remote_settles(st, env, res)) {
        /* To the head of the queue (or its backoff timer), as a drain
         * task's retry goes. */
        begin_retry(env, &tally, end);
        seda__mutex_lock(&st->mu);
        if (!seda__route_retry_later(st, env))
            seda__route_push_head(st, env);
        seda__mutex_unlock(&st->mu);
    } else {
        struct seda_batch_s b = { .st = st, .tally = &tally };
        route(st, env, res, &b, end);
    }
    pending_end(st, &tally, life);
}

void seda_pending_drop(seda_pending_t *p)
{
    struct seda_stage_s *st = p->st;
    seda_env_t *env = p->env;
    seda__env_undo_finish(env, &p->undo, false);
    seda__free(p);
    struct stage_counters tally = { 0 };
    tally.dropped++;
    if (!(env->flags & ENV_DEAD))
        tally.it_lost++;
    if (env->done) {
        seda_done_fn done = env->done;
        env->done = NULL;
        done(env, SEDA_DROPPED, env->done_ud);
    }
    seda__env_free(env);
    pending_end(st, &tally, -1);
}
