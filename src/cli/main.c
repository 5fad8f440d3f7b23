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
 * pipeline (cli_*.c).
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
#include "seda_lua.h"
#include "seda_lua_admin.h"

static const char *progname = "seda-lua";
static char *sdir;              /* directory of the script (--watch) */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s [options] [script [args]]\n"
        "       %s attach [--json] PATH ['command']\n"
        "       %s dlq DATA_DIR list|show ID|replay ID|purge|quarantine\n"
        "       %s dlq --control PATH [list [STAGE]] [--json]\n"
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
        "                  /stats.json, /dlq.json and /tap?stage=NAME (live"
        "\n"
        "                  envelopes as Server-Sent Events) over HTTP (with"
        "\n"
        "                  --serve or -i), answered while the script is busy;"
        "\n"
        "                  a port alone listens on 127.0.0.1, port 0 on"
        " any\n"
        "                  free one\n"
        "  --http-host NAME[,NAME]  host names --http answers for besides "
        "IP\n"
        "                  addresses and localhost (others get 403: DNS "
        "rebinding)\n"
        "  --log-format text|json  the event log on stderr: one line per "
        "event\n"
        "                  (time, level, stage, message), or one JSON object"
        " per\n"
        "                  line (default text)\n"
        "  -v, --version   print the version and exit\n"
        "  -h, --help      print this help and exit\n"
        "  --              stop handling options (options that take a "
        "value also\n"
        "                  take it as --opt=value)\n"
        "  -               run the script read from standard input\n"
        "\n"
        "attach PATH: a REPL connected to the seda-lua listening on PATH;\n"
        "with a command, run it, print its output and exit 0 (1 when it\n"
        "raised); --json prints its results as JSON.\n"
        "dlq DATA_DIR ...: inspect and replay the dead letters in a stopped\n"
        "bus's journal (queued, and done: kept after their dead-letter stage\n"
        "handled them); quarantine lists the journal rows a replay found\n"
        "malformed and set aside.\n"
        "dlq --control PATH [list [STAGE]] [--json]: the dead letters the live\n"
        "buses of the seda-lua listening on PATH keep (bus:dead_letters()):\n"
        "bus, stage, id, reason, attempts, time, error, payload preview.\n"
        "REPL commands: stats() top([secs]) reload([stage]) tune(stage, "
        "opts)\n"
        "workers(n) metrics() errors([stage]) dlq([stage]) help(); timers:\n"
        "seda.timer(delay, fn), seda.every(interval, fn).  Every option,\n"
        "statistic and reason\n"
        "code: docs/reference.md (installed as share/doc/seda-lua/).\n"
        "A process that consumes remote stages (bus:stage{remote = {url =\n"
        "...}} with a handler: NATS JetStream) runs with --serve: their\n"
        "streams may have work whenever it is idle.\n",
        progname, progname, progname, progname);
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
           strcmp(a, "--idle-timeout") == 0 || strcmp(a, "--http") == 0 ||
           strcmp(a, "--http-host") == 0 ||
           strcmp(a, "--log-format") == 0;
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

/* One option that takes an argument (a, with its argument v).  Returns
 * -1 to go on, or the exit status after a bad value. */
static int option_arg(const char *a, const char *v)
{
    if (strcmp(a, "--drain") == 0) {
        char *end;
        cli.o.drain = strtod(v, &end);
        if (*end || end == v || !(cli.o.drain >= 0)) {  /* '', nan */
            fprintf(stderr, "%s: --drain: not a number of seconds: '%s'\n",
                    progname, v);
            return 1;
        }
    } else if (strcmp(a, "--idle-timeout") == 0) {
        char *end;
        cli_control_idle_timeout = strtod(v, &end);
        if (*end || end == v || !(cli_control_idle_timeout >= 0)) {
            fprintf(stderr, "%s: --idle-timeout: not a number of seconds "
                    ">= 0: '%s'\n", progname, v);
            return 1;
        }
    } else if (strcmp(a, "--control") == 0) {
        cli.o.control = v;
    } else if (strcmp(a, "--metrics") == 0) {
        cli.o.metrics = v;
    } else if (strcmp(a, "--http") == 0) {
        cli.o.http = v;
    } else if (strcmp(a, "--http-host") == 0) {
        size_t n = strlen(v);
        if (n == 0 || v[strspn(v, "abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-,")] ||
            v[0] == ',' || v[n - 1] == ',' || strstr(v, ",,")) {
            fprintf(stderr, "%s: --http-host: host names separated by "
                    "commas (letters, digits, '.' and '-'), not '%s'\n",
                    progname, v);
            return 1;
        }
        cli.o.http_hosts = v;
    } else if (strcmp(a, "--log-format") == 0) {
        if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
            fprintf(stderr, "%s: --log-format: 'text' or 'json', not '%s'\n",
                    progname, v);
            return 1;
        }
        seda_log_set_format(strcmp(v, "json") == 0 ? SEDA_LOG_JSON
                                                   : SEDA_LOG_TEXT);
    }
    return -1;
}

