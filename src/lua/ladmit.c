/* SPDX-License-Identifier: MIT */
/*
 * ladmit.c -- a stage's `admit` rule: admission written in Lua.
 *
 * DESIGN
 *   `admit = function(env, stage) ... end` (no upvalues but _ENV and the
 *   seda module) or a file returning such a function is a stage option.
 *   It runs in the publisher's own Lua state -- the main state for
 *   bus:publish and bus:publish_many, the worker's for seda.publish --
 *   before the envelope is made, so a refusal costs no envelope.  Hops
 *   and dead letters are not subject to it: they were admitted at their
 *   first stage.  C publishers (seda_publish) have no Lua state and
 *   bypass it.
 *
 *   Each state compiles the rule once per version (the stage's
 *   admit_version, raised by reload and tune) and keeps it in a registry
 *   table keyed by the stage; a stage without a rule costs one pointer
 *   test.  The rule gets two read-only views that the state makes once and
 *   reuses: `env` (payload, headers, sender, to, priority; the payload is
 *   the very Lua value being published, never encoded or decoded for
 *   this) and `stage` (name, depth, capacity, concurrency, in_flight,
 *   sojourn_p99 and service_p99 in seconds, rate, ... from one stats
 *   snapshot taken on first access).  A view kept past its call raises.
 *
 *   Results: true or nothing admits; "low" admits at low priority; false,
 *   reason refuses (publish returns false, reason; counted in the stage's
 *   refused and dropped; a NUL in the reason is written \0).  An error,
 *   or any other result ("high" and "normal" too: a rule may only lower
 *   a priority), refuses with "admit_error" and is reported with its
 *   traceback like a handler error (rate-limited).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lseda.h"
#include "lworker.h"

/* Registry key of the state's admit table: { env view, stage view,
 * fns, vers }, where fns and vers hold each stage's compiled rule and its
 * version, keyed by the stage's uid (never by its address: a stage freed
 * and another made at the same address, both at version 1, would get the
 * old one's rule).  The slow path; struct ladmit_cache is the quick one. */
static const char k_views;
enum { V_ENV = 1, V_STAGE, V_FNS, V_VERS };

/* The views' shared state: one per Lua state (the env view's memory). */
struct admit_call {
    bool active;                /* inside a rule's call */
    struct lstage *ls;
    const char *to;
    const char *sender;
    int prio;                   /* enum seda_priority */
    bool headers_set;           /* user value 2 holds this call's headers */
    bool have_stats;
    seda_stage_stats s;
};

static const char *const prio_names[] = { "normal", "high", "low" };

static struct admit_call *call_of(lua_State *L, int idx, const char *what)
{
    struct admit_call *c = lua_touserdata(L, idx);
    if (!c->active)
        luaL_error(L, "%s used outside its admit call", what);
    return c;
}

/* env.payload / headers / sender / to / priority */
static int env_index(lua_State *L)
{
    struct admit_call *c = call_of(L, 1, "admit env");
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "payload") == 0) {
        lua_getiuservalue(L, 1, 1);
    } else if (strcmp(k, "headers") == 0) {
        if (!c->headers_set) {
            /* None given: an empty table, made when asked for. */
            lua_createtable(L, 0, 0);
            lua_setiuservalue(L, 1, 2);
            c->headers_set = true;
        }
        lua_getiuservalue(L, 1, 2);
    } else if (strcmp(k, "sender") == 0) {
        if (c->sender)
            lua_pushstring(L, c->sender);
        else
            lua_pushnil(L);
    } else if (strcmp(k, "to") == 0) {
        lua_pushstring(L, c->to);
    } else if (strcmp(k, "priority") == 0) {
        lua_pushstring(L, prio_names[c->prio]);
    } else {
        lua_pushnil(L);
    }
    return 1;
}

static int env_newindex(lua_State *L)
{
    call_of(L, 1, "admit env");
    return luaL_error(L, "admit: env is read-only (set '%s' in the "
                      "handler instead)", luaL_optstring(L, 2, "?"));
}

/* stage.depth / capacity / sojourn_p99 / rate / ... (one snapshot per
 * call, taken on first access). */
