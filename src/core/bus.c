/* SPDX-License-Identifier: MIT */
/*
 * bus.c -- the bus: stage registry, lifecycle, idleness, stats (publishing
 * is publish.c, an envelope's routing after an attempt route.c).
 *
 * DESIGN
 *   Registry: stages are found by name through an immutable hash snapshot
 *   read with one acquire load, so publish and hop routing take no bus-wide
 *   lock.  Adding a stage (rare) builds a new snapshot under bus->mu and
 *   publishes it with a release store; old snapshots stay allocated until
 *   seda_bus_free.
 *
 *   Accounting: every counter lives on a stage, under its lock; the bus
 *   totals are sums, so at a quiet moment
 *       accepted == completed + dead_lettered + dropped + in_system.
 *
 *   Idleness: a stage is idle when its queue is empty and no drain task is
 *   scheduled.  The bus is idle when two consecutive scans find every stage
 *   idle and the same total of admissions (any hop between the scans bumps
 *   it).  Drain tasks that leave their stage idle bump idle_gen under
 *   idle_mu and broadcast idle_cv, so waiters sleep instead of polling.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bus.h"

/* ---- options ---- */

void seda_bus_opts_init(seda_bus_opts *o)
{
    memset(o, 0, sizeof *o);
    o->workers = 0;
    o->batch = 32;
    o->hop_timeout = 5.0;
    o->max_loans = 0;
}

void seda_stage_opts_init(seda_stage_opts *o)
{
    memset(o, 0, sizeof *o);
    o->capacity = 1024;
    o->concurrency = 1;
    o->delivery = SEDA_DELIVERY_P2P;
    o->policy = SEDA_POLICY_BLOCK;
    o->max_attempts = 1;
    o->publish_timeout = 30.0;
    o->handler_timeout = 0;
    o->pull = false;
    o->ack_timeout = 30.0;
    o->durable = SEDA_MEMORY;
    o->dedup_window = 100000;
    o->starve_after = 1.0;
    o->shed_target = 0;
    o->shed_interval = 0.1;
    o->retry_backoff = 0;
    o->retry_max_backoff = 1.0;
    o->retry_multiplier = 2.0;
    o->retry_jitter = true;
}

void seda_publish_opts_init(seda_publish_opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout = -1;
}

/* ---- registry ---- */

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;               /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static struct registry *registry_build(const struct registry *old,
                                       struct seda_stage_s *add)
{
    int n = (old ? old->n : 0) + (add ? 1 : 0);
    uint32_t size = 8;
    while (size < (uint32_t)n * 2)
        size <<= 1;
    struct registry *r = seda__calloc(1, sizeof *r +
                                      sizeof r->list[0] * (size_t)n);
    if (!r)
        return NULL;
    r->slot = seda__calloc(size, sizeof *r->slot);
    if (!r->slot) {
        seda__free(r);
        return NULL;
    }
    r->mask = size - 1;
    r->n = n;
    for (int i = 0; i < n; i++) {
        struct seda_stage_s *st = old && i < old->n ? old->list[i] : add;
        r->list[i] = st;
        uint32_t h = hash_name(st->name) & r->mask;
        while (r->slot[h])
            h = (h + 1) & r->mask;
        r->slot[h] = st;
    }
    return r;
}

static void registry_free(struct registry *r)
{
    while (r) {
        struct registry *prev = r->prev;
        seda__free(r->slot);
        seda__free(r);
        r = prev;
    }
}

struct seda_stage_s *seda__bus_lookup(struct seda_bus_s *b, const char *name)
{
    /* Acquire: pairs with the release store in seda_stage_add; the stage
     * behind the pointer is fully built. */
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    uint32_t h = hash_name(name) & r->mask;
    for (struct seda_stage_s *st; (st = r->slot[h]); h = (h + 1) & r->mask)
        if (strcmp(st->name, name) == 0)
            return st;
    return NULL;
}

seda_stage_t *seda_bus_stage(seda_bus_t *b, const char *name)
{
    return name ? seda__bus_lookup(b, name) : NULL;
}

