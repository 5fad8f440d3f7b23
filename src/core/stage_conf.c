/* SPDX-License-Identifier: MIT */
/*
 * stage_conf.c -- a stage's life outside the hot paths: creation and
 * validation, consumers, tuning, the payload check, userdata, error
 * reports and the recent-errors ring, and stats.  The queue, admission
 * and the end of an envelope are in stage.c; the drain task in drain.c.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "bus.h"
#include "stage.h"

/* ---- creation ---- */

/* Inbox slots: the capacity rounded up to a power of two, within these
 * bounds (8 bytes a slot).  Deeper queues overflow into q. */
#define INBOX_MIN 64
#define INBOX_MAX 1024

#define FAIL(...) do { \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return SEDA_EINVAL; \
    } while (0)

/* The admission options' ranges; 0, or -1 with why naming the field.
 * A NaN fails every comparison, so each test is written to fail on it. */
static int check_admission(double starve, double target, double interval,
                           double backoff, double max_backoff, double mult,
                           char *why, size_t n)
{
    if (!(starve > 0))
        return snprintf(why, n, "starve_after must be > 0 (got %g)",
                        starve), -1;
    if (!(target >= 0))
        return snprintf(why, n, "shed.target must be >= 0 (got %g)",
                        target), -1;
    if (target > 0 && !(interval > 0))
        return snprintf(why, n, "shed.interval must be > 0 (got %g)",
                        interval), -1;
    if (!(backoff >= 0))
        return snprintf(why, n, "retry.backoff must be >= 0 (got %g)",
                        backoff), -1;
    if (backoff > 0 && !(max_backoff >= backoff))
        return snprintf(why, n, "retry.max_backoff must be >= "
                        "retry.backoff (got %g < %g)", max_backoff,
                        backoff), -1;
    if (backoff > 0 && !(mult >= 1))
        return snprintf(why, n, "retry.multiplier must be >= 1 (got %g)",
                        mult), -1;
    return 0;
}

int seda__stage_new(struct seda_bus_s *bus, const seda_stage_opts *o,
                    struct seda_stage_s **out, char *err, size_t errlen)
{
    if (!o)
        FAIL("stage: options are required");
    const char *nm = o->name;
    if (!nm || !*nm)
        FAIL("stage: name is required");
    if (!seda__valid_name(nm))
        FAIL("stage '%.80s': name must be 1-%d characters of "
             "[A-Za-z0-9_.:-]", nm, SEDA_NAME_MAX);
    if (o->capacity <= 0)
        FAIL("stage '%s': capacity must be > 0 (got %d)", nm, o->capacity);
    if (o->capacity > (1 << 26))
        FAIL("stage '%s': capacity must be <= %d (got %d)", nm, 1 << 26,
             o->capacity);
    if (o->concurrency <= 0)
        FAIL("stage '%s': concurrency must be > 0 (got %d)", nm,
             o->concurrency);
    if (o->concurrency > 4096)
        FAIL("stage '%s': concurrency must be <= 4096 (got %d)", nm,
             o->concurrency);
    if (o->max_attempts <= 0)
        FAIL("stage '%s': max_attempts must be > 0 (got %d)", nm,
             o->max_attempts);
    if (o->max_attempts > 65535)
        FAIL("stage '%s': max_attempts must be <= 65535 (got %d)", nm,
             o->max_attempts);
    if (!seda_policy_name(o->policy))
        FAIL("stage '%s': unknown policy (%d)", nm, o->policy);
    if (!seda_delivery_name(o->delivery))
        FAIL("stage '%s': unknown delivery (%d)", nm, o->delivery);
    if (!(o->publish_timeout >= 0))
        FAIL("stage '%s': publish_timeout must be >= 0", nm);
    if (!(o->handler_timeout >= 0))
        FAIL("stage '%s': handler_timeout must be >= 0", nm);
    if (o->dead_letter && !seda__valid_name(o->dead_letter))
        FAIL("stage '%s': dead_letter is not a valid stage name", nm);
    if (o->pull && !(o->ack_timeout > 0))
        FAIL("stage '%s': ack_timeout must be > 0", nm);
    if (o->durable < SEDA_MEMORY || o->durable > SEDA_EXACTLY_ONCE)
        FAIL("stage '%s': unknown durable mode (%d)", nm, o->durable);
    if (o->durable == SEDA_EXACTLY_ONCE && o->dedup_window <= 0)
        FAIL("stage '%s': dedup_window must be > 0", nm);
    char why[160];
    if (check_admission(o->starve_after, o->shed_target, o->shed_interval,
                        o->retry_backoff, o->retry_max_backoff,
                        o->retry_multiplier, why, sizeof why) != 0)
        FAIL("stage '%s': %s", nm, why);

