/* SPDX-License-Identifier: MIT */
/*
 * main.c -- the seda-lua program.
 *
 *   seda-lua [options] [script [args]]
 *
 * Runs a Lua script with the `seda` module preloaded, like the lua
 * interpreter (the same `arg` table), then waits until every bus the
 * script created is idle, shuts them down gracefully and exits 0.  A script
 * error prints its message and traceback and exits 1.  --serve keeps the
 * process up until SIGINT/SIGTERM, running on_complete callbacks, then
 * drains (bounded) and exits.  -i runs a REPL after the script.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "seda.h"

int luaopen_seda(lua_State *L);

static const char *progname = "seda-lua";
static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s [options] [script [args]]\n"
        "Run a seda-lua pipeline script: run it, wait until its buses are\n"
        "idle, shut them down gracefully and exit 0 (1 on a script error).\n"
        "\n"
        "options:\n"
        "  -e CODE        execute the Lua string CODE (before the script)\n"
        "  -i             enter an interactive REPL after the script\n"
        "  --serve        keep running until SIGINT/SIGTERM, then drain "
        "and exit\n"
        "  --drain SECS   bound on the final drain (default 30)\n"
        "  -v, --version  print the version and exit\n"
        "  -h, --help     print this help and exit\n"
        "  --             stop handling options\n"
        "  -              run the script read from standard input\n",
        progname);
}

static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") &&
            lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)",
                              luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Call the function below nargs arguments with a traceback handler.  On
 * error prints the message and returns it non-zero. */
static int docall(lua_State *L, int nargs, int nres)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (rc != LUA_OK) {
        fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
        fflush(stderr);
        lua_pop(L, 1);
    }
    return rc;
}

/* Call seda._NAME(arg, flag) from the preloaded module. */
static int call_seda2(lua_State *L, const char *fn, double arg, bool flag,
                      int nres)
{
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    lua_remove(L, -2);
    lua_pushnumber(L, arg);
    lua_pushboolean(L, flag);
    return docall(L, 2, nres);
}

