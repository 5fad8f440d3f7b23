/* SPDX-License-Identifier: MIT */
/*
 * bench.c -- the seda-lua benchmark suite: command line, output rows,
 * latency recorder, and the floors.
 *
 * The workload is the cross-language SEDA-bus benchmark of
 * /work/shared/WORKLOAD.md, run with a C consumer and with a Lua handler
 * (`handler` "c" / "lua"), plus configs of our own: cap1_table, codec,
 * pipeline, reload, memory, durable1, durable_batch, durable_pipeline.
 * One JSON object per trial goes to stdout and
 * to the results file; progress goes to stderr.
 *
 *     seda-bench [--config NAME]... [--handler c|lua] [--quick]
 *                [--out FILE] [--help]
 *
 * Floors (lua_call, lua_call_1arg, mutex_ring) are measured first in every
 * run, because each stage row carries its throughput as a fraction of the
 * matching floor (`floor`, `floor_ratio`): Lua rows against lua_call, C
 * rows against mutex_ring.
 *
 * Fields added to the WORKLOAD.md rows (never changed or removed):
 *   workers            pool threads of the bus (default: CPUs)
 *   latency            "array": every sample kept, nearest rank exact
 *   floor, floor_ratio the matching floor and throughput_eps / its median
 *   max_throughput_eps capacity rows: the calibrated maximum
 *   achieved_rate_eps  calibration rows: total / elapsed (the rate that
 *                      max_throughput_eps is the larger of)
 *   samples            only when the latency sample count != delivered
 *   lost               only when delivered != total (a runtime bug)
 *   publish_errors     only when a publish was refused (with the reason)
 *   payload, payload_bytes  cap1_table: the 5-field table ("table5")
 *   reloads, reload_failed, delivered_eq_published   reload rows
 * Own configs: cap1_table and reload rows have the capacity-row shape;
 * pipeline rows the firehose shape plus itineraries_per_s,
 * handler_calls_per_s, hops_delivered (latency from the envelope's publish
 * time to its completion callback); codec rows ns_per_roundtrip, bytes,
 * iterations; memory rows payload, payload_bytes, count, depth, in_flight,
 * rss_delta_bytes, bytes_per_envelope; floor rows name, rate_per_s.
 * Durable rows (durable1, durable_batch, durable_pipeline; Lua handlers,
 * one C producer, see bench_durable.c): sync ("normal"/"full"),
 * publish_p50_us, publish_p99_us (time inside the publish call, one
 * sample per call), publish_p999_us, publish_max_us, publish_calls, batch,
 * durable, capacity, window_ms, end_of_window_depth, drain_tail_ms,
 * journal_rows_left (rows still in the journal after a drained shutdown:
 * should be 0); elapsed_ms runs from the first publish to drained.
 * durable_pipeline adds stages, itineraries_per_s, handler_calls_per_s,
 * hops_delivered, latency_from.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bench.h"
#include "seda_lua.h"

struct bench_cfg g_cfg;
static FILE *g_out;                  /* results file, or NULL */

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

void row_end(struct row *r)
{
    row_put(r, "}");
    fprintf(stdout, "%s\n", r->buf);
    fflush(stdout);
    if (g_out) {
        fprintf(g_out, "%s\n", r->buf);
        fflush(g_out);
    }
}

/* ---- latency recorder ---- */

/* Samples per slot (1 GiB virtual, touched only as far as used): a C
 * consumer at 25 M/s fills 100 M in a 4 s window.  Past it the row says
 * samples_truncated. */
#define REC_CAP ((size_t)256 << 20)

static struct rec_slot g_slot[REC_SLOTS];

