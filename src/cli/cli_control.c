/* SPDX-License-Identifier: MIT */
/*
 * cli_control.c -- the control socket of seda-lua (--control PATH): the
 * server side (the client is cli_attach.c).
 *
 * Protocol (a unix stream socket, mode 0600; no network listener):
 *   client -> server: lines ("\n"-terminated, at most 64 KiB each):
 *     Lua code        one REPL line; an incomplete chunk is kept and the
 *                     next line continues it (like lua5.4's REPL)
 *     metrics         the Prometheus text exposition
 *     \x01complete G|S WORD   completion candidates, one per line
 *                     (S: inside a string literal, i.e. stage names)
 *     \x01top         the stats table (what top() redraws)
 *     \x01evalP CODE  one whole command (attach SOCK 'command'): CODE
 *     \x01evalJ CODE  with its backslashes doubled and control bytes as
 *                     \xHH, run as one chunk; J prints its results as
 *                     JSON.  An incomplete one answers '+' and is dropped
 *     \x03            (a lone byte, anywhere) interrupt: the request
 *                     running now stops with the error "interrupted!";
 *                     with none running, the pending chunk is dropped.
 *                     No reply of its own.
 *   server -> client: the output of the request, then "\x04" STATUS "\n":
 *     STATUS '>' ready, '+' continue the chunk, 'T' SECONDS run top(),
 *     'E' ready, the command raised.
 *   A 0x04 byte in the output itself is sent as '?'.  On connect the
 *   server sends a greeting line and a '>' terminator.
 *
 * The server runs in the main thread's poll loop; sockets are
 * non-blocking, every client has its own Lua environment table (__index =
 * _G; print and io.write send to that client), a line that is too long or
 * a client that vanishes costs only that client its buffer or connection.
 * While a client's Lua command runs, the loop does not: a count hook
 * (remote_hook) looks at that client's socket every 20 ms or so and
 * interrupts the command when the client sent 0x03 or went away; a signal
 * to the server interrupts it too (cli_loop.c).  Code blocked inside a C
 * function is interrupted only when it returns to Lua.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda.h"
#include "seda_lua_admin.h"

#define MAX_CLIENTS 64
#define OUT_SOFT (1u << 20)         /* above this much unsent output, a
                                     * client's lines wait (and its socket
                                     * is not read) until it reads */
#define OUT_HARD (16u << 20)        /* truncate one reply above this */
#define IN_CAP (2 * CLI_MAX_LINE + 65536)   /* buffered input, at most */

double cli_control_idle_timeout = 600;  /* --idle-timeout; 0: never */

struct client {
    int fd;
    int id;
    int env_ref;
    char *in;                   /* received, not yet run: in[inoff..inlen) */
    size_t inlen, inoff, incap;
    bool discarding;            /* skipping the rest of a too-long line */
    bool eof;                   /* the client sent everything it will */
    bool busy;                  /* its lines are being run (no re-entry) */
    double last_active;         /* when it last sent or was answered */
    char *chunk;                /* pending incomplete Lua chunk */
    size_t chunklen;
    char *out;                  /* reply bytes not yet sent */
    size_t outlen, outoff, outcap;
    size_t reply;               /* bytes of the reply being built */
    bool truncated;
    double top;                 /* top() asked for: seconds, or 0 */
    int intr_seen;              /* 0x03 bytes still in the socket that
                                 * remote_hook has acted on */
    bool interrupting;          /* its running command is being stopped */
    bool dead;
    struct client *next;
};

static struct cli_control_sock lsock = { .fd = -1 };   /* the socket */
static struct client *clients;
static int nclients;
static int next_id = 1;

/* ---- listening ---- */

int cli_control_listen(const char *path)
{
    return cli_control_sock_open(&lsock, path) == 0 ? 0 : 1;
}

/* ---- client output ---- */