static int stage_index(lua_State *L)
{
    lua_getiuservalue(L, 1, 1);                 /* the env view */
    struct admit_call *c = call_of(L, -1, "admit stage");
    lua_pop(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "name") == 0) {
        lua_pushstring(L, seda_stage_name(c->ls->st));
        return 1;
    }
    if (!c->have_stats) {
        seda_stage_stats_get(c->ls->st, &c->s);
        c->have_stats = true;
    }
    const seda_stage_stats *s = &c->s;
    struct { const char *k; double v; bool integer; } f[] = {
        { "depth", s->depth, true },
        { "capacity", s->capacity, true },
        { "concurrency", s->concurrency, true },
        { "in_flight", s->in_flight, true },
        { "delayed", s->delayed, true },
        { "shedding", s->shedding, true },
        { "depth_high", s->depth_high, true },
        { "depth_low", s->depth_low, true },
        { "rate", s->rate, false },
        { "sojourn_p50", s->sojourn_p50 / 1e6, false },
        { "sojourn_p99", s->sojourn_p99 / 1e6, false },
        { "service_p50", s->service_p50 / 1e6, false },
        { "service_p99", s->service_p99 / 1e6, false },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (strcmp(k, f[i].k) == 0) {
            if (f[i].integer)
                lua_pushinteger(L, (lua_Integer)f[i].v);
            else
                lua_pushnumber(L, f[i].v);
            return 1;
        }
    }
    lua_pushnil(L);
    return 1;
}

static int stage_newindex(lua_State *L)
{
    return luaL_error(L, "admit: stage is read-only");
}

/* Push the state's admit table (made on first use). */
static void push_views(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &k_views) == LUA_TTABLE)
        return;
    lua_pop(L, 1);
    lua_createtable(L, 4, 0);
    lua_createtable(L, 0, 1);
    lua_rawseti(L, -2, V_FNS);
    lua_createtable(L, 0, 1);
    lua_rawseti(L, -2, V_VERS);
    struct admit_call *c = lua_newuserdatauv(L, sizeof *c, 2);
    memset(c, 0, sizeof *c);
    lua_createtable(L, 0, 4);
    lua_pushcfunction(L, env_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, env_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushliteral(L, "admit env");
    lua_setfield(L, -2, "__name");
    lua_pushliteral(L, "admit env");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_newuserdatauv(L, 1, 1);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1);                /* stage -> env */
    lua_createtable(L, 0, 4);
    lua_pushcfunction(L, stage_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, stage_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushliteral(L, "admit stage");
    lua_setfield(L, -2, "__name");
    lua_pushliteral(L, "admit stage");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_rawseti(L, -3, V_STAGE);
    lua_rawseti(L, -2, V_ENV);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &k_views);
}

int seda__l_admit_load(lua_State *L, const struct lsrc *s)
{
    int rc = luaL_loadbufferx(L, s->code, s->len, s->chunkname,
                              s->binary ? "b" : "t");
    if (rc != LUA_OK)
        return -1;
    if (s->binary) {
        /* The dumped function: _ENV to this state's globals, the seda
         * module (the only other upvalue allowed) to this state's. */
        for (int i = 1;; i++) {
            const char *up = lua_getupvalue(L, -1, i);
            if (!up)
                break;
            lua_pop(L, 1);
            if (strcmp(up, "_ENV") == 0) {
                lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
            } else {
                luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
                lua_getfield(L, -1, "seda");
                lua_remove(L, -2);
            }
            lua_setupvalue(L, -2, i);
        }
        return 0;
    }
    lua_pushcfunction(L, seda__l_worker_msghandler);
    lua_insert(L, -2);
    rc = lua_pcall(L, 0, 1, -2);
    lua_remove(L, -2);                          /* the message handler */
    if (rc != LUA_OK)
        return -1;
    if (!lua_isfunction(L, -1)) {
        lua_pushfstring(L, "%s: an admit file must return a function "
                        "(got %s)", s->chunkname + 1, luaL_typename(L, -1));
        lua_remove(L, -2);
        return -1;
    }
    return 0;
}

/* Push ls's rule in L (compiled for its current version), or return -1
 * leaving an error message.  0 with nothing pushed when ls has none.  vi:
 * the admit table's index. */
