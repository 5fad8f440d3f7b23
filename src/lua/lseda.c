/* SPDX-License-Identifier: MIT */
/*
 * lseda.c -- the `seda` Lua module on the main state: the module table,
 * the bus object and its lifecycle, payloads, and the helpers the other
 * binding files share; their methods are in their own files (stages and
 * reload in lstage.c, publishing in lpublish.c, statistics in lstats.c,
 * on_complete callbacks in lcallback.c).
 *
 * DESIGN
 *   A bus userdata owns a struct lbus (shared with the worker states) and
 *   the core bus.  Stages are declared in lstage.c: options are checked,
 *   handler files are read and their top level run once in a scratch
 *   state (so a broken handler fails at bus:stage with file:line), and
 *   each handler becomes a batch consumer (seda__l_batch_consume) of the
 *   core stage.
 *
 *   on_complete: the function is kept in the main registry; the envelope
 *   carries the reference.  When its itinerary ends, the core calls
 *   seda__l_callback_on_done on whatever thread ended it, which copies
 *   what the callback needs into a struct lcompletion and queues it on
 *   the lbus (lcallback.c).  The main state
 *   runs the queue from bus:wait, bus:poll, bus:shutdown and the seda-lua
 *   run loop, so callbacks never run on a worker.
 *
 *   Errors follow the standard library's split: misuse raises an error
 *   naming the stage and field; runtime refusals return false, reason.
 *
 * SECTIONS: helpers, payloads, publishing, completions, stats, stages,
 *   reload, bus methods, module.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lio.h"
#include "lschema.h"
#include "lseda.h"
#include "seda_lua.h"

#define BUSES_KEY "seda.buses"          /* registry: live buses */

/* ---- helpers ---- */

bool seda__l_valid_name(const char *s)
{
    size_t n = 0;
    if (!s || !*s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
              c == '-'))
            return false;
    }
    return n <= SEDA_NAME_MAX;
}

bool seda__l_valid_hop(const char *s)
{
    if (!seda__l_valid_name(s))
        return false;
    if (strncmp(s, "nats:", 5) != 0)
        return true;
    const char *sub = s + 5;
    size_t n = strlen(sub);
    return n > 0 && sub[0] != '.' && sub[n - 1] != '.' &&
           !strstr(sub, "..");
}

void seda__l_check_keys(lua_State *L, int t, const char *const *keys,
                        const char *what)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option keys must be strings", what);
        const char *k = lua_tostring(L, -1);
        int i = 0;
        while (keys[i] && strcmp(keys[i], k) != 0)
            i++;
        if (!keys[i])
            luaL_error(L, "%s: unknown option '%s'", what, k);
    }
}

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ---- payloads ---- */

void seda__l_push_payload(lua_State *L, const void *p, size_t len, int kind,
                          int kci)
{
    if (kind == SEDA_KIND_RAW) {
        lua_pushlstring(L, p, len);
        return;
    }
    char err[256];
    if ((kci ? seda__codec_decode_kc(L, p, len, kci, err, sizeof err)
             : seda__codec_decode(L, p, len, err, sizeof err)) != 0)
        luaL_error(L, "payload: %s", err);
}

int seda__l_encode_payload(lua_State *L, int idx, seda_wbuf *wb,
                           const void **p, size_t *len, int *kind,
                           char *err, size_t errlen)
{
    wb->over = 0;
    if (lua_type(L, idx) == LUA_TSTRING) {
        *p = lua_tolstring(L, idx, len);
        *kind = SEDA_KIND_RAW;
        if (wb->limit && *len > wb->limit) {
            wb->over = SEDA_WBUF_OVER_LIMIT;
            snprintf(err, errlen, "too_large: the payload is %zu bytes, "
                     "over max_payload (%zu bytes)", *len, wb->limit);
            return -1;
        }
        return 0;
    }
    if (wb->len == 0)
        seda__codec_wbuf_trim(wb, SEDA_WBUF_KEEP);  /* a big one's buffer */
    size_t start = wb->len;
    if (seda__codec_encode(L, idx, wb, "payload", err, errlen) != 0) {
        if (start == 0)
            seda__codec_wbuf_trim(wb, SEDA_WBUF_KEEP);
        return -1;
    }
    *p = wb->p + start;
    *len = wb->len - start;
    *kind = SEDA_KIND_LUA;
    return 0;
}

