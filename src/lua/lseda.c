/* SPDX-License-Identifier: MIT */
/*
 * lseda.c -- the `seda` Lua module on the main state: buses, stages,
 * publishing, statistics, lifecycle, reload, and on_complete callbacks.
 *
 * DESIGN
 *   A bus userdata owns a struct lbus (shared with the worker states) and
 *   the core bus.  Stages are declared here: options are checked, handler
 *   files are read and their top level run once in a scratch state (so a
 *   broken handler fails at bus:stage with file:line), and each handler
 *   becomes a C consumer (seda__lw_consume) of the core stage.
 *
 *   on_complete: the function is kept in the main registry; the envelope
 *   carries the reference.  When its itinerary ends, the core calls on_done
 *   on whatever thread ended it; on_done copies what the callback needs
 *   into a struct lcompletion and queues it on the lbus.  The main state
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

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ---- payloads ---- */

void seda__l_push_payload(lua_State *L, const void *p, size_t len, int kind)
{
    if (kind == SEDA_KIND_RAW) {
        lua_pushlstring(L, p, len);
        return;
    }
    char err[256];
    if (seda__codec_decode(L, p, len, err, sizeof err) != 0)
        luaL_error(L, "payload: %s", err);
}

int seda__l_encode_payload(lua_State *L, int idx, seda_wbuf *wb,
                           const void **p, size_t *len, int *kind,
                           char *err, size_t errlen)
{
    if (lua_type(L, idx) == LUA_TSTRING) {
        *p = lua_tolstring(L, idx, len);
        *kind = SEDA_KIND_RAW;
        return 0;
    }
    size_t start = wb->len;
    if (seda__codec_encode(L, idx, wb, "payload", err, errlen) != 0)
        return -1;
    *p = wb->p + start;
    *len = wb->len - start;
    *kind = SEDA_KIND_LUA;
    return 0;
}

/* ---- completions ---- */

static void completion_free(struct lcompletion *c)
{
    free(c->sender);
    for (int i = 0; i < 2 * c->nh; i++)
        free(c->hdr[i]);
    free(c->hdr);
    free(c->payload);
    free(c);
}

/* Drop n references to cb; the last one releases the function.  Main
 * thread. */
static void cb_release(lua_State *L, struct lcb *cb, int n)
{
    cb->refs -= n;
    if (cb->refs <= 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, cb->ref);
        free(cb);
    }
}

/* Make a callback record for the function at idx with `refs` references.
 * Raises on allocation failure (before anything is published). */
static struct lcb *cb_new(lua_State *L, int idx, int refs)
{
    struct lcb *cb = malloc(sizeof *cb);
    if (!cb)
        luaL_error(L, "publish: out of memory");
    lua_pushvalue(L, idx);
    cb->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    cb->refs = refs;
    return cb;
}

/* The core's done callback: any thread, no Lua. */
static void on_done(seda_env_t *env, int outcome, void *ud)
{
    struct lstage *ls = seda_stage_userdata(seda_env_stage(env));
    struct lbus *lb = ls->lb;
    struct lcompletion *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "seda: out of memory queueing on_complete\n");
        return;
    }
    c->cb = ud;
    c->outcome = outcome;
    if (outcome == SEDA_COMPLETED) {
        bool ok = true;
        seda_env_id(env, c->id);
        snprintf(c->to, sizeof c->to, "%s", seda_env_to(env));
        c->attempts = seda_env_attempts(env);
        if (seda_env_sender(env))
            ok &= (c->sender = strdup(seda_env_sender(env))) != NULL;
        int nh = seda_env_header_count(env);
        if (nh > 0 && (c->hdr = calloc((size_t)nh * 2, sizeof *c->hdr))) {
            for (int i = 0; i < nh; i++) {
                const char *k, *v;
                seda_env_header_at(env, i, &k, &v);
                c->hdr[2 * i] = strdup(k);
                c->hdr[2 * i + 1] = strdup(v);
                ok &= c->hdr[2 * i] && c->hdr[2 * i + 1];
                c->nh = i + 1;
            }
        } else {
            ok &= nh == 0;
        }
        size_t len;
        const void *p = seda_env_payload(env, &len);
        c->kind = seda_env_payload_kind(env);
        c->len = len;
        if ((c->payload = malloc(len ? len : 1)))
            memcpy(c->payload, p, len);
        ok &= c->payload != NULL;
        if (!ok) {
            fprintf(stderr, "seda: out of memory copying a completion\n");
            c->outcome = SEDA_DROPPED;   /* still release the callback */
        }
    }
    pthread_mutex_lock(&lb->mu);
    if (lb->ctail)
        lb->ctail->next = c;
    else
        lb->chead = c;
    lb->ctail = c;
    pthread_cond_broadcast(&lb->cv);
    pthread_mutex_unlock(&lb->mu);
}


