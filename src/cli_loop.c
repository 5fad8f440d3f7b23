/* SPDX-License-Identifier: MIT */
/*
 * cli_loop.c -- shared state of the seda-lua program, its Lua glue (the
 * embedded lua/seda/cli.lua, REPL evaluation) and the main-thread event
 * loop: one poll() over stdin (the REPL), the control socket and its
 * clients and the inotify descriptor, woken at least every 10 ms to run
 * pending on_complete callbacks (seda._poll_all) and periodic work
 * (--watch debounce, --metrics file).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "lseda.h"

struct cli cli = { .mod_ref = LUA_NOREF };
const char *cli_progname = "seda-lua";

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- calling Lua ---- */

int cli_msghandler(lua_State *L)
{
    return seda__l_msghandler(L);       /* the runtime's own */
}

/* Call the function below nargs arguments with a traceback handler.  On
 * error prints the message (stderr) and returns non-zero. */
int cli_docall(lua_State *L, int nargs, int nres)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, cli_msghandler);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (rc != LUA_OK) {
        fprintf(stderr, "%s: %s\n", cli_progname, lua_tostring(L, -1));
        fflush(stderr);
        lua_pop(L, 1);
    }
    return rc;
}

bool cli_get_fn(lua_State *L, const char *name)
{
    if (cli.mod_ref == LUA_NOREF || cli.mod_ref == LUA_REFNIL)
        return false;
    lua_rawgeti(L, LUA_REGISTRYINDEX, cli.mod_ref);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
    if (lua_isfunction(L, -1))
        return true;
    lua_pop(L, 1);
    return false;
}

/* ---- output sink ---- */

void cli_out(const char *s, size_t n)
{
    if (cli.sink) {
        cli.sink->write(cli.sink->ud, s, n);
    } else {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
    }
}

void cli_outs(const char *s)
{
    cli_out(s, strlen(s));
}

/* C.write(...): tostring each argument to the current sink. */
static int c_write(lua_State *L)
{
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_tolstring(L, i, &len);
        cli_out(s, len);
        lua_pop(L, 1);
    }
    return 0;
}

/* C.top(seconds) */
static int c_top(lua_State *L)
{
    double secs = luaL_checknumber(L, 1);
    if (cli.sink) {
        if (cli.sink->top)
            cli.sink->top(cli.sink->ud, secs);
        return 0;
    }
    cli_top_local(secs);
    return 0;
}

/* C.realpath(path) -> absolute path or nil */
static int c_realpath(lua_State *L)
{
    const char *p = luaL_checkstring(L, 1);
    char buf[PATH_MAX];
    if (realpath(p, buf))
        lua_pushstring(L, buf);
    else
        lua_pushnil(L);
    return 1;
}

