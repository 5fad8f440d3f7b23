/* SPDX-License-Identifier: MIT */
/*
 * lio_tcp.c -- seda.socket.tcp(): a cosocket with the methods of
 * LuaSocket's tcp object that pure-Lua clients use (connect, send,
 * receive, settimeout, close, shutdown, setoption, getpeername,
 * getsockname) and OpenResty's connection pool (setkeepalive,
 * getreusedtimes, settimeouts), over the seda_io_tcp_* ops.
 *
 * DESIGN
 *   Return values follow LuaSocket 3 (buffer.c, tcp.c): send gives the
 *   index of the last byte sent, nil, nil, or nil, err, last index;
 *   receive gives data, nil, nil, or nil, err, partial (the prefix and
 *   what was read before the error); errors are the words LuaSocket uses
 *   ("closed", "timeout", "connection refused", "host or service not
 *   provided, or not known").  LuaSocket returns 1 as a float (1.0); this
 *   object returns integers, as OpenResty's does.
 *
 *   Waiting goes through seda__l_io_wait (lio.c), each method with its op
 *   box at a fixed stack index and a continuation that reads the op.
 *
 *   The pool (setkeepalive): a registry table of this state, keyed by the
 *   "host:port" given to connect, each an array of idle entries (a
 *   userdata owning the seda_io_tcp_t, freed by its __gc); connect to the
 *   same key takes the newest entry still alive (not expired, nothing to
 *   read, peer not gone), so its reused count goes up.
 *
 *   The state's I/O loop is made when the first socket is (not on
 *   connect): a socket box is then always younger than the loop's, so at
 *   lua_close its __gc (which posts the close to the loop) runs first.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "lio.h"
#include "lseda.h"

#define TCP_MT "seda.socket.tcp"
#define IDLE_MT "seda.socket.idle"
#define POOL_KEY "seda.socket.pool"     /* registry: key -> idle entries */
#define POOL_SIZE_DEFAULT 30
#define POOL_IDLE_DEFAULT 60.0          /* seconds (OpenResty: 60 000 ms) */

enum { T_CONNECT, T_SEND, T_READ };

/* The tcp object (a userdata; its first user value is the pool key once
 * connected). */
struct ltcp {
    seda_io_loop_t *loop;
    seda_io_tcp_t *s;           /* NULL when closed or not yet made */
    bool connected;
    int reused;                 /* getreusedtimes() */
    double timeout[3];          /* seconds; < 0: none (block) */
};

/* A pooled connection. */
struct lidle {
    seda_io_tcp_t *s;           /* NULL once taken or freed */
    int reused;
    double expires;             /* monotonic seconds; 0: never */
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct ltcp *check_tcp(lua_State *L)
{
    return luaL_checkudata(L, 1, TCP_MT);
}

static void tcp_drop(struct ltcp *t)
{
    seda_io_tcp_free(t->s);
    t->s = NULL;
    t->connected = false;
}

/* Push LuaSocket's word for a failed op. */
static void push_err(lua_State *L, seda_io_op_t *op)
{
    switch (seda_io_op_status(op)) {
    case SEDA_IO_TIMEOUT: lua_pushliteral(L, "timeout"); break;
    case SEDA_IO_CLOSED: lua_pushliteral(L, "closed"); break;
    case SEDA_IO_REFUSED: lua_pushliteral(L, "connection refused"); break;
    case SEDA_IO_DNS:
        lua_pushliteral(L, "host or service not provided, or not known");
        break;
    case SEDA_IO_CANCELLED: lua_pushliteral(L, "cancelled"); break;
    default:
        if (*seda_io_op_message(op))
            lua_pushstring(L, seda_io_op_message(op));
        else
            lua_pushstring(L, seda_io_strerror(seda_io_op_status(op)));
    }
}

static int push_fail(lua_State *L, const char *err)
{
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
}

/* ---- the pool ---- */

static int idle_gc(lua_State *L)
{
    struct lidle *e = luaL_checkudata(L, 1, IDLE_MT);
    seda_io_tcp_free(e->s);
    e->s = NULL;
    return 0;
}

/* Push the pool's array for the key at KEY (made when absent). */
static void pool_list(lua_State *L, int key)
{
    key = lua_absindex(L, key);
    if (lua_getfield(L, LUA_REGISTRYINDEX, POOL_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, POOL_KEY);
    }
    lua_pushvalue(L, key);
    if (lua_gettable(L, -2) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, key);
        lua_pushvalue(L, -2);
        lua_settable(L, -4);
    }
    lua_remove(L, -2);
}

