/* SPDX-License-Identifier: MIT */
/*
 * route.c -- an envelope's fate after an attempt, decided in one room:
 * an ack routes it to its next hop (or completes it), a nack puts it back
 * at the head of its stage now or after its backoff (or dead-letters it
 * when out of attempts), a dead letter goes to the dead-letter stage with
 * the x-dead-* headers; and what is left when the pool stopped is swept.
 *
 * DESIGN
 *   Routing runs on the worker that delivered the envelope, with no lock
 *   held: ack pops the next hop and admits the envelope there (waiting at
 *   most hop_timeout, so full queues cannot deadlock the pool), or ends the
 *   itinerary; a final nack dead-letters.  A dead letter ends its itinerary
 *   at once (done fires with SEDA_DEAD_LETTERED, counted once) and then
 *   travels to the dead-letter stage as a flagged envelope that no later
 *   outcome counts again.  The journal follows the envelope (store.h):
 *   a durable next stage gets its row, an in-memory one means it goes.
 *
 *   Retry backoff: a nacked envelope with attempts left waits on a pool
 *   timer (retry_due) and goes back to the head of its stage when due;
 *   the stage counts it delayed meanwhile (its idleness waits for it).
 *
 * Sections: hop targets, routing, dead letters, retry backoff, the sweep.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bus.h"
#include "route.h"

/* ---- hop targets ---- */

/* A declared stage is ready for a replayed hop once it can take it: it
 * has a consumer (a declaration adds its consumers right after it
 * registers the stage), or it needs none (pull, remote). */
static bool stage_ready(struct seda_stage_s *to)
{
    return to->pull || to->remote_ops ||
           seda__consumers_count(&to->cons) > 0;
}

struct seda_stage_s *seda__route_hop_target(struct seda_stage_s *st,
                                            seda_env_t *env, const char *name)
{
    struct seda_bus_s *b = st->bus;
    struct seda_stage_s *to = seda__bus_lookup(b, name);
    if ((to && stage_ready(to)) || !(env->flags & ENV_REPLAYED))
        return to;
    int64_t until = atomic_load_explicit(&b->replay_until,
                                         memory_order_relaxed);
    if (seda__now_ns() >= until ||
        atomic_load_explicit(&b->stopping, memory_order_acquire))
        return NULL;
    char id[SEDA_ID_MAX], msg[256];
    seda_env_id(env, id);
    snprintf(msg, sizeof msg, "replayed envelope '%s' waits for stage '%s', "
             "which is not declared yet (at most %.3gs after the replay "
             "began: hop_timeout)", id, name,
             (double)b->hop_timeout_ns / 1e9);
    seda_stage_report(st, msg);
    struct seda_pool *loaned = seda__pool_loan_block_begin();
    seda__mutex_lock(&b->mu);
    while (!((to = seda__bus_lookup(b, name)) && stage_ready(to)) &&
           !atomic_load_explicit(&b->stopping, memory_order_acquire) &&
           seda__now_ns() < until)
        seda__cond_wait(&b->stage_cv, &b->mu, until);
    seda__mutex_unlock(&b->mu);
    seda__pool_loan_block_end(loaned);
    if (!to) {
        snprintf(msg, sizeof msg, "stage '%s' was not declared within "
                 "hop_timeout of the replay: replayed envelope '%s' goes on "
                 "as if it named no stage", name, id);
        seda_stage_report(st, msg);
    }
    return to;
}

/* ---- routing ---- */