int rec_init(void)
{
    for (int i = 0; i < REC_SLOTS; i++) {
        void *p = mmap(NULL, REC_CAP * sizeof(float), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return -1;
        g_slot[i].v = p;
        g_slot[i].cap = REC_CAP;
        g_slot[i].n = 0;
    }
    return 0;
}

void rec_reset(void)
{
    for (int i = 0; i < REC_SLOTS; i++) {
        if (g_slot[i].n) {
            /* Never past the mapping: n keeps counting beyond cap. */
            size_t n = g_slot[i].n < g_slot[i].cap ? g_slot[i].n
                                                   : g_slot[i].cap;
            size_t bytes = n * sizeof(float);
            bytes = (bytes + 4095) & ~(size_t)4095;
            madvise(g_slot[i].v, bytes, MADV_DONTNEED);
        }
        g_slot[i].n = 0;
    }
}

void rec_add(double seconds)
{
    int w = seda_worker_index();
    struct rec_slot *s = &g_slot[w >= 0 && w < REC_SLOTS - 1 ? w
                                                             : REC_SLOTS - 1];
    if (s->n < s->cap)
        s->v[s->n] = (float)(seconds * 1e6);
    s->n++;
}

size_t rec_count(void)
{
    size_t n = 0;
    for (int i = 0; i < REC_SLOTS; i++)
        n += g_slot[i].n;
    return n;
}

/* Rearrange v[lo..hi] so that v[k] holds the value a sort would put there,
 * with nothing larger before it and nothing smaller after it. */
static void select_k(float *v, size_t lo, size_t hi, size_t k)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        float a = v[lo], b = v[mid], c = v[hi];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a))
                            : (a < c ? a : (b < c ? c : b));
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return;
    }
}

void rec_latency(struct latency *out)
{
    memset(out, 0, sizeof *out);
    size_t n = 0;
    for (int i = 0; i < REC_SLOTS; i++) {
        size_t m = g_slot[i].n;
        if (m > g_slot[i].cap) {
            m = g_slot[i].cap;
            out->truncated = true;
        }
        n += m;
    }
    out->n = n;
    if (n == 0)
        return;
    float *all = malloc(n * sizeof *all);
    if (!all) {
        fprintf(stderr, "bench: out of memory merging latencies\n");
        return;
    }
    size_t at = 0;
    for (int i = 0; i < REC_SLOTS; i++) {
        size_t m = g_slot[i].n < g_slot[i].cap ? g_slot[i].n : g_slot[i].cap;
        memcpy(all + at, g_slot[i].v, m * sizeof *all);
        at += m;
    }
    size_t k999 = (size_t)floor(0.999 * (double)(n - 1));
    size_t k99 = (size_t)floor(0.99 * (double)(n - 1));
    size_t k50 = (size_t)floor(0.5 * (double)(n - 1));
    float mx = all[0];
    for (size_t i = 1; i < n; i++)
        if (all[i] > mx)
            mx = all[i];
    select_k(all, 0, n - 1, k999);
    select_k(all, 0, k999, k99);
    select_k(all, 0, k99, k50);
    out->p50 = all[k50];
    out->p99 = all[k99];
    out->p999 = all[k999];
    out->max = mx;
    free(all);
}

void row_latency(struct row *r, const struct latency *l)
{
    row_num(r, "p50_us", l->p50, 2);
    row_num(r, "p99_us", l->p99, 2);
    row_num(r, "p999_us", l->p999, 2);
    row_num(r, "max_us", l->max, 2);
}

/* ---- benchrec: the recorder as seen from Lua handlers ---- */

static int l_rec(lua_State *L)
{
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    double ts;
    if (!s || len < sizeof ts)
        return luaL_error(L, "benchrec.rec: payload is not a timestamp");
    memcpy(&ts, s, sizeof ts);
    rec_add(seda_now() - ts);
    return 0;
}

static int l_rec_ts(lua_State *L)
{
    double ts = luaL_checknumber(L, 1);
    rec_add(seda_now() - ts);
    return 0;
}

int luaopen_benchrec(lua_State *L)
{
    static const luaL_Reg f[] = {
        { "rec", l_rec },
        { "rec_ts", l_rec_ts },
        { NULL, NULL }
    };
    luaL_newlib(L, f);
    return 1;
}

/* ---- floors ---- */

static double floor_window(void)
{
    return g_cfg.quick ? 0.3 : 1.0;
}

