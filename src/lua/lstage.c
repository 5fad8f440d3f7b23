/* SPDX-License-Identifier: MIT */
/*
 * lstage.c -- declaring stages from Lua, and changing them while the bus
 * runs: bus:stage{...}, bus:tune(stage, {...}), bus:handler_files();
 * bus:reload([stage]) is lstage_reload.c.
 *
 * DESIGN
 *   bus:stage checks every option (an error names the stage and the
 *   field), builds each handler's source (a file's text, read here on the
 *   main thread, or an inline function's bytecode), runs it once in a
 *   scratch state like a worker's so a broken handler fails at once with
 *   file:line, and only then creates the core stage and registers one C
 *   batch consumer per handler (seda__l_batch_consume).  Typed stages get their
 *   schema compiled and installed as the stage's admission check; durable
 *   stages replay their journal after the consumers are in place.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lschema.h"
#include "lseda.h"

/* ---- stages ---- */

void seda__l_stage_src_free(struct lsrc *s, int n)
{
    for (int i = 0; s && i < n; i++) {
        free(s[i].chunkname);
        free(s[i].path);
        free(s[i].code);
    }
    free(s);
}

void seda__l_stage_free(struct lstage *ls)
{
    if (!ls)
        return;
    seda__l_stage_src_free(ls->src, ls->nsrc);
    seda__l_stage_src_free(ls->prev, ls->nsrc);
    free(ls->cons);
    free(ls->last_error);
    seda__l_admit_src_free(ls->admit);
    seda__schema_free(ls->accepts);
    pthread_mutex_destroy(&ls->mu);
    free(ls);
}

static bool file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* Read a whole file into malloc'd memory.  NULL on failure, with errno. */
char *seda__l_stage_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* The directory of the Lua chunk that called us (level 1), with a trailing
 * slash, pushed as a string ("" when unknown). */
void seda__l_stage_caller_dir(lua_State *L)
{
    lua_Debug ar;
    /* The nearest Lua function up the stack (bus:stage may be reached
     * through pcall or other C functions). */
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "S", &ar) || ar.what[0] == 'C')
            continue;
        if (ar.source[0] == '@') {
            const char *src = ar.source + 1;
            const char *slash = strrchr(src, '/');
            if (slash) {
                lua_pushlstring(L, src, (size_t)(slash - src + 1));
                return;
            }
        }
        break;
    }
    lua_pushliteral(L, "");
}

/* Resolve a handler path: relative to the declaring script's directory
 * (dir), then as given, then through package.searchpath.  Pushes the path
 * or raises naming the stage. */
static void resolve_handler(lua_State *L, const char *stage, const char *h,
                            const char *dir, const char *field)
{
    if (h[0] != '/' && dir[0]) {
        lua_pushfstring(L, "%s%s", dir, h);
        if (file_exists(lua_tostring(L, -1)))
            return;
        lua_pop(L, 1);
    }
    if (file_exists(h)) {
        lua_pushstring(L, h);
        return;
    }
    lua_getglobal(L, "package");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "searchpath");
        lua_pushstring(L, h);
        lua_getfield(L, -3, "path");
        if (lua_isfunction(L, -3) && lua_pcall(L, 2, 1, 0) == LUA_OK &&
            lua_isstring(L, -1)) {
            lua_remove(L, -2);
            return;
        }
    }
    luaL_error(L, "stage '%s': %s: cannot find handler file '%s'", stage,
               field, h);
}

/* Build the source of a handler given at stack index idx (a file name or
 * a function) into *out.  Raises naming the stage and field. */
