/* SPDX-License-Identifier: MIT */
/*
 * lworker.c -- one lua_State per pool worker: building it, its
 * allocator, and loading (and reloading) handler code into it.  Running
 * the handlers is lbatch.c's; the envelope they see, lenv.c's.
 *
 * DESIGN
 *   The bus is created with seda__l_worker_start/stop as its worker hooks, so
 *   every pool thread builds its own state (standard libraries, the
 *   worker-side `seda` global, the script's package.path) before it takes
 *   work, and closes it as it exits.  A state is only ever touched by its
 *   own thread; Lua is entered only through lua_pcall with a traceback
 *   message handler.
 *
 *   A stage's handler code lives in its struct lstage as text (a file's
 *   contents, read on the main thread) or bytecode (an inline function).
 *   A worker loads it the first time it drains the stage and keeps the
 *   handler function in its registry.  Reload replaces the text and bumps
 *   the stage's code generation; a worker notices the new generation
 *   before its next envelope and swaps, so a call already running finishes
 *   on the old code and nothing is handled twice.  A worker that cannot
 *   load the new code keeps its old handlers and reports back
 *   (seda__l_stage_load_failed), which takes every worker back to the
 *   code before: a reload is taken by all workers or by none.
 *
 *   What the per-envelope path needs sits at fixed stack slots for the
 *   state's whole life (lworker.h): the message handler, the first call
 *   context's userdata and the coroutine batches run in; the envelope's
 *   field names are interned once (lenv.c compares keys by address).
 *
 *   Each state allocates through a counting allocator that refuses past
 *   the bus's memory_limit, which surfaces as a Lua memory error (a
 *   nack), never an abort.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "lio.h"
#include "lworker.h"
#include "seda_lua.h"

/* ---- allocator ---- */

/* The size class of an n-byte block, or -1 when it is not small. */
static inline int small_class(size_t n)
{
    return n > 0 && n <= SMALL_MAX ? (int)((n - 1) >> 4) : -1;
}

static void small_release(struct lworker *w, void *p, int c)
{
    if (c >= 0 && w->nsmall[c] < SMALL_KEEP) {
        struct small_block *b = p;
        b->next = w->small[c];
        w->small[c] = b;
        w->nsmall[c]++;
    } else {
        free(p);
    }
}

static void small_free_all(struct lworker *w)
{
    for (int c = 0; c < SMALL_CLASSES; c++) {
        while (w->small[c]) {
            struct small_block *b = w->small[c];
            w->small[c] = b->next;
            free(b);
        }
        w->nsmall[c] = 0;
    }
}

/* Everything but the two common cases below: resizes, big blocks, and
 * a size class whose list is empty (or full). */
static __attribute__((noinline)) void *l_alloc_slow(struct lworker *w,
                                                    void *ptr, size_t osize,
                                                    size_t nsize)
{
    if (ptr == NULL)
        osize = 0;                      /* it holds a type tag then */
    int oc = small_class(osize);
    if (nsize == 0) {
        if (ptr)
            small_release(w, ptr, oc);
        w->mem_used -= osize;
        return NULL;
    }
    if (w->mem_limit && nsize > osize &&
        w->mem_used + (nsize - osize) > w->mem_limit)
        return NULL;
    int nc = small_class(nsize);
    void *p;
    if (ptr && nc >= 0 && (oc == nc || nsize <= osize)) {
        /* The block has room already (a block in a class's list may be
         * bigger than the class: this one will be, once freed).  Lua
         * also counts on a shrink never failing. */
        p = ptr;
    } else if (nc >= 0 || oc >= 0) {
        /* Into or out of a size class: a new block, then copy. */
        if (nc >= 0 && w->small[nc]) {
            p = w->small[nc];
            w->small[nc] = w->small[nc]->next;
            w->nsmall[nc]--;
        } else {
            p = malloc(nc >= 0 ? (size_t)(nc + 1) * 16 : nsize);
            if (!p)
                return NULL;
        }
        if (ptr) {
            memcpy(p, ptr, osize < nsize ? osize : nsize);
            small_release(w, ptr, oc);
        }
    } else {
        p = realloc(ptr, nsize);
        if (!p)
            return NULL;
    }
    w->mem_used += nsize - osize;
    return p;
}

