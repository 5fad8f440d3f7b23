/* SPDX-License-Identifier: MIT */
/*
 * remote.c -- remote stages (NATS JetStream): config "remote", cap1-style
 * unpaced publishing into a remote stage over loopback, consumed by one
 * and by two other processes, with a C consumer and with a Lua handler;
 * and "remote_raw", the same machine's raw JetStream publish rate
 * measured with cnats in the same run, to read the first against.
 *
 * DESIGN
 *   - One private nats-server for the config (JetStream, 127.0.0.1, a
 *     free port, a temporary store; tests/remote/natsd.h), a fresh stream
 *     per trial.
 *   - Consumers are processes: this program again, started as
 *     `seda-bench --remote-consumer URL STREAM c|lua FILE`.  Each makes a
 *     bus with the remote stage "bench" (capacity 1024, concurrency 1)
 *     consuming, with the C consumer or the Lua handler of the other rows
 *     (both record publish -> handler latency from the 8-byte timestamp in
 *     the payload: CLOCK_MONOTONIC is one clock for every process of the
 *     host), says "ready", and on "stop" (its stdin) drains, writes its
 *     samples to FILE and says "count N".
 *   - The producer is this process: a bus with the remote stage "bench"
 *     that only publishes (capacity 1024: the window of messages awaiting
 *     JetStream's acknowledgement), one thread publishing unpaced for the
 *     calibration window (2 s; --quick 0.3 s), the timestamp written just
 *     before each publish.  The clock stops when every accepted message
 *     is acknowledged by JetStream (the bus is idle): throughput_eps =
 *     stored / elapsed, directly comparable with the raw rate.  Then it
 *     waits until JetStream says the consumer has nothing pending or
 *     unacknowledged (consumed_eps: all handled / time from the first
 *     publish), stops the consumers and merges their samples (nearest
 *     rank over every sample).
 *   - remote_raw: one cnats connection (send-asap: for cnats's own async
 *     publisher as fast as coalesced writes or faster on this VM; seda's
 *     connections coalesce by default), async JetStream publishes with a
 *     Nats-Msg-Id each (as ours) and a window of 1024 outstanding, a
 *     64-byte payload (about our message's body), unpaced for the same
 *     window; rate = acknowledged / time until the last acknowledgement;
 *     with 0, 1 and 2 consumer processes of cnats's own taking the
 *     messages meanwhile (`seda-bench --raw-consumer`), so that each row
 *     below is read against the raw rate under the same load.  With
 *     consumers the publish rate depends on how much of the two cores and
 *     of the server the consumers take, that is on how fast they consume,
 *     so there are two references: push consumers (`nats bench`'s default
 *     kind, a queue group on one durable consumer, an ack each) that keep
 *     up with the producer -- raw_js_publish_eps, raw_ratio -- and a
 *     Fetch(256) loop that takes about half of what is published while
 *     the producer runs, leaving it more of the machine --
 *     raw_js_publish_eps_pull, raw_ratio_pull.  Ours keeps up better than
 *     the second and less than the first (consumed_eps).  The raw rows
 *     carry what their consumers took meanwhile (consumed) and every row
 *     the CPU the producer, the consumers and the server spent per 1000
 *     messages (cpu_ms_per_1k_*).  Trials are paired: each raw trial is
 *     followed at once by ours, C then Lua, with as many consumers.
 *     Also the synchronous rate (one publish, one acknowledgement) for
 *     reference.
 *
 * Format rows: with one consumer process, the same trial again with
 * format = "json" and "msgpack" (the payload then the Lua codec's float,
 * so the formats carry a number); every remote row says its format.
 *
 * Row fields beyond the capacity rows': consumers (processes; 0: the
 * producer alone), stream, format ("seda", "json", "msgpack"), stored, raw_js_publish_eps (the remote_raw
 * async rate with as many consumers, measured just before this trial),
 * raw_ratio (throughput_eps / it), raw_js_publish_eps_pull and
 * raw_ratio_pull (against the Fetch loop), raw_js_publish_eps_alone,
 * consumed_eps, cpu_ms_per_1k_producer / _consumers / _server,
 * drain_tail_ms (last publish -> all consumed), republished,
 * publish_failed; remote_raw rows: mode ("async" / "sync"), consumers,
 * consumer ("push" / "pull") and consumed, window, payload_bytes,
 * throughput_eps, cpu_ms_per_1k_*.
 */
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>
#include <nats/nats.h>