    /* Aligned to a cache line, so the lines laid out in stage.h are. */
    struct seda_stage_s *st = NULL;
    void *mem = seda__calloc(1, sizeof *st + 63);
    if (!mem)
        goto oom;
    st = (void *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    st->mem = mem;
    uint64_t slots = (uint64_t)o->capacity +
                     (uint64_t)o->concurrency * (uint64_t)bus->batch;
    if (seda__queue_init(&st->q, (uint32_t)slots))
        goto oom;
    uint32_t n = INBOX_MIN;
    while (n < INBOX_MAX && n < (uint32_t)o->capacity)
        n *= 2;
    if (!(st->inbox_mem = seda__calloc(1, n * sizeof *st->inbox + 63)))
        goto oom;
    st->inbox = (void *)(((uintptr_t)st->inbox_mem + 63) & ~(uintptr_t)63);
    for (uint32_t k = 0; k < n; k++)
        atomic_init(&st->inbox[k], NULL);
    st->inbox_mask = n - 1;
    if (o->dead_letter && !(st->dead_letter = seda__strdup(o->dead_letter)))
        goto oom;
    if (seda__cond_init(&st->not_full))
        goto oom;
    if (seda__cond_init(&st->not_empty)) {
        pthread_cond_destroy(&st->not_full);
        goto oom;
    }
    snprintf(st->name, sizeof st->name, "%s", nm);
    st->bus = bus;
    st->capacity = o->capacity;
    st->concurrency = o->concurrency;
    st->delivery = o->delivery;
    st->policy = o->policy;
    st->max_attempts = o->max_attempts;
    st->publish_timeout = o->publish_timeout;
    st->handler_timeout = o->handler_timeout;
    st->pull = o->pull;
    st->durable = o->durable;
    st->dedup_window = o->dedup_window;
    st->ack_timeout_ns = seda__secs_to_ns(o->ack_timeout);
    st->starve_ns = seda__secs_to_ns(o->starve_after);
    st->shed_target_ns = seda__secs_to_ns(o->shed_target);
    st->shed_interval_ns = seda__secs_to_ns(o->shed_interval);
    st->retry_backoff = o->retry_backoff;
    st->retry_max = o->retry_max_backoff;
    st->retry_mult = o->retry_multiplier;
    st->retry_jitter = o->retry_jitter;
    atomic_init(&st->shed_level, 0);
    atomic_init(&st->nconsumers, 0);
    atomic_init(&st->rr, 0);
    atomic_init(&st->userdata, NULL);
    atomic_init(&st->in_pos, 0);
    atomic_init(&st->out_pos, 0);
    atomic_init(&st->held, 0);
    atomic_init(&st->svc_ns, 0);
    atomic_init(&st->fast_hop, 0);
    atomic_init(&st->cap_fast, o->capacity);
    atomic_init(&st->conc_fast, o->concurrency);
    atomic_init(&st->running, 0);
    atomic_init(&st->check, NULL);
    atomic_init(&st->check_ud, NULL);
    seda__mutex_init(&st->mu);
    seda__mutex_init(&st->hist_mu);
    seda__mutex_init(&st->report_mu);
    seda__mutex_init(&st->errs_mu);
    *out = st;
    return 0;
oom:
    if (st) {
        seda__queue_destroy(&st->q);
        seda__free(st->inbox_mem);
        seda__free(st->dead_letter);
        seda__free(st->mem);
    }
    if (err && errlen)
        snprintf(err, errlen, "stage '%s': out of memory", nm);
    return SEDA_ENOMEM;
}

void seda__stage_free(struct seda_stage_s *st)
{
    if (!st)
        return;
    assert(seda__queue_count(&st->q) == 0 && seda__stage_qcount(st) == 0);
    if (st->report_suppressed)          /* the last window's count */
        fprintf(stderr, "seda: stage '%s': %llu similar errors suppressed\n",
                st->name, (unsigned long long)st->report_suppressed);
    seda__queue_destroy(&st->q);
    seda__queue_destroy(&st->q_high);
    seda__queue_destroy(&st->q_low);
    seda__free(st->inbox_mem);
    pthread_cond_destroy(&st->not_full);
    pthread_cond_destroy(&st->not_empty);
    seda__mutex_destroy(&st->mu);
    seda__mutex_destroy(&st->hist_mu);
    seda__mutex_destroy(&st->report_mu);
    for (int i = 0; i < st->errs_n; i++)
        seda__free(st->errs[i].msg);
    seda__mutex_destroy(&st->errs_mu);
    seda__free(st->dead_letter);
    seda__free(st->mem);
}


/* ---- public accessors ---- */

const char *seda_stage_name(const seda_stage_t *st) { return st->name; }

double seda_stage_handler_timeout(const seda_stage_t *st)
{
    return st->handler_timeout;
}

/* Add a consumer (exactly one of fn and bfn). */
static int add_consumer(seda_stage_t *st, seda_consumer_fn fn,
                        seda_batch_fn bfn, void *ud)
{
    if ((!fn && !bfn) || st->pull)
        return SEDA_EINVAL;
    seda__mutex_lock(&st->mu);          /* serialises adders */
    int n = atomic_load_explicit(&st->nconsumers, memory_order_relaxed);
    if (n >= SEDA_MAX_CONSUMERS) {
        seda__mutex_unlock(&st->mu);
        return SEDA_ERANGE;
    }
    st->cons[n] = (struct consumer){ fn, bfn, ud };
    /* Release: pairs with the acquires in deliver.c; cons[n] is visible
     * to any drain task that sees the new count. */
    atomic_store_explicit(&st->nconsumers, n + 1, memory_order_release);
    seda__mutex_unlock(&st->mu);
    return n;
}

int seda_stage_consume(seda_stage_t *st, seda_consumer_fn fn, void *ud)
{
    return fn ? add_consumer(st, fn, NULL, ud) : SEDA_EINVAL;
}

int seda_stage_consume_batch(seda_stage_t *st, seda_batch_fn fn, void *ud)
{
    return fn ? add_consumer(st, NULL, fn, ud) : SEDA_EINVAL;
}

int seda_stage_tune(seda_stage_t *st, int capacity, int concurrency,
                    int policy, char *err, size_t errlen)
{
    const char *nm = st->name;
    if (capacity > (1 << 26))
        FAIL("stage '%s': capacity must be <= %d (got %d)", nm, 1 << 26,
             capacity);
    if (concurrency > 4096)
        FAIL("stage '%s': concurrency must be <= 4096 (got %d)", nm,
             concurrency);
    if (policy >= 0 && !seda_policy_name(policy))
        FAIL("stage '%s': unknown policy (%d)", nm, policy);
    struct seda_bus_s *b = st->bus;
    int nsched = 0;
    seda__mutex_lock(&st->mu);
    int cap = capacity > 0 ? capacity : st->capacity;
    int conc = concurrency > 0 ? concurrency : st->concurrency;
    uint64_t slots = (uint64_t)cap + (uint64_t)conc * (uint64_t)b->batch;
    /* The ring must also hold what is queued now plus what is in flight
     * (a shrink below the current depth keeps everything). */
    uint64_t need = (uint64_t)seda__stage_depth(st) +
                    (uint64_t)st->in_flight +
                    (uint64_t)conc * (uint64_t)b->batch;
    if (need > slots)
        slots = need;
    int rc = seda__queue_reserve(&st->q, (uint32_t)slots);
    if (rc == 0 && st->q_high.slot)
        rc = seda__queue_reserve(&st->q_high, (uint32_t)slots);
    if (rc == 0 && st->q_low.slot)
        rc = seda__queue_reserve(&st->q_low, (uint32_t)slots);
    if (rc == 0 && conc > st->concurrency)
        rc = seda__pool_reserve(b->pool, conc - st->concurrency);
    if (rc == 0) {
        st->capacity = cap;
        st->concurrency = conc;
        if (policy >= 0)
            st->policy = policy;
        atomic_store_explicit(&st->cap_fast, cap, memory_order_relaxed);
        atomic_store_explicit(&st->conc_fast, conc, memory_order_relaxed);
        int run = atomic_load_explicit(&st->running, memory_order_relaxed);
        while (!st->pull && run < st->concurrency &&
               (uint32_t)run < seda__stage_qcount(st) - (uint32_t)st->reserved) {
            run++;
            nsched++;
        }
        atomic_store_explicit(&st->running, run, memory_order_seq_cst);
        pthread_cond_broadcast(&st->not_full);
    }
    seda__mutex_unlock(&st->mu);
    if (rc) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': out of memory", nm);
        return rc;
    }
    while (nsched-- > 0)
        seda__stage_schedule(st);
    return 0;
}

