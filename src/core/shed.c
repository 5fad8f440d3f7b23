/* SPDX-License-Identifier: MIT */
/*
 * shed.c -- a stage's adaptive shedding (CoDel on queue sojourn), a leaf:
 * the level each drain batch updates, the level a publish asks about,
 * the bus's count of stages that shed, and the forward targets the door
 * rule reaches.  The fields are the stage's struct seda_shed (shed.h),
 * written under the stage's mu (its callers hold it); level is read
 * without it (relaxed) on the publishers' line.
 */
#include "drain_state.h"
#include "seda_int.h"
#include "shed.h"

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
void seda__shed_init(struct seda_shed *sh, int64_t target_ns,
                     int64_t interval_ns, atomic_int *bus_count)
{
    sh->target_ns = target_ns;
    sh->interval_ns = interval_ns;
    sh->bus_count = bus_count;
    atomic_init(&sh->level, 0);
}

void seda__shed_fwd_init(struct seda_fwd_seen *f)
{
    for (int i = 0; i < SEDA__FWD_SEEN; i++) {
        atomic_init(&f->to[i], NULL);
        atomic_init(&f->at[i], 0);
    }
}

void seda__shed_set(struct seda_shed *sh, int level)
{
    int was = atomic_load_explicit(&sh->level, memory_order_relaxed);
    atomic_store_explicit(&sh->level, level, memory_order_relaxed);
    if ((was == 0) != (level == 0))
        atomic_fetch_add_explicit(sh->bus_count, level ? 1 : -1,
                                  memory_order_relaxed);
}

/* Shedding at level ends (mu held); the stage stays armed. */
static void shed_end(struct seda_shed *sh, int level, int64_t now)
{
    sh->above_since = 0;
    sh->rearm = level;
    sh->rearm_until = now + SHED_REARM_INTERVALS * sh->interval_ns;
    seda__shed_set(sh, 0);
}

/* Shedding rises to level (mu held). */
static void shed_rise(struct seda_shed *sh, int level, int64_t now)
{
    sh->level_at = now;
    seda__shed_set(sh, level);
}

void seda__shed_update(struct seda_shed *sh, int64_t least,
                       int64_t now)
{
    if (!sh->target_ns)
        return;
    int level = atomic_load_explicit(&sh->level, memory_order_relaxed);
    if (least < sh->target_ns) {
        /* An envelope started within target: the queue is good again. */
        if (level)
            shed_end(sh, level, now);
        else
            sh->above_since = 0;
        return;
    }
    if (!level && sh->rearm && now < sh->rearm_until) {
        /* Shedding ended a moment ago, and the queue is slow again. */
        sh->rearm_until = now + SHED_REARM_INTERVALS *
                                     sh->interval_ns;
        shed_rise(sh, sh->rearm, now);
        return;
    }
    if (!sh->above_since) {
        sh->above_since = now;
        sh->low_mark = sh->low_offered;
        return;
    }
    if (now - sh->above_since < sh->interval_ns)
        return;
    /* Every start for a whole interval waited too long: refuse low
     * priority, and if that is not enough after another interval, normal
     * priority too -- at once when no low-priority publish came in that
     * interval (there is nothing to refuse first). */
    if (level == 0 ||
        (level == 1 && now - sh->level_at >= sh->interval_ns)) {
        shed_rise(sh, level == 0 && sh->low_offered == sh->low_mark
                          ? 2 : level + 1, now);
    }
}

/* Forward targets seen (the door rule's reach beyond a slip).  A target
 * already known gets its time refreshed (at most once a millisecond, so
 * a busy forward does not keep writing the line); a new one takes the
 * slot seen longest ago (an empty slot's time is 0). */
void seda__shed_fwd_learn(struct seda_fwd_seen *f, struct seda_stage_s *to)
{
    int64_t now = seda__now_ns();
    int oldest = 0;
    int64_t oldest_at = INT64_MAX;
    for (int i = 0; i < SEDA__FWD_SEEN; i++) {
        struct seda_stage_s *p = atomic_load_explicit(&f->to[i],
                                                      memory_order_acquire);
        int64_t at = atomic_load_explicit(&f->at[i],
                                          memory_order_relaxed);
        if (p == to) {
            if (now - at > 1000000)
                atomic_store_explicit(&f->at[i], now,
                                      memory_order_relaxed);
            return;
        }
        if (at < oldest_at) {
            oldest_at = at;
            oldest = i;
        }
    }
    atomic_store_explicit(&f->at[oldest], now, memory_order_relaxed);
    atomic_store_explicit(&f->to[oldest], to, memory_order_release);
}

int seda__shed_fwd_seen(struct seda_fwd_seen *f, int64_t now,
                        int64_t forget, struct seda_stage_s **out)
{
    int n = 0;
    for (int i = 0; i < SEDA__FWD_SEEN; i++) {
        struct seda_stage_s *p = atomic_load_explicit(&f->to[i],
                                                      memory_order_acquire);
        if (p && now - atomic_load_explicit(&f->at[i],
                                            memory_order_relaxed) <= forget)
            out[n++] = p;
    }
    return n;
}

/* Shedding while the queue could not be slow (mu held): an empty queue,
 * or one whose backlog takes less than target at the recent handling
 * time, ends it (the batches that would say so may never come). */
int seda__shed_level_now(struct seda_shed *sh, const struct seda_drain *dr,
                         uint32_t depth, int concurrency, int pool_size)
{
    int level = atomic_load_explicit(&sh->level, memory_order_relaxed);
    if (!level)
        return 0;
    if (!sh->target_ns) {
        sh->above_since = 0;
        seda__shed_set(sh, 0);
        return 0;
    }
    /* A call suspended on the network holds its permit for its whole
     * life: that life, not the worker's share (svc_ns leaves those calls
     * out), is what the backlog waits for.  Unknown (queued envelopes and
     * no call measured yet) counts as slow: the next start decides. */
    uint64_t svc = seda__drain_backlog_ns(dr);
    if (svc == 0 && depth > 0)
        return level;
    /* The queue drains at most as many at once as there are workers
     * (and calls suspended on the network, which hold none): a
     * concurrency over that does not make the backlog shorter. */
    uint64_t par = (uint64_t)concurrency;
    int workers = pool_size + seda__drain_suspended(dr);
    if (workers > 0 && (uint64_t)workers < par)
        par = (uint64_t)workers;
    uint64_t backlog = (uint64_t)depth * svc / par;
    if (backlog < (uint64_t)sh->target_ns) {
        shed_end(sh, level, seda__clock_ns());
        return 0;
    }
    return level;
}

