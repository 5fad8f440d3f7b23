/* SPDX-License-Identifier: MIT */
/*
 * cli.h -- the seda-lua program's live-operation pieces (linked only into
 * seda-lua, never into libseda):
 *
 *   cli_loop.c     shared state, the main-thread event loop, Lua glue
 *   cli_repl.c     the local REPL (readline callback interface), top()
 *   cli_control.c  the control socket server
 *   cli_control_sock.c  the control socket's file
 *   cli_attach.c   the `attach` client
 *   cli_watch.c    --watch: inotify on the handler directories
 *   cli_metrics.c  the Prometheus exposition (lua/seda/metrics.lua
 *                  embedded) and --metrics: the text file
 *   cli_http.c     --http: /metrics, /stats.json, /dlq.json and the
 *                  status page (cli_page.html) on libmicrohttpd
 *   cli_tap.c      --http's /tap?stage=NAME: Server-Sent Events streams
 *   cli_history.c  the last five minutes of every bus, one sample a
 *                  second: /history.json, the page's charts, top()
 *   cli_observe.c  the observer: a Lua state and a thread of their own
 *                  that serve --http and write --metrics
 *   cli_json.c     Lua values as JSON; the /stats.json document
 *   cli_lua.c      lua/seda/cli.lua embedded into the binary
 *   cli_dlq.c      `seda-lua dlq`: the dead letters of a stopped bus's
 *                  journal; the words of both forms
 *   cli_dlq_live.c `seda-lua dlq --control PATH`: those of a live process
 *   cli_term.c     text made safe for a terminal (every text view)
 *
 * Everything here runs on the main thread, the only one that touches the
 * main lua_State, except the observer (cli_observe.c) and what it drives:
 * cli_http.c's serving and cli_metrics.c's file, on its thread and its
 * own Lua state.
 *
 * NAMES: a function of cli_<name>.c is cli_<name>_* (cli_repl_start);
 * cli_loop.c, which holds the shared state, has the plain cli_* names no
 * other file's name begins (cli_run, cli_docall).
 */
#ifndef SEDA_CLI_H
#define SEDA_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <poll.h>
#include <stdio.h>
#include <sys/types.h>

#include <lua.h>

#define CLI_MAX_LINE (64 * 1024)   /* control protocol: longest line */
#define CLI_EOT '\x04'             /* control protocol: end of a reply */
#define CLI_INTR '\x03'            /* control protocol: interrupt */

struct cli_opts {
    bool interactive;           /* -i (or no script and a tty) */
    bool serve;                 /* --serve */
    bool watch;                 /* --watch */
    const char *control;        /* --control PATH, or NULL */
    const char *metrics;        /* --metrics PATH, or NULL */
    const char *http;           /* --http [ADDR:]PORT, or NULL */
    const char *http_hosts;     /* --http-host NAME[,NAME...], or NULL */
    const char *script_dir;     /* directory of the script, or NULL */
    double drain;               /* --drain seconds */
};

/* An output sink: where print() of a control client's command and the
 * REPL helpers' output go while that command runs. */
struct cli_sink {
    void (*write)(void *ud, const char *s, size_t n);
    void (*top)(void *ud, double seconds);   /* top() asked for by it */
    lua_Hook hook;              /* count hook while its command runs, or
                                 * NULL (checks for an interrupt) */
    void *ud;
};

/* What the main thread is doing, for the signal handler (cli.phase). */
enum {
    CLI_IDLE,                   /* nothing a signal changes: default */
    CLI_SCRIPT,                 /* -e chunks and the script (live runs) */
    CLI_LOOP,                   /* the --serve / -i loop */
    CLI_DRAIN                   /* the drain at exit (cli_finish) */
};

/* Signals: SIGINT and SIGTERM are caught from before the script runs
 * (--serve, -i) until exit; the handler only sets the flags below and,
 * like lua.c's laction, may install a hook that interrupts the Lua code
 * running on cli.L.  Every field is written by the main thread and the
 * handler only (sig_atomic_t; the handler forwards a signal that landed
 * on another thread to the main one). */
