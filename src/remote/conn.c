/* SPDX-License-Identifier: MIT */
/*
 * conn.c -- one NATS connection per (bus, url), shared by the bus's remote
 * stages: connecting, the inbox subscription everything arrives on, its
 * dispatch, and closing.
 *
 * DESIGN
 *   Everything this process is sent arrives on one subscription,
 *   "<inbox>.>": JetStream's acknowledgements of our publishes
 *   ("<inbox>.<sid>.a.<n>"), the statuses that end our pull requests
 *   ("<inbox>.<sid>.p.<n>"), the messages those requests deliver (which
 *   keep their own subject; their reply subject, $JS.ACK.<stream>.
 *   <consumer>..., names the consumer and so the stage), consumer info
 *   replies, completions for itineraries this process started
 *   ("<inbox>.c") and the no-responders answers to completions we sent
 *   to a process that is gone.  So a connection costs cnats's own threads
 *   plus one delivery thread, however many stages use it, and none of
 *   them spins: the subscription's timeout (100 ms) is the tick that
 *   bounds waits for replies that never come.  Writes are coalesced by
 *   cnats's flusher (up to about a millisecond: far fewer system calls
 *   for a stream of publishes and acks), unless the stages asked for
 *   low_latency (each message written at once); a bus has a connection
 *   per url and setting.  Messages for consumers
 *   that arrive together are gathered and handed on when the
 *   subscription has nothing more queued (on_flush).
 *
 *   Clients (the stages) are attached by sid.  Dispatch marks a client
 *   busy while it calls it; detach marks it gone and waits until it is
 *   not busy, so no call reaches a stage after it was closed.  Closing
 *   the connection flushes what is buffered (the naks of a shutdown),
 *   closes it and waits, bounded, until the subscription's completion
 *   callback and cnats's closed callback ran: then no cnats thread holds
 *   a pointer into this struct and it can be freed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote_int.h"

#define TICK_MS 100

/* A server that stops answering: cnats pings every PING_MS and declares
 * the connection stale when PINGS_OUT pings are unanswered at the next
 * one (so after 4 to 6 s of silence).  The ping runs under the lock a
 * writer holds while it writes, and a write to a peer gone silent
 * blocks once the socket's send buffer is full (TCP retransmits for
 * minutes): the write deadline bounds every write, and a write past it
 * closes the socket, which reconnects.  So a connection whose server
 * went silent is given up within 11 s (PING_MS * (PINGS_OUT + 1) +
 * WRITE_DEADLINE_MS; docs/remote.md), and the client moves on to another
 * server of urls. */
#define PING_MS 2000
#define PINGS_OUT 2
#define WRITE_DEADLINE_MS 5000

/* ---- registry ---- */

/* Guards g_conns, g_atexit and every rconn's refs and next. */
static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rconn *g_conns;
static bool g_atexit;           /* lib_atexit registered */

/* At exit, with every connection closed: cnats's own threads (timers,
 * callbacks) are stopped and joined.  Left running, they race with
 * OpenSSL's exit-time cleanup, which frees locks they have used (a
 * ThreadSanitizer report at the exit of a process that used TLS).
 * Registered after the first connection attempt, so after OpenSSL's:
 * handlers run in reverse order, this one first.  A process leaving
 * with connections open skips it (they may still be in use). */
static void lib_atexit(void)
{
    pthread_mutex_lock(&g_reg_mu);
    bool none = g_conns == NULL;
    pthread_mutex_unlock(&g_reg_mu);
    if (none)
        (void)nats_CloseAndWait(2000);
}

/* ---- reply subjects and statuses ---- */

char *seda__rconn_reply(struct rconn *c, int sid, char kind, uint64_t n,
                        bool with_n, char *buf, size_t len)
{
    if (with_n)
        snprintf(buf, len, "%s.%d.%c.%llu", c->inbox, sid, kind,
                 (unsigned long long)n);
    else
        snprintf(buf, len, "%s.%d.%c", c->inbox, sid, kind);
    return buf;
}

