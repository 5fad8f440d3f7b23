/* SPDX-License-Identifier: MIT */
/*
 * lpull.c -- the pull model in Lua: bus:receive(stage, timeout) on the
 * main state and seda.receive(stage, timeout) in handlers return a
 * received envelope that the caller settles with env:ack() or env:nack().
 *
 * DESIGN
 *   The core lends the envelope through a lease (see src/core/pull.c).  At
 *   receive, everything the Lua object shows is copied out under the lease
 *   lock (id, to, sender, attempts, headers, slip, the payload bytes), so
 *   reading never races an expiry.  Changes (payload, headers, forward)
 *   are kept on the Lua side and written back under the lease lock just
 *   before the ack; a nack discards them.  An object collected unsettled
 *   nacks.
 */
#include <stdlib.h>
#include <string.h>

#include "lenvtab.h"
#include "lseda.h"

#define LEASE_MT "seda.received"

/* User values: 1 info table {id,to,sender,attempts,slip}, 2 headers table,
 * 3 raw payload string, 4 decoded/assigned payload, 5 pending forwards,
 * 6 the bus object (main state), which must outlive the lease. */
struct llease {
    seda_lease_t *lease;        /* NULL once settled */
    int kind;                   /* payload kind */
    bool decoded;               /* user value 4 holds the payload value */
    bool payload_set;           /* assigned */
    bool headers_loaded;        /* user value 2 was handed out */
    seda_wbuf *wb;              /* the state's encode buffer (borrowed) */
};

static struct llease *check_lease(lua_State *L)
{
    return luaL_checkudata(L, 1, LEASE_MT);
}

static struct llease *check_open(lua_State *L)
{
    struct llease *ll = check_lease(L);
    if (!ll->lease)
        luaL_error(L, "envelope already acked or nacked");
    return ll;
}

static int lease_forward(lua_State *L)
{
    check_open(L);
    int n = lua_gettop(L) - 1;
    for (int i = 0; i < n; i++) {
        const char *s = luaL_checkstring(L, i + 2);
        if (!seda__l_valid_name(s))
            return luaL_error(L, "forward: invalid stage name '%s'", s);
    }
    /* Prepend: the newest call's hops come first. */
    lua_getiuservalue(L, 1, 5);
    int old = (int)lua_rawlen(L, -1);
    lua_createtable(L, old + n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushvalue(L, i + 2);
        lua_rawseti(L, -2, i + 1);
    }
    for (int i = 1; i <= old; i++) {
        lua_rawgeti(L, -2, i);
        lua_rawseti(L, -2, n + i);
    }
    lua_setiuservalue(L, 1, 5);
    lua_pushboolean(L, 1);
    return 1;
}

/* Write the Lua-side changes into the envelope and settle.  ack = false
 * nacks (changes dropped). */
static int settle(lua_State *L, bool ack)
{
    struct llease *ll = check_open(L);
    seda_lease_t *lease = ll->lease;
    int rc;
    if (!ack) {
        ll->lease = NULL;
        rc = seda_lease_nack(lease);
    } else {
        /* Everything that can raise happens before the lease lock. */
        const void *p = NULL;
        size_t len = 0;
        int kind = 0;
        bool set_payload = ll->payload_set;
        if (!set_payload && ll->decoded) {
            lua_getiuservalue(L, 1, 4);
            set_payload = lua_istable(L, -1);   /* may have changed */
            lua_pop(L, 1);
        }
        lua_settop(L, 1);
        if (set_payload) {
            char err[512];
            lua_getiuservalue(L, 1, 4);         /* 2 */
            ll->wb->len = 0;
            if (seda__l_encode_payload(L, 2, ll->wb, &p, &len, &kind, err,
                                       sizeof err) != 0)
                return luaL_error(L, "ack: %s", err);
        } else {
            lua_pushnil(L);                     /* 2 */
        }
        int nh = 0;
        const char **hv = NULL;
        if (ll->headers_loaded) {
            lua_getiuservalue(L, 1, 2);         /* 3 */
            lua_pushnil(L);
            while (lua_next(L, 3)) {
                lua_pop(L, 1);
                nh++;
            }
            hv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(2 * nh + 1),
                                   0);          /* 4 */
            luaL_checkstack(L, 2 * nh + 8, "too many headers");
            int i = 0;
            lua_pushnil(L);
            while (lua_next(L, 3)) {
                int t = lua_type(L, -1);
                if (lua_type(L, -2) != LUA_TSTRING ||
                    (t != LUA_TSTRING && t != LUA_TNUMBER))
                    return luaL_error(L, "ack: headers must map strings to "
                                      "strings");
                lua_pushvalue(L, -2);
                lua_pushvalue(L, -2);
                hv[2 * i] = lua_tostring(L, -2);
                hv[2 * i + 1] = lua_tostring(L, -1);
                lua_rotate(L, -4, 2);
                lua_pop(L, 1);
                i++;
            }
            nh = i;
        }
        lua_getiuservalue(L, 1, 5);
        int nf = (int)lua_rawlen(L, -1);
        int ft = lua_gettop(L);
        const char **fw = lua_newuserdatauv(L, sizeof(char *) *
                                            (size_t)(nf + 1), 0);
        for (int i = 0; i < nf; i++) {
            lua_rawgeti(L, ft, i + 1);
            fw[i] = lua_tostring(L, -1);        /* anchored in the table */
            lua_pop(L, 1);
        }

        seda_env_t *env = seda_lease_env(lease);
        bool oom = false;
        if (env) {
            if (set_payload)
                oom |= seda_env_set_payload_kind(env, p, len, kind) != 0;
            if (ll->headers_loaded) {
                for (int i = seda_env_header_count(env) - 1; i >= 0; i--) {
                    const char *k, *v;
                    seda_env_header_at(env, i, &k, &v);
                    bool keep = false;
                    for (int j = 0; j < nh && !keep; j++)
                        keep = strcmp(hv[2 * j], k) == 0;
                    if (!keep)
                        seda_env_set_header(env, k, NULL);
                }
                for (int j = 0; j < nh; j++)
                    oom |= seda_env_set_header(env, hv[2 * j],
                                               hv[2 * j + 1]) != 0;
            }
            if (nf > 0)
                oom |= seda_env_forward(env, fw, nf) != 0;
            seda_lease_release_env(lease);
        }
        ll->lease = NULL;
        rc = oom ? seda_lease_nack(lease) : seda_lease_ack(lease);
        if (oom && rc == 0)
            return luaL_error(L, "ack: out of memory (nacked)");
    }
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, rc == SEDA_ETIMEDOUT ? "expired" : seda_strerror(rc));
    return 2;
}