/* Calls per second of an empty Lua function from C (nargs 0 or 1). */
static double floor_lua_call(int nargs, long *calls, double *elapsed)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return 0;
    luaL_openlibs(L);
    if (luaL_dostring(L, "return function() end") != LUA_OK) {
        lua_close(L);
        return 0;
    }
    lua_pushlstring(L, "12345678", 8);        /* the argument */
    long n = 0;
    double t0 = seda_now(), end = t0 + floor_window(), t;
    do {
        for (int i = 0; i < 1024; i++) {
            lua_pushvalue(L, 1);
            if (nargs)
                lua_pushvalue(L, 2);
            lua_pcall(L, nargs, 0, 0);
        }
        n += 1024;
    } while ((t = seda_now()) < end);
    lua_close(L);
    *calls = n;
    *elapsed = t - t0;
    return (double)n / (t - t0);
}

#define RING_SLOTS 1024
#define RING_BATCH 32

struct ring {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    double slot[RING_SLOTS];     /* timestamps; guarded by mu */
    unsigned head, count;        /* guarded by mu */
    bool done;                   /* producer finished; guarded by mu */
    bool cwait, pwait;           /* someone sleeps; guarded by mu */
    long consumed;               /* consumer thread only */
    double end;                  /* producer deadline */
};

static void *ring_producer(void *arg)
{
    struct ring *r = arg;
    for (;;) {
        double ts = seda_now();
        bool stop = ts >= r->end;
        pthread_mutex_lock(&r->mu);
        if (stop) {
            r->done = true;
            pthread_cond_signal(&r->not_empty);
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        while (r->count == RING_SLOTS) {
            r->pwait = true;
            pthread_cond_wait(&r->not_full, &r->mu);
        }
        r->slot[(r->head + r->count) % RING_SLOTS] = ts;
        r->count++;
        if (r->cwait) {
            r->cwait = false;
            pthread_cond_signal(&r->not_empty);
        }
        pthread_mutex_unlock(&r->mu);
    }
}

static void *ring_consumer(void *arg)
{
    struct ring *r = arg;
    double batch[RING_BATCH];
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->count == 0 && !r->done) {
            r->cwait = true;
            pthread_cond_wait(&r->not_empty, &r->mu);
        }
        if (r->count == 0) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        unsigned k = r->count < RING_BATCH ? r->count : RING_BATCH;
        for (unsigned i = 0; i < k; i++)
            batch[i] = r->slot[(r->head + i) % RING_SLOTS];
        r->head = (r->head + k) % RING_SLOTS;
        r->count -= k;
        if (r->pwait) {
            r->pwait = false;
            pthread_cond_signal(&r->not_full);
        }
        pthread_mutex_unlock(&r->mu);
        for (unsigned i = 0; i < k; i++)
            rec_add(seda_now() - batch[i]);
        r->consumed += k;
    }
}

/* Items per second through the ring, one producer and one consumer. */
static double floor_ring(long *items, double *elapsed, struct latency *lat)
{
    static struct ring r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.not_empty, NULL);
    pthread_cond_init(&r.not_full, NULL);
    rec_reset();
    double t0 = seda_now();
    r.end = t0 + floor_window();
    pthread_t p, c;
    pthread_create(&c, NULL, ring_consumer, &r);
    pthread_create(&p, NULL, ring_producer, &r);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    *elapsed = seda_now() - t0;
    *items = r.consumed;
    rec_latency(lat);
    rec_reset();
    pthread_cond_destroy(&r.not_full);
    pthread_cond_destroy(&r.not_empty);
    pthread_mutex_destroy(&r.mu);
    return (double)r.consumed / *elapsed;
}