/* ---- bus methods ---- */

const char seda__l_bus_tag = 'b';

struct lbusud *seda__l_check_bus(lua_State *L)
{
    /* Every bus method starts here: test the tag a bus object carries
     * (no other userdata can hold this address) before the metatable
     * lookup by name, which costs more than a publish's admission. */
    struct lbusud *u = NULL;
    if (lua_type(L, 1) == LUA_TUSERDATA && lua_rawlen(L, 1) == sizeof *u)
        u = lua_touserdata(L, 1);
    if (!u || u->tag != &seda__l_bus_tag)
        u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    if (!u->lb || !u->lb->bus)
        luaL_error(L, "attempt to use a closed bus");
    return u;
}

/* Short name used below. */
#define check_bus seda__l_check_bus


static int l_bus_publish(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    seda__l_stage_autostart(L, u->lb);
    seda__l_callback_bound(L, u->lb);
    return seda__l_publish(L, u->lb, 2, &u->wb, &u->ac, true);
}

static int l_bus_receive(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    seda__l_stage_autostart(L, u->lb);
    return seda__l_pull_receive(L, u->lb, 2, &u->wb, 1);
}

static int l_bus_pause(lua_State *L)
{
    seda_bus_pause(check_bus(L)->lb->bus);
    return 0;
}

static int l_bus_resume(lua_State *L)
{
    seda_bus_resume(check_bus(L)->lb->bus);
    return 0;
}

/* bus:poll() -> how many callbacks ran: the bus's queued on_complete
 * callbacks, then the timers due now. */
static int l_bus_poll(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    if (u->lb && u->lb->bus && !u->lb->shut)
        seda__l_stage_autostart(L, u->lb);
    int ran = u->lb ? seda__l_callback_run(L, u->lb) : 0;
    ran += seda__l_loop_run_timers(L);
    lua_pushinteger(L, ran);
    return 1;
}

/* Wait for a completion to be queued, at most until deadline (seconds)
 * and no later than the next timer is due (next: seconds, -1 none). */
static void wait_completion(struct lbus *lb, double until, double next)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double slice = until - seda_now();
    if (slice > 0.01)
        slice = 0.01;
    if (next >= 0 && slice > next)
        slice = next;
    if (slice <= 0)
        return;
    long ns = ts.tv_nsec + (long)(slice * 1e9);
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&lb->mu);
    if (!lb->chead)
        pthread_cond_timedwait(&lb->cv, &lb->mu, &ts);
    pthread_mutex_unlock(&lb->mu);
}

/* Run completions (and due timers) until the bus is idle and no
 * completion is left, or until the deadline.  Returns true when idle;
 * pending timers do not keep it waiting. */
static bool wait_idle(lua_State *L, struct lbus *lb, double timeout)
{
    double until = timeout < 0 ? 1e300 : seda_now() + timeout;
    for (;;) {
        seda__l_callback_run(L, lb);
        seda__l_loop_run_timers(L);
        if ((lb->shut || seda_bus_wait_idle(lb->bus, 0) == 0) &&
            atomic_load_explicit(&lb->ndurable, memory_order_acquire) == 0 &&
            !seda__l_callback_pending(lb))
            return true;
        if (seda_now() >= until)
            return false;
        if (seda__l_callback_interrupt_pending && seda__l_callback_depth == 0 &&
            seda__l_callback_interrupt_pending(L))
            return false;
        wait_completion(lb, until, seda__l_loop_next_timer(L));
    }
}

static int l_bus_wait(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    double t = luaL_optnumber(L, 2, -1);
    if (!u->lb->shut)
        seda__l_stage_autostart(L, u->lb);
    lua_pushboolean(L, wait_idle(L, u->lb, t));
    return 1;
}

/* A bus that ends (or whose program failed) before it started never
 * replays: its durable stages' rows stay in the journal for the next
 * run. */
static void hold(struct lbus *lb)
{
    if (lb->start == START_NOT_YET)
        lb->start = START_HELD;
}