static void out_raw(struct client *c, const char *s, size_t n)
{
    if (c->dead)
        return;
    if (c->outlen + n > c->outcap) {
        if (c->outoff) {
            memmove(c->out, c->out + c->outoff, c->outlen - c->outoff);
            c->outlen -= c->outoff;
            c->outoff = 0;
        }
        if (c->outlen + n > c->outcap) {
            size_t nc = c->outcap ? c->outcap : 4096;
            while (nc < c->outlen + n)
                nc *= 2;
            char *nb = realloc(c->out, nc);
            if (!nb) {
                c->dead = true;
                return;
            }
            c->out = nb;
            c->outcap = nc;
        }
    }
    memcpy(c->out + c->outlen, s, n);
    c->outlen += n;
}

/* Reply text: bounded per reply, 0x04 masked. */
static void out_text(struct client *c, const char *s, size_t n)
{
    if (c->truncated)
        return;
    if (c->reply + n > OUT_HARD) {
        n = OUT_HARD > c->reply ? OUT_HARD - c->reply : 0;
        c->truncated = true;
    }
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == CLI_EOT) {
            out_raw(c, s + start, i - start);
            out_raw(c, "?", 1);
            start = i + 1;
        }
    }
    out_raw(c, s + start, n - start);
    c->reply += n;
    if (c->truncated) {
        static const char m[] = "\n[output truncated]\n";
        out_raw(c, m, sizeof m - 1);
    }
}

static void out_end(struct client *c, char status, double top)
{
    char t[64];
    int n;
    if (status == 'T')
        n = snprintf(t, sizeof t, "%cT%g\n", CLI_EOT, top);
    else
        n = snprintf(t, sizeof t, "%c%c\n", CLI_EOT, status);
    out_raw(c, t, (size_t)n);
    c->reply = 0;
    c->truncated = false;
}

static void flush_client(struct client *c)
{
    while (!c->dead && c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->outoff += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            c->dead = true;
        }
    }
    if (c->outoff == c->outlen)
        c->outoff = c->outlen = 0;
}

static struct client *find_client(int id)
{
    for (struct client *c = clients; c; c = c->next)
        if (c->id == id && !c->dead)
            return c;
    return NULL;
}

static void sink_write(void *ud, const char *s, size_t n)
{
    out_text(ud, s, n);
}

static void sink_top(void *ud, double secs)
{
    ((struct client *)ud)->top = secs;
}

/* The client's print: like print, to that client (stdout once it left). */
static int client_print(lua_State *L)
{
    struct client *c = find_client((int)lua_tointeger(L, lua_upvalueindex(1)));
    int n = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, '\t');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, '\n');
    luaL_pushresult(&b);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (c)
        out_text(c, s, len);
    else
        fwrite(s, 1, len, stdout);
    return 0;
}

static int client_write(lua_State *L)
{
    struct client *c = find_client((int)lua_tointeger(L, lua_upvalueindex(1)));
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_checklstring(L, i, &len);
        if (c)
            out_text(c, s, len);
        else
            fwrite(s, 1, len, stdout);
    }
    return 0;
}

/* ---- accepting ---- */

static void new_client(int fd)
{
    lua_State *L = cli.L;
    struct client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->id = next_id++;
    c->last_active = cli_now();
    /* env = setmetatable({print=, io=setmetatable({write=}, {__index=io})},
     *                    {__index=_G}) */
    lua_newtable(L);
    lua_pushinteger(L, c->id);
    lua_pushcclosure(L, client_print, 1);
    lua_setfield(L, -2, "print");
    lua_newtable(L);
    lua_pushinteger(L, c->id);
    lua_pushcclosure(L, client_write, 1);
    lua_setfield(L, -2, "write");
    lua_newtable(L);
    lua_getglobal(L, "io");
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "io");
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    lua_remove(L, -2);
    lua_setfield(L, -2, "seda");        /* handy, like in handlers */
    lua_newtable(L);
    lua_pushglobaltable(L);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    c->env_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    c->next = clients;
    clients = c;
    nclients++;
    char g[128];
    snprintf(g, sizeof g, "control socket of pid %ld", (long)getpid());
    bool banner = false;
    if (cli_get_fn(L, "banner")) {
        lua_pushstring(L, g);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_isstring(L, -1)) {
            size_t bn;
            const char *b = lua_tolstring(L, -1, &bn);
            out_text(c, b, bn);
            banner = true;
        }
        lua_pop(L, 1);
    }
    if (!banner) {
        int n = snprintf(g, sizeof g, "seda-lua %s control (pid %ld); "
                         "help() lists the commands\n", SEDA_VERSION,
                         (long)getpid());
        out_text(c, g, (size_t)n);
    }
    out_end(c, '>', 0);
    flush_client(c);
}