int seda__rjs_status(natsMsg *m, uint64_t *pending)
{
    const char *st = NULL, *pm = NULL;
    *pending = 0;
    if (natsMsgHeader_Get(m, "Status", &st) != NATS_OK || !st)
        return 0;
    if (natsMsgHeader_Get(m, "Nats-Pending-Messages", &pm) == NATS_OK && pm)
        *pending = strtoull(pm, NULL, 10);
    return atoi(st);
}

/* Split s at '.' into at most max tokens; returns how many. */
static int split(const char *s, const char **tok, size_t *len, int max)
{
    int n = 0;
    while (n < max) {
        const char *dot = strchr(s, '.');
        tok[n] = s;
        len[n] = dot ? (size_t)(dot - s) : strlen(s);
        n++;
        if (!dot)
            return n;
        s = dot + 1;
    }
    return n + 1;                       /* more than max */
}

static bool num(const char *s, size_t n, uint64_t *v)
{
    if (n == 0 || n > 20)
        return false;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        *v = *v * 10 + (uint64_t)(s[i] - '0');
    }
    return true;
}

bool seda__rjs_parse_ack(const char *reply, struct rjs_meta *m)
{
    if (!reply || strncmp(reply, "$JS.ACK.", 8) != 0)
        return false;
    const char *tok[13];
    size_t len[13];
    int n = split(reply + 8, tok, len, 12);
    /* 7 tokens: stream consumer delivered sseq cseq ts pending; 10 or
     * more: domain acchash, then those, then a random token. */
    int base = n == 7 ? 0 : n >= 10 && n <= 12 ? 2 : -1;
    uint64_t cseq, ts;
    if (base < 0 || !num(tok[base + 2], len[base + 2], &m->delivered) ||
        !num(tok[base + 3], len[base + 3], &m->sseq) ||
        !num(tok[base + 4], len[base + 4], &cseq) ||
        !num(tok[base + 5], len[base + 5], &ts) ||
        !num(tok[base + 6], len[base + 6], &m->pending))
        return false;
    m->stream = tok[base];
    m->stream_len = len[base];
    m->consumer = tok[base + 1];
    m->consumer_len = len[base + 1];
    return m->stream_len > 0 && m->consumer_len > 0;
}

/* ---- credentials ---- */

void seda__rconn_redact(const char *url, char *buf, size_t len)
{
    /* Each of the comma-separated urls: "scheme://user:pass@host" keeps
     * its scheme and host; the user info becomes "***". */
    size_t o = 0;
    if (len == 0)
        return;
    for (const char *p = url; *p && o + 1 < len;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *sep = memmem(p, n, "://", 3);
        const char *host = sep ? sep + 3 : p;
        size_t hn = n - (size_t)(host - p);
        const char *slash = memchr(host, '/', hn);
        size_t auth = slash ? (size_t)(slash - host) : hn;
        const char *at = NULL;
        for (size_t i = 0; i < auth; i++)
            if (host[i] == '@')
                at = host + i;          /* the last '@' ends the user info */
        int k = at ? snprintf(buf + o, len - o, "%.*s***%.*s",
                              (int)(host - p), p,
                              (int)(n - (size_t)(at - p)), at)
                   : snprintf(buf + o, len - o, "%.*s", (int)n, p);
        if (k < 0)
            break;
        o += (size_t)k < len - o ? (size_t)k : len - o - 1;
        if (!end)
            break;
        if (o + 1 < len)
            buf[o++] = ',';
        p = end + 1;
    }
    buf[o] = '\0';
}

/* ---- reports ---- */

/* One line a second per process for connection-level problems (they come
 * from cnats threads in bursts: a flapping server). */
static pthread_mutex_t g_report_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_report_at;
static unsigned long g_report_skipped;

void seda__rconn_report(struct rconn *c, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int64_t now = seda__now_ns();
    pthread_mutex_lock(&g_report_mu);
    bool print = now - g_report_at >= 1000000000;
    unsigned long skipped = print ? g_report_skipped : 0;
    if (print) {
        g_report_at = now;
        g_report_skipped = 0;
    } else {
        g_report_skipped++;
    }
    pthread_mutex_unlock(&g_report_mu);
    if (print) {
        char line[1024];
        if (skipped)
            snprintf(line, sizeof line, "remote %s: %s (%lu more since the "
                     "last line were not shown)", c->shown, msg, skipped);
        else
            snprintf(line, sizeof line, "remote %s: %s", c->shown, msg);
        seda_log_write(SEDA_LOG_WARN, NULL, line);
    }
}

