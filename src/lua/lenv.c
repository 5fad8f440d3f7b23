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
 * token of that one call (odd, so never a block's address).  The call's
 * context (struct lenv, lworker.h) holds the envelope and, as its
 * userdata's user values, the decoded payload and headers; w->le is the
 * context of the call running now.  All light userdata in a worker state
 * share the envelope metatable (Lua keeps one per type).  Only the
 * running call's env reaches its envelope: an env kept past its call (or
 * a suspended call's, reached from another call) is a different value
 * from the running call's, so it raises instead of reaching whatever
 * envelope the worker handles then -- and a fresh value costs no
 * allocation.  Indexing any other light userdata raises the same way. */

static struct lenv *env_self(lua_State *L)
{
    struct lworker *w = worker_of(L);
    void *p = lua_touserdata(L, 1);
    if (lua_type(L, 1) != LUA_TLIGHTUSERDATA)
        luaL_typeerror(L, 1, "envelope");
    struct lenv *le = w->le;
    if (le->token == 0 || p != (void *)le->token)
        luaL_error(L, "envelope used outside its handler");
    return le;
}

/* Push le's userdata (its user values: 1 the payload, 2 the headers);
 * returns its stack index. */
static int push_view(lua_State *L, const struct lenv *le)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, le->ref);
    return lua_gettop(L);
}

/* Push user value n of le's userdata. */
static void get_view_value(lua_State *L, const struct lenv *le, int n)
{
    lua_getiuservalue(L, push_view(L, le), n);
    lua_replace(L, -2);
}

/* Pop the value on top into user value n of le's userdata. */
static void set_view_value(lua_State *L, const struct lenv *le, int n)
{
    int v = push_view(L, le);
    lua_pushvalue(L, v - 1);
    lua_setiuservalue(L, v, n);
    lua_pop(L, 2);
}

static int new_view(lua_State *L)
{
    struct lenv *le = lua_newuserdatauv(L, sizeof *le, 2);
    memset(le, 0, sizeof *le);
    lua_pushvalue(L, -1);
    le->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 1;
}

struct lenv *seda__l_env_new(lua_State *L, struct lworker *w)
{
    struct lenv *le = w->le_free;
    if (le) {
        w->le_free = le->next;
        le->next = NULL;
        return le;
    }
    /* In a protected call: running out of memory is a NULL here. */
    lua_pushcfunction(L, new_view);
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return NULL;
    }
    le = lua_touserdata(L, -1);
    lua_pop(L, 1);                      /* anchored by its ref */
    return le;
}

void seda__l_env_give(lua_State *L, struct lworker *w, struct lenv *le)
{
    /* What the call decoded is not kept alive by a context no call owns
     * (its flags may be clear already: the settle that ended the call
     * leaves the values, as a batch's context keeps them till the next
     * call overwrites them). */
    int v = push_view(L, le);
    lua_pushnil(L);
    lua_setiuservalue(L, v, 1);
    lua_pushnil(L);
    lua_setiuservalue(L, v, 2);
    lua_pop(L, 1);
    le->env = NULL;
    le->token = 0;
    le->decoded = le->decoded_table = le->payload_set =
        le->headers_loaded = le->responded = false;
    le->next = w->le_free;
    w->le_free = le;
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
        if (!seda__l_valid_hop(names[i]))
            return luaL_error(L, "forward: '%s' has no NATS subject "
                              "(nats:<subject>, tokens separated by "
                              "single dots)",
                              names[i]);
    }
    int rc = seda_env_forward(le->env, names, n);
    if (rc)
        return luaL_error(L, "forward: %s", seda_strerror(rc));
    lua_pushboolean(L, 1);
    return 1;
}

/* Raise unless the headers table at idx is what an HTTP answer can carry:
 * string names that are header names (RFC 9110 tokens), string or number
 * values without CR, LF or NUL. */
