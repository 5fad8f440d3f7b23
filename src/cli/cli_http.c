/* SPDX-License-Identifier: MIT */
/*
 * cli_http.c -- seda-lua --http [ADDR:]PORT: an HTTP endpoint on
 * libmicrohttpd (MHD) serving
 *
 *   /            the status page (cli_page.html, embedded): the live stage
 *                table in declaration order, sparklines, loans, dead
 *                letters, the recent errors; it fetches /stats.json every
 *                second
 *   /metrics     the Prometheus text exposition (lua/seda/metrics.lua)
 *   /stats.json  every live bus's stats and recent errors (cli_json.c)
 *   /dlq.json    every live bus's kept dead letters, newest first
 *   /history.json  the last five minutes of every live bus, a sample a
 *                second (cli_history.c); ?since=T: only the samples
 *                after wall-clock time T
 *   /tap?stage=  the envelopes entering a stage, live, as Server-Sent
 *                Events (cli_tap.c), until the client goes away
 *
 * GET and HEAD only (405 with an Allow header otherwise), 404 for any other
 * path, 400 for what MHD finds malformed, 403 for a Host header that is
 * neither an IP address, localhost nor a name given with --http-host (a
 * DNS-rebinding page in the operator's browser would send its own name);
 * at most HTTP_CONN_LIMIT connections at once, each given HTTP_TIMEOUT
 * seconds to send a whole request (from its start or its previous
 * answer), however slowly its bytes drip (a /tap stream, which answers
 * for as long as it is open, is exempt), and at most HTTP_TAP_LIMIT taps.
 *
 * DESIGN
 *   The answers come from the observer (cli_observe.c): a Lua state of
 *   its own whose `seda` module sees every live bus read-only, and a
 *   thread that drives MHD ("external polling" on epoll: its poll() waits
 *   on MHD's epoll descriptor, bounded by MHD_get_timeout, and MHD_run
 *   follows every poll), so the request callback runs on that thread and
 *   uses that state.  A main state busy with a script, a long REPL
 *   command or a loop that never ends does not hold a scrape.  The
 *   listening socket is ours (bound in cli_http_start on the main thread,
 *   before the script runs, so a port in use fails the start with a clear
 *   message; port 0 picks a free one), handed to MHD with
 *   MHD_OPTION_LISTEN_SOCKET; the address it listens on is printed on
 *   stderr.  MHD's own connection timeout is an idle one; the whole-
 *   request clock is ours (struct conn, reap).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#include <microhttpd.h>

#include <lua.h>

#include "cli.h"
#include "seda.h"

#ifndef CLI_PAGE_FILE
#define CLI_PAGE_FILE "src/cli/cli_page.html"
#endif

/* The status page, embedded at build time like cli.lua (cli_lua.c). */
__asm__(".section .rodata\n"
        ".global cli_page_src\n"
        ".type cli_page_src, @object\n"
        "cli_page_src:\n"
        ".incbin \"" CLI_PAGE_FILE "\"\n"
        ".global cli_page_end\n"
        ".type cli_page_end, @object\n"
        "cli_page_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char cli_page_src[];
extern const char cli_page_end[];

/* Set up on the main thread (cli_http_start), then the observer
 * thread's (cli_observe.c) until cli_http_stop, after it stopped. */
static struct {
    struct MHD_Daemon *d;       /* NULL when --http is off */
    int epfd;                   /* MHD's epoll descriptor */
    bool in_run;                /* inside MHD_run (no re-entry) */
    char where[96];             /* "127.0.0.1:8080", as listening */
} h = { .epfd = -1 };

/* A connection's whole-request clock: MHD's own timeout is an idle one, so
 * a client dripping a header line every few seconds would hold its
 * connection forever (slowloris).  The clock runs from the connection's
 * start or its previous answer; at HTTP_TIMEOUT the connection is shut
 * down (cli_http_run).  The observer thread only (MHD's callbacks run
 * in its MHD_run). */
struct conn {
    int fd;
    double since;
    bool cut;
    bool stream;                /* answering /tap: no deadline till done */
    struct conn *prev, *next;
};
static struct conn *conns;
static unsigned long slow_cut;          /* connections cut so far */

/* ---- the address ---- */

/* Parse spec ("PORT", "ADDR:PORT", "[V6ADDR]:PORT", "localhost:PORT") into
 * ss.  A port alone means 127.0.0.1.  Returns 0, or -1 with a message in
 * err. */
static int parse_addr(const char *spec, struct sockaddr_storage *ss,
                      socklen_t *sl, char *err, size_t errlen)
{
    char host[64];
    const char *port;
    const char *colon = strrchr(spec, ':');
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':' || (size_t)(close - spec - 1) >=
            sizeof host) {
            snprintf(err, errlen, "'%s': expected [IPV6]:PORT", spec);
            return -1;
        }
        memcpy(host, spec + 1, (size_t)(close - spec - 1));
        host[close - spec - 1] = '\0';
        port = close + 2;
    } else if (colon) {
        if ((size_t)(colon - spec) >= sizeof host) {
            snprintf(err, errlen, "'%s': address too long", spec);
            return -1;
        }
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
        port = colon + 1;
    } else {
        strcpy(host, "127.0.0.1");
        port = spec;
    }
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (!*port || *end || errno || p < 0 || p > 65535 ||
        port[strspn(port, "0123456789")]) {
        snprintf(err, errlen, "'%s': the port must be a number from 0 to "
                 "65535 (0: any free port)", spec);
        return -1;
    }
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)p);
        *sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)p);
        *sl = sizeof *a6;
    } else {
        snprintf(err, errlen, "'%s': '%s' is not a numeric IPv4 or IPv6 "
                 "address (nor localhost); give 127.0.0.1:PORT, or just "
                 "PORT", spec, host);
        return -1;
    }
    return 0;
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
        return (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    }
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
    return IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
}