void seda__l_stage_build_src(lua_State *L, const char *stage, int idx,
                             const char *field, const char *dir,
                             struct lsrc *out)
{
    memset(out, 0, sizeof *out);
    if (lua_type(L, idx) == LUA_TSTRING) {
        resolve_handler(L, stage, lua_tostring(L, idx), dir, field);
        const char *path = lua_tostring(L, -1);
        size_t len;
        char *code = seda__l_stage_read_file(path, &len);
        if (!code)
            luaL_error(L, "stage '%s': %s: cannot read '%s'", stage, field,
                       path);
        out->code = code;
        out->len = len;
        out->path = strdup(path);
        size_t cn = strlen(path) + 2;
        out->chunkname = malloc(cn);
        if (out->chunkname)
            snprintf(out->chunkname, cn, "@%s", path);
        lua_pop(L, 1);
    } else if (lua_type(L, idx) == LUA_TFUNCTION) {
        if (lua_iscfunction(L, idx))
            luaL_error(L, "stage '%s': %s: a C function cannot be a "
                       "handler", stage, field);
        /* Allowed upvalues: _ENV, and the seda module itself (rebound to
         * the worker's own seda table there). */
        luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
        lua_getfield(L, -1, "seda");
        lua_remove(L, -2);
        for (int i = 1;; i++) {
            const char *up = lua_getupvalue(L, idx, i);
            if (!up)
                break;
            bool is_seda = lua_rawequal(L, -1, -2);
            lua_pop(L, 1);
            if (strcmp(up, "_ENV") != 0 && !is_seda)
                luaL_error(L, "stage '%s': %s: an inline %s may not "
                           "capture upvalue '%s'; move it into a file",
                           stage, field, strcmp(field, "admit") == 0
                                         ? "rule" : "handler", up);
        }
        lua_pop(L, 1);
        lua_getglobal(L, "string");
        lua_getfield(L, -1, "dump");
        lua_pushvalue(L, idx);
        lua_call(L, 1, 1);
        size_t len;
        const char *code = lua_tolstring(L, -1, &len);
        out->code = malloc(len);
        if (out->code)
            memcpy(out->code, code, len);
        out->len = len;
        out->binary = true;
        lua_Debug ar;
        lua_pushvalue(L, idx);
        lua_getinfo(L, ">S", &ar);
        char name[300];
        snprintf(name, sizeof name, "=%s", ar.short_src);
        out->chunkname = strdup(name);
        lua_pop(L, 2);
    } else {
        luaL_error(L, "stage '%s': %s must be a file name or a function "
                   "(got %s)", stage, field, luaL_typename(L, idx));
    }
    if (!out->code || !out->chunkname)
        luaL_error(L, "stage '%s': %s: out of memory", stage, field);
}

/* The admission check of typed stages: any thread, no Lua. */
/* A typed stage's check (accepts), then a remote stage's format: a
 * payload its format cannot carry is refused at the door, naming it. */
static int check_stage(const seda_env_t *env, void *ud, char *err,
                       size_t errlen)
{
    const struct lstage *ls = ud;
    size_t len;
    const void *p = seda_env_payload(env, &len);
    int kind = seda_env_payload_kind(env);
    if (ls->accepts && seda__schema_check_bytes(ls->accepts, p, len, kind,
                                                err, errlen) != 0)
        return -1;
    void *out = NULL;
    size_t outlen;
    int rc = ls->format ? ls->format->encode(kind, p, len, &out, &outlen,
                                             err, errlen) : 0;
    free(out);
    return rc;
}

static const char *const stage_keys[] = {
    "name", "handler", "handlers", "capacity", "concurrency", "delivery",
    "policy", "max_attempts", "dead_letter", "publish_timeout",
    "handler_timeout", "pull", "ack_timeout", "accepts", "strict",
    "durable", "dedup_window", "admit", "shed", "retry", "starve_after",
    "remote", "blocking", "format", NULL
};

static int opt_int(lua_State *L, int t, const char *stage, const char *k,
                   int def)
{
    lua_getfield(L, t, k);
    int v = def;
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        /* A number only: "10" is a string here, as for every option. */
        lua_Integer i = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint)
            luaL_error(L, "stage '%s': %s must be an integer (got %s)",
                       stage, k, lua_type(L, -1) == LUA_TNUMBER
                                     ? lua_tostring(L, -1)
                                     : luaL_typename(L, -1));
        if (i <= 0)
            luaL_error(L, "stage '%s': %s must be > 0 (got %I)", stage, k,
                       i);
        if (i > 1 << 30)
            luaL_error(L, "stage '%s': %s is too large", stage, k);
        v = (int)i;
    }
    lua_pop(L, 1);
    return v;
}

static double opt_num(lua_State *L, int t, const char *stage, const char *k,
                      double def)
{
    lua_getfield(L, t, k);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "stage '%s': %s must be a number (got %s)", stage,
                       k, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
        if (!(v >= 0))
            luaL_error(L, "stage '%s': %s must be >= 0", stage, k);
    }
    lua_pop(L, 1);
    return v;
}

