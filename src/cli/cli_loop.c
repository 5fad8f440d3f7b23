/* SPDX-License-Identifier: MIT */
/*
 * cli_loop.c -- shared state of the seda-lua program, its Lua glue (the
 * embedded lua/seda/cli.lua, REPL evaluation) and the main-thread event
 * loop: one poll() over stdin (the REPL), the binding's wake descriptor
 * (readable when an on_complete callback is queued), the control socket
 * and its clients, the inotify descriptor and the HTTP endpoint's (--http,
 * cli_http.c: libmicrohttpd's epoll descriptor).  It sleeps until one of
 * them is ready, the next timer (seda.timer, seda.every) is due, or the
 * periodic work (--watch debounce, the --metrics file, the rate sampler
 * of stats()/top, idle control clients, HTTP connection timeouts) wants a
 * turn, then runs what is pending on the main state
 * (seda_lua_run_pending).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "seda.h"
#include "seda_lua.h"
#include "seda_lua_admin.h"

struct cli cli = { .mod_ref = LUA_NOREF };
const char *cli_progname = "seda-lua";

void cli_logf(int level, const char *fmt, ...)
{
    if (!seda_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    if (seda_log_format() == SEDA_LOG_JSON) {
        char m[8192];                   /* the log cuts a line at 4 KiB */
        vsnprintf(m, sizeof m, fmt, ap);
        seda_log_write(level, NULL, m);
    } else {
        fprintf(stderr, "%s: %s", cli_progname,
                level == SEDA_LOG_WARN ? "warning: " : "");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        fflush(stderr);
    }
    va_end(ap);
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- calling Lua ---- */

/* Registry key of the last message a REPL helper raised (C.fail). */
static const char FAIL_KEY[] = "seda-lua cli.fail";

/* The runtime's own handler (message + traceback), except for an error a
 * REPL helper raised with C.fail: that message alone. */
int cli_msghandler(lua_State *L)
{
    if (lua_type(L, 1) == LUA_TSTRING) {
        lua_getfield(L, LUA_REGISTRYINDEX, FAIL_KEY);
        bool helper = lua_rawequal(L, 1, -1);
        lua_pop(L, 1);
        if (helper) {
            lua_settop(L, 1);
            return 1;
        }
    }
    return seda__l_worker_msghandler(L);
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
        cli_logf(SEDA_LOG_ERROR, "%s", lua_tostring(L, -1));
        fflush(stderr);
        lua_pop(L, 1);
    }
    return rc;
}

bool cli_get_fn(lua_State *L, const char *name)
{
    return cli_module_fn(L, cli.mod_ref, name);
}

