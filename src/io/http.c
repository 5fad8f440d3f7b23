/* SPDX-License-Identifier: MIT */
/*
 * http.c -- the HTTP client op (seda_io_http_request) on libcurl's multi
 * interface, driven by the loop's epoll.
 *
 * DESIGN
 *   One CURLM per loop, made on the first request (a loop that never does
 *   HTTP never touches curl's multi).  Its connection cache is where
 *   keep-alive connections wait between requests: an easy handle is
 *   removed and cleaned up when its request is done, its connection stays
 *   in the multi for the next request to the same host.  The idle
 *   connections are bounded (SEDA_IO_HTTP_MAX_IDLE_CONNS beside those in
 *   use: cache_bound) and the cache is closed whole once no request has
 *   run for the loop's idle time (the idle timer), or as soon as the
 *   last request of a burst of more than the bound at once ends: a
 *   connection its server closed is otherwise kept in CLOSE_WAIT until
 *   the next request, as libcurl only prunes when it connects.
 *
 *   curl tells the loop what to watch (CURLMOPT_SOCKETFUNCTION: a struct
 *   sock per socket, registered with curl_multi_assign, released through
 *   the loop's graveyard so a fetched event never reaches freed memory)
 *   and when to wake it (CURLMOPT_TIMERFUNCTION: one internal timer).  An
 *   event or the timer calls curl_multi_socket_action, then finished
 *   transfers are read (curl_multi_info_read) and their ops complete.
 *   Never is curl called from inside one of its own callbacks.
 *
 *   The response: the header callback starts a fresh header list at each
 *   status line (a 100 Continue or a followed redirect leaves only the
 *   last response's headers), lower-cases names and joins repeats with
 *   ", ", in time linear in the headers (names found through a hash
 *   index, a joined value grown by doubling: this runs on the loop every
 *   wait shares), and refuses an answer of more than
 *   SEDA_IO_HTTP_MAX_HEADERS lines as too large.  The body is limited twice: CURLOPT_MAXFILESIZE refuses a
 *   Content-Length over max_size before a byte is read, and the write
 *   callback stops a body that grows past it.  Loop thread only, except
 *   the submission (which copies the request) and the accessors.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "io_int.h"

#define SEDA__IO_STR_(x) #x
#define SEDA__IO_STR(x) SEDA__IO_STR_(x)

/* The loop's curl (loop thread only). */
struct seda__io_http {
    CURLM *multi;
    struct seda__io_timer timer;    /* curl's timeout */
    struct seda__io_timer idle;     /* armed while no transfer runs */
    size_t running;                 /* easy handles in multi */
    size_t peak;                    /* most running since the cache was
                                       last closed whole */
    seda_io_loop_t *loop;
};

/* A socket curl asked to watch. */
struct sock {
    struct seda__io_watch w;        /* first: released watches are freed */
    struct seda__io_http *h;
};

struct http_op {
    seda_io_op_t op;                /* first */
    CURL *easy;                     /* while running */
    struct curl_slist *hdrs;        /* request headers */
    char *method;
    char *url;
    char *body;                     /* request body, or NULL */
    size_t body_len;
    long timeout_ms;                /* 0: none */
    size_t max_size;
    int follow;
    int status;                     /* HTTP status */
    char **hname, **hval;           /* response headers */
    size_t *hvlen, *hvcap;          /* each value's length and room */
    size_t nh, hcap;
    uint32_t *hidx;                 /* name -> index + 1 (0: empty slot),
                                       open addressing, hidx_cap a power
                                       of two over twice nh */
    size_t hidx_cap;
    size_t nlines;                  /* header lines of this response */
    char *rbody;                    /* response body (NUL-terminated) */
    size_t rlen, rcap;
    enum { TL_NONE, TL_BODY, TL_LINES, TL_LINE, TL_HEAD } too_large;
                                    /* what a callback (or curl) refused */
    bool in_head;                   /* between a status line and the blank
                                       line that ends its headers */
    char errbuf[CURL_ERROR_SIZE];
};