/* Protected: the srcs userdata holds the sources until they are handed to
 * the stage, so an error while building them frees what was built. */
static int srcs_gc(lua_State *L)
{
    struct lstage **pls = lua_touserdata(L, 1);
    seda__l_stage_free(*pls);
    *pls = NULL;
    return 0;
}

/* The stage's name (pushed: index 3), checked, with the option keys;
 * raises when it is missing, malformed or taken. */
static const char *stage_name(lua_State *L, struct lbus *lb)
{
    lua_getfield(L, 2, "name");
    if (lua_isnil(L, -1))
        luaL_error(L, "stage: name is required");
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "stage: name must be a string");
    size_t len;
    const char *name = lua_tolstring(L, -1, &len);  /* 3 */
    if (strlen(name) != len)
        luaL_error(L, "stage '%s\\0...': name must be 1-%d characters of "
                   "[A-Za-z0-9_.:-] (it holds a NUL)", name, SEDA_NAME_MAX);
    if (!seda__l_valid_name(name))
        luaL_error(L, "stage '%s': name must be 1-%d characters of "
                   "[A-Za-z0-9_.:-]", name, SEDA_NAME_MAX);
    seda__l_check_keys(L, 2, stage_keys,
                       lua_pushfstring(L, "stage '%s'", name));
    lua_pop(L, 1);
    if (seda_bus_stage(lb->bus, name))
        luaL_error(L, "stage '%s': name: a stage of that name already "
                   "exists", name);
    return name;
}

/* The durable option into o->durable; raises on a bad value. */
static void opt_durable(lua_State *L, const char *name, seda_stage_opts *o)
{
    lua_getfield(L, 2, "durable");
    if (!lua_isnil(L, -1)) {
        const char *d = lua_tostring(L, -1);
        if (lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1))
            o->durable = SEDA_AT_LEAST_ONCE;
        else if (lua_type(L, -1) == LUA_TSTRING &&
                 strcmp(d, "at_least_once") == 0)
            o->durable = SEDA_AT_LEAST_ONCE;
        else if (lua_type(L, -1) == LUA_TSTRING &&
                 strcmp(d, "exactly_once") == 0)
            o->durable = SEDA_EXACTLY_ONCE;
        else if (!(lua_type(L, -1) == LUA_TBOOLEAN))
            luaL_error(L, "stage '%s': durable must be \"at_least_once\" "
                       "or \"exactly_once\" (got %s)", name,
                       d ? d : luaL_typename(L, -1));
    }
    lua_pop(L, 1);
}

/* The stage's own options (sizes, timeouts, durability, pull, policy,
 * delivery, dead letters, admission) into o, which was initialised and
 * named.  Pushes policy, delivery and dead_letter (indices 4, 5, 6: the
 * strings o points to stay on the stack).  Raises naming the field. */
static void stage_opts(lua_State *L, const char *name, seda_stage_opts *o)
{
    o->capacity = opt_int(L, 2, name, "capacity", o->capacity);
    o->concurrency = opt_int(L, 2, name, "concurrency", o->concurrency);
    o->max_attempts = opt_int(L, 2, name, "max_attempts", o->max_attempts);
    o->publish_timeout = opt_num(L, 2, name, "publish_timeout",
                                 o->publish_timeout);
    o->handler_timeout = opt_num(L, 2, name, "handler_timeout",
                                 o->handler_timeout);
    o->ack_timeout = opt_num(L, 2, name, "ack_timeout", o->ack_timeout);
    if (!(o->ack_timeout > 0))
        luaL_error(L, "stage '%s': ack_timeout must be > 0", name);
    opt_durable(L, name, o);
    o->dedup_window = opt_int(L, 2, name, "dedup_window", o->dedup_window);
    lua_getfield(L, 2, "pull");
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1))
            luaL_error(L, "stage '%s': pull must be a boolean", name);
        o->pull = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    lua_getfield(L, 2, "policy");                   /* 4 */
    if (!lua_isnil(L, -1)) {
        const char *p = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING || seda_policy_parse(p) < 0)
            luaL_error(L, "stage '%s': policy must be one of block, reject, "
                       "drop_newest, drop_oldest (got %s)", name,
                       p ? p : luaL_typename(L, -1));
        o->policy = seda_policy_parse(p);
    }
    lua_getfield(L, 2, "delivery");                 /* 5 */
    if (!lua_isnil(L, -1)) {
        const char *d = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING || seda_delivery_parse(d) < 0)
            luaL_error(L, "stage '%s': delivery must be p2p or pubsub "
                       "(got %s)", name, d ? d : luaL_typename(L, -1));
        o->delivery = seda_delivery_parse(d);
    }
    lua_getfield(L, 2, "dead_letter");              /* 6 */
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING ||
            !seda__l_valid_name(lua_tostring(L, -1)))
            luaL_error(L, "stage '%s': dead_letter must be a stage name",
                       name);
        o->dead_letter = lua_tostring(L, -1);
    }

    /* Shedding, retry backoff, starve_after (checked here, set by
     * seda_stage_add). */
    seda__l_admit_opts(L, 2, name, o);
}