/* The first pass over the command line: the options into o and cli.o
 * (-e chunks are run later, in order), and the script's index.  Returns
 * -1 to go on, or the exit status (-h, -v, a bad option). */
static int parse_options(int argc, char **argv, struct opts *o)
{
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
            o->interactive = true;
        } else if (strcmp(a, "--serve") == 0) {
            o->serve = true;
        } else if (strcmp(a, "--watch") == 0) {
            cli.o.watch = true;
        } else if (a[1] == '-' && strchr(a, '=')) {
            /* --opt=value */
            char name[32];
            size_t k = (size_t)(strchr(a, '=') - a);
            snprintf(name, sizeof name, "%.*s", (int)k, a);
            if (k >= sizeof name || !has_arg(name)) {
                fprintf(stderr, "%s: unrecognized option '%s'\n", progname,
                        a);
                usage(stderr);
                return 1;
            }
            int rc = option_arg(name, a + k + 1);
            if (rc >= 0)
                return rc;
        } else if (has_arg(a)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
                usage(stderr);
                return 1;
            }
            int rc = option_arg(a, argv[i + 1]);
            if (rc >= 0)
                return rc;
            i++;
        } else {
            fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a);
            usage(stderr);
            return 1;
        }
    }
    if (i < argc)
        o->script = i;
    return -1;
}

/* Whether the command line (before the script) has a -e chunk. */
static bool has_e(int argc, char **argv, const struct opts *o)
{
    bool ran_e = false;
    for (int k = 1; k < (o->script ? o->script : argc); k++) {
        if (strcmp(argv[k], "-e") == 0)
            ran_e = true;
        if (has_arg(argv[k]))
            k++;
    }
    return ran_e;
}

/* Settle the options that need --serve or -i (a live run) and start what
 * a live run operates (control socket, HTTP, signals).  Returns 0, or 1
 * (the exit status) when an option needs a live run or cannot start. */
static int start_live(const struct opts *o)
{
    bool live = o->interactive || o->serve;
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
    if (live && cli.o.metrics && cli_metrics_check(cli.o.metrics) != 0)
        return 1;                       /* a --metrics PATH never written */
    if (live && cli_start() != 0)       /* e.g. --control PATH refused */
        return 1;
    /* From here a signal no longer kills a live run: during the script
     * it asks for a drain once the script returns (a second one
     * interrupts the script), then see cli_run and cli_finish. */
    if (live) {
        cli_install_signals();
        cli.phase = CLI_SCRIPT;
    }
    return 0;
}

/* The second pass: run the -e chunks in order.  Returns true when one
 * failed (nothing after it runs). */
