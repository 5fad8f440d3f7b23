/* SPDX-License-Identifier: MIT */
/*
 * lio.c -- the I/O functions of the `seda` table (SPEC.md section 12):
 * seda.sleep and seda.http.request, the loop a Lua state uses, and the
 * one way every I/O binding waits for its op (seda__l_io_wait).
 * seda.socket is in lio_tcp.c.  Uses include/seda_io.h only.
 *
 * DESIGN
 *   Which loop: seda__l_io_loop, the only place that knows.  A worker
 *   state uses its bus's loop: made on the first wait of any of its
 *   handlers, without a thread (seda_io_loop_new_driven), its descriptor
 *   one watch of the bus's readiness set, so the workers run its turns
 *   between tasks and a handler's op starts on the worker that submits
 *   it.  Any other state (the main one) has a loop of its own, with its
 *   own thread, made on first use and kept in the registry by a userdata
 *   whose __gc frees it, so a script that never does I/O starts no
 *   thread.
 *
 *   Waiting: a binding checks its arguments, pushes an op box (anchoring
 *   the op and a malloc'd waiter: an error anywhere later frees both
 *   through __gc), submits with seda__l_io_cb, then returns
 *   seda__l_io_wait(L, box, k, ctx).  The callback, on the loop thread
 *   (for a bus's loop: the worker running its turn, possibly the
 *   submitting one, inside the submission), sets the waiter's flag under
 *   its mutex and signals; it never touches a Lua state.  The wait blocks
 *   on that for now and then calls k, the continuation that reads the
 *   op's results and pushes them.  Because k is a lua_KFunction that
 *   finds the box at an absolute stack index, the wait can become a
 *   lua_yieldk with the callback resuming the coroutine, without touching
 *   the bindings.  The waiter is separate from the box so that a callback
 *   firing after the box was collected (an abandoned coroutine, later)
 *   touches live memory: it holds its own reference.
 *
 *   Locks around a bus's loop, whose turn runs on whatever thread drives
 *   it (a worker in the watch's callback, a handler inside its
 *   submission, a waiter below): the callback takes a waiter's mu, then
 *   (seda__l_suspend_post) the worker's mail_mu and the pool's lock.  So
 *   no thread submits to, or drives, the loop while holding any of them,
 *   nor lb->mu (seda__l_io_loop releases it before returning; the
 *   readiness set's lock is taken under it only to add the watch, and
 *   the watch's callback takes neither).  The loop's own lock is a leaf.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "lio.h"
#include "lworker.h"

#define LOOP_KEY "seda.io.loop"     /* registry: the loop userdata */
#define LOOP_MT "seda.io.loopbox"   /* its metatable (another key) */

#define HTTP_TIMEOUT_DEFAULT 30.0   /* seconds, when none is given */

/* ---- the loop of a state ---- */

struct lio_loop {
    seda_io_loop_t *loop;       /* NULL once freed */
};

static int loop_gc(lua_State *L)
{
    struct lio_loop *ll = lua_touserdata(L, 1);
    seda_io_loop_free(ll->loop);
    ll->loop = NULL;
    return 0;
}

/* The watch of a bus's loop, on a worker: a turn, then the watch armed
 * again.  One-shot, so that while one worker runs the turn the others do
 * not wake again and again for the same level; re-armed after the turn,
 * when epoll checks the level anew, so readiness left over (or come
 * meanwhile) is reported at once.  Reads lb->io and lb->io_watch without
 * lb->mu: both were written before the watch existed (seda_watch_add
 * stores the handle under the readiness set's lock, which the dispatch
 * takes before calling this) and change only after the workers are
 * joined. */
static void bus_loop_ready(void *ud, uint32_t events)
{
    (void)events;
    struct lbus *lb = ud;
    seda_io_loop_run(lb->io);
    (void)seda_watch_mod(lb->io_watch, EPOLLIN | EPOLLONESHOT);
}

/* A bus's loop (lb->mu held): driven by its workers through one watch of
 * their readiness set, so it has no thread; a loop with its own thread
 * only if the bus is already stopping (no watch can be added then). */