/* ---- state ---- */

bool seda__rconn_up(struct rconn *c)
{
    return natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
}

const char *seda__rconn_state(struct rconn *c)
{
    switch (natsConnection_Status(c->nc)) {
    case NATS_CONN_STATUS_CONNECTED: return "connected";
    case NATS_CONN_STATUS_CONNECTING: return "connecting";
    case NATS_CONN_STATUS_RECONNECTING: return "reconnecting";
    case NATS_CONN_STATUS_DISCONNECTED: return "disconnected";
    case NATS_CONN_STATUS_CLOSED: return "closed";
    default: return "draining";
    }
}

bool seda__rconn_wait_up(struct rconn *c, int64_t deadline_ns)
{
    /* Woken by the reconnected callback; polled too (a tenth of a second
     * at most), as the status changes inside cnats, not under c->mu. */
    while (!seda__rconn_up(c)) {
        int64_t now = seda__now_ns();
        if (now >= deadline_ns || seda__rconn_closed(c))
            return false;
        int64_t until = now + 100000000LL < deadline_ns
                            ? now + 100000000LL : deadline_ns;
        seda__mutex_lock(&c->mu);
        if (!seda__rconn_up(c))
            seda__cond_wait(&c->cv, &c->mu, until);
        seda__mutex_unlock(&c->mu);
    }
    return true;
}

bool seda__rconn_closed(struct rconn *c)
{
    return natsConnection_Status(c->nc) == NATS_CONN_STATUS_CLOSED;
}

int seda__rconn_send(struct rconn *c, const char *subject, const char *reply,
                     const void *data, size_t len)
{
    if (!seda__rconn_up(c))
        return SEDA_EUNAVAIL;
    natsStatus s = reply
        ? natsConnection_PublishRequest(c->nc, subject, reply, data, (int)len)
        : natsConnection_Publish(c->nc, subject, data, (int)len);
    return s == NATS_OK ? 0 : SEDA_EUNAVAIL;
}

/* ---- clients ---- */

int seda__rconn_attach(struct rconn *c, const struct rclient *cl)
{
    seda__mutex_lock(&c->mu);
    if (c->nclients == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4;
        struct rclient *a = seda__realloc(c->clients, sizeof *a * (size_t)cap);
        if (a)
            c->clients = a;
        int *b = a ? seda__realloc(c->busy, sizeof *b * (size_t)cap) : NULL;
        if (b)
            c->busy = b;
        bool *g = b ? seda__realloc(c->gone, sizeof *g * (size_t)cap) : NULL;
        if (g)
            c->gone = g;
        if (!g) {
            seda__mutex_unlock(&c->mu);
            return SEDA_ENOMEM;
        }
        c->cap = cap;
    }
    int sid = c->nclients++;
    c->clients[sid] = *cl;
    c->busy[sid] = 0;
    c->gone[sid] = false;
    seda__mutex_unlock(&c->mu);
    return sid;
}

void seda__rconn_detach(struct rconn *c, int sid)
{
    seda__mutex_lock(&c->mu);
    c->gone[sid] = true;
    while (c->busy[sid] > 0)
        seda__cond_wait(&c->cv, &c->mu, INT64_MAX);
    seda__mutex_unlock(&c->mu);
}

/* Enter client sid (copying it out); false when it is gone. */
static bool enter(struct rconn *c, int sid, struct rclient *out)
{
    seda__mutex_lock(&c->mu);
    bool ok = sid >= 0 && sid < c->nclients && !c->gone[sid];
    if (ok) {
        c->busy[sid]++;
        *out = c->clients[sid];
    }
    seda__mutex_unlock(&c->mu);
    return ok;
}

