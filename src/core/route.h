/* SPDX-License-Identifier: MIT */
/*
 * route.h -- an envelope's fate after an attempt (route.c): the next hop,
 * a retry now or after its backoff, a dead letter, the sweep at stop.
 * What the layers beside the core call of it (seda__route_ack,
 * seda__route_dead_letter, the backoff, the hop target, the x-dead-*
 * headers) is declared in door.h; this header holds what only the core
 * calls.
 */
#ifndef SEDA_ROUTE_H
#define SEDA_ROUTE_H

#include "env.h"
#include "pool.h"
#include "seda_int.h"

struct seda_stage_s;

/*
 * Retry backoff (route.c): a stage's part.  Guarded by the stage's mu:
 * set when the stage is made and by seda_stage_tune_admission, read by
 * the nack path and the drain task.
 */
struct seda_retry {
    double backoff;             /* seconds; 0: retry at once */
    double max;                 /* max_backoff, seconds */
    double mult;                /* each next retry waits this much longer */
    bool jitter;                /* add up to half again */
    int delayed;                /* retries waiting out their backoff */
};

/* Set r from o's retry options (checked by the caller; the stage's mu
 * held, or the stage not yet shared).  Cannot fail. */
static inline void seda__route_retry_set(struct seda_retry *r,
                                         const seda_stage_opts *o)
{
    r->backoff = o->retry_backoff;
    r->max = o->retry_max_backoff;
    r->mult = o->retry_multiplier;
    r->jitter = o->retry_jitter;
}

/* Requeue a nacked envelope at the head, or dead-letter it when out of
 * attempts (no lock held).  Counts the nack. */
SEDA__API void seda__route_nack(struct seda_stage_s *st, seda_env_t *env);

/* Retry backoff (mu held): when st has a backoff, count env delayed and
 * set a timer that puts it back at the head when due (attempts already
 * raised for its next try); true.  A due time already set on env (a
 * durable stage journals it first: env.h's ext->due) is used as it is.
 * Without either, or when the timer cannot be set, false: the caller
 * requeues it at once. */
SEDA__API bool seda__route_retry_later(struct seda_stage_s *st,
                                       seda_env_t *env);

/* Put env back at the head (mu held). */
SEDA__API void seda__route_push_head(struct seda_stage_s *st,
                                     seda_env_t *env);

/* After the pool stopped: end a retry still waiting out its backoff as
 * dropped (swept).  A seda__pool_drop_timers callback; no lock held. */
SEDA__API void seda__route_drop_timer(seda__task_fn fn, void *arg,
                                      void *ud);

/* After the pool stopped: take everything left, count it dropped and end
 * it.  Returns how many envelopes were swept. */
SEDA__API int seda__route_sweep(struct seda_stage_s *st);

#endif /* SEDA_ROUTE_H */