static void check_answer_headers(lua_State *L, int idx)
{
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        size_t kl = 0, vl = 0;
        const char *k = lua_type(L, -2) == LUA_TSTRING
                            ? lua_tolstring(L, -2, &kl) : NULL;
        bool name_ok = k && kl > 0;
        for (size_t i = 0; name_ok && i < kl; i++) {
            unsigned char c = (unsigned char)k[i];
            name_ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') ||
                      (c && strchr("!#$%&'*+-.^_`|~", c));
        }
        if (!name_ok && !k)
            luaL_error(L, "respond: a header key must be a string (a "
                       "header name), not a %s", luaL_typename(L, -2));
        if (!name_ok) {
            luaL_Buffer b;              /* the name, controls as \xNN */
            luaL_buffinit(L, &b);
            for (size_t i = 0; i < kl && i < 80; i++) {
                char e[5];
                unsigned char c = (unsigned char)k[i];
                if (c < 0x20 || c == 0x7f)
                    snprintf(e, sizeof e, "\\x%02x", c);
                else
                    e[0] = (char)c, e[1] = 0;
                luaL_addstring(&b, e);
            }
            luaL_pushresult(&b);
            luaL_error(L, "respond: header '%s' is not a header name "
                       "(letters, digits and !#$%%&'*+-.^_`|~)",
                       lua_tostring(L, -1));
        }
        int t = lua_type(L, -1);
        if (t != LUA_TSTRING && t != LUA_TNUMBER)
            luaL_error(L, "respond: header '%s': the value must be a string "
                       "or a number, not a %s", k, luaL_typename(L, -1));
        const char *v = t == LUA_TSTRING ? lua_tolstring(L, -1, &vl) : "";
        if (memchr(v, '\r', vl) || memchr(v, '\n', vl) || memchr(v, 0, vl))
            luaL_error(L, "respond: header '%s': the value holds a CR, LF "
                       "or NUL (it would end the header line)", k);
        lua_pop(L, 1);
    }
}

/* env:respond(status, body, headers): the payload becomes the answer
 * { status =, body =, headers = } and the slip ends here, so the
 * itinerary completes (and an HTTP request is answered, see lhttp.c)
 * when this handler acks.  Raises outside the itinerary of a bus:listen
 * request (sender "http", also past a remote hop), when called twice in
 * one call, and on a status or header an answer cannot carry. */
static int env_respond(lua_State *L)
{
    struct lenv *le = env_self(L);
    const char *sender = seda_env_sender(le->env);
    if (!sender || strcmp(sender, "http") != 0)
        return luaL_error(L, "respond: this envelope is not an HTTP "
                          "request's (sender %s%s%s): respond answers a "
                          "request a bus:listen route started; set "
                          "env.payload to change what the itinerary carries",
                          sender ? "'" : "", sender ? sender : "none",
                          sender ? "'" : "");
    if (le->responded)
        return luaL_error(L, "respond: already called in this call (a "
                          "request has one answer)");
    if (!lua_isinteger(L, 2) && lua_type(L, 2) == LUA_TNUMBER)
        return luaL_error(L, "respond: status must be an integer from 200 "
                          "to 599 (got %s)", lua_tostring(L, 2));
    lua_Integer status = luaL_checkinteger(L, 2);
    /* A 1xx would leave the client waiting for a final answer; 600 and
     * up are no class of HTTP. */
    if (status < 200 || status > 599)
        return luaL_error(L, "respond: status must be from 200 to 599 "
                          "(got %d)", (int)status);
    int bt = lua_type(L, 3);
    if (bt != LUA_TNONE && bt != LUA_TNIL && bt != LUA_TSTRING &&
        bt != LUA_TTABLE && bt != LUA_TNUMBER)
        return luaL_typeerror(L, 3, "string or table");
    if (!lua_isnoneornil(L, 4)) {
        luaL_checktype(L, 4, LUA_TTABLE);
        check_answer_headers(L, 4);
    }
    lua_settop(L, 4);                   /* the answer goes above */
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, status);
    lua_setfield(L, -2, "status");
    if (bt != LUA_TNONE && bt != LUA_TNIL) {
        lua_pushvalue(L, 3);
        lua_setfield(L, -2, "body");
    }
    if (!lua_isnoneornil(L, 4)) {
        lua_pushvalue(L, 4);
        lua_setfield(L, -2, "headers");
    }
    set_view_value(L, le, 1);
    le->decoded = true;
    le->decoded_table = true;
    le->payload_set = true;
    le->responded = true;
    seda_env_slip_end(le->env);
    lua_pushboolean(L, 1);
    return 1;
}