int cli_setup(lua_State *L)
{
    size_t len = (size_t)(cli_lua_end - cli_lua_src);
    if (luaL_loadbuffer(L, cli_lua_src, len, "=[seda-lua cli]") != LUA_OK) {
        fprintf(stderr, "%s: %s\n", cli_progname, lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    static const luaL_Reg fns[] = {
        { "write", c_write },
        { "top", c_top },
        { "realpath", c_realpath },
        { NULL, NULL }
    };
    luaL_newlib(L, fns);
    if (cli_docall(L, 1, 1) != LUA_OK)
        return 1;
    cli.mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (cli_get_fn(L, "install")) {
        lua_pushglobaltable(L);
        if (cli_docall(L, 1, 0) != LUA_OK)
            return 1;
    }
    return 0;
}

/* ---- REPL evaluation ---- */

static int incomplete(lua_State *L, int status)
{
    if (status == LUA_ERRSYNTAX) {
        size_t lmsg;
        const char *msg = lua_tolstring(L, -1, &lmsg);
        if (lmsg >= 5 && strcmp(msg + lmsg - 5, "<eof>") == 0)
            return 1;
    }
    return 0;
}

static void report_error(const char *msg)
{
    if (cli.sink) {
        cli_outs(msg);
        cli_outs("\n");
    } else {
        fflush(stdout);
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
    }
}

/* Interrupt a running local command (SIGINT), like lua.c does. */
static void lstop(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

int cli_eval(lua_State *L, const char *chunk, size_t len, const char *name,
             int envidx)
{
    int top = lua_gettop(L);
    if (envidx < 0)
        envidx = top + 1 + envidx;
    int st;
    if (len > 0 && chunk[0] == '=') {
        lua_pushliteral(L, "return ");
        lua_pushlstring(L, chunk + 1, len - 1);
        lua_concat(L, 2);
        size_t n;
        const char *code = lua_tolstring(L, -1, &n);
        st = luaL_loadbuffer(L, code, n, name);
        lua_remove(L, -2);
    } else {
        lua_pushliteral(L, "return ");
        lua_pushlstring(L, chunk, len);
        lua_concat(L, 2);
        size_t n;
        const char *code = lua_tolstring(L, -1, &n);
        st = luaL_loadbuffer(L, code, n, name);
        lua_remove(L, -2);
        if (st != LUA_OK) {
            lua_pop(L, 1);
            st = luaL_loadbuffer(L, chunk, len, name);
        }
    }
    if (st != LUA_OK) {
        int inc = incomplete(L, st);
        if (!inc)
            report_error(lua_tostring(L, -1));
        lua_settop(L, top);
        return inc ? CLI_EVAL_INCOMPLETE : CLI_EVAL_ERROR;
    }
    if (envidx) {
        lua_pushvalue(L, envidx);
        if (!lua_setupvalue(L, -2, 1))
            lua_pop(L, 1);
    }
    int base = lua_gettop(L);               /* the function */
    lua_pushcfunction(L, cli_msghandler);
    lua_insert(L, base);
    bool local = cli.sink == NULL;
    if (local)
        cli.running = 1;
    int rc = lua_pcall(L, 0, LUA_MULTRET, base);
    if (local) {
        cli.running = 0;
        lua_sethook(L, NULL, 0, 0);
    }
    lua_remove(L, base);
    if (rc != LUA_OK) {
        report_error(lua_tostring(L, -1));
        lua_settop(L, top);
        return CLI_EVAL_ERROR;
    }
    int n = lua_gettop(L) - base + 1;
    if (n > 0) {
        if (envidx)
            lua_getfield(L, envidx, "print");
        else
            lua_getglobal(L, "print");
        lua_insert(L, base);
        lua_pushcfunction(L, cli_msghandler);
        lua_insert(L, base);
        if (lua_pcall(L, n, 0, base) != LUA_OK)
            report_error(lua_pushfstring(L, "error calling 'print' (%s)",
                                         lua_tostring(L, -1)));
    }
    if (local)
        fflush(stdout);
    lua_settop(L, top);
    return CLI_EVAL_OK;
}

/* ---- signals ---- */

static void on_signal(int sig)
{
    if (sig == SIGINT) {
        cli.intr = 1;
        if (cli.running && cli.L)
            lua_sethook(cli.L, lstop,
                        LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    } else {
        cli.stop = 1;
    }
}

void cli_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the loop ---- */

void cli_poll_all(void)
{
    lua_State *L = cli.L;
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    lua_getfield(L, -1, "_poll_all");
    lua_remove(L, -2);
    lua_remove(L, -2);
    if (lua_isfunction(L, -1))
        cli_docall(L, 0, 0);
    else
        lua_pop(L, 1);
}

int cli_step(int timeout_ms, int extra_fd)
{
    struct pollfd fds[256];
    int n = 0;
    int extra = -1, wfd = -1;
    if (extra_fd >= 0) {
        extra = n;
        fds[n++] = (struct pollfd){ .fd = extra_fd, .events = POLLIN };
    }
    if (cli.o.watch && (wfd = cli_watch_fd()) >= 0) {
        wfd = n;
        fds[n++] = (struct pollfd){ .fd = cli_watch_fd(), .events = POLLIN };
    }
    int cbase = n;
    n += cli_control_fds(fds + n, (int)(sizeof fds / sizeof fds[0]) - n);
    int r = poll(fds, (nfds_t)n, timeout_ms);
    int ready = 0;
    if (r > 0) {
        if (wfd >= 0 && fds[wfd].revents)
            cli_watch_handle();
        if (n > cbase)
            cli_control_handle(fds + cbase, n - cbase);
        if (extra >= 0 && fds[extra].revents)
            ready = 1;
    }
    cli_poll_all();
    double now = cli_now();
    if (cli.o.watch)
        cli_watch_tick(now);
    if (cli.o.metrics)
        cli_metrics_tick(now, false);
    return ready;
}

int cli_start(void)
{
    if (cli.o.control && cli_control_listen(cli.o.control) != 0)
        return 1;
    return 0;
}

int cli_run(void)
{
    cli_install_signals();
    if (cli.o.watch && cli_watch_start() != 0)
        return 1;
    if (cli.o.metrics)
        cli_metrics_tick(cli_now(), true);
    if (cli.o.interactive)
        cli_repl_start();
    while (!cli.stop) {
        if (cli.intr) {
            cli.intr = 0;
            if (cli_repl_active() && isatty(0))
                cli_repl_interrupt();
            else
                break;
        }
        if (!cli_repl_active() && !cli.o.serve)
            break;
        if (cli_step(10, cli_repl_active() ? 0 : -1))
            cli_repl_input();
    }
    if (cli.o.interactive)
        cli_repl_end();
    if (cli.stop || cli.intr)
        fprintf(stderr, "%s: signal received, draining\n", cli_progname);
    if (cli.o.metrics)
        cli_metrics_tick(cli_now(), true);
    return 0;
}

void cli_stop_all(void)
{
    cli_control_close();
    cli_watch_stop();
}