/* Protected part of running one completion: push the env table and call
 * the callback at index 1. */
static int call_completion(lua_State *L)
{
    struct lcompletion *c = lua_touserdata(L, 2);
    lua_settop(L, 1);
    lua_createtable(L, 0, 7);
    lua_pushstring(L, c->id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, c->to);
    lua_setfield(L, -2, "to");
    if (c->sender) {
        lua_pushstring(L, c->sender);
        lua_setfield(L, -2, "sender");
    }
    lua_pushinteger(L, c->attempts);
    lua_setfield(L, -2, "attempts");
    lua_createtable(L, 0, c->nh);
    for (int i = 0; i < c->nh; i++) {
        lua_pushstring(L, c->hdr[2 * i + 1]);
        lua_setfield(L, -2, c->hdr[2 * i]);
    }
    lua_setfield(L, -2, "headers");
    lua_newtable(L);                    /* completed: no hops remain */
    lua_setfield(L, -2, "slip");
    lua_pushliteral(L, "payload");
    seda__l_push_payload(L, c->payload, c->len, c->kind);
    lua_rawset(L, -3);
    lua_call(L, 1, 0);                  /* inside the caller's pcall */
    return 0;
}

/* on_complete errors: at most 5 reports a second, as stages do for
 * handler errors; the rest are counted, and the count is said with the
 * next report or when a bus shuts down.  Locking: cb_mu guards cb_*. */
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static double cb_window;
static int cb_lines;
static unsigned long cb_suppressed;

static void cb_flush_locked(void)
{
    if (cb_suppressed)
        fprintf(stderr, "seda: on_complete: %lu similar errors "
                "suppressed\n", cb_suppressed);
    cb_suppressed = 0;
}

static void cb_flush(void)
{
    pthread_mutex_lock(&cb_mu);
    cb_flush_locked();
    pthread_mutex_unlock(&cb_mu);
}

static void cb_report(const char *msg)
{
    double now = seda_now();
    pthread_mutex_lock(&cb_mu);
    if (now - cb_window >= 1.0) {
        cb_flush_locked();
        cb_window = now;
        cb_lines = 0;
    }
    if (cb_lines < 5) {
        cb_lines++;
        fprintf(stderr, "seda: on_complete: %s\n", msg);
    } else {
        cb_suppressed++;
    }
    pthread_mutex_unlock(&cb_mu);
}

int seda__l_callback_depth;                 /* main thread only */
bool (*seda__l_interrupt_pending)(lua_State *L);

/* Run every queued completion on the main state.  Returns how many
 * callbacks ran.  An error in a callback is printed with its
 * traceback (cb_report). */
