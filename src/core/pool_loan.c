/* SPDX-License-Identifier: MIT */
/*
 * pool_loan.c -- managed blocking: the loans of threads to waits that
 * hold a worker (seda__pool_loan_block_begin/end), the loan threads' slots,
 * spares and retirement, and a loan thread's lazy worker data.  See
 * pool.c's DESIGN; the fields are struct seda_pool's (pool_int.h),
 * guarded as it says.
 */
#include "pool_int.h"

/* A loan thread whose loan ended waits as a spare (mu held) until it is
 * lent again (true), or LOAN_KEEP_NS pass or the pool stops (false: it
 * exits). */
bool loan_retire(struct seda_pool *p, struct seda_worker_s *w)
{
    p->lent--;
    w->spare = true;
    p->spares[p->nspare++] = w;
    int64_t until = seda__now_ns() + LOAN_KEEP_NS;
    while (w->spare &&
           !atomic_load_explicit(&p->stopping, memory_order_acquire) &&
           seda__cond_wait(&w->cv, &p->mu, until) != ETIMEDOUT)
        ;
    if (!w->spare)
        return true;                    /* lent again: lent counts it */
    for (int i = 0; i < p->nspare; i++) {
        if (p->spares[i] == w) {
            p->spares[i] = p->spares[--p->nspare];
            break;
        }
    }
    w->spare = false;
    return false;
}

/* Make room for max loan slots (mu held).  0 or SEDA_ENOMEM. */
int slots_grow(struct seda_pool *p, int max)
{
    if (max <= p->nslots)
        return 0;
    struct loan_slot *sl = seda__realloc(p->slots, sizeof *sl * (size_t)max);
    if (!sl)
        return SEDA_ENOMEM;
    p->slots = sl;
    memset(&sl[p->nslots], 0, sizeof *sl * (size_t)(max - p->nslots));
    struct seda_worker_s **sp = seda__realloc(p->spares, sizeof *sp * (size_t)max);
    if (!sp)
        return SEDA_ENOMEM;
    p->spares = sp;
    p->nslots = max;
    return 0;
}

/* Count a loan started (mu held). */
static void lend(struct seda_pool *p)
{
    p->lent++;
    p->loans++;
    if (p->lent > p->lent_peak)
        p->lent_peak = p->lent;
}

/* Start a loan thread in slot k, reserved (busy) and counted in lent by
 * the caller.  loan_mu held, mu not held.  On failure the loan is undone
 * (the waiter goes on without one, as with max_loans reached). */
static void loan_start(struct seda_pool *p, int k)
{
    seda__mutex_lock(&p->mu);
    bool stop = atomic_load_explicit(&p->stopping, memory_order_acquire);
    bool join = p->slots[k].joinable;
    pthread_t old = p->slots[k].tid;
    p->slots[k].joinable = false;
    seda__mutex_unlock(&p->mu);
    if (join)
        pthread_join(old, NULL);        /* it exited: quick */
    struct seda_worker_s *w = stop ? NULL : seda__calloc(1, sizeof *w);
    pthread_t tid;
    if (w && seda__cond_init(&w->cv) == 0) {
        w->pool = p;
        w->index = SEDA_LOAN_INDEX0 + k;
        w->slot = k;
        if (pthread_create(&tid, NULL, worker_main, w) == 0) {
            seda__mutex_lock(&p->mu);
            p->slots[k].tid = tid;
            p->slots[k].joinable = true;
            seda__mutex_unlock(&p->mu);
            return;
        }
        pthread_cond_destroy(&w->cv);
    }
    seda__free(w);
    seda__mutex_lock(&p->mu);
    p->slots[k].busy = false;
    p->lent--;
    p->loans--;
    seda__mutex_unlock(&p->mu);
}

