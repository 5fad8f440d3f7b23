/* SPDX-License-Identifier: MIT */
/*
 * cli_repl.c -- the local REPL of seda-lua (-i).
 *
 * On a terminal it uses readline's callback interface, so the event loop
 * keeps polling (on_complete callbacks, control clients, --watch) while
 * the user types: line editing, history in ~/.seda_history, Tab
 * completion of globals, fields after '.'/':' and stage names inside
 * strings.  On a pipe or file it reads lines itself, without prompts.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda.h"

static bool active;             /* the REPL is reading */
static bool use_rl;             /* readline on a terminal */
static char *pending;           /* an incomplete chunk so far */
static size_t pending_len;
static char *ibuf;              /* plain mode: bytes not yet a line */
static size_t ilen, icap;

#define PROMPT1 "> "
#define PROMPT2 ">> "

bool cli_repl_active(void)
{
    return active;
}

bool cli_repl_tty(void)
{
    return active && use_rl;
}

void cli_repl_history_path(char *buf, size_t n)
{
    const char *home = getenv("HOME");
    if (home && *home)
        snprintf(buf, n, "%s/.seda_history", home);
    else
        buf[0] = '\0';
}

void cli_repl_rl_open(char *hp, size_t n)
{
    cli_repl_history_path(hp, n);
    rl_readline_name = "seda-lua";
    stifle_history(1000);
    if (hp[0])
        read_history(hp);
}

void cli_repl_rl_save(const char *hp)
{
    if (hp[0]) {
        write_history(hp);
        history_truncate_file(hp, 1000);
    }
}

bool cli_repl_rl_take(const char *line)
{
    if (!line) {
        rl_callback_handler_remove();
        fputs("\n", stdout);
        fflush(stdout);
        return false;
    }
    if (*line)
        add_history(line);
    return true;
}

void cli_repl_rl_clear(const char *prompt)
{
    rl_free_line_state();
    rl_callback_sigcleanup();
    rl_replace_line("", 0);
    rl_crlf();
    rl_set_prompt(prompt);
    rl_on_new_line();
    rl_redisplay();
}

/* Evaluate one input line (with the pending chunk). */
static void do_line(const char *line, size_t len)
{
    lua_State *L = cli.L;
    const char *chunk = line;
    size_t clen = len;
    char *joined = NULL;
    if (pending) {
        joined = malloc(pending_len + 1 + len);
        if (!joined)
            return;
        memcpy(joined, pending, pending_len);
        joined[pending_len] = '\n';
        memcpy(joined + pending_len + 1, line, len);
        chunk = joined;
        clen = pending_len + 1 + len;
    }
    int r = cli_eval(L, chunk, clen, "=stdin", 0);
    free(pending);
    pending = NULL;
    pending_len = 0;
    if (r == CLI_EVAL_INCOMPLETE) {
        if (joined) {
            pending = joined;
            joined = NULL;
        } else if ((pending = malloc(len ? len : 1))) {
            memcpy(pending, line, len);
        }
        pending_len = clen;
    }
    free(joined);
    /* Callbacks that came due run before the next line, even when the
     * next line is already buffered (piped input). */
    if (r != CLI_EVAL_INCOMPLETE)
        cli_poll_all();
}

/* ---- completion (shared with attach) ---- */

static char **(*fetch_fn)(const char *, bool);

static char **build_matches(char **cands)
{
    int n = 0;
    while (cands && cands[n])
        n++;
    if (n == 0) {
        free(cands);
        return NULL;
    }
    char **m = malloc(sizeof *m * (size_t)(n + 2));
    if (!m)
        return NULL;
    size_t common = strlen(cands[0]);
    for (int i = 1; i < n; i++) {
        size_t k = 0;
        while (k < common && cands[i][k] == cands[0][k])
            k++;
        common = k;
    }
    if (n == 1) {
        m[0] = cands[0];
        m[1] = NULL;
    } else {
        m[0] = strndup(cands[0], common);
        for (int i = 0; i < n; i++)
            m[i + 1] = cands[i];
        m[n + 1] = NULL;
    }
    free(cands);
    return m;
}

static char **attempted(const char *text, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1;
    rl_completion_append_character = '\0';
    bool in_str = false;
    char q = 0;
    for (int i = 0; i < start && rl_line_buffer[i]; i++) {
        char c = rl_line_buffer[i];
        if (q) {
            if (c == '\\' && i + 1 < start)
                i++;
            else if (c == q)
                q = 0;
        } else if (c == '"' || c == '\'') {
            q = c;
        }
    }
    in_str = q != 0;
    if (!fetch_fn)
        return NULL;
    return build_matches(fetch_fn(text, in_str));
}

static char word_breaks[] = " \t\n\"'`@$><=;|&{(,)+-*/%^#~[]";

char **cli_repl_complete_list(const char *text, char **(*fetch)(const char *,
                              bool in_string))
{
    /* Called once to install: text NULL. */
    (void)text;
    fetch_fn = fetch;
    rl_attempted_completion_function = attempted;
    rl_completer_word_break_characters = word_breaks;
    rl_basic_word_break_characters = word_breaks;
    return NULL;
}

