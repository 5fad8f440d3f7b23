/* SPDX-License-Identifier: MIT */
/*
 * shed.h -- a stage's adaptive shedding (shed.c, a leaf): CoDel on queue
 * sojourn, the level a publish asks about, and the forward targets the
 * door rule reaches beyond a slip.
 *
 * Locking: the fields of struct seda_shed are guarded by the owning
 * stage's mu, but for level: written under that mu (relaxed) and read
 * without it by the publishers as a hint, checked again under the lock.
 * bus_count is the bus's count of stages that shed (set at creation,
 * immutable; the count itself relaxed).  struct seda_fwd_seen is
 * lock-free, as said at it.
 */
#ifndef SEDA_SHED_H
#define SEDA_SHED_H

#include "drain_state.h"
#include "seda_int.h"

struct seda_stage_s;

struct seda_shed {
    int64_t target_ns;          /* 0: off */
    int64_t interval_ns;
    int64_t above_since;        /* first start above target with none
                                   below since (clock ns), or 0 */
    int64_t level_at;           /* when the level last rose (clock ns) */
    uint64_t low_offered;       /* low-priority publishes offered */
    uint64_t low_mark;          /* low_offered when above_since was set:
                                   none since, no low traffic to refuse
                                   first */
    int rearm;                  /* the level shedding had when it last
                                   ended: armed with it until
                                   rearm_until; 0: never shed */
    int64_t rearm_until;        /* (clock ns) */
    atomic_int *bus_count;      /* the bus's count of shedding stages */

    /* ---- the publishers' line ---- */
    _Alignas(64) atomic_int level;  /* 0, 1 (refuse low), 2 (and normal) */
};

/*
 * The stages this stage's handlers were seen to forward to
 * (seda_env_forward), each with when it last was: the door rule checks
 * them as it checks a slip, and forgets a target not forwarded to within
 * the bus's stats_window.  Lock-free: a slot's stage is swapped in with
 * release after its time is stored, and read with acquire; the times are
 * relaxed.  Stages live as long as their bus, so a pointer read here
 * stays good.  Duplicates are possible after a race and harmless.
 */
#define SEDA__FWD_SEEN 8
struct seda_fwd_seen {
    _Atomic(struct seda_stage_s *) to[SEDA__FWD_SEEN];
    _Atomic int64_t at[SEDA__FWD_SEEN];     /* clock ns; relaxed */
};

/* Shedding off, at the given target and interval (ns; target 0: off);
 * bus_count is the bus's count of stages that shed. */
SEDA__API void seda__shed_init(struct seda_shed *sh, int64_t target_ns,
                               int64_t interval_ns, atomic_int *bus_count);
SEDA__API void seda__shed_fwd_init(struct seda_fwd_seen *f);

/* The shedding level, relaxed (a hint without the stage's mu). */
static inline int seda__shed_level(struct seda_shed *sh)
{
    return atomic_load_explicit(&sh->level, memory_order_relaxed);
}

/* Set the shedding level (stage's mu held), keeping the bus's count of
 * stages that shed. */
SEDA__API void seda__shed_set(struct seda_shed *sh, int level);

/* Adaptive shedding (stage's mu held): a batch whose shortest wait in
 * the queue was `least` ns started at clock time now. */
SEDA__API void seda__shed_update(struct seda_shed *sh, int64_t least,
                                 int64_t now);

/* The shedding level now (stage's mu held): ended here when the queue
 * could not be slow (empty, or its backlog of depth envelopes under
 * target at the drain's recent handling time, dr, with concurrency
 * permits and pool_size workers). */
SEDA__API int seda__shed_level_now(struct seda_shed *sh,
                                   const struct seda_drain *dr,
                                   uint32_t depth, int concurrency,
                                   int pool_size);

/* Forward targets: the stage whose part f is forwarded to `to` (learned,
 * lock-free); and the targets seen within forget ns of now, into out (up
 * to SEDA__FWD_SEEN), returning how many. */
SEDA__API void seda__shed_fwd_learn(struct seda_fwd_seen *f,
                                    struct seda_stage_s *to);
SEDA__API int seda__shed_fwd_seen(struct seda_fwd_seen *f, int64_t now,
                                  int64_t forget,
                                  struct seda_stage_s **out);

#endif /* SEDA_SHED_H */
