/* SPDX-License-Identifier: MIT */
/*
 * drain.c -- the drain task: delivering a stage's envelopes to its
 * consumers, routing the results, and deciding when to stop.
 *
 * DESIGN
 *   A drain task holds one of its stage's permits.  It takes up to `batch`
 *   envelopes in one lock round (the head ring, then the inbox: see
 *   inbox.c; fewer for slow work, SEDA_BATCH_NS in drain.h), delivers
 *   them with no lock held and routes acks, nacks and dead letters
 *   (deliver.c: one clock read per envelope feeds the sojourn and
 *   service histograms; a retry is delivered again at once, ahead of
 *   the rest of the batch; a durable stage first writes the whole
 *   batch's decisions in one journal commit), then in one more lock
 *   round folds its counters in and puts back what the batch did not
 *   deliver and a durable stage's retries at the head.  Then it
 *   carries on (after gathering half a batch, when no other task waits
 *   for the pool), reschedules itself behind other stages' tasks, or
 *   lingers briefly for more before giving the permit back -- with the
 *   Dekker check that pairs with the lock-free publish path, so no
 *   envelope is left without a task.
 *
 *   Extra drain tasks: a stage with several permits gets a second (third,
 *   ...) drain task only when the backlog would keep the tasks already
 *   running busy for SEDA_SPAWN_NS or more at the recent handling time
 *   per envelope (svc_ns; unknown counts as slow).  So a burst of slow
 *   envelopes is spread over every permit at once (each task takes a
 *   fair share of the queue), while a fast consumer that keeps up alone
 *   is not joined by tasks that would only fight it for the queue and,
 *   on a small machine, for the cores the publishers need.  Drain tasks
 *   apply the same rule after each batch, and one that meets an envelope
 *   taking SEDA_SHED_NS (longer than a preemption makes a fast one) gives
 *   the rest of its batch back and starts tasks for it; the batch's
 *   slowest envelope is left out of svc_ns for the same reason.  A queued
 *   envelope always has a task: with none running one is started.
 */
#include <sched.h>

#include "bus.h"
#include "stage.h"

/* How long a drain task that emptied its queue watches for more before
 * giving its permit back.  A producer a little slower than its consumer
 * would otherwise make every envelope pay a pool round trip and often a
 * kernel wake-up.  Bounded, and it yields the core after a short spin, so
 * an idle stage still costs nothing and a busy machine loses little. */
#define LINGER_NS 20000
#define GATHER_NS 10000

/* Let more envelopes arrive (at most GATHER_NS, no lock held) while
 * fewer than half a batch are queued, so the publisher and this task do
 * not trade the stage lock for every envelope: with a consumer a little
 * faster than its producer, taking whatever is there at once settles
 * into batches of a few envelopes and a contended lock on every publish.
 * Costs at most GATHER_NS of latency.  It watches the inbox slot the
 * half batch would end at (seda__inbox_ready), not the count: reading
 * the line publishers write on every publish would cost each of them a
 * cache-line round trip.  Only for a stage with one permit: one with
 * several has several publishers as a rule, and on a small machine the
 * spin takes the core they need. */
static void gather(struct seda_stage_s *st, unsigned depth)
{
    unsigned want =
        seda__drain_take_limit(&st->task, (uint32_t)st->bus->batch) / 2;
    if (depth >= want ||
        atomic_load_explicit(&st->adm.conc_fast, memory_order_relaxed) > 1)
        return;
    int64_t until = seda__clock_ns() + GATHER_NS;
    for (unsigned k = 1; !seda__inbox_ready(&st->in, want); k++) {
        for (int r = 0; r < 16; r++)
            seda__cpu_relax();
        if ((k & 7) == 0 &&
            (seda__clock_ns() >= until ||
             atomic_load_explicit(&st->bus->stopping, memory_order_relaxed)))
            break;
    }
}