struct cli {
    lua_State *L;
    struct cli_opts o;
    int mod_ref;                /* registry ref of the cli.lua module */
    struct cli_sink *sink;      /* current sink; NULL = stdout */
    volatile sig_atomic_t phase;    /* CLI_*: set by the main thread */
    volatile sig_atomic_t stop;     /* drain and exit: SIGTERM, SIGINT with
                                     * no terminal prompt, or any signal
                                     * during the script */
    volatile sig_atomic_t intr;     /* SIGINT at the local terminal prompt */
    volatile sig_atomic_t running;  /* a REPL command (local or a control
                                     * client's) is running on cli.L */
    volatile sig_atomic_t prompt;   /* the local REPL reads a terminal */
    volatile sig_atomic_t drain_stop;  /* a signal during the drain */
    bool plain;                     /* a plain run kept alive (cli_plain):
                                     * main thread only */
};

extern struct cli cli;
extern const char *cli_progname;

/* cli_term.c: s[0..n) with the bytes a terminal would obey (controls,
 * C1 controls, invalid UTF-8) written \xNN, into out (room for 4 * n
 * bytes); returns the length written.  CLI_TERM_LINES keeps newlines and
 * tabs.  cli_term_put writes the same to f.  Cannot fail; any thread. */
enum { CLI_TERM_LINES = 1 };
size_t cli_term_escape(const char *s, size_t n, int flags, char *out);
void cli_term_put(FILE *f, const char *s, size_t n, int flags);

/* cli_loop.c */
/* A line of the program's own on stderr: "seda-lua: MSG" ("seda-lua:
 * warning: MSG" for SEDA_LOG_WARN) under --log-format text, one log
 * event (level, msg) under json; a level below --log-level is left
 * out. */