static void leave(struct rconn *c, int sid)
{
    seda__mutex_lock(&c->mu);
    if (--c->busy[sid] == 0 && c->gone[sid])
        pthread_cond_broadcast(&c->cv);
    seda__mutex_unlock(&c->mu);
}

static int nclients(struct rconn *c)
{
    seda__mutex_lock(&c->mu);
    int n = c->nclients;
    seda__mutex_unlock(&c->mu);
    return n;
}

/* Call fn(client, arg) for every client attached now, each entered
 * meanwhile (it cannot detach until fn returns).  No lock held. */
static void each_client(struct rconn *c,
                        void (*fn)(const struct rclient *cl, void *arg),
                        void *arg)
{
    int n = nclients(c);
    for (int sid = 0; sid < n; sid++) {
        struct rclient cl;
        if (!enter(c, sid, &cl))
            continue;
        fn(&cl, arg);
        leave(c, sid);
    }
}

static void client_flush(const struct rclient *cl, void *arg)
{
    (void)arg;
    if (cl->on_flush)
        cl->on_flush(cl->ud);
}

static void client_tick(const struct rclient *cl, void *arg)
{
    client_flush(cl, NULL);
    if (cl->on_tick)
        cl->on_tick(cl->ud, *(const int64_t *)arg);
}

static void client_reconnect(const struct rclient *cl, void *arg)
{
    (void)arg;
    if (cl->on_reconnect)
        cl->on_reconnect(cl->ud);
}

static void tick_all(struct rconn *c, int64_t now)
{
    c->last_tick = now;
    each_client(c, client_tick, &now);
}

/* Nothing more waits for the dispatch thread: let gathered work go. */
static void flush_all(struct rconn *c)
{
    each_client(c, client_flush, NULL);
}

/* ---- dispatch ---- */

/* A message on "<inbox>.<sid>.<kind>[.<rest>]". */
static void on_reply(struct rconn *c, const char *tail, natsMsg *m)
{
    char *end;
    long sid = strtol(tail, &end, 10);
    if (end == tail || *end != '.' || !end[1] || sid < 0 || sid > INT32_MAX)
        return;
    char kind = end[1];
    const char *rest = end[2] == '.' ? end + 3 : "";
    struct rclient cl;
    if (!enter(c, (int)sid, &cl))
        return;
    if (cl.on_reply)
        cl.on_reply(cl.ud, kind, rest, m);
    leave(c, (int)sid);
}

/* A JetStream message: to the client consuming its consumer. */
static bool on_js(struct rconn *c, natsMsg *m, const struct rjs_meta *meta)
{
    int n = nclients(c);
    for (int sid = 0; sid < n; sid++) {
        struct rclient cl;
        if (!enter(c, sid, &cl))
            continue;
        bool mine = cl.on_js && cl.consumer && cl.stream &&
                    strlen(cl.stream) == meta->stream_len &&
                    memcmp(cl.stream, meta->stream, meta->stream_len) == 0 &&
                    strlen(cl.consumer) == meta->consumer_len &&
                    memcmp(cl.consumer, meta->consumer,
                           meta->consumer_len) == 0;
        if (mine)
            cl.on_js(cl.ud, m, meta);
        leave(c, sid);
        if (mine)
            return true;
    }
    return false;
}

static void dispatch(natsConnection *nc, natsSubscription *sub, natsMsg *m,
                     void *closure)
{
    (void)nc;
    struct rconn *c = closure;
    int64_t now = seda__now_ns();
    if (m) {
        const char *subj = natsMsg_GetSubject(m);
        struct rjs_meta meta;
        if (seda__rjs_parse_ack(natsMsg_GetReply(m), &meta)) {
            if (on_js(c, m, &meta))
                m = NULL;               /* taken */
            int msgs = 0, bytes = 0;
            natsSubscription_GetPending(sub, &msgs, &bytes);
            if (msgs == 0)
                flush_all(c);
        } else if (strncmp(subj, c->inbox, c->inbox_len) == 0 &&
                   subj[c->inbox_len] == '.') {
            const char *tail = subj + c->inbox_len + 1;
            if (tail[0] == 'c' && (tail[1] == '.' || !tail[1]))
                seda__rcomp_on_msg(c, m, tail[1] ? tail + 2 : "");
            else
                on_reply(c, tail, m);
        }
        natsMsg_Destroy(m);
        if (now - c->last_tick < TICK_MS * 1000000LL)
            return;
    }
    tick_all(c, now);
}