static void free_client(struct client *c)
{
    luaL_unref(cli.L, LUA_REGISTRYINDEX, c->env_ref);
    close(c->fd);
    free(c->in);
    free(c->chunk);
    free(c->out);
    free(c);
    nclients--;
}

/* ---- requests ---- */

static void push_fn_result(struct client *c, const char *fn, int nargs)
{
    lua_State *L = cli.L;
    /* function and args are on the stack */
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, cli_msghandler);
    lua_insert(L, base);
    if (lua_pcall(L, nargs, 1, base) != LUA_OK) {
        size_t n;
        const char *m = lua_tolstring(L, -1, &n);
        out_text(c, fn, strlen(fn));
        out_text(c, ": ", 2);
        out_text(c, m, n);
        out_text(c, "\n", 1);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        out_text(c, s, n);
    } else if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            size_t len;
            const char *s = lua_tolstring(L, -1, &len);
            if (s && !memchr(s, '\n', len)) {
                out_text(c, s, len);
                out_text(c, "\n", 1);
            }
            lua_pop(L, 1);
        }
    }
    lua_settop(L, base - 1);
}

static struct client *cur;      /* the client whose command runs now */
static double cur_check;        /* when remote_hook last looked */

/* Look at c's socket without taking anything: a 0x03 not yet acted on
 * (Ctrl-C in attach) or the client gone sets c->interrupting. */
static void check_client(struct client *c)
{
    char buf[4096];
    ssize_t r = recv(c->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR)) {
        c->dead = true;                 /* gone: nobody waits for it */
        c->interrupting = true;
    } else if (r > 0) {
        int n = 0;
        for (ssize_t i = 0; i < r; i++)
            n += buf[i] == CLI_INTR;
        if (n > c->intr_seen) {
            c->intr_seen = n;
            c->interrupting = true;
        }
    }
}

/* The count hook while a client's Lua command runs (every 1000
 * instructions; the socket at most every 20 ms): a 0x03 the client sent
 * (Ctrl-C in attach) or the client gone interrupts the command.  Once
 * interrupting, it raises again at every call, so a pcall in the command
 * does not swallow the interrupt for good.  Main thread. */
static void remote_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct client *c = cur;
    if (!c)
        return;
    if (!c->interrupting) {
        double now = cli_now();
        if (now - cur_check < 0.02)
            return;
        cur_check = now;
        check_client(c);
        if (!c->interrupting)
            return;
    }
    if (seda__l_callback_depth > 0)
        return;         /* stops the command, never a callback */
    luaL_error(L, "interrupted!");
}

/* See cli.h.  Arms remote_hook on every instruction once interrupting, so
 * the command stops as soon as it runs Lua again. */
bool cli_control_interrupt_pending(lua_State *L)
{
    struct client *c = cur;
    if (!c || cli.sink == NULL)
        return false;
    if (!c->interrupting)
        check_client(c);
    if (c->interrupting)
        lua_sethook(L, remote_hook, LUA_MASKCOUNT, 1);
    return c->interrupting;
}

/* Take the 0x03 bytes out of buf (n bytes); returns the bytes left.  One
 * that remote_hook acted on is only counted off; any other drops the
 * pending incomplete chunk (Ctrl-C at attach's ">>" prompt). */
static size_t take_interrupts(struct client *c, char *buf, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != CLI_INTR) {
            buf[k++] = buf[i];
        } else if (c->intr_seen > 0) {
            c->intr_seen--;
        } else {
            free(c->chunk);
            c->chunk = NULL;
            c->chunklen = 0;
        }
    }
    return k;
}

/* The inverse of cli_control_escape: a malloc'd copy of s (n bytes) with
 * doubled backslashes and \xHH decoded, NUL-terminated, its length in
 * *outlen; NULL when malformed or out of memory. */
