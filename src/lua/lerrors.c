/* SPDX-License-Identifier: MIT */
/*
 * lerrors.c -- bus:errors([stage]): the stages' recent errors (the core's
 * ring, seda_stage_errors in include/seda.h) as a Lua list, newest first:
 *
 *   { { stage = "parse", time = 1718000000.25, first = 1717999990.5,
 *       repeats = 3, message = "handlers/parse.lua:4: unparseable ..." },
 *     ... }
 *
 * time and first are wall-clock seconds (os.time's epoch, with a
 * fraction); repeats counts the occurrences folded into the entry (1: it
 * happened once).  With no stage, every stage's entries merged by time.
 *
 * DESIGN
 *   Main state only (a bus method).  The copies seda_stage_errors makes
 *   are C allocations; they are held by a userdata whose __gc frees them,
 *   so a Lua memory error while the list is built (lua_pushstring can
 *   raise) loses nothing (STYLE: no C memory unanchored across a raise).
 */
#include <stdlib.h>
#include <string.h>

#include "lseda.h"

#define BOX_MT "seda.errors_box"

/* The arrays seda_stage_errors returned, one per stage. */
struct errbox {
    int n;                      /* stages */
    seda_error **arr;           /* n arrays (NULL: none, or freed) */
    int *cnt;                   /* their lengths */
    const char **stage;         /* their stages' names (the stages own
                                   them; a stage lives as long as its bus,
                                   which the bus object at 1 keeps) */
};

static int box_gc(lua_State *L)
{
    struct errbox *b = luaL_checkudata(L, 1, BOX_MT);
    for (int i = 0; i < b->n; i++) {
        seda_errors_free(b->arr[i]);
        b->arr[i] = NULL;
    }
    return 0;
}

/* Push a box for n stages (raises on a memory error; nothing is held yet). */
static struct errbox *box_new(lua_State *L, int n)
{
    size_t sz = sizeof(struct errbox) +
                (size_t)n * (sizeof(seda_error *) + sizeof(int) +
                             sizeof(const char *));
    struct errbox *b = lua_newuserdatauv(L, sz, 0);
    b->n = 0;
    b->arr = (seda_error **)(b + 1);
    b->stage = (const char **)(b->arr + n);
    b->cnt = (int *)(b->stage + n);
    if (luaL_newmetatable(L, BOX_MT)) {
        lua_pushcfunction(L, box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return b;
}

/* Fill slot b->n from st.  A memory error raises (what is held so far
 * is the box's). */
static void box_add(lua_State *L, struct errbox *b, seda_stage_t *st)
{
    seda_error *a;
    int n = seda_stage_errors(st, &a);
    if (n < 0)
        luaL_error(L, "errors: out of memory");
    b->arr[b->n] = a;
    b->cnt[b->n] = n;
    b->stage[b->n] = seda_stage_name(st);
    b->n++;
}

/* One entry, in stage order, for the merge. */
struct ref {
    double time;
    int s;                      /* box slot */
    int i;                      /* index in its array */
};

/* Newest first; equal times keep stage order, then ring order. */
static int ref_cmp(const void *pa, const void *pb)
{
    const struct ref *a = pa, *b = pb;
    if (a->time != b->time)
        return a->time < b->time ? 1 : -1;
    if (a->s != b->s)
        return a->s < b->s ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static void push_entry(lua_State *L, const char *stage, const seda_error *e)
{
    lua_createtable(L, 0, 5);
    lua_pushstring(L, stage);
    lua_setfield(L, -2, "stage");
    lua_pushnumber(L, e->time);
    lua_setfield(L, -2, "time");
    lua_pushnumber(L, e->first);
    lua_setfield(L, -2, "first");
    lua_pushinteger(L, (lua_Integer)e->repeats);
    lua_setfield(L, -2, "repeats");
    lua_pushstring(L, e->message);
    lua_setfield(L, -2, "message");
}

/* bus:errors([stage]) -> list, newest first; nil, "no_such_stage" for a
 * stage the bus does not have.  Raises for a stage that is not a string
 * and on a closed bus. */
int seda__l_errors(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    const char *name = luaL_optstring(L, 2, NULL);
    seda_bus_t *bus = u->lb->bus;
    lua_settop(L, 2);
    if (name) {
        seda_stage_t *st = seda_bus_stage(bus, name);
        if (!st) {
            lua_pushnil(L);
            lua_pushliteral(L, "no_such_stage");
            return 2;
        }
        struct errbox *b = box_new(L, 1);
        box_add(L, b, st);
        lua_createtable(L, b->cnt[0], 0);
        for (int i = 0; i < b->cnt[0]; i++) {
            push_entry(L, b->stage[0], &b->arr[0][i]);
            lua_rawseti(L, -2, i + 1);
        }
        return 1;
    }
    int ns = seda_bus_stage_count(bus);
    struct errbox *b = box_new(L, ns);
    int total = 0;
    for (int k = 0; k < ns; k++) {
        seda_stage_t *st = seda_bus_stage_at(bus, k);
        if (!st)
            break;
        box_add(L, b, st);
        total += b->cnt[b->n - 1];
    }
    struct ref *r = lua_newuserdatauv(L, (size_t)total * sizeof *r + 1, 0);
    int m = 0;
    for (int s = 0; s < b->n; s++)
        for (int i = 0; i < b->cnt[s]; i++)
            r[m++] = (struct ref){ b->arr[s][i].time, s, i };
    qsort(r, (size_t)m, sizeof *r, ref_cmp);
    lua_createtable(L, m, 0);
    for (int k = 0; k < m; k++) {
        push_entry(L, b->stage[r[k].s], &b->arr[r[k].s][r[k].i]);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}