/* ---- global init ---- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;          /* written once, under global_once */

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_ALL);
}

int seda__io_http_global_init(void)
{
    pthread_once(&global_once, global_init);
    return global_rc == CURLE_OK ? 0 : -ENOMEM;
}

/* ---- driving curl ---- */

static void check_done(struct seda__io_http *h);

static void on_sock_event(seda_io_loop_t *loop, struct seda__io_watch *w,
                          uint32_t ev)
{
    (void)loop;
    struct sock *sk = (struct sock *)w;
    struct seda__io_http *h = sk->h;
    int flags = 0;
    if (ev & EPOLLIN)
        flags |= CURL_CSELECT_IN;
    if (ev & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (ev & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_ERR;
    int running;
    curl_multi_socket_action(h->multi, w->fd, flags, &running);
    check_done(h);
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *userp,
                     void *socketp)
{
    (void)e;
    struct seda__io_http *h = userp;
    struct sock *sk = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            curl_multi_assign(h->multi, s, NULL);
            seda__io_watch_release(h->loop, &sk->w);
        }
        return 0;
    }
    if (!sk) {
        sk = calloc(1, sizeof *sk);
        if (!sk)
            return -1;          /* curl fails the transfer */
        sk->w.fd = s;
        sk->w.fn = on_sock_event;
        sk->h = h;
        curl_multi_assign(h->multi, s, sk);
    }
    uint32_t ev = 0;
    if (what & CURL_POLL_IN)
        ev |= EPOLLIN;
    if (what & CURL_POLL_OUT)
        ev |= EPOLLOUT;
    return seda__io_watch_set(h->loop, &sk->w, ev) == 0 ? 0 : -1;
}

static void on_timer_fire(seda_io_loop_t *loop, struct seda__io_timer *t)
{
    (void)loop;
    struct seda__io_http *h = (struct seda__io_http *)((char *)t -
                                  offsetof(struct seda__io_http, timer));
    int running;
    curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(h);
}

static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct seda__io_http *h = userp;
    if (timeout_ms < 0) {
        seda__io_timer_disarm(h->loop, &h->timer);
        return 0;
    }
    uint64_t due = seda__io_now() + (uint64_t)timeout_ms * 1000000u;
    return seda__io_timer_arm(h->loop, &h->timer, due) == 0 ? 0 : -1;
}

/* A multi with the loop's callbacks and a bounded connection cache, or
 * NULL. */
static CURLM *multi_new(struct seda__io_http *h)
{
    CURLM *m = curl_multi_init();
    if (!m)
        return NULL;
    curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(m, CURLMOPT_SOCKETDATA, h);
    curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(m, CURLMOPT_TIMERDATA, h);
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS,
                      (long)SEDA_IO_HTTP_MAX_IDLE_CONNS);
    return m;
}

/* Close every cached connection (no transfer runs) by replacing the
 * multi; a fresh one is made first, so a failure keeps the old one. */
static void cache_close(struct seda__io_http *h)
{
    CURLM *m = multi_new(h);
    if (!m)
        return;
    h->peak = 0;
    /* h->multi stays the old one until it is closed: its socket callbacks
     * (CURL_POLL_REMOVE) name it. */
    curl_multi_cleanup(h->multi);
    seda__io_timer_disarm(h->loop, &h->timer);
    seda__io_timer_disarm(h->loop, &h->idle);
    h->multi = m;
}

/* No transfer has run for the idle time: close the cache (a dead
 * connection would otherwise sit in CLOSE_WAIT until the next request). */
static void on_idle_fire(seda_io_loop_t *loop, struct seda__io_timer *t)
{
    (void)loop;
    struct seda__io_http *h = (struct seda__io_http *)((char *)t -
                                  offsetof(struct seda__io_http, idle));
    if (h->running == 0)
        cache_close(h);
}

