/* SPDX-License-Identifier: MIT */
/*
 * cli_metrics.c -- seda-lua --metrics PATH: the Prometheus text exposition
 * of every live bus (cli.lua's M.metrics) written to PATH every second,
 * atomically (a new file PATH.tmp.XXXXXX made with mkstemp, then renamed
 * over PATH), so a node-exporter textfile collector or a scraper never
 * reads half a file, and a symlink planted next to PATH is never
 * followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lua.h>

#include "cli.h"

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

void cli_metrics_tick(double now, bool force)
{
    if (!force && now - last < PERIOD)
        return;
    last = now;
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "metrics"))
        return;
    if (lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
        if (!warned)
            fprintf(stderr, "%s: metrics: %s\n", cli_progname,
                    lua_tostring(L, -1));
        warned = true;
        lua_pop(L, 1);
        return;
    }
    size_t n;
    const char *s = lua_tolstring(L, -1, &n);
    const char *why = write_atomically(cli.o.metrics, s, n);
    if (why) {
        if (!warned)
            fprintf(stderr, "%s: --metrics: cannot write '%s': %s\n",
                    cli_progname, cli.o.metrics, why);
        warned = true;
    } else {
        warned = false;
    }
    lua_pop(L, 1);
}
