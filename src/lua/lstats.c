/* SPDX-License-Identifier: MIT */
/*
 * lstats.c -- the stats tables: bus:stats() (every stage, in declaration
 * order, with the bus's own counters and the worker states' memory) and
 * bus:stats(name) (one stage's table), on the main state and in handlers
 * (seda.stats).
 *
 * DESIGN
 *   Every figure is read through the public API (seda_stage_stats_get,
 *   seda_bus_stats_get) and the binding's own records (struct lstage:
 *   handler versions, reloads, reload errors, under ls->mu); nothing
 *   here keeps state.
 */
#include <dirent.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lseda.h"

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

/* One stage's table; index: its place in declaration order (from 1). */
static void push_stage_stats(lua_State *L, seda_stage_t *st, int index)
{
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    struct lstage *ls = seda_stage_userdata(st);
    lua_createtable(L, 0, 36);
    lua_pushstring(L, s.name);
    lua_setfield(L, -2, "name");
    if (index > 0)
        set_int(L, "index", index);
    set_int(L, "depth", s.depth);
    set_int(L, "capacity", s.capacity);
    set_int(L, "concurrency", s.concurrency);
    set_int(L, "in_flight", s.in_flight);
    set_int(L, "enqueued", (lua_Integer)s.enqueued);
    set_int(L, "delivered", (lua_Integer)s.delivered);
    set_int(L, "nacked", (lua_Integer)s.nacked);
    set_int(L, "dropped", (lua_Integer)s.dropped);
    set_int(L, "dead_lettered", (lua_Integer)s.dead_lettered);
    set_int(L, "errors", (lua_Integer)s.errors);
    set_int(L, "completed", (lua_Integer)s.completed);
    set_int(L, "invalid", (lua_Integer)s.invalid);
    set_int(L, "handed_off", (lua_Integer)s.handed_off);
    set_int(L, "long_holds", (lua_Integer)s.long_holds);
    if (seda__l_remote_push_stats(L, st))
        lua_setfield(L, -2, "remote");
    set_int(L, "refused", (lua_Integer)s.refused);
    set_int(L, "shed", (lua_Integer)s.shed);
    set_int(L, "shed_for", (lua_Integer)s.shed_for);
    set_int(L, "delayed", s.delayed);
    set_int(L, "suspended", s.suspended);
    lua_createtable(L, 0, SEDA_DEAD_REASONS);
    for (int k = 0; k < SEDA_DEAD_REASONS; k++) {
        if (!s.dead_by_reason[k])
            continue;
        lua_pushinteger(L, (lua_Integer)s.dead_by_reason[k]);
        lua_setfield(L, -2, seda_dead_reason_name(k));
    }
    lua_setfield(L, -2, "dead_by_reason");
    set_int(L, "shedding", s.shedding);
    set_int(L, "depth_high", s.depth_high);
    set_int(L, "depth_low", s.depth_low);
    set_int(L, "consumers", s.consumers);
    set_int(L, "max_attempts", s.max_attempts);
    lua_pushstring(L, seda_policy_name(s.policy));
    lua_setfield(L, -2, "policy");
    static const char *const lat[] = {
        "sojourn_p50", "sojourn_p99", "sojourn_p999", "sojourn_max",
        "service_p50", "service_p99", "service_p999", "service_max",
    };
    const double latv[] = {
        s.sojourn_p50, s.sojourn_p99, s.sojourn_p999, s.sojourn_max,
        s.service_p50, s.service_p99, s.service_p999, s.service_max,
    };
    /* Seconds, as every time in Lua (the C API counts microseconds). */
    for (int i = 0; i < 8; i++) {
        lua_pushnumber(L, latv[i] / 1e6);
        lua_setfield(L, -2, lat[i]);
    }
    lua_pushnumber(L, s.window);
    lua_setfield(L, -2, "window");
    set_int(L, "window_count", (lua_Integer)s.window_count);
    set_int(L, "sojourn_count", (lua_Integer)s.sojourn_count);
    lua_pushnumber(L, s.sojourn_sum / 1e6);
    lua_setfield(L, -2, "sojourn_sum");
    set_int(L, "service_count", (lua_Integer)s.service_count);
    lua_pushnumber(L, s.service_sum / 1e6);
    lua_setfield(L, -2, "service_sum");
    lua_pushnumber(L, s.rate);
    lua_setfield(L, -2, "rate");
    lua_pushstring(L, seda_delivery_name(s.delivery));
    lua_setfield(L, -2, "delivery");
    lua_pushboolean(L, s.durable != SEDA_MEMORY);
    lua_setfield(L, -2, "durable");
    if (ls) {
        pthread_mutex_lock(&ls->mu);
        uint64_t version = ls->version;
        char *e = ls->last_error ? strdup(ls->last_error) : NULL;
        pthread_mutex_unlock(&ls->mu);
        set_int(L, "version", (lua_Integer)version);
        if (e) {
            lua_pushstring(L, e);
            lua_setfield(L, -2, "last_error");
            free(e);
        }
    }
}