/* The state's lua_Alloc.  A new small block from its class's list and a
 * small block freed onto it are the cases that matter (a payload string,
 * a decoded table, per envelope): they are inline, with nothing to save
 * and no call into the general allocator. */
static void *l_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct lworker *w = ud;
    if (ptr == NULL) {
        if (nsize - 1 < SMALL_MAX) {
            struct small_block **head = &w->small[(nsize - 1) >> 4];
            struct small_block *b = *head;
            if (b && (!w->mem_limit || w->mem_used + nsize <= w->mem_limit)) {
                *head = b->next;
                w->nsmall[(nsize - 1) >> 4]--;
                w->mem_used += nsize;
                return b;
            }
        }
    } else if (nsize == 0 && osize - 1 < SMALL_MAX &&
               w->nsmall[(osize - 1) >> 4] < SMALL_KEEP) {
        struct small_block *b = ptr;
        b->next = w->small[(osize - 1) >> 4];
        w->small[(osize - 1) >> 4] = b;
        w->nsmall[(osize - 1) >> 4]++;
        w->mem_used -= osize;
        return NULL;
    }
    return l_alloc_slow(w, ptr, osize, nsize);
}

/* ---- embedder modules ---- */

#define MAX_PRELOAD 32

/* Written by seda_lua_preload before any bus exists (documented as not
 * thread-safe with bus creation), then only read by worker threads, which
 * pthread_create orders after those writes. */
static struct {
    char name[64];
    lua_CFunction open;
} g_preload[MAX_PRELOAD];
static int g_npreload;

int seda_lua_preload(const char *name, lua_CFunction open)
{
    if (!name || !*name || strlen(name) >= sizeof g_preload[0].name ||
        !open)
        return SEDA_EINVAL;
    for (int i = 0; i < g_npreload; i++)
        if (strcmp(g_preload[i].name, name) == 0) {
            g_preload[i].open = open;
            return 0;
        }
    if (g_npreload == MAX_PRELOAD)
        return SEDA_ERANGE;
    snprintf(g_preload[g_npreload].name, sizeof g_preload[0].name, "%s",
             name);
    g_preload[g_npreload].open = open;
    g_npreload++;
    return 0;
}

/* ---- the worker-side seda module ---- */


static int w_publish(lua_State *L)
{
    struct lworker *w = worker_of(L);
    return seda__l_publish(L, w->lb, 1, &w->wb, &w->ac, false);
}

static int w_receive(lua_State *L)
{
    struct lworker *w = worker_of(L);
    return seda__l_pull_receive(L, w->lb, 1, &w->wb, 0);
}

static int w_stats(lua_State *L)
{
    struct lworker *w = worker_of(L);
    return seda__l_stats_push(L, w->lb, luaL_optstring(L, 1, NULL));
}

/* seda.timer / seda.every in a handler: timers belong to the main
 * state (their callbacks run there, like on_complete). */
static int w_timer(lua_State *L)
{
    return luaL_error(L, "seda.timer/seda.every: timers run on the main "
                      "state (the script, the REPL), not in a handler");
}

static int w_now(lua_State *L)
{
    lua_pushnumber(L, seda_now());
    return 1;
}

int seda__l_worker_msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") &&
            lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)",
                              luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    /* A handler's traceback ends in the batch trampoline, a C function
     * (lbatch.c) that says nothing to its reader. */
    size_t len;
    const char *tb = lua_tolstring(L, -1, &len);
    static const char tail[] = "\n\t[C]: in ?";
    if (len >= sizeof tail - 1 &&
        memcmp(tb + len - (sizeof tail - 1), tail, sizeof tail - 1) == 0)
        lua_pushlstring(L, tb, len - (sizeof tail - 1));
    return 1;
}

/* The registry key (its address) of the set of modules a worker state
 * starts with. */
static const char g_base_modules;

/* The registry key of a worker state's struct lworker (a light
 * userdata): what tells a worker's state from the main state. */
static const char g_worker_key;

const char *seda__l_log_stage(lua_State *L)
{
    struct lworker *w = seda__l_worker_of(L);
    return w && w->bls ? seda_stage_name(w->bls->st) : NULL;
}

struct lworker *seda__l_worker_of(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &g_worker_key);
    struct lworker *w = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return w;
}

