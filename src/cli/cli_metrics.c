/* SPDX-License-Identifier: MIT */
/*
 * cli_metrics.c -- seda-lua --metrics PATH: the Prometheus text exposition
 * of every live bus (cli.lua's M.metrics) written to PATH every second,
 * atomically (PATH.tmp, then rename), so a node-exporter textfile
 * collector or a scraper never reads half a file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>

#include "cli.h"

#define PERIOD 1.0

static double last;
static bool warned;

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
    size_t pl = strlen(cli.o.metrics);
    char *tmp = malloc(pl + 5);
    if (tmp) {
        memcpy(tmp, cli.o.metrics, pl);
        memcpy(tmp + pl, ".tmp", 5);
        FILE *f = fopen(tmp, "w");
        bool ok = f && fwrite(s, 1, n, f) == n;
        if (f && fclose(f) != 0)
            ok = false;
        if (ok && rename(tmp, cli.o.metrics) != 0)
            ok = false;
        if (!ok) {
            if (!warned)
                fprintf(stderr, "%s: --metrics: cannot write '%s': %s\n",
                        cli_progname, cli.o.metrics, strerror(errno));
            warned = true;
            remove(tmp);
        } else {
            warned = false;
        }
        free(tmp);
    }
    lua_pop(L, 1);
}