/* Take a live pooled connection for the key at KEY into T: whether one was
 * found.  Dead or expired entries met on the way are freed. */
static bool pool_take(lua_State *L, struct ltcp *t, int key)
{
    pool_list(L, key);
    bool found = false;
    for (lua_Integer n = luaL_len(L, -1); n > 0 && !found; n--) {
        lua_rawgeti(L, -1, n);
        struct lidle *e = lua_touserdata(L, -1);
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_rawseti(L, -2, n);
        if (e->s && (e->expires == 0 || mono() < e->expires) &&
            seda_io_tcp_alive(e->s)) {
            t->s = e->s;
            t->reused = e->reused + 1;
            t->connected = true;
            found = true;
        } else {
            seda_io_tcp_free(e->s);
        }
        e->s = NULL;
    }
    lua_pop(L, 1);
    return found;
}

/* ---- connect ---- */

enum { C_SELF = 1, C_HOST, C_PORT, C_KEY, C_BOX };

static int connect_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    struct ltcp *t = lua_touserdata(L, C_SELF);
    struct lio_op *b = lua_touserdata(L, C_BOX);
    if (seda_io_op_status(b->op) != SEDA_IO_OK) {
        lua_pushnil(L);
        push_err(L, b->op);
        seda__l_io_op_done(b);
        tcp_drop(t);            /* a fresh socket for another try */
        return 2;
    }
    seda__l_io_op_done(b);
    t->connected = true;
    t->reused = 0;
    lua_pushvalue(L, C_KEY);
    lua_setiuservalue(L, C_SELF, 1);
    lua_pushinteger(L, 1);
    return 1;
}

/* tcp:connect(host, port) -> 1, or nil, err. */
static int l_connect(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.socket: connect");
    struct ltcp *t = check_tcp(L);
    const char *host = luaL_checkstring(L, C_HOST);
    lua_Integer port = luaL_checkinteger(L, C_PORT);
    luaL_argcheck(L, port > 0 && port <= 65535, C_PORT, "port out of range");
    lua_settop(L, C_PORT);
    if (t->connected)
        return push_fail(L, "already connected");
    lua_pushfstring(L, "%s:%I", host, port);                    /* C_KEY */
    if (pool_take(L, t, C_KEY)) {
        lua_setiuservalue(L, C_SELF, 1);
        lua_pushinteger(L, 1);
        return 1;
    }
    if (!t->s) {
        int rc = seda_io_tcp_new(t->loop, &t->s);
        if (rc != 0)
            return push_fail(L, seda_io_strerror(rc));
    }
    struct lio_op *b = seda__l_io_op_push(L);                   /* C_BOX */
    /* settimeout(0) makes send and receive do what they can at once; a
     * connect still completes (LuaSocket's would go on in the background
     * and be usable later: this socket cannot be polled for it). */
    double tc = t->timeout[T_CONNECT] == 0 ? -1 : t->timeout[T_CONNECT];
    int rc = seda_io_tcp_connect(t->s, host, (int)port, seda__l_io_budget(L, tc),
                                 seda__l_io_cb, seda__l_io_ud(b), &b->op);
    if (rc != 0) {
        seda__l_io_unarm(b);
        return push_fail(L, seda_io_strerror(rc));
    }
    return seda__l_io_wait(L, C_BOX, connect_k, 0);
}

/* ---- send ---- */