/* How many handlers the stage has: pushes handler and handlers (indices
 * 7, 8) and checks that at most one is given, that handlers is an array
 * of at most SEDA_MAX_CONSUMERS and that a pull stage has none. */
static int stage_handler_count(lua_State *L, const char *name, bool pull)
{
    lua_getfield(L, 2, "handler");                  /* 7 */
    lua_getfield(L, 2, "handlers");                 /* 8 */
    if (!lua_isnil(L, 7) && !lua_isnil(L, 8))
        luaL_error(L, "stage '%s': give handler or handlers, not both",
                   name);
    int n = 0;
    if (!lua_isnil(L, 8)) {
        if (!lua_istable(L, 8))
            luaL_error(L, "stage '%s': handlers must be an array", name);
        n = (int)lua_rawlen(L, 8);
        /* Every key 1..n: a key past the border ({a = f}, or a hole)
         * would be a consumer silently not made. */
        lua_pushnil(L);
        while (lua_next(L, 8)) {
            lua_Integer k = lua_isinteger(L, -2) ? lua_tointeger(L, -2) : 0;
            if (k < 1 || k > n) {
                lua_pop(L, 1);
                luaL_error(L, "stage '%s': handlers must be an array "
                           "(found key %s)", name,
                           luaL_tolstring(L, -1, NULL));
            }
            lua_pop(L, 1);
        }
        if (n > SEDA_MAX_CONSUMERS)
            luaL_error(L, "stage '%s': handlers: at most %d", name,
                       SEDA_MAX_CONSUMERS);
    } else if (!lua_isnil(L, 7)) {
        n = 1;
    }
    if (pull && n > 0)
        luaL_error(L, "stage '%s': handler: a pull stage has no handlers "
                   "(use bus:receive)", name);
    return n;
}

/* A new struct lstage for n handlers, held by a userdata pushed at index
 * 10 (its __gc frees it unless the caller takes it: *box = NULL).
 * Raises when out of memory. */
static struct lstage *stage_new(lua_State *L, struct lbus *lb,
                                const char *name, int n,
                                struct lstage ***box)
{
    struct lstage **pls = lua_newuserdatauv(L, sizeof *pls, 0); /* 10 */
    *pls = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, srcs_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, 10);
    *box = pls;
    struct lstage *ls = calloc(1, sizeof *ls);
    if (!ls)
        luaL_error(L, "stage '%s': out of memory", name);
    pthread_mutex_init(&ls->mu, NULL);
    *pls = ls;
    ls->lb = lb;
    /* relaxed: a counter; the uid is published with ls itself. */
    static atomic_uint_fast64_t next_uid = 1;
    ls->uid = atomic_fetch_add_explicit(&next_uid, 1, memory_order_relaxed);
    ls->nsrc = n;
    atomic_init(&ls->gen, 1);
    ls->version = 1;
    ls->max_version = 1;
    ls->src = calloc((size_t)(n ? n : 1), sizeof *ls->src);
    ls->cons = calloc((size_t)(n ? n : 1), sizeof *ls->cons);
    if (!ls->src || !ls->cons)
        luaL_error(L, "stage '%s': out of memory", name);
    atomic_init(&ls->has_admit, false);
    atomic_init(&ls->admit_version, 1);
    return ls;
}

/* The typed-stage options (accepts, strict) compiled into ls->accepts;
 * raises naming the stage. */