static int run_completions(lua_State *L, struct lbus *lb)
{
    int ran = 0;
    for (;;) {
        pthread_mutex_lock(&lb->mu);
        struct lcompletion *c = lb->chead;
        lb->chead = lb->ctail = NULL;
        pthread_mutex_unlock(&lb->mu);
        if (!c)
            return ran;
        while (c) {
            struct lcompletion *next = c->next;
            if (c->outcome == SEDA_COMPLETED) {
                int top = lua_gettop(L);
                lua_pushcfunction(L, seda__l_msghandler);
                lua_pushcfunction(L, call_completion);
                lua_rawgeti(L, LUA_REGISTRYINDEX, c->cb->ref);
                lua_pushlightuserdata(L, c);
                seda__l_callback_depth++;
                int rc = lua_pcall(L, 2, 0, top + 1);
                seda__l_callback_depth--;
                if (rc != LUA_OK)
                    cb_report(lua_tostring(L, -1));
                lua_settop(L, top);
                ran++;
            }
            cb_release(L, c->cb, 1);
            completion_free(c);
            c = next;
        }
    }
}

static bool completions_pending(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    bool any = lb->chead != NULL;
    pthread_mutex_unlock(&lb->mu);
    return any;
}

/* ---- publishing ---- */

static const char *const publish_keys[] = {
    "headers", "slip", "sender", "timeout", "on_complete", "id", NULL
};

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

/* Parse the publish options table at oidx into o.  Strings and arrays
 * that o points to are left on the stack above oidx (the caller keeps
 * them there until it has published).  Returns the stack index of the
 * on_complete function, or 0.  Raises on misuse, naming `what`. */
static int parse_opts(lua_State *L, int oidx, seda_publish_opts *o,
                      bool main, const char *what)
{
    seda_publish_opts_init(o);
    if (lua_isnoneornil(L, oidx))
        return 0;
    luaL_checktype(L, oidx, LUA_TTABLE);
    seda__l_check_keys(L, oidx, publish_keys, what);
    int cb = 0;

    lua_getfield(L, oidx, "sender");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: sender must be a string", what);
        o->sender = lua_tostring(L, -1);
    }
    lua_getfield(L, oidx, "timeout");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
            luaL_error(L, "%s: timeout must be a number >= 0", what);
        o->timeout = lua_tonumber(L, -1);
    }
    lua_getfield(L, oidx, "id");
    if (!lua_isnil(L, -1)) {
        size_t n;
        const char *id = lua_tolstring(L, -1, &n);
        if (lua_type(L, -1) != LUA_TSTRING || n == 0 || n >= SEDA_ID_MAX ||
            strlen(id) != n)
            luaL_error(L, "%s: id must be a non-empty string of at most %d "
                       "bytes", what, SEDA_ID_MAX - 1);
        o->id = id;
    }
    lua_getfield(L, oidx, "on_complete");
    if (!lua_isnil(L, -1)) {
        if (!lua_isfunction(L, -1))
            luaL_error(L, "%s: on_complete must be a function", what);
        if (!main)
            luaL_error(L, "%s: on_complete is only available on the main "
                       "state", what);
        cb = lua_gettop(L);
    }
    lua_getfield(L, oidx, "slip");
    if (!lua_isnil(L, -1)) {
        int t = lua_gettop(L);
        if (!lua_istable(L, t))
            luaL_error(L, "%s: slip must be an array of stage names", what);
        int n = (int)lua_rawlen(L, t);
        const char **slip = lua_newuserdatauv(L, sizeof(char *) *
                                              (size_t)(n + 1), 0);
        luaL_checkstack(L, n + 4, "slip too long");
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, t, i + 1);
            if (lua_type(L, -1) != LUA_TSTRING ||
                !seda__l_valid_name(lua_tostring(L, -1)))
                luaL_error(L, "%s: slip[%d] is not a valid stage name", what,
                           i + 1);
            slip[i] = lua_tostring(L, -1);      /* stays on the stack */
        }
        o->slip = slip;
        o->nslip = n;
    }
    lua_getfield(L, oidx, "headers");
    if (!lua_isnil(L, -1)) {
        int h = lua_gettop(L);
        if (!lua_istable(L, h))
            luaL_error(L, "%s: headers must be a table", what);
        int n = 0;
        lua_pushnil(L);
        while (lua_next(L, h)) {
            lua_pop(L, 1);
            n++;
        }
        const char **hv = lua_newuserdatauv(L, sizeof(char *) *
                                            (size_t)(2 * n + 1), 0);
        luaL_checkstack(L, 2 * n + 8, "too many headers");
        int i = 0;
        lua_pushnil(L);
        while (lua_next(L, h)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                luaL_error(L, "%s: header keys must be strings", what);
            int t = lua_type(L, -1);
            if (t != LUA_TSTRING && t != LUA_TNUMBER)
                luaL_error(L, "%s: headers.%s must be a string (got %s)",
                           what, lua_tostring(L, -2), luaL_typename(L, -1));
            size_t kl, vl;
            lua_pushvalue(L, -2);
            lua_pushvalue(L, -2);
            hv[2 * i] = lua_tolstring(L, -2, &kl);
            hv[2 * i + 1] = lua_tolstring(L, -1, &vl);
            if (strlen(hv[2 * i]) != kl || strlen(hv[2 * i + 1]) != vl)
                luaL_error(L, "%s: headers.%s: keys and values may not "
                           "contain NUL bytes", what, hv[2 * i]);
            lua_rotate(L, -4, 2);               /* copies under k, v */
            lua_pop(L, 1);                      /* value; key stays */
            i++;
        }
        o->headers = hv;
        o->nheaders = i;
    }
    return cb;
}

