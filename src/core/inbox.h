/* SPDX-License-Identifier: MIT */
/*
 * inbox.h -- the parts of a stage's queue (inbox.c) that admission
 * (stage.c) uses directly.  All but seda__inbox_store need st->mu held.
 */
#ifndef SEDA_INBOX_H
#define SEDA_INBOX_H

#include "stage.h"

/* A voided ticket's slot (see HOW IT WORKS in inbox.c); takers skip it. */
SEDA__API extern seda_env_t seda__tombstone_env;
#define TOMBSTONE (&seda__tombstone_env)

/* Fill ticket t's slot. */
static inline void seda__inbox_store(struct seda_stage_s *st, uint64_t t,
                               seda_env_t *env)
{
    SEDA__CHAOS();                      /* the "ticket, no envelope" window */
    /* Entering a line of slots (eight a line): ask for the next one now,
     * the taker cleared it last. */
    if ((t & 7) == 0)
        seda__prefetchw(&st->inbox[(t + 8) & st->inbox_mask]);
    /* Release: pairs with the acquire load in inbox_take (inbox.c). */
    atomic_store_explicit(&st->inbox[t & st->inbox_mask], env,
                          memory_order_release);
}

/* Keep held (q's count plus reservations) in step after q or reserved
 * changed (mu held). */
SEDA__API void seda__inbox_held_sync(struct seda_stage_s *st);

/* Clear the tombstones at the head of the inbox (mu held). */
SEDA__API void seda__inbox_skip_tombstones(struct seda_stage_s *st);

/* Append env at the tail, after everything queued (mu held, room under
 * the capacity already checked). */
SEDA__API void seda__inbox_append_locked(struct seda_stage_s *st,
                                         seda_env_t *env);

/* Take everything queued right now, up to n, waiting out publishers
 * mid-way (mu held; for sweeps and evictions). */
SEDA__API uint32_t seda__inbox_take_all(struct seda_stage_s *st,
                                        seda_env_t **out, uint32_t n);

/* Queue env (high or low priority) in its lane, allocating the lane on
 * first use (mu held, room under the capacity checked).  0 or
 * SEDA_ENOMEM (nothing queued). */
SEDA__API int seda__inbox_lane_push(struct seda_stage_s *st,
                                    seda_env_t *env);

/* Take the envelope drop_oldest evicts (mu held): without lanes the head
 * of the queue; with them the oldest low, else normal, else high, else a
 * head item.  NULL when only reservations are held. */
SEDA__API seda_env_t *seda__inbox_evict(struct seda_stage_s *st);

#endif /* SEDA_INBOX_H */
