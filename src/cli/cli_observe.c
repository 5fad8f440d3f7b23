/* SPDX-License-Identifier: MIT */
/*
 * cli_observe.c -- the observer: a Lua state and a thread of their own that
 * answer --http and write --metrics, so a main state busy with a script,
 * a long REPL command or `while true do end` does not stop a scrape.
 *
 * The state is not the main one: it holds lua/seda/cli.lua and
 * lua/seda/metrics.lua (the same embedded sources), and its `seda` module
 * is the binding's observer (seda_lua_open_observer): every live bus seen
 * read-only, never waiting for the main thread.  The thread polls the
 * HTTP endpoint's descriptor (cli_http.c; libmicrohttpd's request callback
 * runs on it), writes the metrics file every second and takes the
 * history's samples (cli_history.c).  The main thread
 * uses the state only before the thread starts and after it stopped (the
 * first and last metrics files), and the mutex below says so to whoever
 * calls cli_observe_state from elsewhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "seda_lua.h"

static struct {
    pthread_mutex_t mu;         /* guards L (and mod_ref's use) */
    lua_State *L;               /* the observer state, or NULL */
    int mod_ref;                /* cli.lua's module table in L */
    pthread_t th;
    bool running;               /* main thread only */
    int stop[2];                /* a pipe: the thread's stop signal */
} ob = { .mu = PTHREAD_MUTEX_INITIALIZER, .mod_ref = LUA_NOREF,
         .stop = { -1, -1 } };

/* Run chunk (len bytes) named name on L with nargs arguments below it;
 * leaves one result.  0, or -1 (said on stderr). */
static int run_chunk(lua_State *L, const char *src, size_t len,
                     const char *name, int nargs)
{
    if (luaL_loadbuffer(L, src, len, name) != LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "observer: %s", lua_tostring(L, -1));
        return -1;
    }
    lua_insert(L, -nargs - 1);
    if (lua_pcall(L, nargs, 1, 0) != LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "observer: %s", lua_tostring(L, -1));
        return -1;
    }
    return 0;
}

static int open_state(lua_State *L)
{
    luaL_openlibs(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    seda_lua_open_observer(L);
    lua_setfield(L, -2, "seda");
    lua_pop(L, 1);
    /* cli.lua's arguments: no C functions (the observer prints nothing),
     * and the pretty-printer's module. */
    lua_newtable(L);
    if (run_chunk(L, cli_pretty_src, (size_t)(cli_pretty_end -
                  cli_pretty_src), "=[seda-lua pretty]", 0) != 0 ||
        run_chunk(L, cli_lua_src, (size_t)(cli_lua_end - cli_lua_src),
                  "=[seda-lua cli]", 2) != 0)
        return -1;
    lua_pushvalue(L, -1);
    ob.mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return cli_metrics_load(L);          /* M.metrics, on the table */
}

int cli_observe_open(void)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        cli_logf(SEDA_LOG_ERROR, "observer: out of memory");
        return 1;
    }
    if (open_state(L) != 0) {
        lua_close(L);
        return 1;
    }
    lua_settop(L, 0);
    ob.L = L;
    return 0;
}

lua_State *cli_observe_state(void)
{
    if (!ob.L)
        return NULL;
    pthread_mutex_lock(&ob.mu);
    lua_settop(ob.L, 0);
    return ob.L;
}

void cli_observe_release(void)
{
    lua_settop(ob.L, 0);
    pthread_mutex_unlock(&ob.mu);
}

bool cli_observe_fn(lua_State *L, const char *name)
{
    return cli_module_fn(L, ob.mod_ref, name);
}

static void *observe_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = ob.stop[0], .events = POLLIN },
                               { .fd = cli_http_fd(), .events = POLLIN } };
        int ms = cli_http_timeout(250);  /* the reaper's and the file's pace */
        int due = cli_history_due(cli_now());
        if (ms < 0 || due < ms)
            ms = due;
        int r = poll(p, p[1].fd >= 0 ? 2 : 1, ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && p[0].revents)
            break;
        cli_http_run();
        if (cli_history_due(cli_now()) == 0) {
            lua_State *L = cli_observe_state();
            cli_history_tick(L, cli_now());
            cli_observe_release();
        }
        if (cli.o.metrics)
            cli_metrics_tick(cli_now(), false);
    }
    return NULL;
}

bool cli_observe_running(void)
{
    return ob.running;
}

int cli_observe_start(void)
{
    if (!ob.L || ob.running)
        return 0;
    if (pipe2(ob.stop, O_CLOEXEC) != 0 ||
        pthread_create(&ob.th, NULL, observe_main, NULL) != 0) {
        cli_logf(SEDA_LOG_ERROR, "observer: cannot start its thread: %s",
                 strerror(errno));
        return 1;
    }
    ob.running = true;
    return 0;
}

void cli_observe_stop(void)
{
    if (!ob.running)
        return;
    ssize_t w;
    do
        w = write(ob.stop[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(ob.th, NULL);
    close(ob.stop[0]);
    close(ob.stop[1]);
    ob.stop[0] = ob.stop[1] = -1;
    ob.running = false;
}

void cli_observe_close(void)
{
    cli_observe_stop();
    if (ob.L)
        lua_close(ob.L);
    ob.L = NULL;
    ob.mod_ref = LUA_NOREF;
}
