/* SPDX-License-Identifier: MIT */
/*
 * cli_tap.c -- GET /tap?stage=NAME on seda-lua --http: the envelopes
 * entering a stage, live, as Server-Sent Events (text/event-stream), until
 * the client goes away, the bus stops or the server does.
 *
 *   data: {"stage":"enrich","id":"...","at":...,"attempts":1,
 *          "payload_size":42,"headers":{...},"payload":...}
 *
 * one event per envelope, with the fields of the REPL's tap() entries
 * (payload when the whole payload was copied, else payload_preview: its
 * first 128 bytes), plus "stage";
 *
 *   event: missed
 *   data: {"missed":N}
 *
 * when copies were lost (N so far: a client slower than the traffic loses
 * copies, it never slows the stage); a comment line (": keepalive") every
 * TAP_HEARTBEAT seconds of quiet; and at the end
 *
 *   event: end
 *   data: {"reason":"..."}
 *
 * DESIGN
 *   A stream is an observer tap (seda__l_observe_tap_open: a bounded
 *   ring the stage's admission copies into, closed for us when its bus
 *   shuts down) and a bounded text buffer, answered with an MHD response
 *   of unknown length whose content reader hands out the buffer.  When the
 *   buffer is empty the reader suspends its connection
 *   (MHD_suspend_connection; MHD then neither polls nor times it out);
 *   the observer thread pumps every stream before each MHD_run
 *   (cli_tap_pump): it moves copies from the tap into the buffer (only
 *   while the buffer has room, so a client that does not read leaves the
 *   copies in the tap, whose ring drops and counts them), notices a
 *   client gone (a peek at its socket reads end of file) and resumes the
 *   connections that have something to send.  While streams are open the
 *   observer's poll() wakes every TAP_PUMP_MS; with none, nothing here
 *   runs and a stage pays its tap check only (one relaxed load).
 *
 *   Everything here runs on the observer thread (MHD's callbacks run in
 *   its MHD_run), or on the main thread after that thread stopped
 *   (cli_tap_end_all, MHD_stop_daemon's last callbacks): no lock.  A
 *   suspended connection makes MHD_stop_daemon panic, so the server's
 *   stop ends every stream (resumes it) first.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include <lua.h>

#include "cli.h"
#include "seda.h"
#include "seda_lua_admin.h"

#define TAP_CAPACITY 256        /* copies a tap's ring holds */
#define TAP_BUFFER (64 * 1024)  /* text a stream buffers; past this it
                                   reads no more copies from its tap */
#define TAP_HEARTBEAT 5.0       /* seconds of quiet before a comment */

struct stream {
    struct stream *prev, *next;
    struct MHD_Connection *c;   /* its connection */
    seda_lua_otap *tap;         /* NULL once its bus stopped */
    char label[SEDA_NAME_MAX + 16]; /* the stage as asked for */
    struct cli_jbuf out;        /* text not yet handed to MHD */
    size_t off;                 /* out.p[off..len) is left to hand */
    uint64_t missed;            /* as last said to the client */
    double last;                /* when text was last queued */
    bool suspended;             /* MHD_suspend_connection'd */
    bool ended;                 /* the end is queued: no more pumping */
    bool gone;                  /* the client left: close, send nothing */
};

/* The open streams and their fields: the observer thread's alone (then
 * the main thread's, once that thread is joined): no lock (see DESIGN). */
static struct stream *streams;
static int nstreams;

int cli_tap_count(void)
{
    return nstreams;
}

/* Queue the end: an "end" event saying why. */
static void end_stream(struct stream *s, const char *why)
{
    if (s->ended)
        return;
    char buf[160];
    int n = snprintf(buf, sizeof buf, "event: end\ndata: {\"reason\":\"%s\"}"
                     "\n\n", why);
    cli_json_add(&s->out, buf, (size_t)n);
    s->ended = true;
}

/* MHD's content reader: the buffered text, or (nothing buffered) the end
 * once it is queued, else suspend until the pump has more. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream *s = cls;
    (void)pos;
    if (s->gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t left = s->out.len - s->off;
    if (left > 0) {
        size_t n = left < max ? left : max;
        memcpy(buf, s->out.p + s->off, n);
        s->off += n;
        if (s->off == s->out.len)
            s->off = s->out.len = 0;
        return (ssize_t)n;
    }
    if (s->ended || s->out.oom)
        return MHD_CONTENT_READER_END_OF_STREAM;
    MHD_suspend_connection(s->c);
    s->suspended = true;
    return 0;
}

/* MHD's free callback: the response is gone (client gone, server
 * stopped, or the end sent). */
static void stream_free(void *cls)
{
    struct stream *s = cls;
    seda__l_observe_tap_close(s->tap);
    if (s->prev)
        s->prev->next = s->next;
    else
        streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    nstreams--;
    free(s->out.p);
    free(s);
}

/* Append the SSE event of copy e to s (on the observer state L, which
 * makes the same table the REPL's tap() shows).  A protected call:
 * argument 1 the stream, 2 the copy. */