/* Watch for new work (no lock held).  True when some arrived. */
static bool linger(struct seda_stage_s *st)
{
    struct seda_bus_s *b = st->bus;
    int64_t end = seda__now_ns() + LINGER_NS;
    for (unsigned i = 1;; i++) {
        /* A hint only; the caller re-checks under the lock.  Every 16th
         * look also counts (held reservations, a ticket whose envelope is
         * on its way). */
        if (seda__inbox_ready(&st->in, 1) ||
            ((i & 15) == 0 && seda__inbox_count(&st->in))) {
            gather(st, seda__inbox_count(&st->in));
            return true;
        }
        if (atomic_load_explicit(&b->stopping, memory_order_relaxed) ||
            seda__pool_pending(b->pool))
            return false;
        /* The yield stays (unlike the pool's idle watch): this wait is
         * for the producer, bounded by LINGER_NS once per task's end, and
         * a producer sharing this core is what it hands the core to. */
        if (i < 64) {
            for (int r = 0; r < 8; r++)
                seda__cpu_relax();
        } else {
            sched_yield();
        }
        if ((i & 15) == 0 && seda__now_ns() >= end)
            return false;
    }
}

/* How many envelopes this task takes now (mu held): the take limit, and
 * with several drain tasks a fair share of what is queued, so a burst of
 * slow envelopes is spread over them (the publishers start one per free
 * permit for slow work: "Extra drain tasks" above) instead of being
 * handled one after another by the first. */
static uint32_t fair_share(struct seda_stage_s *st)
{
    uint32_t want = seda__drain_take_limit(&st->task, (uint32_t)st->bus->batch);
    if (st->adm.concurrency <= 1)
        return want;
    /* Tasks to share with: those queued or running, or, for work slow
     * enough to want more, as many as the permits allow (a publisher
     * counts its envelope before it starts the task for it). */
    uint32_t depth = seda__stage_depth(st);
    uint32_t tasks = (uint32_t)atomic_load_explicit(&st->task.running,
                                                    memory_order_relaxed);
    bool slow = seda__drain_want_task(&st->task, (int)tasks, depth);
    if (slow) {
        tasks = (uint32_t)st->adm.concurrency;
        if (tasks > depth)
            tasks = depth;
        if (tasks == 0)
            tasks = 1;
    }
    /* For slow work the share also caps a lone task at what it counted:
     * publishers add without the lock, and an envelope that lands between
     * the count and the take belongs to the task its publisher is
     * starting, not to this one. */
    if (tasks > 1 || slow) {
        uint32_t share = (depth + tasks - 1) / tasks;
        if (share < want)
            want = share > 0 ? share : 1;
    }
    return want;
}

/* The handling time the publishers weigh extra tasks by: a moving
 * average over batches, per envelope, of the batch's n service times.
 * The batch's slowest is left out when there are others: a task
 * preempted in the middle of one envelope (three threads on two cores)
 * is not a slow handler.  No lock: see drain.h. */
static void svc_update(struct seda_drain *d, const int64_t *service, int n)
{
    if (n <= 0)
        return;
    int64_t sum = 0, top = 0;
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (service[k] < 0)
            continue;                   /* suspended */
        int64_t v = service[k];
        sum += v;
        if (v > top)
            top = v;
        m++;
    }
    if (m == 0)
        return;
    n = m;
    uint64_t per = n > 1 ? (uint64_t)(sum - top) / (uint64_t)(n - 1) + 1
                         : (uint64_t)sum + 1;
    uint64_t old = atomic_load_explicit(&d->svc_ns, memory_order_relaxed);
    uint64_t avg = old ? (old * 7 + per) / 8 : per;
    atomic_store_explicit(&d->svc_ns,
                          (unsigned)(avg < UINT32_MAX ? avg : UINT32_MAX),
                          memory_order_relaxed);
}

/* After a batch (mu held, may drop and retake it): free permits and work
 * this task should not do alone (it shed its batch, or the handling time
 * says so) get a task each, up to what is queued beyond what this task
 * will take next. */
