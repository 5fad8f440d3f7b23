/* SPDX-License-Identifier: MIT */
/*
 * stats.c -- what a stage counts and remembers: its counters (a tally the
 * core's files add to under the stage lock), the latency histograms, the
 * delivery-rate samples, the recent-errors ring and the rate limit on
 * error reports; and seda_stage_stats_get, which reads every part of the
 * stage into one snapshot.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stage.h"

/* ---- making ---- */

void seda__stats_init(struct seda_stats *s)
{
    seda__mutex_init(&s->hist_mu);
    seda__mutex_init(&s->report_mu);
    seda__mutex_init(&s->errs_mu);
}

void seda__stats_free(struct seda_stats *s, const char *name)
{
    if (s->report_suppressed)           /* the last window's count */
        fprintf(stderr, "seda: stage '%s': %llu similar errors suppressed\n",
                name, (unsigned long long)s->report_suppressed);
    seda__mutex_destroy(&s->hist_mu);
    seda__mutex_destroy(&s->report_mu);
    for (int i = 0; i < s->errs_n; i++)
        seda__free(s->errs[i].msg);
    seda__mutex_destroy(&s->errs_mu);
}

/* ---- counters, latency, rate ---- */

void seda__stats_fold(struct stage_counters *into,
                      const struct stage_counters *from)
{
    into->enqueued += from->enqueued;
    into->delivered += from->delivered;
    into->nacked += from->nacked;
    into->dropped += from->dropped;
    into->dead_lettered += from->dead_lettered;
    into->errors += from->errors;
    into->completed += from->completed;
    into->invalid += from->invalid;
    into->refused += from->refused;
    into->shed += from->shed;
    into->shed_for += from->shed_for;
    into->accepted += from->accepted;
    into->it_dead += from->it_dead;
    into->it_lost += from->it_lost;
    into->it_remote += from->it_remote;
}