/* Raises for an id given to a stage that takes none (the runtime says
 * SEDA_EINVAL: see check_id in bus.c). */
static int id_misuse(lua_State *L, const char *to)
{
    return luaL_error(L, "publish: id: stage '%s' is not durable; only "
                      "durable stages take a custom id (generated ids are "
                      "unique within the process)", to);
}

int seda__l_publish(lua_State *L, struct lbus *lb, int first,
                    seda_wbuf *wb, bool main)
{
    const char *to = luaL_checkstring(L, first);
    int pidx = first + 1, oidx = first + 2;
    lua_settop(L, oidx);
    seda_publish_opts o;
    int cbidx = parse_opts(L, oidx, &o, main, "publish");

    const void *p;
    size_t len;
    int kind;
    char err[512];
    wb->len = 0;
    if (seda__l_encode_payload(L, pidx, wb, &p, &len, &kind, err,
                               sizeof err) != 0) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, err);
        return 2;
    }
    o.kind = kind;
    struct lcb *cb = NULL;
    if (cbidx) {
        cb = cb_new(L, cbidx, 1);
        o.done = on_done;
        o.done_ud = cb;
    }
    int rc = seda_publish(lb->bus, to, p, len, &o);
    if (rc) {
        if (cb)
            cb_release(L, cb, 1);
        if (rc == SEDA_EINVAL && o.id)
            id_misuse(L, to);
        lua_pushboolean(L, 0);
        lua_pushstring(L, rc == SEDA_ETYPE ? seda_last_check_error()
                                           : seda_strerror(rc));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* ---- stats ---- */

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void push_stage_stats(lua_State *L, seda_stage_t *st)
{
    seda_stage_stats s;
    seda_stage_stats_get(st, &s);
    struct lstage *ls = seda_stage_userdata(st);
    lua_createtable(L, 0, 20);
    lua_pushstring(L, s.name);
    lua_setfield(L, -2, "name");
    set_int(L, "depth", s.depth);
    set_int(L, "capacity", s.capacity);
    set_int(L, "concurrency", s.concurrency);
    set_int(L, "in_flight", s.in_flight);
    set_int(L, "enqueued", (lua_Integer)s.enqueued);
    set_int(L, "delivered", (lua_Integer)s.delivered);
    set_int(L, "nacked", (lua_Integer)s.nacked);
    set_int(L, "dropped", (lua_Integer)s.dropped);
    set_int(L, "dead_lettered", (lua_Integer)s.dead_lettered);
    set_int(L, "errors", (lua_Integer)s.errors);
    set_int(L, "completed", (lua_Integer)s.completed);
    set_int(L, "invalid", (lua_Integer)s.invalid);
    set_int(L, "consumers", s.consumers);
    set_int(L, "max_attempts", s.max_attempts);
    lua_pushstring(L, seda_policy_name(s.policy));
    lua_setfield(L, -2, "policy");
    static const char *const lat[] = {
        "sojourn_p50", "sojourn_p99", "sojourn_p999", "sojourn_max",
        "service_p50", "service_p99", "service_p999", "service_max",
    };
    const double latv[] = {
        s.sojourn_p50, s.sojourn_p99, s.sojourn_p999, s.sojourn_max,
        s.service_p50, s.service_p99, s.service_p999, s.service_max,
    };
    for (int i = 0; i < 8; i++) {
        lua_pushnumber(L, latv[i]);
        lua_setfield(L, -2, lat[i]);
    }
    lua_pushnumber(L, s.rate);
    lua_setfield(L, -2, "rate");
    lua_pushstring(L, seda_delivery_name(s.delivery));
    lua_setfield(L, -2, "delivery");
    if (ls) {
        set_int(L, "version", (lua_Integer)atomic_load_explicit(
                    &ls->version, memory_order_acquire));
        pthread_mutex_lock(&ls->mu);
        char *e = ls->last_error ? strdup(ls->last_error) : NULL;
        pthread_mutex_unlock(&ls->mu);
        if (e) {
            lua_pushstring(L, e);
            lua_setfield(L, -2, "last_error");
            free(e);
        }
    }
}

int seda__l_push_stats(lua_State *L, struct lbus *lb, const char *name)
{
    if (!lb->bus) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        return 2;
    }
    if (name) {
        seda_stage_t *st = seda_bus_stage(lb->bus, name);
        if (st) {
            push_stage_stats(L, st);
            return 1;
        }
        lua_pushnil(L);
        lua_pushliteral(L, "no_such_stage");
        return 2;
    }
    seda_bus_stats b;
    seda_bus_stats_get(lb->bus, &b);
    lua_createtable(L, 0, 14);
    lua_createtable(L, 0, b.stages);
    for (int i = 0; i < b.stages; i++) {
        seda_stage_t *st = seda_bus_stage_at(lb->bus, i);
        if (!st)
            break;
        push_stage_stats(L, st);
        lua_setfield(L, -2, seda_stage_name(st));
    }
    lua_setfield(L, -2, "stages");
    set_int(L, "accepted", (lua_Integer)b.accepted);
    set_int(L, "completed", (lua_Integer)b.completed);
    set_int(L, "dead_lettered", (lua_Integer)b.dead_lettered);
    set_int(L, "dropped", (lua_Integer)b.dropped);
    set_int(L, "in_system", (lua_Integer)b.in_system);
    set_int(L, "workers", b.workers);
    set_int(L, "workers_loaned", b.workers_loaned);
    set_int(L, "loans", (lua_Integer)b.loans);
    set_int(L, "loans_peak", b.loans_peak);
    set_int(L, "max_loans", b.max_loans);
    lua_pushboolean(L, b.paused);
    lua_setfield(L, -2, "paused");
    lua_pushboolean(L, b.closed);
    lua_setfield(L, -2, "closed");
    return 1;
}

