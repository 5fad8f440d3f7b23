/* SPDX-License-Identifier: MIT */
/*
 * door.h -- the core as the layers beside it (durable, remote) see it:
 * functions over stages and buses, never their fields or their locks.
 *
 * DESIGN
 *   A stage's struct (stage.h) and the bus's (bus.h) are the core's own:
 *   the files that write a part of them include them, nobody else.  The
 *   durable store and the remote layer get opaque pointers and these
 *   functions, as Lua's auxiliary library gets lua.h and never lstate.h;
 *   `make layers` refuses any other core header in those layers (the
 *   rule is in src/layers).  What they give back to the core travels the
 *   other way, through the tables of store.h and remote.h.
 *
 *   Every function here may be called from any thread with no seda lock
 *   held, unless its comment says otherwise.
 */
#ifndef SEDA_DOOR_H
#define SEDA_DOOR_H

#include "env.h"
#include "tally.h"

struct seda_stage_s;
struct seda_bus_s;

/* ---- a stage's settings (immutable after creation unless noted) ---- */

SEDA__API struct seda_bus_s *seda__stage_bus(const struct seda_stage_s *st);
SEDA__API int seda__stage_durability(const struct seda_stage_s *st);
SEDA__API int seda__stage_dedup_window(const struct seda_stage_s *st);
/* The stage's own dead-letter stage name, or NULL (then the bus's). */
SEDA__API const char *seda__stage_dead_letter(const struct seda_stage_s *st);
SEDA__API double seda__stage_publish_timeout(const struct seda_stage_s *st);
/* Consumers added so far (acquire: their entries are visible). */
SEDA__API int seda__stage_consumer_count(const struct seda_stage_s *st);
/* The capacity now (tunable: a relaxed read of its mirror). */
SEDA__API int seda__stage_capacity(const struct seda_stage_s *st);
/* The remote layer's context of a remote stage (remote.h), or NULL. */
SEDA__API void *seda__stage_remote_ctx(const struct seda_stage_s *st);
SEDA__API bool seda__stage_is_remote(const struct seda_stage_s *st,
                                     const void *ops);

/* What a full stage answers a publisher that cannot queue into it, under
 * its policy (tunable, read under the stage lock): 0 to wait for room
 * (block), SEDA_EFULL (reject, and drop_oldest where nothing can be
 * evicted: a remote stage's window) or SEDA_EDROPPED (drop_newest).  A
 * refusal is counted dropped on the stage.  The one place the policy
 * switch lives beside the admission's own (stage.c). */
SEDA__API int seda__stage_full_answer(struct seda_stage_s *st);

/* The backoff before retry attempt `next` (>= 2), in ns, jitter drawn;
 * 0 without a retry option.  Takes the stage lock. */
SEDA__API int64_t seda__route_backoff_ns(struct seda_stage_s *st, int next);

/* ---- the bus ---- */

SEDA__API bool seda__bus_stopping(struct seda_bus_s *b);
SEDA__API const char *seda__bus_data_dir(const struct seda_bus_s *b);
SEDA__API bool seda__bus_sync_normal(const struct seda_bus_s *b);
SEDA__API double seda__bus_group_wait(const struct seda_bus_s *b);
SEDA__API const char *seda__bus_dead_letter_name(const struct seda_bus_s *b);

/* Whether HOP ("nats:<subject>") is one this program's own slips named
 * (a publish's slip or a forward: ownhops.h).  Any thread. */
SEDA__API bool seda__bus_own_hop(struct seda_bus_s *b, const char *hop);

/* Lookup by name through the current snapshot; lock-free. */
SEDA__API struct seda_stage_s *seda__bus_lookup(struct seda_bus_s *b,
                                                const char *name);

/* The stage named `name` that env (handled at st) goes to next: a lookup,
 * except that an envelope replayed from the journal (ENV_REPLAYED) whose
 * hop names no stage yet waits for that stage to be declared, until
 * hop_timeout after the latest replay began or the pool stops, with its
 * worker covered by a loan; the wait and a wait in vain are reported on
 * st.  Returns the stage or NULL.  Takes the bus lock while it waits. */
SEDA__API struct seda_stage_s *seda__route_hop_target(struct seda_stage_s *st,
                                                      seda_env_t *env,
                                                      const char *name);

