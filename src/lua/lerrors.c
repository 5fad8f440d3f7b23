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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lcodec_preview.h"
#include "lseda.h"
#include "seda_lua.h"

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

/* ---- dead letters ---- */

static int dead_box_gc(lua_State *L)
{
    seda_dead_letter **box = lua_touserdata(L, 1);
    seda_dead_letters_free(*box);
    *box = NULL;
    return 0;
}

/* Push the readable preview of a payload's kept first bytes
 * (lcodec_preview.c): what the REPL prints, not the codec's bytes. */
static void push_preview(lua_State *L, const void *p, size_t len,
                         size_t size, int kind)
{
    char buf[SEDA_PREVIEW_MAX];
    lua_pushlstring(L, buf, seda__l_codec_preview(p, len, size, kind, buf,
                                                  sizeof buf));
}

/* ---- envelope snapshots ---- */

void seda__l_errors_snapshot(lua_State *L, const seda_env_snapshot *e,
                             const char *stage)
{
    bool dead = e->reason[0] != '\0';
    lua_createtable(L, 0, 10);
    lua_pushstring(L, e->id);
    lua_setfield(L, -2, "id");
    if (stage) {
        lua_pushstring(L, stage);
        lua_setfield(L, -2, "stage");
    }
    if (dead) {
        lua_pushstring(L, e->reason);
        lua_setfield(L, -2, "reason");
    }
    if (e->error) {
        lua_pushstring(L, e->error);
        lua_setfield(L, -2, "error");
    }
    if (e->missing[0]) {
        lua_pushstring(L, e->missing);
        lua_setfield(L, -2, "missing");
    }
    lua_pushinteger(L, e->attempts);
    lua_setfield(L, -2, "attempts");
    lua_pushnumber(L, e->at);
    lua_setfield(L, -2, "at");
    lua_pushinteger(L, (lua_Integer)e->payload_size);
    lua_setfield(L, -2, "payload_size");
    bool whole = e->payload_len == e->payload_size;
    int top = lua_gettop(L);
    char err[128];
    if (whole && e->kind == 0)
        lua_pushlstring(L, e->payload, e->payload_len);
    else if (!whole || seda__codec_decode(L, e->payload, e->payload_len,
                                          err, sizeof err) != 0)
        lua_settop(L, top);
    bool decoded = lua_gettop(L) > top;
    if (decoded)
        lua_setfield(L, -2, "payload");
    /* A dead letter shows a codec payload's preview beside the decoded
     * value; a tap's copy shows one or the other. */
    if (!decoded || (dead && e->kind != 0)) {
        push_preview(L, e->payload, e->payload_len, e->payload_size,
                     e->kind);
        lua_setfield(L, -2, "payload_preview");
    }
    lua_createtable(L, 0, e->nheaders);
    for (int i = 0; i < e->nheaders; i++) {
        lua_pushstring(L, e->headers[2 * i + 1]);
        lua_setfield(L, -2, e->headers[2 * i]);
    }
    lua_setfield(L, -2, "headers");
}

/* Push stage st's kept dead letters onto the array at the top (from n + 1
 * on); returns the new count.  Raises only on memory errors. */
static int push_stage_dead(lua_State *L, seda_stage_t *st, int n)
{
    seda_dead_letter *a;
    int m = seda_stage_dead_letters(st, &a);
    if (m <= 0)
        return n;
    /* Anchor the array for the pushes below (they may raise). */
    seda_dead_letter **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = a;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, dead_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    for (int i = 0; i < m; i++) {
        seda__l_errors_snapshot(L, &a[i], seda_stage_name(st));
        lua_rawseti(L, -3, ++n);
    }
    seda_dead_letters_free(a);
    *box = NULL;
    lua_pop(L, 1);
    return n;
}

/* Sort the array at index t (n entries) by field at, descending: an
 * insertion sort (a few hundred entries at most: stages x keep). */
static void sort_by_at(lua_State *L, int t, int n)
{
    for (int i = 2; i <= n; i++) {
        lua_rawgeti(L, t, i);                   /* the one to place */
        lua_getfield(L, -1, "at");
        double at = lua_tonumber(L, -1);
        lua_pop(L, 1);
        int k = i;
        while (k > 1) {
            lua_rawgeti(L, t, k - 1);
            lua_getfield(L, -1, "at");
            double prev = lua_tonumber(L, -1);
            lua_pop(L, 1);
            if (prev >= at) {
                lua_pop(L, 1);
                break;
            }
            lua_rawseti(L, t, k);               /* shift it up */
            k--;
        }
        lua_rawseti(L, t, k);
    }
}

