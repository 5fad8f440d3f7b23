/* SPDX-License-Identifier: MIT */
/*
 * lshared.c -- seda.shared: a process-wide table of scalars kept in C,
 * shared by every worker state and the main state.
 *
 * DESIGN
 *   One hash table of key -> value (nil, boolean, integer, float, string),
 *   guarded by one mutex; every operation copies in or out under it, so no
 *   Lua value is ever shared between states.  It is process-wide rather
 *   than per bus because `seda.shared` is reachable before and without a
 *   bus; it lives until the process exits.  Operations are O(1) expected.
 *
 *   incr is atomic (read-modify-write under the lock) and returns the new
 *   value; add stores only when the key is absent.
 */
#include <stdlib.h>
#include <string.h>

#include "lseda.h"

#define SHARED_MT "seda.shared"

enum { V_NIL, V_BOOL, V_INT, V_FLOAT, V_STR };

struct sval {
    int type;
    union {
        int b;
        lua_Integer i;
        lua_Number f;
        struct { char *p; size_t len; } s;
    } u;
};

struct sentry {
    struct sentry *next;
    char *key;
    size_t klen;
    uint32_t hash;
    struct sval v;
};

/*
 * Locking: mu guards every field of g_shared (buckets, nbuckets, count).
 */
static struct {
    pthread_mutex_t mu;
    struct sentry **buckets;
    uint32_t nbuckets;
    uint32_t count;
} g_shared = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0 };

static uint32_t hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* Lock held.  Returns the entry or NULL. */
static struct sentry *find(const char *k, size_t kl, uint32_t h,
                           struct sentry ***link)
{
    if (!g_shared.buckets)
        return NULL;
    struct sentry **pp = &g_shared.buckets[h & (g_shared.nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == kl &&
            memcmp((*pp)->key, k, kl) == 0) {
            if (link)
                *link = pp;
            return *pp;
        }
    return NULL;
}

/* Lock held.  Grows the table; false on allocation failure. */
static bool grow(void)
{
    if (g_shared.buckets && g_shared.count < g_shared.nbuckets)
        return true;
    uint32_t n = g_shared.nbuckets ? g_shared.nbuckets * 2 : 64;
    struct sentry **b = calloc(n, sizeof *b);
    if (!b)
        return false;
    for (uint32_t i = 0; i < g_shared.nbuckets; i++)
        for (struct sentry *e = g_shared.buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(g_shared.buckets);
    g_shared.buckets = b;
    g_shared.nbuckets = n;
    return true;
}

static void sval_clear(struct sval *v)
{
    if (v->type == V_STR)
        free(v->u.s.p);
    v->type = V_NIL;
}

/* Read the Lua value at idx into v (strings copied).  Raises on an
 * unsupported type: call before taking the lock. */
static void to_sval(lua_State *L, int idx, struct sval *v, const char *op)
{
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
    case LUA_TNONE:
        v->type = V_NIL;
        break;
    case LUA_TBOOLEAN:
        v->type = V_BOOL;
        v->u.b = lua_toboolean(L, idx);
        break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v->type = V_INT;
            v->u.i = lua_tointeger(L, idx);
        } else {
            v->type = V_FLOAT;
            v->u.f = lua_tonumber(L, idx);
        }
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        v->type = V_STR;
        v->u.s.p = malloc(n ? n : 1);
        if (!v->u.s.p)
            luaL_error(L, "shared:%s: out of memory", op);
        memcpy(v->u.s.p, s, n);
        v->u.s.len = n;
        break;
    }
    default:
        luaL_error(L, "shared:%s: cannot store a %s (only nil, booleans, "
                   "numbers and strings)", op, luaL_typename(L, idx));
    }
}

/* Copy v out; the lock is NOT held (v is a private copy). */
static void push_sval(lua_State *L, const struct sval *v)
{
    switch (v->type) {
    case V_BOOL: lua_pushboolean(L, v->u.b); break;
    case V_INT: lua_pushinteger(L, v->u.i); break;
    case V_FLOAT: lua_pushnumber(L, v->u.f); break;
    case V_STR: lua_pushlstring(L, v->u.s.p, v->u.s.len); break;
    default: lua_pushnil(L); break;
    }
}

