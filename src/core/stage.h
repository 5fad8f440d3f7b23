/* SPDX-License-Identifier: MIT */
/*
 * stage.h -- a stage: a bounded queue with an admission policy, permits
 * for drain tasks, and consumers.  The struct is a house of parts, each
 * written by the file that owns it:
 *
 *   in      the queue (inbox.c, a leaf: struct seda_inbox)
 *   adm     admission: capacity, policy (admission.c, a leaf: struct
 *           seda_admission; the paths a publish takes are stage.c's)
 *   shed    adaptive shedding and forward targets (shed.c, a leaf:
 *           struct seda_shed, struct seda_fwd_seen)
 *   rt      retry backoff and the retries waiting it out (route.c)
 *   task    the drain task's permits and handling time (drain.c; the
 *           one door to it: others read it through drain_state.h's
 *           functions)
 *   cons    the consumers (deliver.c)
 *   pl      a pull stage's receivers and leases (pull.c)
 *   stats   counters, histograms, rate, recent errors (stats.c)
 *   taps    live taps (tap.c)
 *
 * and the settings every part reads, fixed at creation (stage_new.c).
 * Only core files include this header; the layers beside the core reach a
 * stage through door.h.
 *
 * Locking:
 *   mu guards the guarded fields of adm, shed, rt, in, task, pl and
 *   stats.c (each part's header lists them).  Takers of envelopes (drain tasks,
 *   evictions, sweeps, receivers) always hold it, so the inbox has one
 *   consumer at a time.
 *   Immutable after seda__stage_new: bus, mem, name, dead_letter,
 *   delivery, max_attempts, publish_timeout, handler_timeout, index,
 *   pull, durable, dedup_window, remote_ops, remote.
 *   Atomic: userdata, check, check_ud (release/acquire); the parts'
 *   atomics as their headers say.
 *   Lock order: bus->mu -> stage->mu -> pool->mu -> bus->idle_mu; the
 *   stats' leaf locks last, never two of them at once.  A drain task never
 *   holds its own stage lock while pushing into another stage.
 */
#ifndef SEDA_STAGE_H
#define SEDA_STAGE_H

#include "admission.h"
#include "deliver.h"
#include "door.h"
#include "drain.h"
#include "env.h"
#include "inbox.h"
#include "permits.h"
#include "pool.h"
#include "pull.h"
#include "route.h"
#include "remote.h"
#include "seda_int.h"
#include "shed.h"
#include "stats.h"
#include "tap.h"
#include "store.h"

struct seda_bus_s;

struct seda_stage_s {
    struct seda_bus_s *bus;
    void *mem;                  /* the allocation (st is aligned within it
                                   to a cache line) */
    char name[SEDA_NAME_MAX + 1];
    char *dead_letter;          /* owned, or NULL */
    int delivery;               /* enum seda_delivery */
    int max_attempts;
    double publish_timeout;     /* seconds */
    double handler_timeout;     /* seconds, 0 = none */
    int index;                  /* creation order */
    bool pull;                  /* receivers, not consumers */
    int durable;                /* enum seda_durability */
    int dedup_window;           /* exactly_once */
    const struct seda__remote_ops *remote_ops; /* a remote stage's layer
                                   (remote.h), or NULL */
    void *remote;               /* its context */
    _Atomic(void *) userdata;   /* release/acquire */
    _Atomic(seda_check_fn) check; /* admission check; release/acquire */
    _Atomic(void *) check_ud;   /* its argument; stored before check */
    int64_t hold_warn_ns;       /* the bus's (deliver.c); immutable */

    struct seda_consumers cons; /* deliver.c */

    /* What the drain tasks write, from here on, is kept off the lines
     * above, which publishers read on every publish. */
    _Alignas(64) seda__mutex_t mu;
    struct seda_admission adm;  /* stage.c */
    struct seda_shed shed;      /* shed.c */
    struct seda_retry rt;       /* route.c */
    struct seda_inbox in;       /* inbox.c */
    struct seda_drain task;     /* drain.c */
    struct seda_pull pl;        /* pull.c */
    struct seda_stats stats;    /* stats.c */
    struct seda_taps taps;      /* tap.c */
    /* Long holds (deliver.c): consumer calls that held their worker
     * longer than hold_warn_ns outside seda's own waits.  Relaxed: a
     * count, and the clock of the last warning on the log + 1 (0: none
     * yet; a CAS picks the one thread that warns), written only when a
     * call was that long. */
    atomic_uint_least64_t long_holds;
    atomic_int_least64_t hold_warned;
    struct seda_fwd_seen fwd;   /* shed.c; atomics as said in shed.h */
};

/* ---- making (stage_new.c) ---- */

/* Create a stage object (not yet registered).  Validates opts; on failure
 * writes a message naming the stage and field into err.  Returns 0 or
 * SEDA_EINVAL / SEDA_ENOMEM. */
SEDA__API int seda__stage_new(struct seda_bus_s *bus,
                              const seda_stage_opts *o,
                              struct seda_stage_s **out, char *err,
                              size_t errlen);

/* ---- admission (stage.c) ---- */

/* Admit env into st under its policy.  hop: the envelope is already
 * accepted (a slip hop or a dead letter), so the bus's pause and close do
 * not apply and the itinerary is not counted again.  On 0 the stage owns
 * env; otherwise the caller still does.  Under the block policy waits up
 * to timeout seconds (< 0: forever), capped at the bus's hop_timeout on
 * its workers; the deadline is only computed when a wait is needed.
 * Takes st->mu, then maybe pool->mu. */
SEDA__API int seda__stage_admit(struct seda_stage_s *st, seda_env_t *env,
                                double timeout, bool hop);

/* seda__stage_check is in door.h (the remote layer checks at intake). */

/* Shedding at the door (SPEC.md section 13, stage.c): SEDA_ESHED when
 * st is shedding at priority prio (counted in st's shed_for), else 0;
 * and the refusal counted at the stage the itinerary was offered to
 * (shed, dropped).  No lock held; they take st->mu. */
SEDA__API int seda__stage_shed_door(struct seda_stage_s *st, int prio);
SEDA__API void seda__stage_shed_count(struct seda_stage_s *st);

/* Wake every publisher and receiver blocked on st (close and stop). */
SEDA__API void seda__stage_wake(struct seda_stage_s *st);

/* Idle check for the bus: true when nothing is queued or scheduled; adds
 * the stage's progress count to *sum. */
SEDA__API bool seda__stage_idle(struct seda_stage_s *st, uint64_t *sum);

/* Queued envelopes, not counting held reservations (mu held). */
static inline uint32_t seda__stage_depth(struct seda_stage_s *st)
{
    SEDA__ASSERT_HELD(&st->mu);
    return seda__inbox_depth(&st->in);
}

#endif /* SEDA_STAGE_H */