static struct seda__io_http *http_of(seda_io_loop_t *loop)
{
    struct seda__io_http **slot = seda__io_http_slot(loop);
    if (*slot)
        return *slot;
    struct seda__io_http *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->loop = loop;
    seda__io_timer_init(&h->timer, on_timer_fire);
    seda__io_timer_init(&h->idle, on_idle_fire);
    h->multi = multi_new(h);
    if (!h->multi) {
        free(h);
        return NULL;
    }
    *slot = h;
    return h;
}

void seda__io_http_free(seda_io_loop_t *loop)
{
    struct seda__io_http **slot = seda__io_http_slot(loop);
    struct seda__io_http *h = *slot;
    if (!h)
        return;
    /* Every transfer is done (the loop cancelled them): this closes the
     * cached connections, whose sockets curl reports removed. */
    curl_multi_cleanup(h->multi);
    seda__io_timer_disarm(loop, &h->timer);
    seda__io_timer_disarm(loop, &h->idle);
    free(h);
    *slot = NULL;
}

/* ---- results ---- */

static int map_error(struct http_op *r, CURLcode rc)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return SEDA_IO_TIMEOUT;
    case CURLE_COULDNT_CONNECT:
        return SEDA_IO_REFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return SEDA_IO_DNS;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
        return SEDA_IO_TLS;
    case CURLE_FILESIZE_EXCEEDED:
        return SEDA_IO_TOO_LARGE;
    case CURLE_WRITE_ERROR:
        return r->too_large ? SEDA_IO_TOO_LARGE : SEDA_IO_OTHER;
    case CURLE_OUT_OF_MEMORY:
        /* libcurl's answer to a header line over its 100 KB. */
        if (!r->in_head)
            return SEDA_IO_OTHER;
        r->too_large = TL_LINE;
        return SEDA_IO_TOO_LARGE;
    case CURLE_RECV_ERROR:
        /* libcurl's answer to headers over its 300 KB. */
        if (r->in_head && strncmp(r->errbuf, "Too large response header",
                                  25) == 0) {
            r->too_large = TL_HEAD;
            return SEDA_IO_TOO_LARGE;
        }
        return SEDA_IO_CLOSED;
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SEND_ERROR:
        return SEDA_IO_CLOSED;
    default:
        return SEDA_IO_OTHER;
    }
}

/* What a TOO_LARGE op went over, for its message. */
static const char *too_large_why(const struct http_op *r)
{
    switch (r->too_large) {
    case TL_LINES:
        return "more than " SEDA__IO_STR(SEDA_IO_HTTP_MAX_HEADERS)
               " header lines";
    case TL_LINE:
        return "a header line over 100 KB";
    case TL_HEAD:
        return "headers over 300 KB";
    default:
        return "";              /* the body: the caller names max_size */
    }
}

/* The cache's bound: libcurl counts the connections in use in
 * CURLMOPT_MAXCONNECTS, and closes one as it comes back while the cache
 * holds more, so a fixed bound below the requests running would close
 * every connection a request leaves (no reuse at all past 64 at once).
 * It follows the requests running, so that the idle ones are what is
 * bounded. */
static void cache_bound(struct seda__io_http *h)
{
    curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS,
                      (long)(h->running + SEDA_IO_HTTP_MAX_IDLE_CONNS));
}

