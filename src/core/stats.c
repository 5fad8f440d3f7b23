/* SPDX-License-Identifier: MIT */
/*
 * stats.c -- what a stage counts and remembers: its counters (a tally the
 * core's files add to under the stage lock), the latency histograms, the
 * delivery-rate samples, the recent-errors ring and the rate limit on
 * error reports.  It sees only its part (struct seda_stats): the stage's
 * public readers (stage_new.c) pass it.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "seda_int.h"
#include "stats.h"

/* ---- making ---- */

int seda__stats_init(struct seda_stats *s, int64_t window_ns, int dead_keep)
{
    s->dl_keep = dead_keep > 0 ? dead_keep : 0;
    seda__mutex_init(&s->dl_mu);
    /* Large and mostly untouched (a slot is written only when samples
     * land in it): calloc's pages stay unbacked until then. */
    if (!(s->win = seda__calloc(1, sizeof *s->win)))
        return SEDA_ENOMEM;
    int64_t slot = window_ns / SEDA_WINDOW_SLOTS;
    s->win->slot_ns = slot > 0 ? slot : 1;
    seda__mutex_init(&s->hist_mu);
    seda__mutex_init(&s->report_mu);
    seda__mutex_init(&s->errs_mu);
    return 0;
}

void seda__stats_free(struct seda_stats *s, const char *name)
{
    if (s->report_suppressed) {         /* the last window's count */
        char line[96];
        snprintf(line, sizeof line, "%llu similar errors suppressed",
                 (unsigned long long)s->report_suppressed);
        seda_log_write(SEDA_LOG_WARN, name, line);
    }
    seda__mutex_destroy(&s->hist_mu);
    seda__mutex_destroy(&s->report_mu);
    for (int i = 0; i < s->errs_n; i++)
        seda__free(s->errs[i].msg);
    seda__mutex_destroy(&s->errs_mu);
    seda__free(s->win);
    for (int i = 0; s->dl && i < s->dl_keep; i++)
        seda__free(s->dl[i].blob);
    seda__free(s->dl);
    seda__mutex_destroy(&s->dl_mu);
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
    for (int k = 0; k < SEDA__DEAD_N; k++)
        into->dead_by[k] += from->dead_by[k];
}

static inline uint64_t nonneg(int64_t v)
{
    return v > 0 ? (uint64_t)v : 0;
}

/* ---- the recent window ----
 *
 * HOW IT WORKS
 *   Time is cut in periods of slot_ns (window / 10).  Period p's samples
 *   go into slot p % 10, which is cleared first when it still holds an
 *   older period.  A read merges the slots whose period is one of the
 *   last ten, the current one included: a window of 10 s covers the last
 *   9 to 10 s.  Example, slot_ns 1 s: a sample at t = 23.4 s lands in
 *   slot 3 (period 23); a read at t = 31.2 s merges periods 22..31, so it
 *   still sees it, and one at t = 33.0 s (periods 24..33) no longer does.
 */

/* The slot for now's period (hist_mu held).  One that held an older
 * period is folded into the lifetime histograms first, then cleared:
 * each sample is added once, to its slot, and reaches the lifetime
 * histograms when its slot is reused (readers of the lifetime figures
 * add the slots not folded yet: lifetime_merge). */
static int window_slot(struct seda_stats *s, int64_t now)
{
    struct seda_window *w = s->win;
    int64_t p = now / w->slot_ns + 1;   /* + 1: 0 means "none yet" */
    int k = (int)(p % SEDA_WINDOW_SLOTS);
    if (w->epoch[k] != p) {
        if (w->epoch[k]) {
            seda__hist_merge(&s->sojourn, &w->sojourn[k]);
            seda__hist_merge(&s->service, &w->service[k]);
        }
        memset(&w->sojourn[k], 0, sizeof w->sojourn[k]);
        memset(&w->service[k], 0, sizeof w->service[k]);
        w->epoch[k] = p;
    }
    return k;
}

/* The lifetime histograms: what recycled slots folded in plus the slots
 * still live (hist_mu held). */
static void lifetime_merge(struct seda_stats *s, struct seda_hist *so,
                           struct seda_hist *sv)
{
    *so = s->sojourn;
    *sv = s->service;
    for (int k = 0; k < SEDA_WINDOW_SLOTS; k++) {
        if (!s->win->epoch[k])
            continue;
        seda__hist_merge(so, &s->win->sojourn[k]);
        seda__hist_merge(sv, &s->win->service[k]);
    }
}

