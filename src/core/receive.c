/* SPDX-License-Identifier: MIT */
/*
 * receive.c -- the pull model's public side: receivers take envelopes
 * from a pull stage (seda_stage_receive) and settle them with ack or nack;
 * and the leases swept at shutdown.  The leases themselves are pull.c's
 * part of the stage.
 *
 * DESIGN
 *   A pull stage has no consumers and never schedules drain tasks; publish
 *   only queues and wakes a waiting receiver.  seda_stage_receive pops the
 *   head under the stage lock and hands out a lease: a small struct, owned
 *   by the receiver, linked into the stage's list of outstanding leases
 *   (pull.c).
 *
 *   The envelope stays the stage's while leased.  The receiver reaches it
 *   only through seda_lease_env (which takes the stage lock and returns
 *   NULL once the lease expired), so expiry can take the envelope back
 *   without racing a reader.  Expiry is lazy: receive, idle checks and
 *   stats call seda__pull_expire and nack what it hands back (retry at the
 *   head, or dead letter).  A late ack or nack finds the pointer cleared
 *   and returns SEDA_ETIMEDOUT.  At shutdown every outstanding lease is
 *   swept the same way and its envelope counted dropped (seda__pull_sweep,
 *   pull.c).
 */
#include <stdio.h>
#include <string.h>

#include "bus.h"
#include "stage.h"

/* How long a receive on a worker waits before it looks again at what its
 * wait holds up (STARVE_CHECK_NS), and the longest slice of its wait. */
#define STARVE_CHECK_NS 500000000
#define STARVE_SLICE_NS 250000000

/* A handler waits in a receive while calls suspended on its worker's
 * state are ready to resume: they wait until it returns (a resumed call
 * runs only on its own state, so no loan can take it). */
static void report_pinned(struct seda_stage_s *st)
{
    const seda_env_t *cur = seda__env_delivering();
    const struct seda_stage_s *from = cur ? cur->at : NULL;
    char msg[384];
    snprintf(msg, sizeof msg, "a worker%s%s%s waits in receive here while "
             "calls suspended on its state (seda.sleep, seda.http, a "
             "socket) are ready to resume: they wait until it returns; "
             "receive with a short timeout and seda.sleep between tries",
             from ? " of stage '" : "", from ? from->name : "",
             from ? "'" : "");
    seda_stage_report(st, msg);
}

/* A handler waits in a receive with every loan in use: the stages that
 * need a worker wait until it returns.  Say so, as a publish's wait does
 * (reported on the stage received from; rate-limited there). */
static void report_uncovered(struct seda_stage_s *st, struct seda_pool *p)
{
    int lent = 0, peak = 0, max = 0;
    uint64_t loans = 0;
    seda__pool_loan_stats(p, &lent, &loans, &peak, &max);
    const seda_env_t *cur = seda__env_delivering();
    const struct seda_stage_s *from = cur ? cur->at : NULL;
    char msg[320];
    snprintf(msg, sizeof msg, "a worker%s%s%s waits in receive here with "
             "loans exhausted (%d of max_loans %d in use): stages that need "
             "a worker wait until it returns; raise max_loans or workers",
             from ? " of stage '" : "", from ? from->name : "",
             from ? "'" : "", lent, max);
    seda_stage_report(st, msg);
}