int seda_stage_tune_admission(seda_stage_t *st, const seda_stage_opts *o,
                              unsigned what, char *err, size_t errlen)
{
    char why[160];
    bool shed = what & SEDA_TUNE_SHED, retry = what & SEDA_TUNE_RETRY,
         starve = what & SEDA_TUNE_STARVE;
    if (check_admission(starve ? o->starve_after : 1,
                        shed ? o->shed_target : 0,
                        shed ? o->shed_interval : 0,
                        retry ? o->retry_backoff : 0,
                        retry ? o->retry_max_backoff : 0,
                        retry ? o->retry_multiplier : 1, why,
                        sizeof why) != 0) {
        if (err && errlen)
            snprintf(err, errlen, "stage '%s': %s", st->name, why);
        return SEDA_EINVAL;
    }
    seda__mutex_lock(&st->mu);
    if (shed) {
        st->shed_target_ns = seda__secs_to_ns(o->shed_target);
        st->shed_interval_ns = seda__secs_to_ns(o->shed_interval);
        st->shed_above_since = 0;
        st->shed_rearm = 0;                /* a new rule starts afresh */
        if (o->shed_target == 0)
            atomic_store_explicit(&st->shed_level, 0, memory_order_relaxed);
    }
    if (retry) {
        st->retry_backoff = o->retry_backoff;
        st->retry_max = o->retry_max_backoff;
        st->retry_mult = o->retry_multiplier;
        st->retry_jitter = o->retry_jitter;
    }
    if (starve)
        st->starve_ns = seda__secs_to_ns(o->starve_after);
    seda__mutex_unlock(&st->mu);
    return 0;
}