void bench_floors(void)
{
    int trials = g_cfg.quick ? 1 : 3;
    double lua[3], ring[3];
    for (int nargs = 0; nargs <= 1; nargs++)
        for (int t = 0; t < trials; t++) {
            long calls = 0;
            double el = 0;
            double rate = floor_lua_call(nargs, &calls, &el);
            if (nargs == 0)
                lua[t] = rate;
            struct row r;
            row_begin(&r, "lua", "floor");
            row_str(&r, "name", nargs ? "lua_call_1arg" : "lua_call");
            row_int(&r, "trial", t + 1);
            row_int(&r, "calls", calls);
            row_num(&r, "elapsed_ms", el * 1e3, 0);
            row_num(&r, "rate_per_s", rate, 0);
            row_end(&r);
        }
    for (int t = 0; t < trials; t++) {
        long items;
        double el;
        struct latency lat;
        ring[t] = floor_ring(&items, &el, &lat);
        struct row r;
        row_begin(&r, "c", "floor");
        row_str(&r, "name", "mutex_ring");
        row_int(&r, "trial", t + 1);
        row_int(&r, "slots", RING_SLOTS);
        row_int(&r, "batch", RING_BATCH);
        row_int(&r, "items", items);
        row_num(&r, "elapsed_ms", el * 1e3, 0);
        row_num(&r, "rate_per_s", ring[t], 0);
        row_latency(&r, &lat);
        row_end(&r);
    }
    g_cfg.floor_lua = bench_median(lua, trials);
    g_cfg.floor_ring = bench_median(ring, trials);
    bench_progress("floors: lua_call %.0f/s, mutex_ring %.0f/s",
                   g_cfg.floor_lua, g_cfg.floor_ring);
}

/* ---- command line ---- */

static const char *const CONFIGS[] = {
    "floor", "cap1", "cap8", "seq", "par", "chan", "cap1_table", "codec",
    "pipeline", "reload", "memory", "durable1", "durable_batch",
    "durable_pipeline", "count", "fanout", NULL
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: bench/run [--config NAME]... [--handler c|lua] [--quick]\n"
        "                 [--out FILE] [--help]\n"
        "\n"
        "Runs the seda-lua benchmark (WORKLOAD.md) and prints one JSON object\n"
        "per trial on stdout; the same lines go to\n"
        "bench/results/<date>-<host>.jsonl (or --out FILE; --out - for none).\n"
        "Progress goes to stderr.\n"
        "\n"
        "  --config NAME   run only this config (repeatable); one of\n"
        "                  floor cap1 cap8 seq par chan cap1_table codec\n"
        "                  pipeline reload memory durable1 durable_batch\n"
        "                  durable_pipeline count fanout (default: all).  The\n"
        "                  floors are measured in every run: stage rows\n"
        "                  report their throughput as a fraction of them.\n"
        "                  count is the hand-off check: a C consumer that\n"
        "                  only counts, a Lua handler that only reads\n"
        "                  env.payload; 1 and 2 producers.\n"
        "  --handler H     c or lua: only rows with that handler\n"
        "  --quick         smoke run: 0.3 s windows, one trial each\n"
        "  --out FILE      results file\n"
        "  --windows C,S   calibration and sweep windows in seconds (for\n"
        "                  experiments; the workload is 2,4)\n"
        "  --help          this text\n");
}

static bool selected(const char *const *sel, int nsel, const char *name)
{
    if (nsel == 0)
        return true;
    for (int i = 0; i < nsel; i++)
        if (strcmp(sel[i], name) == 0)
            return true;
    return false;
}

static FILE *open_results(const char *out)
{
    char path[512], host[128] = "host";
    if (out && strcmp(out, "-") == 0)
        return NULL;
    if (!out) {
        time_t now = time(NULL);
        struct tm tm;
        char date[32];
        localtime_r(&now, &tm);
        strftime(date, sizeof date, "%Y-%m-%dT%H%M%S", &tm);
        gethostname(host, sizeof host - 1);
        mkdir("bench/results", 0777);
        snprintf(path, sizeof path, "bench/results/%s-%s.jsonl", date, host);
        out = path;
    }
    FILE *f = fopen(out, "a");
    if (!f)
        fprintf(stderr, "bench: cannot open %s: %s\n", out, strerror(errno));
    else
        bench_progress("results: %s", out);
    return f;
}

static void remove_tmpdir(void)
{
    static const char *const files[] = { "h.lua", "h_table.lua",
                                         "h_pipe.lua", "h_dur.lua", "h_dpipe.lua",
                                         NULL };
    char path[512];
    for (int i = 0; files[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_cfg.tmpdir, files[i]);
        unlink(path);
    }
    rmdir(g_cfg.tmpdir);
}