static void on_sub_done(void *closure)
{
    struct rconn *c = closure;
    seda__mutex_lock(&c->mu);
    c->sub_done = true;
    pthread_cond_broadcast(&c->cv);
    seda__mutex_unlock(&c->mu);
}

/* ---- connection events (cnats's callback thread) ---- */

/* The server connected to, redacted, into c->server. */
static void note_server(struct rconn *c)
{
    char url[256], shown[256];
    if (natsConnection_GetConnectedUrl(c->nc, url, sizeof url) != NATS_OK ||
        !url[0])
        return;
    seda__rconn_redact(url, shown, sizeof shown);
    seda__mutex_lock(&c->mu);
    snprintf(c->server, sizeof c->server, "%s", shown);
    seda__mutex_unlock(&c->mu);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    struct rconn *c = closure;
    atomic_fetch_add_explicit(&c->disconnects, 1, memory_order_relaxed);
    if (atomic_load_explicit(&c->closing, memory_order_acquire) ||
        c->lost_at)
        return;
    c->lost_at = seda__now_ns();
    const char *why = NULL;
    natsStatus s = natsConnection_GetLastError(nc, &why);
    char server[256], line[900];
    seda__mutex_lock(&c->mu);
    snprintf(server, sizeof server, "%s", c->server);
    seda__mutex_unlock(&c->mu);
    snprintf(line, sizeof line, "remote %s: the connection to %s was lost "
             "(%s%s%s); reconnecting to the servers of the url (publishing "
             "answers unavailable meanwhile)", c->shown,
             server[0] ? server : "the server",
             s == NATS_OK ? "closed" : natsStatus_GetText(s),
             why && *why ? ": " : "", why && *why ? why : "");
    seda_log_write(SEDA_LOG_WARN, NULL, line);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    (void)nc;
    struct rconn *c = closure;
    atomic_fetch_add_explicit(&c->reconnects, 1, memory_order_relaxed);
    note_server(c);
    char server[256], line[900];
    seda__mutex_lock(&c->mu);
    snprintf(server, sizeof server, "%s", c->server);
    seda__mutex_unlock(&c->mu);
    double away = c->lost_at ? (double)(seda__now_ns() - c->lost_at) / 1e9
                             : 0.0;
    c->lost_at = 0;
    snprintf(line, sizeof line, "remote %s: connected again, to %s, after "
             "%.1f s (messages awaiting their acknowledgement are sent "
             "again)", c->shown, server, away);
    seda_log_write(SEDA_LOG_INFO, NULL, line);
    /* Wake the hops waiting for the connection (seda__rconn_wait_up). */
    seda__mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    seda__mutex_unlock(&c->mu);
    each_client(c, client_reconnect, NULL);
}

static void on_closed(natsConnection *nc, void *closure)
{
    (void)nc;
    struct rconn *c = closure;
    seda__mutex_lock(&c->mu);
    c->closed_done = true;
    pthread_cond_broadcast(&c->cv);
    seda__mutex_unlock(&c->mu);
}

static void on_async_error(natsConnection *nc, natsSubscription *sub,
                           natsStatus err, void *closure)
{
    (void)nc;
    (void)sub;
    struct rconn *c = closure;
    atomic_fetch_add_explicit(&c->async_errors, 1, memory_order_relaxed);
    seda__rconn_report(c, "%s", natsStatus_GetText(err));
}

/* ---- opening and closing ---- */

static void conn_free(struct rconn *c)
{
    if (c->sub)
        natsSubscription_Destroy(c->sub);
    if (c->js)
        jsCtx_Destroy(c->js);
    if (c->nc)
        natsConnection_Destroy(c->nc);
    seda__rcomp_free(c);
    pthread_cond_destroy(&c->cv);
    seda__mutex_destroy(&c->mu);
    seda__free(c->clients);
    seda__free(c->busy);
    seda__free(c->gone);
    seda__free(c->url);
    seda__free(c->authkey);
    seda__free(c);
}