static int push_rule(lua_State *L, int vi, struct lstage *ls,
                     uint64_t *vp, bool *have)
{
    *have = false;
    uint64_t v = *vp;
    lua_rawgeti(L, vi, V_VERS);
    lua_rawgeti(L, -1, (lua_Integer)ls->uid);
    bool fresh = lua_tointeger(L, -1) == (lua_Integer)v;
    lua_pop(L, 1);
    if (fresh) {
        lua_pop(L, 1);
        lua_rawgeti(L, vi, V_FNS);
        lua_rawgeti(L, -1, (lua_Integer)ls->uid);
        lua_remove(L, -2);
        *have = !lua_isnil(L, -1);
        if (!*have)
            lua_pop(L, 1);
        return 0;
    }
    /* Compile the current source (copied under the stage's lock). */
    struct lsrc src = { 0 };
    pthread_mutex_lock(&ls->mu);
    v = atomic_load_explicit(&ls->admit_version, memory_order_acquire);
    *vp = v;
    bool any = ls->admit != NULL;
    if (any) {
        src = *ls->admit;
        src.code = malloc(src.len ? src.len : 1);
        src.chunkname = strdup(ls->admit->chunkname);
        if (src.code)
            memcpy(src.code, ls->admit->code, src.len);
    }
    pthread_mutex_unlock(&ls->mu);
    lua_pushinteger(L, (lua_Integer)v);
    lua_rawseti(L, -2, (lua_Integer)ls->uid);    /* vers[uid] = v */
    lua_pop(L, 1);
    lua_rawgeti(L, vi, V_FNS);
    if (!any) {
        lua_pushnil(L);
        lua_rawseti(L, -2, (lua_Integer)ls->uid);
        lua_pop(L, 1);
        return 0;
    }
    if (!src.code || !src.chunkname) {
        free(src.code);
        free(src.chunkname);
        lua_pop(L, 1);
        lua_pushliteral(L, "admit: out of memory");
        return -1;
    }
    int rc = seda__l_admit_load(L, &src);
    free(src.code);
    free(src.chunkname);
    if (rc != 0) {
        lua_remove(L, -2);
        /* Not cached: the next publish tries again (and says why). */
        lua_rawgeti(L, vi, V_VERS);
        lua_pushnil(L);
        lua_rawseti(L, -2, (lua_Integer)ls->uid);
        lua_pop(L, 1);
        return -1;
    }
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, (lua_Integer)ls->uid);
    lua_remove(L, -2);
    *have = true;
    return 0;
}

/* Report a rule's error on the stage (counted in errors). */
static void report(struct lstage *ls, const char *what, const char *msg)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "admit %s: %s", what, msg ? msg : "?");
    seda_stage_report(ls->st, buf);
}

void seda__l_admit_cache_free(lua_State *L, struct ladmit_cache *ac)
{
    for (int i = 0; i < LADMIT_SLOTS; i++)
        if (ac->slot[i].uid)
            luaL_unref(L, LUA_REGISTRYINDEX, ac->slot[i].ref);
    if (ac->ready) {
        luaL_unref(L, LUA_REGISTRYINDEX, ac->env_ref);
        luaL_unref(L, LUA_REGISTRYINDEX, ac->stage_ref);
    }
    memset(ac, 0, sizeof *ac);
}

/* ---- the bound on a rule on the main state ---- */

#define RULE_LIMIT_S 0.5
#define RULE_LIMIT_TEXT "0.5"
#define RULE_MEM_LIMIT (64 << 20)

struct rule_bound {
    lua_Hook hook;              /* the state's hook before (a REPL's) */
    int mask, count;
};

/* The rule being bounded on this thread (one main state a thread). */
/* Admit rules running on this thread now (nested only through an
 * error path): the calls that wait raise while it is above 0.  This
 * thread's own. */
static _Thread_local int rule_depth;

void seda__l_admit_no_wait(lua_State *L, const char *what)
{
    if (rule_depth > 0)
        luaL_error(L, "%s: an admit rule must not wait", what);
}

static _Thread_local struct {
    double until;               /* seda_now() deadline */
    size_t mem0;                /* KiB in use at the start */
    bool tripped;
} rule_now;