void seda_stage_count_refused(seda_stage_t *st)
{
    seda__mutex_lock(&st->mu);
    st->c.refused++;
    st->c.dropped++;
    seda__mutex_unlock(&st->mu);
}

void seda_stage_set_check(seda_stage_t *st, seda_check_fn fn, void *ud)
{
    atomic_store_explicit(&st->check_ud, ud, memory_order_relaxed);
    /* Release: pairs with the acquire in seda__stage_check; check_ud is
     * visible to whoever sees fn. */
    atomic_store_explicit(&st->check, fn, memory_order_release);
}

static _Thread_local char tls_check_error[256];

const char *seda_last_check_error(void) { return tls_check_error; }

int seda__stage_check(struct seda_stage_s *st, const seda_env_t *env,
                      char *err, size_t errlen)
{
    seda_check_fn fn = atomic_load_explicit(&st->check,
                                            memory_order_acquire);
    if (!fn)
        return 0;
    void *ud = atomic_load_explicit(&st->check_ud, memory_order_relaxed);
    if (fn(env, ud, err, errlen) == 0)
        return 0;
    snprintf(tls_check_error, sizeof tls_check_error, "%s", err);
    seda__mutex_lock(&st->mu);
    st->c.invalid++;
    seda__mutex_unlock(&st->mu);
    return SEDA_ETYPE;
}

void seda_stage_set_userdata(seda_stage_t *st, void *ud)
{
    /* Release: pairs with the acquire in seda_stage_userdata. */
    atomic_store_explicit(&st->userdata, ud, memory_order_release);
}

void *seda_stage_userdata(const seda_stage_t *st)
{
    return atomic_load_explicit(&((seda_stage_t *)st)->userdata,
                                memory_order_acquire);
}

/* ---- recent errors ----
 *
 * HOW IT WORKS
 *   st->errs[0..errs_n) holds the last SEDA_ERRORS_KEPT distinct messages,
 *   newest first.  A report first looks for an equal message among them:
 *   found, that entry counts one more repeat, takes the new time and moves
 *   to the front (the entries before it shift down one); not found, every
 *   entry shifts down one (the oldest, at N-1, falls out) and the new one
 *   goes in at 0.  N is small (32), so the shift and the search are a few
 *   hundred nanoseconds next to formatting a traceback.  Example, N = 3,
 *   reports A B A C D:  [A] [B A] [A(x2) B] [C A(x2) B] [D C A(x2)].
 *   The copy is made before the lock is taken (and thrown away when the
 *   message is folded), so the lock is held for the search and the shift
 *   only; seda_stage_errors copies out under it into one allocation.
 */