int seda__l_errors_dead_letters(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    const char *name = luaL_optstring(L, 2, NULL);
    seda_bus_t *bus = u->lb->bus;
    lua_settop(L, 2);
    lua_newtable(L);
    if (name) {
        seda_stage_t *st = seda_bus_stage(bus, name);
        if (!st) {
            lua_pushnil(L);
            lua_pushliteral(L, "no_such_stage");
            return 2;
        }
        push_stage_dead(L, st, 0);
        return 1;
    }
    int n = 0;
    for (int k = 0; k < seda_bus_stage_count(bus); k++) {
        seda_stage_t *st = seda_bus_stage_at(bus, k);
        if (st)
            n = push_stage_dead(L, st, n);
    }
    /* Newest first across stages (each stage's are already). */
    sort_by_at(L, 3, n);
    return 1;
}

/* ---- seda.log ---- */

/* A string's NUL bytes written \x00 (the log's lines are C strings, and
 * other control bytes are escaped there): replaces the string at idx
 * when it has any.  Returns the string. */
static const char *nul_safe(lua_State *L, int idx)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (!memchr(s, 0, len))
        return s;
    luaL_Buffer e;
    luaL_buffinit(L, &e);
    for (size_t k = 0; k < len; k++) {
        if (s[k])
            luaL_addchar(&e, s[k]);
        else
            luaL_addstring(&e, "\\x00");
    }
    luaL_pushresult(&e);
    lua_replace(L, idx);
    return lua_tostring(L, idx);
}

#define LOG_FIELDS_MAX 64

/* A field's key: letters, digits, '_', '.', '-' (a JSON key and a k=v
 * key alike), not one of the line's own. */
