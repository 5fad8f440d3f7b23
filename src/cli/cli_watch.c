/* SPDX-License-Identifier: MIT */
/*
 * cli_watch.c -- seda-lua --watch: reload stages when their handler files
 * (or modules they require) change on disk.
 *
 * inotify watches directories, not files, so an editor's write to a
 * temporary file renamed over the original counts (IN_MOVED_TO), as does
 * an in-place write (IN_CLOSE_WRITE / IN_MODIFY).  Names not ending in
 * ".lua" are ignored.  Changed paths are collected until no event arrived
 * for 100 ms, then cli.lua's M.changed(paths) decides: the stages whose
 * handler file changed are reloaded; any other .lua file reloads every
 * stage (it may be a required module).  The watched directories are those
 * of every stage's handler files plus the package.path directories under
 * the script's directory, rescanned every second (stages can be added
 * from the REPL).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda.h"

#define DEBOUNCE 0.100
#define RESCAN 1.0

struct wdir {
    int wd;
    char *path;
};

static int ifd = -1;
static struct wdir *dirs;
static int ndirs, capdirs;
static char **changed;
static int nchanged, capchanged;
static double last_event, last_scan;

static const char *dir_of(int wd)
{
    for (int i = 0; i < ndirs; i++)
        if (dirs[i].wd == wd)
            return dirs[i].path;
    return NULL;
}

static void add_dir(const char *path)
{
    for (int i = 0; i < ndirs; i++)
        if (strcmp(dirs[i].path, path) == 0)
            return;
    int wd = inotify_add_watch(ifd, path, IN_CLOSE_WRITE | IN_MOVED_TO |
                               IN_MODIFY | IN_CREATE | IN_ONLYDIR);
    if (wd < 0) {
        char m[PATH_MAX + 128];
        snprintf(m, sizeof m, "watch: cannot watch '%s': %s", path,
                 strerror(errno));
        seda_log_write(SEDA_LOG_WARN, NULL, m);
        return;
    }
    if (ndirs == capdirs) {
        int nc = capdirs ? capdirs * 2 : 8;
        struct wdir *nd = realloc(dirs, sizeof *nd * (size_t)nc);
        if (!nd)
            return;
        dirs = nd;
        capdirs = nc;
    }
    dirs[ndirs].wd = wd;
    dirs[ndirs].path = strdup(path);
    if (dirs[ndirs].path)
        ndirs++;
}

static void rescan(void)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "watch_dirs"))
        return;
    if (cli.o.script_dir)
        lua_pushstring(L, cli.o.script_dir);
    else
        lua_pushnil(L);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        char m[512];
        snprintf(m, sizeof m, "watch: %s", lua_tostring(L, -1));
        seda_log_write(SEDA_LOG_ERROR, NULL, m);
        lua_pop(L, 1);
        return;
    }
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            const char *d = lua_tostring(L, -1);
            if (d)
                add_dir(d);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

int cli_watch_start(void)
{
    ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
        cli_logf(SEDA_LOG_ERROR, "--watch: inotify: %s", strerror(errno));
        return 1;
    }
    rescan();
    last_scan = cli_now();
    return 0;
}

int cli_watch_fd(void)
{
    return ifd;
}

static void note(const char *dir, const char *name)
{
    size_t nl = strlen(name);
    if (nl < 5 || strcmp(name + nl - 4, ".lua") != 0)
        return;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return;
    last_event = cli_now();
    for (int i = 0; i < nchanged; i++)
        if (strcmp(changed[i], path) == 0)
            return;
    if (nchanged == capchanged) {
        int nc = capchanged ? capchanged * 2 : 8;
        char **nv = realloc(changed, sizeof *nv * (size_t)nc);
        if (!nv)
            return;
        changed = nv;
        capchanged = nc;
    }
    if ((changed[nchanged] = strdup(path)))
        nchanged++;
}

void cli_watch_handle(void)
{
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t r = read(ifd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        for (char *p = buf; p < buf + r;) {
            struct inotify_event *ev = (struct inotify_event *)(void *)p;
            p += sizeof *ev + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                /* lost events: treat as "some module changed" */
                if (ndirs)
                    note(dirs[0].path, "(overflow).lua");
                continue;
            }
            if (ev->mask & IN_IGNORED) {
                for (int i = 0; i < ndirs; i++) {
                    if (dirs[i].wd == ev->wd) {
                        free(dirs[i].path);
                        dirs[i] = dirs[--ndirs];
                        break;
                    }
                }
                continue;
            }
            const char *d = dir_of(ev->wd);
            if (d && ev->len && !(ev->mask & IN_ISDIR))
                note(d, ev->name);
        }
    }
}

void cli_watch_tick(double now)
{
    if (ifd < 0)
        return;
    if (nchanged && now - last_event >= DEBOUNCE) {
        lua_State *L = cli.L;
        if (cli_get_fn(L, "changed")) {
            lua_createtable(L, nchanged, 0);
            for (int i = 0; i < nchanged; i++) {
                lua_pushstring(L, changed[i]);
                lua_rawseti(L, -2, i + 1);
            }
            cli_docall(L, 1, 0);
        }
        for (int i = 0; i < nchanged; i++)
            free(changed[i]);
        nchanged = 0;
    }
    if (now - last_scan >= RESCAN) {
        last_scan = now;
        rescan();
    }
}

void cli_watch_stop(void)
{
    if (ifd >= 0)
        close(ifd);
    ifd = -1;
    for (int i = 0; i < ndirs; i++)
        free(dirs[i].path);
    free(dirs);
    dirs = NULL;
    ndirs = capdirs = 0;
    for (int i = 0; i < nchanged; i++)
        free(changed[i]);
    free(changed);
    changed = NULL;
    nchanged = capchanged = 0;
}