int seda_bus_stage_count(seda_bus_t *b)
{
    return atomic_load_explicit(&b->reg, memory_order_acquire)->n;
}

seda_stage_t *seda_bus_stage_at(seda_bus_t *b, int i)
{
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    return i >= 0 && i < r->n ? r->list[i] : NULL;
}

/* ---- bus lifecycle ---- */

int seda_bus_new(const seda_bus_opts *opts, seda_bus_t **out)
{
    seda_bus_opts def;
    if (!out)
        return SEDA_EINVAL;
    if (!opts) {
        seda_bus_opts_init(&def);
        opts = &def;
    }
    int workers = opts->workers;
    if (workers == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        workers = ncpu > 0 ? (int)ncpu : 1;
    }
    if (workers < 0 || workers > 1024 || opts->batch <= 0 ||
        opts->batch > 256 || !(opts->hop_timeout >= 0) ||
        opts->max_loans < -1 || opts->max_loans > SEDA_MAX_LOANS ||
        opts->max_payload > UINT32_MAX || !(opts->stats_window >= 0) ||
        opts->dead_letter_keep < -1 || opts->dead_letter_keep > 100000 ||
        opts->stats_window > 86400 || opts->hold_warn != opts->hold_warn ||
        opts->hold_warn > 3600 ||
        !(opts->group_wait >= 0) || opts->group_wait > 1 ||
        (opts->dead_letter && !seda__valid_name(opts->dead_letter)))
        return SEDA_EINVAL;

    struct seda_bus_s *b = seda__calloc(1, sizeof *b);
    if (!b)
        return SEDA_ENOMEM;
    b->workers = workers;
    b->batch = opts->batch;
    b->hop_timeout_ns = seda__secs_to_ns(opts->hop_timeout);
    b->stats_window_ns = seda__secs_to_ns(opts->stats_window > 0
                                              ? opts->stats_window : 10.0);
    b->hold_warn_ns = opts->hold_warn < 0 ? INT64_MAX
                    : seda__secs_to_ns(opts->hold_warn > 0
                                           ? opts->hold_warn
                                           : SEDA_HOLD_WARN_DEFAULT);
    b->dead_letter_keep = opts->dead_letter_keep == 0 ? 100
                        : opts->dead_letter_keep < 0 ? 0
                        : opts->dead_letter_keep;
    b->sync_normal = opts->sync_normal;
    b->group_wait = opts->group_wait;
    b->max_payload = opts->max_payload ? opts->max_payload
                                       : SEDA_MAX_PAYLOAD_DEFAULT;
    struct registry *r = registry_build(NULL, NULL);
    b->data_dir = seda__strdup(opts->data_dir ? opts->data_dir
                                              : "./seda-data");
    if (!r || !b->data_dir || (opts->dead_letter &&
               !(b->dead_letter = seda__strdup(opts->dead_letter)))) {
        registry_free(r);
        seda__free(b->data_dir);
        seda__free(b->dead_letter);
        seda__free(b);
        return SEDA_ENOMEM;
    }
    atomic_init(&b->store, NULL);
    atomic_init(&b->reg, r);
    atomic_init(&b->paused, false);
    atomic_init(&b->closed, false);
    atomic_init(&b->stopping, false);
    atomic_init(&b->has_pull, false);
    atomic_init(&b->shedding, 0);
    atomic_init(&b->replay_until, 0);
    seda__mutex_init(&b->mu);
    seda__mutex_init(&b->shut_mu);
    seda__mutex_init(&b->idle_mu);
    seda__ownhops_init(&b->ownhops);
    int rc = seda__cond_init(&b->idle_cv);
    if (rc == 0 && (rc = seda__cond_init(&b->stage_cv)) != 0)
        pthread_cond_destroy(&b->idle_cv);
    bool cvs = rc == 0;                 /* both condition variables made */
    if (rc == 0)
        rc = seda__pool_new(workers, opts->max_loans == 0 ? -1
                                     : opts->max_loans < 0 ? 0
                                     : opts->max_loans,
                            opts->worker_start,
                            opts->worker_stop,
                            opts->worker_ud, b, &b->pool);
    if (rc == 0 && opts->worker_mail)
        seda__pool_set_mail(b->pool, opts->worker_mail);
    if (rc) {
        if (cvs) {
            pthread_cond_destroy(&b->idle_cv);
            pthread_cond_destroy(&b->stage_cv);
        }
        seda__mutex_destroy(&b->mu);
        seda__mutex_destroy(&b->shut_mu);
        seda__mutex_destroy(&b->idle_mu);
        seda__ownhops_destroy(&b->ownhops);
        registry_free(r);
        seda__free(b->dead_letter);
        seda__free(b->data_dir);
        seda__free(b);
        return rc;
    }
    *out = b;
    return 0;
}