static void stage_accepts(lua_State *L, struct lstage *ls, const char *name)
{
    lua_getfield(L, 2, "strict");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        luaL_error(L, "stage '%s': strict must be a boolean", name);
    bool strict = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 2, "accepts");
    if (!lua_isnil(L, -1)) {
        char serr[256];
        ls->accepts = seda__schema_compile(L, lua_gettop(L), strict, serr,
                                           sizeof serr);
        if (!ls->accepts)
            luaL_error(L, "stage '%s': %s", name, serr);
    } else if (strict) {
        luaL_error(L, "stage '%s': strict needs accepts", name);
    }
    lua_pop(L, 1);
}

/* Build every handler's source (handler at 7 or handlers at 8, files
 * resolved against the directory at 9) and validate each in scratch
 * states, before the stage exists: a broken handler leaves nothing
 * behind.  Raises naming the stage and field. */
static void stage_handlers(lua_State *L, struct lbus *lb, struct lstage *ls,
                           const char *name)
{
    for (int i = 0; i < ls->nsrc; i++) {
        char field[32];
        if (lua_isnil(L, 8)) {
            snprintf(field, sizeof field, "handler");
            lua_pushvalue(L, 7);
        } else {
            snprintf(field, sizeof field, "handlers[%d]", i + 1);
            lua_rawgeti(L, 8, i + 1);
        }
        seda__l_stage_build_src(L, name, lua_gettop(L), field,
                                lua_tostring(L, 9), &ls->src[i]);
        lua_pop(L, 1);
        char err[2048];
        if (seda__l_worker_validate(lb, &ls->src[i], err, sizeof err) != 0)
            luaL_error(L, "stage '%s': %s: %s", name, field, err);
    }
}

/* Add ls to lb's stages (under lb->mu).  Returns false when out of
 * memory (nothing changed). */
static bool stage_store(struct lbus *lb, struct lstage *ls)
{
    pthread_mutex_lock(&lb->mu);
    if (lb->nstages == lb->cap_stages) {
        int cap = lb->cap_stages ? lb->cap_stages * 2 : 8;
        struct lstage **a = realloc(lb->stages, sizeof *a * (size_t)cap);
        if (a) {
            lb->stages = a;
            lb->cap_stages = cap;
        }
    }
    bool stored = lb->nstages < lb->cap_stages;
    if (stored)
        lb->stages[lb->nstages++] = ls;
    pthread_mutex_unlock(&lb->mu);
    return stored;
}

/* The stage st was made for ls: its consumers (one per handler), a
 * remote stage's consuming, and a durable stage's replay (now, if the
 * bus has started; else with bus:start).  Raises when the replay
 * fails. */
static void stage_start(lua_State *L, struct lstage *ls, bool remote,
                        bool durable)
{
    for (int i = 0; i < ls->nsrc; i++) {
        ls->cons[i] = (struct lconsumer){ ls, i };
        seda_stage_consume_batch(ls->st, seda__l_batch_consume, &ls->cons[i]);
    }
    if (remote && ls->nsrc > 0)
        seda_remote_consume(ls->st);    /* else this process publishes */
    if (durable) {
        /* Before the bus starts, the replay waits (the stages its
         * envelopes go to may be declared next); after, it runs now. */
        ls->replay_pending = true;
        if (ls->lb->start == START_DONE) {
            char rerr[256];
            if (seda__l_stage_replay(ls, rerr, sizeof rerr) != 0)
                luaL_error(L, "%s", rerr);
        }
    }
}

/* bus:stage(opts): declare a stage.  Every option is checked and every
 * handler built and validated before the stage is added, so a raise
 * leaves nothing behind (the lstage is freed by its box's __gc). */