static int bus_loop_new(struct lbus *lb)
{
    seda_io_loop_t *io;
    int rc = seda_io_loop_new_driven(&io);
    if (rc != 0)
        return rc;
    seda_io_http_set_idle(io, lb->http_idle);
    lb->io = io;                /* before the watch: its callback reads it */
    if (seda_watch_add(lb->bus, seda_io_loop_fd(io), EPOLLIN | EPOLLONESHOT,
                       bus_loop_ready, lb, &lb->io_watch) == 0)
        return 0;
    seda_io_loop_free(io);
    lb->io = NULL;
    lb->io_watch = NULL;
    rc = seda_io_loop_new(&lb->io);
    if (rc == 0)
        seda_io_http_set_idle(lb->io, lb->http_idle);
    return rc;
}

seda_io_loop_t *seda__l_io_loop(lua_State *L)
{
    /* A worker's state uses its bus's loop, made on the first wait of any
     * of its handlers and driven by the bus's workers. */
    struct lworker *w = seda__l_worker_of(L);
    if (w && w->lb) {
        pthread_mutex_lock(&w->lb->mu);
        int rc = w->lb->io ? 0 : bus_loop_new(w->lb);
        seda_io_loop_t *io = w->lb->io;
        pthread_mutex_unlock(&w->lb->mu);
        if (rc != 0)
            luaL_error(L, "cannot start the I/O loop: %s",
                       seda_io_strerror(rc));
        return io;
    }
    if (lua_getfield(L, LUA_REGISTRYINDEX, LOOP_KEY) == LUA_TUSERDATA) {
        struct lio_loop *ll = lua_touserdata(L, -1);
        lua_pop(L, 1);
        if (ll->loop)
            return ll->loop;
        luaL_error(L, "the I/O loop of this state is closed");
    }
    lua_pop(L, 1);
    struct lio_loop *ll = lua_newuserdatauv(L, sizeof *ll, 0);
    ll->loop = NULL;
    if (luaL_newmetatable(L, LOOP_MT)) {
        lua_pushcfunction(L, loop_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    int rc = seda_io_loop_new(&ll->loop);
    if (rc != 0)
        luaL_error(L, "cannot start the I/O loop: %s", seda_io_strerror(rc));
    lua_setfield(L, LUA_REGISTRYINDEX, LOOP_KEY);
    return ll->loop;
}

/* ---- the op box and the wait ---- */

static void waiter_release(struct lio_waiter *w)
{
    if (!w || atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static int op_gc(lua_State *L)
{
    struct lio_op *b = luaL_checkudata(L, 1, LIO_OP_MT);
    seda__l_io_op_done(b);
    waiter_release(b->w);
    b->w = NULL;
    return 0;
}

struct lio_op *seda__l_io_op_push(lua_State *L)
{
    struct lio_op *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->op = NULL;
    b->w = NULL;
    if (luaL_newmetatable(L, LIO_OP_MT)) {
        lua_pushcfunction(L, op_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, op_gc);
        lua_setfield(L, -2, "__close");
    }
    lua_setmetatable(L, -2);
    struct lio_waiter *w = malloc(sizeof *w);
    if (!w)
        luaL_error(L, "not enough memory");
    atomic_init(&w->refs, 1);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->fired = false;
    w->call = NULL;
    b->w = w;
    return b;
}

void *seda__l_io_ud(struct lio_op *b)
{
    atomic_fetch_add_explicit(&b->w->refs, 1, memory_order_relaxed);
    return b->w;
}

void seda__l_io_unarm(struct lio_op *b)
{
    waiter_release(b->w);       /* the box still holds one: never frees */
}

void seda__l_io_cb(seda_io_op_t *op, void *ud)
{
    (void)op;
    struct lio_waiter *w = ud;
    pthread_mutex_lock(&w->mu);
    w->fired = true;
    struct lcall *c = w->call;
    if (!c)
        pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (c)
        seda__l_suspend_post(c);
    waiter_release(w);
}

void seda__l_io_op_done(struct lio_op *b)
{
    seda_io_op_free(b->op);
    b->op = NULL;
}

/* A suspended call's wait, seen from lsuspend.c: end it early (its
 * callback still comes). */
static void box_cancel(void *arg)
{
    struct lio_op *b = arg;
    if (b->op)
        seda_io_cancel(b->op);
}

int seda__l_io_wait(lua_State *L, int box, lua_KFunction k, lua_KContext ctx)
{
    struct lio_op *b = lua_touserdata(L, box);
    struct lio_waiter *w = b->w;
    struct lcall *c = seda__l_suspend_begin(L);
    if (c) {
        /* Whichever comes second, this or the callback, posts the call
         * (it runs after the batch call that yields it returned). */
        pthread_mutex_lock(&w->mu);
        w->call = c;
        bool fired = w->fired;
        pthread_mutex_unlock(&w->mu);
        if (fired)
            seda__l_suspend_post(c);
        return seda__l_suspend_yield(L, c, box_cancel, b, ctx, k);
    }
    /* Block until the callback fired, with a loan on a pool worker.
     * Every op ends by itself (its own deadline, or the peer), except
     * those the script asked to wait forever (no timeout): the wait
     * re-checks each second, so it is a loop on the predicate with a
     * deadline per round, never unbounded inside one pthread call. */
    /* On a loop the workers drive, every worker may be waiting like this
     * one (or the pool stopping): each round also drives it, so the op
     * ends even when no worker serves the loop's watch (rounds of 10 ms:
     * when one does, the callback's signal ends the wait at once). */
    seda_io_loop_t *loop = seda__l_io_loop(L);
    bool driven = seda_io_loop_fd(loop) >= 0;
    void *loan = seda_block_begin();
    pthread_mutex_lock(&w->mu);
    while (!w->fired) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (driven) {
            ts.tv_nsec += 10000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
        } else {
            ts.tv_sec += 1;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (driven && !w->fired) {
            pthread_mutex_unlock(&w->mu);   /* the callback takes it */
            seda_io_loop_run(loop);
            pthread_mutex_lock(&w->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    seda_block_end(loan);
    return k(L, LUA_OK, ctx);
}

double seda__l_io_budget(lua_State *L, double t)
{
    double left = seda__l_suspend_budget(L);
    double v = left < 0 ? t : t < 0 || t > left ? left : t;
    /* The I/O layer reads 0 as "no timeout"; here 0 is none left (a
     * handler past its deadline) or LuaSocket's settimeout(0): do what
     * can be done at once, then time out. */
    return v == 0 ? 1e-9 : v;
}

/* ---- seda.sleep ---- */

static int sleep_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct lio_op *b = lua_touserdata(L, (int)ctx);
    seda__l_io_op_done(b);
    return 0;
}

/* seda.sleep(seconds): returns nothing, after SECONDS (<= 0: the loop's
 * next turn).  Raises on a bad argument. */
static int l_sleep(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.sleep");
    double secs = luaL_checknumber(L, 1);
    luaL_argcheck(L, !isnan(secs), 1, "seconds is NaN");
    seda_io_loop_t *loop = seda__l_io_loop(L);
    lua_settop(L, 1);
    struct lio_op *b = seda__l_io_op_push(L);           /* 2 */
    double budget = seda__l_io_budget(L, -1);
    if (budget >= 0 && budget < secs)
        secs = budget;              /* handler_timeout comes first */
    int rc = seda_io_sleep(loop, secs, seda__l_io_cb, seda__l_io_ud(b), &b->op);
    if (rc != 0) {
        seda__l_io_unarm(b);
        return luaL_error(L, "seda.sleep: %s", seda_io_strerror(rc));
    }
    return seda__l_io_wait(L, 2, sleep_k, 2);
}

/* ---- seda.http.request ---- */

/* Stack of a request while it runs: 1 the options table, 2 method,
 * 3 url, 4 the header lines' array, 5 the op box; then the line strings
 * (anchoring them). */
enum { H_OPTS = 1, H_METHOD, H_URL, H_LINES, H_BOX };

static bool token_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s <= ' ' || *s == ':' || *s >= 127)
            return false;
    return true;
}

static bool value_ok(const char *s, size_t len)
{
    return !memchr(s, '\r', len) && !memchr(s, '\n', len) &&
           !memchr(s, '\0', len);
}

static int http_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    struct lio_op *b = lua_touserdata(L, H_BOX);
    seda_io_op_t *op = b->op;
    double timeout = lua_tonumber(L, (int)ctx);
    int st = seda_io_op_status(op);
    const char *method = lua_tostring(L, H_METHOD);
    const char *url = lua_tostring(L, H_URL);
    if (st != SEDA_IO_OK) {
        lua_pushnil(L);
        if (st == SEDA_IO_TIMEOUT)
            lua_pushfstring(L, "timeout: %s %s (after %f s)", method, url,
                            (lua_Number)timeout);
        else if (st == SEDA_IO_TOO_LARGE && *seda_io_op_message(op))
            lua_pushfstring(L, "too_large: %s %s (%s)", method, url,
                            seda_io_op_message(op));
        else if (st == SEDA_IO_TOO_LARGE) {
            lua_getfield(L, H_OPTS, "max_size");
            lua_Integer lim = lua_isinteger(L, -1) ? lua_tointeger(L, -1)
                            : (lua_Integer)SEDA_IO_HTTP_MAX_SIZE_DEFAULT;
            lua_pop(L, 1);
            lua_pushfstring(L, "too_large: %s %s (limit %I bytes)", method,
                            url, lim);
        } else if (*seda_io_op_message(op))
            lua_pushfstring(L, "%s: %s %s (%s)", seda_io_strerror(st), method,
                            url, seda_io_op_message(op));
        else
            lua_pushfstring(L, "%s: %s %s", seda_io_strerror(st), method, url);
        seda__l_io_op_done(b);
        return 2;
    }
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, seda_io_http_status(op));
    lua_setfield(L, -2, "status");
    size_t nh = seda_io_http_nheaders(op);
    lua_createtable(L, 0, (int)nh);
    for (size_t i = 0; i < nh; i++) {
        const char *n, *v;
        seda_io_http_header(op, i, &n, &v);
        lua_pushstring(L, v);
        lua_setfield(L, -2, n);
    }
    lua_setfield(L, -2, "headers");
    size_t len;
    const char *body = seda_io_http_body(op, &len);
    lua_pushlstring(L, body, len);
    lua_setfield(L, -2, "body");
    seda__l_io_op_done(b);
    return 1;
}

/* seda.http.request's options: every field is known (a typo is an
 * error naming it, not a silent default). */
static void req_fields_known(lua_State *L)
{
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        static const char *const known[] = { "method", "url", "headers",
            "body", "timeout", "max_size", "follow", NULL };
        bool ok = false;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (int i = 0; known[i]; i++)
                ok = ok || strcmp(lua_tostring(L, -2), known[i]) == 0;
        if (!ok)
            luaL_error(L, "seda.http.request: unknown field %s",
                       lua_type(L, -2) == LUA_TSTRING
                       ? lua_tostring(L, -2) : luaL_typename(L, -2));
        lua_pop(L, 1);
    }
}

/* The headers option as "name: value" lines: the lines array replaces
 * the option at H_LINES, H_BOX is pushed (nil), and the lines' strings
 * stay anchored on the stack under the headers table. */
static void req_headers(lua_State *L, struct seda_io_http_req *req)
{
    int ht = lua_getfield(L, 1, "headers");
    if (ht != LUA_TNIL && ht != LUA_TTABLE)
        luaL_error(L, "seda.http.request: field headers must be a "
                   "table of name = value");
    size_t nh = 0;
    if (ht == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, 4)) {
            nh++;
            lua_pop(L, 1);
        }
    }
    const char **lines = lua_newuserdatauv(L, (nh ? nh : 1) * sizeof *lines, 0);
    lua_replace(L, H_LINES);    /* over the headers table (fetched again) */
    lua_pushnil(L);             /* H_BOX: the box, pushed once all is
                                   checked */
    lua_getfield(L, 1, "headers");
    int htab = lua_gettop(L);
    if (ht == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, htab)) {
            if (lua_type(L, -2) != LUA_TSTRING ||
                !token_ok(lua_tostring(L, -2)))
                luaL_error(L, "seda.http.request: field headers has "
                           "a bad name");
            int vt = lua_type(L, -1);
            if (vt != LUA_TSTRING && vt != LUA_TNUMBER)
                luaL_error(L, "seda.http.request: field headers.%s "
                           "must be a string", lua_tostring(L, -2));
            size_t vlen;
            const char *v = lua_tolstring(L, -1, &vlen);
            if (!value_ok(v, vlen))
                luaL_error(L, "seda.http.request: field headers.%s "
                           "has a control character",
                           lua_tostring(L, -2));
            lua_pushfstring(L, "%s: %s", lua_tostring(L, -2), v);
            /* Anchor the line below the iteration's key. */
            lua_insert(L, htab);
            htab++;
            lines[req->nheaders++] = lua_tostring(L, htab - 1);
            lua_pop(L, 1);
        }
    }
    req->headers = lines;
}

