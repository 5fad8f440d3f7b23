/* SPDX-License-Identifier: MIT */
/*
 * drain.h -- the drain task (drain.c): submitting one for a stage and
 * running it.  Its state on the stage, which the permits (permits.c) and
 * the stage's readers see too, is drain_state.h's.
 */
#ifndef SEDA_DRAIN_H
#define SEDA_DRAIN_H

#include "drain_state.h"
#include "seda_int.h"

struct seda_stage_s;

/* Submit a drain task for st (its permit already counted).  When the pool
 * is stopping the permit is given back (the bus sweeps the queue).  No
 * lock held. */
SEDA__API void seda__drain_schedule(struct seda_stage_s *st);

/* The drain task (a pool task; arg is the stage). */
SEDA__API void seda__drain_run(void *arg);

#endif /* SEDA_DRAIN_H */