/* "ADDR:PORT" of a bound socket into buf. */
static void describe(int fd, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a4->sin_addr, ip, sizeof ip);
            port = ntohs(a4->sin_port);
        } else {
            struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a6->sin6_addr, ip, sizeof ip);
            port = ntohs(a6->sin6_port);
            snprintf(buf, n, "[%s]:%u", ip, port);
            return;
        }
    }
    snprintf(buf, n, "%s:%u", ip, port);
}

/* ---- answers ---- */

/* Queue a response: body (copied unless persistent), status, type, and
 * for 405 the Allow header. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, const char *body, size_t n,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        n, (void *)(uintptr_t)body, mode);
    if (!r)
        return MHD_NO;                  /* MHD answers 500 or closes */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status,
                                  const char *msg)
{
    return reply(c, status, "text/plain; charset=utf-8", msg, strlen(msg),
                 MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result serve_metrics(struct MHD_Connection *c)
{
    lua_State *L = cli_observe_state();
    if (!L)
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "metrics: not available\n");
    enum MHD_Result ret;
    if (!cli_observe_fn(L, "metrics")) {
        ret = reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                         "metrics: not available\n");
    } else if (lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
        const char *m = lua_tostring(L, -1);
        char buf[512];
        snprintf(buf, sizeof buf, "metrics: %s\n", m ? m : "no text");
        ret = reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, buf);
    } else {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        ret = reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; "
                    "charset=utf-8", s, n, MHD_RESPMEM_MUST_COPY);
    }
    cli_observe_release();
    return ret;
}

