/* SPDX-License-Identifier: MIT */
/*
 * lobserve.c -- the process's live buses seen from a Lua state that is not
 * the main one (seda_lua_open_observer): what seda-lua's --http and
 * --metrics serve from a thread of their own, so a main state busy with a
 * long command, a long script or `while true do end` does not stop the
 * scrapes.
 *
 * DESIGN
 *   Buses are made and shut down on the main state; an observer reads
 *   them from another thread.  A process-wide list of the live buses
 *   (each with a number never reused, so a view of a bus that is gone
 *   never finds a new bus at the same address) is guarded by one mutex,
 *   and a view's method runs with that mutex held: a bus leaves the list
 *   (at its shutdown's end, or when collected) only between two methods,
 *   so it is never freed under one.  The methods are the read-only bus
 *   methods themselves (stats, errors, dead_letters, histogram), called
 *   with a stand-in bus object of the same layout that no metatable
 *   collects; they read the core through its thread-safe accessors and
 *   the bus's worker list under its own mutex (order: this mutex, then
 *   the bus's).  The main state never takes this mutex while holding
 *   another lock.
 *
 *   An observer's tap (seda__l_observe_tap_*, seda-lua's /tap) outlives
 *   one method: it is on the list below with its bus's number, read
 *   under the mutex without waiting, and closed by the bus's leaving the
 *   list (seda__l_observe_remove), before the bus can be freed.  The
 *   taps' own mutex is a leaf under this one.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "lseda.h"
#include "seda_lua.h"

#define VIEW_MT "seda.bus_view"

struct live {
    struct lbus *lb;
    uint64_t id;                /* never reused */
};

static pthread_mutex_t obs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct live *live;       /* creation order; guarded by obs_mu */
static int nlive, caplive;      /* guarded by obs_mu */
static uint64_t next_id = 1;    /* guarded by obs_mu */

struct seda_lua_otap {
    struct seda_lua_otap *next; /* guarded by obs_mu */
    uint64_t bus;               /* the live bus's id; immutable */
    seda_tap_t *tap;            /* NULL once the bus left; guarded by
                                   obs_mu */
};
static struct seda_lua_otap *otaps; /* open observer taps; obs_mu */

void seda__l_observe_add(struct lbus *lb)
{
    pthread_mutex_lock(&obs_mu);
    if (nlive == caplive) {
        int cap = caplive ? caplive * 2 : 8;
        struct live *p = realloc(live, (size_t)cap * sizeof *p);
        if (!p) {                       /* the bus is just not observed */
            pthread_mutex_unlock(&obs_mu);
            return;
        }
        live = p;
        caplive = cap;
    }
    live[nlive++] = (struct live){ lb, next_id++ };
    pthread_mutex_unlock(&obs_mu);
}

void seda__l_observe_remove(struct lbus *lb)
{
    pthread_mutex_lock(&obs_mu);
    for (int i = 0; i < nlive; i++) {
        if (live[i].lb == lb) {
            for (struct seda_lua_otap *t = otaps; t; t = t->next) {
                if (t->bus == live[i].id && t->tap) {
                    seda_tap_close(t->tap);
                    t->tap = NULL;
                }
            }
            memmove(&live[i], &live[i + 1],
                    (size_t)(nlive - i - 1) * sizeof *live);
            nlive--;
            break;
        }
    }
    pthread_mutex_unlock(&obs_mu);
}

/* The live bus numbered id, or NULL.  obs_mu held. */
static struct lbus *find(uint64_t id)
{
    for (int i = 0; i < nlive; i++)
        if (live[i].id == id)
            return live[i].lb;
    return NULL;
}

struct view {
    uint64_t id;
    char name[SEDA_NAME_MAX + 1];
};

/* A view's method: upvalue 1 is the bus method to run.  nil, "closed"
 * when the bus has been shut down since the view was made. */
static int view_call(lua_State *L)
{
    struct view *v = luaL_checkudata(L, 1, VIEW_MT);
    pthread_mutex_lock(&obs_mu);
    struct lbus *lb = find(v->id);
    if (!lb || !lb->bus) {
        pthread_mutex_unlock(&obs_mu);
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    /* The stand-in: seda__l_check_bus takes it by its size and tag. */
    struct lbusud *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    u->tag = &seda__l_bus_tag;
    u->lb = lb;
    lua_replace(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    pthread_mutex_unlock(&obs_mu);
    if (rc != LUA_OK)
        return lua_error(L);
    return lua_gettop(L);
}

static int view_tostring(lua_State *L)
{
    struct view *v = luaL_checkudata(L, 1, VIEW_MT);
    lua_pushfstring(L, "seda.bus_view(%s)", v->name);
    return 1;
}

static int view_index(lua_State *L)
{
    struct view *v = luaL_checkudata(L, 1, VIEW_MT);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "name") == 0) {
        lua_pushstring(L, v->name);
        return 1;
    }
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, k);
    return 1;
}

