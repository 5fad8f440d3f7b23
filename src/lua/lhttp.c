/* SPDX-License-Identifier: MIT */
/*
 * lhttp.c -- bus:listen: HTTP requests as itineraries (SPEC.md section 13).
 *
 * DESIGN
 *   The server (include/seda_http.h) has no thread: its sockets are
 *   watched by the bus's workers (seda_watch_add), and it hands whole
 *   requests over on the worker that read them.  There, with no Lua state
 *   of the worker's, a request becomes an envelope: the
 *   payload { method =, path =, query = {...}, headers = {...}, body = } is
 *   written in the codec's wire format directly (lcodec.c's header
 *   describes it), published to the route's first stage with the rest of
 *   the route as its slip and a done callback that holds the request.
 *   Publishing never waits (timeout 0): a refusal is answered 503 at once,
 *   with the reason in Seda-Reason.  Into a durable first stage the
 *   publish does not wait for its commit either (on_durable): requests
 *   that arrive meanwhile share the journal's next group commit, and a
 *   failed commit is answered 503 from the committing thread.  An answer
 *   comes only from the itinerary's end, after the commit.
 *
 *   The done callback runs where the itinerary ends (a worker, usually)
 *   and turns the final payload into the answer by reading the wire
 *   format, again without a Lua state (lhttp_answer.c).
 *
 *   A route whose first stage has an admit rule runs it in the listener's
 *   own Lua state (made on first use, one thread at a time: ldoor.c), as
 *   bus:publish runs it in the main state.
 *
 *   Listeners belong to their bus: bus:shutdown stops their accepting
 *   first, drains, then closes them; the bus's collection closes them.
 *   Main thread for everything but the two callbacks.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ldoor.h"
#include "lhttp_answer.h"
#include "lhttp_wire.h"
#include "lseda.h"
#include "seda_http.h"

#define LHTTP_MT "seda.listener"

struct lroute {
    char *method;               /* "POST", or "*" for any */
    char *path;
    int n;                      /* stages */
    char **stages;
};

/*
 * A listener.  Immutable after bus:listen but for the list link (lb->mu)
 * and the door state (server thread only).
 */
struct lhttp {
    struct lbus *lb;
    seda_http_server_t *srv;    /* NULL once closed */
    char *name;                 /* the address given */
    int nroutes;
    struct lroute *routes;
    struct ldoor door;          /* admit rules' state (ldoor.h) */
    struct lhttp *next;         /* lb's list; guarded by lb->mu */
};

static atomic_int open_listeners;   /* every bus's, for the program */

int seda__l_http_open(void)
{
    return atomic_load_explicit(&open_listeners, memory_order_relaxed);
}

/* ---- requests ---- */

/* The route for method and path: the one naming the method, else (for
 * HEAD) the GET one, else the one for any method -- whatever order the
 * routes table gave them in. */
static const struct lroute *route_of(const struct lhttp *h,
                                     const char *method, const char *path)
{
    const struct lroute *get = NULL, *any = NULL;
    for (int i = 0; i < h->nroutes; i++) {
        const struct lroute *r = &h->routes[i];
        if (strcmp(r->path, path) != 0)
            continue;
        if (strcmp(r->method, method) == 0)
            return r;
        if (strcmp(r->method, "GET") == 0 && strcmp(method, "HEAD") == 0)
            get = r;
        else if (strcmp(r->method, "*") == 0)
            any = r;
    }
    return get ? get : any;
}