static void unregister_bus(lua_State *L, int idx)
{
    struct lbusud *u = lua_touserdata(L, idx);
    if (u && u->lb)
        seda__l_observe_remove(u->lb);
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    if (lua_istable(L, -1)) {
        lua_pushvalue(L, idx);
        lua_pushnil(L);
        lua_rawset(L, -3);
    }
    lua_pop(L, 1);
}

static int l_bus_shutdown(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    double t = luaL_optnumber(L, 2, 30.0);
    hold(u->lb);
    /* Listeners stop accepting first; what they took in is drained and
     * answered, then they close. */
    seda__l_http_quiesce(u->lb);
    seda__l_nats_stop_all(u->lb);
    int rc = seda_bus_shutdown(u->lb->bus, t);
    seda__l_http_close_all(u->lb, 1.0);
    u->lb->shut = true;
    seda__l_callback_run(L, u->lb);
    seda__l_callback_flush();
    unregister_bus(L, 1);
    lua_pushboolean(L, rc == 0);
    return 1;
}

static int l_bus_shutdown_now(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    hold(u->lb);
    seda__l_http_quiesce(u->lb);
    seda__l_nats_stop_all(u->lb);
    seda_bus_shutdown_now(u->lb->bus);
    seda__l_http_close_all(u->lb, 0.2);
    u->lb->shut = true;
    seda__l_callback_run(L, u->lb);
    seda__l_callback_flush();
    unregister_bus(L, 1);
    return 0;
}

static int l_bus_gc(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    struct lbus *lb = u->lb;
    seda__l_admit_cache_free(L, &u->ac);
    if (!lb)
        return 0;
    u->lb = NULL;
    seda__l_observe_remove(lb);         /* before anything is freed */
    seda__l_http_free_all(lb);          /* no request publishes after */
    seda__l_nats_stop_all(lb);
    seda_bus_free(lb->bus);             /* joins the workers */
    seda__l_nats_free_all(lb);          /* every answer was sent */
    lb->bus = NULL;
    seda_io_loop_free(lb->io);          /* after the workers' calls ended */
    lb->io = NULL;
    for (struct lcompletion *c = lb->chead, *next; c; c = next) {
        next = c->next;
        seda__l_callback_release(L, c->cb, 1);
        seda__l_callback_completion_free(c);
    }
    seda__l_callback_drop_lost(L, lb);
    for (int i = 0; i < lb->nstages; i++)
        seda__l_stage_free(lb->stages[i]);
    free(lb->stages);
    free(lb->workers);
    seda__l_loop_release(lb->loop);
    free(lb->package_path);
    free(lb->package_cpath);
    pthread_cond_destroy(&lb->cv);
    pthread_mutex_destroy(&lb->mu);
    free(lb);
    seda__codec_wbuf_free(&u->wb);
    return 0;
}

static int l_bus_close(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    if (u->lb && u->lb->bus && !u->lb->shut) {
        hold(u->lb);
        seda__l_http_quiesce(u->lb);
        seda__l_nats_stop_all(u->lb);
        seda_bus_shutdown(u->lb->bus, 30.0);
        seda__l_http_close_all(u->lb, 1.0);
        u->lb->shut = true;
        seda__l_callback_run(L, u->lb);
        seda__l_callback_flush();
        unregister_bus(L, 1);
    }
    return 0;
}

static int l_bus_tostring(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    lua_pushfstring(L, "seda.bus (%s)", !u->lb ? "freed" :
                    u->lb->shut ? "shut down" : "running");
    return 1;
}

static const char *const bus_keys[] = {
    "workers", "batch", "hop_timeout", "dead_letter", "memory_limit",
    "data_dir", "sync", "max_loans", "max_pending_callbacks", "max_payload",
    "stats_window", "dead_letter_keep", "name", "hold_warn", "http_idle",
    "group_wait", NULL
};

/* Defaults of the Lua-level bus options. */
#define DEF_MAX_PENDING_CB 10000
#define MAX_PENDING_CB_MAX 100000000