/* buses(): a view of every live bus, in creation order. */
static int obs_buses(lua_State *L)
{
    lua_newtable(L);
    pthread_mutex_lock(&obs_mu);
    int n = nlive;
    struct live *copy = n ? malloc((size_t)n * sizeof *copy) : NULL;
    char (*names)[SEDA_NAME_MAX + 1] =
        n ? malloc((size_t)n * sizeof *names) : NULL;
    if (n && (!copy || !names)) {
        pthread_mutex_unlock(&obs_mu);
        free(copy);
        free(names);
        return luaL_error(L, "buses: out of memory");
    }
    for (int i = 0; i < n; i++) {
        copy[i] = live[i];
        memcpy(names[i], live[i].lb->name, sizeof names[i]);
    }
    pthread_mutex_unlock(&obs_mu);
    for (int i = 0; i < n; i++) {
        struct view *v = lua_newuserdatauv(L, sizeof *v, 0);
        v->id = copy[i].id;
        memcpy(v->name, names[i], sizeof v->name);
        luaL_setmetatable(L, VIEW_MT);
        lua_rawseti(L, -2, i + 1);
    }
    free(copy);
    free(names);
    return 1;
}

/* ---- observer taps ---- */

/* The live bus label names a stage of, and that stage (*st); NULL when
 * none.  obs_mu held. */
static struct live *find_stage(const char *label, seda_stage_t **st)
{
    char base[SEDA_NAME_MAX + 1];
    long nth = 1;
    const char *hash = strrchr(label, '#');
    size_t n = hash ? (size_t)(hash - label) : strlen(label);
    if (hash) {
        char *end;
        nth = strtol(hash + 1, &end, 10);
        if (hash[1] == '\0' || *end || nth < 2)
            return NULL;
    }
    if (n == 0 || n >= sizeof base)
        return NULL;
    memcpy(base, label, n);
    base[n] = '\0';
    for (int i = 0; i < nlive; i++) {
        seda_bus_t *b = live[i].lb->bus;
        seda_stage_t *s = b ? seda_bus_stage(b, base) : NULL;
        if (s && --nth == 0) {
            *st = s;
            return &live[i];
        }
    }
    return NULL;
}

int seda__l_observe_tap_open(const char *label, int capacity,
                             seda_lua_otap **out)
{
    struct seda_lua_otap *t = calloc(1, sizeof *t);
    if (!t)
        return SEDA_ENOMEM;
    pthread_mutex_lock(&obs_mu);
    seda_stage_t *st = NULL;
    struct live *l = find_stage(label, &st);
    int rc = l ? seda_tap_open(st, capacity, &t->tap) : SEDA_ENOSTAGE;
    if (rc == 0) {
        t->bus = l->id;
        t->next = otaps;
        otaps = t;
    }
    pthread_mutex_unlock(&obs_mu);
    if (rc != 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int seda__l_observe_tap_read(seda_lua_otap *t, seda_tap_entry *out,
                             int max, uint64_t *missed)
{
    pthread_mutex_lock(&obs_mu);
    int k = t->tap ? seda_tap_read(t->tap, out, max, 0, missed)
                   : SEDA_ECLOSED;
    pthread_mutex_unlock(&obs_mu);
    return k;
}

void seda__l_observe_tap_close(seda_lua_otap *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&obs_mu);
    for (struct seda_lua_otap **pp = &otaps; *pp; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    seda_tap_close(t->tap);
    pthread_mutex_unlock(&obs_mu);
    free(t);
}

static int obs_now(lua_State *L)
{
    lua_pushnumber(L, seda_now());
    return 1;
}

int seda_lua_open_observer(lua_State *L)
{
    if (luaL_newmetatable(L, VIEW_MT)) {
        static const struct {
            const char *name;
            lua_CFunction fn;
        } methods[] = {
            { "stats", seda__l_stats },
            { "errors", seda__l_errors },
            { "dead_letters", seda__l_errors_dead_letters },
            { "histogram", seda__l_stats_histogram },
        };
        lua_createtable(L, 0, 4);
        for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
            lua_pushcfunction(L, methods[i].fn);
            lua_pushcclosure(L, view_call, 1);
            lua_setfield(L, -2, methods[i].name);
        }
        lua_setfield(L, -2, "methods");
        lua_pushcfunction(L, view_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, view_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        { "buses", obs_buses },
        { "now", obs_now },
        { "process", seda__l_stats_process },
        { NULL, NULL }
    };
    luaL_newlib(L, fns);
    lua_pushstring(L, SEDA_VERSION);
    lua_setfield(L, -2, "version");
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "observer");
    /* seda.shared is process-wide and locked: /metrics reads its stats
     * from here. */
    seda__l_shared_push(L);
    lua_setfield(L, -2, "shared");
    return 1;
}