/* Build the state; the caller checks for NULL.  Runs the setup under
 * lua_pcall so an allocation failure is an error, not an abort. */
static int setup(lua_State *L)
{
    struct lworker *w = lua_touserdata(L, 1);
    lua_settop(L, 0);
    luaL_openlibs(L);

    /* package.path / cpath as the main state had them. */
    lua_getglobal(L, "package");
    if (w->lb->package_path) {
        lua_pushstring(L, w->lb->package_path);
        lua_setfield(L, -2, "path");
    }
    if (w->lb->package_cpath) {
        lua_pushstring(L, w->lb->package_cpath);
        lua_setfield(L, -2, "cpath");
    }
    lua_pop(L, 1);

    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    for (int i = 0; i < g_npreload; i++) {
        lua_pushcfunction(L, g_preload[i].open);
        lua_setfield(L, -2, g_preload[i].name);
    }
    lua_pop(L, 1);

    lua_createtable(L, 0, 8);
    lua_pushcfunction(L, w_publish);
    lua_setfield(L, -2, "publish");
    lua_pushcfunction(L, w_stats);
    lua_setfield(L, -2, "stats");
    lua_pushcfunction(L, w_receive);
    lua_setfield(L, -2, "receive");
    lua_pushcfunction(L, w_now);
    lua_setfield(L, -2, "now");
    lua_pushcfunction(L, seda__l_errors_log);
    lua_setfield(L, -2, "log");
    lua_pushcfunction(L, w_timer);
    lua_setfield(L, -2, "timer");
    lua_pushcfunction(L, w_timer);
    lua_setfield(L, -2, "every");
    lua_pushinteger(L, w->index);
    lua_setfield(L, -2, "worker");
    lua_pushlightuserdata(L, NULL);     /* seda.null, equal to cjson.null */
    lua_setfield(L, -2, "null");
    seda__l_shared_push(L);
    lua_setfield(L, -2, "shared");
    seda__l_io_register(L);     /* sleep, http, socket (lio.c) */
    lua_pushvalue(L, -1);
    lua_setglobal(L, "seda");
    /* require "seda" inside a handler gives the same table. */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "seda");
    /* What package.loaded holds before any handler code runs: a reload
     * forgets every other module (see forget_modules). */
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushboolean(L, 1);
        lua_rawset(L, -4);
    }
    lua_rawsetp(L, LUA_REGISTRYINDEX, &g_base_modules);
    lua_settop(L, 0);
    lua_pushlightuserdata(L, w);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &g_worker_key);

    lua_pushcfunction(L, seda__l_worker_msghandler);  /* SLOT_MSGH */
    /* The first call's context (lenv.c), also anchored by its ref. */
    struct lenv *le = lua_newuserdatauv(L, sizeof *le, 2);  /* SLOT_ENV */
    memset(le, 0, sizeof *le);
    lua_pushvalue(L, -1);
    le->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    worker_of(L)->le = le;

    /* The envelope metatable, for every light userdata (see lenv.c). */
    seda__l_env_metatable(L);
    seda__l_env_keys(L, w);
    lua_pushnil(L);                                 /* SLOT_CO */
    return SLOT_CO;
}

/* A bare worker: its state allocates through l_alloc and its extra space
 * points back at w.  Nothing is loaded yet and the collector is still
 * incremental.  Returns NULL when out of memory. */
static struct lworker *worker_alloc(struct lbus *lb, int index)
{
    struct lworker *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->lb = lb;
    w->index = index;
    w->L = lua_newstate(l_alloc, w);
    if (!w->L) {
        free(w);
        return NULL;
    }
    seda__l_suspend_init(w);
    *(struct lworker **)lua_getextraspace(w->L) = w;
    return w;
}

/* ---- the bus's list of worker states (for stats) ---- */

/* Add w to lb's list, if there is room to (a figure missing from stats
 * is the only cost of running out of memory here).  Takes lb->mu. */