static void spread(struct seda_stage_s *st, bool shed)
{
    if (st->adm.concurrency <= 1 ||
        atomic_load_explicit(&st->bus->stopping, memory_order_relaxed))
        return;
    int tasks = atomic_load_explicit(&st->task.running, memory_order_relaxed);
    int nsched = 0;
    uint32_t depth = seda__stage_depth(st);
    while (tasks < st->adm.concurrency && (uint32_t)(nsched + 1) < depth &&
           (shed || seda__drain_want_task(&st->task, tasks, depth))) {
        tasks++;
        nsched++;
    }
    if (nsched > 0) {
        atomic_store_explicit(&st->task.running, tasks, memory_order_seq_cst);
        seda__mutex_unlock(&st->mu);
        while (nsched-- > 0)
            seda__drain_schedule(st);
        seda__mutex_lock(&st->mu);
    }
}

/* Take one batch, deliver it, fold the results in.  Returns with st->mu
 * held, and how many envelopes it took. */
static int run_batch(struct seda_stage_s *st, bool *gave_permit)
{
    seda_env_t *batch[SEDA_MAX_BATCH];
    seda_env_t *retry[SEDA_MAX_BATCH];
    int64_t sojourn[SEDA_MAX_BATCH], service[SEDA_MAX_BATCH];
    int res[SEDA_MAX_BATCH];
    struct stage_counters tally = { 0 };

    seda__mutex_lock(&st->mu);
    int n = (int)seda__inbox_take(&st->in, batch, fair_share(st));
    st->task.in_flight += n;
    if (st->adm.waiters > 0 && n > 0)
        pthread_cond_broadcast(&st->adm.not_full);
    /* Retry backoff (read under mu: tune changes it): nacked envelopes
     * wait on a timer instead of being delivered again at once. */
    bool later = st->rt.backoff > 0;
    seda__mutex_unlock(&st->mu);

    /* Deliver and route (deliver.c). */
    struct seda_batch_s bt = {
        .st = st, .later = later, .n = n,
        .t = seda__clock_ns(), .env = batch, .res = res,
        .sojourn = sojourn, .service = service, .retry = retry,
        .tally = &tally,
    };
    seda__batch_run(&bt);
    int i = bt.i, nretry = bt.nretry;
    *gave_permit = bt.gave_permit;
    int64_t t = bt.t;

    /* Latency samples under their own lock, so the stage lock (which
     * publishers want) is held only for the counters below. */
    seda__stats_latency(&st->stats, sojourn, service, i);
    svc_update(&st->task, service, i);    /* both skip suspended calls */

    /* Shedding looks at the shortest wait of the batch: CoDel's "every
     * envelope that started in the interval waited longer than target"
     * holds until one starts below it. */
    int64_t least = INT64_MAX;
    for (int k = 0; k < i; k++)
        if (sojourn[k] < least)
            least = sojourn[k];

    seda__mutex_lock(&st->mu);
    /* Interrupted by stop, shed or a retry: the rest go back first, then
     * the retries, both in their original order (retries with a backoff
     * wait on a timer instead). */
    for (int k = n - 1; k >= i; k--)
        seda__route_push_head(st, batch[k]);
    for (int k = nretry - 1; k >= 0; k--)
        if (!seda__route_retry_later(st, retry[k]))
            seda__route_push_head(st, retry[k]);
    st->task.in_flight -= n;
    seda__stats_fold(&st->stats.c, &tally);
    if (i > 0) {
        seda__stats_rate_sample(&st->stats, t);
        seda__shed_update(&st->shed, least, t);
    }
    spread(st, bt.shed);
    return n;
}

