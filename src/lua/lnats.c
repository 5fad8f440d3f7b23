/* SPDX-License-Identifier: MIT */
/*
 * lnats.c -- bus:listen{ nats = {...}, routes = {...} }: NATS requests
 * as itineraries, the bus answering as a NATS service (the micro
 * protocol of include/seda_remote.h: queue groups, Nats-Service-Error,
 * $SRV discovery).
 *
 * DESIGN
 *   As bus:listen's HTTP requests (lhttp.c), with no Lua state: on the
 *   service's subscription thread a request becomes the payload
 *   { subject =, headers = {...}, body = } in the codec's wire format
 *   (the body read by its Content-Type as a remote stage reads a
 *   message: application/json and application/msgpack decoded,
 *   application/x-seda as it is, application/octet-stream and none as a
 *   string, or none in the listener's format), published without waiting
 *   to the route's first stage, the rest of the route its slip, with a
 *   done callback holding the request.  That callback answers on the
 *   request's reply subject: a string payload as its bytes, any other
 *   value written in the listener's format (json unless told); a dead
 *   letter is error 500, a refusal at the door 503 with its reason, a
 *   request past `timeout` 504 (the service answers it).
 *
 *   Admit rules of a route's first stage run in the listener's own Lua
 *   state (made on first use: ldoor.c), as for HTTP.
 *
 *   Listeners belong to their bus: shutdown stops their subscriptions
 *   first (no new request; the answers of those in flight still go out);
 *   the bus's collection stops them before the bus is freed (no request
 *   publishes after) and frees them after it (every done callback ran).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lcodec_write.h"
#include "ldoor.h"
#include "lhttp_wire.h"
#include "lseda.h"
#include "seda_remote.h"

#define LNATS_MT "seda.nats_listener"

struct lnroute {
    char *name;                 /* the endpoint */
    char *subject;
    int n;                      /* stages */
    char **stages;
};

/*
 * A listener.  Immutable after bus:listen but for next (lb->mu), svc
 * (main thread; the callbacks run only while it is open) and the door
 * state (its own mutex).
 */
struct lnats {
    struct lbus *lb;
    seda_nsvc_t *svc;
    bool stopped;               /* main thread */
    char *service, *version;
    int nroutes;
    struct lnroute *routes;
    const seda_remote_format *format;   /* answers, bodies without a
                                           Content-Type; NULL: "seda" */
    bool raw_in;                /* no format given: such a body is a
                                   string */
    struct ldoor door;          /* admit rules' state (ldoor.h) */
    struct lnats *next;         /* lb's list; guarded by lb->mu */
};

static atomic_int open_services;

int seda__l_nats_open(void)
{
    return atomic_load_explicit(&open_services, memory_order_relaxed);
}

/* ---- the answer ---- */

struct lnreq {
    struct lnats *l;
    seda_nsvc_req_t *req;
};