static void finish_easy(struct http_op *r)
{
    struct seda__io_http *h = *seda__io_http_slot(r->op.loop);
    curl_multi_remove_handle(h->multi, r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
    h->running--;
    cache_bound(h);
    if (h->running > 0)
        return;
    /* The last one: after more than the bound at once, libcurl (which
     * closes one connection per one coming back) may hold more idle than
     * the bound: close the cache whole now, before this op completes.
     * Else at the idle time (a failed arm: reaped at the next one). */
    if (h->peak > SEDA_IO_HTTP_MAX_IDLE_CONNS)
        cache_close(h);
    else
        (void)seda__io_timer_arm(h->loop, &h->idle, seda__io_now() +
                                 seda__io_http_idle_ns(h->loop));
}

static void check_done(struct seda__io_http *h)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *easy = m->easy_handle;
        CURLcode rc = m->data.result;
        struct http_op *r = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
        long code = 0;
        curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
        r->status = (int)code;
        finish_easy(r);         /* m is invalid from here */
        if (rc == CURLE_OK) {
            seda__io_complete(&r->op, SEDA_IO_OK, NULL);
        } else {
            int st = map_error(r, rc);
            const char *text = r->errbuf[0] ? r->errbuf
                                             : curl_easy_strerror(rc);
            if (st == SEDA_IO_TOO_LARGE)
                seda__io_complete(&r->op, st, "%s", too_large_why(r));
            else
                seda__io_complete(&r->op, st, "%s", text);
        }
    }
}

/* ---- callbacks of a transfer ---- */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct http_op *r = ud;
    size_t len = size * n;
    if (len > r->max_size - r->rlen) {
        r->too_large = TL_BODY;
        return 0;
    }
    if (r->rlen + len + 1 > r->rcap) {
        size_t cap = r->rcap ? r->rcap : 1024;
        while (cap < r->rlen + len + 1)
            cap *= 2;
        char *b = realloc(r->rbody, cap);
        if (!b)
            return 0;
        r->rbody = b;
        r->rcap = cap;
    }
    memcpy(r->rbody + r->rlen, p, len);
    r->rlen += len;
    r->rbody[r->rlen] = '\0';
    return len;
}

static void clear_headers(struct http_op *r)
{
    for (size_t i = 0; i < r->nh; i++) {
        free(r->hname[i]);
        free(r->hval[i]);
    }
    r->nh = 0;
    r->nlines = 0;
    if (r->hidx)
        memset(r->hidx, 0, r->hidx_cap * sizeof *r->hidx);
}

/* FNV-1a of a header name. */
static uint32_t name_hash(const char *name, size_t nlen)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < nlen; i++)
        h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

/* The slot of NAME in r->hidx: the one holding it, or the empty one where
 * it goes.  r->hidx has an empty slot (it is over half empty). */
static size_t name_slot(const struct http_op *r, const char *name,
                        size_t nlen)
{
    size_t mask = r->hidx_cap - 1;
    size_t s = name_hash(name, nlen) & mask;
    for (;;) {
        uint32_t k = r->hidx[s];
        if (k == 0)
            return s;
        const char *n = r->hname[k - 1];
        if (strncmp(n, name, nlen) == 0 && n[nlen] == '\0')
            return s;
        s = (s + 1) & mask;
    }
}

/* Room for one more distinct name: the arrays and an index kept under
 * half full (rebuilt when it grows).  0 or -1 (out of memory, nothing
 * changed that matters: the sizes only grew). */
static int reserve_header(struct http_op *r)
{
    if (r->nh == r->hcap) {
        size_t cap = r->hcap ? 2 * r->hcap : 16;
        char **a = realloc(r->hname, cap * sizeof *a);
        if (!a)
            return -1;
        r->hname = a;
        char **b = realloc(r->hval, cap * sizeof *b);
        if (!b)
            return -1;
        r->hval = b;
        size_t *c = realloc(r->hvlen, cap * sizeof *c);
        if (!c)
            return -1;
        r->hvlen = c;
        size_t *d = realloc(r->hvcap, cap * sizeof *d);
        if (!d)
            return -1;
        r->hvcap = d;
        r->hcap = cap;
    }
    if (2 * (r->nh + 1) > r->hidx_cap) {
        size_t cap = r->hidx_cap ? 2 * r->hidx_cap : 32;
        uint32_t *x = calloc(cap, sizeof *x);
        if (!x)
            return -1;
        free(r->hidx);
        r->hidx = x;
        r->hidx_cap = cap;
        for (size_t i = 0; i < r->nh; i++)
            r->hidx[name_slot(r, r->hname[i], strlen(r->hname[i]))] =
                (uint32_t)(i + 1);
    }
    return 0;
}