static inline uint64_t nonneg(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

void seda__stats_latency(struct seda_stats *s, const int64_t *sojourn,
                         const int64_t *service, int n)
{
    seda__mutex_lock(&s->hist_mu);
    for (int k = 0; k < n; k++) {
        if (service[k] < 0)
            continue;                   /* suspended: counted at settle */
        seda__hist_add(&s->sojourn, nonneg(sojourn[k]));
        seda__hist_add(&s->service, (uint64_t)service[k]);
    }
    seda__mutex_unlock(&s->hist_mu);
}

void seda__stats_latency_one(struct seda_stats *s, int64_t sojourn,
                             int64_t service)
{
    seda__mutex_lock(&s->hist_mu);
    if (sojourn >= 0)
        seda__hist_add(&s->sojourn, (uint64_t)sojourn);
    if (service >= 0)
        seda__hist_add(&s->service, (uint64_t)service);
    seda__mutex_unlock(&s->hist_mu);
}

void seda__stats_rate_sample(struct seda_stats *s, int64_t now)
{
    int last = (s->rate_head + 63) % 64;
    if (s->rate_n > 0 && now - s->rate[last].t < 100000000)
        return;
    s->rate[s->rate_head].t = now;
    s->rate[s->rate_head].delivered = s->c.delivered;
    s->rate_head = (s->rate_head + 1) % 64;
    if (s->rate_n < 64)
        s->rate_n++;
}

/* ---- recent errors ----
 *
 * HOW IT WORKS
 *   s->errs[0..errs_n) holds the last SEDA_ERRORS_KEPT distinct messages,
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

/* Keep msg in the ring (takes errs_mu; frees outside it). */
static void err_keep(struct seda_stats *s, const char *msg)
{
    size_t len = strlen(msg);
    int64_t now = wall_ns();
    char *copy = err_copy(msg, len);
    char *drop = NULL;                  /* freed after the unlock */
    seda__mutex_lock(&s->errs_mu);
    int i = 0;
    while (i < s->errs_n && !err_same(s->errs[i].msg, msg, len))
        i++;
    struct seda__err e;
    if (i < s->errs_n) {               /* a repeat: fold, to the front */
        e = s->errs[i];
        e.repeats++;
        e.last_ns = now;
        drop = copy;
    } else {                            /* new: the oldest may fall out */
        if (s->errs_n == SEDA_ERRORS_KEPT) {
            i = SEDA_ERRORS_KEPT - 1;
            drop = s->errs[i].msg;
        } else {
            i = s->errs_n++;
        }
        e = (struct seda__err){ copy, now, now, 1 };
    }
    memmove(&s->errs[1], &s->errs[0], (size_t)i * sizeof s->errs[0]);
    s->errs[0] = e;
    seda__mutex_unlock(&s->errs_mu);
    seda__free(drop);
}

int seda_stage_errors(seda_stage_t *st, seda_error **out)
{
    struct seda_stats *s = &st->stats;
    *out = NULL;
    seda__mutex_lock(&s->errs_mu);
    int n = s->errs_n;
    if (n == 0) {
        seda__mutex_unlock(&s->errs_mu);
        return 0;
    }
    /* One block: the array, then the messages it points at.  Allocating
     * under errs_mu is fine: it is a leaf lock and the allocator takes
     * none of ours. */
    size_t bytes = (size_t)n * sizeof(seda_error);
    for (int i = 0; i < n; i++)
        if (s->errs[i].msg)
            bytes += strlen(s->errs[i].msg) + 1;
    seda_error *a = seda__malloc(bytes);
    if (!a) {
        seda__mutex_unlock(&s->errs_mu);
        return SEDA_ENOMEM;
    }
    char *p = (char *)(a + n);
    for (int i = 0; i < n; i++) {
        const struct seda__err *e = &s->errs[i];
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
    seda__mutex_unlock(&s->errs_mu);
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
    err_keep(&st->stats, msg);
    seda__mutex_lock(&st->stats.report_mu);
    if (now - st->stats.report_window >= 1000000000) {
        suppressed = st->stats.report_suppressed;
        st->stats.report_suppressed = 0;
        st->stats.report_window = now;
        st->stats.report_lines = 0;
    }
    if (st->stats.report_lines < 5) {
        st->stats.report_lines++;
        print = true;
    } else {
        st->stats.report_suppressed++;
    }
    seda__mutex_unlock(&st->stats.report_mu);
    seda__mutex_lock(&st->mu);
    st->stats.c.errors++;
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
    out->consumers = atomic_load_explicit(&st->cons.n,
                                          memory_order_acquire);
    seda__mutex_lock(&st->mu);
    out->capacity = st->adm.capacity;
    out->concurrency = st->adm.concurrency;
    out->policy = st->adm.policy;
    /* Counts an inbox ticket whose publisher is mid-way as queued (it
     * was admitted); a ticket voided by a publisher racing a close counts
     * until a taker skips it. */
    out->depth = (int)seda__stage_depth(st);
    /* Envelopes being handled: at most one per drain task, so never above
     * the permits.  What a task has taken and not yet started (up to a
     * batch of a fast handler's, for microseconds) is neither queued nor
     * being handled; the bus's in_system counts it.  A pull stage's are
     * its leases. */
    out->in_flight = st->pull ? st->pl.leased : st->dr.in_flight;
    out->suspended = st->dr.suspended;
    if (!st->pull) {
        /* Drain tasks hold the permits suspended calls do not. */
        int run = atomic_load_explicit(&st->dr.running,
                                       memory_order_relaxed) -
                  st->dr.suspended;
        if (out->in_flight > run)
            out->in_flight = run;
        out->in_flight += st->dr.suspended;
    }
    out->enqueued = st->stats.c.enqueued + seda__inbox_fast_all(&st->in);
    out->delivered = st->stats.c.delivered;
    out->nacked = st->stats.c.nacked;
    out->dropped = st->stats.c.dropped;
    out->dead_lettered = st->stats.c.dead_lettered;
    out->errors = st->stats.c.errors;
    out->completed = st->stats.c.completed;
    out->invalid = st->stats.c.invalid;
    out->refused = st->stats.c.refused;
    out->shed = st->stats.c.shed;
    out->shed_for = st->stats.c.shed_for;
    out->delayed = st->adm.delayed;
    out->shedding = atomic_load_explicit(&st->adm.shed_level,
                                         memory_order_relaxed);
    out->depth_high = (int)seda__queue_count(&st->in.q_high);
    out->depth_low = (int)seda__queue_count(&st->in.q_low);
    out->handed_off = st->stats.c.it_remote;
    /* Rate over the newest sample and the oldest within 5 s of now. */
    int64_t now = seda__clock_ns();
    uint64_t d_now = st->stats.c.delivered;
    for (int k = st->stats.rate_n; k >= 1; k--) {
        int idx = (st->stats.rate_head - k + 64) % 64;
        int64_t dt = now - st->stats.rate[idx].t;
        if (dt <= 5000000000LL && dt > 0) {
            out->rate = (double)(d_now - st->stats.rate[idx].delivered) * 1e9 /
                        (double)dt;
            break;
        }
    }
    seda__mutex_unlock(&st->mu);
    seda__mutex_lock(&st->stats.hist_mu);
    out->sojourn_p50 = seda__hist_quantile(&st->stats.sojourn, 0.50) / 1e3;
    out->sojourn_p99 = seda__hist_quantile(&st->stats.sojourn, 0.99) / 1e3;
    out->sojourn_p999 = seda__hist_quantile(&st->stats.sojourn, 0.999) / 1e3;
    out->sojourn_max = (double)st->stats.sojourn.max / 1e3;
    out->service_p50 = seda__hist_quantile(&st->stats.service, 0.50) / 1e3;
    out->service_p99 = seda__hist_quantile(&st->stats.service, 0.99) / 1e3;
    out->service_p999 = seda__hist_quantile(&st->stats.service, 0.999) / 1e3;
    out->service_max = (double)st->stats.service.max / 1e3;
    out->sojourn_count = st->stats.sojourn.count;
    out->sojourn_sum = (double)st->stats.sojourn.sum / 1e3;
    out->service_count = st->stats.service.count;
    out->service_sum = (double)st->stats.service.sum / 1e3;
    seda__mutex_unlock(&st->stats.hist_mu);
}