static int lease_ack(lua_State *L) { return settle(L, true); }
static int lease_nack(lua_State *L) { return settle(L, false); }

static int lease_gc(lua_State *L)
{
    struct llease *ll = check_lease(L);
    if (ll->lease) {
        seda_lease_nack(ll->lease);
        ll->lease = NULL;
    }
    return 0;
}

static int lease_index(lua_State *L)
{
    struct llease *ll = check_lease(L);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "payload") == 0) {
        if (!ll->decoded) {
            lua_getiuservalue(L, 1, 3);
            size_t len;
            const char *p = lua_tolstring(L, -1, &len);
            seda__l_push_payload(L, p, len, ll->kind, 0);
            lua_setiuservalue(L, 1, 4);
            ll->decoded = true;
        }
        lua_getiuservalue(L, 1, 4);
        return 1;
    }
    if (strcmp(k, "headers") == 0) {
        ll->headers_loaded = true;
        lua_getiuservalue(L, 1, 2);
        return 1;
    }
    if (strcmp(k, "ack") == 0) {
        lua_pushcfunction(L, lease_ack);
        return 1;
    }
    if (strcmp(k, "nack") == 0) {
        lua_pushcfunction(L, lease_nack);
        return 1;
    }
    if (strcmp(k, "forward") == 0) {
        lua_pushcfunction(L, lease_forward);
        return 1;
    }
    if (strcmp(k, "slip") == 0) {
        /* Pending forwards first, then the slip as received. */
        lua_getiuservalue(L, 1, 5);
        lua_getiuservalue(L, 1, 1);
        lua_getfield(L, -1, "slip");
        int nf = (int)lua_rawlen(L, -3), ns = (int)lua_rawlen(L, -1);
        lua_createtable(L, nf + ns, 0);
        for (int i = 1; i <= nf; i++) {
            lua_rawgeti(L, -4, i);
            lua_rawseti(L, -2, i);
        }
        for (int i = 1; i <= ns; i++) {
            lua_rawgeti(L, -2, i);
            lua_rawseti(L, -2, nf + i);
        }
        return 1;
    }
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, k);
    return 1;
}

static int lease_newindex(lua_State *L)
{
    struct llease *ll = check_open(L);
    const char *k = luaL_checkstring(L, 2);
    lua_settop(L, 3);
    if (strcmp(k, "payload") == 0) {
        lua_setiuservalue(L, 1, 4);
        ll->decoded = ll->payload_set = true;
        return 0;
    }
    if (strcmp(k, "headers") == 0) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_setiuservalue(L, 1, 2);
        ll->headers_loaded = true;
        return 0;
    }
    return luaL_error(L, "envelope field '%s' cannot be set", k);
}

/* A received envelope copied out of its lease (malloc'd; see
 * lease_copy). */
struct lcopy {
    char id[SEDA_ID_MAX];
    char to[SEDA_NAME_MAX + 1];
    char *sender;               /* or NULL */
    char *payload;
    size_t plen;
    int attempts;
    int kind;                   /* payload kind */
    int nh, ns;                 /* header pairs, slip entries */
    char **strs;                /* 2 * nh header strings, then ns slip */
};

/* Push a new received-envelope object (its metatable made on first use)
 * for the encode buffer wb, keeping the bus object at busidx (0: none)
 * alive; its fields are empty.  Returns it. */