void seda__stats_latency(struct seda_stats *s, const int64_t *sojourn,
                         const int64_t *service, int n)
{
    int64_t now = seda__clock_ns();
    seda__mutex_lock(&s->hist_mu);
    int k = window_slot(s, now);
    struct seda_hist *wso = &s->win->sojourn[k], *wsv = &s->win->service[k];
    for (int i = 0; i < n; i++) {
        if (service[i] < 0)
            continue;                   /* suspended: counted at settle */
        seda__hist_add(wso, nonneg(sojourn[i]));
        seda__hist_add(wsv, (uint64_t)service[i]);
    }
    seda__mutex_unlock(&s->hist_mu);
}

void seda__stats_latency_one(struct seda_stats *s, int64_t sojourn,
                             int64_t service)
{
    int64_t now = seda__clock_ns();
    seda__mutex_lock(&s->hist_mu);
    int k = window_slot(s, now);
    if (sojourn >= 0)
        seda__hist_add(&s->win->sojourn[k], (uint64_t)sojourn);
    if (service >= 0)
        seda__hist_add(&s->win->service[k], (uint64_t)service);
    seda__mutex_unlock(&s->hist_mu);
}

/* Merge the window's slots of the last SEDA_WINDOW_SLOTS periods into
 * *so and *sv (hist_mu held). */