void seda__drain_schedule(struct seda_stage_s *st)
{
    /* Inside a consumer call (a handler publishing) the worker may run on
     * for long, or wait for the very task it queues: wake another. */
    if (seda__pool_submit(st->bus->pool, seda__drain_run, st,
                          !seda__env_in_delivery()) != 0) {
        /* Pool stopping: give the permit back; the bus sweeps the queue. */
        seda__mutex_lock(&st->mu);
        atomic_fetch_sub_explicit(&st->task.running, 1, memory_order_seq_cst);
        seda__mutex_unlock(&st->mu);
    }
}

/* ---- the task ---- */

void seda__drain_run(void *arg)
{
    struct seda_stage_s *st = arg;
    struct seda_bus_s *b = st->bus;
    for (;;) {
        bool gave = false;
        int took = run_batch(st, &gave);    /* returns holding st->mu */
        if (gave) {
            /* A suspended call holds this task's permit now; it gives it
             * back (or starts a task) when it is settled. */
            seda__mutex_unlock(&st->mu);
            return;
        }
        bool stopping = atomic_load_explicit(&b->stopping,
                                             memory_order_acquire);
        uint32_t depth = seda__stage_depth(st);
        if (depth > 0 && !stopping) {
            seda__mutex_unlock(&st->mu);
            /* Keep the permit.  With other tasks waiting, go to the back
             * of the pool's queue so every stage gets its turn; with none,
             * the rescheduled task would only hop to another worker and
             * leave this one's cache behind, so carry on here. */
            if (seda__pool_pending(b->pool) == 0) {
                /* Readiness first, as Go's scheduler polls the network
                 * between goroutines (SPEC.md section 16): a request read
                 * now may be refused at the door at once, or queued. */
                seda__pool_ready_look(b->pool);
                if (seda__pool_pending(b->pool) == 0) {
                    gather(st, depth);
                    continue;
                }
            }
            seda__drain_schedule(st);
            /* A hop waiting for room here looked for this stage's task
             * in the pool (help_drain) before it was queued, then slept:
             * wake it to look again.  Every other worker may be blocked
             * too (this one may pick up a task that blocks), and then
             * only the waiter can run the task before its hop_timeout.
             * After the submit, under the lock (a waiter looks and counts
             * itself in one hold of it): one that looks later finds the
             * task, one that looked earlier is counted in waiters. */
            seda__mutex_lock(&st->mu);
            if (st->adm.waiters > 0)
                pthread_cond_broadcast(&st->adm.not_full);
            seda__mutex_unlock(&st->mu);
            return;
        }
        /* Linger only as the stage's last task: with another one
         * running, it will see what arrives next.  And only after a
         * batch that took something: linger counts held reservations as
         * coming, and a durable stage's are held for a whole journal
         * commit (an fsync), through which linger, an empty batch,
         * linger... would spin.  The envelope's fill starts a task. */
        if (!stopping && took > 0 &&
            atomic_load_explicit(&st->task.running, memory_order_relaxed) == 1) {
            seda__mutex_unlock(&st->mu);
            bool more = linger(st);
            seda__mutex_lock(&st->mu);
            if (more || seda__stage_depth(st) > 0) {
                seda__mutex_unlock(&st->mu);
                continue;
            }
        }
        /* Give the permit back, then look once more (seq_cst, the Dekker
         * pairing with admit_fast): a lock-free publisher that read the
         * old running count did not schedule, so its envelope is ours. */
        SEDA__CHAOS();
        atomic_fetch_sub_explicit(&st->task.running, 1, memory_order_seq_cst);
        SEDA__CHAOS();
        if (!stopping && seda__stage_depth(st) > 0 &&
            atomic_load_explicit(&st->task.running, memory_order_relaxed) <
                st->adm.concurrency) {
            atomic_fetch_add_explicit(&st->task.running, 1, memory_order_seq_cst);
            seda__mutex_unlock(&st->mu);
            continue;
        }
        bool idle = atomic_load_explicit(&st->task.running,
                                         memory_order_relaxed) == 0 &&
                    seda__stage_depth(st) == 0;
        seda__mutex_unlock(&st->mu);
        if (idle)
            seda__bus_idle_notify(b);
        return;
    }
}
