/* SPDX-License-Identifier: MIT */
/*
 * remote.h -- what the core asks of a remote stage: the interface through
 * which the core reaches the remote layer (src/remote/, NATS JetStream)
 * without including it.
 *
 * DESIGN
 *   The remote layer makes a remote stage with seda__bus_make_remote,
 *   which installs its table of functions and its context on the stage
 *   before the stage is registered (so no publish can miss them); both
 *   are then immutable.  The core calls through them at four points:
 *
 *   enter   an envelope is published, routed (a slip hop) or
 *           dead-lettered into a remote stage: instead of queueing it,
 *           the layer sends it to JetStream (seda__stage_enter).
 *   settle  a remote stage's drain task delivered an envelope the layer
 *           took in from JetStream: instead of routing the result here,
 *           the layer acks, naks (JetStream redelivers it, to any
 *           process) or terms it, routing the ack and dead letter on.
 *   idle    the bus's idle scan: a remote stage with messages awaiting
 *           JetStream's acknowledgement, or on_complete callbacks awaiting
 *           their itinerary, is busy.
 *   close   seda_bus_free, after the pool stopped and before the stages
 *           are freed.
 *
 *   So the dependency runs one way, remote -> core, like the durable
 *   store's (store.h).
 */
#ifndef SEDA_REMOTE_HOOKS_H
#define SEDA_REMOTE_HOOKS_H

#include "door.h"
#include "env.h"

struct seda_stage_s;
struct seda_bus_s;
struct stage_counters;

struct seda__remote_ops {
    /* Take env into remote stage st (hop: as seda__stage_admit).  Returns
     * 0 when taken (the layer ends env, and counts it), or a refusal
     * (SEDA_EUNAVAIL, SEDA_EFULL, SEDA_ETIMEDOUT, ...: the caller still
     * owns env).  May wait for room up to timeout seconds. */
    int (*enter)(struct seda_stage_s *st, seda_env_t *env, double timeout,
                 bool hop);
    /* A delivery's result (DR_* of store.h) on remote stage st; the layer
     * owns env from here.  Counts go to tally, as in route. */
    void (*settle)(struct seda_stage_s *st, seda_env_t *env, int res,
                   struct stage_counters *tally);
    /* False while st has work outside its queue; adds a progress count to
     * *sum (the idle scan compares two). */
    bool (*idle)(struct seda_stage_s *st, uint64_t *sum);
    /* Stop and free the layer's part of st (seda_bus_free). */
    void (*close)(struct seda_stage_s *st);
};

/* Make a remote stage in two steps, so that the layer can point its
 * context at the stage before anything can reach it: make checks o and
 * builds the stage with ops and ctx installed (0, SEDA_EINVAL or
 * SEDA_ENOMEM, err naming the stage and field; free an unregistered
 * stage with seda__stage_free); register adds it to the bus (0,
 * SEDA_EEXIST, SEDA_ECLOSED or SEDA_ENOMEM; on failure st is freed). */
SEDA__API int seda__bus_make_remote(struct seda_bus_s *b,
                                    const seda_stage_opts *o,
                                    const struct seda__remote_ops *ops,
                                    void *ctx, struct seda_stage_s **out,
                                    char *err, size_t errlen);
SEDA__API int seda__bus_register(struct seda_bus_s *b,
                                 struct seda_stage_s *st,
                                 struct seda_stage_s **out, char *err,
                                 size_t errlen);

/* Admit env into `to`, or hand it to the remote layer when `to` is a
 * remote stage.  As seda__stage_admit. */
SEDA__API int seda__stage_enter(struct seda_stage_s *to, seda_env_t *env,
                                double timeout, bool hop);

/* Counts the remote layer keeps on a stage (each takes st->mu):
 *   ACCEPTED   a publish into the remote stage (a first hop) was taken
 *   HANDED     an itinerary left this process for JetStream (stored there
 *              by a publish or a hop, or given back by a nak)
 *   LOST       one was given up (counted dropped: the stage's `dropped`
 *              and the bus's) */
enum { SEDA__REMOTE_ACCEPTED, SEDA__REMOTE_HANDED, SEDA__REMOTE_LOST };
SEDA__API void seda__stage_count_remote(struct seda_stage_s *st, int what);

#endif /* SEDA_REMOTE_HOOKS_H */