/* timeout (within the handler's budget), max_size and follow; pushes
 * the timeout in effect. */
static void req_limits(lua_State *L, struct seda_io_http_req *req)
{
    int tt = lua_getfield(L, 1, "timeout");
    if (tt == LUA_TNIL)
        req->timeout = HTTP_TIMEOUT_DEFAULT;
    else if (tt == LUA_TNUMBER && lua_tonumber(L, -1) > 0)
        req->timeout = lua_tonumber(L, -1);
    else
        luaL_error(L, "seda.http.request: field timeout must be a "
                   "positive number of seconds");
    lua_pop(L, 1);
    /* handler_timeout comes first (libcurl takes 0 as "none"). */
    req->timeout = seda__l_io_budget(L, req->timeout);
    if (req->timeout < 0.001)
        req->timeout = 0.001;
    lua_pushnumber(L, req->timeout);   /* the budget, at the top: k's */
    int mt = lua_getfield(L, 1, "max_size");
    if (mt == LUA_TNUMBER && lua_isinteger(L, -1) && lua_tointeger(L, -1) > 0)
        req->max_size = (size_t)lua_tointeger(L, -1);
    else if (mt != LUA_TNIL)
        luaL_error(L, "seda.http.request: field max_size must be a "
                   "positive integer (bytes)");
    lua_pop(L, 1);
    int ft = lua_getfield(L, 1, "follow");
    if (ft != LUA_TNIL && ft != LUA_TBOOLEAN)
        luaL_error(L, "seda.http.request: field follow must be a "
                   "boolean");
    req->follow = lua_toboolean(L, -1);
    lua_pop(L, 1);
}

