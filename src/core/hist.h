/* SPDX-License-Identifier: MIT */
/*
 * hist.h -- fixed-memory log-bucket histograms of nanosecond durations.
 *
 * HOW IT WORKS
 *   Values below 16 get a bucket each.  Above, a value v with its highest
 *   set bit at position m (m >= 4) falls in group m - 3, split into 16
 *   sub-buckets by the 4 bits under the top bit:
 *       index = (m - 3) * 16 + ((v >> (m - 4)) & 15)
 *   e.g. v = 1000 (m = 9): (9 - 3) * 16 + ((1000 >> 5) & 15) = 96 + 15.
 *   A bucket spans 1/16 of its power of two, so a quantile reported at the
 *   bucket's midpoint is within about 3 % of the true value.  Values at or
 *   above 2^40 ns (18 minutes) land in the last bucket.  SEDA_HIST_N
 *   buckets of 8 bytes: about 4.6 KiB per histogram.
 *
 *   Not synchronised: the owner guards it (a stage folds a batch's samples
 *   in under its lock).
 */
#ifndef SEDA_HIST_H
#define SEDA_HIST_H

#include <stdint.h>

#include "seda_int.h"

#define SEDA_HIST_MAXBIT 40
#define SEDA_HIST_N ((SEDA_HIST_MAXBIT - 3) * 16)

struct seda_hist {
    uint64_t count;             /* samples */
    uint64_t sum;               /* their sum, ns (a Prometheus summary's
                                   _sum; wraps after 584 years) */
    uint64_t max;               /* largest sample, ns */
    uint64_t b[SEDA_HIST_N];    /* per-bucket counts */
};

static inline int seda__hist_index(uint64_t v)
{
    if (v < 16)
        return (int)v;
    int m = 63 - __builtin_clzll(v);
    if (m >= SEDA_HIST_MAXBIT)
        return SEDA_HIST_N - 1;
    return (m - 3) * 16 + (int)((v >> (m - 4)) & 15);
}

static inline void seda__hist_add(struct seda_hist *h, uint64_t v)
{
    h->b[seda__hist_index(v)]++;
    h->count++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
}

/* The value at quantile q (0..1) by nearest rank over the buckets, in ns:
 * the midpoint of the bucket holding rank floor(q * (count - 1)), never
 * above max.  0 when empty. */
SEDA__API double seda__hist_quantile(const struct seda_hist *h, double q);

/* Add from's samples into into. */
SEDA__API void seda__hist_merge(struct seda_hist *into,
                                const struct seda_hist *from);

/* Samples whose bucket lies wholly at or below le_seconds (a histogram's
 * cumulative bucket, to the buckets' 1/16 resolution); every sample for
 * +Inf. */
SEDA__API uint64_t seda__hist_count_le(const struct seda_hist *h,
                                       double le_seconds);

/* Lower and upper bound of bucket i (for tests and exposition). */
SEDA__API void seda__hist_bounds(int i, uint64_t *lo, uint64_t *hi);

#endif /* SEDA_HIST_H */