/* worker_memory = { bytes of worker 0, worker 1, ... } and loan_memory
 * (the loan threads' states, warm ones included) in the table on top. */
static void push_worker_memory(lua_State *L, struct lbus *lb)
{
    int tab = lua_gettop(L);
    int max = 64, n;
    size_t *bytes;
    int *index;
    for (;;) {              /* the arrays stay anchored on the stack */
        bytes = lua_newuserdatauv(L, sizeof *bytes * (size_t)max, 0);
        index = lua_newuserdatauv(L, sizeof *index * (size_t)max, 0);
        n = seda__l_worker_memory(lb, bytes, index, max);
        if (n <= max)
            break;
        lua_pop(L, 2);
        max = n + 16;       /* room for a few more starting meanwhile */
    }
    lua_createtable(L, n, 0);
    lua_createtable(L, 0, 0);
    int nw = 0, nl = 0;
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)bytes[i]);
        if (index[i] < 1024)
            lua_rawseti(L, tab + 3, ++nw);
        else
            lua_rawseti(L, tab + 4, ++nl);
    }
    lua_setfield(L, tab, "loan_memory");
    lua_setfield(L, tab, "worker_memory");
    lua_settop(L, tab);
}

int seda__l_stats_push(lua_State *L, struct lbus *lb, const char *name)
{
    if (!lb->bus) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    if (name) {
        seda_stage_t *st = seda_bus_stage(lb->bus, name);
        if (st) {
            int index = 0;
            for (int i = 0; index == 0; i++) {
                seda_stage_t *at = seda_bus_stage_at(lb->bus, i);
                if (!at)
                    break;
                if (at == st)
                    index = i + 1;
            }
            push_stage_stats(L, st, index);
            return 1;
        }
        lua_pushnil(L);
        lua_pushliteral(L, "no_such_stage");
        return 2;
    }
    seda_bus_stats b;
    seda_bus_stats_get(lb->bus, &b);
    lua_createtable(L, 0, 14);
    lua_createtable(L, 0, b.stages);
    for (int i = 0; i < b.stages; i++) {
        seda_stage_t *st = seda_bus_stage_at(lb->bus, i);
        if (!st)
            break;
        push_stage_stats(L, st, i + 1);
        lua_setfield(L, -2, seda_stage_name(st));
    }
    lua_setfield(L, -2, "stages");
    seda__l_http_push_stats(L, lb);
    lua_setfield(L, -2, "listeners");
    push_worker_memory(L, lb);
    lua_pushstring(L, lb->name);
    lua_setfield(L, -2, "name");
    set_int(L, "accepted", (lua_Integer)b.accepted);
    set_int(L, "completed", (lua_Integer)b.completed);
    set_int(L, "dead_lettered", (lua_Integer)b.dead_lettered);
    set_int(L, "dropped", (lua_Integer)b.dropped);
    set_int(L, "handed_off", (lua_Integer)b.handed_off);
    set_int(L, "in_system", (lua_Integer)b.in_system);
    set_int(L, "workers", b.workers);
    set_int(L, "workers_loaned", b.workers_loaned);
    set_int(L, "suspended", b.suspended);
    set_int(L, "waits_uncovered", (lua_Integer)b.waits_uncovered);
    set_int(L, "long_holds", (lua_Integer)b.long_holds);
    set_int(L, "loans", (lua_Integer)b.loans);
    set_int(L, "loans_peak", b.loans_peak);
    set_int(L, "max_loans", b.max_loans);
    seda_journal_stats js;
    seda_bus_journal_stats(lb->bus, &js);
    set_int(L, "wal_discarded_frames", (lua_Integer)js.wal_discarded_frames);
    set_int(L, "wal_discarded_bytes", (lua_Integer)js.wal_discarded_bytes);
    set_int(L, "quarantined", (lua_Integer)js.quarantined);
    if (js.open) {
        /* The journal's group commits (see docs/guide.md, durable). */
        lua_createtable(L, 0, 5);
        set_int(L, "commits", (lua_Integer)js.commits);
        set_int(L, "requests", (lua_Integer)js.requests);
        set_int(L, "group_max", (lua_Integer)js.group_max);
        set_int(L, "fsyncs", (lua_Integer)js.fsyncs);
        lua_pushnumber(L, js.commits ? (double)js.requests /
                                           (double)js.commits : 0.0);
        lua_setfield(L, -2, "group_mean");
        lua_setfield(L, -2, "journal");
    }
    set_int(L, "callbacks_pending", atomic_load_explicit(&lb->npending_cb,
                                                         memory_order_relaxed));
    lua_pushboolean(L, b.paused);
    lua_setfield(L, -2, "paused");
    lua_pushboolean(L, b.closed);
    lua_setfield(L, -2, "closed");
    return 1;
}

