/* SPDX-License-Identifier: MIT */
/*
 * stats.h -- what a stage counts and remembers (stats.c): its counters,
 * latency histograms, delivery-rate samples, the recent-errors ring and
 * the rate limiter of its error reports.  stats.c sees only this part;
 * seda_stage_stats_get (stage_new.c) reads it with the other parts.
 *
 * Locking:
 *   c, rate[], rate_n, rate_head: guarded by the stage's mu.  c is a
 *   tally: core files that hold mu add to it (a drain task folds a
 *   batch's tally in at once: seda__stats_fold); stats.c and the stage's
 *   snapshot (seda_stage_stats_get) read it.
 *   hist_mu guards sojourn and service; report_mu the rate limiter;
 *   errs_mu the ring.  All three are leaf locks (taken after mu, never
 *   two at once).
 */
#ifndef SEDA_STATS_H
#define SEDA_STATS_H

#include "env.h"
#include "hist.h"
#include "seda_int.h"
#include "tally.h"

struct seda__err {
    char *msg;                  /* owned copy (cut at SEDA_ERROR_MSG_MAX),
                                   or NULL: no memory to keep it */
    int64_t first_ns;           /* wall clock of its first occurrence */
    int64_t last_ns;            /* wall clock of its latest */
    uint64_t repeats;           /* occurrences folded into this entry */
};

/* The recent window of latency samples: SEDA_WINDOW_SLOTS histograms,
 * each holding one slot_ns period (the window / SEDA_WINDOW_SLOTS),
 * reused round robin; quantiles merge the slots of the last window.
 * Guarded by hist_mu. */
#define SEDA_WINDOW_SLOTS 10
struct seda_window {
    int64_t slot_ns;            /* one slot's period; immutable */
    int64_t epoch[SEDA_WINDOW_SLOTS]; /* the period (clock / slot_ns) each
                                   slot holds; 0: none yet */
    struct seda_hist sojourn[SEDA_WINDOW_SLOTS];
    struct seda_hist service[SEDA_WINDOW_SLOTS];
};

/* One kept dead letter: the public record, its pointers into blob (one
 * allocation: the headers' pointer array, then the error, the payload's
 * first bytes and the header strings). */
struct seda__dead {
    seda_dead_letter d;
    char *blob;                 /* owned */
    size_t blob_len;
};

struct seda_stats {
    _Alignas(64) struct stage_counters c; /* guarded by mu; its own line */
    struct {
        int64_t t;              /* clock ns */
        uint64_t delivered;     /* c.delivered then */
    } rate[64];                 /* samples >= 100 ms apart; guarded by mu */
    int rate_n;                 /* samples stored (<= 64); guarded by mu */
    int rate_head;              /* next slot; guarded by mu */
    seda__mutex_t hist_mu;      /* guards sojourn, service; a leaf lock */
    struct seda_hist sojourn;   /* admission -> handler start, since the
                                   stage was made, but for the samples
                                   still in the window's live slots (see
                                   window_slot in stats.c); hist_mu */
    struct seda_hist service;   /* handler run time, likewise; hist_mu */
    struct seda_window *win;    /* the recent window; hist_mu (the pointer
                                   is immutable) */
    seda__mutex_t report_mu;    /* guards the three below; a leaf lock */
    int64_t report_window;      /* start of the current second */
    int report_lines;           /* lines in this window */
    uint64_t report_suppressed; /* lines not printed */
    seda__mutex_t errs_mu;      /* guards errs and errs_n; a leaf lock */
    struct seda__err errs[SEDA_ERRORS_KEPT]; /* [0] the newest */
    int errs_n;                 /* entries kept */
    seda__mutex_t dl_mu;        /* guards dl, dl_n, dl_head; a leaf lock */
    struct seda__dead *dl;      /* ring of dl_keep, made on first use */
    int dl_keep;                /* its size (0: keep none); immutable */
    int dl_n;                   /* entries in it */
    int dl_head;                /* the next slot to write */
};

/* 0 or SEDA_ENOMEM.  window_ns: the recent window latency quantiles
 * cover. */
SEDA__API int seda__stats_init(struct seda_stats *s, int64_t window_ns,
                               int dead_keep);
/* Free; prints a last window's count of suppressed reports for `name`. */
SEDA__API void seda__stats_free(struct seda_stats *s, const char *name);

/* Add tally into the counters (the stage's mu held, or a tally of one's
 * own). */
SEDA__API void seda__stats_fold(struct stage_counters *into,
                                const struct stage_counters *from);

/* Latency samples, ns (negative counts as 0): a batch of n pairs, or one
 * sojourn or one service alone (< 0: none).  Take hist_mu. */
SEDA__API void seda__stats_latency(struct seda_stats *s,
                                   const int64_t *sojourn,
                                   const int64_t *service, int n);
SEDA__API void seda__stats_latency_one(struct seda_stats *s, int64_t sojourn,
                                       int64_t service);

/* Keep a dead letter of env (headers already added) in the ring: the
 * reason, the missing stage's name for no_such_stage (or NULL), the
 * wall-clock time in seconds.  Best effort: out of memory keeps none.
 * Takes dl_mu. */
SEDA__API void seda__stats_dead(struct seda_stats *s, const seda_env_t *env,
                                const char *reason, const char *missing,
                                double at);

/* The SEDA_DEAD_* index of a reason word. */
SEDA__API int seda__stats_dead_reason(const char *reason);

/* Record a delivery-rate sample at most every 100 ms (mu held). */
SEDA__API void seda__stats_rate_sample(struct seda_stats *s, int64_t now);

/* The part's side of the stage's public readers (stage_new.c passes the
 * part; each takes its own leaf lock): seda_stage_errors,
 * seda_stage_dead_letters and seda_stage_histogram, as seda.h says. */
SEDA__API int seda__stats_errors(struct seda_stats *s, seda_error **out);
SEDA__API int seda__stats_dead_letters(struct seda_stats *s,
                                       seda_dead_letter **out);
SEDA__API int seda__stats_histogram(struct seda_stats *s, int which,
                                    const double *le, int n, uint64_t *cum,
                                    uint64_t *count, double *sum);

/* seda_stage_report for the stage named `name`, whose mu (not held)
 * guards s->c: keep msg in the ring, count it, log it within the rate
 * limit.  Any thread. */
SEDA__API void seda__stats_report(struct seda_stats *s, const char *name,
                                  seda__mutex_t *mu, const char *msg);

/* The latency figures of seda_stage_stats_get (the window's quantiles
 * and maxima, the lifetime counts and sums) into out.  Takes hist_mu. */
SEDA__API void seda__stats_latency_get(struct seda_stats *s,
                                       seda_stage_stats *out);

#endif /* SEDA_STATS_H */
