/* SPDX-License-Identifier: MIT */
/*
 * stage.c -- a stage's admission: the policy at a full queue, the
 * payload check, tuning (the queue is inbox.c, adaptive shedding shed.c,
 * the drain task and its scheduling drain.c, an envelope's fate after an
 * attempt route.c, the stage's making stage_new.c, its counters stats.c).
 *
 * DESIGN
 *   Admission (any thread) takes the stage lock once: room below capacity
 *   means push and maybe claim a drain task's permit; otherwise the policy
 *   decides (refuse, discard, evict the head, or wait on not_full until
 *   the deadline).
 *
 *   The ring holds capacity + concurrency * batch slots: admissions stop at
 *   capacity, and the headroom guarantees that every envelope a drain task
 *   took can go back to the head (retry, or an interrupted batch at stop).
 *
 *   The queue itself (the lock-free inbox and the head ring) is
 *   inbox.c; HOW IT WORKS there explains the publish path's pairing
 *   with the drain tasks, which admit_fast below is half of.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "bus.h"
#include "stage.h"


/* ---- ending an envelope ---- */

void seda__stage_count_dropped(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    st->stats.c.dropped++;
    seda__mutex_unlock(&st->mu);
}

/* ---- admission ---- */


/* A priority lane's size, allocated on first use (mu held). */
static uint32_t lane_slots(struct seda_stage_s *st)
{
    return (uint32_t)seda__admission_slots(st->adm.capacity,
                                          st->adm.concurrency, st->bus->batch);
}

/* An admitted envelope goes into the inbox, the taps seeing it first:
 * the one place a tap is offered a copy, for both admission paths, so a
 * tap sees exactly the admitted envelopes, before a drain task can take
 * them.  fast: the lock-free path's claimed ticket t (no lock held);
 * otherwise pushed into its lane with st->mu held. */
static inline void inbox_enter(struct seda_stage_s *st, seda_env_t *env,
                               bool fast, uint64_t t)
{
    if (SEDA__UNLIKELY(seda__taps_active(&st->taps)))
        seda__taps_offer(&st->taps, env);
    if (!fast) {
        /* A lane that cannot be allocated leaves the envelope at normal
         * priority rather than refusing what the caller already owns (a
         * committed journal row, a hop). */
        seda__inbox_push(&st->in, env, lane_slots(st));
        return;
    }
    seda__inbox_store(&st->in, t, env);
}

/* Push env (lock held, room checked).  Returns true when the caller must
 * submit a drain task after unlocking. */
static bool push_locked(struct seda_stage_s *st, seda_env_t *env, bool hop)
{
    SEDA__ASSERT_HELD(&st->mu);
    env->at = st;
    /* Sojourn runs from admission: a publish that waited for room (or a
     * journal commit) starts its clock now, not when it was made.  (The
     * lock-free path admits right after the envelope is made.) */
    env->enq_ts = seda__clock_ns();
    inbox_enter(st, env, false, 0);
    st->stats.c.enqueued++;
    if (!hop)
        st->stats.c.accepted++;
    if (st->pull) {
        seda__pull_wake(&st->pl, false);
        return false;
    }
    return seda__permits_claim(&st->task, st->adm.concurrency,
                               seda__stage_depth(st), false);
}


/* The policy switch, the one place it lives: what a full stage does with
 * an offer.  A refusal (SEDA_EFULL, SEDA_EDROPPED), FULL_WAIT (block) or
 * FULL_EVICT (drop_oldest, where the queue can evict its head; where it
 * cannot, a remote stage's window, drop_oldest refuses as full). */
enum { FULL_WAIT = 1, FULL_EVICT = 2 };
static int full_answer(int policy, bool can_evict)
{
    switch (policy) {
    case SEDA_POLICY_REJECT:
        return SEDA_EFULL;
    case SEDA_POLICY_DROP_NEWEST:
        return SEDA_EDROPPED;
    case SEDA_POLICY_DROP_OLDEST:
        return can_evict ? FULL_EVICT : SEDA_EFULL;
    default:
        return FULL_WAIT;
    }
}

/* The shedding level now (mu held): the shed part asks the drain's
 * handling time, the depth and the workers. */