static char *unescape(const char *s, size_t n, size_t *outlen)
{
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            o[k++] = s[i];
        } else if (i + 1 < n && s[i + 1] == '\\') {
            o[k++] = '\\';
            i++;
        } else if (i + 3 < n && s[i + 1] == 'x' &&
                   isxdigit((unsigned char)s[i + 2]) &&
                   isxdigit((unsigned char)s[i + 3])) {
            char hex[3] = { s[i + 2], s[i + 3], 0 };
            o[k++] = (char)strtol(hex, NULL, 16);
            i += 3;
        } else {
            free(o);
            return NULL;
        }
    }
    o[k] = 0;
    *outlen = k;
    return o;
}

size_t cli_control_escape(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == '\\') {
            out[k++] = '\\';
            out[k++] = '\\';
        } else if (b < 0x20 || b == 0x7f) {
            k += (size_t)sprintf(out + k, "\\x%02x", b);
        } else {
            out[k++] = (char)b;
        }
    }
    return k;
}

static void handle_line(struct client *c, const char *line, size_t len)
{
    lua_State *L = cli.L;
    int top = lua_gettop(L);
    if (len && line[len - 1] == '\r')
        len--;
    struct cli_sink sink = { sink_write, sink_top, remote_hook, c };
    struct cli_sink *saved = cli.sink;
    cli.sink = &sink;
    c->top = 0;
    if (!c->chunk && len == 7 && memcmp(line, "metrics", 7) == 0) {
        if (cli_get_fn(L, "metrics"))
            push_fn_result(c, "metrics", 0);
        out_end(c, '>', 0);
    } else if (!c->chunk && len >= 7 && line[0] == '\x01' &&
               memcmp(line + 1, "eval", 4) == 0 &&
               (line[5] == 'P' || line[5] == 'J') && line[6] == ' ') {
        /* attach SOCK 'command': the whole command in one request (its
         * control bytes and backslashes escaped, see cli_control_escape),
         * run as one chunk like a REPL line; J prints its results as JSON.
         * Incomplete: '+' (nothing is kept); raised: 'E'. */
        size_t clen;
        char *code = unescape(line + 7, len - 7, &clen);
        if (!code) {
            static const char m[] = "error: a malformed eval request\n";
            out_text(c, m, sizeof m - 1);
            out_end(c, 'E', 0);
            goto done;
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, c->env_ref);
        struct client *saved_cur = cur;
        cur = c;
        cur_check = cli_now();
        c->interrupting = false;
        int r = cli_eval_as(L, code, clen, "=control", lua_gettop(L),
                            line[5] == 'J');
        c->interrupting = false;
        cur = saved_cur;
        lua_pop(L, 1);
        free(code);
        if (c->top > 0)
            out_end(c, 'T', c->top);
        else
            out_end(c, r == CLI_EVAL_INCOMPLETE ? '+'
                       : r == CLI_EVAL_ERROR ? 'E' : '>', 0);
    } else if (len && line[0] == '\x01') {
        if (len >= 12 && memcmp(line + 1, "complete ", 9) == 0 &&
            (line[10] == 'G' || line[10] == 'S') && line[11] == ' ') {
            if (cli_get_fn(L, "complete")) {
                lua_pushlstring(L, line + 12, len - 12);
                lua_pushboolean(L, line[10] == 'S');
                lua_rawgeti(L, LUA_REGISTRYINDEX, c->env_ref);
                push_fn_result(c, "complete", 3);
            }
        } else if (len == 4 && memcmp(line + 1, "top", 3) == 0) {
            if (cli_get_fn(L, "format_top"))
                push_fn_result(c, "top", 0);
        } else {
            static const char m[] = "error: unknown control request\n";
            out_text(c, m, sizeof m - 1);
        }
        out_end(c, c->chunk ? '+' : '>', 0);
    } else {
        const char *code = line;
        size_t clen = len;
        char *joined = NULL;
        if (c->chunk) {
            if (c->chunklen + 1 + len > CLI_MAX_LINE) {
                static const char m[] = "error: chunk too long (limit "
                                        "65536 bytes); discarded\n";
                out_text(c, m, sizeof m - 1);
                free(c->chunk);
                c->chunk = NULL;
                out_end(c, '>', 0);
                goto done;
            }
            joined = malloc(c->chunklen + 1 + len);
            if (!joined) {
                c->dead = true;
                goto done;
            }
            memcpy(joined, c->chunk, c->chunklen);
            joined[c->chunklen] = '\n';
            memcpy(joined + c->chunklen + 1, line, len);
            code = joined;
            clen = c->chunklen + 1 + len;
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, c->env_ref);
        struct client *saved_cur = cur;
        cur = c;
        cur_check = cli_now();
        c->interrupting = false;
        int r = cli_eval(L, code, clen, "=control", lua_gettop(L));
        c->interrupting = false;
        cur = saved_cur;
        lua_pop(L, 1);
        free(c->chunk);
        c->chunk = NULL;
        c->chunklen = 0;
        if (r == CLI_EVAL_INCOMPLETE) {
            if (!joined && (joined = malloc(len ? len : 1)))
                memcpy(joined, line, len);
            c->chunk = joined;
            c->chunklen = clen;
            joined = NULL;
            out_end(c, '+', 0);
        } else if (c->top > 0) {
            out_end(c, 'T', c->top);
        } else {
            /* 'E': the command raised (attach SOCK 'expr' exits 1). */
            out_end(c, r == CLI_EVAL_ERROR ? 'E' : '>', 0);
        }
        free(joined);
    }
done:
    cli.sink = saved;
    lua_settop(L, top);
}

