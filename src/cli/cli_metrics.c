/* SPDX-License-Identifier: MIT */
/*
 * cli_metrics.c -- the Prometheus text exposition: lua/seda/metrics.lua,
 * embedded here (the Makefile passes its path as CLI_METRICS_FILE and
 * makes this object depend on it), installed as M.metrics by
 * cli_metrics_setup; and seda-lua --metrics PATH, which writes it to PATH
 * every second, atomically (a new file PATH.tmp.XXXXXX made with mkstemp,
 * then renamed over PATH), so a node-exporter textfile collector or a
 * scraper never reads half a file, and a symlink planted next to PATH is
 * never followed.  (--http serves the same text at /metrics: cli_http.c.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda.h"

#ifndef CLI_METRICS_FILE
#define CLI_METRICS_FILE "lua/seda/metrics.lua"
#endif

__asm__(".section .rodata\n"
        ".global cli_metrics_src\n"
        ".type cli_metrics_src, @object\n"
        "cli_metrics_src:\n"
        ".incbin \"" CLI_METRICS_FILE "\"\n"
        ".global cli_metrics_end\n"
        ".type cli_metrics_end, @object\n"
        "cli_metrics_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char cli_metrics_src[];
extern const char cli_metrics_end[];

int cli_metrics_load(lua_State *L)
{
    size_t len = (size_t)(cli_metrics_end - cli_metrics_src);
    if (luaL_loadbuffer(L, cli_metrics_src, len, "=[seda-lua metrics]") !=
        LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    lua_pushvalue(L, -2);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        cli_logf(SEDA_LOG_ERROR, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    return 0;
}

int cli_metrics_setup(lua_State *L)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, cli.mod_ref);
    int rc = cli_metrics_load(L);
    lua_pop(L, 1);
    return rc;
}

#define PERIOD 1.0

static double last;
static bool warned;

/* Replace path with s[0..n) atomically: a new file made next to it with
 * mkstemp (O_CREAT | O_EXCL under a random name: nothing planted there,
 * a symlink included, is ever followed or overwritten), written, then
 * renamed over path.  The file gets mode 0644 less the umask (mkstemp
 * makes 0600), as a plain create would.  Returns NULL, or what failed. */
static const char *write_atomically(const char *path, const char *s,
                                    size_t n)
{
    static char why[160];
    size_t pl = strlen(path);
    char *tmp = malloc(pl + sizeof ".tmp.XXXXXX");
    if (!tmp)
        return "out of memory";
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot create a file next to it: %s",
                 strerror(errno));
        free(tmp);
        return why;
    }
    mode_t um = umask(0);
    umask(um);
    const char *err = NULL;
    if (fchmod(fd, 0644 & ~um) != 0)
        err = "chmod";
    for (size_t off = 0; !err && off < n;) {
        ssize_t w = write(fd, s + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            err = "write";
        else
            off += (size_t)w;
    }
    if (close(fd) != 0 && !err)
        err = "close";
    if (!err && rename(tmp, path) != 0)
        err = "rename";
    if (err) {
        snprintf(why, sizeof why, "%s: %s", err, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return err ? why : NULL;
}

int cli_metrics_check(const char *path)
{
    /* Written once now (an empty exposition is a valid one): a path that
     * cannot be written fails the start, as a bad --http does. */
    const char *why = write_atomically(path, "", 0);
    if (!why)
        return 0;
    cli_logf(SEDA_LOG_ERROR, "--metrics: cannot write '%s': %s", path, why);
    return 1;
}

void cli_metrics_tick(double now, bool force)
{
    if (!force && now - last < PERIOD)
        return;
    last = now;
    lua_State *L = cli_observe_state();
    if (!L)
        return;
    if (!cli_observe_fn(L, "metrics") || lua_pcall(L, 0, 1, 0) != LUA_OK ||
        !lua_isstring(L, -1)) {
        if (!warned) {
            char m[512];
            snprintf(m, sizeof m, "metrics: %s", lua_tostring(L, -1));
            seda_log_write(SEDA_LOG_ERROR, NULL, m);
        }
        warned = true;
        cli_observe_release();
        return;
    }
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    const char *why = write_atomically(cli.o.metrics, s, n);
    if (why) {
        if (!warned)
            cli_logf(SEDA_LOG_ERROR, "--metrics: cannot write '%s': %s",
                     cli.o.metrics, why);
        warned = true;
    } else {
        warned = false;
    }
    cli_observe_release();
}