static int shed_level_now(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    return seda__shed_level_now(&st->shed, &st->task, seda__stage_depth(st),
                                st->adm.concurrency,
                                seda__pool_size(st->bus->pool));
}

/* Shedding at the door (SPEC.md section 13): a new itinerary whose slip
 * names st is refused while st sheds at its priority, as st would refuse
 * it (high is never shed).  Counted in st's shed_for.  Takes st->mu only
 * when st is shedding. */
int seda__stage_shed_door(struct seda_stage_s *st, int prio)
{
    if (prio == SEDA_PRIO_HIGH ||
        SEDA__LIKELY(!seda__shed_level(&st->shed)))
        return 0;
    seda__mutex_lock(&st->mu);
    int level = shed_level_now(st);
    bool refuse = level >= (prio == SEDA_PRIO_LOW ? 1 : 2);
    if (refuse)
        st->stats.c.shed_for++;
    seda__mutex_unlock(&st->mu);
    return refuse ? SEDA_ESHED : 0;
}

void seda__stage_shed_count(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    st->stats.c.shed++;
    st->stats.c.dropped++;
    seda__mutex_unlock(&st->mu);
}

/* Decide for one offered envelope with the lock held.  Returns 0 when
 * admitted (*nsched is raised by the drain tasks to start after unlocking:
 * one per permit taken, and a run of offers can take several; *victim an
 * evicted envelope to end after unlocking), 1 when the caller must wait
 * for room, or a negative refusal. */
static int offer_locked(struct seda_stage_s *st, seda_env_t *env, bool hop,
                        int *nsched, seda_env_t **victim)
{
    struct seda_bus_s *b = st->bus;
    if (!hop && atomic_load_explicit(&b->closed, memory_order_acquire))
        return SEDA_ECLOSED;
    if (atomic_load_explicit(&b->stopping, memory_order_acquire))
        return SEDA_ECLOSED;
    if (env && env->prio == SEDA_PRIO_LOW && !hop)
        st->shed.low_offered++;              /* shedding looks at low traffic */
    /* Shedding refuses new publishes, never hops (accepted already) nor
     * high priority; a journal slot (env NULL) counts as normal. */
    int level = seda__shed_level(&st->shed);
    if (SEDA__UNLIKELY(level > 0) && !hop &&
        (level = shed_level_now(st))) {
        int prio = env ? env->prio : SEDA_PRIO_NORMAL;
        if (prio == SEDA_PRIO_LOW ||
            (prio == SEDA_PRIO_NORMAL && level >= 2)) {
            st->stats.c.shed++;
            st->stats.c.shed_for++;
            st->stats.c.dropped++;
            return SEDA_ESHED;
        }
    }
    if (seda__inbox_count(&st->in) < (uint32_t)st->adm.capacity) {
        if (env)
            *nsched += push_locked(st, env, hop);
        else
            seda__inbox_reserve_slot(&st->in);  /* for a journal write */
        return 0;
    }
    int answer = full_answer(st->adm.policy, true);
    if (answer < 0) {
        st->stats.c.dropped++;
        return answer;
    }
    if (answer == FULL_WAIT)
        return 1;
    /* drop_oldest: evict the head (NULL: only journal reservations
     * held), admit the new one. */
    seda_env_t *old = seda__inbox_evict(&st->in);
    st->stats.c.dropped++;
    if (old && !(old->flags & ENV_DEAD))
        st->stats.c.it_lost++;
    *victim = old;
    if (env)
        *nsched += push_locked(st, env, hop);
    else
        seda__inbox_reserve_slot(&st->in);
    return 0;
}

int seda__stage_full_answer(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    int answer = full_answer(st->adm.policy, false);
    if (answer < 0)
        st->stats.c.dropped++;
    seda__mutex_unlock(&st->mu);
    return answer == FULL_WAIT ? 0 : answer;
}

