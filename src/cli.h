/* SPDX-License-Identifier: MIT */
/*
 * cli.h -- the seda-lua program's live-operation pieces (linked only into
 * seda-lua, never into libseda):
 *
 *   cli_loop.c     shared state, the main-thread event loop, Lua glue
 *   cli_repl.c     the local REPL (readline callback interface), top()
 *   cli_control.c  the control socket server and the `attach` client
 *   cli_watch.c    --watch: inotify on the handler directories
 *   cli_metrics.c  --metrics: the Prometheus text file
 *   cli_lua.c      lua/seda/cli.lua embedded into the binary
 *
 * Everything here runs on the main thread, the only one that touches the
 * main lua_State.
 */
#ifndef SEDA_CLI_H
#define SEDA_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <poll.h>

#include <lua.h>

#define CLI_MAX_LINE (64 * 1024)   /* control protocol: longest line */
#define CLI_EOT '\x04'             /* control protocol: end of a reply */

struct cli_opts {
    bool interactive;           /* -i (or no script and a tty) */
    bool serve;                 /* --serve */
    bool watch;                 /* --watch */
    const char *control;        /* --control PATH, or NULL */
    const char *metrics;        /* --metrics PATH, or NULL */
    const char *script_dir;     /* directory of the script, or NULL */
};

/* An output sink: where print() of a control client's command and the
 * REPL helpers' output go while that command runs. */
struct cli_sink {
    void (*write)(void *ud, const char *s, size_t n);
    void (*top)(void *ud, double seconds);   /* top() asked for by it */
    void *ud;
};

struct cli {
    lua_State *L;
    struct cli_opts o;
    int mod_ref;                /* registry ref of the cli.lua module */
    struct cli_sink *sink;      /* current sink; NULL = stdout */
    volatile sig_atomic_t stop;     /* SIGTERM, or SIGINT with no REPL */
    volatile sig_atomic_t intr;     /* SIGINT seen */
    volatile sig_atomic_t running;  /* a local REPL command is running */
};

extern struct cli cli;
extern const char *cli_progname;

/* cli_loop.c */
int cli_msghandler(lua_State *L);
int cli_docall(lua_State *L, int nargs, int nres);
int cli_setup(lua_State *L);            /* load cli.lua, install helpers */
bool cli_get_fn(lua_State *L, const char *name);   /* push M[name] */
void cli_out(const char *s, size_t n);  /* to the current sink */
void cli_outs(const char *s);
double cli_now(void);
void cli_install_signals(void);

enum { CLI_EVAL_OK, CLI_EVAL_INCOMPLETE, CLI_EVAL_ERROR };
/* Evaluate one REPL chunk like lua5.4's REPL ("=e" and expressions
 * print their values).  envidx: a table used as the chunk's _ENV, or 0 for
 * the globals.  Output and errors go to the current sink (errors to stderr
 * when there is none).  Returns CLI_EVAL_*. */
int cli_eval(lua_State *L, const char *chunk, size_t len, const char *name,
             int envidx);

/* One turn of the event loop: wait up to timeout_ms for the control
 * socket, the watcher and extra_fd, service them, run pending on_complete
 * callbacks and the periodic work.  Returns 1 when extra_fd is readable. */
int cli_step(int timeout_ms, int extra_fd);
/* Run the on_complete callbacks pending on every live bus. */
void cli_poll_all(void);
/* The loop of --serve / -i, until the REPL ends (without --serve) or a
 * signal.  Returns 0, or 1 when the loop could not start. */
int cli_run(void);
/* Start what the options ask for before the script runs (the control
 * socket: refusing to start is decided here).  Returns 0 or 1. */
int cli_start(void);
void cli_stop_all(void);

/* cli_repl.c */
void cli_repl_start(void);
bool cli_repl_active(void);
void cli_repl_input(void);              /* stdin is readable */
void cli_repl_interrupt(void);          /* SIGINT at the prompt */
void cli_repl_end(void);
void cli_top_local(double seconds);
/* Shared by the local REPL and attach: readline completion setup. */
char **cli_complete_list(const char *text, char **(*fetch)(const char *,
                         bool in_string));
void cli_history_path(char *buf, size_t n);

/* cli_control.c */
int cli_control_listen(const char *path);
int cli_control_fds(struct pollfd *fds, int max);
void cli_control_handle(struct pollfd *fds, int n);
void cli_control_close(void);
int cli_attach(const char *path);

/* cli_watch.c */
int cli_watch_start(void);
int cli_watch_fd(void);
void cli_watch_handle(void);
void cli_watch_tick(double now);
void cli_watch_stop(void);

/* cli_metrics.c */
void cli_metrics_tick(double now, bool force);

/* cli_lua.c */
extern const char cli_lua_src[];
extern const char cli_lua_end[];

#endif