/* ---- bus methods ---- */

struct lbusud *seda__l_check_bus(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    if (!u->lb || !u->lb->bus)
        luaL_error(L, "attempt to use a closed bus");
    return u;
}

/* Short name used below. */
#define check_bus seda__l_check_bus


static int l_bus_publish(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    return seda__l_publish(L, u->lb, 2, &u->wb, true);
}

static int l_bus_publish_many(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    luaL_checkstring(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 4);
    seda_publish_opts o;
    int cbidx = parse_opts(L, 4, &o, true, "publish_many");
    const char *to = lua_tostring(L, 2);
    int n = (int)lua_rawlen(L, 3);
    /* Encode first, then one admission step per run of payloads of the
     * same kind (the core takes one kind per call).  A payload that
     * cannot be encoded is the first refusal: those before it go. */
    const void **ps = lua_newuserdatauv(L, sizeof(void *) * (size_t)(n + 1),
                                        0);
    size_t *lens = lua_newuserdatauv(L, sizeof(size_t) * (size_t)(n + 1), 0);
    size_t *offs = lua_newuserdatauv(L, sizeof(size_t) * (size_t)(n + 1), 0);
    int *kinds = lua_newuserdatauv(L, sizeof(int) * (size_t)(n + 1), 0);
    luaL_checkstack(L, n + 8, "publish_many: too many payloads");
    u->wb.len = 0;
    char err[512];
    int nenc = n;                   /* payloads before the first bad one */
    int erridx = 0;                 /* its message on the stack */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 3, i + 1);               /* stays on the stack */
        const void *p;
        if (seda__l_encode_payload(L, -1, &u->wb, &p, &lens[i], &kinds[i],
                                   err, sizeof err) != 0) {
            nenc = i;
            lua_pushfstring(L, "payloads[%d]: %s", i + 1, err);
            erridx = lua_gettop(L);
            break;
        }
        /* wb may move while growing: keep offsets, fix pointers after. */
        offs[i] = kinds[i] == SEDA_KIND_RAW
                      ? (size_t)-1
                      : (size_t)((const unsigned char *)p - u->wb.p);
        ps[i] = p;
    }
    for (int i = 0; i < nenc; i++)
        if (offs[i] != (size_t)-1)
            ps[i] = u->wb.p + offs[i];
    struct lcb *cb = NULL;
    if (cbidx && nenc > 0) {
        cb = cb_new(L, cbidx, nenc + 1);        /* +1: held until below */
        o.done = on_done;
        o.done_ud = cb;
    }
    int done = 0, rc = 0;
    while (done < nenc && rc == 0) {
        int k = done;
        while (k < nenc && kinds[k] == kinds[done])
            k++;
        o.kind = kinds[done];
        done += seda_publish_many(u->lb->bus, to, ps + done, lens + done,
                                  k - done, &o, &rc);
    }
    if (cb)
        cb_release(L, cb, nenc - done + 1);
    if (rc == SEDA_EINVAL && o.id)
        id_misuse(L, to);
    lua_pushinteger(L, done);
    if (rc) {
        lua_pushstring(L, rc == SEDA_ETYPE ? seda_last_check_error()
                                           : seda_strerror(rc));
        return 2;
    }
    if (erridx) {
        lua_pushvalue(L, erridx);
        return 2;
    }
    return 1;
}