static void log_field_key(lua_State *L, const char *k)
{
    static const char *const own[] = { "time", "level", "stage", "msg",
                                       "fields_cut", NULL };
    size_t n = strlen(k);
    if (n == 0 || n > 64 ||
        k[strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.-")])
        luaL_error(L, "seda.log: field name '%s' is not 1 to 64 letters, "
                   "digits, '_', '.' or '-'", k);
    for (int i = 0; own[i]; i++)
        if (strcmp(k, own[i]) == 0)
            luaL_error(L, "seda.log: field name '%s' is the line's own "
                       "(time, level, stage, msg, fields_cut)", k);
}

static int key_cmp(const void *a, const void *b)
{
    const struct seda_log_field *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* seda.log(level, ...[, fields]): one line on the event log at level
 * ("debug", "info", "warn", "error"), the arguments joined with spaces
 * (tostring), with the stage when a handler calls it.  A last argument
 * that is a table without __tostring is the line's fields: string keys,
 * string, number or boolean values, written as JSON keys (sorted) or
 * k=v.  Nothing is built for a level the log leaves out. */
int seda__l_errors_log(lua_State *L)
{
    static const char *const levels[] = { "debug", "info", "warn", "error",
                                          NULL };
    int level = luaL_checkoption(L, 1, NULL, levels);
    if (!seda_log_enabled(level))
        return 0;
    int n = lua_gettop(L);
    int ftab = 0;
    if (n >= 2 && lua_type(L, n) == LUA_TTABLE &&
        luaL_getmetafield(L, n, "__tostring") == LUA_TNIL) {
        ftab = n--;
    } else if (n >= 2 && lua_type(L, n) == LUA_TTABLE) {
        lua_pop(L, 1);                  /* the __tostring */
    }
    struct seda_log_field f[LOG_FIELDS_MAX];
    size_t nf = 0;
    int top = lua_gettop(L);
    if (ftab) {
        lua_pushnil(L);
        while (lua_next(L, ftab)) {
            luaL_checkstack(L, 4, "seda.log: fields");
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_error(L, "seda.log: fields: keys must be "
                                  "strings (got %s)",
                                  luaL_typename(L, -2));
            const char *k = lua_tostring(L, -2);
            log_field_key(L, k);
            if (nf == LOG_FIELDS_MAX)
                return luaL_error(L, "seda.log: more than %d fields",
                                  LOG_FIELDS_MAX);
            bool raw = false;
            switch (lua_type(L, -1)) {
            case LUA_TSTRING:
                lua_pushvalue(L, -1);
                break;
            case LUA_TBOOLEAN:
                lua_pushstring(L, lua_toboolean(L, -1) ? "true" : "false");
                raw = true;
                break;
            case LUA_TNUMBER:
                if (lua_isinteger(L, -1)) {
                    lua_pushfstring(L, "%I", lua_tointeger(L, -1));
                    raw = true;
                } else {
                    lua_Number x = lua_tonumber(L, -1);
                    char nb[64];
                    raw = x == x && x != HUGE_VAL && x != -HUGE_VAL;
                    if (raw)
                        snprintf(nb, sizeof nb, "%.14g", (double)x);
                    else
                        snprintf(nb, sizeof nb, "%s", x != x ? "nan"
                                 : x > 0 ? "inf" : "-inf");
                    lua_pushstring(L, nb);
                }
                break;
            default:
                return luaL_error(L, "seda.log: fields.%s is a %s (a "
                                  "string, number or boolean)", k,
                                  luaL_typename(L, -1));
            }
            /* (key, value, text): the text and a copy of the key stay
             * anchored below the iteration. */
            lua_insert(L, top + 1);
            lua_pushvalue(L, -2);
            lua_insert(L, top + 1);
            top += 2;
            f[nf].key = lua_tostring(L, top - 1);
            f[nf].value = nul_safe(L, top);
            f[nf].raw = raw;
            nf++;
            lua_pop(L, 1);
        }
        qsort(f, nf, sizeof *f, key_cmp);
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 2; i <= n; i++) {
        if (i > 2)
            luaL_addchar(&b, ' ');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    const char *msg = nul_safe(L, lua_gettop(L));
    seda_log_write_fields(level, seda__l_log_stage(L), msg, f, nf);
    return 0;
}

/* seda.log_level([level]): the least level the event log writes,
 * process-wide; with a level, sets it.  Returns the level in effect
 * before. */
int seda__l_errors_log_level(lua_State *L)
{
    const char *was = seda_log_level_name(seda_log_level());
    if (!lua_isnoneornil(L, 1)) {
        const char *v = luaL_checkstring(L, 1);
        int lv = seda_log_level_from_name(v);
        if (lv < 0)
            return luaL_error(L, "seda.log_level: 'debug', 'info', 'warn' "
                              "or 'error', not '%s'", v);
        seda_log_set_level(lv);
    }
    lua_pushstring(L, was);
    return 1;
}

/* ---- live taps ---- */

static int tap_box_gc(lua_State *L)
{
    seda_tap_t **box = lua_touserdata(L, 1);
    seda_tap_close(*box);
    *box = NULL;
    return 0;
}

/* bus:tap(stage, n [, seconds]) -> entries, missed: the next n envelopes
 * entering stage (id, at, attempts, headers, payload (decoded when all of
 * it was copied) or payload_preview, payload_size), waiting up to
 * seconds (default 10) in all; fewer when time runs out.  nil,
 * "no_such_stage" for an unknown stage; raises on bad arguments. */
int seda__l_errors_tap(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    const char *name = luaL_checkstring(L, 2);
    lua_Integer n = luaL_optinteger(L, 3, 10);
    double secs = luaL_optnumber(L, 4, 10);
    luaL_argcheck(L, n > 0 && n <= 10000, 3, "1..10000 envelopes");
    luaL_argcheck(L, secs >= 0, 4, "seconds >= 0");
    seda_stage_t *st = seda_bus_stage(u->lb->bus, name);
    if (!st) {
        lua_pushnil(L);
        lua_pushliteral(L, "no_such_stage");
        return 2;
    }
    seda_tap_t **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, tap_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    if (seda_tap_open(st, (int)(n < 1024 ? n : 1024), box) != 0)
        return luaL_error(L, "tap: out of memory");
    lua_createtable(L, (int)n, 0);
    int got = 0;
    uint64_t missed = 0;
    double until = seda_now() + secs;
    while (got < n) {
        double left = until - seda_now();
        if (left < 0)
            break;
        seda_tap_entry e[16];
        /* In slices, running the main state's timers and callbacks
         * between them (a script's timers may be what feeds the stage). */
        int k = seda_tap_read(*box, e, n - got < 16 ? (int)(n - got) : 16,
                              left < 0.05 ? left : 0.05, &missed);
        for (int i = 0; i < k; i++) {
            seda__l_errors_snapshot(L, &e[i], NULL);
            lua_rawseti(L, -2, ++got);
            seda_tap_entry_free(&e[i]);
        }
        if (k == 0)
            seda_lua_run_pending(L);
    }
    seda_tap_close(*box);
    *box = NULL;
    lua_pushinteger(L, (lua_Integer)missed);
    return 2;
}