int main(int argc, char **argv)
{
    const char *sel[32];
    int nsel = 0;
    const char *out = NULL, *handler = NULL, *windows = NULL;

    g_cfg.t0 = seda_now();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--quick") == 0) {
            g_cfg.quick = true;
        } else if (strcmp(a, "--config") == 0 && i + 1 < argc) {
            const char *c = argv[++i];
            bool ok = false;
            for (int k = 0; CONFIGS[k]; k++)
                ok |= strcmp(CONFIGS[k], c) == 0;
            if (!ok || nsel == 32) {
                fprintf(stderr, "bench: unknown config '%s'\n", c);
                usage(stderr);
                return 2;
            }
            sel[nsel++] = c;
        } else if (strcmp(a, "--handler") == 0 && i + 1 < argc) {
            handler = argv[++i];
            if (strcmp(handler, "c") != 0 && strcmp(handler, "lua") != 0) {
                fprintf(stderr, "bench: --handler takes c or lua\n");
                return 2;
            }
        } else if (strcmp(a, "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(a, "--windows") == 0 && i + 1 < argc) {
            windows = argv[++i];
        } else {
            fprintf(stderr, "bench: bad argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    g_cfg.cpus = cpus > 0 ? (int)cpus : 1;
    g_cfg.producers = g_cfg.cpus < 8 ? g_cfg.cpus : 8;
    g_cfg.want_c = !handler || strcmp(handler, "c") == 0;
    g_cfg.want_lua = !handler || strcmp(handler, "lua") == 0;
    g_cfg.calib_s = g_cfg.quick ? 0.3 : 2.0;
    g_cfg.window_s = g_cfg.quick ? 0.3 : 4.0;
    g_cfg.calib_runs = g_cfg.quick ? 1 : 2;
    g_cfg.sweep_trials = g_cfg.quick ? 1 : 2;
    g_cfg.fire_trials = g_cfg.quick ? 1 : 3;
    g_cfg.fire_total = 200000;
    if (windows && sscanf(windows, "%lf,%lf", &g_cfg.calib_s,
                          &g_cfg.window_s) != 2) {
        fprintf(stderr, "bench: --windows takes CALIB,SWEEP seconds\n");
        return 2;
    }

    static char tmpl[] = "/tmp/seda-bench-XXXXXX";
    g_cfg.tmpdir = mkdtemp(tmpl);
    if (!g_cfg.tmpdir || rec_init() != 0) {
        fprintf(stderr, "bench: cannot set up (tmpdir or latency arrays)\n");
        return 1;
    }
    if (seda_lua_preload("benchrec", luaopen_benchrec) != 0) {
        fprintf(stderr, "bench: seda_lua_preload failed\n");
        return 1;
    }
    g_out = open_results(out);
    bench_progress("cpus %d, producers P=%d%s", g_cfg.cpus, g_cfg.producers,
                   g_cfg.quick ? ", quick" : "");

    bench_floors();
    static const char *const cap[] = { "cap1", "cap8", NULL };
    static const char *const fire[] = { "seq", "par", "chan", NULL };
    for (int h = 0; h < 2; h++) {
        bool lua = h == 1;
        if (lua ? !g_cfg.want_lua : !g_cfg.want_c)
            continue;
        for (int i = 0; cap[i]; i++)
            if (selected(sel, nsel, cap[i]))
                bench_capacity(cap[i], lua);
        for (int i = 0; fire[i]; i++)
            if (selected(sel, nsel, fire[i]))
                bench_firehose(fire[i], lua);
    }
    if (g_cfg.want_lua) {
        if (selected(sel, nsel, "cap1_table"))
            bench_capacity("cap1_table", true);
        if (selected(sel, nsel, "codec"))
            bench_codec();
        if (selected(sel, nsel, "pipeline"))
            bench_pipeline();
        if (selected(sel, nsel, "reload"))
            bench_reload();
        static const char *const dur[] = { "durable1", "durable_batch",
                                           "durable_pipeline", NULL };
        for (int i = 0; dur[i]; i++)
            if (selected(sel, nsel, dur[i]))
                bench_durable(dur[i]);
    }
    if (selected(sel, nsel, "memory"))
        bench_memory();
    if (selected(sel, nsel, "count"))
        bench_count();
    if (selected(sel, nsel, "fanout"))
        bench_fanout();

    remove_tmpdir();
    if (g_out)
        fclose(g_out);
    bench_progress("done");
    return 0;
}
