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
 *
 *   As OpenResty's lua_shared_dict: set and add take an expiry (seconds,
 *   0 never), an expired key reads as absent (get gives nil, add and incr
 *   start afresh) and is freed when next touched or when room is made;
 *   the table holds at most `capacity` bytes (keys, values and a fixed
 *   cost per entry; default SHARED_CAPACITY), and a store that needs room
 *   evicts expired entries, then the least recently used ones (get and
 *   every store make an entry the most recent), counted in stats():
 *   evicted (live entries pushed out) and expired.  A value that alone
 *   needs more than the capacity is refused with an error.  Expiry times
 *   are on the monotonic clock.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    struct sentry *next;        /* the bucket's chain */
    struct sentry *newer, *older;   /* the LRU list */
    char *key;
    size_t klen;
    uint32_t hash;
    double expires;             /* monotonic seconds; 0 never */
    struct sval v;
};

/* The default bound on the table's bytes (seda.shared:capacity(n)). */
#define SHARED_CAPACITY ((size_t)64 << 20)

/*
 * Locking: mu guards every field of g_shared (buckets, nbuckets, count,
 * the LRU list's ends, bytes, capacity and the counters).
 */
static struct {
    pthread_mutex_t mu;
    struct sentry **buckets;
    uint32_t nbuckets;
    uint32_t count;
    struct sentry *newest, *oldest; /* the LRU list */
    size_t bytes;               /* entry_bytes of every entry */
    size_t capacity;            /* 0: SHARED_CAPACITY (not set yet) */
    uint64_t evicted;           /* live entries pushed out for room */
    uint64_t expired;           /* expired entries freed */
} g_shared = { .mu = PTHREAD_MUTEX_INITIALIZER };

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What an entry of key length kl and value v counts against the
 * capacity. */
static size_t entry_bytes(size_t kl, const struct sval *v)
{
    return sizeof(struct sentry) + kl +
           (v->type == V_STR ? v->u.s.len : 0);
}

static size_t capacity(void)
{
    return g_shared.capacity ? g_shared.capacity : SHARED_CAPACITY;
}