/* A worker routing a hop (not inside a consumer call, nor a batch
 * consumer's, so its Lua state is free: deliver.c routes a batch after
 * the call) into this full stage, whose drain task sits in the pool queue
 * behind busy workers -- all of them perhaps waiting here too -- runs that
 * task itself, once per wait and not nested, then looks for room again.
 * Called and returns with st->mu held.  Returns whether it ran it; if not,
 * st->mu stayed held throughout.
 *
 * It looks in the pool with st->mu held (stage->mu before pool->mu is the
 * lock order): its caller found the stage full, and when no task is found
 * it goes on to wait on not_full without looking again, while a drain
 * task broadcasts not_full only to waiters already counted.  Dropping the
 * lock for the look let the stage's running drain task (on another
 * worker) make room unseen in that gap, and the hop then slept for the
 * whole hop_timeout on a stage with room and nobody left to wake it. */
static _Thread_local bool tls_helping;

static bool help_drain(struct seda_stage_s *st)
{
    if (tls_helping || seda__env_in_delivery() || seda__batch_busy() ||
        st->pull ||
        seda__pool_current_owner() != (void *)st->bus)
        return false;
    if (!seda__pool_take(st->bus->pool, seda__drain_run, st))
        return false;
    /* The task holds the permit it was scheduled with. */
    seda__mutex_unlock(&st->mu);
    tls_helping = true;
    seda__drain_run(st);
    tls_helping = false;
    seda__mutex_lock(&st->mu);
    return true;
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
    unsigned full = seda__inbox_count(&st->in);
    for (unsigned i = 1;; i++) {
        if (seda__inbox_count(&st->in) < full)
            return;
        /* Not an idle wait: a publisher blocked on a full stage, for at
         * most ROOM_SPIN_NS before the condition variable; the yield lets
         * the drain task it waits for run if it shares this core. */
        if (i < 64)
            seda__cpu_relax();
        else
            sched_yield();
        if ((i & 15) == 0 && seda__now_ns() >= end)
            return;
    }
}

/* The lock-free publish path (see HOW IT WORKS in inbox.c).  Returns 0
 * when env was admitted, 1 when the caller must take the locked path. */
static int admit_fast(struct seda_stage_s *st, seda_env_t *env, bool hop)
{
    struct seda_bus_s *b = st->bus;
    if (st->pull || env->prio != SEDA_PRIO_NORMAL)
        return 1;                       /* receivers need a signal; lanes
                                           are under the lock */
    if (!hop && seda__shed_level(&st->shed))
        return 1;                       /* shedding: the locked path says */
    uint64_t cap = (uint64_t)atomic_load_explicit(&st->adm.cap_fast,
                                                  memory_order_relaxed);
    uint64_t t, depth;
    if (!seda__inbox_claim(&st->in, cap, &t, &depth))
        return 1;                       /* inbox or stage full */
    /* The claim was seq_cst: ordered before these reads of closed,
     * stopping and running (the Dekker pairings). */
    if ((!hop && atomic_load_explicit(&b->closed, memory_order_seq_cst)) ||
        atomic_load_explicit(&b->stopping, memory_order_seq_cst)) {
        /* Closing: the ticket cannot be given back.  Void it; a sweep that
         * follows the store of stopping waits for this slot to fill. */
        seda__inbox_store(&st->in, t, TOMBSTONE);
        seda__mutex_lock(&st->mu);
        seda__inbox_voided(&st->in);
        seda__mutex_unlock(&st->mu);
        return 1;
    }
    env->at = st;
    if (hop) {
        env->enq_ts = seda__clock_ns();
        seda__inbox_count_hop(&st->in);
    }
    inbox_enter(st, env, true, t);
    SEDA__CHAOS();
    /* Dekker pairing: the ticket above, then running here; a drain task
     * does running-- then reads in_pos (both seq_cst). */
    int run = seda__drain_running(&st->task);
    if (run < atomic_load_explicit(&st->adm.conc_fast, memory_order_relaxed) &&
        seda__drain_want_task(&st->task, run, depth + 1)) {
        seda__mutex_lock(&st->mu);
        bool sched = seda__permits_claim(&st->task, st->adm.concurrency,
                                         seda__stage_depth(st), false);
        seda__mutex_unlock(&st->mu);
        if (sched)
            seda__drain_schedule(st);
    }
    return 0;
}

/* A worker's wait for room ran out at hop_timeout: say why, since that
 * is a configuration the user must change (no lock held). */