void seda__route_ack(struct seda_stage_s *st, seda_env_t *env,
                     struct stage_counters *tally)
{
    struct seda_bus_s *b = st->bus;
    bool jdone = env->flags & ENV_JDONE;
    if (jdone)                  /* no store otherwise: see env.h */
        env->flags &= (uint8_t)~ENV_JDONE;
    const char *next = seda_env_slip_at(env, 0);
    if (!next) {
        if (!jdone && seda__env_jkey(env))
            seda__bus_store_forget(st, env);          /* completed */
        seda__env_end(env, SEDA_COMPLETED, tally, &st->mu, &st->stats.c);
        return;
    }
    struct seda_stage_s *to = seda__route_hop_target(st, env, next);
    if (!to) {
        char missing[SEDA_NAME_MAX + 1];
        snprintf(missing, sizeof missing, "%s", next);
        seda__route_dead_letter_to(st, env, "no_such_stage", missing, tally);
        return;
    }
    /* The journal follows the envelope: a durable next stage gets the row
     * (moved, or inserted when it comes from memory: that insert rides
     * the journal's next group, and env enters `to` when it commits,
     * without this worker waiting), an in-memory one means the row
     * goes. */
    bool commit_hop = false;
    if (!jdone) {
        if (to->durable) {
            if (seda__env_jkey(env))
                seda__bus_store_move(st, to, env, 1);
            else if (!to->remote_ops)
                commit_hop = true;
            else
                (void)seda__bus_store_enter(to, env); /* reported */
        } else if (seda__env_jkey(env)) {
            seda__bus_store_forget(st, env);
        }
    } else if (!to->durable) {
        seda__env_set_jkey(env, 0);
    }
    seda__env_slip_pop(env);
    env->attempts = 1;
    env->acked = 0;
    char why[256];
    if (seda__stage_check(to, env, why, sizeof why) != 0) {
        seda__route_dead_letter(st, env, "type", tally);
        return;
    }
    double timeout = (double)b->hop_timeout_ns / 1e9;
    int rc = commit_hop ? seda__bus_store_enter_async(to, env, timeout)
                        : seda__stage_enter(to, env, timeout, true);
    if (rc == 0)
        return;
    if (rc == SEDA_ECLOSED) {           /* the pool is stopping */
        env->at = st;                   /* swept here, counted here */
        if (tally)
            tally->dropped++;
        else
            seda__stage_count_dropped(st);
        seda__env_end(env, SEDA_DROPPED, tally, &st->mu, &st->stats.c);
        return;
    }
    env->at = st;
    seda__route_dead_letter(st, env, "hop_refused", tally);
}