bool seda__bus_own_hop(struct seda_bus_s *b, const char *hop)
{
    return seda__ownhops_has(&b->ownhops, hop);
}

void seda_bus_free(seda_bus_t *b)
{
    if (!b)
        return;
    seda_bus_shutdown_now(b);
    seda__pool_free(b->pool);
    void *store = seda__bus_store(b);
    if (store)
        b->store_ops->close(store);
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    for (int i = 0; i < r->n; i++)
        if (r->list[i]->remote_ops)
            r->list[i]->remote_ops->close(r->list[i]);
    for (int i = 0; i < r->n; i++)
        seda__stage_free(r->list[i]);
    registry_free(r);
    pthread_cond_destroy(&b->idle_cv);
    pthread_cond_destroy(&b->stage_cv);
    seda__mutex_destroy(&b->idle_mu);
    seda__mutex_destroy(&b->shut_mu);
    seda__mutex_destroy(&b->mu);
    seda__ownhops_destroy(&b->ownhops);
    seda__free(b->dead_letter);
    seda__free(b->data_dir);
    seda__free(b);
}

size_t seda_bus_max_payload(const seda_bus_t *b)
{
    return b->max_payload;
}

int seda_bus_workers(const seda_bus_t *b)
{
    return seda__pool_size(b->pool);
}

int seda_bus_set_workers(seda_bus_t *b, int n)
{
    if (seda__pool_current_owner() == b)
        return SEDA_EINVAL;
    if (atomic_load_explicit(&b->stopping, memory_order_acquire))
        return SEDA_ECLOSED;
    return seda__pool_resize(b->pool, n);
}

int seda_watch_add(seda_bus_t *b, int fd, uint32_t events, seda_watch_fn fn,
                   void *ud, seda_watch_t **out)
{
    if (!fn || fd < 0)
        return SEDA_EINVAL;
    if (atomic_load_explicit(&b->stopping, memory_order_acquire))
        return SEDA_ECLOSED;
    return seda__pool_ready_watch(b->pool, fd, events, fn, ud, out);
}

void seda_bus_pause(seda_bus_t *b)
{
    atomic_store_explicit(&b->paused, true, memory_order_release);
}

void seda_bus_resume(seda_bus_t *b)
{
    atomic_store_explicit(&b->paused, false, memory_order_release);
}

bool seda_bus_paused(const seda_bus_t *b)
{
    return atomic_load_explicit(&((seda_bus_t *)b)->paused,
                                memory_order_acquire);
}

bool seda_bus_closed(const seda_bus_t *b)
{
    return atomic_load_explicit(&((seda_bus_t *)b)->closed,
                                memory_order_acquire);
}

/* ---- what the layers beside the core read (door.h) ---- */

bool seda__bus_stopping(struct seda_bus_s *b)
{
    return atomic_load_explicit(&b->stopping, memory_order_acquire);
}

const char *seda__bus_data_dir(const struct seda_bus_s *b)
{
    return b->data_dir;
}

bool seda__bus_sync_normal(const struct seda_bus_s *b)
{
    return b->sync_normal;
}

double seda__bus_group_wait(const struct seda_bus_s *b)
{
    return b->group_wait;
}

const char *seda__bus_dead_letter_name(const struct seda_bus_s *b)
{
    return b->dead_letter;
}

/* ---- stages ---- */