static void on_done(seda_env_t *env, int outcome, void *ud)
{
    struct lnreq *q = ud;
    seda_nsvc_req_t *req = q->req;
    const struct lnats *l = q->l;
    free(q);
    if (outcome == SEDA_DEAD_LETTERED) {
        const char *why = seda_env_header(env, "x-dead-reason");
        const char *from = seda_env_header(env, "x-dead-from");
        char d[300];
        snprintf(d, sizeof d, "%s%s%s%s", why ? why : "dead_lettered",
                 from ? " (stage " : "", from ? from : "", from ? ")" : "");
        seda_nsvc_respond_error(req, 500, d);
        return;
    }
    if (outcome != SEDA_COMPLETED) {
        seda_nsvc_respond_error(req, 503, "dropped");
        return;
    }
    size_t len;
    const void *p = seda_env_payload(env, &len);
    int kind = seda_env_payload_kind(env);
    if (kind == SEDA_KIND_LUA) {
        struct cr r = { p, (const unsigned char *)p + len };
        struct cval v;
        if (seda__l_cr_head(&r, &v) == 0 && v.t == CV_STR) {
            const char *hv[] = { "Content-Type", "text/plain; charset=utf-8" };
            seda_nsvc_respond(req, hv, 1, v.s, v.len);
            return;
        }
        if (l->format) {
            void *out = NULL;
            size_t olen = 0;
            char err[200];
            if (l->format->encode(kind, p, len, &out, &olen, err,
                                  sizeof err) != 0) {
                char d[260];
                snprintf(d, sizeof d, "bad_response: %s", err);
                seda_nsvc_respond_error(req, 500, d);
                return;
            }
            const char *hv[] = { "Content-Type", l->format->content_type };
            seda_nsvc_respond(req, hv, 1, out ? out : p, out ? olen : len);
            free(out);
            return;
        }
        const char *hv[] = { "Content-Type", "application/x-seda" };
        seda_nsvc_respond(req, hv, 1, p, len);
        return;
    }
    const char *hv[] = { "Content-Type", "application/octet-stream" };
    seda_nsvc_respond(req, hv, 1, p, len);
}

/* ---- requests ---- */

/* The body as the payload's body value: 0, or -1 with why (the request
 * is answered 400). */
static int put_body(struct buf *b, const struct lnats *l,
                    const seda_nsvc_req_t *req, char *why, size_t n)
{
    size_t blen;
    const void *body = seda_nsvc_req_data(req, &blen);
    const char *ct = NULL;
    for (int i = seda_nsvc_req_header_count(req) - 1; i >= 0; i--) {
        const char *k, *v;
        seda_nsvc_req_header_at(req, i, &k, &v);
        if (k && strcasecmp(k, "Content-Type") == 0)
            ct = v;
    }
    size_t ctn = ct ? strcspn(ct, "; \t") : 0;
#define CT_IS(s) (ctn == strlen(s) && strncasecmp(ct, (s), ctn) == 0)
    const seda_remote_format *f = NULL;
    if (!ct) {
        if (l->raw_in || !l->format) {
            seda__l_cw_str(b, body, blen);
            return 0;
        }
        f = l->format;
    } else if (CT_IS("application/octet-stream") || ctn == 0 ||
               (ctn > 5 && strncasecmp(ct, "text/", 5) == 0)) {
        seda__l_cw_str(b, body, blen);
        return 0;
    } else if (CT_IS("application/x-seda")) {
        /* The codec's bytes: one whole value, checked before it goes
         * inside the request's table. */
        struct cr r = { body, (const unsigned char *)body + blen };
        if (seda__l_hw_rd_skip(&r, 1) != 0 ||
            r.p != (const unsigned char *)body + blen) {
            snprintf(why, n, "bad_message: the body is not one value of "
                     "application/x-seda");
            return -1;
        }
        seda__l_cw_put(b, body, blen);
        return 0;
    } else if (CT_IS("application/json")) {
        f = seda__l_format("json");
    } else if (CT_IS("application/msgpack")) {
        f = seda__l_format("msgpack");
    } else {
        snprintf(why, n, "bad_message: Content-Type '%.60s' is not one "
                 "this service reads (application/json, application/"
                 "msgpack, application/x-seda, application/octet-stream, "
                 "text/*)", ct);
        return -1;
    }
#undef CT_IS
    int kind = 0;
    void *out = NULL;
    size_t olen = 0;
    char err[200];
    if (f->decode(body, blen, &kind, &out, &olen, err, sizeof err) != 0) {
        snprintf(why, n, "bad_message: %s", err);
        return -1;
    }
    if (out && kind == SEDA_KIND_LUA)
        seda__l_cw_put(b, out, olen);
    else
        seda__l_cw_str(b, out ? out : body, out ? olen : blen);
    free(out);
    return 0;
}