/* seda.http.request{ method =, url =, headers =, body =, timeout =,
 * max_size =, follow = } -> { status =, headers =, body = } or nil, err.
 * Raises on a bad field (naming it). */
static int l_http_request(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.http.request");
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    req_fields_known(L);
    struct seda_io_http_req req = { 0 };
    if (lua_getfield(L, 1, "method") == LUA_TNIL) {             /* 2 */
        lua_pop(L, 1);
        lua_pushliteral(L, "GET");
    } else if (lua_type(L, 2) != LUA_TSTRING || !token_ok(lua_tostring(L, 2)))
        return luaL_error(L, "seda.http.request: field method must be a "
                          "method name such as \"GET\"");
    req.method = lua_tostring(L, 2);
    if (lua_getfield(L, 1, "url") != LUA_TSTRING)               /* 3 */
        return luaL_error(L, "seda.http.request: field url must be a string");
    size_t ulen;
    req.url = lua_tolstring(L, 3, &ulen);
    if (!value_ok(req.url, ulen) || strlen(req.url) != ulen)
        return luaL_error(L, "seda.http.request: field url has a control "
                          "character");
    req_headers(L, &req);
    int bt = lua_getfield(L, 1, "body");
    if (bt == LUA_TSTRING)
        req.body = lua_tolstring(L, -1, &req.body_len);
    else if (bt != LUA_TNIL)
        return luaL_error(L, "seda.http.request: field body must be a string");
    /* The body string stays anchored in the options table. */
    lua_pop(L, 1);
    req_limits(L, &req);
    int tidx = lua_gettop(L);

    seda_io_loop_t *loop = seda__l_io_loop(L);
    struct lio_op *b = seda__l_io_op_push(L);
    lua_replace(L, H_BOX);
    int rc = seda_io_http_request(loop, &req, seda__l_io_cb, seda__l_io_ud(b),
                                  &b->op);
    if (rc != 0) {
        seda__l_io_unarm(b);
        lua_pushnil(L);
        lua_pushfstring(L, "other: %s %s (%s)", req.method, req.url,
                        seda_io_strerror(rc));
        return 2;
    }
    return seda__l_io_wait(L, H_BOX, http_k, tidx);
}

/* ---- registration ---- */

void seda__l_io_register(lua_State *L)
{
    lua_pushcfunction(L, l_sleep);
    lua_setfield(L, -2, "sleep");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_http_request);
    lua_setfield(L, -2, "request");
    lua_setfield(L, -2, "http");
    seda__l_io_push_socket(L);
    lua_setfield(L, -2, "socket");
    lua_pushcfunction(L, seda__l_suspend_blocking);
    lua_setfield(L, -2, "blocking");
}

void seda__l_io_drive(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    seda_io_loop_t *io = lb->io;
    pthread_mutex_unlock(&lb->mu);
    if (io)
        seda_io_loop_run(io);
}