static void worker_register(struct lbus *lb, struct lworker *w)
{
    pthread_mutex_lock(&lb->mu);
    if (lb->nworkers == lb->cap_workers) {
        int nc = lb->cap_workers ? lb->cap_workers * 2 : 8;
        struct lworker **a = realloc(lb->workers, sizeof *a * (size_t)nc);
        if (a) {
            lb->workers = a;
            lb->cap_workers = nc;
        }
    }
    if (lb->nworkers < lb->cap_workers)
        lb->workers[lb->nworkers++] = w;
    pthread_mutex_unlock(&lb->mu);
}

static void worker_unregister(struct lbus *lb, struct lworker *w)
{
    pthread_mutex_lock(&lb->mu);
    for (int i = 0; i < lb->nworkers; i++) {
        if (lb->workers[i] == w) {
            lb->workers[i] = lb->workers[--lb->nworkers];
            break;
        }
    }
    pthread_mutex_unlock(&lb->mu);
}

int seda__l_worker_memory(struct lbus *lb, size_t *bytes, int *index, int max)
{
    int n = 0;
    pthread_mutex_lock(&lb->mu);
    int total = lb->nworkers;
    for (int i = 0; i < lb->nworkers && n < max; i++, n++) {
        index[n] = lb->workers[i]->index;
        bytes[n] = atomic_load_explicit(&lb->workers[i]->mem_seen,
                                        memory_order_relaxed);
    }
    pthread_mutex_unlock(&lb->mu);
    if (total > max)
        return total;       /* the caller asks again with more room */
    /* In index order (a few dozen at most: insertion sort). */
    for (int i = 1; i < n; i++) {
        for (int k = i; k > 0 && index[k] < index[k - 1]; k--) {
            int ti = index[k];
            index[k] = index[k - 1];
            index[k - 1] = ti;
            size_t tb = bytes[k];
            bytes[k] = bytes[k - 1];
            bytes[k - 1] = tb;
        }
    }
    return n;
}

/* A worker state (scratch: a validation state made as worker index's is,
 * not listed in the bus's stats). */
static struct lworker *worker_new(struct lbus *lb, int index, bool scratch)
{
    struct lworker *w = worker_alloc(lb, index);
    if (!w)
        return NULL;
    lua_pushcfunction(w->L, setup);
    lua_pushlightuserdata(w->L, w);
    if (lua_pcall(w->L, 1, SLOT_CO, 0) != LUA_OK) {
        char m[512];
        snprintf(m, sizeof m, "worker %d: cannot set up its Lua state: %s",
                 index, lua_tostring(w->L, -1));
        seda_log_write(SEDA_LOG_ERROR, NULL, m);
        lua_close(w->L);
        seda__l_suspend_free(w);
        small_free_all(w);
        free(w);
        return NULL;
    }
    /* Generational collection: most of what handlers allocate (payload
     * strings and tables) dies within one call, which a young collection
     * reclaims without walking the handlers' long-lived state. */
    lua_gc(w->L, LUA_GCGEN, 0, 0);
    /* The limit applies from here on: setup is the runtime's own cost. */
    w->mem_limit = lb->memory_limit;
    /* Encoding a payload counts against the state's memory too (the
     * buffer is the state's own), and stops at max_payload. */
    w->wb.alloc = l_alloc;
    w->wb.alloc_ud = w;
    w->wb.limit = lb->max_payload;
    atomic_store_explicit(&w->mem_seen, w->mem_used, memory_order_relaxed);
    if (index >= 0 && !scratch) {
        worker_register(lb, w);
        w->registered = true;
    }
    return w;
}

static void worker_free(struct lworker *w)
{
    if (!w)
        return;
    if (w->registered)
        worker_unregister(w->lb, w);
    seda__l_suspend_end(w);
    lua_close(w->L);
    seda__l_suspend_free(w);
    seda__codec_wbuf_free(&w->wb);      /* through l_alloc: before below */
    small_free_all(w);
    for (int i = 0; i < w->nws; i++)
        free(w->ws[i].ref);
    free(w->ws);
    free(w);
}

lua_State *seda__l_worker_newstate(void)
{
    struct lworker *w = worker_alloc(NULL, -1);
    if (!w)
        return NULL;
    lua_gc(w->L, LUA_GCGEN, 0, 0); /* as worker_new() leaves it */
    return w->L;
}

void seda__l_worker_closestate(lua_State *L)
{
    if (L)
        worker_free(worker_of(L));
}

