/* SPDX-License-Identifier: MIT */
/*
 * cli_attach.c -- `seda-lua attach PATH`: a REPL connected to a running
 * seda-lua's control socket (the protocol is described in
 * cli_control.c).  On a terminal it uses readline's callback interface,
 * so a reply and Ctrl-C can arrive while a line is being edited; from a
 * pipe it sends each line and prints the reply.  cli_attach_collect runs
 * one command over the same connection code for other subcommands
 * (`seda-lua dlq --control PATH`) and hands its output back.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <readline/readline.h>

#include "cli.h"

static int afd = -1;
static char *abuf;              /* received, not yet consumed */
static size_t alen, acap;
static bool atty;               /* readline on a terminal */
static bool gave_up;            /* left a request the server never ended */
static bool raised;             /* the last command raised (status 'E') */
static char awho[64];           /* what messages begin with: "seda-lua:
                                 * attach", or the caller's */

/* SIGINT in the client (written by the handler, reset by the main code):
 * while a request is out it sends 0x03, which interrupts the request on
 * the server; at the terminal prompt it asks to clear the line; with
 * input from a pipe and no request out, it ends the client as usual. */
static volatile sig_atomic_t a_waiting;     /* a request is out */
static volatile sig_atomic_t a_presses;     /* Ctrl-C during this one */
static volatile sig_atomic_t a_intr;        /* Ctrl-C at the prompt */