/* Add one header line of the response: a new name is appended, a repeated
 * one has its value joined to the first's with ", ".  Linear in the
 * response: a name is found through the index, a joined value grows by
 * doubling.  0, or -1 (out of memory). */
static int add_header(struct http_op *r, const char *name, size_t nlen,
                      const char *val, size_t vlen)
{
    if (reserve_header(r) != 0)
        return -1;
    size_t s = name_slot(r, name, nlen);
    if (r->hidx[s] != 0) {
        size_t i = r->hidx[s] - 1;
        size_t old = r->hvlen[i];
        size_t need = old + 2 + vlen + 1;
        if (need > r->hvcap[i]) {
            size_t cap = 2 * r->hvcap[i];
            if (cap < need)
                cap = need;
            char *v = realloc(r->hval[i], cap);
            if (!v)
                return -1;
            r->hval[i] = v;
            r->hvcap[i] = cap;
        }
        char *v = r->hval[i];
        memcpy(v + old, ", ", 2);
        memcpy(v + old + 2, val, vlen);
        v[old + 2 + vlen] = '\0';
        r->hvlen[i] = old + 2 + vlen;
        return 0;
    }
    char *n = strndup(name, nlen);
    char *v = strndup(val, vlen);
    if (!n || !v) {
        free(n);
        free(v);
        return -1;
    }
    r->hname[r->nh] = n;
    r->hval[r->nh] = v;
    r->hvlen[r->nh] = vlen;
    r->hvcap[r->nh] = vlen + 1;
    r->hidx[s] = (uint32_t)(r->nh + 1);
    r->nh++;
    return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct http_op *r = ud;
    size_t len = size * n;
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        clear_headers(r);       /* a new response begins */
        r->in_head = true;
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon) {
        if (len <= 2)
            r->in_head = false; /* the blank line */
        return len;             /* or junk */
    }
    if (++r->nlines > SEDA_IO_HTTP_MAX_HEADERS) {
        r->too_large = TL_LINES;
        return 0;               /* curl ends the transfer (write error) */
    }
    size_t nlen = (size_t)(colon - p);
    const char *v = colon + 1;
    const char *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' ||
                       end[-1] == ' ' || end[-1] == '\t'))
        end--;
    for (size_t i = 0; i < nlen; i++)
        p[i] = (char)tolower((unsigned char)p[i]);
    return add_header(r, p, nlen, v, (size_t)(end - v)) == 0 ? len : 0;
}

/* ---- the op ---- */

static void http_start(seda_io_op_t *op)
{
    struct http_op *r = (struct http_op *)op;
    struct seda__io_http *h = http_of(op->loop);
    CURL *e = h ? curl_easy_init() : NULL;
    if (!e) {
        seda__io_complete(op, SEDA_IO_OTHER, "out of memory (curl)");
        return;
    }
    r->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    if (strcmp(r->method, "HEAD") == 0)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    else if (strcmp(r->method, "GET") != 0 || r->body)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body || strcmp(r->method, "POST") == 0 ||
        strcmp(r->method, "PUT") == 0 || strcmp(r->method, "PATCH") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)r->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    if (r->timeout_ms > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, r->timeout_ms);
    if (r->follow) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
    }
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max_size);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    CURLMcode mc = curl_multi_add_handle(h->multi, e);
    if (mc == CURLM_OK) {
        h->running++;
        if (h->running > h->peak)
            h->peak = h->running;
        cache_bound(h);
        seda__io_timer_disarm(h->loop, &h->idle);
    } else {
        curl_easy_cleanup(e);
        r->easy = NULL;
        seda__io_complete(op, SEDA_IO_OTHER, "%s", curl_multi_strerror(mc));
    }
}