/* /stats.json and /dlq.json: build(L, b) on the observer state. */
static enum MHD_Result serve_json(struct MHD_Connection *c, const char *what,
                                  int (*build)(lua_State *, struct cli_jbuf *))
{
    struct cli_jbuf b = { 0 };
    enum MHD_Result ret;
    lua_State *L = cli_observe_state();
    int rc = L ? build(L, &b) : -1;
    if (L)
        cli_observe_release();
    if (rc != 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s: %s\n", what,
                 b.oom ? "out of memory" : b.p ? b.p : "not available");
        ret = reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, buf);
    } else {
        ret = reply(c, MHD_HTTP_OK, "application/json", b.p, b.len,
                    MHD_RESPMEM_MUST_COPY);
    }
    free(b.p);
    return ret;
}

/* /history.json[?since=T]: no Lua state needed (cli_history.c copies
 * under its own mutex). */
static enum MHD_Result serve_history(struct MHD_Connection *c)
{
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                "since");
    double since = 0;
    if (q) {
        char *end;
        errno = 0;
        since = strtod(q, &end);
        if (!*q || *end || errno || !(since >= 0)) {
            char buf[256];
            snprintf(buf, sizeof buf, "bad request: since=%.60s: expected "
                     "a wall-clock time in seconds (a \"t\" of "
                     "/history.json)\n", q);
            return reply_text(c, MHD_HTTP_BAD_REQUEST, buf);
        }
    }
    struct cli_jbuf b = { 0 };
    enum MHD_Result ret;
    if (cli_history_json(&b, since) != 0)
        ret = reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                         "history.json: out of memory\n");
    else
        ret = reply(c, MHD_HTTP_OK, "application/json", b.p, b.len,
                    MHD_RESPMEM_MUST_COPY);
    free(b.p);
    return ret;
}

/* /tap?stage=NAME: a Server-Sent Events stream (cli_tap.c), exempt from
 * the whole-request deadline and MHD's idle timeout while it lasts. */
static enum MHD_Result serve_tap(struct MHD_Connection *c)
{
    const char *label = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND,
                                                    "stage");
    struct MHD_Response *r = NULL;
    char msg[384];
    int status = cli_tap_start(c, label, &r, msg, sizeof msg);
    if (status != MHD_HTTP_OK)
        return reply_text(c, (unsigned)status, msg);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);            /* the connection holds it now */
    if (ret == MHD_YES) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (ci && ci->socket_context)
            ((struct conn *)ci->socket_context)->stream = true;
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0U);
    }
    return ret;
}

/* Whether a request naming host (its Host header) may be answered: an IP
 * address, localhost, or a name given with --http-host.  Any other name
 * is what a DNS-rebinding page would send to reach a loopback endpoint
 * from the operator's browser: refused. */
static bool host_allowed(const char *host)
{
    char name[256];
    const char *end;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end)
            return false;
        host++;
    } else {
        end = strrchr(host, ':');
        if (!end)
            end = host + strlen(host);
    }
    size_t n = (size_t)(end - host);
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, host, n);
    name[n] = '\0';
    unsigned char addr[16];
    if (inet_pton(AF_INET, name, addr) == 1 ||
        inet_pton(AF_INET6, name, addr) == 1 ||
        strcasecmp(name, "localhost") == 0)
        return true;
    for (const char *p = cli.o.http_hosts; p && *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && strncasecmp(p, name, n) == 0)
            return true;
        p += k + (p[k] == ',');
    }
    return false;
}