static void report_hop_timeout(struct seda_stage_s *st, seda_env_t *env,
                               bool hop)
{
    struct seda_bus_s *b = st->bus;
    /* The stage the waiting worker works for: the envelope's current
     * stage for a hop (it is not admitted yet), the delivering one's for
     * a handler's publish. */
    const seda_env_t *cur = hop && env ? env : seda__env_delivering();
    const struct seda_stage_s *from = cur ? cur->at : NULL;
    char msg[320];
    int max = 0, lent = 0, peak = 0;
    uint64_t loans = 0;
    seda__pool_loan_stats(b->pool, &lent, &loans, &peak, &max);
    if (from == st)
        snprintf(msg, sizeof msg, "a worker of stage '%s' waited hop_timeout "
                 "(%gs) for room in it: a cycle (a stage publishing into "
                 "itself while full cannot drain; give it room or another "
                 "path)", st->name, (double)b->hop_timeout_ns / 1e9);
    else if (seda__pool_loan_exhausted(b->pool))
        snprintf(msg, sizeof msg, "a worker%s%s%s waited hop_timeout (%gs) "
                 "for room here: loans exhausted (%d of max_loans %d in "
                 "use; raise max_loans or workers)", from ? " of stage '" : "",
                 from ? from->name : "", from ? "'" : "",
                 (double)b->hop_timeout_ns / 1e9, lent, max);
    else
        snprintf(msg, sizeof msg, "a worker%s%s%s waited hop_timeout (%gs) "
                 "for room here: a cycle (stages waiting on each other "
                 "while full) or a stage that does not drain",
                 from ? " of stage '" : "", from ? from->name : "",
                 from ? "'" : "", (double)b->hop_timeout_ns / 1e9);
    seda_stage_report(st, msg);
}

int seda__stage_admit(struct seda_stage_s *st, seda_env_t *env,
                      double timeout, bool hop)
{
    if (env && admit_fast(st, env, hop) == 0)
        return 0;
    int nsched = 0;
    seda_env_t *victim = NULL;
    int64_t deadline_ns = 0;            /* computed when first needed */
    bool spun = false;
    bool on_pool = seda__pool_current_owner() != NULL;
    struct seda_pool *loaned = NULL;    /* the wait is a managed block */
    bool capped = false;                /* the deadline is hop_timeout's */
    seda__mutex_lock(&st->mu);
    int rc;
    while ((rc = offer_locked(st, env, hop, &nsched, &victim)) == 1) {
        if (deadline_ns == 0) {
            deadline_ns = seda__publish_deadline(st->bus, timeout);
            capped = seda__pool_current_owner() == (void *)st->bus &&
                     deadline_ns < seda__deadline(timeout);
        }
        if (seda__now_ns() >= deadline_ns) {
            st->stats.c.dropped++;
            rc = SEDA_ETIMEDOUT;
            break;
        }
        /* A worker that waits here does not come back for the tasks it
         * queued (this stage's drain among them): run that drain itself
         * when it can. */
        if (hop && help_drain(st))
            continue;
        if (on_pool && !loaned) {
            /* About to wait on a pool worker: the pool lends a thread
             * meanwhile (managed blocking), so the drain tasks this wait
             * depends on -- this stage's among them -- keep running.
             * Then look for room again: the lock was let go. */
            seda__mutex_unlock(&st->mu);
            loaned = seda__pool_loan_block_begin();
            seda__mutex_lock(&st->mu);
            on_pool = loaned != NULL;
            continue;
        }
        if (!spun && (!loaned || !seda__batch_busy()) &&
            seda__drain_running_hint(&st->task) > 0) {
            /* A drain task is working on it: room usually appears within
             * a batch, so watch for it briefly (yielding the core after a
             * few rounds) instead of paying two kernel round trips (our
             * sleep, its wake-up) per batch.  On a loan, only for a plain
             * consumer: a C consumer refills a batch's room in
             * microseconds, while inside a batch consumer's call (a Lua
             * handler) the drain needs the core this spin would take. */
            spun = true;
            seda__mutex_unlock(&st->mu);
            wait_for_room(st, deadline_ns);
            seda__mutex_lock(&st->mu);
            continue;
        }
        st->adm.waiters++;
        seda__cond_wait(&st->adm.not_full, &st->mu, deadline_ns);
        st->adm.waiters--;
        spun = false;
    }
    seda__mutex_unlock(&st->mu);
    if (rc == SEDA_ETIMEDOUT && capped)
        report_hop_timeout(st, env, hop);   /* still counted as blocked */
    seda__pool_loan_block_end(loaned);
    while (nsched-- > 0)
        seda__drain_schedule(st);
    if (victim) {
        if (seda__env_jkey(victim))
            seda__bus_store_forget(st, victim);
        seda__env_end_dropped(victim);
    }
    return rc;
}