static void attach_sigint(int sig)
{
    int e = errno;
    if (a_waiting) {
        static const char b = CLI_INTR;
        (void)!send(afd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        a_presses = a_presses + 1;
    } else if (atty) {
        a_intr = 1;
    } else {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    errno = e;
}

/* Send all of s (blocking socket). */
static int send_all(const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(afd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Read one reply: output goes to `emit` (NULL: stdout); returns the status
 * line after 0x04 (static), or NULL when the connection closed. */
static const char *read_reply(void (*emit)(const char *, size_t, void *),
                              void *ud)
{
    static char status[64];
    for (;;) {
        char *eot = alen ? memchr(abuf, CLI_EOT, alen) : NULL;
        if (eot) {
            char *nl = memchr(eot, '\n', alen - (size_t)(eot - abuf));
            if (nl) {
                size_t out = (size_t)(eot - abuf);
                if (emit)
                    emit(abuf, out, ud);
                else
                    fwrite(abuf, 1, out, stdout);
                size_t sl = (size_t)(nl - eot - 1);
                if (sl >= sizeof status)
                    sl = sizeof status - 1;
                memcpy(status, eot + 1, sl);
                status[sl] = '\0';
                size_t used = (size_t)(nl - abuf) + 1;
                memmove(abuf, abuf + used, alen - used);
                alen -= used;
                fflush(stdout);
                return status;
            }
        } else if (alen) {
            if (emit)
                emit(abuf, alen, ud);
            else
                fwrite(abuf, 1, alen, stdout);
            alen = 0;
        }
        if (acap - alen < 4096) {
            size_t nc = acap ? acap * 2 : 65536;
            char *nb = realloc(abuf, nc);
            if (!nb)
                return NULL;
            abuf = nb;
            acap = nc;
        }
        ssize_t r = recv(afd, abuf + alen, acap - alen, 0);
        if (r < 0 && errno == EINTR) {
            /* Interrupted three times and still no reply (the server
             * may be stuck in a C call): stop waiting. */
            if (a_presses >= 3) {
                gave_up = true;
                fflush(stdout);
                return NULL;
            }
            continue;
        }
        if (r <= 0) {
            if (alen && !emit)
                fwrite(abuf, 1, alen, stdout);
            fflush(stdout);
            return NULL;
        }
        alen += (size_t)r;
    }
}

struct collect {
    char *s;
    size_t n, cap;
};

static void collect_emit(const char *s, size_t n, void *ud)
{
    struct collect *c = ud;
    if (c->n + n + 1 > c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 1024;
        while (nc < c->n + n + 1)
            nc *= 2;
        char *nb = realloc(c->s, nc);
        if (!nb)
            return;
        c->s = nb;
        c->cap = nc;
    }
    memcpy(c->s + c->n, s, n);
    c->n += n;
    c->s[c->n] = '\0';
}

static char **fetch_remote(const char *text, bool in_string)
{
    size_t tl = strlen(text);
    char *req = malloc(tl + 16);
    if (!req)
        return NULL;
    int n = snprintf(req, tl + 16, "\x01" "complete %c %s\n",
                     in_string ? 'S' : 'G', text);
    struct collect col = { 0 };
    if (send_all(req, (size_t)n) != 0 ||
        !read_reply(collect_emit, &col)) {
        free(req);
        free(col.s);
        return NULL;
    }
    free(req);
    size_t cnt = 0;
    for (size_t i = 0; i < col.n; i++)
        cnt += col.s[i] == '\n';
    char **v = calloc(cnt + 1, sizeof *v);
    size_t k = 0, start = 0;
    for (size_t i = 0; v && i < col.n; i++) {
        if (col.s[i] == '\n') {
            v[k++] = strndup(col.s + start, i - start);
            start = i + 1;
        }
    }
    free(col.s);
    return v;
}

static void remote_top(double secs)
{
    bool tty = isatty(0) && isatty(1);
    struct termios old;
    bool tio = tty && cli_repl_top_enter(&old);
    for (;;) {
        struct collect col = { 0 };
        if (send_all("\x01top\n", 5) != 0 || !read_reply(collect_emit, &col)) {
            free(col.s);
            break;
        }
        if (tty) {
            cli_top_frame(secs, col.s ? col.s : "", col.n);
        } else {
            fwrite(col.s ? col.s : "", 1, col.n, stdout);
        }
        fflush(stdout);
        free(col.s);
        if (!tty)
            break;
        struct pollfd p = { .fd = 0, .events = POLLIN };
        int r = poll(&p, 1, (int)(secs * 1000));
        if (r > 0) {
            char b[64];
            (void)!read(0, b, sizeof b);
            break;
        }
        if (a_intr) {                   /* Ctrl-C ends it too */
            a_intr = 0;
            break;
        }
        if (r < 0 && errno != EINTR)
            break;
    }
    if (tio)
        cli_repl_top_leave(&old, true);
}

/* Handle a reply's status; returns the next prompt, or NULL when the
 * connection closed (said on stderr). */
static const char *after(const char *status)
{
    if (!status) {
        if (gave_up)
            fprintf(stderr, "\n%s: no answer to the interrupt; leaving\n",
                    awho);
        else
            fprintf(stderr, "%s%s: connection closed\n",
                    atty ? "\n" : "", awho);
        return NULL;
    }
    if (status[0] == '!')               /* refused, the reason said */
        return NULL;
    if (status[0] == 'T') {
        remote_top(atof(status + 1));
        return "> ";
    }
    if (status[0] == 'E')
        raised = true;                  /* the command raised */
    return status[0] == '+' ? ">> " : "> ";
}

/* Send one line and handle the reply: the next prompt, or NULL when the
 * connection closed (said on stderr). */
static const char *request(const char *line, size_t n)
{
    /* Waiting from before the send: the server may start the command
     * (and a Ctrl-C may come) before send_all returns here. */
    a_presses = 0;
    a_waiting = 1;
    if (send_all(line, n) != 0) {
        a_waiting = 0;
        return after(NULL);
    }
    const char *st = read_reply(NULL, NULL);
    a_waiting = 0;
    return after(st);
}

/* ---- the terminal client (readline's callback interface) ---- */

static const char *aprompt;     /* the next prompt */
static bool adone;              /* Ctrl-D, or the connection closed */
static int arc;                 /* exit status */

static void on_attach_line(char *line)
{
    if (!cli_repl_rl_take(line)) {
        adone = true;
        return;
    }
    size_t n = strlen(line);
    char *req = malloc(n + 1);
    if (req) {
        memcpy(req, line, n);
        req[n] = '\n';
        aprompt = request(req, n + 1);
        free(req);
    } else {
        aprompt = NULL;
    }
    free(line);
    if (!aprompt) {
        rl_callback_handler_remove();
        adone = true;
        arc = 1;
        return;
    }
    rl_set_prompt(aprompt);
}

/* Ctrl-C at the prompt: drop the line (and the server's pending chunk),
 * like the local REPL. */
static void attach_clear_line(void)
{
    static const char b = CLI_INTR;
    if (aprompt && strcmp(aprompt, ">> ") == 0 && send_all(&b, 1) != 0)
        return;
    aprompt = "> ";
    cli_repl_rl_clear(aprompt);
}

static int attach_tty(void)
{
    char hp[4096];
    cli_repl_rl_open(hp, sizeof hp);
    rl_catch_signals = 0;               /* SIGINT is ours (attach_sigint) */
    cli_repl_complete_list(NULL, fetch_remote);
    rl_callback_handler_install(aprompt, on_attach_line);
    while (!adone) {
        if (a_intr) {
            a_intr = 0;
            attach_clear_line();
        }
        /* The socket too: the server going away shows at once.  100 ms:
         * a Ctrl-C that lands just before poll() waits no longer. */
        struct pollfd p[2] = { { .fd = 0, .events = POLLIN },
                               { .fd = afd, .events = POLLIN } };
        int r = poll(p, 2, 100);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[1].revents) {
            char b[4096];
            ssize_t n = recv(afd, b, sizeof b, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                rl_callback_handler_remove();
                after(NULL);
                arc = 1;
                break;
            }
            if (n > 0)                  /* not expected between replies */
                fwrite(b, 1, (size_t)n, stdout);
        }
        if (p[0].revents)
            rl_callback_read_char();
    }
    cli_repl_rl_save(hp);
    return arc;
}

/* The server at the other end of afd must run as this user or as root:
 * whoever else listens at PATH (a socket planted in a shared directory)
 * would read every line typed.  Returns 0, or 1 after saying why not. */
static int check_server(const char *path)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(afd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        fprintf(stderr, "%s: '%s': cannot check who runs the server (%s); "
                "refusing to talk to it\n", awho, path, strerror(errno));
        return 1;
    }
    uid_t me = getuid();
    if (cr.uid == me || cr.uid == 0)
        return 0;
    struct passwd *pw = getpwuid(cr.uid);
    fprintf(stderr, "%s: refusing '%s': the process listening "
            "there (pid %ld) runs as uid %ld%s%s%s, not as you (uid %ld) or "
            "root; it would see everything you type\n", awho, path,
            (long)cr.pid, (long)cr.uid, pw ? " (" : "", pw ? pw->pw_name : "",
            pw ? ")" : "", (long)me);
    return 1;
}

/* Connect to the control socket at path and read the server's greeting
 * into *greet (its status into *st).  Returns 0, or 1 after saying on
 * stderr why not, naming path: it cannot be reached, it is no seda-lua's
 * control socket, or the server refused the connection. */
static int attach_open(const char *path, struct collect *greet,
                       const char **st)
{
    struct sockaddr_un a;
    if (cli_control_sock_addr(&a, path) != 0)
        return 1;
    afd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (afd < 0 || connect(afd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        struct stat sb;
        if (e == ECONNREFUSED && stat(path, &sb) == 0 &&
            !S_ISSOCK(sb.st_mode))
            fprintf(stderr, "%s: cannot connect to '%s': it is not a "
                    "socket (seda-lua --control PATH makes one)\n",
                    awho, path);
        else
            fprintf(stderr, "%s: cannot connect to '%s': %s\n",
                    awho, path, strerror(e));
        if (afd >= 0)
            close(afd);
        afd = -1;
        return 1;
    }
    if (check_server(path) != 0) {
        close(afd);
        afd = -1;
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* The greeting (a banner) is shown on a terminal only; a refusal
     * (status '!', e.g. too many clients) is said either way.  A peer
     * that says nothing in 5 s, or closes, is no seda-lua. */
    struct timeval tv = { 5, 0 }, none = { 0, 0 };
    setsockopt(afd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    *st = read_reply(collect_emit, greet);
    setsockopt(afd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    if (!*st) {
        fprintf(stderr, "%s: '%s' is not a seda-lua control socket "
                "(no greeting from it)\n", awho, path);
    } else if ((*st)[0] == '!') {
        if (greet->s && *greet->s)
            fputs(greet->s, stderr);
        else
            fprintf(stderr, "%s: the server refused the connection\n",
                    awho);
    } else {
        return 0;
    }
    free(greet->s);
    greet->s = NULL;
    close(afd);
    afd = -1;
    return 1;
}

int cli_attach_collect(const char *path, const char *who, const char *line,
                       char **out, size_t *outlen, bool *did_raise)
{
    snprintf(awho, sizeof awho, "%s", who);
    *out = NULL;
    *outlen = 0;
    *did_raise = false;
    struct collect greet = { 0 };
    const char *st;
    if (attach_open(path, &greet, &st) != 0)
        return 1;
    free(greet.s);
    int rc = 1;
    size_t n = strlen(line);
    char *req = malloc(n + 2);
    struct collect col = { 0 };
    if (!req) {
        fprintf(stderr, "%s: out of memory\n", awho);
    } else {
        memcpy(req, line, n);
        req[n] = '\n';
        raised = false;
        if (send_all(req, n + 1) != 0)
            st = NULL;
        else
            st = read_reply(collect_emit, &col);
        if (!st) {
            fprintf(stderr, "%s: '%s': connection closed before the "
                    "answer\n", awho, path);
        } else if (st[0] == '+') {
            fprintf(stderr, "%s: the command sent to '%s' is not a "
                    "whole command\n", awho, path);
        } else if (st[0] == '!') {
            fprintf(stderr, "%s", col.s && *col.s ? col.s
                    : "the server refused the command\n");
        } else {
            *did_raise = st[0] == 'E';
            *out = col.s;
            *outlen = col.n;
            col.s = NULL;
            rc = 0;
        }
    }
    free(req);
    free(col.s);
    free(abuf);
    abuf = NULL;
    alen = acap = 0;
    close(afd);
    afd = -1;
    return rc;
}

int cli_attach(const char *path, const char *expr, bool json)
{
    snprintf(awho, sizeof awho, "%s: attach", cli_progname);
    struct collect greet = { 0 };
    const char *st;
    if (attach_open(path, &greet, &st) != 0)
        return 1;
    atty = isatty(0) && isatty(1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = attach_sigint;      /* no SA_RESTART: see read_reply */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (atty && greet.s && !expr) {
        fputs(greet.s, stdout);
        fflush(stdout);
    }
    free(greet.s);
    aprompt = after(st);
    if (!aprompt)
        return 1;
    int rc = 0;
    if (expr) {
        /* One command: its output, then exit 0, or 1 when it raised (or
         * the connection closed).  --json prints its results as JSON. */
        /* The whole command as one request (its lines escaped), run as
         * one chunk the way the REPL runs a line: an expression prints
         * its values, a statement runs, several lines are one chunk. */
        size_t n = strlen(expr);
        char *req = malloc(4 * n + 16);
        if (!req)
            return 1;
        memcpy(req, json ? "\x01" "evalJ " : "\x01" "evalP ", 7);
        size_t k = 7 + cli_control_escape(expr, n, req + 7);
        req[k++] = '\n';
        raised = false;
        const char *p = request(req, k);
        free(req);
        rc = !p || raised ? 1 : 0;
        if (p && strcmp(p, ">> ") == 0) {
            fprintf(stderr, "%s: '%s' is not a whole command\n",
                    awho, expr);
            rc = 1;
        }
    } else if (atty) {
        rc = attach_tty();
    } else {
        /* From a pipe: every line runs (an error does not stop the
         * rest, as at the prompt); the exit status is 1 when any of
         * them raised (but for one the user interrupted with Ctrl-C) or
         * the input ended inside a chunk, as a script's caller needs to
         * know. */
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        const char *p = aprompt;
        bool failed = false;
        while ((n = getline(&line, &cap, stdin)) > 0) {
            if (line[n - 1] != '\n') {
                char *nb = realloc(line, (size_t)n + 1);
                if (!nb)
                    break;
                line = nb;
                line[n++] = '\n';
            }
            raised = false;
            if (!(p = request(line, (size_t)n))) {
                rc = 1;
                break;
            }
            if (raised && a_presses == 0)
                failed = true;
        }
        free(line);
        if (p && strcmp(p, ">> ") == 0) {
            fprintf(stderr, "%s: the input ended inside a chunk (a "
                    "statement not finished)\n", awho);
            rc = 1;
        }
        if (failed)
            rc = 1;
    }
    free(abuf);
    close(afd);
    return rc;
}