static void encode_request(struct buf *b, const struct lnats *l,
                           const seda_nsvc_req_t *req, char *why, size_t n,
                           int *bad)
{
    seda__l_cw_table(b, 0, 3);
    seda__l_cw_str(b, "subject", 7);
    const char *subj = seda_nsvc_req_subject(req);
    seda__l_cw_str(b, subj, strlen(subj));
    seda__l_cw_str(b, "headers", 7);
    int nh = seda_nsvc_req_header_count(req);
    seda__l_cw_table(b, 0, (uint64_t)nh);
    for (int i = 0; i < nh; i++) {
        const char *k, *v;
        seda_nsvc_req_header_at(req, i, &k, &v);
        k = k ? k : "";
        v = v ? v : "";
        seda__l_cw_str(b, k, strlen(k));
        seda__l_cw_str(b, v, strlen(v));
    }
    seda__l_cw_str(b, "body", 4);
    *bad = put_body(b, l, req, why, n);
}

/* The request as a Lua table on the door state (admit rules read it). */
static void push_request(lua_State *L, const void *req)
{
    const seda_nsvc_req_t *r = req;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, seda_nsvc_req_subject(r));
    lua_setfield(L, -2, "subject");
    lua_newtable(L);
    for (int i = seda_nsvc_req_header_count(r) - 1; i >= 0; i--) {
        const char *k, *v;
        seda_nsvc_req_header_at(r, i, &k, &v);
        if (k && v) {
            lua_pushstring(L, v);
            lua_setfield(L, -2, k);
        }
    }
    lua_setfield(L, -2, "headers");
    size_t blen;
    const void *body = seda_nsvc_req_data(r, &blen);
    lua_pushlstring(L, body, blen);
    lua_setfield(L, -2, "body");
}

static void on_request(seda_nsvc_req_t *req, int ep, void *ud)
{
    struct lnats *l = ud;
    const struct lnroute *rt = &l->routes[ep];
    seda_bus_t *bus = l->lb->bus;
    seda_stage_t *st = seda_bus_stage(bus, rt->stages[0]);
    if (!st) {
        seda_nsvc_respond_error(req, 503, seda_strerror(
            seda__l_door_lookup_error(bus)));
        return;
    }
    seda_publish_opts o;
    seda_publish_opts_init(&o);
    char why[256];
    why[0] = '\0';
    if (seda__l_door_admit(&l->door, st, "nats", push_request, req,
                           rt->stages[0], &o.priority, why) != 0) {
        seda_nsvc_respond_error(req, 503, why);
        return;
    }
    unsigned char small[4096];
    struct buf bb = { small, 0, sizeof small, false, true };
    int bad = 0;
    encode_request(&bb, l, req, why, sizeof why, &bad);
    if (bad || bb.failed) {
        if (!bb.borrowed)
            free(bb.p);
        seda_nsvc_respond_error(req, bad ? 400 : 500,
                                bad ? why : "out_of_memory");
        return;
    }
    struct lnreq *q = malloc(sizeof *q);
    if (!q) {
        if (!bb.borrowed)
            free(bb.p);
        seda_nsvc_respond_error(req, 500, "out_of_memory");
        return;
    }
    q->l = l;
    q->req = req;
    o.done = on_done;
    o.done_ud = q;
    const char *refused = seda__l_door_publish(st, rt->stages, rt->n, "nats",
                                               bb.p, bb.len, &o, why,
                                               sizeof why);
    if (!bb.borrowed)
        free(bb.p);
    if (!refused)
        return;
    free(q);
    seda_nsvc_respond_error(req, 503, refused);
}

/* ---- the listener object ---- */

static void routes_free(struct lnroute *r, int n)
{
    for (int i = 0; r && i < n; i++) {
        free(r[i].name);
        free(r[i].subject);
        for (int j = 0; j < r[i].n; j++)
            free(r[i].stages[j]);
        free(r[i].stages);
    }
    free(r);
}

/* No request taken after (every callback of the service has returned);
 * answers still go out.  Main thread. */