enum { S_SELF = 1, S_DATA, S_I, S_J, S_BOX };

static int send_k(lua_State *L, int status, lua_KContext start)
{
    (void)status;
    struct lio_op *b = lua_touserdata(L, S_BOX);
    lua_Integer last = (lua_Integer)start + (lua_Integer)seda_io_tcp_sent(b->op)
                       - 1;
    if (seda_io_op_status(b->op) != SEDA_IO_OK) {
        lua_pushnil(L);
        push_err(L, b->op);
        lua_pushinteger(L, last);
    } else {
        lua_pushinteger(L, last);
        lua_pushnil(L);
        lua_pushnil(L);
    }
    seda__l_io_op_done(b);
    return 3;
}

#define SEND_DEPTH 32             /* nesting of a table given to send */

/* Append the fragments of the array at idx (strings, numbers, arrays of
 * them) to the flat array at out, from *n on; raises naming a bad one. */
static void send_flatten(lua_State *L, int idx, int out, lua_Integer *n,
                         int depth)
{
    if (depth > SEND_DEPTH)
        luaL_argerror(L, S_DATA, "table nested too deep");
    luaL_checkstack(L, 2, "send");
    lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
    for (lua_Integer k = 1; k <= len; k++) {
        int ty = lua_rawgeti(L, idx, k);
        if (ty == LUA_TTABLE) {
            send_flatten(L, lua_gettop(L), out, n, depth + 1);
            lua_pop(L, 1);
        } else if (ty == LUA_TSTRING || ty == LUA_TNUMBER) {
            lua_rawseti(L, out, ++*n);
        } else {
            luaL_argerror(L, S_DATA, lua_pushfstring(
                L, "a fragment is a %s (strings, numbers and arrays of "
                "them)", luaL_typename(L, -1)));
        }
    }
}

/* data as one string at S_DATA: a table (OpenResty's send takes a nested
 * array of fragments, as lua-resty-redis builds its requests) is joined. */
static const char *send_data(lua_State *L, size_t *len)
{
    if (lua_type(L, S_DATA) == LUA_TTABLE) {
        lua_settop(L, S_DATA);
        lua_newtable(L);                                        /* flat */
        lua_Integer n = 0;
        send_flatten(L, S_DATA, S_DATA + 1, &n, 1);
        luaL_Buffer buf;
        luaL_buffinit(L, &buf);
        for (lua_Integer k = 1; k <= n; k++) {
            lua_rawgeti(L, S_DATA + 1, k);
            luaL_addvalue(&buf);
        }
        luaL_pushresult(&buf);
        lua_replace(L, S_DATA);
        lua_settop(L, S_DATA);
    }
    return luaL_checklstring(L, S_DATA, len);
}

/* tcp:send(data [, i [, j]]) -> last index, nil, nil; or nil, err, last
 * index (LuaSocket's buffer_meth_send).  data may be a string or, as
 * OpenResty's, a nested array of fragments (then i and j are ignored and
 * the count is of bytes). */
static int l_send(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.socket: send");
    struct ltcp *t = check_tcp(L);
    size_t len;
    if (lua_type(L, S_DATA) == LUA_TTABLE)
        lua_settop(L, S_DATA);          /* i and j do not apply */
    const char *data = send_data(L, &len);
    lua_Integer i = luaL_optinteger(L, S_I, 1);
    lua_Integer j = luaL_optinteger(L, S_J, -1);
    lua_settop(L, S_J);
    if (i < 0)
        i = (lua_Integer)len + i + 1;
    if (j < 0)
        j = (lua_Integer)len + j + 1;
    if (i < 1)
        i = 1;
    if (j > (lua_Integer)len)
        j = (lua_Integer)len;
    if (!t->connected) {
        lua_pushnil(L);
        lua_pushliteral(L, "closed");
        lua_pushinteger(L, i - 1);
        return 3;
    }
    size_t n = i <= j ? (size_t)(j - i + 1) : 0;
    struct lio_op *b = seda__l_io_op_push(L);                   /* S_BOX */
    int rc = seda_io_tcp_send(t->s, data + i - 1, n, seda__l_io_budget(L, t->timeout[T_SEND]),
                              seda__l_io_cb, seda__l_io_ud(b), &b->op);
    if (rc != 0) {
        seda__l_io_unarm(b);
        lua_pushnil(L);
        lua_pushstring(L, seda_io_strerror(rc));
        lua_pushinteger(L, i - 1);
        return 3;
    }
    return seda__l_io_wait(L, S_BOX, send_k, (lua_KContext)i);
}