int seda_stage_receive(seda_stage_t *st, double timeout, seda_lease_t **out)
{
    if (!st->pull)
        return SEDA_EINVAL;
    struct seda_bus_s *b = st->bus;
    struct seda_lease_s *l = seda__calloc(1, sizeof *l);
    if (!l)
        return SEDA_ENOMEM;
    int64_t deadline = seda__deadline(timeout);
    seda_env_t *requeue[16];
    int rc = 0;
    bool on_pool = seda__pool_current_owner() != NULL;
    struct seda_pool *loaned = NULL;    /* the wait is a managed block */
    bool reported = false;              /* what it holds up was said */
    int64_t check_at = 0;               /* when to look at that again */
    seda__mutex_lock(&st->mu);
    for (;;) {
        int nre = seda__pull_expire(&st->pl, seda__now_ns(), requeue,
                                    16);
        if (nre > 0) {
            /* Expired leases count as nacks; settle them unlocked. */
            seda__mutex_unlock(&st->mu);
            for (int i = 0; i < nre; i++)
                seda__route_nack(st, requeue[i]);
            seda__mutex_lock(&st->mu);
            continue;
        }
        if (atomic_load_explicit(&b->stopping, memory_order_acquire)) {
            rc = SEDA_ECLOSED;
            break;
        }
        if (seda__stage_depth(st) > 0)
            break;
        if (seda__now_ns() >= deadline) {
            rc = SEDA_ETIMEDOUT;
            break;
        }
        if (on_pool && !loaned) {
            /* A worker (a handler waiting on a pull stage) is about to
             * wait: the pool lends a thread meanwhile (managed blocking),
             * so the stages feeding this one keep draining. */
            seda__mutex_unlock(&st->mu);
            loaned = seda__pool_loan_block_begin();
            if (loaned && seda__pool_loan_exhausted(loaned)) {
                report_uncovered(st, loaned);
                reported = true;
            }
            check_at = seda__now_ns() + STARVE_CHECK_NS;
            seda__mutex_lock(&st->mu);
            on_pool = loaned != NULL;
            continue;
        }
        if (loaned && !reported && seda__now_ns() >= check_at) {
            /* Waited a while: say what the wait holds up, if anything
             * (loans used up since it began, or calls pinned to this
             * worker's state), within a second, not when it times out. */
            seda__mutex_unlock(&st->mu);
            if (seda__pool_loan_exhausted(loaned)) {
                report_uncovered(st, loaned);
                reported = true;
            } else if (seda__pool_self_mail()) {
                report_pinned(st);
                reported = true;
            }
            check_at = seda__now_ns() + STARVE_CHECK_NS;
            seda__mutex_lock(&st->mu);
            continue;
        }
        /* Wake for the oldest lease's expiry too, and, on a worker, to
         * look at what the wait holds up. */
        int64_t until = seda__pull_next_expiry(&st->pl, deadline);
        if (loaned && !reported && seda__now_ns() + STARVE_SLICE_NS < until)
            until = seda__now_ns() + STARVE_SLICE_NS;
        seda__pull_wait(&st->pl, &st->mu, until);
    }
    if (rc) {
        seda__mutex_unlock(&st->mu);
        seda__pool_loan_block_end(loaned);
        seda__free(l);
        return rc;
    }
    seda_env_t *env = NULL;
    seda__inbox_take(&st->in, &env, 1);
    if (!env) {                         /* a publisher is mid-way */
        seda__mutex_unlock(&st->mu);
        seda__pool_loan_block_end(loaned);
        seda__free(l);
        return seda_stage_receive(st, timeout, out);
    }
    if (st->adm.waiters > 0)
        pthread_cond_broadcast(&st->adm.not_full);
    l->recv_ts = seda__clock_ns();
    seda__stats_latency_one(&st->stats, l->recv_ts > env->enq_ts
                                            ? l->recv_ts - env->enq_ts : 0,
                            -1);
    l->st = st;
    seda__pull_add(&st->pl, l, env);
    seda__mutex_unlock(&st->mu);
    seda__pool_loan_block_end(loaned);
    *out = l;
    return 0;
}

seda_env_t *seda_lease_env(seda_lease_t *l)
{
    seda__mutex_lock(&l->st->mu);
    if (!l->env) {
        seda__mutex_unlock(&l->st->mu);
        return NULL;
    }
    /* Changes made until release_env are recorded in the lease. */
    seda__env_undo_track(l->env, &l->undo);
    return l->env;
}

void seda_lease_release_env(seda_lease_t *l)
{
    seda__env_undo_track(NULL, NULL);
    seda__mutex_unlock(&l->st->mu);
}

/* Take the envelope back from the lease and free the lease.  Returns
 * NULL when an expiry already took it; sets *late when the lease is past
 * its deadline though nothing had noticed yet (the envelope is then the
 * caller's to nack, as an expiry would: a late settle is refused the same
 * whether or not a receive or stats call came first). */
static seda_env_t *settle(seda_lease_t *l, bool ack, bool *late)
{
    struct seda_stage_s *st = l->st;
    seda__mutex_lock(&st->mu);
    seda_env_t *env = l->env;
    *late = false;
    if (env) {
        seda__pull_drop(&st->pl, l);
        *late = seda__now_ns() >= l->deadline;
        /* A nack (a late ack is one) discards the holder's changes. */
        seda__env_undo_finish(env, &l->undo, ack && !*late);
        int64_t now = seda__clock_ns();
        seda__stats_latency_one(&st->stats, -1,
                                now > l->recv_ts ? now - l->recv_ts : 0);
    }
    seda__mutex_unlock(&st->mu);
    seda__free(l);
    return env;
}

int seda_lease_ack(seda_lease_t *l)
{
    struct seda_stage_s *st = l->st;
    bool late;
    seda_env_t *env = settle(l, true, &late);
    if (!env)
        return SEDA_ETIMEDOUT;
    if (late) {
        seda__route_nack(st, env);
        return SEDA_ETIMEDOUT;
    }
    struct stage_counters tally = { 0 };
    tally.delivered = 1;
    seda__route_ack(st, env, &tally);
    seda__mutex_lock(&st->mu);
    seda__stats_fold(&st->stats.c, &tally);
    seda__mutex_unlock(&st->mu);
    return 0;
}

int seda_lease_nack(seda_lease_t *l)
{
    struct seda_stage_s *st = l->st;
    bool late;
    seda_env_t *env = settle(l, false, &late);
    if (!env)
        return SEDA_ETIMEDOUT;
    seda__route_nack(st, env);
    return late ? SEDA_ETIMEDOUT : 0;
}
