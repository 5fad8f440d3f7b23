/* SPDX-License-Identifier: MIT */
/*
 * main.c -- the seda-lua program.
 *
 *   seda-lua [options] [script [args]]
 *   seda-lua attach PATH
 *
 * Runs a Lua script with the `seda` module preloaded, like the lua
 * interpreter (the same `arg` table), then waits until every bus the
 * script created is idle, shuts them down gracefully and exits 0.  A script
 * error prints its message and traceback, drains what was published
 * (bounded by --drain) and exits 1.  --serve keeps the process up until
 * SIGINT/SIGTERM, running on_complete callbacks, then drains (bounded) and
 * exits.  -i runs a REPL after the script.  With --serve or -i, a signal
 * that arrives while the script runs leads to the same drain once it
 * returns.  --watch, --control, --metrics and --http operate a running
 * pipeline (src/cli_*.c).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "seda.h"

int luaopen_seda(lua_State *L);

static const char *progname = "seda-lua";
static char *sdir;              /* directory of the script (--watch) */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s [options] [script [args]]\n"
        "       %s attach PATH\n"
        "       %s dlq DATA_DIR list|show ID|replay ID|purge|quarantine\n"
        "Run a seda-lua pipeline script: run it, wait until its buses are\n"
        "idle, shut them down gracefully and exit 0 (1 on a script error).\n"
        "Durable stages replay what a previous run left once the script\n"
        "(and -e code) has run, so every stage is declared by then (or at\n"
        "bus:start(), or the script's first publish/wait/poll/receive);\n"
        "after a script error they do not replay: the journal waits.\n"
        "\n"
        "options:\n"
        "  -e CODE         execute the Lua string CODE (before the script)\n"
        "  -i              enter an interactive REPL after the script\n"
        "  --serve         keep running until SIGINT/SIGTERM, then drain "
        "and exit\n"
        "  --drain SECS    bound on the drain at exit after a signal or an\n"
        "                  error, and on --serve's (default 30; otherwise a\n"
        "                  run first waits until its buses are idle)\n"
        "  --watch         reload a stage when its handler file (or a module "
        "it\n"
        "                  requires) changes on disk\n"
        "  --control PATH  accept REPL connections on the unix socket PATH\n"
        "                  (mode 0600; with --serve or -i; at most 64 "
        "clients)\n"
        "  --idle-timeout SECS  close a control client that sent nothing "
        "for\n"
        "                  SECS (default 600; 0: never)\n"
        "  --metrics PATH  write the Prometheus text exposition to PATH "
        "every\n"
        "                  second (with --serve or -i)\n"
        "  --http [ADDR:]PORT  serve a live status page (/), /metrics "
        "(Prometheus)\n"
        "                  and /stats.json over HTTP (with --serve or -i);"
        " a port\n"
        "                  alone listens on 127.0.0.1, port 0 on any free "
        "one\n"
        "  -v, --version   print the version and exit\n"
        "  -h, --help      print this help and exit\n"
        "  --              stop handling options\n"
        "  -               run the script read from standard input\n"
        "\n"
        "attach PATH: a REPL connected to the seda-lua listening on PATH.\n"
        "dlq DATA_DIR ...: inspect and replay the dead letters in a stopped\n"
        "bus's journal (queued, and done: kept after their dead-letter stage\n"
        "handled them); quarantine lists the journal rows a replay found\n"
        "malformed and set aside.\n"
        "REPL commands: stats() top([secs]) reload([stage]) tune(stage, "
        "opts)\n"
        "workers(n) metrics() errors([stage]) help(); timers:\n"
        "seda.timer(delay, fn), seda.every(interval, fn).  Every option,\n"
        "statistic and reason\n"
        "code: docs/reference.md (installed as share/doc/seda-lua/).\n"
        "A process that consumes remote stages (bus:stage{remote = {url =\n"
        "...}} with a handler: NATS JetStream) runs with --serve: their\n"
        "streams may have work whenever it is idle.\n",
        progname, progname, progname);
}

/* ---- main ---- */

struct opts {
    bool interactive;
    bool serve;
    int script;                 /* argv index of the script, or 0 */
};

/* arg as lua.c builds it: the script at 0, its arguments from 1, the
 * interpreter and options below 0; with no script (script 0), the
 * program at 0 and every option from 1. */
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

/* Options that take an argument. */
static bool has_arg(const char *a)
{
    return strcmp(a, "-e") == 0 || strcmp(a, "--drain") == 0 ||
           strcmp(a, "--control") == 0 || strcmp(a, "--metrics") == 0 ||
           strcmp(a, "--idle-timeout") == 0 || strcmp(a, "--http") == 0;
}

static char *script_dir(const char *fname)
{
    char buf[PATH_MAX];
    if (!fname || !realpath(fname, buf))
        return NULL;
    char *slash = strrchr(buf, '/');
    if (slash == buf)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    return strdup(buf);
}