/* The request as a Lua table on the door state (admit rules read it). */
static void push_request(lua_State *L, const void *req)
{
    const seda_http_req_t *r = req;
    lua_createtable(L, 0, 5);
    lua_pushstring(L, seda_http_req_method(r));
    lua_setfield(L, -2, "method");
    lua_pushstring(L, seda_http_req_path(r));
    lua_setfield(L, -2, "path");
    lua_newtable(L);
    for (int i = seda_http_req_query_count(r) - 1; i >= 0; i--) {
        const char *k, *v;
        seda_http_req_query_at(r, i, &k, &v);
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
    lua_setfield(L, -2, "query");
    lua_newtable(L);
    for (int i = seda_http_req_header_count(r) - 1; i >= 0; i--) {
        const char *k, *v;
        seda_http_req_header_at(r, i, &k, &v);
        lua_pushstring(L, v);
        lua_setfield(L, -2, k);
    }
    lua_setfield(L, -2, "headers");
    size_t blen;
    const void *body = seda_http_req_body(r, &blen);
    lua_pushlstring(L, body, blen);
    lua_setfield(L, -2, "body");
}

/* on_durable of a request whose first stage is durable: the committing
 * thread.  Accepted (0): nothing to do -- the itinerary's done callback
 * answers, and may already have (req is not touched).  Refused: the
 * envelope is gone and done never fires, so the answer is 503 here. */
static void on_durable(int rc, void *ud)
{
    if (rc != 0)
        seda__l_http_answer_plain(ud, 503, rc == SEDA_ETIMEDOUT ? "full"
                                  : seda_strerror(rc));
}

static void on_request(seda_http_req_t *req, void *ud)
{
    struct lhttp *h = ud;
    const struct lroute *rt = route_of(h, seda_http_req_method(req),
                                       seda_http_req_path(req));
    if (!rt) {
        seda__l_http_answer_plain(req, 404, "no_route");
        return;
    }
    seda_bus_t *bus = h->lb->bus;
    seda_stage_t *st = seda_bus_stage(bus, rt->stages[0]);
    if (!st) {
        int why = seda__l_door_lookup_error(bus);
        if (why != SEDA_ENOSTAGE)
            seda__l_http_answer_plain(req, 503, seda_strerror(why));
        else
            seda__l_http_answer_missing(req, rt->stages[0], NULL);
        return;
    }
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    char why[256];
    if (seda__l_door_admit(&h->door, st, "http", push_request, req,
                           rt->stages[0], &o.priority, why) != 0) {
        seda__l_http_answer_plain(req, 503, why);
        return;
    }
    unsigned char small[4096];
    struct buf bb = { small, 0, sizeof small, false, true };
    struct buf *b = &bb;
    seda__l_hw_encode_request(b, req);
    if (b->failed) {
        if (!b->borrowed)
            free(b->p);
        seda__l_http_answer_plain(req, 500, "out_of_memory");
        return;
    }
    o.done = seda__l_http_answer_done;
    o.done_ud = req;
    if (seda_stage_durability(st) != SEDA_MEMORY) {
        /* The server thread does not wait for the commit: requests
         * arriving meanwhile join the same group commit. */
        o.on_durable = on_durable;
        o.on_durable_ud = req;
    }
    const char *refused = seda__l_door_publish(st, rt->stages, rt->n, "http",
                                               b->p, b->len, &o, why,
                                               sizeof why);
    if (!b->borrowed)
        free(b->p);
    if (refused)
        seda__l_http_answer_plain(req, 503, refused);
}

/* ---- the loop: the bus's workers (SPEC.md section 16) ---- */

static int watch_add(void *ctx, int fd, uint32_t events,
                     seda_http_ready_fn fn, void *ud, void **watch)
{
    seda_watch_t *w;
    int rc = seda_watch_add(ctx, fd, events, fn, ud, &w);
    if (rc == 0)
        *watch = w;
    return rc;
}

static int watch_mod(void *watch, uint32_t events)
{
    return seda_watch_mod(watch, events);
}

static void watch_del(void *watch, seda_http_release_fn release)
{
    seda_watch_del(watch, release);
}

/* ---- the listener object ---- */

static void routes_free(struct lroute *r, int n)
{
    for (int i = 0; r && i < n; i++) {
        free(r[i].method);
        free(r[i].path);
        for (int j = 0; j < r[i].n; j++)
            free(r[i].stages[j]);
        free(r[i].stages);
    }
    free(r);
}

/* Stop and free h's server (its requests answered within grace). */
static void close_server(struct lhttp *h, double grace)
{
    /* Detached under the bus's mutex: stats() may read it from a worker
     * (seda.stats) or the observer thread. */
    pthread_mutex_lock(&h->lb->mu);
    seda_http_server_t *srv = h->srv;
    h->srv = NULL;
    pthread_mutex_unlock(&h->lb->mu);
    if (!srv)
        return;
    seda_http_server_free(srv, grace);
    atomic_fetch_sub_explicit(&open_listeners, 1, memory_order_relaxed);
    seda__l_door_reset(&h->door);
}

static void lhttp_free(struct lhttp *h)
{
    close_server(h, 0);
    seda__l_door_destroy(&h->door);
    routes_free(h->routes, h->nroutes);
    free(h->name);
    free(h);
}

struct lhttpud {
    struct lhttp *h;            /* NULL: a listen that failed */
};

static struct lhttp *check_listener(lua_State *L)
{
    struct lhttpud *u = luaL_checkudata(L, 1, LHTTP_MT);
    if (!u->h)
        luaL_error(L, "attempt to use a closed listener");
    return u->h;
}

static int l_listener_port(lua_State *L)
{
    struct lhttp *h = check_listener(L);
    if (!h->srv)
        return luaL_error(L, "attempt to use a closed listener");
    lua_pushinteger(L, seda_http_server_port(h->srv));
    return 1;
}

static int l_listener_close(lua_State *L)
{
    struct lhttpud *u = luaL_checkudata(L, 1, LHTTP_MT);
    double grace = luaL_optnumber(L, 2, 5.0);
    if (!(grace >= 0))                  /* -1, nan */
        return luaL_error(L, "close: grace must be a number of seconds >= "
                          "0 (got %f)", grace);
    if (u->h)
        close_server(u->h, grace);
    return 0;
}

/* A listener's figures, taken under the bus's mutex (the server cannot
 * be freed meanwhile) and pushed after it is released. */
struct lsnap {
    char name[128];
    int port;
    bool open;
    seda_http_stats st;
};

static void snap_locked(struct lhttp *h, struct lsnap *sn)
{
    memset(sn, 0, sizeof *sn);
    snprintf(sn->name, sizeof sn->name, "%s", h->name);
    if (h->srv) {
        sn->open = true;
        sn->port = seda_http_server_port(h->srv);
        seda_http_server_stats(h->srv, &sn->st);
    }
}

static void push_stats(lua_State *L, const struct lsnap *sn);

static int l_listener_stats(lua_State *L)
{
    struct lhttp *h = check_listener(L);
    struct lsnap sn;
    pthread_mutex_lock(&h->lb->mu);
    snap_locked(h, &sn);
    pthread_mutex_unlock(&h->lb->mu);
    push_stats(L, &sn);
    return 1;
}

static int l_listener_tostring(lua_State *L)
{
    struct lhttpud *u = luaL_checkudata(L, 1, LHTTP_MT);
    lua_pushfstring(L, "seda.listener (%s%s)", u->h ? u->h->name : "?",
                    u->h && u->h->srv ? "" : ", closed");
    return 1;
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void push_stats(lua_State *L, const struct lsnap *sn)
{
    const seda_http_stats s = sn->st;
    lua_createtable(L, 0, 16);
    lua_pushstring(L, sn->name);
    lua_setfield(L, -2, "address");
    set_int(L, "port", sn->port);
    set_int(L, "requests", (lua_Integer)s.requests);
    lua_createtable(L, 0, 6);
    static const char *const cls[] = { "503", "1xx", "2xx", "3xx", "4xx",
                                       "5xx" };
    /* A partition: "5xx" is the 5xx answers but 503 (the server counts a
     * 503 in both), so the classes add up to the answers. */
    for (int i = 0; i < 6; i++)
        set_int(L, cls[i], (lua_Integer)(i == 5 && s.responses[5] >=
                                         s.responses[0]
                                         ? s.responses[5] - s.responses[0]
                                         : s.responses[i]));
    lua_setfield(L, -2, "responses");
    set_int(L, "timeouts", (lua_Integer)s.timeouts);
    set_int(L, "too_large", (lua_Integer)s.too_large);
    set_int(L, "slow_clients", (lua_Integer)s.slow_clients);
    set_int(L, "connections", (lua_Integer)s.connections);
    set_int(L, "open_connections", s.open_connections);
    set_int(L, "waiting", s.waiting);
    set_num(L, "latency_p50", s.latency_p50 / 1e6);
    set_num(L, "latency_p99", s.latency_p99 / 1e6);
    set_num(L, "latency_max", s.latency_max / 1e6);
    set_int(L, "latency_count", (lua_Integer)s.latency_count);
    /* Since the listener opened: cumulative counts per bound, as
     * Prometheus's _bucket{le=} (the last, +Inf, is count). */
    lua_createtable(L, 0, 4);
    lua_createtable(L, SEDA_HTTP_HIST_N, 0);
    lua_createtable(L, SEDA_HTTP_HIST_N + 1, 0);
    uint64_t cum = 0;
    for (int i = 0; i <= SEDA_HTTP_HIST_N; i++) {
        cum += s.latency.n[i];
        if (i < SEDA_HTTP_HIST_N) {
            lua_pushnumber(L, seda_http_hist_le[i]);
            lua_rawseti(L, -3, i + 1);
        }
        lua_pushinteger(L, (lua_Integer)cum);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -3, "cum");
    lua_setfield(L, -2, "le");
    set_int(L, "count", (lua_Integer)s.latency.count);
    set_num(L, "sum", s.latency.sum);
    lua_setfield(L, -2, "latency_hist");
    set_num(L, "stats_window", 10);
    lua_pushboolean(L, sn->open);
    lua_setfield(L, -2, "open");
}

void seda__l_http_push_stats(lua_State *L, struct lbus *lb)
{
    /* Any thread (bus:stats, seda.stats in a handler, the observer):
     * count, make room (which may raise) with no lock held, then copy
     * under lb->mu and push after. */
    int n = 0;
    pthread_mutex_lock(&lb->mu);
    for (struct lhttp *h = lb->listeners; h; h = h->next)
        n++;
    pthread_mutex_unlock(&lb->mu);
    struct lsnap *sn = lua_newuserdatauv(L, sizeof *sn * (size_t)(n + 1), 0);
    int k = 0;
    pthread_mutex_lock(&lb->mu);
    for (struct lhttp *h = lb->listeners; h && k < n; h = h->next)
        snap_locked(h, &sn[k++]);
    pthread_mutex_unlock(&lb->mu);
    lua_createtable(L, 0, k);
    for (int i = 0; i < k; i++) {
        push_stats(L, &sn[i]);
        lua_setfield(L, -2, sn[i].name);
    }
    lua_remove(L, -2);                  /* the snapshots */
}

static const char *const listen_keys[] = {
    "http", "routes", "timeout", "max_body", "max_header",
    "max_connections", "client_timeout", "threads", NULL
};

/* The number at t[k], def when absent; raises naming k unless it is a
 * number from min to max (so that the casts below are defined). */
static double opt_num(lua_State *L, int t, const char *k, double def,
                      double min, double max)
{
    lua_getfield(L, t, k);
    double v = def;
    if (!lua_isnil(L, -1)) {
        v = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || !(v >= min && v <= max)) {
            char lo[32], hi[32];
            snprintf(lo, sizeof lo, "%.15g", min);
            snprintf(hi, sizeof hi, "%.15g", max);
            if (isinf(max))
                luaL_error(L, "listen: %s must be a number >= %s", k, lo);
            luaL_error(L, "listen: %s must be a number from %s to %s",
                       k, lo, hi);
        }
    }
    lua_pop(L, 1);
    return v;
}

/* Push s[0..n) with its control bytes (NUL, CR, LF, ...) written \xNN,
 * for an error message; returns it. */
static const char *shown(lua_State *L, const char *s, size_t n)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            char e[5];
            snprintf(e, sizeof e, "\\x%02x", c);
            luaL_addstring(&b, e);
        } else {
            luaL_addchar(&b, (char)c);
        }
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* Whether s[0..n) holds a control byte (a NUL, CR or LF among them). */
static bool has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return true;
    return false;
}