/* The rauth fields joined (NULL fields as empty), into an allocation;
 * NULL out of memory. */
static char *auth_key(const struct rauth *a)
{
    const char *f[] = { a->ca, a->cert, a->key, a->creds, a->user,
                        a->password, a->token };
    size_t n = 1;
    for (size_t i = 0; i < 7; i++)
        n += (f[i] ? strlen(f[i]) : 0) + 1;
    char *k = seda__malloc(n), *p = k;
    for (size_t i = 0; k && i < 7; i++) {
        size_t l = f[i] ? strlen(f[i]) : 0;
        memcpy(p, f[i] ? f[i] : "", l);
        p[l] = '\x1f';
        p += l + 1;
    }
    if (k)
        *p = '\0';
    return k;
}

/* TLS and authentication on o (see struct rauth). */
static natsStatus set_auth(natsOptions *o, const struct rauth *a)
{
    natsStatus s = NATS_OK;
    if (a->ca || a->cert || a->key)
        s = natsOptions_SetSecure(o, true);
    if (s == NATS_OK && a->ca)
        s = natsOptions_LoadCATrustedCertificates(o, a->ca);
    if (s == NATS_OK && (a->cert || a->key))
        s = natsOptions_LoadCertificatesChain(o, a->cert, a->key);
    if (s == NATS_OK && a->creds)
        s = natsOptions_SetUserCredentialsFromFiles(o, a->creds, NULL);
    if (s == NATS_OK && (a->user || a->password))
        s = natsOptions_SetUserInfo(o, a->user, a->password);
    if (s == NATS_OK && a->token)
        s = natsOptions_SetToken(o, a->token);
    return s;
}

/* Wait (bounded) until *flag is set under c->mu. */
static bool wait_flag(struct rconn *c, bool *flag, double secs)
{
    int64_t deadline = seda__deadline(secs);
    seda__mutex_lock(&c->mu);
    while (!*flag && seda__cond_wait(&c->cv, &c->mu, deadline) == 0) {
    }
    bool ok = *flag;
    seda__mutex_unlock(&c->mu);
    return ok;
}

#define NATS_SAY(what) \
        snprintf(err, errlen, "cannot %s %s: %s%s%s", what, c->shown, \
                 natsStatus_GetText(s), nats_GetLastError(NULL) ? ": " : "", \
                 nats_GetLastError(NULL) ? nats_GetLastError(NULL) : "")
#define NATS_FAIL(what) do { \
        NATS_SAY(what); \
        goto fail; \
    } while (0)

/* A refused connection, said with what to check (err gets cnats's
 * reason and a hint). */
static void connect_hint(natsStatus s, const struct rauth *a, char *err,
                         size_t errlen)
{
    size_t n = strlen(err);
    const char *hint =
        s == NATS_CONNECTION_AUTH_FAILED
            ? " -- the server refused the credentials (user and password, "
              "token or creds)"
        : s == NATS_SSL_ERROR
            ? " -- TLS failed (tls.ca must name the CA that signed the "
              "server's certificate)"
        : (a->ca || a->cert) && !a->cert
            ? " -- the server closed the connection (one that requires "
              "client certificates needs tls.cert and tls.key)"
            : "";
    if (n < errlen)
        snprintf(err + n, errlen - n, "%s", hint);
}

/* One url, or several joined by commas: cnats's server list. */
static natsStatus set_servers(natsOptions *o, const char *url)
{
    if (!strchr(url, ','))
        return natsOptions_SetURL(o, url);
    char *copy = seda__strdup(url);
    int n = 1;
    for (const char *p = url; *p; p++)
        n += *p == ',';
    const char **list = copy ? seda__calloc((size_t)n, sizeof *list) : NULL;
    natsStatus s = NATS_NO_MEMORY;
    if (list) {
        int k = 0;
        for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && k < n;
             t = strtok_r(NULL, ",", &save))
            list[k++] = t;
        s = natsOptions_SetServers(o, list, k);
    }
    seda__free(list);
    seda__free(copy);
    return s;
}

