/* SPDX-License-Identifier: MIT */
/*
 * harness.c -- what every config shares: run settings, progress, the output
 * rows (stdout and the results file), small helpers.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "harness.h"
#include "seda_lua.h"

struct bench_cfg g_cfg;
FILE *g_bench_out;                   /* results file, or NULL */

/* ---- helpers ---- */

void bench_progress(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "[bench %6.1fs] ", seda_now() - g_cfg.t0);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* t is on seda_now()'s clock, which is TSC-based and may run a little
 * fast or slow against CLOCK_MONOTONIC (115 ppm on the 2-vCPU VM: 11 ms
 * after 100 s).  Sleeping until t on CLOCK_MONOTONIC itself made every
 * 20 ms pacing tick late by the accumulated difference, and the paced
 * rows fall short of their targets more the later they ran.  So convert:
 * the monotonic now plus what is left on seda_now()'s clock. */
void bench_sleep_until(double t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double left = t - seda_now();
    if (left <= 0)
        return;
    double m = (double)now.tv_sec + (double)now.tv_nsec / 1e9 + left;
    struct timespec ts;
    ts.tv_sec = (time_t)m;
    ts.tv_nsec = (long)((m - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

char *bench_write_file(const char *name, const char *text)
{
    size_t n = strlen(g_cfg.tmpdir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path)
        return NULL;
    snprintf(path, n, "%s/%s", g_cfg.tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "bench: cannot write %s\n", path);
        free(path);
        return NULL;
    }
    return path;
}

/* ---- rows ---- */

static void row_put(struct row *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void row_put(struct row *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->buf + r->n, sizeof r->buf - r->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        r->n = r->n + (size_t)k < sizeof r->buf ? r->n + (size_t)k
                                                 : sizeof r->buf - 1;
}

void row_begin(struct row *r, const char *handler, const char *config)
{
    r->n = 0;
    r->buf[0] = 0;
    row_put(r, "{\"language\":\"c\",\"handler\":\"%s\",\"config\":\"%s\"",
            handler, config);
}

void row_str(struct row *r, const char *k, const char *v)
{
    row_put(r, ",\"%s\":\"%s\"", k, v);
}

void row_int(struct row *r, const char *k, long long v)
{
    row_put(r, ",\"%s\":%lld", k, v);
}

void row_num(struct row *r, const char *k, double v, int decimals)
{
    if (!isfinite(v))
        row_put(r, ",\"%s\":null", k);
    else
        row_put(r, ",\"%s\":%.*f", k, decimals, v);
}

void row_bool(struct row *r, const char *k, bool v)
{
    row_put(r, ",\"%s\":%s", k, v ? "true" : "false");
}

void row_json(struct row *r, const char *k, const char *json)
{
    row_put(r, ",\"%s\":%s", k, json);
}

void row_end(struct row *r)
{
    row_put(r, "}");
    fprintf(stdout, "%s\n", r->buf);
    fflush(stdout);
    if (g_bench_out) {
        fprintf(g_bench_out, "%s\n", r->buf);
        fflush(g_bench_out);
    }
}
