/* SPDX-License-Identifier: MIT */
/*
 * harness.h -- the benchmark's shared harness: run settings, output rows,
 * the latency recorder, buses under test and producer threads.  Every
 * config file (floors.c, capacity.c, codec.c, pipeline.c, memory.c,
 * durable.c, count.c, fanout.c) uses this and nothing of the others;
 * the driver, bench.c, calls them through families.h.
 *
 * DESIGN
 *   - harness.c (settings, progress, rows), recorder.c (latency samples,
 *     benchrec for Lua handlers), inst.c (buses under test, producers,
 *     pre-encoded table payloads).
 *   - Latency samples go into per-slot arrays (one slot per pool worker plus
 *     one for non-worker threads), reserved with mmap(MAP_NORESERVE) so the
 *     hot path is one store and an increment; percentiles are computed after
 *     the clock by selection, which yields exactly the nearest-rank values
 *     a full sort would.
 *   - A row is built field by field in a fixed buffer and written as one
 *     line to stdout and to the results file.
 */
#ifndef SEDA_BENCH_HARNESS_H
#define SEDA_BENCH_HARNESS_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include <lua.h>

#include "seda.h"

/* ---- run settings ---- */

struct bench_cfg {
    bool quick;             /* short windows, one trial */
    bool want_c, want_lua;  /* handler selection */
    int producers;          /* P = min(8, CPUs) */
    int cpus;
    double calib_s;         /* calibration window (2 s) */
    double window_s;        /* sweep window (4 s) */
    int calib_runs;         /* 2 */
    int sweep_trials;       /* 2 */
    int fire_trials;        /* 3 */
    long fire_total;        /* 200000 */
    const char *tmpdir;     /* handler files live here */
    double floor_lua;       /* median lua_call rate, calls/s */
    double floor_ring;      /* median mutex_ring rate, items/s */
    double t0;              /* suite start, for progress */
};

extern struct bench_cfg g_cfg;
extern FILE *g_bench_out;            /* results file, or NULL (driver) */

/* Progress line on stderr, prefixed with the suite's elapsed time. */
void bench_progress(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Sleep until the monotonic time t (seconds, seda_now() scale). */
void bench_sleep_until(double t);

/* Median of v[0..n) (v is reordered); 0 for n == 0. */
double bench_median(double *v, int n);

/* ---- output rows ---- */

struct row {
    char buf[2048];
    size_t n;
};

/* Start a row with language, handler and config. */
void row_begin(struct row *r, const char *handler, const char *config);
void row_str(struct row *r, const char *k, const char *v);
void row_int(struct row *r, const char *k, long long v);
void row_num(struct row *r, const char *k, double v, int decimals);
void row_bool(struct row *r, const char *k, bool v);
/* A field whose value is JSON text already (an array, say). */
void row_json(struct row *r, const char *k, const char *json);
/* Close the row and write it to stdout and the results file. */
void row_end(struct row *r);

/* ---- latency recorder ---- */

#define REC_SLOTS 33                 /* up to 32 workers + 1 other */

struct rec_slot {
    float *v;                        /* microseconds */
    size_t n;
    size_t cap;
    char pad[40];                    /* keep slots on separate lines */
};

struct latency {
    size_t n;                        /* samples */
    double p50, p99, p999, max;      /* microseconds */
    bool truncated;                  /* a slot ran out of room */
};

/* Reserve the slots (once). */
int rec_init(void);
/* Forget every sample and give the pages back. */
void rec_reset(void);
/* Record one latency in seconds for the calling thread's slot.  A pool
 * worker uses slot seda_worker_index(); any other thread uses the last
 * slot (only one such thread may record at a time). */
void rec_add(double seconds);
/* Number of samples so far. */
size_t rec_count(void);
/* Merge, select the nearest-rank percentiles, fill *out. */
void rec_latency(struct latency *out);
/* Append the latency fields (p50_us .. max_us) to a row. */
void row_latency(struct row *r, const struct latency *l);
/* Write every sample (float microseconds, native order) to f; returns how
 * many (another process merges them: the remote config's consumers). */
size_t rec_dump(FILE *f);

/* require "benchrec" in worker states: rec(payload) reads the 8-byte
 * double timestamp at the start of the payload string, rec_ts(ts, ...)
 * takes the timestamp as a number. */
int luaopen_benchrec(lua_State *L);

/* ---- buses under test (inst.c) ---- */

#define INST_MAX_STAGES 8

/* A bus under test: C consumers on a bus made with seda_bus_new, or Lua
 * handlers on a bus made from Lua on a fresh main lua_State. */
struct inst {
    bool lua;
    lua_State *L;                       /* main state (Lua only) */
    seda_bus_t *bus;
    int nst;
    seda_stage_t *st[INST_MAX_STAGES];
};

/* The default chunk: stages "bench" (n == 1) or "bench0".."bench<n-1>".
 * A chunk receives (seda, handler_file, n, capacity, concurrency) and
 * returns the bus. */
extern const char *const INST_STAGES_CHUNK;

/* C: n stages named as above, each with the C consumer fn (ud: the stage's
 * index); Lua: run chunk.  Returns 0 or -1 (message on stderr). */
int inst_open(struct inst *in, bool lua, const char *chunk,
              const char *hfile, int n, int capacity, int concurrency,
              seda_consumer_fn fn);
/* Shut the bus down (timeout s); returns seda_bus_shutdown's result. */
int inst_shutdown(struct inst *in, double timeout);
/* Free everything (lua_close for Lua). */
void inst_close(struct inst *in);
/* Sum of the stages' delivered counters, and of their depths. */
long inst_delivered(struct inst *in);
int inst_depth(struct inst *in);

/* One producer thread. */
struct prod {
    seda_stage_t *st;
    double start;               /* begin at this seda_now() */
    double deadline;            /* stop once reached (0: none) */
    long limit;                 /* stop after this many (0: none) */
    double rate;                /* envelopes/s, paced in ticks; 0: unpaced */
    double tick;                /* the pacing tick, s (0: 20 ms) */
    const unsigned char *tmpl;  /* payload template */
    size_t len;
    int ts_off;                 /* where the double timestamp goes */
    int kind;                   /* payload kind tag */
    const char *const *slip;
    int nslip;
    seda_done_fn done;
    void *done_ud;
    int tolerate;               /* a refusal that is counted, not fatal
                                   (e.g. SEDA_ESHED), or 0 */
    /* results */
    long published;
    long errors;
    long tolerated;             /* refusals of kind `tolerate` */
    int last_err;
    double end;                 /* when it stopped */
    pthread_t th;
};

/* Start n producers and join them.  Returns 0 or -1. */
int prods_start(struct prod *p, int n);
void prods_join(struct prod *p, int n);

/* Encode the Lua table constructor expr (with the float 12345.678901 where
 * the timestamp goes) with the payload codec; fills buf, *len and *ts_off.
 * Returns 0 or -1. (inst.c) */
int bench_encode_table(const char *expr, unsigned char *buf, size_t cap,
                       size_t *len, int *ts_off);
#define BENCH_TS_SENTINEL 12345.678901

/* Write name into g_cfg.tmpdir; returns the malloc'd path or NULL. */
char *bench_write_file(const char *name, const char *text);

#endif /* SEDA_BENCH_HARNESS_H */