/* A field of the envelope that is not the payload. */
static int env_field(lua_State *L, struct lworker *w, const char *k)
{
    struct lenv *le = w->le;
    seda_env_t *env = le->env;
    char idbuf[SEDA_ID_MAX];
    if (k == w->k_headers) {
        if (!le->headers_loaded) {
            push_headers_table(L, env);
            set_view_value(L, le, 2);
            le->headers_loaded = true;
        }
        get_view_value(L, le, 2);
    } else if (k == w->k_id) {
        lua_pushstring(L, seda_env_id(env, idbuf));
    } else if (k == w->k_to) {
        lua_pushstring(L, seda_env_to(env));
    } else if (k == w->k_sender) {
        const char *s = seda_env_sender(env);
        if (s)
            lua_pushstring(L, s);
        else
            lua_pushnil(L);
    } else if (k == w->k_slip) {
        push_slip_table(L, env);
    } else if (k == w->k_attempts) {
        lua_pushinteger(L, seda_env_attempts(env));
    } else if (k == w->k_forward) {
        lua_pushcfunction(L, env_forward);
    } else if (k == w->k_respond) {
        lua_pushcfunction(L, env_respond);
    } else if (k == w->k_published_at) {
        lua_pushnumber(L, seda_env_published_at(env));
    } else {
        lua_pushnil(L);
    }
    return 1;
}

/* __index.  The fast path: the running call's env, a field name (short
 * strings are interned, so a name is the same string as the one this
 * state keeps: compared by address), and the payload.  Upvalue: the
 * state's key cache (lcodec.c). */
static int env_index(lua_State *L)
{
    struct lworker *w = worker_of(L);
    struct lenv *le = w->le;
    const char *k = lua_tostring(L, 2);
    if (__builtin_expect(!!(le->token == 0 ||
                         lua_touserdata(L, 1) != (void *)le->token || !k), 0)) {
        env_self(L);                    /* raises for a stale env */
        luaL_checkstring(L, 2);         /* raises for a bad key */
    }
    if (k != w->k_payload)
        return env_field(L, w, k);
    if (le->decoded) {
        get_view_value(L, le, 1);
        return 1;
    }
    size_t len;
    const void *p = seda_env_payload(le->env, &len);
    int kind = seda_env_payload_kind(le->env);
    if (kind == SEDA_KIND_RAW) {
        lua_pushlstring(L, p, len);     /* a string: nothing to keep */
        return 1;
    }
    seda__l_push_payload(L, p, len, kind, lua_upvalueindex(1));
    /* A table is kept (the handler may change it in place, and reads must
     * see one table); a scalar is decoded again on the next read, which
     * saves the store on the common single read. */
    if (lua_type(L, -1) == LUA_TTABLE) {
        lua_pushvalue(L, -1);
        set_view_value(L, le, 1);
        le->decoded = true;
        le->decoded_table = true;
    }
    return 1;
}

static int env_newindex(lua_State *L)
{
    struct lenv *le = env_self(L);
    struct lworker *w = worker_of(L);
    const char *k = luaL_checkstring(L, 2);
    if (k == w->k_payload) {
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
        set_view_value(L, le, 1);
        le->decoded = true;
        le->payload_set = true;
        return 0;
    }
    if (k == w->k_headers) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_settop(L, 3);
        set_view_value(L, le, 2);
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
    if (le->token != 0 && lua_touserdata(L, 1) == (void *)le->token &&
        le->env)
        lua_pushfstring(L, "envelope %s at %s", seda_env_id(le->env, idbuf),
                        seda_env_to(le->env));
    else
        lua_pushliteral(L, "envelope (finished)");
    return 1;
}

/* ---- after the handler ---- */

#define SYNC_FAIL(...) do { \
        snprintf(err, errlen, __VA_ARGS__); \
        lua_settop(L, top); \
        return -1; \
    } while (0)

/* Copy the headers table (user value 2 of the userdata at le_idx) back
 * into env.  Raw access only, so no handler code runs; 0 or -1 with err. */