int seda__stage_admit_many(struct seda_stage_s *st, seda_env_t **envs,
                           int n, double timeout, int *rc)
{
    int64_t deadline_ns = 0;            /* computed when first needed */
    int nsched = 0;                     /* tasks owed: one per permit taken */
    int done = 0;
    /* Evictions are rare; end them after unlocking, a few at a time. */
    seda_env_t *victims[64];
    int nv = 0;
    bool on_pool = seda__pool_current_owner() != NULL;
    struct seda_pool *loaned = NULL;    /* the wait is a managed block */
    bool capped = false;                /* the deadline is hop_timeout's */
    *rc = 0;
    seda__mutex_lock(&st->mu);
    while (done < n) {
        seda_env_t *victim = NULL;
        int r = offer_locked(st, envs[done], false, &nsched, &victim);
        if (victim)
            victims[nv++] = victim;
        if (r == 0) {
            done++;
            if (nv < 64)
                continue;
        } else if (r == 1) {
            if (deadline_ns == 0) {
                deadline_ns = seda__publish_deadline(st->bus, timeout);
                capped = seda__pool_current_owner() == (void *)st->bus &&
                         deadline_ns < seda__deadline(timeout);
            }
            if (seda__now_ns() >= deadline_ns) {
                st->stats.c.dropped++;
                *rc = SEDA_ETIMEDOUT;
                break;
            }
            /* Let the drain task see the queued work while we wait. */
            if (nsched > 0) {
                seda__mutex_unlock(&st->mu);
                while (nsched > 0) {
                    seda__drain_schedule(st);
                    nsched--;
                }
                seda__mutex_lock(&st->mu);
                continue;
            }
            if (on_pool && !loaned) {
                /* Managed blocking, as in seda__stage_admit. */
                seda__mutex_unlock(&st->mu);
                loaned = seda__pool_loan_block_begin();
                seda__mutex_lock(&st->mu);
                on_pool = loaned != NULL;
                continue;
            }
            st->adm.waiters++;
            seda__cond_wait(&st->adm.not_full, &st->mu, deadline_ns);
            st->adm.waiters--;
            continue;
        } else {
            *rc = r;
            break;
        }
        /* Victim buffer full: flush it outside the lock. */
        seda__mutex_unlock(&st->mu);
        for (int i = 0; i < nv; i++)
            seda__env_end_dropped(victims[i]);
        nv = 0;
        seda__mutex_lock(&st->mu);
    }
    seda__mutex_unlock(&st->mu);
    if (*rc == SEDA_ETIMEDOUT && capped)
        report_hop_timeout(st, NULL, false);
    seda__pool_loan_block_end(loaned);
    while (nsched-- > 0)
        seda__drain_schedule(st);
    for (int i = 0; i < nv; i++)
        seda__env_end_dropped(victims[i]);
    return done;
}

void seda__stage_wake(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->adm.not_full);
    seda__pull_wake(&st->pl, true);
    seda__mutex_unlock(&st->mu);
}

int seda__stage_reserve(struct seda_stage_s *st, double timeout)
{
    return seda__stage_admit(st, NULL, timeout, false);
}

void seda__stage_fill(struct seda_stage_s *st, seda_env_t *env)
{
    seda__mutex_lock(&st->mu);
    /* The slot was counted when it was held; push_locked counts again. */
    seda__inbox_unreserve_slot(&st->in);
    bool sched = push_locked(st, env, false);
    seda__mutex_unlock(&st->mu);
    if (sched)
        seda__drain_schedule(st);
}