/* ---- receive ---- */

enum { R_SELF = 1, R_PATTERN, R_PREFIX, R_BOX };

static int receive_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    struct lio_op *b = lua_touserdata(L, R_BOX);
    size_t len;
    const char *d = seda_io_op_data(b->op, &len);
    bool ok = seda_io_op_status(b->op) == SEDA_IO_OK;
    if (!ok) {
        lua_pushnil(L);
        push_err(L, b->op);
    }
    luaL_Buffer buf;
    luaL_buffinit(L, &buf);
    if (lua_type(L, R_PREFIX) == LUA_TSTRING) {
        lua_pushvalue(L, R_PREFIX);
        luaL_addvalue(&buf);
    }
    luaL_addlstring(&buf, d, len);
    luaL_pushresult(&buf);
    seda__l_io_op_done(b);
    if (ok) {
        lua_pushnil(L);
        lua_pushnil(L);
    }
    return 3;
}

/* tcp:receive([pattern [, prefix]]) -> data, nil, nil; or nil, err,
 * partial.  Patterns: "*l" (default), "*a", a byte count. */
static int l_receive(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.socket: receive");
    struct ltcp *t = check_tcp(L);
    enum seda_io_recv_mode mode = SEDA_IO_RECV_LINE;
    size_t n = 0;
    if (lua_type(L, R_PATTERN) == LUA_TNUMBER) {
        lua_Integer c = luaL_checkinteger(L, R_PATTERN);
        luaL_argcheck(L, c >= 0, R_PATTERN, "invalid receive pattern");
        mode = SEDA_IO_RECV_BYTES;
        n = (size_t)c;
    } else if (!lua_isnoneornil(L, R_PATTERN)) {
        const char *p = luaL_checkstring(L, R_PATTERN);
        if (*p == '*')
            p++;
        if (*p == 'l')
            mode = SEDA_IO_RECV_LINE;
        else if (*p == 'a')
            mode = SEDA_IO_RECV_ALL;
        else
            return luaL_argerror(L, R_PATTERN, "invalid receive pattern");
    }
    luaL_optstring(L, R_PREFIX, NULL);
    lua_settop(L, R_PREFIX);
    if (!t->connected)
        return push_fail(L, "closed");
    if (mode == SEDA_IO_RECV_BYTES && n == 0) {
        if (lua_isnil(L, R_PREFIX))
            lua_pushliteral(L, "");
        else
            lua_pushvalue(L, R_PREFIX);
        lua_pushnil(L);
        lua_pushnil(L);
        return 3;
    }
    struct lio_op *b = seda__l_io_op_push(L);                   /* R_BOX */
    int rc = seda_io_tcp_receive(t->s, mode, n, seda__l_io_budget(L, t->timeout[T_READ]),
                                 seda__l_io_cb, seda__l_io_ud(b), &b->op);
    if (rc != 0) {
        seda__l_io_unarm(b);
        return push_fail(L, seda_io_strerror(rc));
    }
    return seda__l_io_wait(L, R_BOX, receive_k, 0);
}

/* ---- the rest ---- */

static double opt_seconds(lua_State *L, int i, double scale)
{
    if (lua_isnoneornil(L, i))
        return -1;
    double v = luaL_checknumber(L, i);
    return isnan(v) || v < 0 ? -1 : v * scale;
}