static size_t unsent(const struct client *c)
{
    return c->outlen - c->outoff;
}

/* Run the complete lines buffered for c, oldest first, while its unsent
 * output stays within OUT_SOFT: a client that sends commands and never
 * reads their output holds at most OUT_SOFT plus one reply (OUT_HARD),
 * and its remaining lines wait for it to read; other clients are served
 * meanwhile.  A line longer than CLI_MAX_LINE is refused (an error reply)
 * and skipped up to its newline.  Main thread. */
static void run_lines(struct client *c)
{
    if (c->busy)
        return;
    c->busy = true;
    while (!c->dead && unsent(c) <= OUT_SOFT && c->inoff < c->inlen) {
        char *p = c->in + c->inoff;
        size_t avail = c->inlen - c->inoff;
        char *nl = memchr(p, '\n', avail);
        if (!nl) {
            if (avail > CLI_MAX_LINE && !c->discarding) {
                static const char m[] = "error: line too long (limit 65536 "
                                        "bytes); discarded\n";
                out_text(c, m, sizeof m - 1);
                out_end(c, c->chunk ? '+' : '>', 0);
                c->discarding = true;
            }
            if (c->discarding)
                c->inoff = c->inlen;    /* drop what we have of it */
            break;
        }
        size_t len = (size_t)(nl - p);
        c->inoff += len + 1;
        if (c->discarding) {
            c->discarding = false;      /* the end of the long line */
            continue;
        }
        if (len > CLI_MAX_LINE) {
            static const char m[] = "error: line too long (limit 65536 "
                                    "bytes); discarded\n";
            out_text(c, m, sizeof m - 1);
            out_end(c, c->chunk ? '+' : '>', 0);
            continue;
        }
        handle_line(c, p, len);
        c->last_active = cli_now();
        flush_client(c);
    }
    if (c->inoff == c->inlen)
        c->inoff = c->inlen = 0;
    /* Everything sent and run: a client that closed its end is done. */
    if (c->eof && c->inoff == c->inlen)
        c->dead = true;
    c->busy = false;
}