struct seda_pool *seda__pool_loan_block_begin(void)
{
    if (!tls_worker)
        return NULL;
    struct seda_pool *p = tls_worker->pool;
    int k = -1;
    seda__mutex_lock(&p->mu);
    if (atomic_load_explicit(&p->stopping, memory_order_acquire)) {
        seda__mutex_unlock(&p->mu);
        return NULL;
    }
    p->blocked++;
    /* The caller will not come back for the tasks it queued: a sleeper
     * takes them. */
    if (p->idle > 0 &&
        p->count > (uint32_t)atomic_load_explicit(&p->spinning,
                                                  memory_order_relaxed))
        wake_one(p);
    if (p->lent < p->blocked && p->lent < p->max_loans) {
        if (p->nspare > 0) {
            struct seda_worker_s *w = p->spares[--p->nspare];
            w->spare = false;
            pthread_cond_signal(&w->cv);
            lend(p);
        } else {
            for (int i = 0; i < p->nslots && i < p->max_loans; i++) {
                if (!p->slots[i].busy) {
                    k = i;
                    break;
                }
            }
            if (k >= 0) {
                p->slots[k].busy = true;
                lend(p);
            }
        }
    }
    if (p->lent < p->blocked)
        p->uncovered++;                 /* this wait holds a worker */
    seda__mutex_unlock(&p->mu);
    if (k >= 0) {
        seda__mutex_lock(&p->loan_mu);
        loan_start(p, k);
        seda__mutex_unlock(&p->loan_mu);
    }
    if (tls_block_depth++ == 0)
        tls_block_t0 = seda__clock_ns();
    return p;
}

int64_t seda__pool_loan_blocked_take(void)
{
    int64_t ns = tls_blocked_ns;
    tls_blocked_ns = 0;
    return ns;
}

bool seda__pool_loan_in_block(void)
{
    return tls_block_depth > 0;
}

void seda__pool_loan_block_end(struct seda_pool *p)
{
    if (!p)
        return;
    if (tls_block_depth > 0 && --tls_block_depth == 0)
        tls_blocked_ns += seda__clock_ns() - tls_block_t0;
    seda__mutex_lock(&p->mu);
    p->blocked--;
    if (loan_excess(p) && p->poller && p->poller->slot >= 0)
        kick(p);                /* a loan thread waits for readiness */
    if (loan_excess(p)) {
        /* A loan thread asleep on the idle stack retires now; one that is
         * running retires when its task returns. */
        for (int i = p->idle - 1; i >= 0; i--) {
            struct seda_worker_s *w = p->parked[i];
            if (w->slot >= 0) {
                unpark(p, w);
                pthread_cond_signal(&w->cv);
                break;
            }
        }
    }
    seda__mutex_unlock(&p->mu);
}

uint64_t seda__pool_loan_uncovered(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    uint64_t n = p->uncovered;
    seda__mutex_unlock(&p->mu);
    return n;
}

void seda__pool_loan_stats(struct seda_pool *p, int *lent, uint64_t *loans,
                           int *peak, int *max_loans)
{
    seda__mutex_lock(&p->mu);
    *lent = p->lent;
    *loans = p->loans;
    *peak = p->lent_peak;
    *max_loans = p->max_loans;
    seda__mutex_unlock(&p->mu);
}

bool seda__pool_loan_exhausted(struct seda_pool *p)
{
    seda__mutex_lock(&p->mu);
    bool out = p->lent >= p->max_loans && p->blocked > p->lent;
    seda__mutex_unlock(&p->mu);
    return out;
}

void *seda_block_begin(void)
{
    return seda__pool_loan_block_begin();
}

void seda_block_end(void *token)
{
    seda__pool_loan_block_end(token);
}

void *seda_worker_data(void)
{
    struct seda_worker_s *w = tls_worker;
    if (SEDA__UNLIKELY(w && !tls_data_set)) {
        /* A loan thread's first use: the data its slot kept, else new. */
        struct seda_pool *p = w->pool;
        struct loan_slot *ls;
        seda__mutex_lock(&p->mu);
        ls = &p->slots[w->slot];
        bool kept = ls->has_data;
        if (kept) {
            tls_data = ls->data;
            ls->has_data = false;
            ls->data = NULL;
        }
        seda__mutex_unlock(&p->mu);
        if (!kept)
            tls_data = p->start ? p->start(w->index, p->ud) : NULL;
        tls_data_set = true;
    }
    return tls_data;
}
