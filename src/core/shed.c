/* SPDX-License-Identifier: MIT */
/*
 * shed.c -- a stage's adaptive shedding (CoDel on queue sojourn) and
 * shedding at the door: the level each drain batch updates, the level a
 * publish asks about, and the bus's count of stages that shed.  The
 * fields are the stage's struct seda_admission (stage.h), written under
 * the stage's mu; shed_level is read without it (relaxed) on the
 * publishers' line.
 */
#include "bus.h"
#include "stage.h"

/* After shedding ends, for this many intervals the stage stays armed: the
 * first start above target sheds again at once, at the level it had,
 * instead of after another whole interval above target.  A queue that was
 * overloaded a moment ago is overloaded again; waiting an interval each
 * time lets it fill each time (the sojourn swung between target and the
 * full-queue delay).  Bursts within target are still taken in: like
 * CoDel, only starts (the queue's standing delay) decide. */
#define SHED_REARM_INTERVALS 10

/* The shedding level becomes level (mu held): the bus counts the stages
 * that shed, so a new itinerary's door check costs nothing while none
 * does. */
void seda__shed_set(struct seda_stage_s *st, int level)
{
    int was = atomic_load_explicit(&st->adm.shed_level, memory_order_relaxed);
    atomic_store_explicit(&st->adm.shed_level, level, memory_order_relaxed);
    if ((was == 0) != (level == 0))
        seda__bus_shedding_add(st->bus, level ? 1 : -1);
}

/* Shedding at level ends (mu held); the stage stays armed. */
static void shed_end(struct seda_stage_s *st, int level, int64_t now)
{
    st->adm.shed_above_since = 0;
    st->adm.shed_rearm = level;
    st->adm.shed_rearm_until = now + SHED_REARM_INTERVALS * st->adm.shed_interval_ns;
    seda__shed_set(st, 0);
}

/* Shedding rises to level (mu held). */
static void shed_rise(struct seda_stage_s *st, int level, int64_t now)
{
    st->adm.shed_level_at = now;
    seda__shed_set(st, level);
}

void seda__shed_update(struct seda_stage_s *st, int64_t least,
                       int64_t now)
{
    SEDA__ASSERT_HELD(&st->mu);
    if (!st->adm.shed_target_ns)
        return;
    int level = atomic_load_explicit(&st->adm.shed_level, memory_order_relaxed);
    if (least < st->adm.shed_target_ns) {
        /* An envelope started within target: the queue is good again. */
        if (level)
            shed_end(st, level, now);
        else
            st->adm.shed_above_since = 0;
        return;
    }
    if (!level && st->adm.shed_rearm && now < st->adm.shed_rearm_until) {
        /* Shedding ended a moment ago, and the queue is slow again. */
        st->adm.shed_rearm_until = now + SHED_REARM_INTERVALS *
                                     st->adm.shed_interval_ns;
        shed_rise(st, st->adm.shed_rearm, now);
        return;
    }
    if (!st->adm.shed_above_since) {
        st->adm.shed_above_since = now;
        st->adm.shed_low_mark = st->adm.low_offered;
        return;
    }
    if (now - st->adm.shed_above_since < st->adm.shed_interval_ns)
        return;
    /* Every start for a whole interval waited too long: refuse low
     * priority, and if that is not enough after another interval, normal
     * priority too -- at once when no low-priority publish came in that
     * interval (there is nothing to refuse first). */
    if (level == 0 ||
        (level == 1 && now - st->adm.shed_level_at >= st->adm.shed_interval_ns)) {
        shed_rise(st, level == 0 && st->adm.low_offered == st->adm.shed_low_mark
                          ? 2 : level + 1, now);
    }
}

/* Shedding at the door (SPEC.md section 13): a new itinerary whose slip
 * names st is refused while st sheds at its priority, as st would refuse
 * it (high is never shed).  Counted in st's shed_for.  Takes st->mu only
 * when st is shedding. */