void *seda__bus_set_store(struct seda_bus_s *b,
                          const struct seda__store_ops *ops, void *store)
{
    seda__mutex_lock(&b->mu);
    void *cur = atomic_load_explicit(&b->store, memory_order_relaxed);
    if (!cur) {
        b->store_ops = ops;
        /* Release: pairs with the acquire in seda__bus_store. */
        atomic_store_explicit(&b->store, store, memory_order_release);
        cur = store;
    }
    seda__mutex_unlock(&b->mu);
    return cur;
}

void *seda__bus_store(struct seda_bus_s *b)
{
    return atomic_load_explicit(&b->store, memory_order_acquire);
}

const struct seda__store_ops *seda__bus_store_ops(struct seda_bus_s *b)
{
    return seda__bus_store(b) ? b->store_ops : NULL;
}

void seda__bus_store_forget(struct seda_stage_s *st, seda_env_t *env)
{
    if (seda__env_jkey(env))
        seda__bus_store_ops(st->bus)->forget(st, env);
}

int seda__bus_store_enter(struct seda_stage_s *to, seda_env_t *env)
{
    return seda__bus_store_ops(to->bus)->enter(to, env);
}

int seda__bus_store_enter_async(struct seda_stage_s *to, seda_env_t *env,
                                double timeout)
{
    return seda__bus_store_ops(to->bus)->enter_async(to, env, timeout);
}

int seda__bus_store_move(struct seda_stage_s *from, struct seda_stage_s *to,
                         seda_env_t *env, int skip_slip)
{
    return seda__bus_store_ops(from->bus)->move(from, to, env, skip_slip);
}

int seda__bus_make_remote(struct seda_bus_s *b, const seda_stage_opts *o,
                          const struct seda__remote_ops *ops, void *ctx,
                          struct seda_stage_s **out, char *err,
                          size_t errlen)
{
    int rc = seda__stage_new(b, o, out, err, errlen);
    if (rc == 0) {
        (*out)->remote_ops = ops;
        (*out)->remote = ctx;
    }
    return rc;
}


/* The durable layer's journal opener, when the program links it: a weak
 * reference, so a program that names no durable function links libseda.a
 * without the journal (and SQLite), and its durable stages are refused
 * with a message that says how to get them. */
#pragma weak seda_bus_open_journal

int seda_stage_add(seda_bus_t *b, const seda_stage_opts *o,
                   seda_stage_t **out, char *err, size_t errlen)
{
    return seda__bus_stage_add(b, o, out, err, errlen, seda_bus_open_journal);
}

int seda__bus_stage_add(seda_bus_t *b, const seda_stage_opts *o,
                        seda_stage_t **out, char *err, size_t errlen,
                        seda__open_store_fn open_store)
{
    struct seda_stage_s *st;
    int rc = seda__stage_new(b, o, &st, err, errlen);
    if (rc)
        return rc;
    if (st->durable) {
        char jerr[512];
        rc = open_store ? open_store(b, jerr, sizeof jerr) : SEDA_EINVAL;
        if (rc && !open_store)
            snprintf(jerr, sizeof jerr, "the journal is not linked into "
                     "this program (call seda_bus_open_journal first, "
                     "which links it)");
        if (rc) {
            if (err && errlen)
                snprintf(err, errlen, "stage '%s': durable: %s", st->name,
                         jerr);
            seda__stage_free(st);
            return rc;
        }
    }
    return seda__bus_register(b, st, out, err, errlen);
}