static void http_cancel(seda_io_op_t *op)
{
    struct http_op *r = (struct http_op *)op;
    if (r->easy)
        finish_easy(r);
    seda__io_complete(op, SEDA_IO_CANCELLED, NULL);
}

static void http_destroy(seda_io_op_t *op)
{
    struct http_op *r = (struct http_op *)op;
    curl_slist_free_all(r->hdrs);
    free(r->method);
    free(r->url);
    free(r->body);
    clear_headers(r);
    free(r->hname);
    free(r->hval);
    free(r->hvlen);
    free(r->hvcap);
    free(r->hidx);
    free(r->rbody);
    free(r);
}

static const struct seda__io_kind http_kind = {
    .name = "http",
    .start = http_start,
    .cancel = http_cancel,
    .destroy = http_destroy,
};

int seda_io_http_request(seda_io_loop_t *loop,
                         const struct seda_io_http_req *req,
                         seda_io_cb cb, void *ud, seda_io_op_t **opp)
{
    if (!req || !req->url)
        return -EINVAL;
    for (size_t i = 0; i < req->nheaders; i++)
        if (!req->headers[i] || !strchr(req->headers[i], ':') ||
            strpbrk(req->headers[i], "\r\n"))
            return -EINVAL;
    struct http_op *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->method = strdup(req->method ? req->method : "GET");
    r->url = strdup(req->url);
    bool ok = r->method && r->url;
    if (ok && req->body) {
        r->body = malloc(req->body_len + 1);
        ok = r->body != NULL;
        if (ok) {
            memcpy(r->body, req->body, req->body_len);
            r->body[req->body_len] = '\0';
            r->body_len = req->body_len;
        }
    }
    for (size_t i = 0; ok && i < req->nheaders; i++) {
        struct curl_slist *l = curl_slist_append(r->hdrs, req->headers[i]);
        ok = l != NULL;
        if (ok)
            r->hdrs = l;
    }
    if (ok) {
        /* No "Expect: 100-continue" wait before a body. */
        struct curl_slist *l = curl_slist_append(r->hdrs, "Expect:");
        ok = l != NULL;
        if (ok)
            r->hdrs = l;
    }
    if (!ok) {
        http_destroy(&r->op);
        return -ENOMEM;
    }
    double t = req->timeout;
    if (t > 0)                  /* at least 1 ms; about 3 years at most */
        r->timeout_ms = t >= 1e8 ? (long)1e11 : (long)ceil(t * 1000);
    r->max_size = req->max_size ? req->max_size : SEDA_IO_HTTP_MAX_SIZE_DEFAULT;
    r->follow = req->follow;
    int rc = seda__io_submit(loop, &r->op, &http_kind, cb, ud, opp);
    if (rc != 0)
        http_destroy(&r->op);
    return rc;
}

/* ---- accessors ---- */

static const struct http_op *as_http(const seda_io_op_t *op)
{
    return op->kind == &http_kind ? (const struct http_op *)op : NULL;
}

int seda_io_http_status(const seda_io_op_t *op)
{
    const struct http_op *r = as_http(op);
    return r ? r->status : 0;
}

size_t seda_io_http_nheaders(const seda_io_op_t *op)
{
    const struct http_op *r = as_http(op);
    return r ? r->nh : 0;
}

int seda_io_http_header(const seda_io_op_t *op, size_t i, const char **name,
                        const char **value)
{
    const struct http_op *r = as_http(op);
    if (!r || i >= r->nh)
        return -EINVAL;
    *name = r->hname[i];
    *value = r->hval[i];
    return 0;
}

const char *seda_io_http_body(const seda_io_op_t *op, size_t *len)
{
    const struct http_op *r = as_http(op);
    if (!r || !r->rbody) {
        *len = 0;
        return "";
    }
    *len = r->rlen;
    return r->rbody;
}