int seda__l_stage_declare(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    struct lbus *lb = u->lb;
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);

    const char *name = stage_name(L, lb);           /* 3 */
    seda_stage_opts o;
    seda_stage_opts_init(&o);
    o.name = name;
    stage_opts(L, name, &o);                        /* 4, 5, 6 */
    int n = stage_handler_count(L, name, o.pull);   /* 7, 8 */
    seda__l_stage_caller_dir(L);                    /* 9 */
    struct lstage **pls;
    struct lstage *ls = stage_new(L, lb, name, n, &pls);   /* 10 */
    stage_accepts(L, ls, name);
    lua_getfield(L, 2, "blocking");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        luaL_error(L, "stage '%s': blocking must be a boolean", name);
    ls->blocking = lua_toboolean(L, -1);
    lua_pop(L, 1);
    stage_handlers(L, lb, ls, name);
    lua_getfield(L, 2, "admit");
    if (!lua_isnil(L, -1))
        ls->admit = seda__l_admit_src(L, lb, name, lua_gettop(L),
                                      lua_tostring(L, 9));
    lua_pop(L, 1);

    /* A remote stage: backed by a JetStream stream (lremote.c). */
    seda_remote_opts ro;
    lua_getfield(L, 2, "remote");
    bool remote = !lua_isnil(L, -1);
    if (remote) {
        seda__l_remote_opts(L, lua_gettop(L), name, &ro);
        ro.consume = n > 0;             /* with handlers it consumes */
        /* The table (and the urls array seda__l_remote_opts left above
         * it) stay on the stack until this function returns. */
    } else {
        lua_pop(L, 1);
    }
    ls->format = seda__l_remote_format(L, 2, name, remote);
    if (remote) {
        ro.format = ls->format;
        ro.readers = seda__l_format_readers();
    }

    char err[640];
    seda_stage_t *st;
    int rc = remote ? seda_remote_stage_add(lb->bus, &o, &ro, &st, err,
                                            sizeof err)
                    : seda_stage_add(lb->bus, &o, &st, err, sizeof err);
    if (rc)
        return luaL_error(L, "%s", err);
    atomic_store_explicit(&ls->has_admit, ls->admit != NULL,
                          memory_order_release);
    *pls = NULL;                        /* owned by the lbus from here */
    ls->st = st;
    ls->index = seda_bus_stage_count(lb->bus) - 1;
    seda_stage_set_userdata(st, ls);
    if (ls->accepts || ls->format)
        seda_stage_set_check(st, check_stage, ls);
    if (!stage_store(lb, ls))
        return luaL_error(L, "stage '%s': out of memory", name);
    stage_start(L, ls, remote, o.durable != 0);
    lua_pushstring(L, name);
    return 1;
}

/* ---- the bus's stages ---- */

struct lstage *seda__l_stage_nth(struct lbus *lb, int i)
{
    pthread_mutex_lock(&lb->mu);
    struct lstage *ls = i < lb->nstages ? lb->stages[i] : NULL;
    pthread_mutex_unlock(&lb->mu);
    return ls;
}

/* ---- starting: the replay of durable stages ---- */

int seda__l_stage_replay(struct lstage *ls, char *err, size_t errlen)
{
    if (!ls->replay_pending)
        return 0;
    ls->replay_pending = false;
    int r = seda_stage_replay(ls->st);
    if (r >= 0)
        return 0;
    snprintf(err, errlen, "stage '%s': durable: replay failed (%s); its "
             "journal rows stay for the next run", seda_stage_name(ls->st),
             seda_strerror(r));
    return -1;
}

/* A journal row for a stage this bus does not declare waits: say so. */
static void orphan_said(const char *stage, long long rows, void *ud)
{
    (void)ud;
    char line[256];
    snprintf(line, sizeof line, "the journal holds %lld envelope%s for this "
             "stage, which this bus does not declare: they wait until a "
             "bus declares it (seda-lua dlq lists them)", rows,
             rows == 1 ? "" : "s");
    seda_log_write(SEDA_LOG_WARN, stage, line);
}

int seda__l_stage_start_all(struct lbus *lb, char *err, size_t errlen)
{
    if (lb->start != START_NOT_YET || !lb->bus)
        return 0;
    lb->start = START_DONE;
    int rc = 0;
    struct lstage *ls;
    for (int i = 0; (ls = seda__l_stage_nth(lb, i)) != NULL; i++) {
        char e[256];
        if (seda__l_stage_replay(ls, e, sizeof e) != 0 && rc == 0) {
            snprintf(err, errlen, "%s", e);
            rc = -1;
        }
    }
    seda_bus_journal_orphans(lb->bus, orphan_said, NULL);
    return rc;
}

void seda__l_stage_autostart(lua_State *L, struct lbus *lb)
{
    if (lb->start != START_NOT_YET)
        return;
    char err[256];
    if (seda__l_stage_start_all(lb, err, sizeof err) != 0)
        luaL_error(L, "%s", err);
}