bool cli_module_fn(lua_State *L, int ref, const char *name)
{
    if (ref == LUA_NOREF || ref == LUA_REFNIL)
        return false;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
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

/* One frame of top() on the terminal: the header and body in a single
 * write(2).  Through stdio a line-buffered terminal gets one write per
 * line, and a reader of the screen could see a frame half drawn. */
void cli_top_frame(double secs, const char *body, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    char ts[32], head[160];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    int h = snprintf(head, sizeof head, "\033[H\033[2J%s top  every %gs  %s  "
                     "(press a key to stop)\n\n", cli_progname, secs, ts);
    if (h < 0)
        return;
    if ((size_t)h >= sizeof head)
        h = (int)sizeof head - 1;
    char *frame = malloc((size_t)h + n);
    if (frame == NULL) {                /* draw it in two writes, then */
        fputs(head, stdout);
        fwrite(body, 1, n, stdout);
        fflush(stdout);
        return;
    }
    memcpy(frame, head, (size_t)h);
    memcpy(frame + h, body, n);
    fflush(stdout);
    size_t off = 0, len = (size_t)h + n;
    while (off < len) {
        ssize_t w = write(1, frame + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(frame);
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
    cli_repl_top_local(secs);
    return 0;
}

/* C.fail(msg): raise msg (a string) with no position; the message
 * handler shows it without a traceback.  Does not return. */
static int c_fail(lua_State *L)
{
    luaL_checkstring(L, 1);
    lua_settop(L, 1);
    lua_pushvalue(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, FAIL_KEY);
    return lua_error(L);
}

/* C.warn(msg): a warn line on the event log. */
/* C.printable(s [, lines]): s made safe for a terminal (cli_term.c);
 * lines true keeps newlines and tabs.  A non-string is tostring'ed. */
static int c_printable(lua_State *L)
{
    size_t n;
    const char *s = luaL_tolstring(L, 1, &n);
    int flags = lua_toboolean(L, 2) ? CLI_TERM_LINES : 0;
    luaL_Buffer b;
    char *out = luaL_buffinitsize(L, &b, 4 * n + 1);
    luaL_pushresultsize(&b, cli_term_escape(s, n, flags, out));
    return 1;
}

static int c_warn(lua_State *L)
{
    const char *m = luaL_checkstring(L, 1);
    fflush(stdout);
    seda_log_write(SEDA_LOG_WARN, NULL, m);
    return 0;
}

/* C.log(level, stage, msg): a line on the event log (stage may be nil),
 * as seda.log writes them: --log-format applies. */
static int c_log(lua_State *L)
{
    static const char *const levels[] = { "debug", "info", "warn", "error",
                                          NULL };
    int level = luaL_checkoption(L, 1, NULL, levels);
    const char *stage = luaL_optstring(L, 2, NULL);
    const char *m = luaL_checkstring(L, 3);
    fflush(stdout);
    seda_log_write(level, stage, m);
    return 0;
}

/* C.drain_stopped() -> true once a signal arrived during the drain. */
static int c_drain_stopped(lua_State *L)
{
    lua_pushboolean(L, cli.drain_stop != 0);
    return 1;
}

/* C.quiesce(bus): its listeners stop accepting (the drain's first step:
 * what they took in is still answered). */
static int c_quiesce(lua_State *L)
{
    seda__l_bus_quiesce(L, 1);
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

static bool interrupt_pending(lua_State *L);

/* os.exit(code, close) in the program: end the run as its normal end
 * does (cli_finish: callbacks until idle, then the bounded drain, and
 * what was dropped is said), then exit as Lua's os.exit does (upvalue 1).
 * From a control client's command it refuses: a client does not end the
 * server. */
static int c_os_exit(lua_State *L)
{
    if (cli.sink)
        return luaL_error(L, "os.exit: not from an attached client (it "
                          "would stop the server; send the server SIGTERM)");
    int n = lua_gettop(L);
    cli_stop_all();
    cli_finish(!cli.stop);
    lua_settop(L, n);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, 0);
    return 0;
}

/* C.history(bus, stage, series, n): the last n values (at most; NaN
 * where there was none) of a stage's series of the history
 * (cli_history.c), oldest first, or nil when it has none. */
static int c_history(lua_State *L)
{
    const char *bus = luaL_checkstring(L, 1);
    const char *stage = luaL_checkstring(L, 2);
    const char *series = luaL_checkstring(L, 3);
    lua_Integer n = luaL_checkinteger(L, 4);
    luaL_argcheck(L, n > 0 && n <= HIST_SLOTS, 4, "1 to HIST_SLOTS values");
    float v[HIST_SLOTS];
    int got = cli_history_series(bus, stage, series, v, (int)n);
    if (got < 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, got, 0);
    for (int i = 0; i < got; i++) {
        lua_pushnumber(L, (lua_Number)v[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

int cli_setup(lua_State *L)
{
    size_t len = (size_t)(cli_lua_end - cli_lua_src);
    size_t plen = (size_t)(cli_pretty_end - cli_pretty_src);
    if (luaL_loadbuffer(L, cli_lua_src, len, "=[seda-lua cli]") != LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    if (luaL_loadbuffer(L, cli_pretty_src, plen, "=[seda-lua pretty]") !=
        LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "%s", lua_tostring(L, -1));
        lua_pop(L, 2);
        return 1;
    }
    if (cli_docall(L, 0, 1) != LUA_OK) {    /* prints and pops the error */
        lua_pop(L, 1);
        return 1;
    }
    static const luaL_Reg fns[] = {
        { "write", c_write },
        { "top", c_top },
        { "realpath", c_realpath },
        { "fail", c_fail },
        { "warn", c_warn },
        { "printable", c_printable },
        { "log", c_log },
        { "drain_stopped", c_drain_stopped },
        { "quiesce", c_quiesce },
        { "history", c_history },
        { NULL, NULL }
    };
    luaL_newlib(L, fns);
    lua_insert(L, -2);                  /* (chunk, C, P) */
    if (cli_docall(L, 2, 1) != LUA_OK)
        return 1;
    cli.mod_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (cli_metrics_setup(L) != 0)
        return 1;
    seda__l_callback_interrupt_pending = interrupt_pending;
    if (cli_get_fn(L, "install")) {
        lua_pushglobaltable(L);
        if (cli_docall(L, 1, 0) != LUA_OK)
            return 1;
    }
    if (lua_getglobal(L, "os") == LUA_TTABLE) {
        lua_getfield(L, -1, "exit");
        lua_pushcclosure(L, c_os_exit, 1);
        lua_setfield(L, -2, "exit");
    }
    lua_pop(L, 1);
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
    if (seda__l_callback_depth > 0)
        return;         /* stays armed: stops the command, not a callback */
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

/* bus:wait()'s check (seda__l_callback_interrupt_pending): a local interrupt is
 * armed, or the control client whose command runs asked for one. */
static bool interrupt_pending(lua_State *L)
{
    return lua_gethook(L) == lstop || cli_control_interrupt_pending(L);
}

int cli_eval(lua_State *L, const char *chunk, size_t len, const char *name,
             int envidx)
{
    return cli_eval_as(L, chunk, len, name, envidx, false);
}

int cli_eval_as(lua_State *L, const char *chunk, size_t len,
                const char *name, int envidx, bool json)
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
    /* A control client's command may run inside a local one (top() keeps
     * the loop going): restore what was there. */
    lua_Hook hook = lua_gethook(L);
    int hmask = lua_gethookmask(L), hcount = lua_gethookcount(L);
    sig_atomic_t was_running = cli.running;
    if (cli.sink && cli.sink->hook)
        lua_sethook(L, cli.sink->hook, LUA_MASKCOUNT, 1000);
    cli.running = 1;
    int rc = lua_pcall(L, 0, LUA_MULTRET, base);
    cli.running = was_running;
    lua_sethook(L, hook, hmask, hcount);   /* drops a stale lstop too */
    lua_remove(L, base);
    if (rc != LUA_OK) {
        report_error(lua_tostring(L, -1));
        lua_settop(L, top);
        return CLI_EVAL_ERROR;
    }
    int n = lua_gettop(L) - base + 1;
    if (n > 0 || json) {
        /* show(print, ...) pretty-prints through the chunk's own print
         * (an attached client's); plain print when cli.lua has none.
         * show_json(print, ...) writes the results as one line of JSON,
         * "[]" for none. */
        if (envidx)
            lua_getfield(L, envidx, "print");
        else
            lua_getglobal(L, "print");
        lua_insert(L, base);
        if (cli_get_fn(L, json ? "show_json" : "show")) {
            lua_insert(L, base);
            n++;
        }
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

static pthread_t main_thread;

void cli_interrupt(lua_State *L)
{
    lua_sethook(L, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

/* See struct cli.  Runs on the main thread only (a signal delivered to a
 * bus worker is passed on), so it never races the main thread's own
 * lua_sethook calls. */
static void on_signal(int sig)
{
    int saved = errno;
    if (!pthread_equal(pthread_self(), main_thread)) {
        pthread_kill(main_thread, sig);
        errno = saved;
        return;
    }
    switch (cli.phase) {
    case CLI_SCRIPT:
        if (cli.stop && cli.L)          /* a second signal */
            cli_interrupt(cli.L);
        cli.stop = 1;
        break;
    case CLI_LOOP:
        if (sig == SIGINT && cli.prompt) {
            cli.intr = 1;               /* clear the line */
        } else {
            cli.stop = 1;
        }
        if (cli.running && cli.L)
            cli_interrupt(cli.L);
        break;
    case CLI_DRAIN:
        cli.drain_stop = 1;
        break;
    default:
        break;
    }
    errno = saved;
}

void cli_install_signals(void)
{
    main_thread = pthread_self();
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
    seda_lua_run_pending(cli.L);
}

/* Periodic work: --watch's debounce wants a look every 50 ms; the
 * --metrics file, the rate sampler of top/stats and idle control clients
 * every 250 ms are plenty. */
static int periodic_ms(void)
{
    return cli.o.watch ? 50 : 250;
}

void cli_start_buses(bool failed)
{
    lua_State *L = cli.L;
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    lua_remove(L, -2);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_getfield(L, -1, failed ? "_hold_all" : "_poll_all");
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
    int extra = -1, wfd = -1, wake = -1;
    if (extra_fd >= 0) {
        extra = n;
        fds[n++] = (struct pollfd){ .fd = extra_fd, .events = POLLIN };
    }
    int efd = seda_lua_wakefd(cli.L);
    if (efd >= 0) {
        wake = n;
        fds[n++] = (struct pollfd){ .fd = efd, .events = POLLIN };
    }
    if (cli.o.watch && (wfd = cli_watch_fd()) >= 0) {
        wfd = n;
        fds[n++] = (struct pollfd){ .fd = cli_watch_fd(), .events = POLLIN };
    }
    int cbase = n;
    n += cli_control_fds(fds + n, (int)(sizeof fds / sizeof fds[0]) - n);
    /* Sleep until the caller's timeout, the next timer or the periodic
     * work, whichever comes first; a completion wakes us at once.
     * Without a wake descriptor (out of descriptors), 10 ms as before. */
    int ms = timeout_ms < 0 ? periodic_ms() : timeout_ms;
    if (efd < 0 && ms > 10)
        ms = 10;
    double next = seda_lua_next_timer(cli.L);
    if (next >= 0) {
        double tm = next * 1000.0;
        if (tm < ms)
            ms = (int)tm + (tm > (int)tm);      /* round up: due by then */
    }
    int r = poll(fds, (nfds_t)n, ms);
    int ready = 0;
    if (r > 0) {
        if (wfd >= 0 && fds[wfd].revents)
            cli_watch_handle();
        if (n > cbase)
            cli_control_handle(fds + cbase, n - cbase);
        if (extra >= 0 && fds[extra].revents)
            ready = 1;
    }
    (void)wake;                 /* drained by cli_poll_all */
    cli_poll_all();
    double now = cli_now();
    cli_periodic(now);
    return ready;
}

void cli_periodic(double now)
{
    static double last_sample;
    if (cli.o.watch)
        cli_watch_tick(now);
    cli_control_tick(now);
    if (now - last_sample >= 0.25) {
        last_sample = now;
        if (cli_get_fn(cli.L, "sample"))
            cli_docall(cli.L, 0, 0);
    }
    /* The history: the observer thread's when it runs, else ours. */
    if (!cli_observe_running() && cli_history_due(now) == 0)
        cli_history_tick(cli.L, now);
}

int cli_start(void)
{
    if (cli.o.control && cli_control_listen(cli.o.control) != 0)
        return 1;
    if ((cli.o.http || cli.o.metrics) && cli_observe_open() != 0)
        return 1;
    if (cli.o.http && cli_http_start(cli.o.http) != 0)
        return 1;
    if (cli.o.metrics)
        cli_metrics_tick(cli_now(), true);
    return cli_observe_start();
}

int cli_run(void)
{
    if (cli.o.watch && cli_watch_start() != 0)
        return 1;
    cli.phase = CLI_LOOP;
    if (cli.o.interactive)
        cli_repl_start();
    while (!cli.stop) {
        cli.prompt = cli_repl_tty();
        if (cli.intr) {
            cli.intr = 0;
            cli_repl_interrupt();
        }
        if (!cli_repl_active() && !cli.o.serve &&
            !(cli.plain && cli_plain_alive()))
            break;
        if (cli_step(-1, cli_repl_active() ? 0 : -1))
            cli_repl_input();
    }
    cli.prompt = 0;
    cli.intr = 0;
    if (cli.o.interactive)
        cli_repl_end();
    cli_control_close();                /* clients see the end now */
    cli_observe_stop();
    cli_http_stop();
    if (cli.stop)
        seda_log_write(SEDA_LOG_INFO, NULL, "signal received, draining");
    if (cli.o.metrics)
        cli_metrics_tick(cli_now(), true);
    return 0;
}

bool cli_plain_alive(void)
{
    return seda__l_http_open() > 0 || seda__l_nats_open() > 0 ||
           seda_lua_timers_alive(cli.L) > 0;
}

/* Let the buses settle (cli.lua's settle: their callbacks run until none
 * has work); false when a signal stopped it. */
static bool plain_settle(void)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "settle"))
        return true;
    cli.drain_stop = 0;
    cli.phase = CLI_DRAIN;              /* a signal stops the settling */
    bool ok = cli_docall(L, 0, 1) == LUA_OK && lua_toboolean(L, -1);
    if (lua_gettop(L) > 0)
        lua_pop(L, 1);
    cli.phase = CLI_IDLE;
    return ok && !cli.drain_stop;
}

void cli_plain(void)
{
    bool signals = false;
    for (;;) {
        if (!plain_settle()) {          /* only once signals are caught */
            cli.stop = 1;
            seda_log_write(SEDA_LOG_INFO, NULL, "signal received, draining");
            break;
        }
        if (!cli_plain_alive())
            break;
        if (!signals) {
            cli_install_signals();
            signals = true;
        }
        cli.plain = true;
        cli_run();                      /* while alive, or to a signal */
        cli.plain = false;
        if (cli.stop)
            break;
    }
}

int cli_finish(bool wait_first)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "finish"))
        return -1;
    cli.drain_stop = 0;
    cli.phase = CLI_DRAIN;
    lua_pushnumber(L, cli.o.drain);
    lua_pushboolean(L, wait_first);
    int rc = cli_docall(L, 2, 1) != LUA_OK ? -1 : 0;
    if (rc == 0) {
        rc = lua_toboolean(L, -1) ? 1 : 0;
        lua_pop(L, 1);
    }
    cli.phase = CLI_IDLE;
    return rc;
}

void cli_banner(void)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "banner"))
        return;
    if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1)) {
        fputs(lua_tostring(L, -1), stdout);
        fflush(stdout);
    }
    lua_pop(L, 1);
}

void cli_stop_all(void)
{
    cli_control_close();
    cli_observe_stop();
    cli_http_stop();
    cli_watch_stop();
    cli_history_free();
}