natsStatus seda__rconn_options(natsOptions *o, const char *url,
                               double timeout, const struct rauth *auth)
{
    int64_t ms = timeout >= 1e6 ? INT64_C(1000000000)
                                : (int64_t)(timeout * 1e3);
    natsStatus s;
    if ((s = set_servers(o, url)) != NATS_OK ||
        (s = natsOptions_SetTimeout(o, ms > 0 ? ms : 1)) != NATS_OK ||
        (s = natsOptions_SetAllowReconnect(o, true)) != NATS_OK ||
        (s = natsOptions_SetMaxReconnect(o, -1)) != NATS_OK ||
        (s = natsOptions_SetReconnectWait(o, 250)) != NATS_OK ||
        (s = natsOptions_SetReconnectJitter(o, 100, 0)) != NATS_OK ||
        (s = natsOptions_SetPingInterval(o, PING_MS)) != NATS_OK ||
        (s = natsOptions_SetMaxPingsOut(o, PINGS_OUT)) != NATS_OK ||
        (s = natsOptions_SetWriteDeadline(o, WRITE_DEADLINE_MS)) != NATS_OK)
        return s;
    return auth ? set_auth(o, auth) : NATS_OK;
}

static int conn_open(const void *bus, const char *url, double timeout,
                     bool low_latency, const struct rauth *auth,
                     struct rconn **out, char *err, size_t errlen)
{
    struct rconn *c = seda__calloc(1, sizeof *c);
    natsOptions *o = NULL;
    natsInbox *ib = NULL;
    natsStatus s = NATS_NO_MEMORY;
    if (!c || !(c->url = seda__strdup(url)) ||
        !(c->authkey = auth_key(auth)) ||
        !(c->comp = seda__rcomp_new())) {
        snprintf(err, errlen, "out of memory");
        if (c) {
            seda__free(c->url);
            seda__free(c->authkey);
            seda__free(c);
        }
        return SEDA_ENOMEM;
    }
    seda__rconn_redact(url, c->shown, sizeof c->shown);
    seda__mutex_init(&c->mu);
    seda__cond_init(&c->cv);
    c->bus = bus;
    c->low_latency = low_latency;
    atomic_init(&c->disconnects, 0);
    atomic_init(&c->reconnects, 0);
    atomic_init(&c->async_errors, 0);
    atomic_init(&c->completions_refused, 0);
    atomic_init(&c->closing, false);
    char name[64];
    snprintf(name, sizeof name, "seda-lua pid %ld", (long)getpid());
    int64_t ms = timeout >= 1e6 ? INT64_C(1000000000) : (int64_t)(timeout * 1e3);
    if ((s = natsOptions_Create(&o)) != NATS_OK ||
        (s = seda__rconn_options(o, url, timeout, NULL)) != NATS_OK ||
        (s = natsOptions_SetName(o, name)) != NATS_OK ||
        (s = natsOptions_SetSendAsap(o, low_latency)) != NATS_OK ||
        (s = natsOptions_SetDisconnectedCB(o, on_disconnected, c)) !=
            NATS_OK ||
        (s = natsOptions_SetReconnectedCB(o, on_reconnected, c)) !=
            NATS_OK ||
        (s = natsOptions_SetClosedCB(o, on_closed, c)) != NATS_OK ||
        (s = natsOptions_SetErrorHandler(o, on_async_error, c)) != NATS_OK)
        NATS_FAIL("set up a connection to");
    if ((s = set_auth(o, auth)) != NATS_OK)
        NATS_FAIL("set up TLS or the credentials for");
    if ((s = natsConnection_Connect(&c->nc, o)) != NATS_OK) {
        NATS_SAY("connect to");
        connect_hint(s, auth, err, errlen);
        goto fail;
    }
    note_server(c);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    if ((s = natsConnection_JetStream(&c->js, c->nc, &jo)) != NATS_OK)
        NATS_FAIL("use JetStream on");
    if ((s = natsInbox_Create(&ib)) != NATS_OK)
        NATS_FAIL("make an inbox on");
    snprintf(c->inbox, sizeof c->inbox, "%s", (const char *)ib);
    natsInbox_Destroy(ib);
    c->inbox_len = strlen(c->inbox);
    const char *dot = strrchr(c->inbox, '.');
    snprintf(c->token, sizeof c->token, "%s", dot ? dot + 1 : c->inbox);
    char all[80];
    snprintf(all, sizeof all, "%s.>", c->inbox);
    c->last_tick = seda__now_ns();
    if ((s = natsConnection_SubscribeTimeout(&c->sub, c->nc, all, TICK_MS,
                                             dispatch, c)) != NATS_OK ||
        (s = natsSubscription_SetOnCompleteCB(c->sub, on_sub_done, c)) !=
            NATS_OK ||
        (s = natsSubscription_SetPendingLimits(c->sub, 1 << 20,
                                               512 << 20)) != NATS_OK ||
        (s = natsConnection_FlushTimeout(c->nc, ms > 0 ? ms : 1)) !=
            NATS_OK)
        NATS_FAIL("subscribe on");
    natsOptions_Destroy(o);
    *out = c;
    return 0;
fail:
    natsOptions_Destroy(o);
    if (c->nc) {
        /* Connected once: let the closed callback run before freeing. */
        atomic_store_explicit(&c->closing, true, memory_order_release);
        natsConnection_Close(c->nc);
        wait_flag(c, &c->closed_done, 5.0);
        if (c->sub)
            wait_flag(c, &c->sub_done, 5.0);
    }
    conn_free(c);
    return s == NATS_NO_MEMORY ? SEDA_ENOMEM : SEDA_EUNAVAIL;
}