void seda__stage_fill_many(struct seda_stage_s *st, seda_env_t **envs,
                           int n)
{
    int nsched = 0;
    seda__mutex_lock(&st->mu);
    for (int i = 0; i < n; i++) {
        seda__inbox_unreserve_slot(&st->in);
        nsched += push_locked(st, envs[i], false);
    }
    seda__mutex_unlock(&st->mu);
    while (nsched-- > 0)
        seda__drain_schedule(st);
}

int seda__stage_requeue_front(struct seda_stage_s *st, seda_env_t **envs,
                              int n)
{
    int nsched = 0;
    seda__mutex_lock(&st->mu);
    uint64_t slots = seda__admission_slots(st->adm.capacity,
                                          st->adm.concurrency, st->bus->batch);
    for (int i = 0; i < n; i++)
        envs[i]->at = st;
    if (slots > UINT32_MAX / 2 ||
        seda__inbox_push_front(&st->in, envs, n, (uint32_t)slots) != 0) {
        seda__mutex_unlock(&st->mu);
        return SEDA_ENOMEM;
    }
    st->stats.c.enqueued += (uint64_t)n;
    st->stats.c.accepted += (uint64_t)n;
    if (st->pull)
        seda__pull_wake(&st->pl, true);
    else
        nsched = seda__permits_claim_n(&st->task, st->adm.concurrency,
                                       seda__stage_depth(st));
    seda__mutex_unlock(&st->mu);
    while (nsched-- > 0)
        seda__drain_schedule(st);
    return 0;
}

void seda__stage_unreserve(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    seda__inbox_unreserve_slot(&st->in);
    if (st->adm.waiters > 0)
        pthread_cond_broadcast(&st->adm.not_full);
    seda__mutex_unlock(&st->mu);
}

/* ---- shutdown helpers ---- */

bool seda__stage_idle(struct seda_stage_s *st, uint64_t *sum)
{
    if (st->pull) {
        /* Queued envelopes wait for an outside receiver: they do not keep
         * the bus busy.  Leases do (in flight), until they expire. */
        seda_env_t *requeue[64];
        seda__mutex_lock(&st->mu);
        int n = seda__pull_expire(&st->pl, seda__now_ns(), requeue, 64);
        bool idle = seda__pull_settled(&st->pl);
        *sum += st->stats.c.enqueued + st->stats.c.nacked + seda__inbox_fast_all(&st->in);
        seda__mutex_unlock(&st->mu);
        for (int i = 0; i < n; i++)
            seda__route_nack(st, requeue[i]);
        return idle && n == 0;
    }
    seda__mutex_lock(&st->mu);
    bool idle = seda__drain_running(&st->task) == 0 &&
                seda__stage_depth(st) == 0 && st->rt.delayed == 0;
    *sum += st->stats.c.enqueued + seda__inbox_fast_all(&st->in);
    seda__mutex_unlock(&st->mu);
    if (st->remote_ops && !st->remote_ops->idle(st, sum))
        idle = false;
    return idle;
}

int seda__stage_enter(struct seda_stage_s *to, seda_env_t *env,
                      double timeout, bool hop)
{
    if (to->remote_ops)
        return to->remote_ops->enter(to, env, timeout, hop);
    return seda__stage_admit(to, env, timeout, hop);
}

void seda__stage_count_remote(struct seda_stage_s *st, int what)
{
    seda__mutex_lock(&st->mu);
    if (what == SEDA__REMOTE_ACCEPTED) {
        st->stats.c.accepted++;
    } else if (what == SEDA__REMOTE_HANDED) {
        st->stats.c.it_remote++;
    } else {
        st->stats.c.dropped++;
        st->stats.c.it_lost++;
    }
    seda__mutex_unlock(&st->mu);
}

