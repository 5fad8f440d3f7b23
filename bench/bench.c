/* SPDX-License-Identifier: MIT */
/*
 * bench.c -- the seda-lua benchmark suite's driver: the command line, the
 * results file, and the order the configs run in (each config is its own
 * file, see families.h; what they share is harness.h).
 *
 * The workload is the cross-language SEDA-bus benchmark (README:
 * Benchmarks), run with a C consumer and with a Lua handler (`handler`
 * "c" / "lua"), plus configs of our own: cap1_smooth, cap1_table, codec,
 * pipeline (Lua and C consumers),
 * reload, memory, durable1, durable_batch, durable_pipeline, count,
 * fanout, remote, io.  One JSON object per trial goes to stdout and to
 * the results file; progress goes to stderr.
 *
 *     seda-bench [--config NAME]... [--handler c|lua] [--quick]
 *                [--out FILE] [--help]
 *
 * Floors (lua_call, lua_call_1arg, mutex_ring) are measured first in every
 * run, because each stage row carries its throughput as a fraction of the
 * matching floor (`floor`, `floor_ratio`): Lua rows against lua_call, C
 * rows against mutex_ring.
 *
 * Fields added to the reference workload's rows (the README's Benchmarks
 * section; never changed or removed):
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
 *   tick_ms            cap1_smooth: the pacing tick (1 ms; cap1's is 20)
 *   reloads, reload_failed, delivered_eq_published   reload rows
 * Own configs: cap1_smooth, cap1_table and reload rows have the
 * capacity-row shape (cap1_smooth: cap1's sweep, load 0.5, 1.0 and 1.5,
 * paced in 1 ms ticks against cap1's calibration of the same run, or its
 * own when cap1 did not run);
 * pipeline rows the firehose shape plus itineraries_per_s,
 * handler_calls_per_s, hops_delivered (latency from the envelope's publish
 * time to its completion callback); codec rows ns_per_roundtrip, bytes,
 * iterations; memory rows payload, payload_bytes, count, depth, in_flight,
 * rss_delta_bytes, bytes_per_envelope; floor rows name, rate_per_s.
 * Durable rows (durable1, durable_batch, durable_pipeline; Lua handlers,
 * one C producer, see durable.c): sync ("normal"/"full"),
 * publish_p50_us, publish_p99_us (time inside the publish call, one
 * sample per call), publish_p999_us, publish_max_us, publish_calls, batch,
 * durable, capacity, window_ms, end_of_window_depth, drain_tail_ms,
 * journal_rows_left (rows still in the journal after a drained shutdown:
 * should be 0); elapsed_ms runs from the first publish to drained.
 * durable_pipeline adds stages, itineraries_per_s, handler_calls_per_s,
 * hops_delivered, latency_from.
 * Remote rows (remote, remote_raw; remote.c says more): consumers,
 * raw_js_publish_eps, raw_ratio, consumed_eps, stream; remote_raw: mode,
 * window, payload_bytes.
 * io rows (io.c says more): variant ("seda_http", "luasocket",
 * "openresty", "upstream_wrk"), requests, window_ms, latency_from,
 * errors, status_2xx..status_5xx (wrk rows: status_other), upstream,
 * server, client, connections or workers/concurrency/capacity/
 * in_flight_max, request_p50_us.. (the GET alone, timed in the handler),
 * handler_concurrency_peak, first_error.
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

#include "families.h"
#include "harness.h"
#include "seda_lua.h"

/* ---- command line ---- */

static const char *const CONFIGS[] = {
    "floor", "cap1", "cap8", "cap1_smooth", "seq", "par", "chan",
    "cap1_table", "codec",
    "pipeline", "reload", "memory", "durable1", "durable_batch",
    "durable_pipeline", "durable_group", "count", "fanout", "overload", "overload_slow",
    "overload_smooth", "admit", "remote", "io", NULL
};

static void usage(FILE *f)
{
    fprintf(f,
        "usage: bench/run [--config NAME]... [--handler c|lua] [--quick]\n"
        "                 [--out FILE] [--help]\n"
        "\n"
        "Runs the seda-lua benchmark (see the README, Benchmarks) and prints\n"
        "one JSON object per trial on stdout; the same lines go to\n"
        "bench/results/<date>-<host>.jsonl (or --out FILE; --out - for none).\n"
        "Progress goes to stderr.\n"
        "\n"
        "  --config NAME   run only this config (repeatable); one of\n"
        "                  floor cap1 cap8 cap1_smooth seq par chan\n"
        "                  cap1_table codec\n"
        "                  pipeline reload memory durable1 durable_batch\n"
        "                  durable_pipeline count fanout overload\n"
        "                  overload_slow overload_smooth admit remote io\n"
        "                  (default: all).\n"
        "                  remote starts its own nats-server and consumer\n"
        "                  processes (remote_raw rows are cnats's\n"
        "                  own JetStream publish rate).\n"
        "                  io starts its own nginx servers (an upstream\n"
        "                  answering after 5 ms; OpenResty's Lua module as\n"
        "                  the anchor, driven by wrk): a Lua handler's\n"
        "                  seda.http.request against LuaSocket's blocking\n"
        "                  GET and OpenResty's cosocket; it installs nginx,\n"
        "                  its echo and lua modules, wrk and lua-socket\n"
        "                  through scripts/deps.sh when missing (Lua\n"
        "                  rows; --quick: 1 s windows, one round).  The\n"
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
                                         "h_count.lua", "h_admit.lua", "h_slow.lua",
                                         NULL };
    char path[512];
    for (int i = 0; files[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_cfg.tmpdir, files[i]);
        unlink(path);
    }
    rmdir(g_cfg.tmpdir);
}