/* Take what the client sent (up to IN_CAP buffered), then run its lines. */
static void read_client(struct client *c)
{
    char buf[65536];
    if (c->busy)
        return;         /* its command runs: in[] is in use (no re-entry) */
    while (!c->dead && !c->eof) {
        if (c->inoff > 0 && c->inoff == c->inlen)
            c->inoff = c->inlen = 0;
        if (c->inlen - c->inoff >= IN_CAP)
            break;                      /* enough waiting to be run */
        size_t room = IN_CAP - (c->inlen - c->inoff);
        ssize_t r = recv(c->fd, buf, room < sizeof buf ? room : sizeof buf,
                         MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (r < 0) {
            c->dead = true;             /* an error: drop it */
            return;
        }
        if (r == 0) {
            c->eof = true;              /* run what it sent, then drop */
            break;
        }
        c->last_active = cli_now();
        size_t k = take_interrupts(c, buf, (size_t)r);
        if (c->inoff > 0) {             /* compact before growing */
            memmove(c->in, c->in + c->inoff, c->inlen - c->inoff);
            c->inlen -= c->inoff;
            c->inoff = 0;
        }
        if (c->inlen + k > c->incap) {
            size_t nc = c->incap ? c->incap : 4096;
            while (nc < c->inlen + k)
                nc *= 2;
            char *nb = realloc(c->in, nc);
            if (!nb) {
                c->dead = true;
                return;
            }
            c->in = nb;
            c->incap = nc;
        }
        memcpy(c->in + c->inlen, buf, k);
        c->inlen += k;
        run_lines(c);
        if (unsent(c) > OUT_SOFT)
            break;                      /* it must read first */
    }
    run_lines(c);
}

int cli_control_fds(struct pollfd *fds, int max)
{
    int n = 0;
    if (lsock.fd < 0 || max < 1)
        return 0;
    fds[n++] = (struct pollfd){ .fd = lsock.fd, .events = POLLIN };
    for (struct client *c = clients; c && n < max; c = c->next) {
        short ev = 0;
        if (unsent(c) <= OUT_SOFT && !c->eof && !c->busy &&
            c->inlen - c->inoff < IN_CAP)
            ev |= POLLIN;
        if (unsent(c) > 0)
            ev |= POLLOUT;
        fds[n++] = (struct pollfd){ .fd = c->fd, .events = ev };
    }
    return n;
}

static void sweep(void)
{
    struct client **pp = &clients;
    while (*pp) {
        struct client *c = *pp;
        if (c->dead) {
            *pp = c->next;
            free_client(c);
        } else {
            pp = &c->next;
        }
    }
}

void cli_control_handle(struct pollfd *fds, int n)
{
    if (lsock.fd < 0 || n < 1)
        return;
    /* Clients first: match descriptors (the list may change below). */
    for (int i = 1; i < n; i++) {
        if (!fds[i].revents)
            continue;
        for (struct client *c = clients; c; c = c->next) {
            if (c->fd != fds[i].fd || c->dead)
                continue;
            if (fds[i].revents & POLLOUT)
                flush_client(c);
            if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
                read_client(c);
            else
                run_lines(c);           /* lines that waited for room */
            flush_client(c);
            break;
        }
    }
    if (fds[0].revents & POLLIN) {
        for (int k = 0; k < 16; k++) {
            int fd = accept4(lsock.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            if (nclients >= MAX_CLIENTS) {
                /* Refused: status '!' (attach prints it and exits 1). */
                char m[160];
                int mn = snprintf(m, sizeof m, "seda-lua: too many control "
                                  "clients (%d connected, the limit); "
                                  "try again later\n%c!\n", MAX_CLIENTS,
                                  CLI_EOT);
                (void)!send(fd, m, (size_t)mn, MSG_NOSIGNAL | MSG_DONTWAIT);
                close(fd);
                continue;
            }
            new_client(fd);
        }
    }
    sweep();
}

void cli_control_tick(double now)
{
    if (lsock.fd < 0 || !(cli_control_idle_timeout > 0))
        return;
    bool any = false;
    for (struct client *c = clients; c; c = c->next) {
        if (c->dead || c->busy || c == cur || unsent(c) > 0 ||
            c->inoff < c->inlen ||
            now - c->last_active < cli_control_idle_timeout)
            continue;
        char m[160];
        int n = snprintf(m, sizeof m, "seda-lua: closing this control "
                         "connection: idle for %gs (--idle-timeout)\n",
                         cli_control_idle_timeout);
        (void)!send(c->fd, m, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        c->dead = true;
        any = true;
    }
    if (any)
        sweep();
}

void cli_control_close(void)
{
    for (struct client *c = clients; c; c = c->next) {
        flush_client(c);
        c->dead = true;
    }
    sweep();
    cli_control_sock_close(&lsock);
}
