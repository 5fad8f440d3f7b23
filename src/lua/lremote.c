/* SPDX-License-Identifier: MIT */
/*
 * lremote.c -- remote stages in the Lua binding: the `remote` option of
 * bus:stage{} and the `remote` table of a remote stage's stats.  A client
 * of include/seda_remote.h only.
 *
 *   bus:stage{ name = "enrich", handler = "h/enrich.lua",
 *              remote = { url = "nats://127.0.0.1:4222", stream = "SEDA",
 *                         subject = ..., consumer = ..., ack_wait = 30,
 *                         max_ack_pending = ..., connect_timeout = 2,
 *                         dedup_window = 120, low_latency = false,
 *                         urls = { "nats://a:4222", ... }, replicas = 3,
 *                         tls = { ca =, cert =, key = }, creds = "x.creds",
 *                         user =, password =, token = } }
 *
 * The stage is made by seda_remote_stage_add instead of seda_stage_add
 * (lstage.c); a stage declared with handlers then consumes
 * (seda_remote_consume), one without only publishes.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lseda.h"
#include "seda_remote.h"

static const char *const remote_keys[] = {
    "url", "stream", "subject", "consumer", "ack_wait", "max_ack_pending",
    "connect_timeout", "dedup_window", "low_latency", "urls", "replicas",
    "tls", "creds", "user", "password", "token", "tap", "reach", NULL
};

/* A file option (tls.ca, tls.cert, tls.key, creds) names a file this
 * process can read: said at once, naming the option, the path and why
 * (the NATS client would say "Error loading ...: (null)" at connect). */
static void check_readable(lua_State *L, const char *stage, const char *opt,
                           const char *path)
{
    if (path && access(path, R_OK) != 0)
        luaL_error(L, "stage '%s': remote: %s: cannot read '%s': %s", stage,
                   opt, path, strerror(errno));
}

static const char *opt_str(lua_State *L, int t, const char *stage,
                           const char *k)
{
    lua_getfield(L, t, k);
    const char *v = NULL;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING || !*lua_tostring(L, -1))
            luaL_error(L, "stage '%s': remote: %s must be a non-empty "
                       "string (got %s)", stage, k, luaL_typename(L, -1));
        v = lua_tostring(L, -1);
    }
    lua_pop(L, 1);                      /* still referenced by the table */
    return v;
}

static double opt_secs(lua_State *L, int t, const char *stage, const char *k,
                       double def)
{
    lua_getfield(L, t, k);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0))
            luaL_error(L, "stage '%s': remote: %s must be a number > 0 "
                       "(seconds)", stage, k);
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static bool opt_bool(lua_State *L, int t, const char *stage, const char *k,
                     bool def)
{
    lua_getfield(L, t, k);
    bool v = def;
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1))
            luaL_error(L, "stage '%s': remote: %s must be a boolean", stage,
                       k);
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* urls = { ... }: the strings stay referenced by the table, the array of
 * pointers lives in a userdata left on the stack (the caller's frame
 * keeps it until the stage is made). */