/* Parse the routes table at t into h (raises naming the route, and a
 * stage the bus does not have: a typo would be answered for ever). */
static void parse_routes(lua_State *L, int t, struct lhttp *h)
{
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        n++;
    }
    if (n == 0)
        luaL_error(L, "listen: routes must name at least one route");
    h->routes = calloc((size_t)n, sizeof *h->routes);
    if (!h->routes)
        luaL_error(L, "listen: out of memory");
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "listen: routes keys must be \"METHOD /path\" "
                       "strings");
        size_t klen;
        const char *key = lua_tolstring(L, -2, &klen);
        /* A NUL would cut the key here and a CR or LF could never arrive
         * in a request line: no request could match, say so now. */
        if (has_control(key, klen))
            luaL_error(L, "listen: route '%s': the method and path must not "
                       "hold control characters (NUL, CR, LF, ...)",
                       shown(L, key, klen));
        const char *sp = strchr(key, ' ');
        const char *path = sp ? sp + 1 : key;
        if (path[0] != '/')
            luaL_error(L, "listen: route '%s': expected \"METHOD /path\" "
                       "or \"/path\"", key);
        /* A route no request could match is a mistake: say so now rather
         * than answer 404 for ever.  (Any path can match: the request's
         * is percent-decoded, so "/a b" is "/a%20b".) */
        if (sp == key)
            luaL_error(L, "listen: route '%s': the method is empty", key);
        for (const char *c = key; sp && c < sp; c++)
            if (!((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  *c == '-' || *c == '_'))
                luaL_error(L, "listen: route '%s': the method must be "
                           "upper-case, such as GET or POST", key);
        if (!lua_istable(L, -1) || lua_rawlen(L, -1) == 0)
            luaL_error(L, "listen: route '%s' must be an array of stage "
                       "names", key);
        struct lroute *r = &h->routes[h->nroutes++];
        r->method = sp ? strndup(key, (size_t)(sp - key)) : strdup("*");
        r->path = strdup(path);
        r->n = (int)lua_rawlen(L, -1);
        r->stages = calloc((size_t)r->n, sizeof *r->stages);
        if (!r->method || !r->path || !r->stages)
            luaL_error(L, "listen: out of memory");
        for (int i = 0; i < r->n; i++) {
            lua_rawgeti(L, -1, i + 1);
            size_t sl = 0;
            const char *s = lua_tolstring(L, -1, &sl);
            /* (strlen: a name with a NUL would reach the stage before it) */
            if (lua_type(L, -1) != LUA_TSTRING || !seda__l_valid_name(s) ||
                strlen(s) != sl)
                luaL_error(L, "listen: route '%s': [%d] is not a valid "
                           "stage name%s%s%s", key, i + 1,
                           s ? " ('" : "", s ? shown(L, s, sl) : "",
                           s ? "')" : "");
            if (!seda_bus_stage(h->lb->bus, s))
                luaL_error(L, "listen: route '%s': stage '%s' does not "
                           "exist (declare it with bus:stage before "
                           "listen)", key, s);
            r->stages[i] = strdup(s);
            if (!r->stages[i])
                luaL_error(L, "listen: out of memory");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}

/* A half-made listener (userdata with __gc) frees itself if listen
 * raises. */
static int l_half_gc(lua_State *L)
{
    struct lhttpud *u = lua_touserdata(L, 1);
    if (u->h) {
        lhttp_free(u->h);
        u->h = NULL;
    }
    return 0;
}

int seda__l_http_listen(lua_State *L)
{
    struct lbusud *bu = seda__l_check_bus(L);
    struct lbus *lb = bu->lb;
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "nats") != LUA_TNIL)
        return seda__l_nats_listen(L);  /* NATS requests (lnats.c) */
    lua_pop(L, 1);
    seda__l_check_keys(L, 2, listen_keys, "listen");
    if (lb->shut || seda_bus_closed(lb->bus))
        return luaL_error(L, "listen: the bus is shut down");

    /* The object first: a raise below frees what was made. */
    struct lhttpud *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->h = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_half_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int ui = lua_gettop(L);
    struct lhttp *h = calloc(1, sizeof *h);
    if (!h)
        return luaL_error(L, "listen: out of memory");
    seda__l_door_init(&h->door);
    u->h = h;
    h->lb = lb;

    seda_http_opts o;
    seda_http_opts_init(&o);
    lua_getfield(L, 2, "http");
    if (lua_type(L, -1) == LUA_TNUMBER && lua_isinteger(L, -1)) {
        lua_pushfstring(L, "%d", (int)lua_tointeger(L, -1));
        lua_replace(L, -2);
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        return luaL_error(L, "listen: http must be \"ADDR:PORT\" or a port");
    h->name = strdup(lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!h->name)
        return luaL_error(L, "listen: out of memory");
    lua_getfield(L, 2, "routes");
    if (!lua_istable(L, -1))
        return luaL_error(L, "listen: routes must be a table of "
                          "[\"METHOD /path\"] = { stages... }");
    parse_routes(L, lua_gettop(L), h);
    lua_pop(L, 1);
    o.addr = h->name;
    o.timeout = opt_num(L, 2, "timeout", 30, 0.001, HUGE_VAL);
    o.max_body = (size_t)opt_num(L, 2, "max_body", 1048576, 0, 1e15);
    o.max_header = (size_t)opt_num(L, 2, "max_header", 16384, 1024, 0x1p30);
    o.max_connections = (int)opt_num(L, 2, "max_connections", 1024, 1, INT_MAX);
    o.client_timeout = opt_num(L, 2, "client_timeout", 10, 0.001, 1e9);
    lua_getfield(L, 2, "threads");
    if (!lua_isnil(L, -1))
        return luaL_error(L, "listen: threads is not an option: a listener "
                          "has no threads to size (SPEC 16: its requests "
                          "run on the bus's workers, sized by "
                          "bus:workers(n))");
    lua_pop(L, 1);
    o.on_request = on_request;
    o.ud = h;
    seda_http_loop loop = { lb->bus, watch_add, watch_mod, watch_del };
    o.loop = &loop;
    char err[256];
    int rc = seda_http_server_new(&o, &h->srv, err, sizeof err);
    if (rc)
        return luaL_error(L, "listen: %s", err);
    atomic_fetch_add_explicit(&open_listeners, 1, memory_order_relaxed);
    /* Named by where it listens: a port alone or port 0 says which. */
    const char *colon = strrchr(h->name, ':');
    const char *close = strrchr(h->name, ']');
    bool has_host = colon && (!close || colon > close);
    if (!has_host || strcmp(colon, ":0") == 0) {
        char nm[128];
        snprintf(nm, sizeof nm, "%.*s:%d",
                 has_host ? (int)(colon - h->name) : 9,
                 has_host ? h->name : "127.0.0.1",
                 seda_http_server_port(h->srv));
        char *n2 = strdup(nm);
        if (n2) {
            free(h->name);
            h->name = n2;
        }
    }

    /* Made: the bus owns it now; the object is a handle. */
    u->h = NULL;
    pthread_mutex_lock(&lb->mu);
    h->next = lb->listeners;
    lb->listeners = h;
    pthread_mutex_unlock(&lb->mu);
    lua_settop(L, ui - 1);
    /* The handle holds its bus (user value 1): the bus, which frees its
     * listeners when collected, outlives every handle. */
    struct lhttpud *hu = lua_newuserdatauv(L, sizeof *hu, 1);
    hu->h = h;
    luaL_setmetatable(L, LHTTP_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

void seda__l_http_quiesce(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    for (struct lhttp *h = lb->listeners; h; h = h->next)
        if (h->srv)
            seda_http_server_quiesce(h->srv);
    pthread_mutex_unlock(&lb->mu);
}

void seda__l_http_close_all(struct lbus *lb, double grace)
{
    pthread_mutex_lock(&lb->mu);
    struct lhttp *list = lb->listeners;
    pthread_mutex_unlock(&lb->mu);
    for (struct lhttp *h = list; h; h = h->next)
        close_server(h, grace);
}

void seda__l_http_free_all(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    struct lhttp *list = lb->listeners;
    lb->listeners = NULL;
    pthread_mutex_unlock(&lb->mu);
    /* No handle is left: each holds its bus. */
    for (struct lhttp *h = list, *next; h; h = next) {
        next = h->next;
        lhttp_free(h);
    }
}

void seda__l_http_open_lib(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "port", l_listener_port },
        { "close", l_listener_close },
        { "stats", l_listener_stats },
        { NULL, NULL }
    };
    if (luaL_newmetatable(L, LHTTP_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_listener_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
}