void *seda__l_worker_start(int index, void *ud)
{
    return worker_new(ud, index, false);
}

void seda__l_worker_stop(int index, void *data, void *ud)
{
    (void)index;
    (void)ud;
    worker_free(data);
}

/* ---- loading handler code ---- */

static void src_free(struct lsrc *s, int n)
{
    for (int i = 0; s && i < n; i++) {
        free(s[i].chunkname);
        free(s[i].path);
        free(s[i].code);
    }
    free(s);
}

/* Load one handler: leaves the handler function on the stack and returns
 * 0, or returns -1 leaving an error message.  Runs the chunk's top level,
 * and the handler's init when run_init (a state that will handle
 * envelopes; a check state runs the top level only, so an init that
 * opens a connection or registers somewhere does so once per worker). */
static int load_one(struct lworker *w, const struct lsrc *s, bool run_init)
{
    lua_State *L = w->L;
    int rc = luaL_loadbufferx(L, s->code, s->len, s->chunkname,
                              s->binary ? "b" : "t");
    if (rc != LUA_OK)
        return -1;
    if (s->binary) {
        /* The dumped function itself.  Bind its upvalues by name: _ENV to
         * this state's globals, anything else (the main state's seda
         * module, checked at declaration) to this state's seda. */
        for (int i = 1;; i++) {
            const char *up = lua_getupvalue(L, -1, i);
            if (!up)
                break;
            lua_pop(L, 1);
            if (strcmp(up, "_ENV") == 0)
                lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_GLOBALS);
            else
                lua_getglobal(L, "seda");
            lua_setupvalue(L, -2, i);
        }
        return 0;
    }
    if (lua_pcall(L, 0, 1, SLOT_MSGH) != LUA_OK)
        return -1;
    if (lua_isfunction(L, -1))
        return 0;
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "handle");
        if (!lua_isfunction(L, -1)) {
            lua_pushfstring(L, "%s: the returned table has no handle "
                            "function", s->chunkname + 1);
            return -1;
        }
        lua_getfield(L, -2, "init");
        if (lua_isfunction(L, -1) && !run_init) {
            lua_pop(L, 1);                  /* a check state: not run */
        } else if (lua_isfunction(L, -1)) {
            lua_pushinteger(L, w->index);
            if (lua_pcall(L, 1, 0, SLOT_MSGH) != LUA_OK)
                return -1;
        } else if (!lua_isnil(L, -1)) {
            lua_pushfstring(L, "%s: init must be a function (got %s)",
                            s->chunkname + 1, luaL_typename(L, -1));
            return -1;
        } else {
            lua_pop(L, 1);
        }
        lua_remove(L, -2);              /* the table */
        return 0;
    }
    lua_pushfstring(L, "%s: must return a function or a table with a "
                    "handle function (got %s)", s->chunkname + 1,
                    luaL_typename(L, -1));
    return -1;
}

/* Copy a stage's current sources (under its lock) and their code
 * generation. */
static struct lsrc *snapshot_src(struct lstage *ls, uint64_t *gen)
{
    pthread_mutex_lock(&ls->mu);
    *gen = atomic_load_explicit(&ls->gen, memory_order_acquire);
    struct lsrc *c = calloc((size_t)ls->nsrc, sizeof *c);
    for (int i = 0; c && i < ls->nsrc; i++) {
        const struct lsrc *s = &ls->src[i];
        c[i].binary = s->binary;
        c[i].len = s->len;
        c[i].chunkname = strdup(s->chunkname);
        c[i].path = s->path ? strdup(s->path) : NULL;
        c[i].code = malloc(s->len ? s->len : 1);
        if (!c[i].chunkname || !c[i].code || (s->path && !c[i].path)) {
            src_free(c, ls->nsrc);
            c = NULL;
            break;
        }
        memcpy(c[i].code, s->code, s->len);
    }
    pthread_mutex_unlock(&ls->mu);
    return c;
}

struct wstage *seda__l_worker_wstage(struct lworker *w, struct lstage *ls)
{
    if (ls->index >= w->nws) {
        int n = ls->index + 8;
        struct wstage *ws = realloc(w->ws, sizeof *ws * (size_t)n);
        if (!ws)
            return NULL;
        memset(ws + w->nws, 0, sizeof *ws * (size_t)(n - w->nws));
        w->ws = ws;
        w->nws = n;
    }
    return &w->ws[ls->index];
}