/* bus:stats([stage]) */
int seda__l_stats(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    return seda__l_stats_push(L, u->lb, luaL_optstring(L, 2, NULL));
}

/* ---- histograms and the process, for exposition ---- */

/* bus:histogram(stage, "sojourn" | "service", bounds) -> cum, count, sum:
 * cum[i] the samples of at most bounds[i] seconds since the stage was
 * made (a Prometheus histogram's _bucket), count and sum (seconds).
 * nil, "no_such_stage" for an unknown stage; raises on bad arguments. */
int seda__l_stats_histogram(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    const char *name = luaL_checkstring(L, 2);
    const char *kind = luaL_checkstring(L, 3);
    luaL_checktype(L, 4, LUA_TTABLE);
    int which = strcmp(kind, "sojourn") == 0 ? SEDA_HIST_SOJOURN
              : strcmp(kind, "service") == 0 ? SEDA_HIST_SERVICE : 0;
    if (!which)
        return luaL_argerror(L, 3, "\"sojourn\" or \"service\"");
    int n = (int)lua_rawlen(L, 4);
    if (n > 64)
        return luaL_argerror(L, 4, "at most 64 bounds");
    double le[64];
    uint64_t cum[64];
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 4, i + 1);
        if (!lua_isnumber(L, -1))
            return luaL_argerror(L, 4, "bounds must be numbers (seconds)");
        le[i] = lua_tonumber(L, -1);
        lua_pop(L, 1);
    }
    seda_stage_t *st = seda_bus_stage(u->lb->bus, name);
    if (!st) {
        lua_pushnil(L);
        lua_pushliteral(L, "no_such_stage");
        return 2;
    }
    uint64_t count;
    double sum;
    seda_stage_histogram(st, which, le, n, cum, &count, &sum);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)cum[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, (lua_Integer)count);
    lua_pushnumber(L, sum);
    return 3;
}

/* seda.process() -> { resident_memory_bytes, cpu_seconds, open_fds,
 * max_fds, start_time_seconds }: what Prometheus's process_* families
 * carry, read from /proc and getrusage. */
int seda__l_stats_process(lua_State *L)
{
    lua_createtable(L, 0, 5);
    long page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long size, rss;
        if (fscanf(f, "%lu %lu", &size, &rss) == 2) {
            lua_pushinteger(L, (lua_Integer)rss * page);
            lua_setfield(L, -2, "resident_memory_bytes");
            lua_pushinteger(L, (lua_Integer)size * page);
            lua_setfield(L, -2, "virtual_memory_bytes");
        }
        fclose(f);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        lua_pushnumber(L, (double)ru.ru_utime.tv_sec +
                              (double)ru.ru_utime.tv_usec / 1e6 +
                              (double)ru.ru_stime.tv_sec +
                              (double)ru.ru_stime.tv_usec / 1e6);
        lua_setfield(L, -2, "cpu_seconds");
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int n = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (e->d_name[0] != '.')
                n++;
        closedir(d);
        lua_pushinteger(L, n - 1);      /* less the one listing them */
        lua_setfield(L, -2, "open_fds");
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        lua_pushinteger(L, (lua_Integer)rl.rlim_cur);
        lua_setfield(L, -2, "max_fds");
    }
    /* Start time: the 22nd field of /proc/self/stat, in clock ticks
     * after boot; boot time from /proc/stat's btime. */
    double start = -1;
    f = fopen("/proc/self/stat", "r");
    if (f) {
        char buf[1024];
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        buf[got] = '\0';
        fclose(f);
        const char *p = strrchr(buf, ')');
        unsigned long long ticks = 0;
        int field = 2;
        for (; p && *p && field < 22; p++)
            if (*p == ' ')
                field++;
        if (p && sscanf(p, "%llu", &ticks) == 1) {
            FILE *s = fopen("/proc/stat", "r");
            char line[256];
            unsigned long long btime = 0;
            while (s && fgets(line, sizeof line, s))
                if (sscanf(line, "btime %llu", &btime) == 1)
                    break;
            if (s)
                fclose(s);
            long hz = sysconf(_SC_CLK_TCK);
            if (btime && hz > 0)
                start = (double)btime + (double)ticks / (double)hz;
        }
    }
    if (start >= 0) {
        lua_pushnumber(L, start);
        lua_setfield(L, -2, "start_time_seconds");
    }
    return 1;
}
