/* SPDX-License-Identifier: MIT */
/*
 * cli_json.c -- Lua values as JSON, and the document /stats.json serves
 * (cli_http.c):
 *
 *   { "version": "0.1.0", "time": <wall-clock s>, "now": <seda.now()>,
 *     "buses": [ { "index": 1,            -- as the metrics' bus="1" label
 *                  "order": ["parse", "enrich", "sink"],  -- declaration
 *                  "stats": <bus:stats()>,
 *                  "errors": <bus:errors()>,
 *                  "error_sites": [ { "stage":, "site": "x.lua:12",
 *                                     "count":, "distinct":, "first":,
 *                                     "last":, "message": }, ... ],
 *                  "error_sites_more": 0 }, ... ] }
 *
 * error_sites: the errors grouped by stage and site (cli.lua's
 * M.error_sites), the most frequent first, at most ERROR_SITES_MAX;
 * error_sites_more counts the groups left out.
 *
 * DESIGN
 *   The observer's thread and state (cli_observe.c).  The text goes into a C buffer the
 *   caller owns (struct cli_jbuf), so the document is built inside a
 *   protected call: a Lua error raised half-way (a bus closed meanwhile,
 *   out of memory) leaves the caller a buffer to free and an error to
 *   answer, never a leak.  Strings are checked as UTF-8 (a handler's error
 *   message may quote binary payload bytes): an invalid byte becomes
 *   U+FFFD, so every JSON parser accepts the document.  NaN and the
 *   infinities, which JSON lacks, are null; a float always has a point
 *   or an exponent, an integer never.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda_lua.h"

#define MAX_DEPTH 16            /* deeper tables are written as null */
#define ERROR_SITES_MAX 20      /* error sites a bus lists (the rest counted) */

void cli_json_add(struct cli_jbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void adds(struct cli_jbuf *b, const char *s)
{
    cli_json_add(b, s, strlen(s));
}

size_t cli_json_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x3f >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void cli_json_string(struct cli_jbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    cli_json_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            cli_json_add(b, esc, 2);
            i++;
        } else if (c == '\n') {
            cli_json_add(b, "\\n", 2);
            i++;
        } else if (c == '\t') {
            cli_json_add(b, "\\t", 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            cli_json_add(b, esc, 6);
            i++;
        } else {
            size_t l = cli_json_utf8_len(u + i, n - i);
            if (l == 0) {
                cli_json_add(b, "\\ufffd", 6);
                i++;
            } else {
                cli_json_add(b, s + i, l);
                i += l;
            }
        }
    }
    cli_json_add(b, "\"", 1);
}

static void json_number(struct cli_jbuf *b, lua_State *L, int idx)
{
    char num[64];
    if (lua_isinteger(L, idx)) {
        snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, idx));
    } else {
        double v = lua_tonumber(L, idx);
        if (!isfinite(v)) {
            snprintf(num, sizeof num, "null");
        } else {
            /* A float stays one ("0.0", not "0"): a reader can tell
             * Lua's floats (rates, latencies) from its integers
             * (counters), as math.type does. */
            int n = snprintf(num, sizeof num, "%.15g", v);
            if (!strpbrk(num, ".eE") && n > 0 && (size_t)n + 2 < sizeof num)
                memcpy(num + n, ".0", 3);
        }
    }
    adds(b, num);
}

/* A table whose keys are exactly 1..n (n >= 1). */
static bool is_array(lua_State *L, int idx)
{
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n == 0)
        return false;
    lua_Integer count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1)) {
            lua_pop(L, 1);
            return false;
        }
        count++;
    }
    return count == n;
}

static void json_value(struct cli_jbuf *b, lua_State *L, int idx, int depth);

/* The table at idx as a JSON array (always: an empty one is []). */
void cli_json_array(struct cli_jbuf *b, lua_State *L, int idx, int depth)
{
    idx = lua_absindex(L, idx);
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    adds(b, "[");
    for (lua_Integer i = 1; i <= n; i++) {
        if (i > 1)
            adds(b, ",");
        lua_rawgeti(L, idx, i);
        json_value(b, L, -1, depth + 1);
        lua_pop(L, 1);
    }
    adds(b, "]");
}