static void rule_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    size_t kib = (size_t)lua_gc(L, LUA_GCCOUNT, 0);
    if (seda_now() > rule_now.until) {
        rule_now.tripped = true;
        luaL_error(L, "admit rule ran past %s s (a rule must not wait or "
                   "loop)", RULE_LIMIT_TEXT);
    }
    if (kib > rule_now.mem0 + RULE_MEM_LIMIT / 1024) {
        rule_now.tripped = true;
        luaL_error(L, "admit rule grew the state by more than %d MiB",
                   RULE_MEM_LIMIT >> 20);
    }
}

static void bound_begin(lua_State *L, struct rule_bound *b)
{
    b->hook = lua_gethook(L);
    b->mask = lua_gethookmask(L);
    b->count = lua_gethookcount(L);
    rule_now.until = seda_now() + RULE_LIMIT_S;
    rule_now.mem0 = (size_t)lua_gc(L, LUA_GCCOUNT, 0);
    rule_now.tripped = false;
    lua_sethook(L, rule_hook, LUA_MASKCOUNT, 1000);
}

static void bound_end(lua_State *L, struct rule_bound *b)
{
    lua_sethook(L, b->hook, b->mask, b->count);
    if (rule_now.tripped)
        lua_gc(L, LUA_GCCOLLECT);       /* what a runaway rule left */
}

/* Remember in ac the rule just found for ls at version v (at the top,
 * or none) and the views (the admit table at vi). */
static void cache_put(lua_State *L, struct ladmit_cache *ac, int vi,
                      struct lstage *ls, uint64_t v, bool have)
{
    if (!ac->ready) {
        lua_rawgeti(L, vi, V_ENV);
        ac->env_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_rawgeti(L, vi, V_STAGE);
        ac->stage_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        ac->ready = true;
    }
    int i = (int)(ls->uid % LADMIT_SLOTS);
    if (ac->slot[i].uid)
        luaL_unref(L, LUA_REGISTRYINDEX, ac->slot[i].ref);
    ac->slot[i].uid = ls->uid;
    ac->slot[i].version = v;
    if (have) {
        lua_pushvalue(L, -1);
        ac->slot[i].ref = luaL_ref(L, LUA_REGISTRYINDEX);
    } else {
        ac->slot[i].ref = LUA_NOREF;
    }
}

/* What a rule's call said (rc, and its results at -2 and -1): 0 to
 * admit (*prio lowered for "low"), 1 refused with reason (an error or a
 * wrong result reported on the stage, admit_error). */
static int rule_result(lua_State *L, struct lstage *ls, int rc, int *prio,
                       char *reason, size_t rlen)
{
    int out = 0;
    if (rc != LUA_OK) {
        report(ls, "error", lua_tostring(L, -1));
        snprintf(reason, rlen, "admit_error");
        out = 1;
    } else if (lua_isnil(L, -2) || (lua_isboolean(L, -2) &&
                                     lua_toboolean(L, -2))) {
        out = 0;
    } else if (lua_isboolean(L, -2)) {
        size_t rl = 0;
        const char *r = lua_type(L, -1) == LUA_TSTRING
                            ? lua_tolstring(L, -1, &rl) : NULL;
        if (r && rl) {
            /* A NUL in the reason would cut it: write it \0. */
            size_t k = 0;
            for (size_t i = 0; i < rl && k + 3 < rlen; i++) {
                if (r[i] == '\0') {
                    reason[k++] = '\\';
                    reason[k++] = '0';
                } else {
                    reason[k++] = r[i];
                }
            }
            reason[k] = '\0';
        } else {
            snprintf(reason, rlen, "refused");
        }
        out = 1;
    } else if (lua_type(L, -2) == LUA_TSTRING &&
               strcmp(lua_tostring(L, -2), "low") == 0) {
        *prio = SEDA_PRIO_LOW;          /* a rule only lowers */
        out = 0;
    } else {
        char msg[160];
        snprintf(msg, sizeof msg, "a rule returns true, false and a "
                 "reason, or \"low\" (got %s%s%s)", luaL_typename(L, -2),
                 lua_type(L, -2) == LUA_TSTRING ? " " : "",
                 lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "");
        report(ls, "error", msg);
        snprintf(reason, rlen, "admit_error");
        out = 1;
    }
    return out;
}