/* Copy src into dst (lock held); false on allocation failure. */
static bool copy_sval(struct sval *dst, const struct sval *src)
{
    *dst = *src;
    if (src->type == V_STR) {
        dst->u.s.p = malloc(src->u.s.len ? src->u.s.len : 1);
        if (!dst->u.s.p) {
            dst->type = V_NIL;
            return false;
        }
        memcpy(dst->u.s.p, src->u.s.p, src->u.s.len);
    }
    return true;
}

static const char *check_key(lua_State *L, size_t *kl)
{
    luaL_checkudata(L, 1, SHARED_MT);
    if (lua_type(L, 2) != LUA_TSTRING)
        luaL_error(L, "shared: keys must be strings (got %s)",
                   luaL_typename(L, 2));
    return lua_tolstring(L, 2, kl);
}

/* Store v under k (lock held); takes ownership of v.  v nil deletes.
 * Returns false on allocation failure (v freed). */
static bool store(const char *k, size_t kl, uint32_t h, struct sval *v)
{
    struct sentry **link;
    struct sentry *e = find(k, kl, h, &link);
    if (v->type == V_NIL) {
        if (e) {
            *link = e->next;
            sval_clear(&e->v);
            free(e->key);
            free(e);
            g_shared.count--;
        }
        return true;
    }
    if (e) {
        sval_clear(&e->v);
        e->v = *v;
        return true;
    }
    if (!grow() || !(e = calloc(1, sizeof *e)) ||
        !(e->key = malloc(kl ? kl : 1))) {
        free(e);
        sval_clear(v);
        return false;
    }
    memcpy(e->key, k, kl);
    e->klen = kl;
    e->hash = h;
    e->v = *v;
    struct sentry **b = &g_shared.buckets[h & (g_shared.nbuckets - 1)];
    e->next = *b;
    *b = e;
    g_shared.count++;
    return true;
}

static int s_get(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    uint32_t h = hash(k, kl);
    struct sval out = { V_NIL, { 0 } };
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find(k, kl, h, NULL);
    bool ok = !e || copy_sval(&out, &e->v);
    pthread_mutex_unlock(&g_shared.mu);
    if (!ok)
        return luaL_error(L, "shared:get: out of memory");
    push_sval(L, &out);
    sval_clear(&out);
    return 1;
}

static int s_set(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    struct sval v;
    to_sval(L, 3, &v, "set");
    uint32_t h = hash(k, kl);
    pthread_mutex_lock(&g_shared.mu);
    bool ok = store(k, kl, h, &v);
    pthread_mutex_unlock(&g_shared.mu);
    if (!ok)
        return luaL_error(L, "shared:set: out of memory");
    return 0;
}

static int s_add(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    struct sval v;
    to_sval(L, 3, &v, "add");
    uint32_t h = hash(k, kl);
    pthread_mutex_lock(&g_shared.mu);
    bool added = false, ok = true;
    if (!find(k, kl, h, NULL) && v.type != V_NIL) {
        ok = store(k, kl, h, &v);
        added = ok;
    } else {
        sval_clear(&v);
    }
    pthread_mutex_unlock(&g_shared.mu);
    if (!ok)
        return luaL_error(L, "shared:add: out of memory");
    lua_pushboolean(L, added);
    return 1;
}

static int s_delete(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    struct sval v = { V_NIL, { 0 } };
    uint32_t h = hash(k, kl);
    pthread_mutex_lock(&g_shared.mu);
    bool existed = find(k, kl, h, NULL) != NULL;
    store(k, kl, h, &v);
    pthread_mutex_unlock(&g_shared.mu);
    lua_pushboolean(L, existed);
    return 1;
}