static void window_merge(struct seda_window *w, int64_t now,
                         struct seda_hist *so, struct seda_hist *sv)
{
    memset(so, 0, sizeof *so);
    memset(sv, 0, sizeof *sv);
    int64_t p = now / w->slot_ns + 1;
    for (int k = 0; k < SEDA_WINDOW_SLOTS; k++) {
        if (w->epoch[k] == 0 || w->epoch[k] <= p - SEDA_WINDOW_SLOTS)
            continue;
        seda__hist_merge(so, &w->sojourn[k]);
        seda__hist_merge(sv, &w->service[k]);
    }
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

int seda__stats_errors(struct seda_stats *s, seda_error **out)
{
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

static const char *const dead_names[] = {
    "max_attempts", "no_consumers", "no_such_stage", "hop_refused", "type",
    "other",
};

const char *seda_dead_reason_name(int reason)
{
    return reason >= 0 && reason < SEDA_DEAD_REASONS ? dead_names[reason]
                                                     : NULL;
}

int seda__stats_dead_reason(const char *reason)
{
    for (int k = 0; k < SEDA_DEAD_REASONS - 1; k++)
        if (strcmp(reason, dead_names[k]) == 0)
            return k;
    return SEDA_DEAD_OTHER;
}

/* ---- dead letters ----
 *
 * The last dl_keep dead letters of the stage, oldest overwritten first.
 * A record is one allocation (seda__dead's blob) so that copying one out
 * is one memcpy and a pointer fix-up.
 */

#define DEAD_PAYLOAD_KEEP 256

void seda__stats_dead(struct seda_stats *s, const seda_env_t *env,
                      const char *reason, const char *missing, double at)
{
    if (s->dl_keep == 0)
        return;
    struct seda__dead r;
    char *blob = seda__env_snapshot(env, DEAD_PAYLOAD_KEEP, true, &r.d,
                                    &r.blob_len);
    if (!blob)
        return;
    r.blob = blob;
    snprintf(r.d.reason, sizeof r.d.reason, "%s", reason);
    if (missing)
        snprintf(r.d.missing, sizeof r.d.missing, "%s", missing);
    r.d.at = at;
    char *drop = NULL;
    seda__mutex_lock(&s->dl_mu);
    if (!s->dl)
        s->dl = seda__calloc((size_t)s->dl_keep, sizeof *s->dl);
    if (s->dl) {
        drop = s->dl[s->dl_head].blob;
        s->dl[s->dl_head] = r;
        s->dl_head = (s->dl_head + 1) % s->dl_keep;
        if (s->dl_n < s->dl_keep)
            s->dl_n++;
    } else {
        drop = blob;
    }
    seda__mutex_unlock(&s->dl_mu);
    seda__free(drop);
}

/* Move a pointer of a record into its copy at base. */
static const void *relocate(const void *ptr, const char *from, char *to)
{
    return ptr ? to + ((const char *)ptr - from) : NULL;
}

int seda__stats_dead_letters(struct seda_stats *s, seda_dead_letter **out)
{
    *out = NULL;
    seda__mutex_lock(&s->dl_mu);
    int n = s->dl_n;
    if (n == 0) {
        seda__mutex_unlock(&s->dl_mu);
        return 0;
    }
    size_t bytes = (size_t)n * sizeof(seda_dead_letter);
    for (int i = 0; i < n; i++)
        bytes += (s->dl[i].blob_len + 7) & ~(size_t)7;
    seda_dead_letter *a = seda__malloc(bytes);     /* leaf lock: fine */
    if (!a) {
        seda__mutex_unlock(&s->dl_mu);
        return SEDA_ENOMEM;
    }
    char *q = (char *)(a + n);
    for (int i = 0; i < n; i++) {
        /* Newest first. */
        const struct seda__dead *r =
            &s->dl[(s->dl_head - 1 - i + 2 * s->dl_keep) % s->dl_keep];
        a[i] = r->d;
        memcpy(q, r->blob, r->blob_len);
        a[i].error = relocate(r->d.error, r->blob, q);
        a[i].payload = relocate(r->d.payload, r->blob, q);
        const char **hv = (const char **)(void *)q;
        for (int k = 0; k < 2 * r->d.nheaders; k++)
            hv[k] = relocate(r->d.headers[k], r->blob, q);
        a[i].headers = r->d.nheaders ? hv : NULL;
        q += (r->blob_len + 7) & ~(size_t)7;
    }
    seda__mutex_unlock(&s->dl_mu);
    *out = a;
    return n;
}

void seda_dead_letters_free(seda_dead_letter *dl)
{
    seda__free(dl);
}

/* ---- error reports ---- */

int seda__stats_histogram(struct seda_stats *s, int which, const double *le,
                          int n, uint64_t *cum, uint64_t *count,
                          double *sum)
{
    if (n < 0 || (n > 0 && (!le || !cum)) ||
        (which != SEDA_HIST_SOJOURN && which != SEDA_HIST_SERVICE))
        return SEDA_EINVAL;
    static _Thread_local struct seda_hist lso, lsv;    /* off the stack */
    seda__mutex_lock(&s->hist_mu);
    lifetime_merge(s, &lso, &lsv);
    const struct seda_hist *h = which == SEDA_HIST_SOJOURN ? &lso : &lsv;
    for (int i = 0; i < n; i++)
        cum[i] = seda__hist_count_le(h, le[i]);
    if (count)
        *count = h->count;
    if (sum)
        *sum = (double)h->sum / 1e9;
    seda__mutex_unlock(&s->hist_mu);
    return 0;
}

void seda__stats_report(struct seda_stats *s, const char *name,
                        seda__mutex_t *mu, const char *msg)
{
    int64_t now = seda__now_ns();
    uint64_t suppressed = 0;
    bool print = false;
    err_keep(s, msg);
    seda__mutex_lock(&s->report_mu);
    if (now - s->report_window >= 1000000000) {
        suppressed = s->report_suppressed;
        s->report_suppressed = 0;
        s->report_window = now;
        s->report_lines = 0;
    }
    if (s->report_lines < 5) {
        s->report_lines++;
        print = true;
    } else {
        s->report_suppressed++;
    }
    seda__mutex_unlock(&s->report_mu);
    seda__mutex_lock(mu);
    s->c.errors++;
    seda__mutex_unlock(mu);
    if (suppressed) {
        char line[96];
        snprintf(line, sizeof line, "%llu similar errors suppressed",
                 (unsigned long long)suppressed);
        seda_log_write(SEDA_LOG_WARN, name, line);
    }
    if (print)
        seda_log_write(SEDA_LOG_ERROR, name, msg);
}

/* ---- stats ---- */

void seda__stats_latency_get(struct seda_stats *s, seda_stage_stats *out)
{
    /* Quantiles and maxima over the recent window; counts and sums since
     * the stage was made (a Prometheus summary's _count and _sum). */
    static _Thread_local struct seda_hist wso, wsv, lso, lsv; /* 18 KiB:
                                                         off the stack */
    seda__mutex_lock(&s->hist_mu);
    window_merge(s->win, seda__clock_ns(), &wso, &wsv);
    lifetime_merge(s, &lso, &lsv);
    out->window = (double)(s->win->slot_ns * SEDA_WINDOW_SLOTS) / 1e9;
    out->sojourn_p50 = seda__hist_quantile(&wso, 0.50) / 1e3;
    out->sojourn_p99 = seda__hist_quantile(&wso, 0.99) / 1e3;
    out->sojourn_p999 = seda__hist_quantile(&wso, 0.999) / 1e3;
    out->sojourn_max = (double)wso.max / 1e3;
    out->service_p50 = seda__hist_quantile(&wsv, 0.50) / 1e3;
    out->service_p99 = seda__hist_quantile(&wsv, 0.99) / 1e3;
    out->service_p999 = seda__hist_quantile(&wsv, 0.999) / 1e3;
    out->service_max = (double)wsv.max / 1e3;
    out->window_count = wso.count;
    out->sojourn_count = lso.count;
    out->sojourn_sum = (double)lso.sum / 1e3;
    out->service_count = lsv.count;
    out->service_sum = (double)lsv.sum / 1e3;
    seda__mutex_unlock(&s->hist_mu);
}