static int l_bus_receive(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    return seda__l_receive(L, u->lb, 2, &u->wb, 1);
}

static int l_bus_stats(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    return seda__l_push_stats(L, u->lb, luaL_optstring(L, 2, NULL));
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

static int l_bus_poll(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    lua_pushinteger(L, u->lb ? run_completions(L, u->lb) : 0);
    return 1;
}

/* Wait for a completion to be queued, at most until deadline (seconds). */
static void wait_completion(struct lbus *lb, double until)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double slice = until - seda_now();
    if (slice > 0.01)
        slice = 0.01;
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

/* Run completions until the bus is idle and none are left, or until the
 * deadline.  Returns true when idle. */
static bool wait_idle(lua_State *L, struct lbus *lb, double timeout)
{
    double until = timeout < 0 ? 1e300 : seda_now() + timeout;
    for (;;) {
        run_completions(L, lb);
        if ((lb->shut || seda_bus_wait_idle(lb->bus, 0) == 0) &&
            !completions_pending(lb))
            return true;
        if (seda_now() >= until)
            return false;
        if (seda__l_interrupt_pending && seda__l_callback_depth == 0 &&
            seda__l_interrupt_pending(L))
            return false;
        wait_completion(lb, until);
    }
}

static int l_bus_wait(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    double t = luaL_optnumber(L, 2, -1);
    lua_pushboolean(L, wait_idle(L, u->lb, t));
    return 1;
}

static void unregister_bus(lua_State *L, int idx)
{
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
    int rc = seda_bus_shutdown(u->lb->bus, t);
    u->lb->shut = true;
    run_completions(L, u->lb);
    cb_flush();
    unregister_bus(L, 1);
    lua_pushboolean(L, rc == 0);
    return 1;
}

static int l_bus_shutdown_now(lua_State *L)
{
    struct lbusud *u = check_bus(L);
    seda_bus_shutdown_now(u->lb->bus);
    u->lb->shut = true;
    run_completions(L, u->lb);
    cb_flush();
    unregister_bus(L, 1);
    return 0;
}

static int l_bus_gc(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    struct lbus *lb = u->lb;
    if (!lb)
        return 0;
    u->lb = NULL;
    seda_bus_free(lb->bus);             /* joins the workers */
    lb->bus = NULL;
    for (struct lcompletion *c = lb->chead, *next; c; c = next) {
        next = c->next;
        cb_release(L, c->cb, 1);
        completion_free(c);
    }
    for (int i = 0; i < lb->nstages; i++)
        seda__l_lstage_free(lb->stages[i]);
    free(lb->stages);
    free(lb->package_path);
    free(lb->package_cpath);
    pthread_cond_destroy(&lb->cv);
    pthread_mutex_destroy(&lb->mu);
    free(lb);
    seda__wbuf_free(&u->wb);
    return 0;
}

static int l_bus_close(lua_State *L)
{
    struct lbusud *u = luaL_checkudata(L, 1, LSEDA_BUS_MT);
    if (u->lb && u->lb->bus && !u->lb->shut) {
        seda_bus_shutdown(u->lb->bus, 30.0);
        u->lb->shut = true;
        run_completions(L, u->lb);
        cb_flush();
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
    "data_dir", "sync", "max_loans", NULL
};

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
    lua_getfield(L, 1, "workers");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer w = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || w <= 0 || w > 1024)
            return luaL_error(L, "bus: workers must be an integer in "
                              "1..1024");
        o.workers = (int)w;
    }
    lua_getfield(L, 1, "max_loans");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer m = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || m < 0 || m > SEDA_MAX_LOANS)
            return luaL_error(L, "bus: max_loans must be an integer in "
                              "0..%d", SEDA_MAX_LOANS);
        o.max_loans = m == 0 ? -1 : (int)m;     /* C: -1 means none */
    }
    lua_getfield(L, 1, "batch");
    if (!lua_isnil(L, -1)) {
        int isint = 0;
        lua_Integer b = lua_type(L, -1) == LUA_TNUMBER
                            ? lua_tointegerx(L, -1, &isint) : 0;
        if (!isint || b <= 0 || b > 256)
            return luaL_error(L, "bus: batch must be an integer in 1..256");
        o.batch = (int)b;
    }
    lua_getfield(L, 1, "hop_timeout");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) >= 0))
            return luaL_error(L, "bus: hop_timeout must be a number >= 0");
        o.hop_timeout = lua_tonumber(L, -1);
    }
    lua_getfield(L, 1, "dead_letter");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING ||
            !seda__l_valid_name(lua_tostring(L, -1)))
            return luaL_error(L, "bus: dead_letter must be a stage name");
        o.dead_letter = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "data_dir");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING || !*lua_tostring(L, -1))
            return luaL_error(L, "bus: data_dir must be a directory path");
        o.data_dir = lua_tostring(L, -1);
    }
    lua_getfield(L, 1, "sync");
    if (!lua_isnil(L, -1)) {
        const char *sy = lua_tostring(L, -1);
        if (lua_type(L, -1) != LUA_TSTRING ||
            (strcmp(sy, "full") != 0 && strcmp(sy, "normal") != 0))
            return luaL_error(L, "bus: sync must be \"full\" or \"normal\"");
        o.sync_normal = strcmp(sy, "normal") == 0;
    }
    size_t memory_limit = (size_t)256 << 20;
    lua_getfield(L, 1, "memory_limit");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER || !(lua_tonumber(L, -1) > 0))
            return luaL_error(L, "bus: memory_limit must be a number of "
                              "bytes > 0");
        memory_limit = (size_t)lua_tonumber(L, -1);
    }

    struct lbusud *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, LSEDA_BUS_MT);
    int ud = lua_gettop(L);
    struct lbus *lb = calloc(1, sizeof *lb);
    if (!lb)
        return luaL_error(L, "bus: out of memory");
    pthread_mutex_init(&lb->mu, NULL);
    pthread_cond_init(&lb->cv, NULL);
    u->lb = lb;
    lb->memory_limit = memory_limit;
    lua_getglobal(L, "package");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "path");
        lb->package_path = dupstr(lua_tostring(L, -1));
        lua_getfield(L, -2, "cpath");
        lb->package_cpath = dupstr(lua_tostring(L, -1));
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
    o.worker_start = seda__lw_start;
    o.worker_stop = seda__lw_stop;
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
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushvalue(L, ud);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_pushvalue(L, ud);
    return 1;
}