int seda__l_admit(lua_State *L, struct lstage *ls, struct ladmit_cache *ac,
                  const char *to, int pidx, int hidx, const char *sender,
                  int *prio, char *reason, size_t rlen)
{
    if (!atomic_load_explicit(&ls->has_admit, memory_order_acquire))
        return 0;
    int top = lua_gettop(L);
    uint64_t v = atomic_load_explicit(&ls->admit_version,
                                      memory_order_acquire);
    int si = (int)(ls->uid % LADMIT_SLOTS);
    lua_pushcfunction(L, seda__l_worker_msghandler);  /* top + 1 */
    if (ac->ready && ac->slot[si].uid == ls->uid &&
        ac->slot[si].version == v) {
        /* The common case: three reads of the registry's array. */
        if (ac->slot[si].ref == LUA_NOREF) {
            lua_settop(L, top);
            return 0;
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, ac->slot[si].ref);
        lua_rawgeti(L, LUA_REGISTRYINDEX, ac->env_ref);
        lua_rawgeti(L, LUA_REGISTRYINDEX, ac->stage_ref);
    } else {
        bool have;
        push_views(L);                          /* top + 2 */
        if (push_rule(L, top + 2, ls, &v, &have) != 0) {
            report(ls, "error", lua_tostring(L, -1));
            lua_settop(L, top);
            seda_stage_count_refused(ls->st);
            snprintf(reason, rlen, "admit_error");
            return 1;
        }
        cache_put(L, ac, top + 2, ls, v, have);
        if (!have) {
            lua_settop(L, top);
            return 0;
        }
        lua_rawgeti(L, top + 2, V_ENV);
        lua_rawgeti(L, top + 2, V_STAGE);
        lua_remove(L, top + 2);                 /* the admit table */
    }
    /* top + 1 handler, + 2 rule, + 3 env view, + 4 stage view */
    struct admit_call *c = lua_touserdata(L, top + 3);
    if (c->active) {
        /* A rule that publishes from inside a rule of this state: a
         * nested call would share the views.  A misuse: it raises, so the
         * outer rule fails once (one admit_error, one refusal counted). */
        lua_settop(L, top);
        return luaL_error(L, "a rule may not publish into a stage that has "
                          "a rule of its own from within that rule");
    }
    lua_pushvalue(L, pidx);
    lua_setiuservalue(L, top + 3, 1);
    c->headers_set = hidx != 0;                 /* else made when asked */
    if (hidx) {
        lua_pushvalue(L, hidx);
        lua_setiuservalue(L, top + 3, 2);
    }
    c->active = true;
    c->ls = ls;
    c->to = to;
    c->sender = sender;
    c->prio = *prio;
    c->have_stats = false;
    /* On the main state nothing else bounds a rule: a count hook stops
     * one that runs past RULE_LIMIT_S or grows the state by more than
     * RULE_MEM_LIMIT (a worker's rule runs inside its handler call,
     * under handler_timeout and the state's memory_limit). */
    struct rule_bound rb;
    bool bound = seda__l_worker_of(L) == NULL;
    if (bound)
        bound_begin(L, &rb);
    rule_depth++;
    int rc = lua_pcall(L, 2, 2, top + 1);
    rule_depth--;
    if (bound)
        bound_end(L, &rb);
    c->active = false;
    int out = rule_result(L, ls, rc, prio, reason, rlen);
    lua_settop(L, top);
    if (out)
        seda_stage_count_refused(ls->st);
    return out;
}

/* ---- sources and options ---- */

void seda__l_admit_src_free(struct lsrc *s)
{
    if (!s)
        return;
    free(s->chunkname);
    free(s->path);
    free(s->code);
    free(s);
}

struct lsrc *seda__l_admit_src_copy(const struct lsrc *s, bool reread)
{
    struct lsrc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->binary = s->binary;
    c->chunkname = strdup(s->chunkname);
    c->path = s->path ? strdup(s->path) : NULL;
    if (reread && s->path) {
        c->code = seda__l_stage_read_file(s->path, &c->len);
    } else if ((c->code = malloc(s->len ? s->len : 1)) != NULL) {
        memcpy(c->code, s->code, s->len);
        c->len = s->len;
    }
    if (!c->chunkname || !c->code || (s->path && !c->path)) {
        seda__l_admit_src_free(c);
        return NULL;
    }
    return c;
}