#include "../tests/remote/natsd.h"
#include "families.h"
#include "harness.h"
#include "seda_lua.h"
#include "seda_remote.h"

#define RB_CAP 1024

/* ---- the consumer process ---- */

static const char CONSUMER_CHUNK[] =
    "local seda, hfile, n, cap, conc, url, stream, format = ...\n"
    "local bus = seda.bus{}\n"
    "bus:stage{name = 'bench', capacity = cap, concurrency = conc,\n"
    "          handler = hfile, format = format,\n"
    "          remote = {url = url, stream = stream}}\n"
    "return bus\n";

/* The payload of a format row: the Lua codec's float (tag 0x03, 8 bytes
 * little endian), so that JSON and MessagePack carry a number. */
#define RB_FLOAT_TAG 0x03

static bool c_record(seda_env_t *env, void *ud)
{
    (void)ud;
    size_t len;
    const unsigned char *p = seda_env_payload(env, &len);
    double ts;
    if (seda_env_payload_kind(env) == 1 && len == 9 &&
        p[0] == RB_FLOAT_TAG)
        p++, len--;
    if (len < sizeof ts)
        return false;
    memcpy(&ts, p, sizeof ts);
    rec_add(seda_now() - ts);
    return true;
}

/* seda-bench --remote-consumer URL STREAM c|lua FILE [FORMAT] */
int bench_remote_consumer(int argc, char **argv)
{
    if (argc != 6 && argc != 7)
        return 2;
    const char *url = argv[2], *stream = argv[3], *file = argv[5];
    const char *format = argc == 7 ? argv[6] : NULL;
    bool lua = strcmp(argv[4], "lua") == 0;
    if (rec_init() != 0 ||
        seda_lua_preload("benchrec", luaopen_benchrec) != 0)
        return 1;
    lua_State *L = NULL;
    seda_bus_t *bus = NULL;
    char err[600];
    if (lua) {
        char hfile[] = "/tmp/seda-bench-rh-XXXXXX";
        int fd = mkstemp(hfile);
        const char *code = format
            ? "local rec = require 'benchrec'.rec_ts\n"
              "return function(env) rec(env.payload) end\n"
            : "local rec = require 'benchrec'.rec\n"
              "return function(env) rec(env.payload) end\n";
        if (fd < 0 || write(fd, code, strlen(code)) < 0)
            return 1;
        close(fd);
        L = luaL_newstate();
        luaL_openlibs(L);
        luaL_requiref(L, "seda", luaopen_seda, 0);
        int rc = luaL_loadstring(L, CONSUMER_CHUNK);
        lua_pushvalue(L, 1);
        lua_pushstring(L, hfile);
        lua_pushinteger(L, 1);
        lua_pushinteger(L, RB_CAP);
        lua_pushinteger(L, 1);
        lua_pushstring(L, url);
        lua_pushstring(L, stream);
        lua_pushstring(L, format);      /* nil: "seda" */
        if (rc != LUA_OK || lua_pcall(L, 8, 1, 0) != LUA_OK) {
            fprintf(stderr, "bench consumer: %s\n", lua_tostring(L, -1));
            unlink(hfile);
            return 1;
        }
        unlink(hfile);
        bus = seda_lua_tobus(L, -1);
    } else {
        seda_bus_new(NULL, &bus);
        seda_stage_opts so;
        seda_stage_opts_init(&so);
        so.name = "bench";
        so.capacity = RB_CAP;
        seda_remote_opts ro;
        seda_remote_opts_init(&ro);
        ro.url = url;
        ro.stream = stream;
        ro.consume = true;
        ro.format = seda_lua_format(format);
        seda_stage_t *st;
        if (seda_remote_stage_add(bus, &so, &ro, &st, err, sizeof err)) {
            fprintf(stderr, "bench consumer: %s\n", err);
            return 1;
        }
        seda_stage_consume(st, c_record, NULL);
        seda_remote_consume(st);
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) && strncmp(line, "stop", 4)) {
    }
    seda_bus_shutdown(bus, 30);
    long count = 0;
    seda_stage_t *st = seda_bus_stage(bus, "bench");
    seda_stage_stats ss;
    seda_stage_stats_get(st, &ss);
    count = (long)ss.delivered;
    FILE *f = fopen(file, "wb");
    if (f) {
        rec_dump(f);
        fclose(f);
    }
    if (L)
        lua_close(L);
    else
        seda_bus_free(bus);
    printf("count %ld\n", count);
    fflush(stdout);
    return 0;
}