static int run(lua_State *L, int argc, char **argv)
{
    struct opts o = { false, false, 0 };
    cli.o.drain = 30.0;
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
        } else if (strcmp(a, "--watch") == 0) {
            cli.o.watch = true;
        } else if (has_arg(a)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
                usage(stderr);
                return 1;
            }
            if (strcmp(a, "--drain") == 0) {
                char *end;
                cli.o.drain = strtod(argv[i + 1], &end);
                if (*end || cli.o.drain < 0) {
                    fprintf(stderr, "%s: --drain: not a number of seconds: "
                            "'%s'\n", progname, argv[i + 1]);
                    return 1;
                }
            } else if (strcmp(a, "--idle-timeout") == 0) {
                char *end;
                cli_idle_timeout = strtod(argv[i + 1], &end);
                if (*end || end == argv[i + 1] ||
                    !(cli_idle_timeout >= 0)) {
                    fprintf(stderr, "%s: --idle-timeout: not a number of "
                            "seconds >= 0: '%s'\n", progname, argv[i + 1]);
                    return 1;
                }
            } else if (strcmp(a, "--control") == 0) {
                cli.o.control = argv[i + 1];
            } else if (strcmp(a, "--metrics") == 0) {
                cli.o.metrics = argv[i + 1];
            } else if (strcmp(a, "--http") == 0) {
                cli.o.http = argv[i + 1];
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
    create_arg_table(L, argv, argc, o.script);

    bool ran_e = false;
    for (int k = 1; k < (o.script ? o.script : argc); k++) {
        if (strcmp(argv[k], "-e") == 0)
            ran_e = true;
        if (has_arg(argv[k]))
            k++;
    }
    bool tty_repl = !o.script && !o.interactive && !o.serve && !ran_e &&
                    isatty(0);
    if (tty_repl)
        o.interactive = true;

    if (cli_setup(L) != 0)
        return 1;
    cli.o.interactive = o.interactive;
    cli.o.serve = o.serve;
    bool live = o.interactive || o.serve;
    if (!live && (cli.o.control || cli.o.http)) {
        fprintf(stderr, "%s: %s needs --serve or -i (a plain run "
                "ends when its buses are idle)\n", progname,
                cli.o.control ? "--control" : "--http");
        usage(stderr);
        return 1;
    }
    if (!live) {                        /* nothing keeps the process up */
        if (cli.o.metrics || cli.o.watch)
            fprintf(stderr, "%s: warning: %s has no effect without --serve "
                    "or -i (a plain run ends when its buses are idle)\n",
                    progname, cli.o.watch ? "--watch" : "--metrics");
        cli.o.metrics = NULL;
        cli.o.watch = false;
    }
    if (live && cli_start() != 0)       /* e.g. --control PATH refused */
        return 1;
    /* From here a signal no longer kills a live run: during the script
     * it asks for a drain once the script returns (a second one
     * interrupts the script), then see cli_run and cli_finish. */
    if (live) {
        cli_install_signals();
        cli.phase = CLI_SCRIPT;
    }

    /* Second pass: run -e chunks in order.  After an error nothing else
     * runs, but what was published is still drained. */
    bool failed = false;
    for (int k = 1; k < (o.script ? o.script : argc) && !failed; k++) {
        if (strcmp(argv[k], "-e") == 0) {
            if (luaL_loadbuffer(L, argv[k + 1], strlen(argv[k + 1]),
                                "=(command line)") != LUA_OK) {
                fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
                lua_pop(L, 1);
                failed = true;
            } else if (cli_docall(L, 0, 0) != LUA_OK) {
                failed = true;
            }
            k++;
        } else if (has_arg(argv[k])) {
            k++;
        }
    }

    if (failed) {
        /* nothing more */
    } else if (o.script) {
        const char *fname = argv[o.script];
        if (strcmp(fname, "-") == 0 && strcmp(argv[o.script - 1], "--"))
            fname = NULL;                       /* stdin */
        sdir = script_dir(fname);
        cli.o.script_dir = sdir;
        if (luaL_loadfile(L, fname) != LUA_OK) {
            fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
            lua_pop(L, 1);
            failed = true;
        } else {
            int n = 0;
            for (int k = o.script + 1; k < argc; k++, n++)
                lua_pushstring(L, argv[k]);
            failed = cli_docall(L, n, 0) != LUA_OK;
        }
    } else if (!o.interactive && !o.serve && !ran_e) {
        if (luaL_loadfile(L, NULL) != LUA_OK) {
            fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
            lua_pop(L, 1);
            failed = true;
        } else {
            failed = cli_docall(L, 0, 0) != LUA_OK;
        }
    }
    cli.phase = CLI_IDLE;
    lua_sethook(L, NULL, 0, 0);         /* an interrupt that came too late */
    /* The program's stages are declared: its buses start (durable stages
     * replay) now, unless it failed -- then their journals wait for the
     * next run. */
    cli_start_buses(failed);

    if (live && !failed && cli.stop) {
        fprintf(stderr, "%s: signal received, draining\n", progname);
    } else if (live && !failed) {
        if (o.interactive && isatty(0) && isatty(1))
            cli_banner();
        cli_run();
    }
    cli_control_close();
    cli_http_stop();                    /* (after a script error too) */

    /* A normal end (and the end of -i) waits until the buses are idle;
     * after a signal or an error the drain is bounded by --drain. */
    bool wait_first = !o.serve && !failed && !cli.stop;
    int fin = cli_finish(wait_first);
    return failed || fin < 0 ? 1 : 0;
}

int seda_cli_dlq(int argc, char **argv);

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "dlq") == 0)
        return seda_cli_dlq(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "attach") == 0) {
        if (argc != 3) {
            fprintf(stderr, "usage: %s attach PATH\n", progname);
            return 1;
        }
        return cli_attach(argv[2]);
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s: cannot create a Lua state\n", progname);
        return 1;
    }
    cli.L = L;
    int rc = run(L, argc, argv);
    cli_stop_all();
    cli.L = NULL;
    lua_close(L);
    cli.o.script_dir = NULL;
    free(sdir);
    return rc;
}