/* MHD's request callback: on the observer thread (MHD_run in cli_http_run).
 * MHD calls it once when the headers are in (*con_cls NULL), then once per
 * piece of body, then once more with no data.  Any method but GET and HEAD
 * is refused at the first call, and so is a GET announcing a body (both
 * then close the connection: MHD reads no more); GET and HEAD are answered at
 * the last call, which keeps the connection alive for the next request
 * (an answer queued at the first call would end it). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    static int headers_seen;            /* a marker for *con_cls */
    (void)cls;
    (void)upload_data;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
        strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        char buf[160];
        snprintf(buf, sizeof buf, "method %.40s not allowed: this endpoint "
                 "answers GET and HEAD only\n", method);
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, buf);
    }
    const char *cl = MHD_lookup_connection_value(
        c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (*upload_data_size != 0 || (cl && strcmp(cl, "0") != 0) ||
        MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return reply_text(c, MHD_HTTP_BAD_REQUEST, "bad request: a GET or "
                          "HEAD request carries no body\n");
    if (strcmp(version, MHD_HTTP_VERSION_1_0) != 0 &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_HOST))
        return reply_text(c, MHD_HTTP_BAD_REQUEST, "bad request: an "
                          "HTTP/1.1 request needs a Host header\n");
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_HOST);
    if (host && !host_allowed(host)) {
        char buf[384];
        snprintf(buf, sizeof buf, "forbidden: Host '%.100s' is not this "
                 "endpoint's: it answers for an IP address, localhost, or "
                 "a name given with --http-host\n", host);
        return reply_text(c, MHD_HTTP_FORBIDDEN, buf);
    }
    if (*con_cls == NULL) {
        *con_cls = &headers_seen;
        return MHD_YES;
    }
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8",
                     cli_page_src, (size_t)(cli_page_end - cli_page_src),
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") == 0)
        return serve_metrics(c);
    if (strcmp(url, "/stats.json") == 0)
        return serve_json(c, "stats.json", cli_json_stats);
    if (strcmp(url, "/dlq.json") == 0)
        return serve_json(c, "dlq.json", cli_json_dlq);
    if (strcmp(url, "/history.json") == 0)
        return serve_history(c);
    if (strcmp(url, "/tap") == 0)
        return serve_tap(c);
    char buf[256];
    snprintf(buf, sizeof buf, "not found: %.120s\nendpoints: / (status "
             "page), /metrics, /stats.json, /dlq.json, /history.json, "
             "/tap?stage=NAME\n",
             url);
    return reply_text(c, MHD_HTTP_NOT_FOUND, buf);
}

/* MHD's messages (a malformed request, a failed accept) on stderr, at
 * most LOG_BURST a second: a client sending garbage in a loop must not
 * flood the log.  What was left out is counted and said. */
#define LOG_BURST 5
static void on_log(void *cls, const char *fmt, va_list ap)
{
    static double window;
    static int lines;
    static unsigned long skipped;
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    /* A /tap stream whose client left ends "with an error" (cli_tap.c):
     * the usual end of a tap, nothing to report. */
    static const char tap_end[] = "Closing connection (application error";
    if (strncmp(buf, tap_end, sizeof tap_end - 1) == 0)
        return;
    double now = cli_now();
    if (now - window >= 1.0) {
        if (skipped) {
            char m[64];
            snprintf(m, sizeof m, "http: %lu more messages left out",
                     skipped);
            seda_log_write(SEDA_LOG_WARN, NULL, m);
        }
        window = now;
        lines = 0;
        skipped = 0;
    }
    if (lines >= LOG_BURST) {
        skipped++;
        return;
    }
    lines++;
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n')
        buf[--n] = '\0';
    char m[600];
    snprintf(m, sizeof m, "http: %s", buf);
    seda_log_write(SEDA_LOG_WARN, NULL, m);
}

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            c, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *k = calloc(1, sizeof *k);
        if (!k || !ci) {
            free(k);
            return;                     /* untimed; MHD's idle timeout */
        }
        k->fd = ci->connect_fd;
        k->since = cli_now();
        k->next = conns;
        if (conns)
            conns->prev = k;
        conns = k;
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        struct conn *k = *socket_context;
        if (k->prev)
            k->prev->next = k->next;
        else
            conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
    }
}

/* A request answered (or ended): its connection's clock starts again
 * (a stream's too: the next request is timed). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)con_cls;
    (void)toe;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) {
        struct conn *k = ci->socket_context;
        k->since = cli_now();
        k->stream = false;
    }
}

/* Shut down the connections past their whole-request deadline; MHD
 * then sees them end and closes them. */