/* tcp:settimeout(t [, mode]) -> 1: seconds per call (nil or negative:
 * none; 0: send and receive return what they can at once, else "timeout"
 * and the partial data); both LuaSocket modes ("b", "t") count per
 * call. */
static int l_settimeout(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    double v = opt_seconds(L, 2, 1.0);
    luaL_optstring(L, 3, "b");
    t->timeout[T_CONNECT] = t->timeout[T_SEND] = t->timeout[T_READ] = v;
    lua_pushinteger(L, 1);
    return 1;
}

/* tcp:settimeouts(connect, send, read) -> 1: OpenResty's, in
 * milliseconds; nil leaves one unchanged, 0 or negative is none. */
static int l_settimeouts(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    for (int k = 0; k < 3; k++) {
        if (lua_isnoneornil(L, 2 + k))
            continue;
        double v = luaL_checknumber(L, 2 + k);
        t->timeout[k] = v > 0 ? v / 1000.0 : -1;
    }
    lua_pushinteger(L, 1);
    return 1;
}

static int l_close(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    tcp_drop(t);
    lua_pushinteger(L, 1);
    return 1;
}

static int l_gc(lua_State *L)
{
    struct ltcp *t = luaL_checkudata(L, 1, TCP_MT);
    tcp_drop(t);
    return 0;
}

static int l_shutdown(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    static const char *const modes[] = { "both", "send", "receive", NULL };
    static const int how[] = { SHUT_RDWR, SHUT_WR, SHUT_RD };
    int m = luaL_checkoption(L, 2, "both", modes);
    if (!t->connected)
        return push_fail(L, "closed");
    int rc = seda_io_tcp_shutdown(t->s, how[m]);
    if (rc != 0)
        return push_fail(L, seda_io_strerror(rc));
    lua_pushinteger(L, 1);
    return 1;
}

/* tcp:setoption(name, value) -> 1: an option LuaSocket or OpenResty
 * names is accepted with nothing to do (TCP_NODELAY is always on; the
 * rest does not matter to a client); any other name raises, naming it. */
static int l_setoption(lua_State *L)
{
    static const char *const known[] = {
        "keepalive", "linger", "reuseaddr", "reuseport", "tcp-nodelay",
        "tcp-keepidle", "tcp-keepcnt", "tcp-keepintvl", "ipv6-v6only",
        "sndbuf", "rcvbuf", NULL
    };
    check_tcp(L);
    const char *name = luaL_checkstring(L, 2);
    int i = 0;
    while (known[i] && strcmp(known[i], name) != 0)
        i++;
    if (!known[i])
        return luaL_error(L, "setoption: unknown option '%s' (keepalive, "
                          "linger, reuseaddr, reuseport, tcp-nodelay, "
                          "tcp-keepidle, tcp-keepcnt, tcp-keepintvl, "
                          "ipv6-v6only, sndbuf, rcvbuf)", name);
    luaL_checkany(L, 3);
    lua_pushinteger(L, 1);
    return 1;
}

/* tcp:setkeepalive([timeout_ms [, size]]) -> 1, or nil, err: put the
 * connection in this state's pool for a later connect to the same
 * host:port (OpenResty); the object is closed. */
