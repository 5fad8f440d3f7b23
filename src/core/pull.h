/* SPDX-License-Identifier: MIT */
/*
 * pull.h -- a pull stage's part (pull.c): its waiting receivers and its
 * outstanding leases.  receive.c, the public side, hands leases out and
 * settles them.
 *
 * Locking: every field is guarded by the stage's mu (guard, given at
 * init, is that lock, for assertions), but for ack_timeout_ns and guard,
 * immutable.  A lease's fields are guarded by the same lock, but for st,
 * recv_ts and deadline, immutable once it is handed out.
 */
#ifndef SEDA_PULL_H
#define SEDA_PULL_H

#include "env.h"
#include "seda_int.h"

struct seda_stage_s;

struct seda_lease_s {
    struct seda_lease_s *next;  /* the part's list; guarded */
    struct seda_lease_s *prev;  /* guarded */
    struct seda_stage_s *st;    /* immutable */
    seda_env_t *env;            /* NULL once expired; guarded */
    int64_t deadline;           /* monotonic ns; immutable */
    int64_t recv_ts;            /* clock ns at receive; immutable */
    struct seda__undo undo;     /* what the holder changed (a nack puts
                                   it back); guarded */
};

struct seda_pull {
    pthread_cond_t not_empty;   /* receivers wait here */
    int receivers;              /* receivers waiting; guarded */
    int leased;                 /* envelopes out on leases; guarded */
    int64_t ack_timeout_ns;     /* a lease's lifetime; immutable */
    seda__mutex_t *guard;       /* the stage's mu; immutable */
    struct seda_lease_s *leases;/* outstanding, oldest first; guarded */
    struct seda_lease_s *leases_tail; /* guarded */
};

/* 0 or SEDA_ENOMEM.  guard: the stage's mu, which guards the part. */
SEDA__API int seda__pull_init(struct seda_pull *p, int64_t ack_timeout_ns,
                              seda__mutex_t *guard);
SEDA__API void seda__pull_free(struct seda_pull *p);

/* Something was queued on a pull stage (guarded): wake one receiver, or
 * every one (all). */
SEDA__API void seda__pull_wake(struct seda_pull *p, bool all);

/* A receiver waits for a wake or until `until` (clock ns); mu is the
 * guard, held. */
SEDA__API void seda__pull_wait(struct seda_pull *p, seda__mutex_t *mu,
                               int64_t until);

/* until, or the oldest lease's deadline when that is sooner (guarded). */
SEDA__API int64_t seda__pull_next_expiry(const struct seda_pull *p,
                                         int64_t until);

/* Hand env out on lease l (its st and recv_ts set by the caller): its
 * deadline set, linked last, counted leased (guarded). */
SEDA__API void seda__pull_add(struct seda_pull *p, struct seda_lease_s *l,
                              seda_env_t *env);

/* Settle l (its env still set): unlinked, env cleared, no longer counted
 * (guarded). */
SEDA__API void seda__pull_drop(struct seda_pull *p, struct seda_lease_s *l);

/* Expire overdue leases (guarded); returns how many, their envelopes in
 * requeue[] for a nack, the holders' changes undone. */
SEDA__API int seda__pull_expire(struct seda_pull *p, int64_t now,
                                seda_env_t **requeue, int max);

/* At shutdown (guarded): take the oldest lease's envelope, its holder's
 * changes kept, or NULL when none is out. */
SEDA__API seda_env_t *seda__pull_take_oldest(struct seda_pull *p);

/* At shutdown (no lock held): end every lease's envelope, each counted
 * dropped (and it_lost unless counted dead) in c under mu (the stage's
 * counters and lock).  Returns how many. */
struct stage_counters;
SEDA__API int seda__pull_sweep(struct seda_pull *p, seda__mutex_t *mu,
                               struct stage_counters *c);

/* True when no lease is outstanding (guarded). */
static inline bool seda__pull_settled(const struct seda_pull *p)
{
    return p->leases == NULL;
}

#endif /* SEDA_PULL_H */