static const char ERR_NOMEM[] = "(out of memory: message not kept)";

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* msg as the ring keeps it: a copy of at most SEDA_ERROR_MSG_MAX - 1
 * bytes, a longer one ending in "...".  NULL when out of memory. */
static char *err_copy(const char *msg, size_t len)
{
    size_t keep = len < SEDA_ERROR_MSG_MAX ? len : SEDA_ERROR_MSG_MAX - 1;
    char *c = seda__malloc(keep + 1);
    if (!c)
        return NULL;
    memcpy(c, msg, keep);
    if (keep < len)
        memcpy(c + keep - 3, "...", 3);
    c[keep] = '\0';
    return c;
}

/* Whether kept (a copy err_copy made) is msg (of length len). */
static bool err_same(const char *kept, const char *msg, size_t len)
{
    if (!kept)
        return false;
    if (len < SEDA_ERROR_MSG_MAX)
        return strcmp(kept, msg) == 0;
    size_t head = SEDA_ERROR_MSG_MAX - 4;
    return strncmp(kept, msg, head) == 0 && strcmp(kept + head, "...") == 0;
}

/* Keep msg in st's ring (takes errs_mu; frees outside it). */
static void err_keep(struct seda_stage_s *st, const char *msg)
{
    size_t len = strlen(msg);
    int64_t now = wall_ns();
    char *copy = err_copy(msg, len);
    char *drop = NULL;                  /* freed after the unlock */
    seda__mutex_lock(&st->errs_mu);
    int i = 0;
    while (i < st->errs_n && !err_same(st->errs[i].msg, msg, len))
        i++;
    struct seda__err e;
    if (i < st->errs_n) {               /* a repeat: fold, to the front */
        e = st->errs[i];
        e.repeats++;
        e.last_ns = now;
        drop = copy;
    } else {                            /* new: the oldest may fall out */
        if (st->errs_n == SEDA_ERRORS_KEPT) {
            i = SEDA_ERRORS_KEPT - 1;
            drop = st->errs[i].msg;
        } else {
            i = st->errs_n++;
        }
        e = (struct seda__err){ copy, now, now, 1 };
    }
    memmove(&st->errs[1], &st->errs[0], (size_t)i * sizeof st->errs[0]);
    st->errs[0] = e;
    seda__mutex_unlock(&st->errs_mu);
    seda__free(drop);
}

int seda_stage_errors(seda_stage_t *st, seda_error **out)
{
    *out = NULL;
    seda__mutex_lock(&st->errs_mu);
    int n = st->errs_n;
    if (n == 0) {
        seda__mutex_unlock(&st->errs_mu);
        return 0;
    }
    /* One block: the array, then the messages it points at.  Allocating
     * under errs_mu is fine: it is a leaf lock and the allocator takes
     * none of ours. */
    size_t bytes = (size_t)n * sizeof(seda_error);
    for (int i = 0; i < n; i++)
        if (st->errs[i].msg)
            bytes += strlen(st->errs[i].msg) + 1;
    seda_error *a = seda__malloc(bytes);
    if (!a) {
        seda__mutex_unlock(&st->errs_mu);
        return SEDA_ENOMEM;
    }
    char *p = (char *)(a + n);
    for (int i = 0; i < n; i++) {
        const struct seda__err *e = &st->errs[i];
        a[i].time = (double)e->last_ns / 1e9;
        a[i].first = (double)e->first_ns / 1e9;
        a[i].repeats = e->repeats;
        if (e->msg) {
            size_t l = strlen(e->msg) + 1;
            memcpy(p, e->msg, l);
            a[i].message = p;
            p += l;
        } else {
            a[i].message = ERR_NOMEM;
        }
    }
    seda__mutex_unlock(&st->errs_mu);
    *out = a;
    return n;
}

void seda_errors_free(seda_error *errs)
{
    seda__free(errs);
}

/* ---- error reports ---- */

void seda_stage_report(seda_stage_t *st, const char *msg)
{
    int64_t now = seda__now_ns();
    uint64_t suppressed = 0;
    bool print = false;
    err_keep(st, msg);
    seda__mutex_lock(&st->report_mu);
    if (now - st->report_window >= 1000000000) {
        suppressed = st->report_suppressed;
        st->report_suppressed = 0;
        st->report_window = now;
        st->report_lines = 0;
    }
    if (st->report_lines < 5) {
        st->report_lines++;
        print = true;
    } else {
        st->report_suppressed++;
    }
    seda__mutex_unlock(&st->report_mu);
    seda__mutex_lock(&st->mu);
    st->c.errors++;
    seda__mutex_unlock(&st->mu);
    if (suppressed)
        fprintf(stderr, "seda: stage '%s': %llu similar errors suppressed\n",
                st->name, (unsigned long long)suppressed);
    if (print)
        fprintf(stderr, "seda: stage '%s': %s\n", st->name, msg);
}

