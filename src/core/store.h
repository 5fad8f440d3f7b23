/* SPDX-License-Identifier: MIT */
/*
 * store.h -- what the core asks of a durable store: the interface through
 * which the core reaches the durable layer without including it.
 *
 * DESIGN
 *   The durable layer (src/durable/) implements the store: a journal that
 *   keeps a durable stage's envelopes across restarts.  It installs its
 *   table of functions on a bus when the journal opens (the first durable
 *   stage, or seda_bus_open_journal), once, with seda__bus_set_store; the
 *   core then calls through it for durable stages and for journaled
 *   envelopes (seda__env_jkey(env) != 0), both of which exist only after
 *   that.  So the dependency runs one way, durable -> core, and the data
 *   flows back through these pointers: admission and routing (core) ask
 *   the store to write before an envelope moves.
 */
#ifndef SEDA_STORE_H
#define SEDA_STORE_H

#include "door.h"
#include "env.h"

struct seda_stage_s;
struct seda_bus_s;

/* A drain batch's routing decisions (DR_* of tally.h) are written by the
 * store in one commit before any of them takes effect (deliver.c). */

struct seda__store_ops {
    /* Publish envs[0..n) into durable stage st: hold slots, write them in
     * one commit (dedup for exactly_once), then queue them.  Returns how
     * many were accepted, *rc the first refusal (SEDA_EDUP, SEDA_EIO, a
     * policy refusal).  Refused envelopes are freed. */
    int (*publish)(struct seda_stage_s *st, seda_env_t **envs, int n,
                   double timeout, int *rc);
    /* Publish env into durable stage st without waiting for the commit:
     * hold a slot, queue its row for the next group commit and return 0;
     * done(rc, ud) follows once, from the committing thread (0: committed
     * and queued; else the refusal, env freed).  A refusal before
     * queueing is returned (env freed, done not called). */
    int (*publish_async)(struct seda_stage_s *st, seda_env_t *env,
                         double timeout, seda_durable_fn done, void *ud);
    /* Write a durable stage's batch of decisions res[i] (DR_*) in one
     * commit; envelopes whose decision is written get ENV_JDONE. */
    void (*batch)(struct seda_stage_s *st, seda_env_t **envs,
                  const int *res, int n);
    /* Single steps for routing outside a batch: a row for env in durable
     * stage `to`; env's row moved from `from` to `to` (the first skip_slip
     * hops of its slip dropped); env's row deleted.  enter and move
     * return 0 or a negative code; all report failures on the stage. */
    int (*enter)(struct seda_stage_s *to, seda_env_t *env);
    /* A hop of env (no row) into durable stage `to` that does not wait
     * for the commit: hold a slot in `to` (waiting at most timeout), queue
     * env's row for the journal's next group and return 0; the committing
     * thread then queues env in `to` (a failed commit is reported as
     * enter's and env goes on without a row).  A refused slot is returned
     * with env untouched (the caller's, as after seda__stage_enter). */
    int (*enter_async)(struct seda_stage_s *to, seda_env_t *env,
                       double timeout);
    int (*move)(struct seda_stage_s *from, struct seda_stage_s *to,
                seda_env_t *env, int skip_slip);
    void (*forget)(struct seda_stage_s *st, seda_env_t *env);
    /* Whether every decision the store took without waiting for its
     * commit (a batch's acknowledgements) is committed: the bus is not
     * idle before (a process that exits once idle replays nothing it
     * finished); the store calls seda__bus_idle_notify when it gets
     * there.  Any thread. */
    bool (*settled)(void *store);
    /* Close the store (seda_bus_free, after the pool stopped). */
    void (*close)(void *store);
};

/* Install ops and its store on b, once (later calls with a store set
 * return the one set).  Takes b->mu.  Returns the store in use. */
SEDA__API void *seda__bus_set_store(struct seda_bus_s *b,
                                    const struct seda__store_ops *ops,
                                    void *store);

/* The bus's store and its ops (NULL before the journal opened).  Acquire:
 * pairs with the release in seda__bus_set_store. */
SEDA__API void *seda__bus_store(struct seda_bus_s *b);
SEDA__API const struct seda__store_ops *seda__bus_store_ops(
    struct seda_bus_s *b);

/* Shorthands for journaled envelopes (jkey != 0) and durable stages,
 * which exist only once a store is set; forget is a no-op for an
 * envelope without a row. */
SEDA__API void seda__bus_store_forget(struct seda_stage_s *st, seda_env_t *env);
SEDA__API int seda__bus_store_enter(struct seda_stage_s *to, seda_env_t *env);
SEDA__API int seda__bus_store_enter_async(struct seda_stage_s *to,
                                          seda_env_t *env, double timeout);
SEDA__API int seda__bus_store_move(struct seda_stage_s *from,
                                   struct seda_stage_s *to, seda_env_t *env,
                                   int skip_slip);

/* The layer above makes the stage (seda_stage_add is the durable layer's:
 * it opens the journal for a durable stage).  open_store, for a stage
 * whose options ask for durability, is called after the options were
 * checked and must install the store (0, or a negative code with err
 * naming the problem).  Otherwise as seda_stage_add. */
typedef int (*seda__open_store_fn)(struct seda_bus_s *b, char *err,
                                   size_t errlen);
SEDA__API int seda__bus_stage_add(struct seda_bus_s *b,
                                  const seda_stage_opts *o,
                                  seda_stage_t **out, char *err, size_t errlen,
                                  seda__open_store_fn open_store);

#endif /* SEDA_STORE_H */