static void opt_urls(lua_State *L, int t, const char *stage,
                     seda_remote_opts *ro)
{
    lua_getfield(L, t, "urls");
    if (!lua_isnil(L, -1)) {
        if (!lua_istable(L, -1))
            luaL_error(L, "stage '%s': remote: urls must be a list of "
                       "strings", stage);
        int n = (int)luaL_len(L, -1);
        if (n < 1 || n > 32)
            luaL_error(L, "stage '%s': remote: urls must list 1-32 urls",
                       stage);
        int ut = lua_gettop(L);
        const char **a = lua_newuserdatauv(L, sizeof *a * (size_t)n, 0);
        for (int i = 1; i <= n; i++) {
            if (lua_geti(L, ut, i) != LUA_TSTRING || !*lua_tostring(L, -1))
                luaL_error(L, "stage '%s': remote: urls[%d] must be a "
                           "non-empty string", stage, i);
            a[i - 1] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        ro->urls = a;
        ro->nurls = n;
        lua_remove(L, ut);              /* the userdata stays, below */
    } else {
        lua_pop(L, 1);
    }
}

/* reach = { "results.>", ... }: the patterns stay referenced by the
 * table, their array in a userdata left on the stack, as urls'.  A bad
 * pattern raises naming it. */
static void opt_reach(lua_State *L, int t, const char *stage,
                      seda_remote_opts *ro)
{
    lua_getfield(L, t, "reach");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    if (lua_type(L, -1) == LUA_TSTRING) {   /* one pattern alone */
        lua_createtable(L, 1, 0);
        lua_insert(L, -2);
        lua_rawseti(L, -2, 1);
    }
    if (!lua_istable(L, -1))
        luaL_error(L, "stage '%s': remote: reach must be a list of NATS "
                   "subject patterns (got %s)", stage, luaL_typename(L, -1));
    int n = (int)luaL_len(L, -1);
    if (n > 256)
        luaL_error(L, "stage '%s': remote: reach lists at most 256 "
                   "patterns", stage);
    int rt = lua_gettop(L);
    const char **a = lua_newuserdatauv(L, sizeof *a * (size_t)(n + 1), 1);
    lua_pushvalue(L, rt);
    lua_setiuservalue(L, -2, 1);        /* the strings live with it */
    for (int i = 1; i <= n; i++) {
        if (lua_geti(L, rt, i) != LUA_TSTRING ||
            !seda_remote_reach_valid(lua_tostring(L, -1)))
            luaL_error(L, "stage '%s': remote: reach[%d] %s%s%s is not a "
                       "NATS subject pattern (tokens of [A-Za-z0-9_:-] "
                       "separated by single dots, \"*\" for one token, "
                       "\">\" last for the rest)", stage, i,
                       lua_type(L, -1) == LUA_TSTRING ? "'" : "",
                       lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                      : luaL_typename(L, -1),
                       lua_type(L, -1) == LUA_TSTRING ? "'" : "");
        a[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    ro->reach = a;
    ro->nreach = n;
    lua_remove(L, rt);                  /* the userdata stays, below */
}

/* How the connection authenticates (creds, user and password, or token)
 * and its TLS files, each checked readable now. */
static void opt_auth(lua_State *L, int t, const char *stage,
                     seda_remote_opts *ro)
{
    ro->creds = opt_str(L, t, stage, "creds");
    ro->user = opt_str(L, t, stage, "user");
    ro->password = opt_str(L, t, stage, "password");
    ro->token = opt_str(L, t, stage, "token");
    if ((ro->creds != NULL) + (ro->user != NULL) + (ro->token != NULL) > 1)
        luaL_error(L, "stage '%s': remote: creds, user and password, and "
                   "token are three ways to authenticate: give one", stage);
    check_readable(L, stage, "creds", ro->creds);
    if (!ro->user != !ro->password)
        luaL_error(L, "stage '%s': remote: user and password go together",
                   stage);
    lua_getfield(L, t, "tls");
    if (!lua_isnil(L, -1)) {
        static const char *const tls_keys[] = { "ca", "cert", "key", NULL };
        int tt = lua_gettop(L);
        if (!lua_istable(L, tt))
            luaL_error(L, "stage '%s': remote: tls must be a table { ca =, "
                       "cert =, key = } (PEM file paths)", stage);
        seda__l_check_keys(L, tt, tls_keys,
                           lua_pushfstring(L, "stage '%s': remote: tls",
                                           stage));
        lua_pop(L, 1);
        ro->tls_ca = opt_str(L, tt, stage, "ca");
        ro->tls_cert = opt_str(L, tt, stage, "cert");
        ro->tls_key = opt_str(L, tt, stage, "key");
        if (!ro->tls_cert != !ro->tls_key)
            luaL_error(L, "stage '%s': remote: tls.cert and tls.key go "
                       "together", stage);
        check_readable(L, stage, "tls.ca", ro->tls_ca);
        check_readable(L, stage, "tls.cert", ro->tls_cert);
        check_readable(L, stage, "tls.key", ro->tls_key);
    }
    lua_pop(L, 1);                      /* the strings stay in the table */
}

void seda__l_remote_opts(lua_State *L, int t, const char *stage,
                         seda_remote_opts *ro)
{
    if (!lua_istable(L, t))
        luaL_error(L, "stage '%s': remote must be a table { url = "
                   "\"nats://host:port\", ... } (got %s)", stage,
                   luaL_typename(L, t));
    seda__l_check_keys(L, t, remote_keys,
                       lua_pushfstring(L, "stage '%s': remote", stage));
    lua_pop(L, 1);
    seda_remote_opts_init(ro);
    ro->url = opt_str(L, t, stage, "url");
    opt_urls(L, t, stage, ro);
    opt_reach(L, t, stage, ro);
    if (!ro->url && !ro->urls)
        luaL_error(L, "stage '%s': remote: url is required (or urls) "
                   "(\"nats://host:port\")", stage);
    const char *s = opt_str(L, t, stage, "stream");
    if (s)
        ro->stream = s;
    ro->subject = opt_str(L, t, stage, "subject");
    ro->consumer = opt_str(L, t, stage, "consumer");
    ro->ack_wait = opt_secs(L, t, stage, "ack_wait", 0);
    ro->connect_timeout = opt_secs(L, t, stage, "connect_timeout",
                                   ro->connect_timeout);
    ro->dedup_window = opt_secs(L, t, stage, "dedup_window",
                                ro->dedup_window);
    ro->low_latency = opt_bool(L, t, stage, "low_latency", ro->low_latency);
    ro->tap = opt_bool(L, t, stage, "tap", ro->tap);
    lua_getfield(L, t, "replicas");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer v = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || v < 1 || v > 5)
            luaL_error(L, "stage '%s': remote: replicas must be an integer "
                       "1-5", stage);
        ro->replicas = (int)v;
    }
    lua_pop(L, 1);
    opt_auth(L, t, stage, ro);
    lua_getfield(L, t, "max_ack_pending");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer v = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || v <= 0 || v > 1 << 30)
            luaL_error(L, "stage '%s': remote: max_ack_pending must be an "
                       "integer > 0", stage);
        ro->max_ack_pending = (int)v;
    }
    lua_pop(L, 1);
}