/* An integer option in lo..hi at field k of table 1, or def. */
static lua_Integer opt_range(lua_State *L, const char *k, lua_Integer def,
                             lua_Integer lo, lua_Integer hi)
{
    lua_getfield(L, 1, k);
    lua_Integer v = def;
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint)
                                           : 0;
        if (!isint || v < lo || v > hi)
            luaL_error(L, "bus: %s must be an integer in %I..%I", k, lo, hi);
    }
    lua_pop(L, 1);
    return v;
}

/* The C bus's options of the table at 1 into o (initialised); the
 * strings o points to stay on the stack.  Raises naming the option. */
static void bus_opts(lua_State *L, seda_bus_opts *o)
{
    lua_getfield(L, 1, "workers");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer w = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || w <= 0 || w > 1024)
            luaL_error(L, "bus: workers must be an integer in 1..1024");
        o->workers = (int)w;
    }
    lua_getfield(L, 1, "max_loans");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer m = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || m < 0 || m > SEDA_MAX_LOANS)
            luaL_error(L, "bus: max_loans must be an integer in 0..%d",
                       SEDA_MAX_LOANS);
        o->max_loans = m == 0 ? -1 : (int)m;    /* C: -1 means none */
    }
    lua_getfield(L, 1, "batch");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer b = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || b <= 0 || b > 256)
            luaL_error(L, "bus: batch must be an integer in 1..256");
        o->batch = (int)b;
    }
    lua_getfield(L, 1, "hop_timeout");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
            luaL_error(L, "bus: hop_timeout must be a number >= 0");
        o->hop_timeout = lua_tonumber(L, -1);
    }
    lua_getfield(L, 1, "dead_letter_keep");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer k = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : -1;
        if (!isint || k < 0 || k > 100000)
            luaL_error(L, "bus: dead_letter_keep must be an integer in "
                       "0..100000");
        o->dead_letter_keep = k == 0 ? -1 : (int)k;
    }
    lua_getfield(L, 1, "stats_window");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0) ||
            lua_tonumber(L, -1) > 86400)
            luaL_error(L, "bus: stats_window must be a number of seconds in "
                       "(0, 86400]");
        o->stats_window = lua_tonumber(L, -1);
    }
    lua_getfield(L, 1, "hold_warn");
    if (lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)) {
        o->hold_warn = -1;              /* never */
    } else if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0) ||
            lua_tonumber(L, -1) > 3600)
            luaL_error(L, "bus: hold_warn must be a number of seconds in "
                       "(0, 3600], or false (never)");
        o->hold_warn = lua_tonumber(L, -1);
    }
    lua_getfield(L, 1, "dead_letter");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING ||
            !seda__l_valid_name(lua_tostring(L, -1)))
            luaL_error(L, "bus: dead_letter must be a stage name");
        o->dead_letter = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "data_dir");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING || !*lua_tostring(L, -1))
            luaL_error(L, "bus: data_dir must be a directory path");
        o->data_dir = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "sync");
    if (!lua_isnil(L, -1)) {
        const char *sy = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING ||
            (strcmp(sy, "full") != 0 && strcmp(sy, "normal") != 0))
            luaL_error(L, "bus: sync must be \"full\" or \"normal\"");
        o->sync_normal = strcmp(sy, "normal") == 0;
    }
    lua_getfield(L, 1, "group_wait");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0) ||
            lua_tonumber(L, -1) > 1)
            luaL_error(L, "bus: group_wait must be a number of seconds in "
                       "[0, 1]");
        o->group_wait = lua_tonumber(L, -1);
    }
}

/* The Lua-level bus options: memory_limit (bytes per worker state) and
 * max_pending_callbacks.  Raises naming the option. */
static void bus_lua_opts(lua_State *L, size_t *memory_limit,
                         int *max_pending_cb)
{
    *memory_limit = (size_t)256 << 20;
    lua_getfield(L, 1, "memory_limit");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0))
            luaL_error(L, "bus: memory_limit must be a number of bytes > 0");
        *memory_limit = (size_t)lua_tonumber(L, -1);
    }
    *max_pending_cb = (int)opt_range(L, "max_pending_callbacks",
                                     DEF_MAX_PENDING_CB, 1,
                                     MAX_PENDING_CB_MAX);
}