int seda__bus_register(seda_bus_t *b, struct seda_stage_s *st,
                       seda_stage_t **out, char *err, size_t errlen)
{
    int rc = 0;
    seda__mutex_lock(&b->mu);
    if (atomic_load_explicit(&b->closed, memory_order_acquire)) {
        rc = SEDA_ECLOSED;
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': the bus is closed", st->name);
    } else if (seda__bus_lookup(b, st->name)) {
        rc = SEDA_EEXIST;
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': name: a stage of that name "
                     "already exists", st->name);
    } else if ((rc = seda__pool_reserve(b->pool, st->adm.concurrency)) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': out of memory", st->name);
    }
    struct registry *old = atomic_load_explicit(&b->reg,
                                                memory_order_relaxed);
    struct registry *r = NULL;
    if (rc == 0) {
        if (!(r = registry_build(old, st))) {
            seda__pool_reserve(b->pool, -st->adm.concurrency);
            rc = SEDA_ENOMEM;
            if (err && errlen)
                snprintf(err, errlen, "stage '%s': out of memory", st->name);
        }
    }
    if (rc) {
        seda__mutex_unlock(&b->mu);
        seda__stage_free(st);
        return rc;
    }
    st->index = old->n;
    if (st->pull)
        atomic_store_explicit(&b->has_pull, true, memory_order_relaxed);
    r->prev = old;
    /* Release: pairs with the acquire in seda__bus_lookup. */
    atomic_store_explicit(&b->reg, r, memory_order_release);
    pthread_cond_broadcast(&b->stage_cv);   /* hops waiting for it */
    seda__mutex_unlock(&b->mu);
    if (out)
        *out = st;
    return 0;
}

/* ---- hops of replayed envelopes ---- */