/* Seconds since the epoch, now. */
static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void seda__route_dead_hdrs(const struct seda_stage_s *st,
                           const seda_env_t *env, const char *reason,
                           const char *missing, double at,
                           struct seda__dead_hdrs *d)
{
    int n = 0;
    d->kv[n++] = "x-dead-reason";
    d->kv[n++] = reason;
    d->kv[n++] = "x-dead-from";
    d->kv[n++] = st->name;
    const char *err = seda__env_last_error(env);
    if (err) {
        d->kv[n++] = "x-dead-error";
        d->kv[n++] = err;
    }
    snprintf(d->attempts, sizeof d->attempts, "%d", env->attempts);
    d->kv[n++] = "x-dead-attempts";
    d->kv[n++] = d->attempts;
    time_t secs = (time_t)at;
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t k = strftime(d->at, sizeof d->at, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(d->at + k, sizeof d->at - k, ".%03dZ",
             (int)((at - (double)secs) * 1000) % 1000);
    d->kv[n++] = "x-dead-at";
    d->kv[n++] = d->at;
    if (missing) {
        d->kv[n++] = "x-dead-stage";
        d->kv[n++] = missing;
    }
    d->kv[n] = NULL;
}

/* The x-dead-* headers on env. */
static void dead_headers(struct seda_stage_s *st, seda_env_t *env,
                         const char *reason, const char *missing, double at)
{
    struct seda__dead_hdrs d;
    seda__route_dead_hdrs(st, env, reason, missing, at, &d);
    for (int i = 0; d.kv[i]; i += 2)
        seda_env_set_header(env, d.kv[i], d.kv[i + 1]);
}

void seda__route_dead_letter(struct seda_stage_s *st, seda_env_t *env,
                             const char *reason, struct stage_counters *tally)
{
    seda__route_dead_letter_to(st, env, reason, NULL, tally);
}

void seda__route_dead_letter_to(struct seda_stage_s *st, seda_env_t *env,
                                const char *reason, const char *missing,
                                struct stage_counters *tally)
{
    struct seda_bus_s *b = st->bus;
    struct stage_counters one = { 0 };
    struct stage_counters *c = tally ? tally : &one;
    c->dead_lettered++;
    c->dead_by[seda__stats_dead_reason(reason)]++;
    if (!(env->flags & ENV_DEAD)) {
        c->it_dead++;
        env->flags |= ENV_DEAD;
        if (env->done) {
            /* The callback may want to say why (an HTTP request's 500,
             * naming a missing stage). */
            seda_env_set_header(env, "x-dead-reason", reason);
            seda_env_set_header(env, "x-dead-from", st->name);
            if (missing)
                seda_env_set_header(env, "x-dead-stage", missing);
            seda_done_fn done = env->done;
            env->done = NULL;
            done(env, SEDA_DEAD_LETTERED, env->done_ud);
        }
    }
    if (!tally) {
        seda__mutex_lock(&st->mu);
        seda__stats_fold(&st->stats.c, &one);
        seda__mutex_unlock(&st->mu);
    }
    /* The stage's dead-letter stage, else the bus's.  One that names no
     * stage (stages can be declared in any order, so this is only known
     * now) is reported and passed over. */
    struct seda_stage_s *to = NULL;
    const char *names[2] = { st->dead_letter, b->dead_letter };
    for (int k = 0; k < 2 && !to; k++) {
        if (!names[k] || strcmp(names[k], st->name) == 0 ||
            (k == 1 && names[0] && strcmp(names[0], names[1]) == 0))
            continue;
        to = seda__route_hop_target(st, env, names[k]);
        if (!to) {
            char msg[160];
            snprintf(msg, sizeof msg, "dead-letter stage '%s' does not "
                     "exist%s", names[k], k == 0 && names[1]
                     ? ": trying the bus's" : ": the envelope is discarded");
            seda_stage_report(st, msg);
        }
    }
    bool jdone = env->flags & ENV_JDONE;
    env->flags &= (uint8_t)~ENV_JDONE;
    /* Why, on the envelope (best effort: out of memory still delivers)
     * and in the stage's ring. */
    double at = wall_now();
    dead_headers(st, env, reason, missing, at);
    seda__stats_dead(&st->stats, env, reason, missing, at);
    if (to) {
        seda__env_slip_clear(env);
        env->attempts = 1;
        env->acked = 0;
        if (!jdone) {
            if (to->durable && seda__env_jkey(env))
                seda__bus_store_move(st, to, env, 0);
            else if (to->durable)
                (void)seda__bus_store_enter(to, env); /* reported */
            else if (seda__env_jkey(env))
                seda__bus_store_forget(st, env);
        } else if (!to->durable) {
            seda__env_set_jkey(env, 0);
        }
        if (seda__stage_enter(to, env, (double)b->hop_timeout_ns / 1e9,
                              true) == 0)
            return;
        /* The DLQ refused it: it is discarded after all. */
        char msg[160];
        snprintf(msg, sizeof msg, "dead-letter stage '%s' refused an "
                 "envelope: discarded", to->name);
        seda_stage_report(st, msg);
        if (seda__env_jkey(env))
            seda__bus_store_forget(to, env);
    } else if (!jdone && seda__env_jkey(env)) {
        seda__bus_store_forget(st, env);
    }
    seda__env_free(env);                /* discarded, already counted */
}

/* ---- retry backoff ---- */

/* A uniform double in [0, 1) from a per-thread xorshift generator. */
static double jitter01(void)
{
    static _Thread_local uint64_t x;
    if (!x)
        x = (uint64_t)seda__now_ns() ^ ((uint64_t)(uintptr_t)&x << 17) ^
            0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* The timer's task: the retry is due, back to the head of its stage. */
static void retry_due(void *arg)
{
    seda_env_t *env = arg;
    struct seda_stage_s *st = env->at;
    bool sched = false;
    seda__mutex_lock(&st->mu);
    st->rt.delayed--;
    env->enq_ts = seda__clock_ns();
    seda__route_push_head(st, env);
    if (st->pull)
        seda__pull_wake(&st->pl, false);
    else
        sched = seda__permits_claim(&st->task, st->adm.concurrency,
                                    seda__stage_depth(st), true);
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__drain_schedule(st);
}

/* The backoff before retry attempt `next` (mu held). */
static int64_t backoff_locked(struct seda_stage_s *st, int next)
{
    SEDA__ASSERT_HELD(&st->mu);
    if (!(st->rt.backoff > 0))
        return 0;
    /* The first retry (attempts 2) waits backoff, each next one
     * multiplier times longer, up to max_backoff; jitter adds up to half
     * again, still within max_backoff. */
    double d = st->rt.backoff;
    for (int k = 2; k < next && d < st->rt.max; k++)
        d *= st->rt.mult;
    if (st->rt.jitter)
        d *= 1.0 + 0.5 * jitter01();
    if (d > st->rt.max)
        d = st->rt.max;
    return seda__secs_to_ns(d);
}

int64_t seda__route_backoff_ns(struct seda_stage_s *st, int next)
{
    seda__mutex_lock(&st->mu);
    int64_t d = backoff_locked(st, next);
    seda__mutex_unlock(&st->mu);
    return d;
}

bool seda__route_retry_later(struct seda_stage_s *st, seda_env_t *env)
{
    SEDA__ASSERT_HELD(&st->mu);
    int64_t due;
    if (env->ext && env->ext->due) {
        due = env->ext->due;            /* journaled: the row says so */
        env->ext->due = 0;
    } else if (st->rt.backoff > 0) {
        due = seda__now_ns() + backoff_locked(st, env->attempts);
    } else {
        return false;
    }
    env->at = st;
    if (seda__pool_submit_at(st->bus->pool, due, retry_due, env) != 0)
        return false;                   /* stopping, or out of memory */
    st->rt.delayed++;
    return true;
}

int seda__route_requeue_later(struct seda_stage_s *st, seda_env_t *env)
{
    seda__mutex_lock(&st->mu);
    int64_t due = env->ext->due;
    env->at = st;
    int rc = seda__pool_submit_at(st->bus->pool, due, retry_due, env);
    if (rc == 0) {
        env->ext->due = 0;
        st->rt.delayed++;
        st->stats.c.enqueued++;
        st->stats.c.accepted++;
    }
    seda__mutex_unlock(&st->mu);
    return rc;
}

void seda__route_drop_timer(seda__task_fn fn, void *arg, void *ud)
{
    (void)ud;
    if (fn != retry_due)
        return;
    seda_env_t *env = arg;
    struct seda_stage_s *st = env->at;
    seda__mutex_lock(&st->mu);
    st->rt.delayed--;
    st->stats.c.dropped++;
    if (!(env->flags & ENV_DEAD))
        st->stats.c.it_lost++;
    seda__mutex_unlock(&st->mu);
    seda__env_end_dropped(env);
}

void seda__route_nack(struct seda_stage_s *st, seda_env_t *env)
{
    if (env->attempts < st->max_attempts) {
        env->attempts++;
        env->enq_ts = seda__clock_ns();
        seda__mutex_lock(&st->mu);
        st->stats.c.nacked++;
        if (!seda__route_retry_later(st, env))
            seda__route_push_head(st, env);
        if (st->pull)
            seda__pull_wake(&st->pl, false);
        seda__mutex_unlock(&st->mu);
        return;
    }
    seda__mutex_lock(&st->mu);
    st->stats.c.nacked++;
    seda__mutex_unlock(&st->mu);
    seda__route_dead_letter(st, env, "max_attempts", NULL);
}

/* ---- the sweep ---- */

int seda__route_sweep(struct seda_stage_s *st)
{
    int swept = st->pull ? seda__pull_sweep(&st->pl, &st->mu, &st->stats.c)
                         : 0;
    for (;;) {
        seda_env_t *chunk[64];
        seda__mutex_lock(&st->mu);
        uint32_t n = seda__inbox_take_all(&st->in, chunk, 64);
        for (uint32_t k = 0; k < n; k++) {
            st->stats.c.dropped++;
            if (!(chunk[k]->flags & ENV_DEAD))
                st->stats.c.it_lost++;
        }
        if (n == 0)
            seda__permits_reset(&st->task);
        seda__mutex_unlock(&st->mu);
        if (n == 0)
            return swept;
        for (uint32_t k = 0; k < n; k++)
            seda__env_end_dropped(chunk[k]);
        swept += (int)n;
    }
}

void seda__route_push_head(struct seda_stage_s *st, seda_env_t *env)
{
    seda__inbox_push_head(&st->in, env);
}

/* ---- what a handler decides of its envelope ---- */

int seda_env_forward(seda_env_t *env, const char *const *stages, int n)
{
    if (n < 0 || (n > 0 && !stages))
        return SEDA_EINVAL;
    for (int i = 0; i < n; i++)
        if (!seda__valid_name(stages[i]))
            return SEDA_EINVAL;
    if (n == 0)
        return 0;
    int rc = seda__env_slip_insert(env, stages, n);
    if (rc != 0)
        return rc;
    if (!env->at)
        return 0;
    seda__ownhops_note(&env->at->bus->ownhops, stages, n); /* own hops */
    /* The door rule learns where this stage's handlers forward (shed.c):
     * a new itinerary is refused while a stage it may reach sheds. */
    for (int i = 0; i < n; i++) {
        struct seda_stage_s *to = seda__bus_lookup(env->at->bus, stages[i]);
        if (to && to != env->at)
            seda__shed_fwd_learn(&env->at->fwd, to);
    }
    return 0;
}

const char *seda_env_to(const seda_env_t *env)
{
    if (SEDA__UNLIKELY(env->ext && env->ext->to))
        return env->ext->to;
    return env->at ? env->at->name : NULL;
}

void seda_env_fail(seda_env_t *env, const char *msg)
{
    seda__env_fail_note(env, msg ? msg : "consumer failed");
    if (env->at)
        seda_stage_report(env->at, msg ? msg : "consumer failed");
}