int seda__rconn_get(const void *bus, const char *url, double connect_timeout,
                    bool low_latency, const struct rauth *auth,
                    struct rconn **out, char *err, size_t errlen)
{
    char *key = auth_key(auth);
    if (!key) {
        snprintf(err, errlen, "out of memory");
        return SEDA_ENOMEM;
    }
    pthread_mutex_lock(&g_reg_mu);
    for (struct rconn *c = g_conns; c; c = c->next) {
        if (c->bus == bus && strcmp(c->url, url) == 0 &&
            c->low_latency == low_latency && strcmp(c->authkey, key) == 0) {
            seda__free(key);
            c->refs++;
            pthread_mutex_unlock(&g_reg_mu);
            *out = c;
            return 0;
        }
    }
    /* Opened under the registry lock: two stages declared at once share
     * one connection.  Declaring is rare and already blocks. */
    struct rconn *c;
    seda__free(key);
    int rc = conn_open(bus, url, connect_timeout, low_latency, auth, &c, err,
                       errlen);
    if (rc == 0) {
        c->refs = 1;
        c->next = g_conns;
        g_conns = c;
        *out = c;
    }
    if (!g_atexit)                      /* cnats started, even on failure */
        g_atexit = atexit(lib_atexit) == 0;
    pthread_mutex_unlock(&g_reg_mu);
    return rc;
}

void seda__rconn_put(struct rconn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g_reg_mu);
    bool last = --c->refs == 0;
    if (last) {
        for (struct rconn **p = &g_conns; *p; p = &(*p)->next)
            if (*p == c) {
                *p = c->next;
                break;
            }
    }
    pthread_mutex_unlock(&g_reg_mu);
    if (!last)
        return;
    if (seda__rconn_up(c))
        natsConnection_FlushTimeout(c->nc, 2000);   /* naks, acks */
    atomic_store_explicit(&c->closing, true, memory_order_release);
    natsConnection_Close(c->nc);
    if (!wait_flag(c, &c->sub_done, 10.0) ||
        !wait_flag(c, &c->closed_done, 10.0)) {
        /* A cnats thread may still hold c: leaking it is the safe
         * choice (never seen; reported so it is not silent). */
        char line[512];
        snprintf(line, sizeof line, "remote %s: the connection did not "
                 "close in 10 s; its memory is left allocated", c->shown);
        seda_log_write(SEDA_LOG_WARN, NULL, line);
        return;
    }
    conn_free(c);
}