/* Candidates from the cli.lua completer on the main state. */
static char **fetch_local(const char *text, bool in_string)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "complete"))
        return NULL;
    lua_pushstring(L, text);
    lua_pushboolean(L, in_string);
    lua_pushglobaltable(L);
    if (lua_pcall(L, 3, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    lua_Integer n = luaL_len(L, -1);
    char **c = calloc((size_t)n + 1, sizeof *c);
    int k = 0;
    for (lua_Integer i = 1; c && i <= n; i++) {
        lua_rawgeti(L, -1, i);
        const char *s = lua_tostring(L, -1);
        if (s && (c[k] = strdup(s)))
            k++;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return c;
}

/* ---- readline mode ---- */

static void on_line(char *line)
{
    if (!cli_repl_rl_take(line)) {
        active = false;
        return;
    }
    do_line(line, strlen(line));
    free(line);
    if (active)
        rl_set_prompt(pending ? PROMPT2 : PROMPT1);
}

void cli_repl_start(void)
{
    active = true;
    lua_State *L = cli.L;
    if (lua_getglobal(L, "seda") == LUA_TNIL) {    /* handy at the prompt */
        lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
        lua_getfield(L, -1, "seda");
        lua_setglobal(L, "seda");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    use_rl = isatty(0) && isatty(1);
    if (!use_rl)
        return;
    char hp[4096];
    cli_repl_rl_open(hp, sizeof hp);
    cli_repl_complete_list(NULL, fetch_local);
    rl_callback_handler_install(PROMPT1, on_line);
}

void cli_repl_interrupt(void)
{
    if (!active)
        return;
    free(pending);
    pending = NULL;
    pending_len = 0;
    if (use_rl)
        cli_repl_rl_clear(PROMPT1);
}

/* ---- plain mode ---- */

static void plain_lines(bool eof)
{
    size_t start = 0;
    for (size_t i = 0; i < ilen && active; i++) {
        if (ibuf[i] == '\n') {
            size_t l = i - start;
            if (l && ibuf[start + l - 1] == '\r')
                l--;
            do_line(ibuf + start, l);
            start = i + 1;
        }
    }
    memmove(ibuf, ibuf + start, ilen - start);
    ilen -= start;
    if (eof) {
        if (ilen)
            do_line(ibuf, ilen);
        ilen = 0;
        active = false;
        if (pending) {
            /* Input ended inside a statement: say so, as lua does. */
            lua_State *L = cli.L;
            if (luaL_loadbuffer(L, pending, pending_len, "=stdin") !=
                LUA_OK)
                fprintf(stderr, "%s\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            free(pending);
            pending = NULL;
            pending_len = 0;
        }
    }
}

void cli_repl_input(void)
{
    if (!active)
        return;
    if (use_rl) {
        rl_callback_read_char();
        return;
    }
    if (icap - ilen < 4096) {
        size_t nc = icap ? icap * 2 : 8192;
        char *nb = realloc(ibuf, nc);
        if (!nb)
            return;
        ibuf = nb;
        icap = nc;
    }
    ssize_t r = read(0, ibuf + ilen, icap - ilen);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (r <= 0) {
        plain_lines(true);
        return;
    }
    ilen += (size_t)r;
    plain_lines(false);
}

void cli_repl_end(void)
{
    if (use_rl) {
        use_rl = false;
        if (active)
            rl_callback_handler_remove();
        char hp[4096];
        cli_repl_history_path(hp, sizeof hp);
        cli_repl_rl_save(hp);
    }
    active = false;
    free(pending);
    pending = NULL;
    free(ibuf);
    ibuf = NULL;
    ilen = icap = 0;
}

/* ---- top() on the local terminal ---- */

static bool draw_top(double secs)
{
    lua_State *L = cli.L;
    if (!cli_get_fn(L, "format_top"))
        return false;
    if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return false;
    }
    size_t n;
    const char *body = lua_tolstring(L, -1, &n);
    cli_top_frame(secs, body ? body : "", body ? n : 0);
    lua_pop(L, 1);
    return true;
}

/* The rest of an escape sequence (an arrow or function key: at most 7
 * more bytes) already waiting on stdin (raw mode), without waiting. */
static void drain_escape(void)
{
    struct pollfd p = { .fd = 0, .events = POLLIN };
    char buf[7];
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
        ssize_t n = read(0, buf, sizeof buf);
        (void)n;
    }
}

bool cli_repl_top_enter(struct termios *old)
{
    if (tcgetattr(0, old) != 0)
        return false;
    struct termios raw = *old;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    tcsetattr(0, TCSANOW, &raw);
    fputs("\033[?25l", stdout);
    return true;
}

void cli_repl_top_leave(const struct termios *old, bool restore)
{
    fputs("\033[?25h\n", stdout);
    fflush(stdout);
    if (restore)
        tcsetattr(0, TCSANOW, old);
}

void cli_repl_top_local(double secs)
{
    lua_State *L = cli.L;
    if (!isatty(0) || !isatty(1)) {
        if (cli_get_fn(L, "format_top") && lua_pcall(L, 0, 1, 0) == LUA_OK)
            cli_outs(lua_tostring(L, -1));
        lua_pop(L, 1);
        return;
    }
    struct termios old;
    bool tio = cli_repl_top_enter(&old);
    bool done = false;
    while (!done && !cli.stop) {
        if (!draw_top(secs))
            break;
        double deadline = cli_now() + secs;
        while (!done && cli_now() < deadline) {
            if (cli.intr || cli.stop) {
                done = true;
                break;
            }
            double left = (deadline - cli_now()) * 1000.0;
            int ms = left > 10 ? 10 : left < 0 ? 0 : (int)left;
            if (cli_step(ms, 0)) {
                /* The key that stops it, and no more: what was typed after
                 * it is the next line's (an arrow key's escape sequence
                 * goes with it). */
                char c;
                if (read(0, &c, 1) >= 0) {
                    done = true;
                    if (c == '\033')
                        drain_escape();
                }
            }
        }
    }
    cli.intr = 0;
    lua_sethook(L, NULL, 0, 0);
    cli_repl_top_leave(&old, tio);
}
