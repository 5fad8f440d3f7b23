/* SPDX-License-Identifier: MIT */
/*
 * lenv.c -- the envelope as a handler sees it: `env` and its fields,
 * env:forward, assignment to env.payload and env.headers, and copying the
 * handler's changes back into the envelope when it acks.
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "lworker.h"

/* ---- the envelope object ---- */

/* What a handler gets as `env` is a light userdata whose value is a
 * token of that one call (odd, so never a block's address); the worker's
 * single struct lenv holds the envelope and, as its user values, the
 * decoded payload and headers.  All light userdata in a worker state
 * share the envelope metatable (Lua keeps one per type), whose methods
 * are closures over that lenv.  An env kept past its call is a different
 * value from every later call's, so it raises instead of reaching
 * whatever envelope the worker handles then -- and a fresh value costs no
 * allocation.  Indexing any other light userdata raises the same way. */

static struct lenv *env_self(lua_State *L)
{
    struct lworker *w = worker_of(L);
    void *p = lua_touserdata(L, 1);
    if (lua_type(L, 1) != LUA_TLIGHTUSERDATA)
        luaL_typeerror(L, 1, "envelope");
    if (w->token == 0 || p != (void *)w->token)
        luaL_error(L, "envelope used outside its handler");
    return w->le;
}

static void push_headers_table(lua_State *L, const seda_env_t *env)
{
    int n = seda_env_header_count(env);
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        const char *k, *v;
        seda_env_header_at(env, i, &k, &v);
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
}

static void push_slip_table(lua_State *L, const seda_env_t *env)
{
    int n = seda_env_slip_count(env);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, seda_env_slip_at(env, i));
        lua_rawseti(L, -2, i + 1);
    }
}

static int env_forward(lua_State *L)
{
    struct lenv *le = env_self(L);
    int n = lua_gettop(L) - 1;
    const char *names[64];
    if (n > 64)
        return luaL_error(L, "forward: at most 64 hops at once");
    for (int i = 0; i < n; i++) {
        names[i] = luaL_checkstring(L, i + 2);
        if (!seda__l_valid_name(names[i]))
            return luaL_error(L, "forward: invalid stage name '%s'",
                              names[i]);
    }
    int rc = seda_env_forward(le->env, names, n);
    if (rc)
        return luaL_error(L, "forward: %s", seda_strerror(rc));
    lua_pushboolean(L, 1);
    return 1;
}

static int env_index(lua_State *L)
{
    struct lenv *le = env_self(L);
    size_t kl;
    const char *k = luaL_checklstring(L, 2, &kl);
    seda_env_t *env = le->env;
    char idbuf[SEDA_ID_MAX];
    switch (k[0]) {
    case 'p':
        if (strcmp(k, "payload") == 0) {
            if (le->decoded) {
                lua_getiuservalue(L, lua_upvalueindex(1), 1);
                return 1;
            }
            size_t len;
            const void *p = seda_env_payload(env, &len);
            seda__l_push_payload(L, p, len, seda_env_payload_kind(env));
            /* A table is kept (the handler may change it in place, and
             * reads must see one table); a scalar is decoded again on the
             * next read, which saves the store on the common single
             * read. */
            if (lua_type(L, -1) == LUA_TTABLE) {
                lua_pushvalue(L, -1);
                lua_setiuservalue(L, lua_upvalueindex(1), 1);
                le->decoded = true;
                le->decoded_table = true;
            }
            return 1;
        }
        if (strcmp(k, "published_at") == 0) {
            lua_pushnumber(L, seda_env_published_at(env));
            return 1;
        }
        break;
    case 'h':
        if (strcmp(k, "headers") == 0) {
            if (!le->headers_loaded) {
                push_headers_table(L, env);
                lua_setiuservalue(L, lua_upvalueindex(1), 2);
                le->headers_loaded = true;
            }
            lua_getiuservalue(L, lua_upvalueindex(1), 2);
            return 1;
        }
        break;
    case 'i':
        if (strcmp(k, "id") == 0) {
            lua_pushstring(L, seda_env_id(env, idbuf));
            return 1;
        }
        break;
    case 't':
        if (strcmp(k, "to") == 0) {
            lua_pushstring(L, seda_env_to(env));
            return 1;
        }
        break;
    case 's':
        if (strcmp(k, "sender") == 0) {
            const char *s = seda_env_sender(env);
            if (s)
                lua_pushstring(L, s);
            else
                lua_pushnil(L);
            return 1;
        }
        if (strcmp(k, "slip") == 0) {
            push_slip_table(L, env);
            return 1;
        }
        break;
    case 'a':
        if (strcmp(k, "attempts") == 0) {
            lua_pushinteger(L, seda_env_attempts(env));
            return 1;
        }
        break;
    case 'f':
        if (strcmp(k, "forward") == 0) {
            lua_pushcfunction(L, env_forward);
            return 1;
        }
        break;
    }
    lua_pushnil(L);
    return 1;
}