static int s_incr(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    lua_Integer di = 0;
    lua_Number df = 0;
    bool dint = true;
    if (lua_isnoneornil(L, 3)) {
        di = 1;
    } else if (lua_isinteger(L, 3)) {
        di = lua_tointeger(L, 3);
    } else if (lua_type(L, 3) == LUA_TNUMBER) {
        df = lua_tonumber(L, 3);
        dint = false;
    } else {
        return luaL_error(L, "shared:incr: increment must be a number "
                          "(got %s)", luaL_typename(L, 3));
    }
    uint32_t h = hash(k, kl);
    struct sval out = { V_NIL, { 0 } };
    const char *bad = NULL;
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find(k, kl, h, NULL);
    if (!e) {
        out.type = dint ? V_INT : V_FLOAT;
        if (dint)
            out.u.i = di;
        else
            out.u.f = df;
        struct sval v = out;
        if (!store(k, kl, h, &v))
            bad = "out of memory";
    } else if (e->v.type == V_INT && dint) {
        e->v.u.i = (lua_Integer)((lua_Unsigned)e->v.u.i + (lua_Unsigned)di);
        out = e->v;
    } else if (e->v.type == V_INT || e->v.type == V_FLOAT) {
        lua_Number cur = e->v.type == V_INT ? (lua_Number)e->v.u.i
                                            : e->v.u.f;
        e->v.type = V_FLOAT;
        e->v.u.f = cur + (dint ? (lua_Number)di : df);
        out = e->v;
    } else {
        bad = "the value is not a number";
    }
    pthread_mutex_unlock(&g_shared.mu);
    if (bad)
        return luaL_error(L, "shared:incr('%s'): %s", k, bad);
    push_sval(L, &out);
    return 1;
}

static size_t keys_size(void)
{
    size_t total = 0;
    for (uint32_t i = 0; i < g_shared.nbuckets; i++)
        for (struct sentry *e = g_shared.buckets[i]; e; e = e->next)
            total += e->klen + sizeof(size_t);
    return total;
}

static int s_keys(lua_State *L)
{
    luaL_checkudata(L, 1, SHARED_MT);
    /* Copy the keys out under the lock into a userdata block sized
     * beforehand (allocating may raise, so never under the lock), then
     * build the table. */
    char *blk = NULL;
    size_t cap = 0;
    uint32_t n = 0;
    for (;;) {
        pthread_mutex_lock(&g_shared.mu);
        size_t total = keys_size();
        if (blk && total <= cap) {
            char *w = blk;
            for (uint32_t i = 0; i < g_shared.nbuckets; i++)
                for (struct sentry *e = g_shared.buckets[i]; e;
                     e = e->next) {
                    memcpy(w, &e->klen, sizeof(size_t));
                    memcpy(w + sizeof(size_t), e->key, e->klen);
                    w += sizeof(size_t) + e->klen;
                }
            n = g_shared.count;
            pthread_mutex_unlock(&g_shared.mu);
            break;
        }
        pthread_mutex_unlock(&g_shared.mu);
        cap = total + 256;
        lua_settop(L, 1);
        blk = lua_newuserdatauv(L, cap, 0);
    }
    lua_createtable(L, (int)n, 0);
    const char *r = blk;
    for (uint32_t i = 0; i < n; i++) {
        size_t kl;
        memcpy(&kl, r, sizeof kl);
        lua_pushlstring(L, r + sizeof kl, kl);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        r += sizeof kl + kl;
    }
    return 1;
}

static int s_tostring(lua_State *L)
{
    lua_pushliteral(L, "seda.shared");
    return 1;
}

void seda__l_shared_push(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "get", s_get }, { "set", s_set }, { "incr", s_incr },
        { "add", s_add }, { "delete", s_delete }, { "keys", s_keys },
        { NULL, NULL }
    };
    lua_getfield(L, LUA_REGISTRYINDEX, SHARED_MT ".object");
    if (!lua_isnil(L, -1))
        return;
    lua_pop(L, 1);
    lua_newuserdatauv(L, 1, 0);
    if (luaL_newmetatable(L, SHARED_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, s_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, SHARED_MT ".object");
}
