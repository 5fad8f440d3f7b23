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
    if (seda__l_remote_push_stats(L, st))
        lua_setfield(L, -2, "remote");
    set_int(L, "refused", (lua_Integer)s.refused);
    set_int(L, "shed", (lua_Integer)s.shed);
    set_int(L, "shed_for", (lua_Integer)s.shed_for);
    set_int(L, "delayed", s.delayed);
    set_int(L, "suspended", s.suspended);
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
    for (int i = 0; i < 8; i++) {
        lua_pushnumber(L, latv[i]);
        lua_setfield(L, -2, lat[i]);
    }
    set_int(L, "sojourn_count", (lua_Integer)s.sojourn_count);
    lua_pushnumber(L, s.sojourn_sum);
    lua_setfield(L, -2, "sojourn_sum");
    set_int(L, "service_count", (lua_Integer)s.service_count);
    lua_pushnumber(L, s.service_sum);
    lua_setfield(L, -2, "service_sum");
    lua_pushnumber(L, s.rate);
    lua_setfield(L, -2, "rate");
    lua_pushstring(L, seda_delivery_name(s.delivery));
    lua_setfield(L, -2, "delivery");
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
    set_int(L, "accepted", (lua_Integer)b.accepted);
    set_int(L, "completed", (lua_Integer)b.completed);
    set_int(L, "dead_lettered", (lua_Integer)b.dead_lettered);
    set_int(L, "dropped", (lua_Integer)b.dropped);
    set_int(L, "handed_off", (lua_Integer)b.handed_off);
    set_int(L, "in_system", (lua_Integer)b.in_system);
    set_int(L, "workers", b.workers);
    set_int(L, "workers_loaned", b.workers_loaned);
    set_int(L, "suspended", b.suspended);
    set_int(L, "loans", (lua_Integer)b.loans);
    set_int(L, "loans_peak", b.loans_peak);
    set_int(L, "max_loans", b.max_loans);
    seda_journal_stats js;
    seda_bus_journal_stats(lb->bus, &js);
    set_int(L, "wal_discarded_frames", (lua_Integer)js.wal_discarded_frames);
    set_int(L, "wal_discarded_bytes", (lua_Integer)js.wal_discarded_bytes);
    set_int(L, "quarantined", (lua_Integer)js.quarantined);
    set_int(L, "callbacks_pending", atomic_load_explicit(&lb->npending_cb,
                                                         memory_order_relaxed));
    lua_pushboolean(L, b.paused);
    lua_setfield(L, -2, "paused");
    lua_pushboolean(L, b.closed);
    lua_setfield(L, -2, "closed");
    return 1;
}