/* Anchors a source being built, so an error frees it. */
static int src_gc(lua_State *L)
{
    struct lsrc **p = lua_touserdata(L, 1);
    seda__l_admit_src_free(*p);
    *p = NULL;
    return 0;
}

struct lsrc *seda__l_admit_src(lua_State *L, struct lbus *lb,
                               const char *stage, int idx, const char *dir)
{
    idx = lua_absindex(L, idx);
    struct lsrc **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, src_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    if (!(*box = calloc(1, sizeof **box)))
        luaL_error(L, "stage '%s': admit: out of memory", stage);
    seda__l_stage_build_src(L, stage, idx, "admit", dir ? dir : "", *box);
    char err[2048];
    if (seda__l_worker_validate_admit(lb, *box, err, sizeof err) != 0)
        luaL_error(L, "stage '%s': admit: %s", stage, err);
    struct lsrc *s = *box;
    *box = NULL;
    lua_pop(L, 1);
    return s;
}

/* A number field k of table t: 1 given (into *v), 0 absent, -1 wrong
 * (err says so). */
static int num_field(lua_State *L, int t, const char *stage,
                     const char *opt, const char *k, double *v, char *err,
                     size_t errlen)
{
    lua_getfield(L, t, k);
    int r = 0;
    if (lua_type(L, -1) == LUA_TNUMBER) {
        *v = lua_tonumber(L, -1);
        r = 1;
    } else if (!lua_isnil(L, -1)) {
        snprintf(err, errlen, "stage '%s': %s.%s must be a number (got %s)",
                 stage, opt, k, luaL_typename(L, -1));
        r = -1;
    }
    lua_pop(L, 1);
    return r;
}

/* Check that table t holds only the keys given. */
static int only_keys(lua_State *L, int t, const char *stage, const char *opt,
                     const char *const *keys, char *err, size_t errlen)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                        : NULL;
        int i = 0;
        while (k && keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!k || !keys[i]) {
            snprintf(err, errlen, "stage '%s': %s: unknown option '%s'",
                     stage, opt, k ? k : luaL_typename(L, -1));
            lua_pop(L, 1);
            return -1;
        }
    }
    return 0;
}

struct adm {
    bool shed, retry, starve;
    double target, interval;
    double backoff, max_backoff, multiplier;
    bool jitter;
    double starve_after;
};

/* Parse shed, retry and starve_after of table t (defaults in a); 0, or -1
 * with err.  Never raises on bad values. */