static void stop(struct lnats *l)
{
    if (!l->svc || l->stopped)
        return;
    l->stopped = true;
    seda_nsvc_stop(l->svc);
    atomic_fetch_sub_explicit(&open_services, 1, memory_order_relaxed);
}

static void lnats_free(struct lnats *l)
{
    stop(l);
    seda_nsvc_free(l->svc);
    seda__l_door_destroy(&l->door);
    routes_free(l->routes, l->nroutes);
    free(l->service);
    free(l->version);
    free(l);
}

struct lnatsud {
    struct lnats *l;            /* NULL: a listen that failed */
};

static struct lnats *check_listener(lua_State *L)
{
    struct lnatsud *u = luaL_checkudata(L, 1, LNATS_MT);
    if (!u->l)
        luaL_error(L, "attempt to use a closed listener");
    return u->l;
}

static int l_close(lua_State *L)
{
    struct lnatsud *u = luaL_checkudata(L, 1, LNATS_MT);
    if (u->l)
        stop(u->l);
    return 0;
}

static int l_id(lua_State *L)
{
    struct lnats *l = check_listener(L);
    lua_pushstring(L, seda_nsvc_id(l->svc));
    return 1;
}

static int l_stats(lua_State *L)
{
    struct lnats *l = check_listener(L);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, l->service);
    lua_setfield(L, -2, "service");
    lua_pushstring(L, l->version);
    lua_setfield(L, -2, "version");
    lua_pushstring(L, seda_nsvc_id(l->svc));
    lua_setfield(L, -2, "id");
    lua_pushboolean(L, !l->stopped);
    lua_setfield(L, -2, "open");
    lua_createtable(L, 0, l->nroutes);
    for (int i = 0; i < l->nroutes; i++) {
        seda_nsvc_ep_stats es;
        seda_nsvc_ep_stats_get(l->svc, i, &es);
        lua_createtable(L, 0, 5);
        lua_pushstring(L, l->routes[i].subject);
        lua_setfield(L, -2, "subject");
        lua_pushinteger(L, (lua_Integer)es.num_requests);
        lua_setfield(L, -2, "requests");
        lua_pushinteger(L, (lua_Integer)es.num_errors);
        lua_setfield(L, -2, "errors");
        lua_pushstring(L, es.last_error);
        lua_setfield(L, -2, "last_error");
        lua_pushnumber(L, (double)es.processing_time / 1e9);
        lua_setfield(L, -2, "processing_time");
        lua_setfield(L, -2, l->routes[i].name);
    }
    lua_setfield(L, -2, "endpoints");
    return 1;
}

static int l_tostring(lua_State *L)
{
    struct lnatsud *u = luaL_checkudata(L, 1, LNATS_MT);
    lua_pushfstring(L, "seda.nats_listener (%s%s)",
                    u->l ? u->l->service : "?",
                    u->l && !u->l->stopped ? "" : ", closed");
    return 1;
}

/* ---- bus:listen{ nats = ... } ---- */

static const char *const listen_keys[] = { "nats", "routes", "timeout",
                                           NULL };
static const char *const nats_keys[] = {
    "url", "urls", "tls", "creds", "user", "password", "token",
    "connect_timeout", "service", "version", "queue", "description",
    "format", NULL
};
/* Those read as a remote stage's (lremote.c). */
static const char *const conn_keys[] = {
    "url", "urls", "tls", "creds", "user", "password", "token",
    "connect_timeout", NULL
};

static const char *opt_str(lua_State *L, int t, const char *k,
                           const char *def)
{
    lua_getfield(L, t, k);
    const char *v = def;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING || !*lua_tostring(L, -1))
            luaL_error(L, "listen: nats.%s must be a non-empty string "
                       "(got %s)", k, luaL_typename(L, -1));
        v = lua_tostring(L, -1);
    }
    lua_pop(L, 1);                      /* still referenced by the table */
    return v;
}