/* A new struct lbus for the bus userdata u (its fields, and the package
 * paths worker states copy), before the C bus exists.  Raises when out
 * of memory. */
static struct lbus *bus_lbus(lua_State *L, struct lbusud *u,
                             size_t memory_limit, int max_pending_cb,
                             size_t max_payload)
{
    struct lbus *lb = calloc(1, sizeof *lb);
    if (!lb)
        luaL_error(L, "bus: out of memory");
    pthread_mutex_init(&lb->mu, NULL);
    pthread_cond_init(&lb->cv, NULL);
    u->lb = lb;
    lb->loop = seda__l_loop_ref(L);
    lb->memory_limit = memory_limit;
    lb->max_pending_cb = max_pending_cb;
    atomic_init(&lb->npending_cb, 0);
    atomic_init(&lb->ndurable, 0);
    /* Before the pool starts: worker states read it as they are made. */
    lb->max_payload = max_payload;
    u->wb.limit = lb->max_payload;
    lua_getglobal(L, "package");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "path");
        lb->package_path = dupstr(lua_tostring(L, -1));
        lua_getfield(L, -2, "cpath");
        lb->package_cpath = dupstr(lua_tostring(L, -1));
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    return lb;
}

/* The bus's name: the option (checked: a stage-like name no live bus
 * has), or busN, N counting the process's buses from 1.  Raises naming
 * the option. */
/* Whether a live bus of this state is named nm. */
static bool name_taken(lua_State *L, const char *nm)
{
    bool taken = false;
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        struct lbusud *o = luaL_testudata(L, -1, LSEDA_BUS_MT);
        if (o && o->lb && !o->lb->shut && strcmp(o->lb->name, nm) == 0)
            taken = true;
    }
    lua_pop(L, 1);
    return taken;
}

static void bus_name(lua_State *L, struct lbus *lb)
{
    static atomic_int made;             /* relaxed: a counter only */
    lua_getfield(L, 1, "name");
    if (lua_isnil(L, -1)) {
        /* busN in creation order, past a name a live bus was given
         * (seda.bus{ name = "bus2" } then seda.bus{}: bus3, not a second
         * bus2 whose metrics would collide with the first's). */
        do {
            int n = atomic_fetch_add_explicit(&made, 1,
                                              memory_order_relaxed) + 1;
            snprintf(lb->name, sizeof lb->name, "bus%d", n);
        } while (name_taken(L, lb->name));
        lua_pop(L, 1);
        return;
    }
    atomic_fetch_add_explicit(&made, 1, memory_order_relaxed);
    size_t len = 0;
    /* The type first: lua_tolstring turns a number into a string. */
    const char *nm = lua_type(L, -1) == LUA_TSTRING
                         ? lua_tolstring(L, -1, &len) : NULL;
    if (!nm || strlen(nm) != len || !seda__l_valid_name(nm))
        luaL_error(L, "bus: name must be 1-%d characters of "
                   "[A-Za-z0-9_.:-]", SEDA_NAME_MAX);
    if (name_taken(L, nm))
        luaL_error(L, "bus: name '%s' is taken by a live bus", nm);
    snprintf(lb->name, sizeof lb->name, "%s", nm);
    lua_pop(L, 1);
}

/* seda.bus(opts): a new bus object, registered in the state's list of
 * buses.  Raises on a bad option or when the bus cannot start. */
