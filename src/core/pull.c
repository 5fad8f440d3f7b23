/* SPDX-License-Identifier: MIT */
/*
 * pull.c -- a pull stage's part: its waiting receivers and its list of
 * outstanding leases, oldest first, so expiry looks at the head only.
 * A part: it sees struct seda_pull and the envelope, never the stage
 * (receive.c is the public side, seda_stage_receive and the leases'
 * ack and nack).  Every function here runs under the stage's mu, the
 * guard the part was made with.
 */
#include "env.h"
#include "pull.h"
#include "seda_int.h"
#include "tally.h"

int seda__pull_init(struct seda_pull *p, int64_t ack_timeout_ns,
                    seda__mutex_t *guard)
{
    if (seda__cond_init(&p->not_empty))
        return SEDA_ENOMEM;
    p->ack_timeout_ns = ack_timeout_ns;
    p->guard = guard;
    return 0;
}

void seda__pull_free(struct seda_pull *p)
{
    pthread_cond_destroy(&p->not_empty);
}

void seda__pull_wake(struct seda_pull *p, bool all)
{
    if (all)
        pthread_cond_broadcast(&p->not_empty);
    else if (p->receivers > 0)
        pthread_cond_signal(&p->not_empty);
}

void seda__pull_wait(struct seda_pull *p, seda__mutex_t *mu, int64_t until)
{
    p->receivers++;
    seda__cond_wait(&p->not_empty, mu, until);
    p->receivers--;
}

int64_t seda__pull_next_expiry(const struct seda_pull *p, int64_t until)
{
    if (p->leases && p->leases->deadline < until)
        until = p->leases->deadline;
    return until;
}

static void unlink_lease(struct seda_pull *p, struct seda_lease_s *l)
{
    SEDA__ASSERT_HELD(p->guard);
    if (l->prev)
        l->prev->next = l->next;
    else
        p->leases = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        p->leases_tail = l->prev;
    l->next = l->prev = NULL;
}

void seda__pull_add(struct seda_pull *p, struct seda_lease_s *l,
                    seda_env_t *env)
{
    SEDA__ASSERT_HELD(p->guard);
    p->leased++;
    l->env = env;
    l->deadline = seda__now_ns() + p->ack_timeout_ns;
    l->prev = p->leases_tail;
    if (p->leases_tail)
        p->leases_tail->next = l;
    else
        p->leases = l;
    p->leases_tail = l;
}

void seda__pull_drop(struct seda_pull *p, struct seda_lease_s *l)
{
    unlink_lease(p, l);
    l->env = NULL;
    p->leased--;
}

int seda__pull_expire(struct seda_pull *p, int64_t now,
                      seda_env_t **requeue, int max)
{
    SEDA__ASSERT_HELD(p->guard);
    int n = 0;
    while (n < max && p->leases && p->leases->deadline <= now) {
        struct seda_lease_s *l = p->leases;
        unlink_lease(p, l);
        /* An expiry is a nack: the holder's changes are undone. */
        seda__env_undo_finish(l->env, &l->undo, false);
        requeue[n++] = l->env;
        l->env = NULL;
        p->leased--;
    }
    return n;
}

seda_env_t *seda__pull_take_oldest(struct seda_pull *p)
{
    struct seda_lease_s *l = p->leases;
    seda_env_t *env = NULL;
    if (l) {
        unlink_lease(p, l);
        env = l->env;
        l->env = NULL;
        seda__env_undo_finish(env, &l->undo, true);     /* frees it */
        p->leased--;
    }
    return env;
}

int seda__pull_sweep(struct seda_pull *p, seda__mutex_t *mu,
                     struct stage_counters *c)
{
    int swept = 0;
    for (;;) {
        seda__mutex_lock(mu);
        seda_env_t *env = seda__pull_take_oldest(p);
        if (env) {
            c->dropped++;
            if (!(env->flags & ENV_DEAD))
                c->it_lost++;
        }
        seda__mutex_unlock(mu);
        if (!env)
            return swept;
        seda__env_end_dropped(env);
        swept++;
    }
}