/* Lock held.  e out of the LRU list / in at its newest end. */
static void lru_unlink(struct sentry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        g_shared.newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        g_shared.oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(struct sentry *e)
{
    e->older = g_shared.newest;
    e->newer = NULL;
    if (g_shared.newest)
        g_shared.newest->newer = e;
    else
        g_shared.oldest = e;
    g_shared.newest = e;
}

static bool expired(const struct sentry *e, double now)
{
    return e->expires > 0 && e->expires <= now;
}

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

/* Lock held.  Free entry e (found through *link). */
static void drop(struct sentry **link, struct sentry *e)
{
    *link = e->next;
    lru_unlink(e);
    g_shared.bytes -= entry_bytes(e->klen, &e->v);
    sval_clear(&e->v);
    free(e->key);
    free(e);
    g_shared.count--;
}

/* Lock held.  The live entry of k (an expired one is freed: absent), or
 * NULL. */
static struct sentry *find_live(const char *k, size_t kl, uint32_t h,
                                double now)
{
    struct sentry **link;
    struct sentry *e = find(k, kl, h, &link);
    if (e && expired(e, now)) {
        drop(link, e);
        g_shared.expired++;
        return NULL;
    }
    return e;
}

/* Lock held.  Free oldest-first until need more bytes fit: expired
 * entries first (up to the whole list), then live ones (counted in
 * evicted); *forced says whether a live one went.  keep is never
 * evicted (the entry being replaced). */
static void make_room(size_t need, const struct sentry *keep, double now,
                      bool *forced)
{
    size_t cap = capacity();
    if (g_shared.bytes + need <= cap)
        return;
    /* Like OpenResty's shdict: a bounded look at the oldest for expired
     * ones (a full table pays for at most that per store). */
    int look = 64;
    for (struct sentry *e = g_shared.oldest, *newer; e && look-- > 0;
         e = newer) {
        newer = e->newer;
        if (e != keep && expired(e, now)) {
            struct sentry **link;
            find(e->key, e->klen, e->hash, &link);
            drop(link, e);
            g_shared.expired++;
        }
    }
    while (g_shared.bytes + need > cap && g_shared.oldest) {
        struct sentry *e = g_shared.oldest;
        if (e == keep && !(e = e->newer))
            break;
        struct sentry **link;
        find(e->key, e->klen, e->hash, &link);
        drop(link, e);
        g_shared.evicted++;
        *forced = true;
    }
}

/* Store v under k with expiry exp (0 never; lock held); takes ownership
 * of v.  v nil deletes.  Returns 0, -ENOMEM (v freed) or -E2BIG (v
 * alone needs more than the capacity; v freed, nothing changed).
 * *forced (may be NULL) is set when live entries were evicted. */
static int store(const char *k, size_t kl, uint32_t h, struct sval *v,
                 double exp, bool *forced)
{
    bool f = false;
    double now = now_mono();
    struct sentry **link;
    struct sentry *e = find(k, kl, h, &link);
    if (v->type == V_NIL) {
        if (e)
            drop(link, e);
        return 0;
    }
    size_t need = entry_bytes(kl, v);
    if (need > capacity()) {
        sval_clear(v);
        return -E2BIG;
    }
    if (e) {
        size_t old = entry_bytes(kl, &e->v);
        if (need > old)
            make_room(need - old, e, now, &f);
        g_shared.bytes += need - old;
        sval_clear(&e->v);
        e->v = *v;
        e->expires = exp;
        lru_unlink(e);
        lru_push(e);
        if (forced)
            *forced = f;
        return 0;
    }
    make_room(need, NULL, now, &f);
    if (!grow() || !(e = calloc(1, sizeof *e)) ||
        !(e->key = malloc(kl ? kl : 1))) {
        free(e);
        sval_clear(v);
        return -ENOMEM;
    }
    memcpy(e->key, k, kl);
    e->klen = kl;
    e->hash = h;
    e->v = *v;
    e->expires = exp;
    struct sentry **b = &g_shared.buckets[h & (g_shared.nbuckets - 1)];
    e->next = *b;
    *b = e;
    g_shared.count++;
    g_shared.bytes += need;
    lru_push(e);
    if (forced)
        *forced = f;
    return 0;
}

/* The expiry argument at idx of op: 0 (never) when absent; raises unless
 * a number of seconds >= 0.  Returns the monotonic time it falls due. */
static double check_exptime(lua_State *L, int idx, const char *op)
{
    if (lua_isnoneornil(L, idx))
        return 0;
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_error(L, "shared:%s: exptime must be a number of seconds "
                   "(0: never expires), not a %s", op, luaL_typename(L, idx));
    double t = lua_tonumber(L, idx);
    if (!(t >= 0) || isinf(t))
        luaL_error(L, "shared:%s: exptime must be a number of seconds >= 0 "
                   "(0: never expires), not %f", op, t);
    return t > 0 ? now_mono() + t : 0;
}

/* Raise the error of a store's result rc for op on key k. */
static int store_error(lua_State *L, int rc, const char *op, const char *k)
{
    if (rc == -E2BIG)
        return luaL_error(L, "shared:%s('%s'): the entry needs more than the "
                          "table's whole capacity (%I bytes; "
                          "seda.shared:capacity(bytes) sets it)", op, k,
                          (lua_Integer)capacity());
    return luaL_error(L, "shared:%s: out of memory", op);
}

static int s_get(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    uint32_t h = hash(k, kl);
    struct sval out = { V_NIL, { 0 } };
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find_live(k, kl, h, now_mono());
    bool ok = !e || copy_sval(&out, &e->v);
    if (e) {
        lru_unlink(e);
        lru_push(e);
    }
    pthread_mutex_unlock(&g_shared.mu);
    if (!ok)
        return luaL_error(L, "shared:get: out of memory");
    push_sval(L, &out);
    sval_clear(&out);
    return 1;
}

/* set(k, v [, exptime]) -> true, nil, forcible (true when live entries
 * were evicted to make room). */
static int s_set(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    double exp = check_exptime(L, 4, "set");
    struct sval v;
    to_sval(L, 3, &v, "set");
    uint32_t h = hash(k, kl);
    bool forced = false;
    pthread_mutex_lock(&g_shared.mu);
    int rc = store(k, kl, h, &v, exp, &forced);
    pthread_mutex_unlock(&g_shared.mu);
    if (rc != 0)
        return store_error(L, rc, "set", k);
    lua_pushboolean(L, 1);
    lua_pushnil(L);
    lua_pushboolean(L, forced);
    return 3;
}

/* add(k, v [, exptime]) -> true, nil, forcible when stored (k absent or
 * expired); false, "exists" when k holds a live value. */
static int s_add(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    double exp = check_exptime(L, 4, "add");
    struct sval v;
    to_sval(L, 3, &v, "add");
    uint32_t h = hash(k, kl);
    bool forced = false, exists = false;
    int rc = 0;
    pthread_mutex_lock(&g_shared.mu);
    if (find_live(k, kl, h, now_mono()) || v.type == V_NIL) {
        exists = v.type != V_NIL;
        sval_clear(&v);
    } else {
        rc = store(k, kl, h, &v, exp, &forced);
    }
    pthread_mutex_unlock(&g_shared.mu);
    if (rc != 0)
        return store_error(L, rc, "add", k);
    if (exists || lua_isnoneornil(L, 3)) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, exists ? "exists" : "nil value");
        return 2;
    }
    lua_pushboolean(L, 1);
    lua_pushnil(L);
    lua_pushboolean(L, forced);
    return 3;
}