int seda__shed_door(struct seda_stage_s *st, int prio)
{
    if (prio == SEDA_PRIO_HIGH ||
        SEDA__LIKELY(!atomic_load_explicit(&st->adm.shed_level,
                                           memory_order_relaxed)))
        return 0;
    seda__mutex_lock(&st->mu);
    int level = seda__shed_level_now(st);
    bool refuse = level >= (prio == SEDA_PRIO_LOW ? 1 : 2);
    if (refuse)
        st->stats.c.shed_for++;
    seda__mutex_unlock(&st->mu);
    return refuse ? SEDA_ESHED : 0;
}

/* Forward targets seen (the door rule's reach beyond a slip).  A target
 * already known gets its time refreshed (at most once a millisecond, so
 * a busy forward does not keep writing the line); a new one takes the
 * slot seen longest ago (an empty slot's time is 0). */
void seda__shed_fwd_learn(struct seda_stage_s *st, struct seda_stage_s *to)
{
    int64_t now = seda__now_ns();
    int oldest = 0;
    int64_t oldest_at = INT64_MAX;
    for (int i = 0; i < SEDA__FWD_SEEN; i++) {
        struct seda_stage_s *p = atomic_load_explicit(&st->fwd.to[i],
                                                      memory_order_acquire);
        int64_t at = atomic_load_explicit(&st->fwd.at[i],
                                          memory_order_relaxed);
        if (p == to) {
            if (now - at > 1000000)
                atomic_store_explicit(&st->fwd.at[i], now,
                                      memory_order_relaxed);
            return;
        }
        if (at < oldest_at) {
            oldest_at = at;
            oldest = i;
        }
    }
    atomic_store_explicit(&st->fwd.at[oldest], now, memory_order_relaxed);
    atomic_store_explicit(&st->fwd.to[oldest], to, memory_order_release);
}

int seda__shed_fwd_seen(struct seda_stage_s *st, int64_t now,
                        struct seda_stage_s **out)
{
    int64_t forget = st->bus->stats_window_ns;
    int n = 0;
    for (int i = 0; i < SEDA__FWD_SEEN; i++) {
        struct seda_stage_s *p = atomic_load_explicit(&st->fwd.to[i],
                                                      memory_order_acquire);
        if (p && now - atomic_load_explicit(&st->fwd.at[i],
                                            memory_order_relaxed) <= forget)
            out[n++] = p;
    }
    return n;
}

void seda__shed_count(struct seda_stage_s *st)
{
    seda__mutex_lock(&st->mu);
    st->stats.c.shed++;
    st->stats.c.dropped++;
    seda__mutex_unlock(&st->mu);
}

/* Shedding while the queue could not be slow (mu held): an empty queue,
 * or one whose backlog takes less than target at the recent handling
 * time, ends it (the batches that would say so may never come). */
int seda__shed_level_now(struct seda_stage_s *st)
{
    int level = atomic_load_explicit(&st->adm.shed_level, memory_order_relaxed);
    if (!level)
        return 0;
    if (!st->adm.shed_target_ns) {
        st->adm.shed_above_since = 0;
        seda__shed_set(st, 0);
        return 0;
    }
    /* A call suspended on the network holds its permit for its whole
     * life: that life, not the worker's share (svc_ns leaves those calls
     * out), is what the backlog waits for.  Unknown (queued envelopes and
     * no call measured yet) counts as slow: the next start decides. */
    uint64_t svc = atomic_load_explicit(&st->dr.svc_ns, memory_order_relaxed);
    if (st->dr.life_ns > svc)
        svc = st->dr.life_ns;
    uint32_t depth = seda__stage_depth(st);
    if (svc == 0 && depth > 0)
        return level;
    /* The queue drains at most as many at once as there are workers
     * (and calls suspended on the network, which hold none): a
     * concurrency over that does not make the backlog shorter. */
    uint64_t par = (uint64_t)st->adm.concurrency;
    int workers = seda__pool_size(st->bus->pool) + st->dr.suspended;
    if (workers > 0 && (uint64_t)workers < par)
        par = (uint64_t)workers;
    uint64_t backlog = (uint64_t)depth * svc / par;
    if (backlog < (uint64_t)st->adm.shed_target_ns) {
        shed_end(st, level, seda__clock_ns());
        return 0;
    }
    return level;
}