/* ---- stats ---- */

void seda_stage_stats_get(seda_stage_t *st, seda_stage_stats *out)
{
    if (st->pull) {
        /* Overdue leases count as nacks before we report. */
        seda_env_t *requeue[64];
        int n;
        do {
            seda__mutex_lock(&st->mu);
            n = seda__lease_expire(st, seda__now_ns(), requeue, 64);
            seda__mutex_unlock(&st->mu);
            for (int i = 0; i < n; i++)
                seda__stage_nack(st, requeue[i]);
        } while (n == 64);
    }
    memset(out, 0, sizeof *out);
    memcpy(out->name, st->name, sizeof out->name);
    out->delivery = st->delivery;
    out->max_attempts = st->max_attempts;
    out->consumers = atomic_load_explicit(&st->nconsumers,
                                          memory_order_acquire);
    seda__mutex_lock(&st->mu);
    out->capacity = st->capacity;
    out->concurrency = st->concurrency;
    out->policy = st->policy;
    /* Counts an inbox ticket whose publisher is mid-way as queued (it
     * was admitted); a ticket voided by a publisher racing a close counts
     * until a taker skips it. */
    out->depth = (int)seda__stage_depth(st);
    /* Envelopes being handled: at most one per drain task, so never above
     * the permits.  What a task has taken and not yet started (up to a
     * batch of a fast handler's, for microseconds) is neither queued nor
     * being handled; the bus's in_system counts it.  A pull stage's are
     * its leases. */
    out->in_flight = st->in_flight;
    if (!st->pull) {
        int run = atomic_load_explicit(&st->running, memory_order_relaxed);
        if (out->in_flight > run)
            out->in_flight = run;
    }
    out->enqueued = st->c.enqueued + seda__stage_fast_all(st);
    out->delivered = st->c.delivered;
    out->nacked = st->c.nacked;
    out->dropped = st->c.dropped;
    out->dead_lettered = st->c.dead_lettered;
    out->errors = st->c.errors;
    out->completed = st->c.completed;
    out->invalid = st->c.invalid;
    out->refused = st->c.refused;
    out->shed = st->c.shed;
    out->delayed = st->delayed;
    out->shedding = atomic_load_explicit(&st->shed_level,
                                         memory_order_relaxed);
    out->depth_high = (int)seda__queue_count(&st->q_high);
    out->depth_low = (int)seda__queue_count(&st->q_low);
    out->handed_off = st->c.it_remote;
    /* Rate over the newest sample and the oldest within 5 s of now. */
    int64_t now = seda__clock_ns();
    uint64_t d_now = st->c.delivered;
    for (int k = st->rate_n; k >= 1; k--) {
        int idx = (st->rate_head - k + 64) % 64;
        int64_t dt = now - st->rate[idx].t;
        if (dt <= 5000000000LL && dt > 0) {
            out->rate = (double)(d_now - st->rate[idx].delivered) * 1e9 /
                        (double)dt;
            break;
        }
    }
    seda__mutex_unlock(&st->mu);
    seda__mutex_lock(&st->hist_mu);
    out->sojourn_p50 = seda__hist_quantile(&st->sojourn, 0.50) / 1e3;
    out->sojourn_p99 = seda__hist_quantile(&st->sojourn, 0.99) / 1e3;
    out->sojourn_p999 = seda__hist_quantile(&st->sojourn, 0.999) / 1e3;
    out->sojourn_max = (double)st->sojourn.max / 1e3;
    out->service_p50 = seda__hist_quantile(&st->service, 0.50) / 1e3;
    out->service_p99 = seda__hist_quantile(&st->service, 0.99) / 1e3;
    out->service_p999 = seda__hist_quantile(&st->service, 0.999) / 1e3;
    out->service_max = (double)st->service.max / 1e3;
    out->sojourn_count = st->sojourn.count;
    out->sojourn_sum = (double)st->sojourn.sum / 1e3;
    out->service_count = st->service.count;
    out->service_sum = (double)st->service.sum / 1e3;
    seda__mutex_unlock(&st->hist_mu);
}