static int s_delete(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    struct sval v = { V_NIL, { 0 } };
    uint32_t h = hash(k, kl);
    pthread_mutex_lock(&g_shared.mu);
    bool existed = find_live(k, kl, h, now_mono()) != NULL;
    store(k, kl, h, &v, 0, NULL);
    pthread_mutex_unlock(&g_shared.mu);
    lua_pushboolean(L, existed);
    return 1;
}

/* incr(k [, n = 1]) -> the new value: an absent (or expired) k starts at
 * 0 and never expires; a live one keeps its expiry. */
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
    int rc = 0;
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find_live(k, kl, h, now_mono());
    if (!e) {
        out.type = dint ? V_INT : V_FLOAT;
        if (dint)
            out.u.i = di;
        else
            out.u.f = df;
        struct sval v = out;
        rc = store(k, kl, h, &v, 0, NULL);
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
    if (e && !bad) {
        lru_unlink(e);
        lru_push(e);
    }
    pthread_mutex_unlock(&g_shared.mu);
    if (rc != 0)
        return store_error(L, rc, "incr", k);
    if (bad)
        return luaL_error(L, "shared:incr('%s'): %s", k, bad);
    push_sval(L, &out);
    return 1;
}

/* ttl(k) -> seconds left (0: never expires), or nil, "not found". */
static int s_ttl(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    uint32_t h = hash(k, kl);
    double now = now_mono(), left = -1;
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find_live(k, kl, h, now);
    if (e)
        left = e->expires > 0 ? e->expires - now : 0;
    pthread_mutex_unlock(&g_shared.mu);
    if (left < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "not found");
        return 2;
    }
    if (left == 0)
        lua_pushinteger(L, 0);          /* never expires */
    else
        lua_pushnumber(L, left);
    return 1;
}

/* expire(k, exptime) -> true, or nil, "not found": a live k's expiry set
 * anew (0: never). */
static int s_expire(lua_State *L)
{
    size_t kl;
    const char *k = check_key(L, &kl);
    if (lua_isnoneornil(L, 3))
        return luaL_error(L, "shared:expire: exptime missing (seconds; 0: "
                          "never expires)");
    double exp = check_exptime(L, 3, "expire");
    uint32_t h = hash(k, kl);
    pthread_mutex_lock(&g_shared.mu);
    struct sentry *e = find_live(k, kl, h, now_mono());
    if (e)
        e->expires = exp;
    pthread_mutex_unlock(&g_shared.mu);
    if (!e) {
        lua_pushnil(L);
        lua_pushliteral(L, "not found");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* capacity([bytes]) -> the bound in bytes (before the change): with
 * bytes (an integer >= 4096), the table's new bound; entries past it are
 * evicted oldest first at once. */
static int s_capacity(lua_State *L)
{
    luaL_checkudata(L, 1, SHARED_MT);
    lua_Integer n = 0;
    if (!lua_isnoneornil(L, 2)) {
        if (!lua_isinteger(L, 2) || (n = lua_tointeger(L, 2)) < 4096)
            return luaL_error(L, "shared:capacity: bytes must be an integer "
                              ">= 4096 (got %s)", luaL_tolstring(L, 2, NULL));
    }
    pthread_mutex_lock(&g_shared.mu);
    size_t old = capacity();
    if (n > 0) {
        bool forced = false;
        g_shared.capacity = (size_t)n;
        make_room(0, NULL, now_mono(), &forced);
    }
    pthread_mutex_unlock(&g_shared.mu);
    lua_pushinteger(L, (lua_Integer)old);
    return 1;
}

/* stats() -> { keys, bytes, capacity, evicted, expired }. */
static int s_stats(lua_State *L)
{
    luaL_checkudata(L, 1, SHARED_MT);
    pthread_mutex_lock(&g_shared.mu);
    lua_Integer keys = g_shared.count, bytes = (lua_Integer)g_shared.bytes,
                cap = (lua_Integer)capacity(),
                ev = (lua_Integer)g_shared.evicted,
                ex = (lua_Integer)g_shared.expired;
    pthread_mutex_unlock(&g_shared.mu);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, keys);
    lua_setfield(L, -2, "keys");
    lua_pushinteger(L, bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushinteger(L, cap);
    lua_setfield(L, -2, "capacity");
    lua_pushinteger(L, ev);
    lua_setfield(L, -2, "evicted");
    lua_pushinteger(L, ex);
    lua_setfield(L, -2, "expired");
    return 1;
}

/* Lock held.  Free every expired entry (keys lists live ones only). */
static void sweep_expired(void)
{
    double now = now_mono();
    for (struct sentry *e = g_shared.oldest, *newer; e; e = newer) {
        newer = e->newer;
        if (expired(e, now)) {
            struct sentry **link;
            find(e->key, e->klen, e->hash, &link);
            drop(link, e);
            g_shared.expired++;
        }
    }
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
        sweep_expired();
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
        { "ttl", s_ttl }, { "expire", s_expire },
        { "capacity", s_capacity }, { "stats", s_stats },
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