/* ---- the driver's side of a consumer ---- */

struct cproc {
    pid_t pid;
    FILE *in;                   /* its stdin */
    FILE *out;                  /* its stdout */
    char file[300];             /* its samples */
};

/* Start this program again with args (after argv[0]), talking to it
 * through its stdin and stdout; true once it said "ready". */
static bool proc_start(struct cproc *c, const char *const *args)
{
    int to[2], from[2];
    if (pipe(to) || pipe(from))
        return false;
    const char *argv[8] = { "seda-bench" };
    for (int i = 0; args[i] && i < 6; i++)
        argv[i + 1] = args[i];
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]);
        close(from[0]);
        execv("/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c->pid = pid;
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
    char line[64];
    return pid > 0 && c->in && c->out && fgets(line, sizeof line, c->out) &&
           strncmp(line, "ready", 5) == 0;
}

static bool cproc_start(struct cproc *c, const char *url, const char *stream,
                        bool lua, int k, const char *format)
{
    snprintf(c->file, sizeof c->file, "%s/samples.%d", g_cfg.tmpdir, k);
    const char *args[] = { "--remote-consumer", url, stream,
                           lua ? "lua" : "c", c->file, format, NULL };
    return proc_start(c, args);
}

/* Stop it; returns the envelopes it handled (-1 on failure). */
static long cproc_stop(struct cproc *c)
{
    long n = -1;
    char line[64];
    if (c->in) {
        fputs("stop\n", c->in);
        fflush(c->in);
    }
    if (c->out && fgets(line, sizeof line, c->out))
        sscanf(line, "count %ld", &n);
    if (c->in)
        fclose(c->in);
    if (c->out)
        fclose(c->out);
    int st;
    if (c->pid > 0)
        waitpid(c->pid, &st, 0);
    return n;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Merge the consumers' samples into l (nearest rank). */
static void merge_samples(struct cproc *c, int n, struct latency *l)
{
    size_t total = 0, cap = 1 << 20;
    float *v = malloc(cap * sizeof *v);
    memset(l, 0, sizeof *l);
    for (int i = 0; i < n && v; i++) {
        FILE *f = fopen(c[i].file, "rb");
        float buf[4096];
        size_t got;
        while (f && (got = fread(buf, sizeof *buf, 4096, f)) > 0) {
            if (total + got > cap) {
                float *nv = realloc(v, (cap *= 2) * sizeof *v);
                if (!nv)
                    break;
                v = nv;
            }
            memcpy(v + total, buf, got * sizeof *buf);
            total += got;
        }
        if (f)
            fclose(f);
        unlink(c[i].file);
    }
    if (!v || total == 0) {
        free(v);
        return;
    }
    qsort(v, total, sizeof *v, cmp_float);
    l->n = total;
    l->p50 = v[(size_t)floor(0.5 * (double)(total - 1))];
    l->p99 = v[(size_t)floor(0.99 * (double)(total - 1))];
    l->p999 = v[(size_t)floor(0.999 * (double)(total - 1))];
    l->max = v[total - 1];
    free(v);
}

/* ---- CPU accounting (diagnostic fields) ---- */

/* CPU seconds (user + system) of this process (RUSAGE_SELF) or of its
 * waited children (RUSAGE_CHILDREN), and of process pid (from /proc; 0
 * when unreadable). */
static double cpu_rusage(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static double cpu_pid(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, stt = 0;
    /* After "pid (comm)": state and 10 fields, then utime and stime. */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                     "%lu %lu", &ut, &stt) != 2)
        return 0;
    return (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU used during a trial, by whom: this process (the producer), the
 * consumer processes (waited for by then), the server. */
struct cpu_use {
    double self, children, server;
};

static pid_t g_server_pid;              /* set once by bench_remote */

/* The three figures as milliseconds per 1000 messages. */
static void row_cpu(struct row *w, const struct cpu_use *c, long n)
{
    if (n <= 0)
        return;
    row_num(w, "cpu_ms_per_1k_producer", c->self * 1e6 / (double)n, 2);
    row_num(w, "cpu_ms_per_1k_consumers", c->children * 1e6 / (double)n, 2);
    row_num(w, "cpu_ms_per_1k_server", c->server * 1e6 / (double)n, 2);
}

static void cpu_mark(struct cpu_use *c, pid_t server)
{
    c->self = cpu_rusage(RUSAGE_SELF);
    c->children = cpu_rusage(RUSAGE_CHILDREN);
    c->server = cpu_pid(server);
}

static void cpu_since(struct cpu_use *c, pid_t server)
{
    struct cpu_use now;
    cpu_mark(&now, server);
    c->self = now.self - c->self;
    c->children = now.children - c->children;
    c->server = now.server - c->server;
}

/* ---- raw JetStream ---- */

/* seda-bench --raw-consumer URL STREAM SUBJECT push|pull: cnats's own
 * consumer of a raw trial, until "stop" (then it says "count N"), at most
 * RB_CAP messages unacknowledged (as ours: capacity 1024), an explicit
 * ack per message, acks coalesced by cnats's flusher (`nats bench`'s Go
 * client coalesces too).
 *   push  (the reference): a push subscription in the queue group "raw"
 *         (every consumer process of a trial shares the durable consumer
 *         "raw"), acked from cnats's delivery thread -- `nats bench`'s
 *         default kind of subscriber.  It keeps up, as ours does.
 *   pull  a loop of Fetch(256, 100 ms) and its acks.  It falls behind
 *         (about half of what is published while the producer runs), so it
 *         leaves more of the shared cores and of the server to the
 *         producer: rows read against it are reported beside, as _pull. */
static atomic_long g_raw_got;

static void raw_on_msg(natsConnection *nc, natsSubscription *sub,
                       natsMsg *m, void *ud)
{
    (void)nc;
    (void)sub;
    (void)ud;
    natsMsg_Ack(m, NULL);
    natsMsg_Destroy(m);
    atomic_fetch_add_explicit(&g_raw_got, 1, memory_order_relaxed);
}

static bool raw_stop_asked(void)
{
    char line[64];
    ssize_t got = read(0, line, sizeof line);
    return got == 0 || (got > 0 && strncmp(line, "stop", 4) == 0);
}

int bench_raw_consumer(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    bool pull = strcmp(argv[5], "pull") == 0;
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsSubscription *sub = NULL;
    if (natsOptions_Create(&o) != NATS_OK ||
        natsOptions_SetURL(o, argv[2]) != NATS_OK ||
        natsConnection_Connect(&nc, o) != NATS_OK ||
        natsConnection_JetStream(&js, nc, NULL) != NATS_OK)
        return 1;
    natsOptions_Destroy(o);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = argv[3];
    so.Config.Durable = "raw";
    so.Config.AckPolicy = js_AckExplicit;
    so.Config.MaxAckPending = RB_CAP;
    so.Config.FilterSubject = argv[4];
    natsStatus s;
    if (pull) {
        s = js_PullSubscribe(&sub, js, argv[4], "raw", NULL, &so, NULL);
    } else {
        so.Queue = "raw";
        so.ManualAck = true;
        s = js_Subscribe(&sub, js, argv[4], raw_on_msg, NULL, NULL, &so,
                         NULL);
    }
    if (s != NATS_OK)
        return 1;
    printf("ready\n");
    fflush(stdout);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    while (!raw_stop_asked()) {
        if (!pull) {
            bench_sleep_until(seda_now() + 0.005);
            continue;
        }
        natsMsgList l;
        if (natsSubscription_Fetch(&l, sub, 256, 100, NULL) != NATS_OK)
            continue;
        for (int i = 0; i < l.Count; i++)
            natsMsg_Ack(l.Msgs[i], NULL);
        atomic_fetch_add_explicit(&g_raw_got, l.Count, memory_order_relaxed);
        natsMsgList_Destroy(&l);
    }
    if (!pull)
        natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    printf("count %ld\n", atomic_load(&g_raw_got));
    fflush(stdout);
    return 0;
}

/* What a raw trial measured. */
struct raw_res {
    double rate;                /* published / s (NAN: no trial) */
    long n;                     /* published */
    long consumed;              /* taken by its consumers meanwhile */
    struct cpu_use cpu;
};

/* cnats's JetStream publish rate: async (a window of RB_CAP) or sync, a
 * Nats-Msg-Id each, with `consumers` raw consumer processes (push or
 * pull) taking the messages meanwhile. */
static void raw_rate(const char *url, bool async, int consumers, bool pull,
                     int trial, double window, struct raw_res *out)
{
    memset(out, 0, sizeof *out);
    out->rate = NAN;
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    char stream[32], subj[64];
    snprintf(stream, sizeof stream, "RAW%s%s%d%d", async ? "A" : "S",
             pull ? "P" : "", consumers, trial);
    snprintf(subj, sizeof subj, "raw.%s", stream);
    if (natsOptions_Create(&o) != NATS_OK ||
        natsOptions_SetURL(o, url) != NATS_OK ||
        natsOptions_SetSendAsap(o, true) != NATS_OK ||
        natsConnection_Connect(&nc, o) != NATS_OK) {
        natsOptions_Destroy(o);
        return;
    }
    natsOptions_Destroy(o);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 30000;
    jo.PublishAsync.MaxPending = RB_CAP;
    jo.PublishAsync.StallWait = 30000;
    natsConnection_JetStream(&js, nc, &jo);
    jsStreamConfig sc;
    const char *subs[1] = { subj };
    jsStreamConfig_Init(&sc);
    sc.Name = stream;
    sc.Subjects = subs;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Retention = js_WorkQueuePolicy;
    js_AddStream(NULL, js, &sc, NULL, NULL);
    struct cproc cp[2];
    memset(cp, 0, sizeof cp);
    cpu_mark(&out->cpu, g_server_pid);
    long n = 0;
    int started = 0;
    for (; started < consumers; started++) {
        const char *args[] = { "--raw-consumer", url, stream, subj,
                               pull ? "pull" : "push", NULL };
        if (!proc_start(&cp[started], args))
            break;
    }
    if (started == consumers) {
        char payload[64];
        memset(payload, 'x', sizeof payload);
        double t0 = seda_now(), end = t0 + window;
        while (seda_now() < end) {
            char id[32];
            jsPubOptions po;
            jsPubOptions_Init(&po);
            snprintf(id, sizeof id, "raw-%ld", n);
            po.MsgId = id;
            natsStatus s = async ? js_PublishAsync(js, subj, payload,
                                                   sizeof payload, &po)
                                 : js_Publish(NULL, js, subj, payload,
                                              sizeof payload, &po, NULL);
            if (s != NATS_OK)
                break;
            n++;
        }
        if (async) {
            jsPubOptions co;
            jsPubOptions_Init(&co);
            co.MaxWait = 30000;
            js_PublishAsyncComplete(js, &co);
        }
        out->rate = n / (seda_now() - t0);
    }
    out->n = n;
    for (int i = 0; i < started; i++)
        out->consumed += cproc_stop(&cp[i]);
    cpu_since(&out->cpu, g_server_pid);
    js_DeleteStream(js, stream, NULL, NULL);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* ---- a trial ---- */

struct rtrial {
    long total, delivered, errors, republished, failed;
    long stored;                /* JetStream acknowledged the publish */
    int last_err;
    double start;               /* when publishing began */
    double elapsed, consumed_at, publish_end, window;
    bool drained;
    struct latency lat;
    struct cpu_use cpu;         /* this process, consumers and server */
};

/* The producer (this thread): publish to st for r->window seconds from
 * r->start; stops at the first failed publish. */
static void rt_publish(seda_stage_t *st, struct rtrial *r, bool codec)
{
    double deadline = r->start + r->window;
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    o.kind = 1;                         /* the Lua codec's float */
    unsigned char fl[9] = { RB_FLOAT_TAG };
    bench_sleep_until(r->start);
    for (;;) {
        double now = seda_now();
        if (now >= deadline)
            break;
        int rc;
        if (codec) {
            /* JSON cannot carry a float with an integral value. */
            if (now == floor(now))
                now = nextafter(now, INFINITY);
            memcpy(fl + 1, &now, sizeof now);
            rc = seda_stage_publish(st, fl, sizeof fl, &o);
        } else {
            rc = seda_stage_publish(st, &now, sizeof now, NULL);
        }
        if (rc) {
            r->errors++;
            r->last_err = rc;
            break;
        }
        r->total++;
    }
    r->publish_end = seda_now();
}

/* After publishing: wait until bus has stored everything, then (with
 * consumers) until JetStream says nothing is pending or unacknowledged
 * (at most 120 s); the stage's remote stats into r. */
static void rt_settle(seda_bus_t *bus, seda_stage_t *st, int consumers,
                      struct rtrial *r)
{
    /* Stored: nothing awaits an acknowledgement any more. */
    seda_bus_wait_idle(bus, 60);
    r->elapsed = seda_now() - r->start;
    /* Consumed: JetStream says nothing is pending or unacknowledged. */
    double give_up = seda_now() + (consumers ? 120 : 0);
    seda_remote_stats rs;
    for (;;) {
        seda_remote_stats_get(st, &rs);
        if ((rs.js_pending == 0 && rs.js_ack_pending == 0 &&
             rs.js_age >= 0 && rs.js_age < 0.2 &&
             seda_now() - rs.js_age > r->publish_end) ||
            seda_now() > give_up)
            break;
        bench_sleep_until(seda_now() + 0.02);
    }
    r->drained = consumers ? rs.js_pending == 0 && rs.js_ack_pending == 0
                           : rs.published == (uint64_t)r->total;
    r->consumed_at = consumers ? seda_now() - rs.js_age : r->publish_end;
    r->republished = (long)rs.republished;
    r->failed = (long)rs.publish_failed;
    r->stored = (long)rs.published;
}

/* The trial's row (raw, raw_pull, raw_alone: cnats's reference rates),
 * and its progress line. */
static void rt_row(const char *stream, bool lua, int consumers, int trial,
                   const struct rtrial *r, double raw, double raw_pull,
                   double raw_alone, const char *format)
{
    double thr = r->elapsed > 0 ? (double)r->stored / r->elapsed : 0;
    double consumed = r->consumed_at > r->start
                          ? (double)r->delivered / (r->consumed_at - r->start)
                          : 0;
    struct row w;
    row_begin(&w, lua ? "lua" : "c", "remote");
    row_int(&w, "trial", trial);
    row_int(&w, "producers", 1);
    row_int(&w, "consumers", consumers);
    row_int(&w, "concurrency", 1);
    row_int(&w, "capacity", RB_CAP);
    row_num(&w, "load_fraction", 0, 1);
    row_int(&w, "total", r->total);
    row_int(&w, "delivered", r->delivered);
    row_num(&w, "elapsed_ms", r->elapsed * 1e3, 0);
    row_num(&w, "throughput_eps", thr, 0);
    row_latency(&w, &r->lat);
    row_bool(&w, "drained", r->drained &&
                            (consumers == 0 || r->delivered == r->total));
    row_int(&w, "stored", r->stored);
    row_num(&w, "raw_js_publish_eps", raw, 0);
    row_num(&w, "raw_ratio", raw > 0 ? thr / raw : NAN, 3);
    row_num(&w, "raw_js_publish_eps_alone", raw_alone, 0);
    if (consumers) {
        row_num(&w, "raw_js_publish_eps_pull", raw_pull, 0);
        row_num(&w, "raw_ratio_pull", raw_pull > 0 ? thr / raw_pull : NAN, 3);
        row_num(&w, "consumed_eps", consumed, 0);
        row_num(&w, "drain_tail_ms", (r->consumed_at - r->publish_end) * 1e3,
                0);
    }
    row_str(&w, "stream", stream);
    row_str(&w, "format", format ? format : "seda");
    row_str(&w, "latency", "array");
    row_cpu(&w, &r->cpu, r->stored);
    if (r->republished || r->failed) {
        row_int(&w, "republished", r->republished);
        row_int(&w, "publish_failed", r->failed);
    }
    if (r->lat.n != (size_t)r->delivered)
        row_int(&w, "samples", (long long)r->lat.n);
    if (consumers && r->delivered != r->total)
        row_int(&w, "lost", r->total - r->delivered);
    if (r->errors) {
        row_int(&w, "publish_errors", r->errors);
        row_str(&w, "publish_error", seda_strerror(r->last_err));
    }
    row_end(&w);
    bench_progress("remote/%s%s%s %d consumer%s trial %d: %.0f/s stored "
                   "(%.2f of raw %.0f/s), %.0f/s consumed, p50 %.0f us p99 "
                   "%.0f us%s", lua ? "lua" : "c", format ? " " : "",
                   format ? format : "", consumers,
                   consumers == 1 ? "" : "s", trial, thr,
                   raw > 0 ? thr / raw : 0, raw, consumed, r->lat.p50,
                   r->lat.p99, r->drained ? "" : ", NOT DRAINED");
}

static void run_trial(const char *url, bool lua, int consumers, int trial,
                      double raw, double raw_pull, double raw_alone,
                      const char *format)
{
    char stream[32];
    snprintf(stream, sizeof stream, "B%s%d%d%s", lua ? "L" : "C", consumers,
             trial, format ? format : "");
    struct rtrial r;
    memset(&r, 0, sizeof r);
    struct cproc cp[2];
    memset(cp, 0, sizeof cp);
    cpu_mark(&r.cpu, g_server_pid);
    /* The consumers first: they make the durable consumer. */
    for (int i = 0; i < consumers; i++)
        if (!cproc_start(&cp[i], url, stream, lua, i, format)) {
            fprintf(stderr, "bench: remote consumer %d did not start\n", i);
            for (int k = 0; k <= i; k++)
                cproc_stop(&cp[k]);
            return;
        }
    seda_bus_t *bus;
    seda_bus_new(NULL, &bus);
    seda_stage_opts so;
    seda_stage_opts_init(&so);
    so.name = "bench";
    so.capacity = RB_CAP;
    so.publish_timeout = 30;
    seda_remote_opts ro;
    seda_remote_opts_init(&ro);
    ro.url = url;
    ro.stream = stream;
    ro.format = seda_lua_format(format);
    seda_stage_t *st;
    char err[600];
    if (seda_remote_stage_add(bus, &so, &ro, &st, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        seda_bus_free(bus);
        for (int i = 0; i < consumers; i++)
            cproc_stop(&cp[i]);
        return;
    }
    r.window = g_cfg.quick ? 0.3 : g_cfg.calib_s;
    r.start = seda_now() + 0.01;
    rt_publish(st, &r, format != NULL);
    rt_settle(bus, st, consumers, &r);
    seda_bus_free(bus);
    for (int i = 0; i < consumers; i++) {
        long n = cproc_stop(&cp[i]);
        r.delivered += n > 0 ? n : 0;
    }
    cpu_since(&r.cpu, g_server_pid);
    merge_samples(cp, consumers, &r.lat);
    rt_row(stream, lua, consumers, trial, &r, raw, raw_pull, raw_alone,
           format);
}

void bench_remote(void)
{
    struct natsd srv;
    if (!natsd_start(&srv, NULL)) {
        fprintf(stderr, "bench: remote: no nats-server (sh scripts/deps.sh "
                "installs it)\n");
        return;
    }
    g_server_pid = srv.pid;
    int trials = g_cfg.quick ? 1 : 3;
    double window = g_cfg.quick ? 0.3 : g_cfg.calib_s;
    /* Paired trials: for each number of consumer processes, cnats's own
     * rate with as many raw consumers taking the messages (the same load
     * on the machine and the server), then ours with the C consumer and
     * with the Lua handler, back to back, so that each of our rows is
     * read against the raw rate of a moment before (this VM's speed
     * drifts over minutes; measuring every raw rate first put the Lua
     * rows furthest from theirs).  The synchronous rate alone once, for
     * reference. */
    double raw_alone = NAN;
    for (int c = 0; c <= 2; c++) {
        for (int t = 0; t < trials; t++) {
            /* The reference (push consumers), cnats's Fetch loop beside
             * it when there are consumers, the synchronous rate once. */
            double rate = NAN, rate_pull = NAN;
            for (int m = 0; m < 3; m++) {
                bool async = m < 2, pull = m == 1;
                if ((pull && c == 0) || (!async && (c > 0 || t > 0)))
                    continue;
                struct raw_res r;
                raw_rate(srv.url, async, c, pull, t + 1, window, &r);
                struct row w;
                row_begin(&w, "c", "remote_raw");
                row_int(&w, "trial", t + 1);
                row_str(&w, "mode", async ? "async" : "sync");
                row_int(&w, "consumers", c);
                if (c > 0) {
                    row_str(&w, "consumer", pull ? "pull" : "push");
                    row_int(&w, "consumed", r.consumed);
                }
                row_int(&w, "window", async ? RB_CAP : 1);
                row_int(&w, "payload_bytes", 64);
                row_num(&w, "throughput_eps", r.rate, 0);
                row_cpu(&w, &r.cpu, r.n);
                row_end(&w);
                bench_progress("remote_raw %s, %d consumer%s%s, trial %d: "
                               "%.0f/s (%ld of %ld consumed meanwhile)",
                               async ? "async" : "sync", c,
                               c == 1 ? "" : "s",
                               c == 0 ? "" : pull ? " (pull)" : " (push)",
                               t + 1, r.rate, r.consumed, r.n);
                if (pull)
                    rate_pull = r.rate;
                else if (async)
                    rate = r.rate;
            }
            if (c == 0 && t == 0)
                raw_alone = rate;
            for (int h = 0; h < 2; h++) {
                bool lua = h == 1;
                /* No consumer: publishing alone (no handler: once, as
                 * "c"). */
                if ((lua ? !g_cfg.want_lua : !g_cfg.want_c) ||
                    (lua && c == 0))
                    continue;
                run_trial(srv.url, lua, c, t + 1, rate, rate_pull, raw_alone,
                          NULL);
                /* format = "json" and "msgpack" beside "seda" (one
                 * consumer process), against the same raw rates. */
                for (int f = 0; c == 1 && f < 2; f++)
                    run_trial(srv.url, lua, c, t + 1, rate, rate_pull,
                              raw_alone, f ? "msgpack" : "json");
            }
        }
    }
    natsd_cleanup(&srv);
}