/* routes = { name = { "stage", ..., subject = "..." } }. */
static void parse_routes(lua_State *L, int t, struct lnats *l)
{
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
        lua_pop(L, 1);
        n++;
    }
    if (n == 0)
        luaL_error(L, "listen: routes must name at least one route");
    l->routes = calloc((size_t)n, sizeof *l->routes);
    if (!l->routes)
        luaL_error(L, "listen: out of memory");
    lua_pushnil(L);
    while (lua_next(L, t)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "listen: nats routes are named by strings (the "
                       "endpoint names)");
        const char *key = lua_tostring(L, -2);
        if (!lua_istable(L, -1) || lua_rawlen(L, -1) == 0)
            luaL_error(L, "listen: route '%s' must be an array of stage "
                       "names (and subject = \"...\" if not %s.%s)", key,
                       l->service, key);
        struct lnroute *r = &l->routes[l->nroutes++];
        r->name = strdup(key);
        lua_getfield(L, -1, "subject");
        if (!lua_isnil(L, -1) && (lua_type(L, -1) != LUA_TSTRING ||
                                  !*lua_tostring(L, -1)))
            luaL_error(L, "listen: route '%s': subject must be a non-empty "
                       "string", key);
        r->subject = lua_isnil(L, -1)
                         ? NULL : strdup(lua_tostring(L, -1));
        lua_pop(L, 1);
        if (!r->subject) {
            size_t sl = strlen(l->service) + strlen(key) + 2;
            r->subject = malloc(sl);
            if (r->subject)
                snprintf(r->subject, sl, "%s.%s", l->service, key);
        }
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            bool ok = lua_type(L, -2) == LUA_TSTRING
                          ? strcmp(lua_tostring(L, -2), "subject") == 0
                          : lua_isinteger(L, -2);
            if (!ok)
                luaL_error(L, "listen: route '%s': only stage names and "
                           "subject go in a route", key);
            lua_pop(L, 1);
        }
        r->n = (int)lua_rawlen(L, -1);
        r->stages = calloc((size_t)r->n, sizeof *r->stages);
        if (!r->name || !r->subject || !r->stages)
            luaL_error(L, "listen: out of memory");
        for (int i = 0; i < r->n; i++) {
            lua_rawgeti(L, -1, i + 1);
            const char *s = lua_tostring(L, -1);
            if (lua_type(L, -1) != LUA_TSTRING || !seda__l_valid_name(s))
                luaL_error(L, "listen: route '%s': [%d] is not a valid "
                           "stage name", key, i + 1);
            r->stages[i] = strdup(s);
            if (!r->stages[i])
                luaL_error(L, "listen: out of memory");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
}

static int l_half_gc(lua_State *L)
{
    struct lnatsud *u = lua_touserdata(L, 1);
    if (u->l) {
        lnats_free(u->l);
        u->l = NULL;
    }
    return 0;
}