const struct seda_remote_format *seda__l_remote_format(lua_State *L, int t,
                                                       const char *stage,
                                                       bool remote)
{
    lua_getfield(L, t, "format");
    const struct seda_remote_format *f = NULL;
    if (!lua_isnil(L, -1)) {
        const char *name = lua_type(L, -1) == LUA_TSTRING
                               ? lua_tostring(L, -1) : "";
        f = seda__l_format(name);
        if (!f && strcmp(name, "seda") != 0)
            luaL_error(L, "stage '%s': format must be \"seda\", \"json\", "
                       "\"msgpack\" or \"raw\" (got %s)", stage,
                       lua_type(L, -1) == LUA_TSTRING ? name
                                                      : luaL_typename(L, -1));
        if (!remote)
            luaL_error(L, "stage '%s': format is an option of remote stages "
                       "(a local stage's payloads never leave the process)",
                       stage);
    }
    lua_pop(L, 1);
    return f;
}

static void set_i(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void set_s(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

bool seda__l_remote_push_stats(lua_State *L, seda_stage_t *st)
{
    seda_remote_stats r;
    if (seda_remote_stats_get(st, &r) != 0)
        return false;
    lua_createtable(L, 0, 32);
    set_s(L, "state", r.state);
    set_s(L, "url", r.url);
    set_s(L, "stream", r.stream);
    set_s(L, "consumer", r.consumer);
    set_s(L, "subject", r.subject);
    lua_pushboolean(L, r.consuming);
    lua_setfield(L, -2, "consuming");
    set_i(L, "published", (lua_Integer)r.published);
    set_i(L, "duplicates", (lua_Integer)r.duplicates);
    set_i(L, "publish_failed", (lua_Integer)r.publish_failed);
    set_i(L, "republished", (lua_Integer)r.republished);
    set_i(L, "publishing", r.publishing);
    set_i(L, "fetched", (lua_Integer)r.fetched);
    set_i(L, "acked", (lua_Integer)r.acked);
    set_i(L, "naked", (lua_Integer)r.naked);
    set_i(L, "termed", (lua_Integer)r.termed);
    set_i(L, "bad_messages", (lua_Integer)r.bad_messages);
    set_i(L, "held_twice", (lua_Integer)r.held_twice);
    set_i(L, "redeclared", (lua_Integer)r.redeclared);
    set_i(L, "completions_resent", (lua_Integer)r.completions_resent);
    set_i(L, "completions_too_large", (lua_Integer)r.completions_too_large);
    set_i(L, "completions_refused", (lua_Integer)r.completions_refused);
    set_i(L, "in_progress", (lua_Integer)r.in_progress);
    set_i(L, "held", r.held);
    /* JetStream's own counts (-1 until it answered once). */
    set_i(L, "js_pending", r.js_pending);
    set_i(L, "js_ack_pending", r.js_ack_pending);
    set_i(L, "js_redelivered", r.js_redelivered);
    set_i(L, "js_waiting", r.js_waiting);
    lua_pushnumber(L, r.js_age);
    lua_setfield(L, -2, "js_age");
    set_i(L, "awaiting", r.awaiting);
    set_i(L, "completions_sent", (lua_Integer)r.completions_sent);
    set_i(L, "completions_received", (lua_Integer)r.completions_received);
    set_i(L, "completions_dropped", (lua_Integer)r.completions_dropped);
    set_i(L, "completions_lost", (lua_Integer)r.completions_lost);
    set_i(L, "reconnects", (lua_Integer)r.reconnects);
    return true;
}