static void json_object(struct cli_jbuf *b, lua_State *L, int idx, int depth)
{
    bool first = true;
    adds(b, "{");
    lua_pushnil(L);
    while (lua_next(L, idx)) {          /* key, value */
        if (!first)
            adds(b, ",");
        first = false;
        size_t kl;
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *k = lua_tolstring(L, -2, &kl);
            cli_json_string(b, k, kl);
            adds(b, ":");
            json_value(b, L, -1, depth + 1);
            lua_pop(L, 1);
        } else {                        /* a number...: its text (pushed;
                                         * the key itself stays as is) */
            const char *k = luaL_tolstring(L, -2, &kl);
            cli_json_string(b, k, kl);
            adds(b, ":");
            json_value(b, L, -2, depth + 1);
            lua_pop(L, 2);
        }
    }
    adds(b, "}");
}

static void json_value(struct cli_jbuf *b, lua_State *L, int idx, int depth)
{
    idx = lua_absindex(L, idx);
    luaL_checkstack(L, 8, "json: nesting");
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
        adds(b, lua_toboolean(L, idx) ? "true" : "false");
        break;
    case LUA_TNUMBER:
        json_number(b, L, idx);
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        cli_json_string(b, s, n);
        break;
    }
    case LUA_TTABLE:
        if (depth >= MAX_DEPTH)
            adds(b, "null");
        else if (is_array(L, idx))
            cli_json_array(b, L, idx, depth);
        else
            json_object(b, L, idx, depth);
        break;
    case LUA_TNIL:
        adds(b, "null");
        break;
    default:
        cli_json_string(b, luaL_typename(L, idx), strlen(
                        luaL_typename(L, idx)));
        break;
    }
}

void cli_json_value(struct cli_jbuf *b, lua_State *L, int idx)
{
    json_value(b, L, idx, 0);
}

/* ---- /stats.json ---- */

/* Call method `name` of the bus at idx with no argument; pushes its first
 * result, or nil when it raised (a bus closed meanwhile). */
static void call_method(lua_State *L, int idx, const char *name)
{
    lua_getfield(L, idx, name);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
}

/* A stage's name and its declaration index, for the order. */
struct named {
    lua_Integer index;
    const char *name;
};

static int by_index(const void *pa, const void *pb)
{
    const struct named *a = pa, *b = pb;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The stage names of the stats table at idx in declaration order (each
 * stage's index field), as a JSON array. */
static void stage_order(struct cli_jbuf *b, lua_State *L, int idx)
{
    lua_getfield(L, idx, "stages");
    int st = lua_gettop(L);
    int n = 0;
    if (lua_istable(L, st))
        for (lua_pushnil(L); lua_next(L, st); lua_pop(L, 1))
            n++;
    struct named *a = lua_newuserdatauv(L, (size_t)n * sizeof *a + 1, 0);
    int k = 0;
    if (lua_istable(L, st)) {
        for (lua_pushnil(L); lua_next(L, st) && k < n; lua_pop(L, 1)) {
            if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1))
                continue;
            lua_getfield(L, -1, "index");
            a[k].index = lua_isinteger(L, -1) ? lua_tointeger(L, -1)
                                              : LUA_MAXINTEGER;
            lua_pop(L, 1);
            a[k++].name = lua_tostring(L, -2);  /* a key: anchored */
        }
    }
    qsort(a, (size_t)k, sizeof *a, by_index);
    adds(b, "[");
    for (int i = 0; i < k; i++) {
        if (i)
            adds(b, ",");
        cli_json_string(b, a[i].name, strlen(a[i].name));
    }
    adds(b, "]");
    lua_settop(L, st - 1);
}

/* Push the list of live buses (the `seda` module's buses()). */
static int push_buses(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    lua_getfield(L, -1, "buses");
    lua_call(L, 0, 1);
    lua_replace(L, -3);
    lua_pop(L, 1);
    return lua_gettop(L);
}

/* Push bus i of the list at index list (at list + 1) and what its method
 * returns; false, with the stack back at list, when that is no table
 * (the bus closed meanwhile: skipped). */
static bool bus_call(lua_State *L, int list, lua_Integer i,
                     const char *method)
{
    lua_rawgeti(L, list, i);
    call_method(L, lua_gettop(L), method);
    if (!lua_istable(L, -1)) {
        lua_settop(L, list);
        return false;
    }
    return true;
}