static int call_seda(lua_State *L, const char *fn, double arg, int nres)
{
    return call_seda2(L, fn, arg, true, nres);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

/* ---- REPL (minimal; line editing comes with the control features) ---- */

static int incomplete(lua_State *L, int status)
{
    if (status == LUA_ERRSYNTAX) {
        size_t lmsg;
        const char *msg = lua_tolstring(L, -1, &lmsg);
        if (lmsg >= 5 && strcmp(msg + lmsg - 5, "<eof>") == 0) {
            lua_pop(L, 1);
            return 1;
        }
    }
    return 0;
}

static void repl(lua_State *L)
{
    char line[4096];
    for (;;) {
        call_seda(L, "_poll_all", 0, 0);
        fputs("> ", stdout);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            break;
        lua_pushstring(L, line);                  /* the chunk so far */
        for (;;) {
            const char *code = lua_tostring(L, -1);
            lua_pushfstring(L, "return %s", code);
            int st = luaL_loadbuffer(L, lua_tostring(L, -1),
                                     lua_rawlen(L, -1), "=stdin");
            lua_remove(L, -2);
            if (st != LUA_OK) {
                lua_pop(L, 1);
                st = luaL_loadbuffer(L, code, strlen(code), "=stdin");
            }
            if (st == LUA_OK) {
                lua_remove(L, -2);                /* the source */
                int base = lua_gettop(L);
                if (docall(L, 0, LUA_MULTRET) == LUA_OK &&
                    lua_gettop(L) >= base) {
                    int n = lua_gettop(L) - base + 1;
                    lua_getglobal(L, "print");
                    lua_insert(L, base);
                    docall(L, n, 0);
                }
                lua_settop(L, base - 1);
                break;
            }
            if (!incomplete(L, st)) {
                fprintf(stderr, "%s\n", lua_tostring(L, -1));
                lua_pop(L, 2);
                break;
            }
            fputs(">> ", stdout);
            fflush(stdout);
            if (!fgets(line, sizeof line, stdin)) {
                lua_pop(L, 1);
                return;
            }
            lua_pushstring(L, line);
            lua_concat(L, 2);
        }
    }
    fputs("\n", stdout);
}

/* ---- main ---- */

struct opts {
    bool interactive;
    bool serve;
    double drain;
    int script;                 /* argv index of the script, or 0 */
};

static int create_arg_table(lua_State *L, char **argv, int argc, int script)
{
    int narg = argc - (script + 1);
    lua_createtable(L, narg, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
    return narg;
}

static int run(lua_State *L, int argc, char **argv)
{
    struct opts o = { false, false, 30.0, 0 };
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 0);
    lua_pop(L, 1);

    /* First pass: options that end the run at once, and the script. */
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || strcmp(a, "-") == 0)
            break;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            printf("seda-lua %s (%s)\n", SEDA_VERSION, LUA_RELEASE);
            return 0;
        }
        if (strcmp(a, "-i") == 0) {
            o.interactive = true;
        } else if (strcmp(a, "--serve") == 0) {
            o.serve = true;
        } else if (strcmp(a, "-e") == 0 || strcmp(a, "--drain") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
                usage(stderr);
                return 1;
            }
            if (a[1] == '-') {
                char *end;
                o.drain = strtod(argv[i + 1], &end);
                if (*end || o.drain < 0) {
                    fprintf(stderr, "%s: --drain: not a number of seconds: "
                            "'%s'\n", progname, argv[i + 1]);
                    return 1;
                }
            }
            i++;
        } else {
            fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a);
            usage(stderr);
            return 1;
        }
    }
    if (i < argc)
        o.script = i;
    create_arg_table(L, argv, argc, o.script ? o.script : argc - 1);

    /* Second pass: run -e chunks in order. */
    for (int k = 1; k < (o.script ? o.script : argc); k++) {
        if (strcmp(argv[k], "-e") == 0) {
            if (luaL_loadbuffer(L, argv[k + 1], strlen(argv[k + 1]),
                                "=(command line)") != LUA_OK) {
                fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
                return 1;
            }
            if (docall(L, 0, 0) != LUA_OK)
                return 1;
            k++;
        } else if (strcmp(argv[k], "--drain") == 0) {
            k++;
        }
    }

    if (o.script) {
        const char *fname = argv[o.script];
        if (strcmp(fname, "-") == 0 && strcmp(argv[o.script - 1], "--"))
            fname = NULL;                       /* stdin */
        if (luaL_loadfile(L, fname) != LUA_OK) {
            fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
            return 1;
        }
        int n = 0;
        for (int k = o.script + 1; k < argc; k++, n++)
            lua_pushstring(L, argv[k]);
        if (docall(L, n, 0) != LUA_OK)
            return 1;
    } else if (!o.interactive && !o.serve) {
        bool ran_e = false;
        for (int k = 1; k < argc; k++)
            ran_e |= strcmp(argv[k], "-e") == 0;
        if (!ran_e) {
            if (isatty(0)) {
                o.interactive = true;
                printf("seda-lua %s (%s)\n", SEDA_VERSION, LUA_RELEASE);
            } else {
                if (luaL_loadfile(L, NULL) != LUA_OK) {
                    fprintf(stderr, "%s: %s\n", progname,
                            lua_tostring(L, -1));
                    return 1;
                }
                if (docall(L, 0, 0) != LUA_OK)
                    return 1;
            }
        }
    }

    if (o.interactive)
        repl(L);

    if (o.serve) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        while (!g_stop) {
            if (call_seda(L, "_poll_all", 0, 0) != LUA_OK)
                return 1;
            sleep_ms(10);
        }
        fprintf(stderr, "%s: signal received, draining\n", progname);
    }

    if (call_seda2(L, "_finish", o.drain, !o.serve, 1) != LUA_OK)
        return 1;
    if (!lua_toboolean(L, -1))
        fprintf(stderr, "%s: a bus did not drain within %gs; what was left "
                "was counted dropped\n", progname, o.drain);
    lua_pop(L, 1);
    return 0;
}

int main(int argc, char **argv)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s: cannot create a Lua state\n", progname);
        return 1;
    }
    int rc = run(L, argc, argv);
    lua_close(L);
    return rc;
}