/* bus:start() -> true: replay the durable stages declared so far now,
 * rather than when the script's main chunk has run (or at the first
 * publish, receive, wait or poll).  Raises if a replay failed. */
int seda__l_stage_start_method(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    if (u->lb->start == START_HELD)
        return luaL_error(L, "start: the bus is held (its program failed "
                          "before it started)");
    seda__l_stage_autostart(L, u->lb);
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- changing a stage: tune, and what its handlers are ---- */

static const char *const tune_keys[] = {
    "capacity", "concurrency", "policy", "shed", "retry", "starve_after",
    "admit", NULL
};

/* bus:tune(stage, {capacity=, concurrency=, policy=}) -> true; misuse
 * raises naming the stage and field. */
int seda__l_stage_tune(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    const char *name = luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    seda_stage_t *st = seda_bus_stage(u->lb->bus, name);
    if (!st)
        return luaL_error(L, "tune: no such stage '%s'", name);
    seda__l_check_keys(L, 3, tune_keys, "tune");
    int cap = opt_int(L, 3, name, "capacity", 0);
    int conc = opt_int(L, 3, name, "concurrency", 0);
    int pol = -1;
    lua_getfield(L, 3, "policy");
    if (!lua_isnil(L, -1)) {
        const char *p = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING || seda_policy_parse(p) < 0)
            return luaL_error(L, "stage '%s': policy must be one of block, "
                              "reject, drop_newest, drop_oldest (got %s)",
                              name, p ? p : luaL_typename(L, -1));
        pol = seda_policy_parse(p);
    }
    char err[256];
    /* Check everything before changing anything. */
    struct lsrc *admit = NULL;
    bool set_admit = false;
    lua_getfield(L, 3, "admit");
    if (!lua_isnil(L, -1)) {
        set_admit = true;
        if (!(lua_isboolean(L, -1) && !lua_toboolean(L, -1))) {
            seda__l_stage_caller_dir(L);
            admit = seda__l_admit_src(L, u->lb, name, lua_gettop(L) - 1,
                                      lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    /* admit is not anchored: nothing below may raise before it is
     * installed or freed. */
    if (seda__l_admit_tune(L, 3, name, st, err, sizeof err) != 0 ||
        seda_stage_tune(st, cap, conc, pol, err, sizeof err) != 0) {
        seda__l_admit_src_free(admit);
        return luaL_error(L, "%s", err);
    }
    if (set_admit) {
        struct lstage *ls = seda_stage_userdata(st);
        pthread_mutex_lock(&ls->mu);
        struct lsrc *old = ls->admit;
        ls->admit = admit;
        atomic_store_explicit(&ls->has_admit, admit != NULL,
                              memory_order_release);
        /* Release: pairs with the acquire in ladmit.c's push_rule. */
        atomic_fetch_add_explicit(&ls->admit_version, 1,
                                  memory_order_release);
        pthread_mutex_unlock(&ls->mu);
        seda__l_admit_src_free(old);
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* bus:handler_files() -> { stage = { path, ... } } (files only). */
int seda__l_stage_handler_files(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    struct lbus *lb = u->lb;
    lua_newtable(L);
    struct lstage *ls;
    for (int i = 0; (ls = seda__l_stage_nth(lb, i)) != NULL; i++) {
        lua_newtable(L);
        int k = 0;
        for (int j = 0; j < ls->nsrc; j++) {
            /* A worker may replace src too (taking every worker back to
             * the code before a reload): copy the path under ls->mu, push
             * it without (pushing may raise). */
            char path[PATH_MAX + 1];
            pthread_mutex_lock(&ls->mu);
            bool has = ls->src[j].path != NULL;
            if (has)
                snprintf(path, sizeof path, "%s", ls->src[j].path);
            pthread_mutex_unlock(&ls->mu);
            if (has) {
                lua_pushstring(L, path);
                lua_rawseti(L, -2, ++k);
            }
        }
        if (ls->admit && ls->admit->path) {     /* reloaded with them */
            lua_pushstring(L, ls->admit->path);
            lua_rawseti(L, -2, ++k);
        }
        lua_setfield(L, -2, seda_stage_name(ls->st));
    }
    return 1;
}