/* ,"error_sites":[...],"error_sites_more":N for the bus:errors() list at
 * the top of L (cli.lua's M.error_sites; nil when absent: none). */
static void error_sites(struct cli_jbuf *b, lua_State *L)
{
    int top = lua_gettop(L);
    adds(b, ",\"error_sites\":");
    if (!lua_istable(L, top) || !cli_observe_fn(L, "error_sites")) {
        adds(b, "[],\"error_sites_more\":0");
        return;
    }
    lua_pushvalue(L, top);
    lua_pushinteger(L, ERROR_SITES_MAX);
    lua_call(L, 2, 2);                  /* raises only for memory */
    if (lua_istable(L, -2) && lua_rawlen(L, -2) > 0)
        cli_json_array(b, L, -2, 0);
    else
        adds(b, "[]");
    char num[48];
    snprintf(num, sizeof num, ",\"error_sites_more\":%lld",
             (long long)lua_tointeger(L, -1));
    adds(b, num);
    lua_settop(L, top);
}

/* lua_CFunction: build the document into the cli_jbuf given as a light
 * userdata (argument 1).  Raises on a Lua error (out of memory). */
static int build_stats(lua_State *L)
{
    struct cli_jbuf *b = lua_touserdata(L, 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char num[96];
    snprintf(num, sizeof num, "{\"version\":\"%s\",\"time\":%.3f,\"now\":%.6f,"
             "\"buses\":[", SEDA_VERSION,
             (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, seda_now());
    adds(b, num);
    int list = push_buses(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    int written = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        if (!bus_call(L, list, i, "stats"))
            continue;
        int bi = list + 1;
        snprintf(num, sizeof num, "%s{\"index\":%lld,\"order\":",
                 written++ ? "," : "", (long long)i);
        adds(b, num);
        stage_order(b, L, lua_gettop(L));
        adds(b, ",\"stats\":");
        cli_json_value(b, L, -1);
        adds(b, ",\"errors\":");
        call_method(L, bi, "errors");
        if (lua_istable(L, -1))
            cli_json_array(b, L, -1, 0);
        else
            adds(b, "[]");
        error_sites(b, L);
        adds(b, "}");
        lua_settop(L, list);
    }
    adds(b, "]}\n");
    return 0;
}

/* The /dlq.json document: every live bus's kept dead letters, newest
 * first (bus:dead_letters()). */
static int build_dlq(lua_State *L)
{
    struct cli_jbuf *b = lua_touserdata(L, 1);
    char num[96];
    snprintf(num, sizeof num, "{\"version\":\"%s\",\"now\":%.6f,"
             "\"buses\":[", SEDA_VERSION, seda_now());
    adds(b, num);
    int list = push_buses(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    int written = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        if (!bus_call(L, list, i, "dead_letters"))
            continue;
        int bi = list + 1;
        adds(b, written++ ? ",{\"name\":" : "{\"name\":");
        lua_getfield(L, bi, "name");
        size_t len;
        const char *nm = lua_tolstring(L, -1, &len);
        cli_json_string(b, nm ? nm : "", nm ? len : 0);
        lua_pop(L, 1);
        adds(b, ",\"dead_letters\":");
        cli_json_array(b, L, -1, 0);
        adds(b, "}");
        lua_settop(L, list);
    }
    adds(b, "]}\n");
    return 0;
}

static int build(lua_State *L, struct cli_jbuf *b, lua_CFunction fn,
                 const char *what)
{
    int top = lua_gettop(L);
    lua_pushcfunction(L, fn);
    lua_pushlightuserdata(L, b);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        b->len = 0;
        const char *m = lua_tostring(L, -1);
        adds(b, m ? m : what);
        lua_settop(L, top);
        return -1;
    }
    lua_settop(L, top);
    return b->oom ? -1 : 0;
}

int cli_json_dlq(lua_State *L, struct cli_jbuf *b)
{
    return build(L, b, build_dlq, "error building /dlq.json");
}

int cli_json_stats(lua_State *L, struct cli_jbuf *b)
{
    return build(L, b, build_stats, "error building /stats.json");
}