static void reap(double now)
{
    for (struct conn *k = conns; k; k = k->next) {
        if (!k->cut && !k->stream && now - k->since > HTTP_TIMEOUT) {
            k->cut = true;
            slow_cut++;
            shutdown(k->fd, SHUT_RDWR);
        }
    }
}

/* ---- the loop's side ---- */

int cli_http_start(const char *spec)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    char err[256];
    if (parse_addr(spec, &ss, &sl, err, sizeof err) != 0) {
        cli_logf(SEDA_LOG_ERROR, "--http %s", err);
        return 1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    if (fd < 0) {
        cli_logf(SEDA_LOG_ERROR, "--http %s: socket: %s", spec,
                 strerror(errno));
        return 1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        cli_logf(SEDA_LOG_ERROR, "--http %s: cannot listen: %s", spec,
                 strerror(errno));
        close(fd);
        return 1;
    }
    /* Suspend and resume: a /tap stream with nothing to send waits out
     * of the poll (cli_tap.c). */
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h.d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL,
                           MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
                           MHD_OPTION_LISTEN_SOCKET, fd,
                           MHD_OPTION_CONNECTION_LIMIT,
                           (unsigned)HTTP_CONN_LIMIT,
                           MHD_OPTION_CONNECTION_TIMEOUT,
                           (unsigned)HTTP_TIMEOUT,
                           MHD_OPTION_NOTIFY_CONNECTION, on_connection,
                           NULL,
                           MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                           MHD_OPTION_END);
    const union MHD_DaemonInfo *di = h.d ? MHD_get_daemon_info(
        h.d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
    if (!di) {
        cli_logf(SEDA_LOG_ERROR, "--http %s: libmicrohttpd could not start",
                 spec);
        if (h.d)
            MHD_stop_daemon(h.d);
        else
            close(fd);
        h.d = NULL;
        return 1;
    }
    h.epfd = di->epoll_fd;
    describe(fd, h.where, sizeof h.where);
    char m[sizeof h.where + 128];
    if (!is_loopback(&ss)) {
        snprintf(m, sizeof m, "--http %s listens beyond loopback: whoever "
                 "reaches it can read the pipeline's stats and errors",
                 h.where);
        seda_log_write(SEDA_LOG_WARN, NULL, m);
    }
    snprintf(m, sizeof m, "http: listening on http://%s/", h.where);
    seda_log_write(SEDA_LOG_INFO, NULL, m);
    return 0;
}

int cli_http_fd(void)
{
    return h.d ? h.epfd : -1;
}

int cli_http_timeout(int timeout_ms)
{
    MHD_UNSIGNED_LONG_LONG t;
    timeout_ms = cli_tap_timeout(timeout_ms);
    if (!h.d || MHD_get_timeout(h.d, &t) != MHD_YES)
        return timeout_ms;
    if (timeout_ms < 0 || t < (MHD_UNSIGNED_LONG_LONG)timeout_ms)
        return t > INT32_MAX ? INT32_MAX : (int)t;
    return timeout_ms;
}

void cli_http_run(void)
{
    if (!h.d || h.in_run)
        return;
    h.in_run = true;
    double now = cli_now();
    cli_tap_pump(now);
    MHD_run(h.d);
    reap(now);
    h.in_run = false;
}

void cli_http_stop(void)
{
    if (!h.d)
        return;
    /* Every /tap stream ends with an "end" event, sent if its client
     * reads within TAP_STOP_MS; none is left suspended (MHD_stop_daemon
     * would panic). */
    cli_tap_end_all("the server stops");
    for (int i = 0; i < TAP_STOP_MS / 10 && cli_tap_count() > 0; i++) {
        struct pollfd p = { .fd = h.epfd, .events = POLLIN };
        MHD_run(h.d);
        if (cli_tap_count() > 0)
            poll(&p, 1, 10);
    }
    cli_tap_end_all("the server stops");
    MHD_stop_daemon(h.d);               /* closes the listening socket */
    h.d = NULL;
    h.epfd = -1;
}