static int sync_headers(lua_State *L, seda_env_t *env, int le_idx,
                        char *err, size_t errlen)
{
    int top = lua_gettop(L);
    lua_getiuservalue(L, le_idx, 2);
    int t = lua_gettop(L);
    /* Deletions and changes of existing headers. */
    for (int i = seda_env_header_count(env) - 1; i >= 0; i--) {
        const char *k, *v;
        seda_env_header_at(env, i, &k, &v);
        lua_pushstring(L, k);
        int vt = lua_rawget(L, t);
        if (vt == LUA_TNIL) {
            if (seda_env_set_header(env, k, NULL))
                SYNC_FAIL("headers: out of memory");
        } else if (vt == LUA_TSTRING || vt == LUA_TNUMBER) {
            size_t nl;
            const char *nv = lua_tolstring(L, -1, &nl);
            if (strlen(nv) != nl)
                SYNC_FAIL("headers.%s: contains a NUL byte", k);
            if (strcmp(nv, v) != 0 && seda_env_set_header(env, k, nv))
                SYNC_FAIL("headers: out of memory");
        }
        lua_pop(L, 1);
    }
    /* Additions. */
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            SYNC_FAIL("headers: keys must be strings");
        int vt = lua_type(L, -1);
        if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
            SYNC_FAIL("headers.%s: expected a string, got %s",
                      lua_tostring(L, -2), luaL_typename(L, -1));
        size_t kl, vl;
        const char *k = lua_tolstring(L, -2, &kl);
        lua_pushvalue(L, -1);
        const char *v = lua_tolstring(L, -1, &vl);
        if (strlen(k) != kl)
            SYNC_FAIL("headers: a key contains a NUL byte");
        if (strlen(v) != vl)
            SYNC_FAIL("headers.%s: contains a NUL byte", k);
        if (!seda_env_header(env, k) && seda_env_set_header(env, k, v))
            SYNC_FAIL("headers: out of memory");
        lua_pop(L, 2);
    }
    lua_settop(L, top);
    return 0;
}

int seda__l_env_finish(lua_State *L, struct lworker *w, int nhandlers,
                       char *err, size_t errlen)
{
    struct lenv *le = w->le;
    seda_env_t *env = le->env;
    if (!le->payload_set && !le->headers_loaded && !le->decoded_table)
        return 0;                       /* nothing can have changed */
    /* A table read may have been changed in place: it travels on only if
     * someone else will see it. */
    if (!le->payload_set && !le->headers_loaded &&
        seda_env_slip_count(env) == 0 && !seda_env_has_done(env) &&
        nhandlers <= 1)
        return 0;
    int top = lua_gettop(L);
    int le_idx = push_view(L, le);
    if (le->headers_loaded && sync_headers(L, env, le_idx, err, errlen) != 0) {
        lua_settop(L, top);
        return -1;
    }
    if (!le->decoded) {
        lua_settop(L, top);
        return 0;
    }
    lua_getiuservalue(L, le_idx, 1);
    const void *p;
    size_t len;
    int kind;
    w->wb.len = 0;
    if (seda__l_encode_payload(L, -1, &w->wb, &p, &len, &kind, err,
                               errlen)) {
        lua_settop(L, top);
        return -1;
    }
    int rc = seda_env_set_payload_kind(env, p, len, kind);
    seda__codec_wbuf_trim(&w->wb, SEDA_WBUF_KEEP);
    if (rc == SEDA_ETOOLARGE)
        SYNC_FAIL("too_large: the payload is %zu bytes, over max_payload",
                  len);
    if (rc)
        SYNC_FAIL("payload: out of memory");
    lua_settop(L, top);
    return 0;
}

/* ---- setup ---- */

void seda__l_env_keys(lua_State *L, struct lworker *w)
{
    static const char *const names[] = {
        "payload", "headers", "id", "to", "sender", "slip", "attempts",
        "forward", "published_at", "respond",
    };
    const char **slot[] = {
        &w->k_payload, &w->k_headers, &w->k_id, &w->k_to, &w->k_sender,
        &w->k_slip, &w->k_attempts, &w->k_forward, &w->k_published_at,
        &w->k_respond,
    };
    /* Anchored in a registry table, so the strings (and their addresses)
     * live as long as the state. */
    lua_createtable(L, (int)(sizeof names / sizeof names[0]), 0);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *slot[i] = lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    luaL_ref(L, LUA_REGISTRYINDEX);
}

void seda__l_env_metatable(lua_State *L)
{
    lua_pushlightuserdata(L, NULL);
    luaL_newmetatable(L, LSEDA_ENV_MT);
    seda__codec_push_keycache(L);       /* the decoder's, kept at hand */
    lua_pushcclosure(L, env_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, env_newindex);
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