static bool run_e_chunks(lua_State *L, int argc, char **argv,
                         const struct opts *o)
{
    bool failed = false;
    for (int k = 1; k < (o->script ? o->script : argc) && !failed; k++) {
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
    return failed;
}

/* Load and run the file fname (NULL: standard input) with the n
 * arguments at args.  Returns true when it failed. */
static bool run_file(lua_State *L, const char *fname, char **args, int n)
{
    if (luaL_loadfile(L, fname) != LUA_OK) {
        fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
        lua_pop(L, 1);
        return true;
    }
    for (int k = 0; k < n; k++)
        lua_pushstring(L, args[k]);
    return cli_docall(L, n, 0) != LUA_OK;
}

/* Run the script (its arguments after it), or standard input when there
 * is neither a script nor anything else to do.  Returns true when it
 * failed. */
static bool run_script(lua_State *L, int argc, char **argv,
                       const struct opts *o, bool ran_e)
{
    if (o->script) {
        const char *fname = argv[o->script];
        if (strcmp(fname, "-") == 0 && strcmp(argv[o->script - 1], "--"))
            fname = NULL;                       /* stdin */
        sdir = script_dir(fname);
        cli.o.script_dir = sdir;
        return run_file(L, fname, argv + o->script + 1,
                        argc - (o->script + 1));
    }
    if (!o->interactive && !o->serve && !ran_e)
        return run_file(L, NULL, NULL, 0);
    return false;
}

static int run(lua_State *L, int argc, char **argv)
{
    struct opts o = { false, false, 0 };
    cli.o.drain = 30.0;
    luaL_openlibs(L);
    luaL_requiref(L, "seda", luaopen_seda, 0);
    lua_pop(L, 1);
    cli_preload_test(L);

    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    create_arg_table(L, argv, argc, o.script);
    bool ran_e = has_e(argc, argv, &o);
    if (!o.script && !o.interactive && !o.serve && !ran_e && isatty(0))
        o.interactive = true;           /* a REPL on a terminal */

    if (cli_setup(L) != 0)
        return 1;
    cli.o.interactive = o.interactive;
    cli.o.serve = o.serve;
    bool live = o.interactive || o.serve;
    if (start_live(&o) != 0)
        return 1;

    /* After an error nothing else runs, but what was published is still
     * drained. */
    bool failed = run_e_chunks(L, argc, argv, &o);
    if (!failed)
        failed = run_script(L, argc, argv, &o, ran_e);
    cli.phase = CLI_IDLE;
    lua_sethook(L, NULL, 0, 0);         /* an interrupt that came too late */
    /* The program's stages are declared: its buses start (durable stages
     * replay) now, unless it failed -- then their journals wait for the
     * next run. */
    cli_start_buses(failed);

    /* A listener (bus:listen) keeps a plain run serving until a signal,
     * as --serve does (SPEC.md section 13). */
    if (!live && !failed &&
        (seda__l_http_open() > 0 || seda__l_nats_open() > 0)) {
        live = true;
        o.serve = true;
        cli.o.serve = true;
        cli_install_signals();
        cli.phase = CLI_IDLE;
    }
    if (live && !failed && cli.stop) {
        seda_log_write(SEDA_LOG_INFO, NULL, "signal received, draining");
    } else if (live && !failed) {
        if (o.interactive && isatty(0) && isatty(1))
            cli_banner();
        cli_run();
    }
    cli_control_close();
    cli_observe_stop();
    cli_http_stop();                    /* (after a script error too) */

    /* A normal end (and the end of -i) waits until the buses are idle;
     * after a signal or an error the drain is bounded by --drain. */
    bool wait_first = !o.serve && !failed && !cli.stop;
    int fin = cli_finish(wait_first);
    return failed || fin < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "dlq") == 0)
        return cli_dlq(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "attach") == 0) {
        bool json = false;
        int k = 2;
        for (; k < argc && argv[k][0] == '-' && argv[k][1]; k++) {
            if (strcmp(argv[k], "--") == 0) {
                k++;
                break;
            }
            if (strcmp(argv[k], "--json") == 0) {
                json = true;
                continue;
            }
            fprintf(stderr, "%s: attach: unknown option '%s'\n"
                    "usage: %s attach [--json] PATH ['command']\n",
                    progname, argv[k], progname);
            return 1;
        }
        const char *why = argc - k < 1 ? "no PATH"
                        : argc - k > 2 ? "more than PATH and one command "
                                         "(quote the command)"
                        : json && argc - k != 2 ? "--json needs a command"
                        : NULL;
        if (why) {
            fprintf(stderr, "%s: attach: %s\n"
                    "usage: %s attach [--json] PATH ['command']\n",
                    progname, why, progname);
            return 1;
        }
        return cli_attach(argv[k], argc - k == 2 ? argv[k + 1] : NULL, json);
    }
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s: cannot create a Lua state\n", progname);
        return 1;
    }
    cli.L = L;
    int rc = run(L, argc, argv);
    cli_stop_all();
    cli_observe_close();
    cli.L = NULL;
    lua_close(L);
    cli.o.script_dir = NULL;
    free(sdir);
    return rc;
}