static int l_bus_new(lua_State *L)
{
    lua_settop(L, 1);
    if (lua_isnil(L, 1)) {
        lua_newtable(L);
        lua_replace(L, 1);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    seda__l_check_keys(L, 1, bus_keys, "bus");
    seda_bus_opts o;
    seda_bus_opts_init(&o);
    bus_opts(L, &o);
    size_t memory_limit;
    int max_pending_cb;
    bus_lua_opts(L, &memory_limit, &max_pending_cb);
    o.max_payload = (size_t)opt_range(L, "max_payload",
                                      (lua_Integer)SEDA_MAX_PAYLOAD_DEFAULT,
                                      1, (lua_Integer)UINT32_MAX);
    double http_idle = SEDA_IO_HTTP_IDLE_DEFAULT;
    if (lua_getfield(L, 1, "http_idle") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0) ||
            !(lua_tonumber(L, -1) <= 1e9))
            return luaL_error(L, "bus: http_idle must be a number of "
                              "seconds > 0");
        http_idle = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);

    struct lbusud *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    u->tag = &seda__l_bus_tag;
    luaL_setmetatable(L, LSEDA_BUS_MT);
    int ud = lua_gettop(L);
    struct lbus *lb = bus_lbus(L, u, memory_limit, max_pending_cb,
                               o.max_payload);
    lb->http_idle = http_idle;
    bus_name(L, lb);
    o.worker_start = seda__l_worker_start;
    o.worker_stop = seda__l_worker_stop;
    o.worker_mail = seda__l_suspend_mail;
    o.worker_ud = lb;
    int rc = seda_bus_new(&o, &lb->bus);
    if (rc)
        return luaL_error(L, "bus: cannot start: %s", seda_strerror(rc));
    if (o.data_dir) {
        /* Given explicitly: a bad journal fails here, not at first use. */
        char jerr[512];
        if (seda_bus_open_journal(lb->bus, jerr, sizeof jerr) != 0)
            return luaL_error(L, "bus: data_dir: %s", jerr);
    }
    /* The value: the bus's place in declaration order (seda.buses). */
    static atomic_llong made_seq;       /* relaxed: a counter only */
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushvalue(L, ud);
    lua_pushinteger(L, (lua_Integer)atomic_fetch_add_explicit(
                           &made_seq, 1, memory_order_relaxed) + 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    seda__l_observe_add(lb);
    lua_pushvalue(L, ud);
    return 1;
}

/* ---- embedding ---- */

seda_bus_t *seda_lua_tobus(lua_State *L, int idx)
{
    struct lbusud *u = luaL_testudata(L, idx, LSEDA_BUS_MT);
    return u && u->lb && !u->lb->shut ? u->lb->bus : NULL;
}

void seda__l_bus_quiesce(lua_State *L, int idx)
{
    struct lbusud *u = luaL_testudata(L, idx, LSEDA_BUS_MT);
    if (u && u->lb && !u->lb->shut)
        seda__l_http_quiesce(u->lb);
}

/* ---- module ---- */

static int l_now(lua_State *L)
{
    lua_pushnumber(L, seda_now());
    return 1;
}

static int l_encode(lua_State *L)
{
    luaL_checkany(L, 1);
    seda_wbuf wb = { 0 };
    char err[512];
    int rc = seda__codec_encode(L, 1, &wb, "payload", err, sizeof err);
    if (rc == 0)
        lua_pushlstring(L, (const char *)wb.p, wb.len);
    seda__codec_wbuf_free(&wb);
    if (rc != 0)
        return luaL_error(L, "%s", err);
    return 1;
}

static int l_decode(lua_State *L)
{
    size_t len;
    const char *p = luaL_checklstring(L, 1, &len);
    char err[256];
    if (seda__codec_decode(L, p, len, err, sizeof err) != 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    return 1;
}

int seda__l_run_all_completions(lua_State *L)
{
    int ran = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        struct lbusud *u = lua_touserdata(L, -1);
        if (u->lb && u->lb->bus && !u->lb->shut)
            seda__l_stage_autostart(L, u->lb);
        if (u->lb)
            ran += seda__l_callback_run(L, u->lb);
    }
    lua_pop(L, 1);
    return ran;
}

/* seda._poll_all(): what is pending on the main state (every live bus's
 * completions, due timers; see seda_lua_run_pending); returns how many
 * ran. */
static int l_poll_all(lua_State *L)
{
    lua_pushinteger(L, seda_lua_run_pending(L));
    return 1;
}

/* seda._hold_all(): every live bus that has not started never will (for
 * seda-lua, when the script failed before its buses started). */
static int l_hold_all(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        struct lbusud *u = lua_touserdata(L, -1);
        if (u->lb)
            hold(u->lb);
    }
    lua_pop(L, 1);
    return 0;
}