static int parse(lua_State *L, int t, const char *stage, struct adm *a,
                 char *err, size_t errlen)
{
    static const char *const shed_keys[] = { "target", "interval", NULL };
    static const char *const retry_keys[] = {
        "backoff", "max_backoff", "multiplier", "jitter", NULL
    };
    t = lua_absindex(L, t);
    int r = 0;
    lua_getfield(L, t, "shed");
    int o = lua_gettop(L);
    if (lua_isboolean(L, o) && !lua_toboolean(L, o)) {
        a->shed = true;                 /* shed = false: off */
        a->target = 0;
    } else if (lua_istable(L, o)) {
        a->shed = true;
        if (only_keys(L, o, stage, "shed", shed_keys, err, errlen) ||
            num_field(L, o, stage, "shed", "target", &a->target, err,
                      errlen) < 0 ||
            num_field(L, o, stage, "shed", "interval", &a->interval, err,
                      errlen) < 0)
            r = -1;
        else if (!(a->interval > 0))
            r = -1, snprintf(err, errlen, "stage '%s': shed.interval must "
                             "be a number > 0 (seconds; got %g)", stage,
                             a->interval);
        else if (!(a->target > 0))
            r = -1, snprintf(err, errlen, "stage '%s': shed.target must be "
                             "a number > 0 (seconds)", stage);
    } else if (!lua_isnil(L, o)) {
        r = -1;
        snprintf(err, errlen, "stage '%s': shed must be a table {target =, "
                 "interval =} or false (got %s)", stage,
                 luaL_typename(L, o));
    }
    lua_settop(L, o - 1);
    if (r)
        return r;
    lua_getfield(L, t, "retry");
    o = lua_gettop(L);
    if (lua_isboolean(L, o) && !lua_toboolean(L, o)) {
        a->retry = true;                /* retry = false: at once */
        a->backoff = 0;
    } else if (lua_istable(L, o)) {
        a->retry = true;
        int got = 0, gotmax = 0;
        if (only_keys(L, o, stage, "retry", retry_keys, err, errlen) ||
            (got = num_field(L, o, stage, "retry", "backoff", &a->backoff,
                             err, errlen)) < 0 ||
            (gotmax = num_field(L, o, stage, "retry", "max_backoff",
                                &a->max_backoff, err, errlen)) < 0 ||
            num_field(L, o, stage, "retry", "multiplier", &a->multiplier,
                      err, errlen) < 0) {
            r = -1;
        } else {
            if (got == 0)
                a->backoff = 0.01;      /* the documented default */
            /* An unbounded default: max_backoff follows a longer backoff. */
            if (gotmax == 0 && a->max_backoff < a->backoff)
                a->max_backoff = a->backoff;
            lua_getfield(L, o, "jitter");
            if (lua_isboolean(L, -1))
                a->jitter = lua_toboolean(L, -1);
            else if (!lua_isnil(L, -1))
                r = -1, snprintf(err, errlen, "stage '%s': retry.jitter "
                                 "must be a boolean", stage);
            lua_pop(L, 1);
            if (r == 0 && !(a->backoff > 0))
                r = -1, snprintf(err, errlen, "stage '%s': retry.backoff "
                                 "must be a number > 0 (seconds)", stage);
        }
    } else if (!lua_isnil(L, o)) {
        r = -1;
        snprintf(err, errlen, "stage '%s': retry must be a table {backoff "
                 "=, max_backoff =, multiplier =, jitter =} or false (got "
                 "%s)", stage, luaL_typename(L, o));
    }
    lua_settop(L, o - 1);
    if (r)
        return r;
    lua_getfield(L, t, "starve_after");
    if (lua_type(L, -1) == LUA_TNUMBER) {
        a->starve = true;
        a->starve_after = lua_tonumber(L, -1);
    } else if (!lua_isnil(L, -1)) {
        r = -1;
        snprintf(err, errlen, "stage '%s': starve_after must be a number "
                 "(seconds; got %s)", stage, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    return r;
}

static void defaults(struct adm *a, const seda_stage_opts *o)
{
    memset(a, 0, sizeof *a);
    a->target = o->shed_target;
    a->interval = o->shed_interval;
    a->backoff = o->retry_backoff;
    a->max_backoff = o->retry_max_backoff;
    a->multiplier = o->retry_multiplier;
    a->jitter = o->retry_jitter;
    a->starve_after = o->starve_after;
}

void seda__l_admit_opts(lua_State *L, int t, const char *stage,
                        seda_stage_opts *o)
{
    struct adm a;
    char err[256];
    defaults(&a, o);
    if (parse(L, t, stage, &a, err, sizeof err) != 0)
        luaL_error(L, "%s", err);
    o->shed_target = a.target;
    o->shed_interval = a.interval;
    o->retry_backoff = a.backoff;
    o->retry_max_backoff = a.max_backoff;
    o->retry_multiplier = a.multiplier;
    o->retry_jitter = a.jitter;
    o->starve_after = a.starve_after;
    /* The core checks the ranges (its message names the field). */
}

int seda__l_admit_tune(lua_State *L, int t, const char *stage,
                       seda_stage_t *st, char *err, size_t errlen)
{
    (void)stage;
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    struct adm a;
    defaults(&a, &o);
    if (parse(L, t, seda_stage_name(st), &a, err, errlen) != 0)
        return -1;
    o.shed_target = a.target;
    o.shed_interval = a.interval;
    o.retry_backoff = a.backoff;
    o.retry_max_backoff = a.max_backoff;
    o.retry_multiplier = a.multiplier;
    o.retry_jitter = a.jitter;
    o.starve_after = a.starve_after;
    unsigned what = (a.shed ? SEDA_TUNE_SHED : 0) |
                    (a.retry ? SEDA_TUNE_RETRY : 0) |
                    (a.starve ? SEDA_TUNE_STARVE : 0);
    if (what && seda_stage_tune_admission(st, &o, what, err, errlen) != 0)
        return -1;
    return 0;
}