void seda__bus_replay_begins(struct seda_bus_s *b)
{
    int64_t until = seda__now_ns() + b->hop_timeout_ns;
    int64_t cur = atomic_load_explicit(&b->replay_until,
                                       memory_order_relaxed);
    while (cur < until &&
           !atomic_compare_exchange_weak_explicit(&b->replay_until, &cur,
                                                  until,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

void seda__bus_wake_hops(struct seda_bus_s *b)
{
    seda__mutex_lock(&b->mu);
    pthread_cond_broadcast(&b->stage_cv);
    seda__mutex_unlock(&b->mu);
}

/* ---- idleness, shutdown ---- */

void seda__bus_idle_notify(struct seda_bus_s *b)
{
    seda__mutex_lock(&b->idle_mu);
    b->idle_gen++;
    pthread_cond_broadcast(&b->idle_cv);
    seda__mutex_unlock(&b->idle_mu);
}

static bool scan_idle(struct seda_bus_s *b, uint64_t *sum)
{
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    bool idle = true;
    *sum = 0;
    for (int i = 0; i < r->n; i++)
        idle &= seda__stage_idle(r->list[i], sum);
    void *store = seda__bus_store(b);
    if (idle && store)
        idle = b->store_ops->settled(store);
    return idle;
}

/* Idle now?  Two scans that agree; a scan that expired a pull lease (and
 * so changed something) is retried a few times. */
static bool idle_now(struct seda_bus_s *b)
{
    for (int tries = 0; tries < 4; tries++) {
        uint64_t s1, s2;
        if (scan_idle(b, &s1) && scan_idle(b, &s2) && s1 == s2)
            return true;
        if (!atomic_load_explicit(&b->has_pull, memory_order_relaxed))
            return false;
    }
    return false;
}

int seda_bus_wait_idle(seda_bus_t *b, double timeout)
{
    int64_t deadline = seda__deadline(timeout);
    for (;;) {
        seda__mutex_lock(&b->idle_mu);
        uint64_t gen = b->idle_gen;
        seda__mutex_unlock(&b->idle_mu);
        if (idle_now(b))
            return 0;
        /* Pull leases expire lazily, with no drain task to signal it:
         * with pull stages, look again at least every 20 ms. */
        int64_t until = deadline;
        if (atomic_load_explicit(&b->has_pull, memory_order_relaxed)) {
            int64_t slice = seda__now_ns() + 20000000;
            if (slice < until)
                until = slice;
        }
        seda__mutex_lock(&b->idle_mu);
        int rc = 0;
        while (b->idle_gen == gen && rc == 0)
            rc = seda__cond_wait(&b->idle_cv, &b->idle_mu, until);
        seda__mutex_unlock(&b->idle_mu);
        if (rc == ETIMEDOUT && seda__now_ns() >= deadline)
            return idle_now(b) ? 0 : SEDA_ETIMEDOUT;
    }
}

/* Wait until what the store took without waiting for its commit (a hop
 * into a durable stage, a batch's acknowledgements) is committed: with
 * the pool stopped nothing adds to it, and a hop that commits now is
 * queued in its stage, for the sweep (its row kept for the next start).
 * The store calls seda__bus_idle_notify when it gets there. */
static void store_settle(struct seda_bus_s *b)
{
    void *store = seda__bus_store(b);
    if (!store)
        return;
    for (;;) {
        seda__mutex_lock(&b->idle_mu);
        uint64_t gen = b->idle_gen;
        seda__mutex_unlock(&b->idle_mu);
        if (b->store_ops->settled(store))
            return;
        seda__mutex_lock(&b->idle_mu);
        while (b->idle_gen == gen)
            seda__cond_wait(&b->idle_cv, &b->idle_mu, INT64_MAX);
        seda__mutex_unlock(&b->idle_mu);
    }
}

static void wake_all(struct seda_bus_s *b)
{
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    for (int i = 0; i < r->n; i++)
        seda__stage_wake(r->list[i]);
}

int seda_bus_shutdown(seda_bus_t *b, double timeout)
{
    seda__mutex_lock(&b->shut_mu);
    if (b->shut_done) {
        int rc = b->shut_rc;
        seda__mutex_unlock(&b->shut_mu);
        return rc;
    }
    /* Under bus->mu so no stage is added after close.  Release: pairs with
     * the acquire loads in publish and offer_locked. */
    seda__mutex_lock(&b->mu);
    atomic_store_explicit(&b->closed, true, memory_order_release);
    seda__mutex_unlock(&b->mu);
    wake_all(b);                        /* blocked publishers: closed */

    int rc = timeout > 0 ? seda_bus_wait_idle(b, timeout) : SEDA_ETIMEDOUT;
    if (rc != 0 && idle_now(b))
        rc = 0;

    atomic_store_explicit(&b->stopping, true, memory_order_release);
    wake_all(b);                        /* blocked hops give up */
    seda__mutex_lock(&b->mu);
    pthread_cond_broadcast(&b->stage_cv);   /* so do replayed hops */
    seda__mutex_unlock(&b->mu);
    seda__pool_stop(b->pool);
    store_settle(b);

    /* Retries still waiting out their backoff are swept too. */
    int swept = seda__pool_timers(b->pool);
    seda__pool_drop_timers(b->pool, seda__route_drop_timer, NULL);
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    for (int i = 0; i < r->n; i++)
        swept += seda__route_sweep(r->list[i]);
    if (rc == 0 && swept > 0)
        rc = SEDA_ETIMEDOUT;

    b->shut_done = true;
    b->shut_rc = rc;
    seda__mutex_unlock(&b->shut_mu);
    return rc;
}

void seda_bus_shutdown_now(seda_bus_t *b)
{
    seda_bus_shutdown(b, 0);
}

/* ---- stats ---- */

void seda_bus_stats_get(seda_bus_t *b, seda_bus_stats *out)
{
    memset(out, 0, sizeof *out);
    struct registry *r = atomic_load_explicit(&b->reg, memory_order_acquire);
    for (int i = 0; i < r->n; i++) {
        struct seda_stage_s *st = r->list[i];
        seda__mutex_lock(&st->mu);
        out->accepted += st->stats.c.accepted + seda__inbox_fast_all(&st->in) -
                         seda__inbox_fast_hops(&st->in);
        out->completed += st->stats.c.completed;
        out->dead_lettered += st->stats.c.it_dead;
        out->dropped += st->stats.c.it_lost;
        out->handed_off += st->stats.c.it_remote;
        out->suspended += seda__drain_suspended(&st->task);
        seda__mutex_unlock(&st->mu);
        out->long_holds += atomic_load_explicit(&st->long_holds,
                                                memory_order_relaxed);
    }
    uint64_t ended = out->completed + out->dead_lettered + out->dropped +
                     out->handed_off;
    out->in_system = out->accepted > ended ? out->accepted - ended : 0;
    out->workers = seda__pool_size(b->pool);
    out->stages = r->n;
    out->paused = seda_bus_paused(b);
    out->closed = seda_bus_closed(b);
    seda__pool_loan_stats(b->pool, &out->workers_loaned, &out->loans,
                          &out->loans_peak, &out->max_loans);
    out->waits_uncovered = seda__pool_loan_uncovered(b->pool);
}