/* bus:workers([n]) -> the pool size after the change. */
static int l_bus_workers(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    if (!lua_isnoneornil(L, 2)) {
        int isint;
        lua_Integer n = lua_tointegerx(L, 2, &isint);
        if (!isint || n < 1 || n > 1024)
            return luaL_error(L, "workers: n must be an integer in 1..1024");
        int rc = seda_bus_set_workers(u->lb->bus, (int)n);
        if (rc)
            return luaL_error(L, "workers: %s", seda_strerror(rc));
    }
    lua_pushinteger(L, seda_bus_workers(u->lb->bus));
    return 1;
}

/* seda.buses(): the live bus objects (created and not yet shut down), in
 * the order they were made, each also under its name (seda.buses().orders).
 * The registry's set maps each bus to its place in that order. */
static int l_buses(lua_State *L)
{
    lua_newtable(L);
    int t = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    int reg = lua_gettop(L);
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, reg)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, t, ++n);
    }
    /* Insertion sort by place (a handful of buses). */
    for (int i = 2; i <= n; i++) {
        lua_rawgeti(L, t, i);
        lua_pushvalue(L, -1);
        lua_rawget(L, reg);
        lua_Integer key = lua_tointeger(L, -1);
        lua_pop(L, 1);
        int j = i - 1;
        for (; j >= 1; j--) {
            lua_rawgeti(L, t, j);
            lua_rawget(L, reg);
            lua_Integer kj = lua_tointeger(L, -1);
            lua_pop(L, 1);
            if (kj <= key)
                break;
            lua_rawgeti(L, t, j);
            lua_rawseti(L, t, j + 1);
        }
        lua_rawseti(L, t, j + 1);
    }
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, t, i);
        struct lbusud *u = lua_touserdata(L, -1);
        if (u && u->lb)
            lua_setfield(L, t, u->lb->name);
        else
            lua_pop(L, 1);
    }
    lua_settop(L, t);
    return 1;
}

static const luaL_Reg bus_methods[] = {
    { "handler_files", seda__l_stage_handler_files },
    { "tune", seda__l_stage_tune },
    { "workers", l_bus_workers },
    { "stage", seda__l_stage_declare },
    { "publish", l_bus_publish },
    { "publish_many", seda__l_publish_many },
    { "receive", l_bus_receive },
    { "stats", seda__l_stats },
    { "errors", seda__l_errors },
    { "dead_letters", seda__l_errors_dead_letters },
    { "histogram", seda__l_stats_histogram },
    { "tap", seda__l_errors_tap },
    { "pause", l_bus_pause },
    { "resume", l_bus_resume },
    { "wait", l_bus_wait },
    { "poll", l_bus_poll },
    { "shutdown", l_bus_shutdown },
    { "listen", seda__l_http_listen },
    { "shutdown_now", l_bus_shutdown_now },
    { "reload", seda__l_stage_reload },
    { "start", seda__l_stage_start_method },
    { NULL, NULL }
};

static const luaL_Reg module_funcs[] = {
    { "bus", l_bus_new },
    { "buses", l_buses },
    { "now", l_now },
    { "process", seda__l_stats_process },
    { "log", seda__l_errors_log },
    { "log_level", seda__l_errors_log_level },
    { "encode", l_encode },
    { "decode", l_decode },
    { "_poll_all", l_poll_all },
    { "_hold_all", l_hold_all },
    { NULL, NULL }
};

int luaopen_seda(lua_State *L)
{
    if (luaL_newmetatable(L, LSEDA_BUS_MT)) {
        luaL_newlib(L, bus_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_bus_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_bus_close);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, l_bus_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    if (lua_isnil(L, -1)) {
        lua_newtable(L);
        lua_setfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    }
    lua_pop(L, 1);
    seda__l_loop_open(L);
    seda__l_http_open_lib(L);
    seda__l_nats_open_lib(L);
    luaL_newlib(L, module_funcs);
    seda__l_loop_register(L);
    seda__l_io_register(L);     /* sleep, http, socket (lio.c) */
    lua_pushliteral(L, SEDA_VERSION);
    lua_setfield(L, -2, "version");
    lua_pushlightuserdata(L, NULL);     /* seda.null, equal to cjson.null */
    lua_setfield(L, -2, "null");
    seda__l_shared_push(L);
    lua_setfield(L, -2, "shared");
    return 1;
}