static struct llease *lease_object(lua_State *L, seda_wbuf *wb, int busidx)
{
    if (luaL_newmetatable(L, LEASE_MT)) {
        lua_pushcfunction(L, lease_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, lease_newindex);
        lua_setfield(L, -2, "__newindex");
        lua_pushcfunction(L, lease_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushliteral(L, "received envelope");
        lua_setfield(L, -2, "__name");
    }
    lua_pop(L, 1);
    struct llease *ll = lua_newuserdatauv(L, sizeof *ll, 6);
    memset(ll, 0, sizeof *ll);
    ll->wb = wb;
    luaL_setmetatable(L, LEASE_MT);
    int obj = lua_gettop(L);
    if (busidx) {
        lua_pushvalue(L, busidx);
        lua_setiuservalue(L, obj, 6);
    }
    lua_newtable(L);
    lua_setiuservalue(L, obj, 5);
    return ll;
}

/* Copy the leased envelope into c under the lease lock (no Lua calls
 * while it is held).  Returns false when the lease has expired (*expired
 * set) or memory ran out; c then holds what was copied, for
 * lcopy_free. */
static bool lease_copy(seda_lease_t *lease, struct lcopy *c, bool *expired)
{
    bool ok = true;
    seda_env_t *env = seda_lease_env(lease);
    *expired = env == NULL;
    if (!env)
        return false;
    seda_env_id(env, c->id);
    snprintf(c->to, sizeof c->to, "%s", seda_env_to(env));
    c->attempts = seda_env_attempts(env);
    c->kind = seda_env_payload_kind(env);
    const void *p = seda_env_payload(env, &c->plen);
    c->payload = malloc(c->plen ? c->plen : 1);
    ok &= c->payload != NULL;
    if (c->payload)
        memcpy(c->payload, p, c->plen);
    if (seda_env_sender(env))
        ok &= (c->sender = strdup(seda_env_sender(env))) != NULL;
    c->nh = seda_env_header_count(env);
    c->ns = seda_env_slip_count(env);
    c->strs = calloc((size_t)(2 * c->nh + c->ns + 1), sizeof *c->strs);
    ok &= c->strs != NULL;
    for (int i = 0; c->strs && i < c->nh; i++) {
        const char *k, *v;
        seda_env_header_at(env, i, &k, &v);
        ok &= (c->strs[2 * i] = strdup(k)) &&
              (c->strs[2 * i + 1] = strdup(v));
    }
    for (int i = 0; c->strs && i < c->ns; i++)
        ok &= (c->strs[2 * c->nh + i] = strdup(seda_env_slip_at(env, i)))
              != NULL;
    seda_lease_release_env(lease);
    return ok;
}

static void lcopy_free(struct lcopy *c)
{
    free(c->payload);
    free(c->sender);
    for (int i = 0; c->strs && i < 2 * c->nh + c->ns; i++)
        free(c->strs[i]);
    free(c->strs);
}

/* Set the received-envelope object at obj's payload, headers and fields
 * (user values 3, 2, 1) from c. */
static void lease_fill(lua_State *L, int obj, const struct lcopy *c)
{
    lua_pushlstring(L, c->payload ? c->payload : "", c->plen);
    lua_setiuservalue(L, obj, 3);
    seda__l_envtab_push_headers(L, c->strs, c->nh);
    lua_setiuservalue(L, obj, 2);
    seda__l_envtab_push_fields(L, 6, c->id, c->to, c->sender, c->attempts);
    lua_createtable(L, c->ns, 0);
    for (int i = 0; i < c->ns; i++) {
        lua_pushstring(L, c->strs[2 * c->nh + i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "slip");
    lua_setiuservalue(L, obj, 1);
}

int seda__l_pull_receive(lua_State *L, struct lbus *lb, int first,
                         seda_wbuf *wb, int busidx)
{
    const char *name = luaL_checkstring(L, first);
    double timeout = luaL_optnumber(L, first + 1, 0);
    seda_stage_t *st = seda_bus_stage(lb->bus, name);
    if (!st)
        return luaL_error(L, "receive: no such stage '%s'", name);
    /* The object first, so the lease is owned by something collectable
     * before any Lua call can raise. */
    struct llease *ll = lease_object(L, wb, busidx);
    int obj = lua_gettop(L);
    seda_lease_t *lease;
    int rc = seda_stage_receive(st, timeout, &lease);
    if (rc == SEDA_EINVAL)
        return luaL_error(L, "receive: stage '%s' is not a pull stage",
                          name);
    if (rc) {
        lua_pushnil(L);
        lua_pushstring(L, seda_strerror(rc));
        return 2;
    }
    ll->lease = lease;
    /* Copy out under the lease lock into malloc'd scratch, then build
     * the Lua values. */
    struct lcopy c = { .sender = NULL };
    bool expired;
    bool ok = lease_copy(lease, &c, &expired);
    ll->kind = c.kind;
    if (ok)
        lease_fill(L, obj, &c);
    lcopy_free(&c);
    if (!ok) {
        /* Expired already, or out of memory: hand it back. */
        ll->lease = NULL;
        seda_lease_nack(lease);
        lua_pushnil(L);
        lua_pushstring(L, expired ? "expired" : "nomem");
        return 2;
    }
    lua_settop(L, obj);
    return 1;
}