int seda__l_nats_listen(lua_State *L)
{
    struct lbusud *bu = seda__l_check_bus(L);
    struct lbus *lb = bu->lb;
    luaL_checktype(L, 2, LUA_TTABLE);
    seda__l_check_keys(L, 2, listen_keys, "listen (nats)");
    if (lb->shut || seda_bus_closed(lb->bus))
        return luaL_error(L, "listen: the bus is shut down");
    lua_getfield(L, 2, "nats");
    int nt = lua_gettop(L);
    if (!lua_istable(L, nt))
        return luaL_error(L, "listen: nats must be a table { url = "
                          "\"nats://host:port\", service = \"name\", ... }");
    seda__l_check_keys(L, nt, nats_keys, "listen: nats");

    struct lnatsud *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->l = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_half_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int ui = lua_gettop(L);
    struct lnats *l = calloc(1, sizeof *l);
    if (!l)
        return luaL_error(L, "listen: out of memory");
    seda__l_door_init(&l->door);
    u->l = l;
    l->lb = lb;
    const char *service = opt_str(L, nt, "service", NULL);
    if (!service)
        return luaL_error(L, "listen: nats.service is required (the "
                          "service's name: letters, digits, _ and -)");
    l->service = strdup(service);
    l->version = strdup(opt_str(L, nt, "version", "1.0.0"));
    const char *queue = opt_str(L, nt, "queue", "q");
    const char *desc = opt_str(L, nt, "description", NULL);
    const char *fmt = opt_str(L, nt, "format", NULL);
    if (!l->service || !l->version)
        return luaL_error(L, "listen: out of memory");
    l->raw_in = fmt == NULL;
    l->format = seda__l_format(fmt ? fmt : "json");
    if (fmt && !l->format && strcmp(fmt, "seda") != 0)
        return luaL_error(L, "listen: nats.format must be \"json\", "
                          "\"msgpack\", \"raw\" or \"seda\" (got %s)", fmt);

    /* The connection's options, read as a remote stage's. */
    lua_createtable(L, 0, 8);
    int ct = lua_gettop(L);
    for (int i = 0; conn_keys[i]; i++) {
        lua_getfield(L, nt, conn_keys[i]);
        lua_setfield(L, ct, conn_keys[i]);
    }
    seda_remote_opts ro;
    char what[200];
    snprintf(what, sizeof what, "listen nats %s", l->service);
    seda__l_remote_opts(L, ct, what, &ro);

    lua_getfield(L, 2, "routes");
    if (!lua_istable(L, -1))
        return luaL_error(L, "listen: routes must be a table of "
                          "name = { stages... }");
    parse_routes(L, lua_gettop(L), l);
    lua_pop(L, 1);
    lua_getfield(L, 2, "timeout");
    double timeout = 30;
    if (!lua_isnil(L, -1)) {
        timeout = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || !(timeout >= 0.001 && timeout <= 1e9))
            return luaL_error(L, "listen: timeout must be a number from "
                              "0.001 to 1e9 (seconds)");
    }
    lua_pop(L, 1);

    const char **names = lua_newuserdatauv(L, sizeof *names *
                                           (size_t)l->nroutes * 2, 0);
    const char **subjects = names + l->nroutes;
    for (int i = 0; i < l->nroutes; i++) {
        names[i] = l->routes[i].name;
        subjects[i] = l->routes[i].subject;
    }
    seda_nsvc_opts so = {
        .conn = &ro, .name = l->service, .version = l->version,
        .description = desc, .queue = queue, .nendpoints = l->nroutes,
        .ep_names = names, .ep_subjects = subjects, .timeout = timeout,
        .on_request = on_request, .ud = l,
    };
    char err[512];
    if (seda_nsvc_new(&so, &l->svc, err, sizeof err) != 0)
        return luaL_error(L, "listen: %s", err);
    atomic_fetch_add_explicit(&open_services, 1, memory_order_relaxed);

    u->l = NULL;
    pthread_mutex_lock(&lb->mu);
    l->next = lb->nats;
    lb->nats = l;
    pthread_mutex_unlock(&lb->mu);
    lua_settop(L, ui - 1);
    struct lnatsud *hu = lua_newuserdatauv(L, sizeof *hu, 1);
    hu->l = l;
    luaL_setmetatable(L, LNATS_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

void seda__l_nats_stop_all(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    struct lnats *list = lb->nats;
    pthread_mutex_unlock(&lb->mu);
    for (struct lnats *l = list; l; l = l->next)
        stop(l);
}

void seda__l_nats_free_all(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    struct lnats *list = lb->nats;
    lb->nats = NULL;
    pthread_mutex_unlock(&lb->mu);
    for (struct lnats *l = list, *next; l; l = next) {
        next = l->next;
        lnats_free(l);
    }
}

void seda__l_nats_open_lib(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "close", l_close },
        { "stats", l_stats },
        { "id", l_id },
        { NULL, NULL }
    };
    if (luaL_newmetatable(L, LNATS_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
}