static int env_newindex(lua_State *L)
{
    struct lenv *le = env_self(L);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "payload") == 0) {
        lua_settop(L, 3);
        int t = lua_type(L, 3);
        if (t == LUA_TFUNCTION || t == LUA_TTHREAD || t == LUA_TUSERDATA ||
            t == LUA_TLIGHTUSERDATA) {
            /* Refused here, where the handler's line is known; what a
             * table holds is checked when it is encoded. */
            return luaL_error(L, "payload: cannot encode a %s",
                              t == LUA_TLIGHTUSERDATA ? "userdata"
                                                      : lua_typename(L, t));
        }
        le->decoded_table = t == LUA_TTABLE;
        lua_setiuservalue(L, lua_upvalueindex(1), 1);
        le->decoded = true;
        le->payload_set = true;
        return 0;
    }
    if (strcmp(k, "headers") == 0) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_settop(L, 3);
        lua_setiuservalue(L, lua_upvalueindex(1), 2);
        le->headers_loaded = true;
        return 0;
    }
    return luaL_error(L, "envelope field '%s' cannot be set", k);
}

static int env_tostring(lua_State *L)
{
    struct lworker *w = worker_of(L);
    struct lenv *le = w->le;
    char idbuf[SEDA_ID_MAX];
    if (w->token != 0 && lua_touserdata(L, 1) == (void *)w->token &&
        le->env)
        lua_pushfstring(L, "envelope %s at %s", seda_env_id(le->env, idbuf),
                        seda_env_to(le->env));
    else
        lua_pushliteral(L, "envelope (finished)");
    return 1;
}

/* Copy the handler's view of the envelope back into it.  Runs under
 * lua_pcall (it may raise on bad headers). */
int seda__lw_env_sync(lua_State *L)
{
    struct lenv *le = lua_touserdata(L, 1);
    struct lworker *w = lua_touserdata(L, 2);
    seda_env_t *env = le->env;
    lua_settop(L, 2);
    if (le->headers_loaded) {
        lua_getiuservalue(L, 1, 2);               /* 3: headers table */
        /* Deletions and changes of existing headers. */
        for (int i = seda_env_header_count(env) - 1; i >= 0; i--) {
            const char *k, *v;
            seda_env_header_at(env, i, &k, &v);
            lua_getfield(L, 3, k);
            if (lua_isnil(L, -1)) {
                if (seda_env_set_header(env, k, NULL))
                    return luaL_error(L, "headers: out of memory");
            } else if (lua_type(L, -1) == LUA_TSTRING ||
                       lua_type(L, -1) == LUA_TNUMBER) {
                size_t nl;
                const char *nv = lua_tolstring(L, -1, &nl);
                if (strlen(nv) != nl)
                    return luaL_error(L, "headers.%s: contains a NUL byte",
                                      k);
                if (strcmp(nv, v) != 0 && seda_env_set_header(env, k, nv))
                    return luaL_error(L, "headers: out of memory");
            }
            lua_pop(L, 1);
        }
        /* Additions. */
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                return luaL_error(L, "headers: keys must be strings");
            int t = lua_type(L, -1);
            if (t != LUA_TSTRING && t != LUA_TNUMBER)
                return luaL_error(L, "headers.%s: expected a string, got %s",
                                  lua_tostring(L, -2), luaL_typename(L, -1));
            size_t kl, vl;
            const char *k = lua_tolstring(L, -2, &kl);
            lua_pushvalue(L, -1);
            const char *v = lua_tolstring(L, -1, &vl);
            if (strlen(k) != kl)
                return luaL_error(L, "headers: a key contains a NUL byte");
            if (strlen(v) != vl)
                return luaL_error(L, "headers.%s: contains a NUL byte", k);
            if (!seda_env_header(env, k) && seda_env_set_header(env, k, v))
                return luaL_error(L, "headers: out of memory");
            lua_pop(L, 2);
        }
        lua_settop(L, 2);
    }
    if (le->decoded) {
        lua_getiuservalue(L, 1, 1);
        const void *p;
        size_t len;
        int kind;
        char err[256];
        w->wb.len = 0;
        if (seda__l_encode_payload(L, -1, &w->wb, &p, &len, &kind, err,
                                   sizeof err))
            return luaL_error(L, "%s", err);
        int rc = seda_env_set_payload_kind(env, p, len, kind);
        seda__wbuf_trim(&w->wb, SEDA_WBUF_KEEP);
        if (rc == SEDA_ETOOLARGE)
            return luaL_error(L, "too_large: the payload is %I bytes, over "
                              "max_payload", (lua_Integer)len);
        if (rc)
            return luaL_error(L, "payload: out of memory");
    }
    return 0;
}

void seda__lw_env_metatable(lua_State *L)
{
    lua_pushlightuserdata(L, NULL);
    luaL_newmetatable(L, LSEDA_ENV_MT);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, env_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, env_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, env_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "envelope");
    lua_setfield(L, -2, "__name");
    lua_pushliteral(L, "envelope");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_pop(L, 1);
}