static int event_of(lua_State *L)
{
    struct stream *s = lua_touserdata(L, 1);
    const seda_tap_entry *e = lua_touserdata(L, 2);
    seda__l_errors_snapshot(L, e, s->label);
    cli_json_add(&s->out, "data: ", 6);
    cli_json_value(&s->out, L, -1);
    cli_json_add(&s->out, "\n\n", 2);
    return 0;
}

/* Move what s's tap holds into its buffer, while there is room. */
static void fill(struct stream *s, lua_State *L)
{
    while (!s->ended && s->out.len < TAP_BUFFER) {
        seda_tap_entry e[32];
        uint64_t missed = s->missed;
        int k = seda__l_observe_tap_read(s->tap, e, 32, &missed);
        if (k < 0) {
            end_stream(s, "the bus stopped");
            return;
        }
        for (int i = 0; i < k; i++) {
            if (L) {
                lua_pushcfunction(L, event_of);
                lua_pushlightuserdata(L, s);
                lua_pushlightuserdata(L, &e[i]);
                if (lua_pcall(L, 2, 0, 0) != LUA_OK)
                    lua_pop(L, 1);      /* out of memory: copy lost */
            }
            seda_tap_entry_free(&e[i]);
        }
        if (missed != s->missed) {
            char buf[80];
            int n = snprintf(buf, sizeof buf, "event: missed\ndata: "
                             "{\"missed\":%llu}\n\n",
                             (unsigned long long)missed);
            cli_json_add(&s->out, buf, (size_t)n);
            s->missed = missed;
        }
        if (k < 32)
            return;
    }
}

/* Whether s's client has gone: its socket reads end of file (an SSE
 * client sends nothing after its request), or fails. */
static bool client_gone(struct stream *s)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        s->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    char b;
    ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                      errno != EINTR);
}

void cli_tap_pump(double now)
{
    if (!streams)
        return;
    lua_State *L = cli_observe_state();
    for (struct stream *s = streams; s; s = s->next) {
        if (!s->ended && s->suspended && client_gone(s)) {
            s->gone = true;
            s->ended = true;
        }
        size_t before = s->out.len;
        fill(s, L);
        if (s->out.len > before)
            s->last = now;
        if (s->out.len == 0 && !s->ended && now - s->last >= TAP_HEARTBEAT) {
            cli_json_add(&s->out, ": keepalive\n\n", 13);
            s->last = now;
        }
        if (s->suspended && (s->out.len > s->off || s->ended ||
                             s->out.oom)) {
            s->suspended = false;
            MHD_resume_connection(s->c);
        }
    }
    if (L)
        cli_observe_release();
}

int cli_tap_timeout(int timeout_ms)
{
    if (!streams)
        return timeout_ms;
    return timeout_ms < 0 || timeout_ms > TAP_PUMP_MS ? TAP_PUMP_MS
                                                      : timeout_ms;
}

void cli_tap_end_all(const char *why)
{
    for (struct stream *s = streams; s; s = s->next) {
        end_stream(s, why);
        if (s->suspended) {
            s->suspended = false;
            MHD_resume_connection(s->c);
        }
    }
}

int cli_tap_start(struct MHD_Connection *c, const char *label,
                  struct MHD_Response **out, char *msg, size_t msglen)
{
    if (!label || !*label) {
        snprintf(msg, msglen, "bad request: /tap needs ?stage=NAME (a "
                 "stage as /stats.json names it)\n");
        return MHD_HTTP_BAD_REQUEST;
    }
    if (nstreams >= HTTP_TAP_LIMIT) {
        snprintf(msg, msglen, "tap: %d taps are open already, the most "
                 "this endpoint serves at once; close one\n",
                 HTTP_TAP_LIMIT);
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    struct stream *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, msglen, "tap: out of memory\n");
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    int rc = seda__l_observe_tap_open(label, TAP_CAPACITY, &s->tap);
    if (rc != 0) {
        free(s);
        if (rc == SEDA_ENOSTAGE) {
            snprintf(msg, msglen, "not found: no live bus has a stage "
                     "'%.100s' (stages as /stats.json names them: NAME, or "
                     "NAME#N for the N-th bus with one)\n", label);
            return MHD_HTTP_NOT_FOUND;
        }
        snprintf(msg, msglen, "tap: %s\n", seda_strerror(rc));
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    snprintf(s->label, sizeof s->label, "%s", label);
    s->c = c;
    s->last = cli_now();
    /* A first comment: the client sees the stream open at once. */
    cli_json_add(&s->out, ": tap of ", 9);
    cli_json_add(&s->out, s->label, strlen(s->label));
    cli_json_add(&s->out, "\n\n", 2);
    *out = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                             stream_read, s, stream_free);
    if (!*out) {
        seda__l_observe_tap_close(s->tap);
        free(s->out.p);
        free(s);
        snprintf(msg, msglen, "tap: out of memory\n");
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    /* From here the response owns s: destroying it calls stream_free. */
    s->next = streams;
    if (streams)
        streams->prev = s;
    streams = s;
    nstreams++;
    return MHD_HTTP_OK;
}