static int l_setkeepalive(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    double idle = lua_isnoneornil(L, 2) ? POOL_IDLE_DEFAULT
                : luaL_checknumber(L, 2) / 1000.0;
    lua_Integer size = luaL_optinteger(L, 3, POOL_SIZE_DEFAULT);
    luaL_argcheck(L, size > 0, 3, "pool size must be positive");
    lua_settop(L, 3);
    if (!t->connected)
        return push_fail(L, "closed");
    if (seda_io_tcp_buffered(t->s) > 0) {
        tcp_drop(t);
        return push_fail(L, "unread data in buffer");
    }
    lua_getiuservalue(L, 1, 1);                                 /* 4: key */
    pool_list(L, 4);                                            /* 5 */
    lua_Integer n = luaL_len(L, 5);
    while (n >= size) {         /* full: the oldest goes */
        lua_rawgeti(L, 5, 1);
        struct lidle *old = lua_touserdata(L, -1);
        seda_io_tcp_free(old->s);
        old->s = NULL;
        lua_pop(L, 1);
        for (lua_Integer k = 1; k < n; k++) {
            lua_rawgeti(L, 5, k + 1);
            lua_rawseti(L, 5, k);
        }
        lua_pushnil(L);
        lua_rawseti(L, 5, n);
        n--;
    }
    struct lidle *e = lua_newuserdatauv(L, sizeof *e, 0);
    e->s = NULL;
    if (luaL_newmetatable(L, IDLE_MT)) {
        lua_pushcfunction(L, idle_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_rawseti(L, 5, n + 1);   /* cannot raise: the slot is new */
    e->s = t->s;
    e->reused = t->reused;
    e->expires = idle > 0 ? mono() + idle : 0;
    t->s = NULL;
    t->connected = false;
    lua_pushinteger(L, 1);
    return 1;
}

static int l_getreusedtimes(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    lua_pushinteger(L, t->reused);
    return 1;
}

static int push_addr(lua_State *L, int rc, const char *host, int port)
{
    if (rc != 0)
        return push_fail(L, rc == -ENOTCONN ? "closed" : seda_io_strerror(rc));
    lua_pushstring(L, host);
    lua_pushinteger(L, port);
    if (strchr(host, ':'))
        lua_pushliteral(L, "inet6");
    else
        lua_pushliteral(L, "inet");
    return 3;
}

static int l_getpeername(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    char host[64];
    int port = 0;
    int rc = t->connected ? seda_io_tcp_peername(t->s, host, sizeof host, &port)
                          : -ENOTCONN;
    return push_addr(L, rc, host, port);
}

static int l_getsockname(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    char host[64];
    int port = 0;
    int rc = t->connected ? seda_io_tcp_sockname(t->s, host, sizeof host, &port)
                          : -ENOTCONN;
    return push_addr(L, rc, host, port);
}

static int l_getfd(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    lua_pushinteger(L, t->connected ? seda_io_tcp_fd(t->s) : -1);
    return 1;
}

static int l_dirty(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    lua_pushboolean(L, t->connected && seda_io_tcp_buffered(t->s) > 0);
    return 1;
}

static int l_tostring(lua_State *L)
{
    struct ltcp *t = check_tcp(L);
    lua_pushfstring(L, "tcp{%s}: %p", t->connected ? "client" : "master",
                    (void *)t);
    return 1;
}

static const luaL_Reg tcp_methods[] = {
    { "connect", l_connect },
    { "send", l_send },
    { "receive", l_receive },
    { "settimeout", l_settimeout },
    { "settimeouts", l_settimeouts },
    { "close", l_close },
    { "shutdown", l_shutdown },
    { "setoption", l_setoption },
    { "setkeepalive", l_setkeepalive },
    { "getreusedtimes", l_getreusedtimes },
    { "getpeername", l_getpeername },
    { "getsockname", l_getsockname },
    { "getfd", l_getfd },
    { "dirty", l_dirty },
    { NULL, NULL }
};

/* seda.socket.tcp() -> a tcp object, not connected (blocking, no
 * timeout, until settimeout). */
static int l_tcp(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.socket.tcp");
    seda_io_loop_t *loop = seda__l_io_loop(L);
    struct ltcp *t = lua_newuserdatauv(L, sizeof *t, 1);
    t->loop = loop;
    t->s = NULL;
    t->connected = false;
    t->reused = 0;
    t->timeout[0] = t->timeout[1] = t->timeout[2] = -1;
    if (luaL_newmetatable(L, TCP_MT)) {
        luaL_newlib(L, tcp_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, l_gc);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, l_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
    return 1;
}

void seda__l_io_push_socket(lua_State *L)
{
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_tcp);
    lua_setfield(L, -2, "tcp");
}