/* A replay begins now: replayed envelopes may wait for undeclared hops
 * until hop_timeout from now. */
SEDA__API void seda__bus_replay_begins(struct seda_bus_s *b);

/* Wake whoever waits for the bus to go idle (a stage may have). */
SEDA__API void seda__bus_idle_notify(struct seda_bus_s *b);

/* Routing after a delivery, on the worker; st is the stage that handled
 * env.  Counts go to tally (the drain task folds it into the stage's
 * counters later) or, when tally is NULL, straight into st's. */
SEDA__API void seda__route_ack(struct seda_stage_s *st, seda_env_t *env,
                               struct stage_counters *tally);
SEDA__API void seda__route_dead_letter(struct seda_stage_s *st,
                                       seda_env_t *env, const char *reason,
                                       struct stage_counters *tally);
/* The same, naming the missing stage of a no_such_stage (x-dead-stage). */
SEDA__API void seda__route_dead_letter_to(struct seda_stage_s *st,
                                          seda_env_t *env, const char *reason,
                                          const char *missing,
                                          struct stage_counters *tally);

/* The x-dead-* headers a dead letter from st carries (bus.c): reason,
 * from, error (the last seda_env_fail message, when one), attempts, at
 * (wall-clock seconds at, written in UTC) and stage (the missing one of
 * a no_such_stage, when given), as name/value pairs ending in NULL in
 * d->kv; the values written here live in d.  The journal writes the same
 * set (durable.c). */
struct seda__dead_hdrs {
    const char *kv[13];
    char attempts[16];
    char at[40];
};
SEDA__API void seda__route_dead_hdrs(const struct seda_stage_s *st,
                                     const seda_env_t *env, const char *reason,
                                     const char *missing, double at,
                                     struct seda__dead_hdrs *d);

/* Deadline for a publish from the calling thread: the given one, capped
 * at hop_timeout when the caller is one of b's workers. */
SEDA__API int64_t seda__publish_deadline(struct seda_bus_s *b,
                                         double timeout);

/* ---- admission by the layers ---- */

/* Durable publishing in three steps: hold a slot (under the policy, like
 * an admission; env-less), then, once the journal committed, fill it; or
 * give it back. */
SEDA__API int seda__stage_reserve(struct seda_stage_s *st, double timeout);
SEDA__API void seda__stage_fill(struct seda_stage_s *st, seda_env_t *env);
/* seda__stage_fill of envs[0..n) in order, in one lock round (a group
 * commit's publishes: one drain task, not one per envelope). */
SEDA__API void seda__stage_fill_many(struct seda_stage_s *st,
                                     seda_env_t **envs, int n);
SEDA__API void seda__stage_unreserve(struct seda_stage_s *st);

/* Admit envs[0..n) in order with one lock round; returns how many were
 * admitted and sets *rc for the first refusal. */
SEDA__API int seda__stage_admit_many(struct seda_stage_s *st,
                                     seda_env_t **envs, int n,
                                     double timeout, int *rc);

/* Queue envs[0..n) at the head, in order, ahead of anything queued,
 * regardless of capacity (replay).  Counted accepted.  0 or SEDA_ENOMEM
 * (nothing queued). */
SEDA__API int seda__stage_requeue_front(struct seda_stage_s *st,
                                        seda_env_t **envs, int n);

/* Queue env (replayed, its ext->due set: a journaled retry not yet due)
 * on a timer for its due time, counted accepted and delayed.  0, or
 * SEDA_ECLOSED / SEDA_ENOMEM when no timer can be set (nothing done). */
SEDA__API int seda__route_requeue_later(struct seda_stage_s *st,
                                        seda_env_t *env);

/* Run st's admission check on env (no lock held); 0 when admitted or no
 * check is set, SEDA_ETYPE (counted in invalid, the reason in err) if
 * not.  A typed stage's `accepts`; the remote layer runs it on what it
 * takes in from other publishers. */
SEDA__API int seda__stage_check(struct seda_stage_s *st,
                                const seda_env_t *env, char *err,
                                size_t errlen);

/* Count one envelope dropped on st. */
SEDA__API void seda__stage_count_dropped(struct seda_stage_s *st);

/* Free a stage that was never registered (its queue is empty). */
SEDA__API void seda__stage_free(struct seda_stage_s *st);

#endif /* SEDA_DOOR_H */
