/* SPDX-License-Identifier: MIT */
/*
 * hist.c -- the request-latency histogram of seda_http.h
 * (seda_http_hist): fixed bounds, as a Prometheus histogram has them, so
 * processes and instances aggregate (histogram_quantile over the sum of
 * their rates).  Apart from the server so that any server fills it with
 * one call per answer.
 *
 * Locking: none of its own; the caller's lock guards the struct.
 */
#include "seda_http.h"

/* Seconds: from 100 us (a cached answer) to a minute (past the default
 * 30 s timeout, answered 504). */
const double seda_http_hist_le[SEDA_HTTP_HIST_N] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
};

void seda_http_hist_add(seda_http_hist *h, double seconds)
{
    if (!(seconds > 0))                 /* negative, or nan */
        seconds = 0;
    int i = 0;
    while (i < SEDA_HTTP_HIST_N && seconds > seda_http_hist_le[i])
        i++;
    h->n[i]++;
    h->count++;
    h->sum += seconds;
}