#define FAIL(...) do { \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return SEDA_EINVAL; \
    } while (0)

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
    int cap = capacity > 0 ? capacity : st->adm.capacity;
    int conc = concurrency > 0 ? concurrency : st->adm.concurrency;
    uint64_t slots = seda__admission_slots(cap, conc, st->bus->batch);
    /* The ring must also hold what is queued now plus what is in flight
     * (a shrink below the current depth keeps everything). */
    uint64_t need = (uint64_t)seda__stage_depth(st) +
                    (uint64_t)seda__drain_in_flight(&st->task) +
                    (uint64_t)conc * (uint64_t)b->batch;
    if (need > slots)
        slots = need;
    int rc = slots > UINT32_MAX / 2 ? SEDA_ENOMEM
           : seda__inbox_reserve(&st->in, (uint32_t)slots);
    if (rc == 0 && conc > st->adm.concurrency)
        rc = seda__pool_reserve(b->pool, conc - st->adm.concurrency);
    if (rc == 0) {
        st->adm.capacity = cap;
        st->adm.concurrency = conc;
        if (policy >= 0)
            st->adm.policy = policy;
        atomic_store_explicit(&st->adm.cap_fast, cap, memory_order_relaxed);
        atomic_store_explicit(&st->adm.conc_fast, conc, memory_order_relaxed);
        if (!st->pull)
            nsched = seda__permits_claim_n(&st->task, conc,
                                           seda__stage_depth(st));
        pthread_cond_broadcast(&st->adm.not_full);
    }
    seda__mutex_unlock(&st->mu);
    if (rc) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': out of memory", nm);
        return rc;
    }
    while (nsched-- > 0)
        seda__drain_schedule(st);
    return 0;
}

int seda_stage_tune_admission(seda_stage_t *st, const seda_stage_opts *o,
                              unsigned what, char *err, size_t errlen)
{
    char why[160];
    bool shed = what & SEDA_TUNE_SHED, retry = what & SEDA_TUNE_RETRY,
         starve = what & SEDA_TUNE_STARVE;
    if (seda__admission_check(o, what, why, sizeof why) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': %s", st->name, why);
        return SEDA_EINVAL;
    }
    seda__mutex_lock(&st->mu);
    if (shed) {
        st->shed.target_ns = seda__secs_to_ns(o->shed_target);
        st->shed.interval_ns = seda__secs_to_ns(o->shed_interval);
        st->shed.above_since = 0;
        st->shed.rearm = 0;                    /* a new rule starts afresh */
        if (o->shed_target == 0)
            seda__shed_set(&st->shed, 0);
    }
    if (retry)
        seda__route_retry_set(&st->rt, o);
    if (starve)
        seda__inbox_set_starve(&st->in, seda__secs_to_ns(o->starve_after));
    seda__mutex_unlock(&st->mu);
    return 0;
}

void seda_stage_count_refused(seda_stage_t *st)
{
    seda__mutex_lock(&st->mu);
    st->stats.c.refused++;
    st->stats.c.dropped++;
    seda__mutex_unlock(&st->mu);
}

void seda_stage_set_check(seda_stage_t *st, seda_check_fn fn, void *ud)
{
    atomic_store_explicit(&st->check_ud, ud, memory_order_relaxed);
    /* Release: pairs with the acquire in seda__stage_check; check_ud is
     * visible to whoever sees fn. */
    atomic_store_explicit(&st->check, fn, memory_order_release);
}

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
    seda__mutex_lock(&st->mu);
    st->stats.c.invalid++;
    seda__mutex_unlock(&st->mu);
    return SEDA_ETYPE;
}

/* ---- what the layers beside the core read (door.h) ---- */

struct seda_bus_s *seda__stage_bus(const struct seda_stage_s *st)
{
    return st->bus;
}

int seda__stage_durability(const struct seda_stage_s *st)
{
    return st->durable;
}

int seda__stage_dedup_window(const struct seda_stage_s *st)
{
    return st->dedup_window;
}

const char *seda__stage_dead_letter(const struct seda_stage_s *st)
{
    return st->dead_letter;
}

double seda__stage_publish_timeout(const struct seda_stage_s *st)
{
    return st->publish_timeout;
}

int seda__stage_consumer_count(const struct seda_stage_s *st)
{
    return seda__consumers_count(&((struct seda_stage_s *)st)->cons);
}

int seda__stage_capacity(const struct seda_stage_s *st)
{
    return atomic_load_explicit(&((struct seda_stage_s *)st)->adm.cap_fast,
                                memory_order_relaxed);
}

void *seda__stage_remote_ctx(const struct seda_stage_s *st)
{
    return st->remote;
}

bool seda__stage_is_remote(const struct seda_stage_s *st, const void *ops)
{
    return st->remote_ops && (const void *)st->remote_ops == ops;
}