/* Drop from package.loaded every module a handler required (all but
 * what the state started with), so that reloaded code that requires a
 * module runs its current file rather than getting the copy loaded with
 * the old code.  Handlers not reloaded keep the module values they hold;
 * their next reload requires afresh too. */
static void forget_modules(lua_State *L)
{
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &g_base_modules) != LUA_TTABLE) {
        lua_pop(L, 2);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        if (lua_rawget(L, -3) == LUA_TNIL) {
            lua_pushvalue(L, -2);
            lua_pushnil(L);
            lua_rawset(L, -6);  /* clearing a field during lua_next is fine */
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

/* Bring c up to the stage's current code.  On failure the old handlers
 * (if any) stay and the error is reported once. */
void seda__l_worker_refresh(struct lworker *w, struct lstage *ls,
                            struct wstage *c)
{
    lua_State *L = w->L;
    int top = lua_gettop(L);
    uint64_t version;
    struct lsrc *src = snapshot_src(ls, &version);
    if (!src) {
        seda_stage_report(ls->st, "out of memory loading handler code");
        return;
    }
    if (c->n > 0)
        forget_modules(L);              /* a reload, not the first load */
    int *refs = calloc((size_t)ls->nsrc, sizeof *refs);
    int i = 0;
    for (; refs && i < ls->nsrc; i++) {
        if (load_one(w, &src[i], true) != 0)
            break;
        refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    if (!refs || i < ls->nsrc) {
        /* The old handlers (if any) stay; the stage hears of it and, for
         * a reload, takes every worker back to the code before. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", refs ? lua_tostring(L, -1)
                                             : "out of memory");
        for (int k = 0; refs && k < i; k++)
            luaL_unref(L, LUA_REGISTRYINDEX, refs[k]);
        free(refs);
        lua_settop(L, top);
        c->version = version;           /* do not retry every envelope */
        src_free(src, ls->nsrc);
        seda__l_stage_load_failed(ls, version, w->index, msg);
        return;
    }
    for (int k = 0; k < c->n; k++)
        luaL_unref(L, LUA_REGISTRYINDEX, c->ref[k]);
    free(c->ref);
    c->ref = refs;
    c->n = ls->nsrc;
    c->version = version;
    src_free(src, ls->nsrc);
    lua_settop(L, top);
}

/* Load src in a scratch state made as worker `index`'s is.  Returns 0,
 * or -1 with err. */
static int validate_as(struct lbus *lb, const struct lsrc *src, int index,
                       char *err, size_t errlen)
{
    struct lworker *w = worker_new(lb, index, true);
    if (!w) {
        snprintf(err, errlen, "cannot create a Lua state");
        return -1;
    }
    int rc = load_one(w, src, false);
    if (rc != 0)
        snprintf(err, errlen, "as worker %d (seda.worker = %d): %s", index,
                 index, lua_tostring(w->L, -1));
    worker_free(w);
    return rc;
}

int seda__l_worker_validate_admit(struct lbus *lb, const struct lsrc *src,
                                  char *err, size_t errlen)
{
    struct lworker *w = worker_new(lb, -1, true);
    if (!w) {
        snprintf(err, errlen, "cannot create a Lua state");
        return -1;
    }
    int rc = seda__l_admit_load(w->L, src);
    if (rc != 0)
        snprintf(err, errlen, "%s", lua_tostring(w->L, -1));
    worker_free(w);
    return rc;
}

int seda__l_worker_validate(struct lbus *lb, const struct lsrc *src, char *err,
                            size_t errlen)
{
    /* Every index a worker state may have: the workers', and a loan
     * thread's (they differ only by their slot, from SEDA_LOAN_INDEX0). */
    int workers = seda_bus_workers(lb->bus);
    seda_bus_stats bs;
    seda_bus_stats_get(lb->bus, &bs);
    int rc = 0;
    for (int i = 0; i < workers && rc == 0; i++)
        rc = validate_as(lb, src, i, err, errlen);
    if (rc == 0 && bs.max_loans > 0)
        rc = validate_as(lb, src, SEDA_LOAN_INDEX0, err, errlen);
    return rc;
}