/* ---- embedding ---- */

seda_bus_t *seda_lua_tobus(lua_State *L, int idx)
{
    struct lbusud *u = luaL_testudata(L, idx, LSEDA_BUS_MT);
    return u && u->lb && !u->lb->shut ? u->lb->bus : NULL;
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
    seda__wbuf_free(&wb);
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

/* Run pending completions of every live bus once; returns how many ran. */
static int l_poll_all(lua_State *L)
{
    int ran = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        struct lbusud *u = lua_touserdata(L, -1);
        if (u->lb)
            ran += run_completions(L, u->lb);
    }
    lua_pop(L, 1);
    lua_pushinteger(L, ran);
    return 1;
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

/* seda.buses(): the live bus objects (created and not yet shut down). */
static int l_buses(lua_State *L)
{
    lua_newtable(L);
    int n = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, BUSES_KEY);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, ++n);
    }
    lua_pop(L, 1);
    return 1;
}

static const luaL_Reg bus_methods[] = {
    { "handler_files", seda__l_bus_handler_files },
    { "tune", seda__l_bus_tune },
    { "workers", l_bus_workers },
    { "stage", seda__l_bus_stage },
    { "publish", l_bus_publish },
    { "publish_many", l_bus_publish_many },
    { "receive", l_bus_receive },
    { "stats", l_bus_stats },
    { "pause", l_bus_pause },
    { "resume", l_bus_resume },
    { "wait", l_bus_wait },
    { "poll", l_bus_poll },
    { "shutdown", l_bus_shutdown },
    { "shutdown_now", l_bus_shutdown_now },
    { "reload", seda__l_bus_reload },
    { NULL, NULL }
};

static const luaL_Reg module_funcs[] = {
    { "bus", l_bus_new },
    { "buses", l_buses },
    { "now", l_now },
    { "encode", l_encode },
    { "decode", l_decode },
    { "_poll_all", l_poll_all },
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
    luaL_newlib(L, module_funcs);
    lua_pushliteral(L, SEDA_VERSION);
    lua_setfield(L, -2, "version");
    seda__l_push_shared(L);
    lua_setfield(L, -2, "shared");
    return 1;
}
