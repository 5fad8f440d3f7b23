/* SPDX-License-Identifier: MIT */
/*
 * hist.c -- quantiles of the log-bucket histograms (see hist.h).
 */
#include "hist.h"

void seda__hist_bounds(int i, uint64_t *lo, uint64_t *hi)
{
    if (i < 16) {
        *lo = (uint64_t)i;
        *hi = (uint64_t)i;
        return;
    }
    int m = i / 16 + 3;                 /* top bit position */
    uint64_t sub = (uint64_t)(i % 16);
    uint64_t step = UINT64_C(1) << (m - 4);
    *lo = (UINT64_C(1) << m) + sub * step;
    *hi = *lo + step - 1;
}

double seda__hist_quantile(const struct seda_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    uint64_t rank = (uint64_t)(q * (double)(h->count - 1));
    uint64_t seen = 0;
    for (int i = 0; i < SEDA_HIST_N; i++) {
        seen += h->b[i];
        if (seen > rank) {
            uint64_t lo, hi;
            seda__hist_bounds(i, &lo, &hi);
            double mid = ((double)lo + (double)hi) / 2;
            return mid > (double)h->max ? (double)h->max : mid;
        }
    }
    return (double)h->max;
}

void seda__hist_merge(struct seda_hist *into, const struct seda_hist *from)
{
    if (from->count == 0)
        return;
    for (int i = 0; i < SEDA_HIST_N; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t seda__hist_count_le(const struct seda_hist *h, double le_seconds)
{
    if (!(le_seconds < 1e12))
        return h->count;                /* +Inf (and NaN as +Inf) */
    if (le_seconds < 0)
        return 0;
    double le = le_seconds * 1e9;
    uint64_t n = 0;
    for (int i = 0; i < SEDA_HIST_N; i++) {
        uint64_t lo, hi;
        seda__hist_bounds(i, &lo, &hi);
        if ((double)hi > le)
            break;
        n += h->b[i];
    }
    return n;
}