/* The command line's choices. */
struct args {
    const char *sel[32];        /* --config names, nsel of them */
    int nsel;
    const char *out, *handler, *windows;
};

/* Parse the command line into a (and g_cfg.quick).  Returns -1 to go on,
 * or the exit status (--help, a bad argument). */
static int parse_args(int argc, char **argv, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(s, "--quick") == 0) {
            g_cfg.quick = true;
        } else if (strcmp(s, "--config") == 0 && i + 1 < argc) {
            const char *c = argv[++i];
            bool ok = false;
            for (int k = 0; CONFIGS[k]; k++)
                ok |= strcmp(CONFIGS[k], c) == 0;
            if (!ok || a->nsel == 32) {
                fprintf(stderr, "bench: unknown config '%s'\n", c);
                usage(stderr);
                return 2;
            }
            a->sel[a->nsel++] = c;
        } else if (strcmp(s, "--handler") == 0 && i + 1 < argc) {
            a->handler = argv[++i];
            if (strcmp(a->handler, "c") != 0 &&
                strcmp(a->handler, "lua") != 0) {
                fprintf(stderr, "bench: --handler takes c or lua\n");
                return 2;
            }
        } else if (strcmp(s, "--out") == 0 && i + 1 < argc) {
            a->out = argv[++i];
        } else if (strcmp(s, "--windows") == 0 && i + 1 < argc) {
            a->windows = argv[++i];
        } else {
            fprintf(stderr, "bench: bad argument '%s'\n", s);
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* The run's settings in g_cfg: the machine, the handlers wanted, windows
 * and trial counts.  Returns 0, or 2 on a bad --windows. */
static int configure(const struct args *a)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    g_cfg.cpus = cpus > 0 ? (int)cpus : 1;
    g_cfg.producers = g_cfg.cpus < 8 ? g_cfg.cpus : 8;
    g_cfg.want_c = !a->handler || strcmp(a->handler, "c") == 0;
    g_cfg.want_lua = !a->handler || strcmp(a->handler, "lua") == 0;
    g_cfg.calib_s = g_cfg.quick ? 0.3 : 2.0;
    g_cfg.window_s = g_cfg.quick ? 0.3 : 4.0;
    g_cfg.calib_runs = g_cfg.quick ? 1 : 2;
    g_cfg.sweep_trials = g_cfg.quick ? 1 : 2;
    g_cfg.fire_trials = g_cfg.quick ? 1 : 3;
    g_cfg.fire_total = 200000;
    if (a->windows && sscanf(a->windows, "%lf,%lf", &g_cfg.calib_s,
                             &g_cfg.window_s) != 2) {
        fprintf(stderr, "bench: --windows takes CALIB,SWEEP seconds\n");
        return 2;
    }
    return 0;
}

/* Run the selected configs (all when none was selected), in the suite's
 * order. */
static void run_configs(const char *const *sel, int nsel)
{
    bench_floors();
    static const char *const cap[] = { "cap1", "cap8", "cap1_smooth",
                                       NULL };
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
        if (selected(sel, nsel, "reload"))
            bench_reload();
        static const char *const dur[] = { "durable1", "durable_batch",
                                           "durable_pipeline", NULL };
        for (int i = 0; dur[i]; i++)
            if (selected(sel, nsel, dur[i]))
                bench_durable(dur[i]);
        if (selected(sel, nsel, "durable_group"))
            bench_durable_group();
    }
    if (selected(sel, nsel, "pipeline"))
        bench_pipeline();               /* Lua and C, alternating */
    if (selected(sel, nsel, "memory"))
        bench_memory();
    if (selected(sel, nsel, "count"))
        bench_count();
    if (selected(sel, nsel, "fanout"))
        bench_fanout();
    for (int h = 0; h < 2; h++) {
        bool lua = h == 1;
        if ((lua ? g_cfg.want_lua : g_cfg.want_c) &&
            selected(sel, nsel, "overload"))
            bench_overload(lua);
        if ((lua ? g_cfg.want_lua : g_cfg.want_c) &&
            selected(sel, nsel, "overload_slow"))
            bench_overload_slow(lua, 0);
        if ((lua ? g_cfg.want_lua : g_cfg.want_c) &&
            selected(sel, nsel, "overload_smooth"))
            bench_overload_slow(lua, 0.001);
    }
    if (g_cfg.want_lua && selected(sel, nsel, "admit"))
        bench_admit();
    if (selected(sel, nsel, "remote"))
        bench_remote();
    if (g_cfg.want_lua && selected(sel, nsel, "io"))
        bench_io();
}

int main(int argc, char **argv)
{
    struct args a = { .nsel = 0 };

    g_cfg.t0 = seda_now();
    if (argc > 1 && strcmp(argv[1], "--remote-consumer") == 0)
        return bench_remote_consumer(argc, argv);   /* remote.c */
    if (argc > 1 && strcmp(argv[1], "--raw-consumer") == 0)
        return bench_raw_consumer(argc, argv);      /* remote.c */
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (configure(&a) != 0)
        return 2;

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
    g_bench_out = open_results(a.out);
    bench_progress("cpus %d, producers P=%d%s", g_cfg.cpus, g_cfg.producers,
                   g_cfg.quick ? ", quick" : "");
    run_configs(a.sel, a.nsel);
    remove_tmpdir();
    if (g_bench_out)
        fclose(g_bench_out);
    bench_progress("done");
    return 0;
}