void cli_logf(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int cli_msghandler(lua_State *L);
int cli_docall(lua_State *L, int nargs, int nres);
int cli_setup(lua_State *L);            /* load cli.lua, install helpers */
bool cli_get_fn(lua_State *L, const char *name);   /* push M[name] */
/* Push the function name of the module table at registry ref (true), or
 * push nothing (false: no module, or no such function). */
bool cli_module_fn(lua_State *L, int ref, const char *name);
void cli_out(const char *s, size_t n);  /* to the current sink */
void cli_outs(const char *s);
/* Draw one frame of top() (header and body) in a single write. */
void cli_top_frame(double secs, const char *body, size_t n);
double cli_now(void);
/* Catch SIGINT and SIGTERM (see struct cli) and ignore SIGPIPE. */
void cli_install_signals(void);
/* Interrupt the Lua code running on L with the error "interrupted!" at
 * its next instruction (a hook, like lua.c's lstop). */
void cli_interrupt(lua_State *L);

enum { CLI_EVAL_OK, CLI_EVAL_INCOMPLETE, CLI_EVAL_ERROR };
/* Evaluate one REPL chunk like lua5.4's REPL ("=e" and expressions
 * print their values).  envidx: a table used as the chunk's _ENV, or 0 for
 * the globals.  Output and errors go to the current sink (errors to stderr
 * when there is none).  Returns CLI_EVAL_*. */
int cli_eval(lua_State *L, const char *chunk, size_t len, const char *name,
             int envidx);
/* The same, with json true: the results are written as one line of JSON
 * (one value, an array of several, "[]" for none) instead of
 * pretty-printed: what `seda-lua attach --json SOCK 'command'` shows. */
int cli_eval_as(lua_State *L, const char *chunk, size_t len,
                const char *name, int envidx, bool json);

/* A plain run after its script (SPEC 7): let the buses settle (their
 * callbacks may set timers or close a listener); while an open listener
 * or a pending timer not unref'd can make more work, run the loop, and
 * settle again when none is left.  Returns when nothing can make more
 * work or a signal asked for the drain (cli.stop).  Catches SIGINT and
 * SIGTERM from the first turn of the loop: the program then drains as
 * --serve does. */
void cli_plain(void);
/* Whether an open listener or a timer not unref'd keeps a plain run. */
bool cli_plain_alive(void);

/* One turn of the event loop: wait up to timeout_ms (-1: as long as
 * nothing is due) for a completion, the control socket, the watcher and
 * extra_fd, or the next timer; service them, run pending on_complete
 * callbacks and due timers, and the periodic work.  Returns 1 when
 * extra_fd is readable. */
int cli_step(int timeout_ms, int extra_fd);
/* The periodic work of the loop (watch debounce, metrics file, the rate
 * sampler, idle control clients), each at its own pace. */
void cli_periodic(double now);
/* Run the on_complete callbacks pending on every live bus. */
void cli_poll_all(void);
/* After the program (-e chunks and the script) ran: start every live bus
 * (its durable stages replay), or, when the program failed, hold them
 * (they never replay; their journals wait for the next run). */
void cli_start_buses(bool failed);
/* The loop of --serve / -i, until the REPL ends (without --serve) or a
 * signal; then closes the control socket.  Returns 0, or 1 when the loop
 * could not start. */
int cli_run(void);
/* The end of a run: lua/seda/cli.lua's finish (drain every live bus,
 * bounded by --drain (cli.o.drain) seconds after the wait for idle when
 * wait_first; a signal stops the wait; says what was dropped).  Returns 1
 * when nothing was dropped, 0 when something was, -1 on an error
 * (printed). */
int cli_finish(bool wait_first);
/* Start what the options ask for before the script runs (the control
 * socket: refusing to start is decided here).  Returns 0 or 1. */
int cli_start(void);
void cli_stop_all(void);
/* Print the REPL's banner (cli.lua's M.banner) on stdout. */
void cli_banner(void);

/* True when the control client whose command runs now asked for an
 * interrupt (Ctrl-C in attach) or went away; then the command stops at
 * its next Lua instruction.  Main thread. */
bool cli_control_interrupt_pending(lua_State *L);

/* cli_repl.c */
void cli_repl_start(void);
bool cli_repl_active(void);
void cli_repl_input(void);              /* stdin is readable */
void cli_repl_interrupt(void);          /* SIGINT at the prompt */
bool cli_repl_tty(void);                /* reading a terminal (readline) */
void cli_repl_end(void);
void cli_repl_top_local(double seconds);
/* Shared by top() in the REPL and in attach: the terminal (stdin) in
 * top()'s mode, keys read one at a time and not echoed, the cursor
 * hidden; false, with nothing changed, when stdin's settings cannot be
 * read (old then is not set).  top_leave shows the cursor on a new line
 * and, when restore, sets old back.  Main thread. */
struct termios;
bool cli_repl_top_enter(struct termios *old);
void cli_repl_top_leave(const struct termios *old, bool restore);
/* Shared by the local REPL and attach: readline completion setup. */
char **cli_repl_complete_list(const char *text, char **(*fetch)(const char *,
                              bool in_string));
void cli_repl_history_path(char *buf, size_t n);
/* Shared by the local REPL and attach: readline's callback interface.
 * rl_open: the history path into hp[0..n) ("" without $HOME), readline
 * named "seda-lua", the history (at most 1000 lines) read from it;
 * rl_save: the history written back to hp (nothing when hp is "");
 * rl_take: what a line handler does first: at the end of input (line
 * NULL) it removes the handler, ends the terminal's line and returns
 * false; otherwise a non-empty line goes to the history, true;
 * rl_clear: the line being typed dropped and a fresh prompt shown (a
 * Ctrl-C).  Main thread; none fails (history files that cannot be read
 * or written are skipped). */
void cli_repl_rl_open(char *hp, size_t n);
void cli_repl_rl_save(const char *hp);
bool cli_repl_rl_take(const char *line);
void cli_repl_rl_clear(const char *prompt);

/* cli_control.c */
extern double cli_control_idle_timeout; /* --idle-timeout seconds; 0 never */
int cli_control_listen(const char *path);
int cli_control_fds(struct pollfd *fds, int max);
void cli_control_handle(struct pollfd *fds, int n);
void cli_control_close(void);
/* Periodic: close control clients idle for longer than --idle-timeout. */
void cli_control_tick(double now);

/* cli_attach.c */
int cli_attach(const char *path, const char *expr, bool json);
/* One command for another subcommand (`who` begins its messages, e.g.
 * "seda-lua dlq"): connect to the control socket at path as attach does (the same
 * checks: the server's uid, its greeting), send line (one line of Lua,
 * without its newline) and hand back the output: *out (malloc'd,
 * NUL-terminated or NULL when empty; the caller frees it) and *outlen;
 * *did_raise when the command raised (the output is then its error).
 * Returns 0, or 1 after saying on stderr why not, naming path (cannot
 * connect, not a seda-lua control socket, refused, connection closed). */
int cli_attach_collect(const char *path, const char *who, const char *line,
                       char **out, size_t *outlen, bool *did_raise);

/* cli_dlq.c: `seda-lua dlq DATA_DIR ...` and `seda-lua dlq --control PATH
 * ...` with argv[0] "dlq"; returns the exit status (0, 1 error, 2
 * usage). */
int cli_dlq(int argc, char **argv);

/* cli_dlq_live.c: `seda-lua dlq --control sock [list [stage]] [--json]`:
 * the dead letters of the live buses behind the control socket sock (of
 * stage only, when not NULL: a valid stage name), printed as text or
 * JSON on stdout.  Returns the exit status: 0, or 1 said on stderr
 * (cannot connect, no such stage, out of memory, cannot write).  Main
 * thread. */
int cli_dlq_live(const char *sock, const char *stage, bool json);

/* cli_watch.c */
int cli_watch_start(void);
int cli_watch_fd(void);
void cli_watch_handle(void);
void cli_watch_tick(double now);
void cli_watch_stop(void);

/* cli_metrics.c */
/* Run lua/seda/metrics.lua (embedded) on the cli.lua module: M.metrics.
 * 0, or 1 (reported). */
int cli_metrics_setup(lua_State *L);
/* The same onto the module table at the top of L (an observer state). */
int cli_metrics_load(lua_State *L);
/* Whether --metrics PATH can be written (writes it once, empty): 0, or 1
 * after saying why not on stderr. */
int cli_metrics_check(const char *path);
/* Write the file when a period passed (or force), from the observer
 * state: its thread, or the main one while that thread is not running. */
void cli_metrics_tick(double now, bool force);

/* cli_observe.c: the observer state, made when --http or --metrics asks
 * (0, or 1 reported); its thread started after the program ran, stopped
 * before the drain. */
int cli_observe_open(void);
int cli_observe_start(void);
void cli_observe_stop(void);
void cli_observe_close(void);
/* The observer state, locked (NULL when there is none), and its release;
 * cli_observe_fn pushes its cli.lua module's function name (true) or
 * nothing (false). */
lua_State *cli_observe_state(void);
void cli_observe_release(void);
bool cli_observe_fn(lua_State *L, const char *name);

/* cli_history.c: the history of every live bus, HIST_SLOTS samples one
 * second apart (see the file).  cli_history_tick takes a sample through
 * L's `seda` module when one is due at monotonic time mono (the observer
 * thread on its state, else the run loop on the main one);
 * cli_history_due says in how many ms the next is due (0: now). */
#define HIST_SLOTS 300
struct cli_jbuf;
void cli_history_tick(lua_State *L, double mono);
int cli_history_due(double mono);
void cli_history_free(void);
/* The /history.json document (the samples taken after wall-clock time
 * since; 0 for all) into b: 0, or -1 out of memory. */
int cli_history_json(struct cli_jbuf *b, double since);
/* The last n (at most) values of a stage's series (a name of
 * /history.json's, e.g. "delivered"), oldest first, NaN where none:
 * how many were copied, or -1 for an unknown bus, stage or series. */
int cli_history_series(const char *bus, const char *stage,
                       const char *series, float *out, int n);
/* Whether the observer thread runs (it then takes the samples).  Main
 * thread only. */
bool cli_observe_running(void);

/* cli_http.c: the endpoint's limits */
#define HTTP_CONN_LIMIT 512     /* connections at once (more are closed) */
#define HTTP_TIMEOUT 10         /* seconds a client has to send a whole
                                   request (from its connection's start or
                                   its previous answer) */
/* Bind spec ("PORT", "ADDR:PORT", "[V6]:PORT"; a port alone is
 * 127.0.0.1) and start serving; prints where it listens.  0, or 1 when
 * refused (reported on stderr, naming the problem). */
int cli_http_start(const char *spec);
int cli_http_fd(void);                  /* for poll(), or -1 when off */
/* cli_http_fd, cli_http_timeout and cli_http_run: the observer thread's
 * (cli_observe.c) once it runs. */
/* timeout_ms bounded by what MHD needs (connection timeouts, pending
 * data); < 0: none of ours. */
int cli_http_timeout(int timeout_ms);
void cli_http_run(void);                /* after every poll() */
void cli_http_stop(void);

/* cli_tap.c: GET /tap?stage=NAME, the Server-Sent Events streams (on the
 * observer thread; see the file).  At most HTTP_TAP_LIMIT at once; while
 * any is open the observer pumps them every TAP_PUMP_MS. */
#define HTTP_TAP_LIMIT 16
#define TAP_PUMP_MS 50
#define TAP_STOP_MS 500         /* the server's stop waits this long for
                                   streams to send their end */
struct MHD_Connection;
struct MHD_Response;
/* Open a stream of the stage label names for connection c: 200 with the
 * response in *out (the caller queues it and destroys its reference),
 * or 400 (no stage given), 404 (no live bus has it), 503 (HTTP_TAP_LIMIT
 * open) or 500 with a message (ending in a newline) in msg. */
int cli_tap_start(struct MHD_Connection *c, const char *label,
                  struct MHD_Response **out, char *msg, size_t msglen);
/* Before every MHD_run: move copies into the streams, resume those with
 * something to send, end those whose client left.  Nothing when none is
 * open. */
void cli_tap_pump(double now);
/* timeout_ms bounded by TAP_PUMP_MS while a stream is open. */
int cli_tap_timeout(int timeout_ms);
/* End every stream with an "end" event saying why (the server stops). */
void cli_tap_end_all(const char *why);
int cli_tap_count(void);                /* streams open */

/* cli_json.c: a growable text buffer (malloc; the caller frees p) */
struct cli_jbuf {
    char *p;                    /* NUL-terminated text, or NULL */
    size_t len, cap;
    bool oom;                   /* an append failed: the text is cut */
};
void cli_json_add(struct cli_jbuf *b, const char *s, size_t n);
/* Length of the valid UTF-8 sequence at s (n > 0 bytes left), or 0. */
size_t cli_json_utf8_len(const unsigned char *s, size_t n);
/* s[0..n) as a JSON string (invalid UTF-8 bytes become U+FFFD). */
void cli_json_string(struct cli_jbuf *b, const char *s, size_t n);
/* The Lua value at idx as JSON (a table with keys 1..n is an array,
 * others objects; NaN, inf and nil are null).  May raise (memory). */
void cli_json_value(struct cli_jbuf *b, lua_State *L, int idx);
void cli_json_array(struct cli_jbuf *b, lua_State *L, int idx, int depth);
/* The /stats.json document (see cli_json.c) into b: 0, or -1 with the
 * error as b's text (b->oom: out of memory).  On the observer state
 * (its `seda` module's buses()). */
int cli_json_stats(lua_State *L, struct cli_jbuf *b);
/* The /dlq.json document likewise: every live bus's kept dead letters. */
int cli_json_dlq(lua_State *L, struct cli_jbuf *b);

/* cli_lua.c */
extern const char cli_lua_src[];
extern const char cli_lua_end[];
extern const char cli_pretty_src[];
extern const char cli_pretty_end[];
extern const char cli_test_src[];
extern const char cli_test_end[];

/* Make `require "seda.test"` find the embedded lua/seda/test.lua
 * (package.preload).  Cannot fail but for memory (raises). */
void cli_preload_test(lua_State *L);

/* cli_control_sock.c: the control socket's file. */
struct cli_control_sock {
    int fd;                     /* listening, or -1 */
    char *path;                 /* where (malloc'd), or NULL */
    dev_t dev;                  /* the socket file made there, to remove */
    ino_t ino;                  /* it at close only if it is still ours */
};
/* Fill a unix socket address for path; -1 (reported, naming the path)
 * when it is too long. */
struct sockaddr_un;
int cli_control_sock_addr(struct sockaddr_un *a, const char *path);
/* Listen at path (s->fd), replacing a stale socket there; 0, or -1
 * logged naming path and why (too long, in use, not a socket, cannot
 * bind).  s->fd must be -1. */
int cli_control_sock_open(struct cli_control_sock *s, const char *path);
/* Close s's socket and remove its file if it is still the one s made;
 * s->fd is -1 after.  Cannot fail; a closed s is left as it is. */
void cli_control_sock_close(struct cli_control_sock *s);
/* Write s (n bytes) to out (room for 4 * n) with each backslash doubled and
 * control bytes as \xHH, so that a command of several lines travels as
 * one control request line; returns the bytes written. */
size_t cli_control_escape(const char *s, size_t n, char *out);

#endif
