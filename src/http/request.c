/* SPDX-License-Identifier: MIT */
/*
 * request.c -- reading a request off a connection's bytes, strictly
 * (RFC 9112).
 *
 * DESIGN
 *   A request is read in two steps.  First its head (request line and
 *   header lines, up to the empty line) is gathered whole -- at most
 *   max_header bytes, else 431 -- and checked here, byte by byte, for what
 *   lets two servers disagree on where a request ends: a bare CR or a NUL
 *   or another control character, a folded line (obs-fold), a header name
 *   that is not a token (whitespace before the colon), Content-Length
 *   repeated or beside Transfer-Encoding, a transfer coding other than
 *   chunked (501), and on HTTP/1.1 a Host missing or repeated.  Every one
 *   is a 400 (501) and the connection closes.  Then the head, and the body
 *   as it comes, go through nodejs http-parser, which checks the request
 *   line and Content-Length and decodes a chunked body; its callbacks
 *   note where things are, and at the head's end the request is made (one
 *   allocation: method, path and query percent-decoded -- %00 is a 400 --
 *   lower-case header names, trimmed values).  The body is gathered up to
 *   max_body (else 413).  A whole request pauses the parser, so what the
 *   client pipelined behind it is not read before it is answered.
 *
 *   Everything here runs under the server's mu (http_int.h).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "http_int.h"

/* ---- the connection's buffers ---- */

struct hconn *seda__http_conn_new(seda_http_server_t *s, int fd)
{
    struct hconn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->srv = s;
    c->max_body = seda__http_max_body(s);
    c->state = C_READ;
    http_parser_init(&c->p, HTTP_REQUEST);
    c->p.data = c;
    return c;
}

void seda__http_conn_free(struct hconn *c)
{
    if (c->building)
        seda__http_req_free(c->building);
    free(c->in);
    free(c->h);
    free(c->body);
    free(c->out);
    free(c);
}

/* Room for more bytes at in's end: what was parsed is dropped first. */
int seda__http_conn_reserve(struct hconn *c, size_t more)
{
    if (c->in_off > 0 && c->in_cap - c->in_len < more) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->scan = c->scan > c->in_off ? c->scan - c->in_off : 0;
        c->in_off = 0;
    }
    if (c->in_cap - c->in_len >= more)
        return 0;
    size_t cap = c->in_cap ? c->in_cap : 4096;
    while (cap - c->in_len < more)
        cap *= 2;
    char *in = realloc(c->in, cap);
    if (!in)
        return -ENOMEM;
    c->in = in;
    c->in_cap = cap;
    return 0;
}

bool seda__http_conn_pending(const struct hconn *c)
{
    return c->in_off < c->in_len || c->in_body;
}

void seda__http_req_free(struct seda_http_req_s *r)
{
    free(r->body);
    free(r);
}

/* ---- the head's checks ---- */

static bool is_tchar(unsigned char ch)
{
    return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool ieq(const char *a, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(a, lit, n) == 0;
}

static void trim(const char **v, size_t *n)
{
    while (*n && (**v == ' ' || **v == '\t')) {
        (*v)++;
        (*n)--;
    }
    while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
        (*n)--;
}

struct headcheck {
    bool expect;                /* Expect: 100-continue */
    int status;
    char why[160];
};

static int refuse(struct headcheck *hc, int status, const char *why)
{
    hc->status = status;
    snprintf(hc->why, sizeof hc->why, "%s", why);
    return -1;
}

/* The end of line at p (its LF), checking the line's bytes: a CR only
 * before the LF, no NUL or other control character but a tab. */
static const char *line_end(const char *p, const char *end,
                            struct headcheck *hc)
{
    for (; p < end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\n')
            return p;
        if (ch == '\r') {
            if (p + 1 < end && p[1] == '\n')
                continue;
            refuse(hc, 400, "bad_request: a bare CR in the head");
            return NULL;
        }
        if (ch == 0) {
            refuse(hc, 400, "bad_request: a NUL in the head");
            return NULL;
        }
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            refuse(hc, 400, "bad_request: a control character in the head");
            return NULL;
        }
    }
    refuse(hc, 400, "bad_request: a line without its end");
    return NULL;
}

/* Check the head (len bytes, its last line the empty one). */
static int check_head(const char *head, size_t len, struct headcheck *hc)
{
    const char *p = head, *end = head + len;
    const char *eol = line_end(p, end, hc);
    if (!eol)
        return -1;
    size_t rl = (size_t)(eol - p);
    if (rl && p[rl - 1] == '\r')
        rl--;
    bool v11 = rl >= 8 && memcmp(p + rl - 8, "HTTP/1.1", 8) == 0;
    int nhost = 0, ncl = 0, nte = 0;
    const char *cl = NULL, *te = NULL;
    size_t cll = 0, tel = 0;
    bool te_other = false;
    for (p = eol + 1; p < end; p = eol + 1) {
        eol = line_end(p, end, hc);
        if (!eol)
            return -1;
        size_t n = (size_t)(eol - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break;                      /* the empty line: the end */
        if (*p == ' ' || *p == '\t')
            return refuse(hc, 400, "bad_request: a folded header line "
                          "(obs-fold)");
        size_t k = 0;
        while (k < n && p[k] != ':') {
            if (!is_tchar((unsigned char)p[k]))
                return refuse(hc, 400, p[k] == ' ' || p[k] == '\t'
                              ? "bad_request: whitespace before a header's "
                                "colon"
                              : "bad_request: a header name that is not a "
                                "token");
            k++;
        }
        if (k == n || k == 0)
            return refuse(hc, 400, "bad_request: a header line without a "
                          "name and colon");
        const char *v = p + k + 1;
        size_t vl = n - k - 1;
        trim(&v, &vl);
        if (ieq(p, k, "host")) {
            nhost++;
        } else if (ieq(p, k, "content-length")) {
            if (ncl++ && (vl != cll || memcmp(v, cl, vl) != 0))
                return refuse(hc, 400, "bad_request: differing "
                              "Content-Lengths");
            if (ncl > 1)
                return refuse(hc, 400, "bad_request: a repeated "
                              "Content-Length");
            cl = v;
            cll = vl;
        } else if (ieq(p, k, "expect")) {
            hc->expect = v11 && ieq(v, vl, "100-continue");
        } else if (ieq(p, k, "transfer-encoding")) {
            nte++;
            te = v;
            tel = vl;
            if (!ieq(v, vl, "chunked"))
                te_other = true;
        }
    }
    if (ncl && nte)
        return refuse(hc, 400, "bad_request: Content-Length with "
                      "Transfer-Encoding");
    if (te_other) {
        snprintf(hc->why, sizeof hc->why, "not_implemented: transfer "
                 "coding '%.*s'", (int)(tel > 60 ? 60 : tel), te);
        hc->status = 501;
        return -1;
    }
    if (nte > 1)
        return refuse(hc, 400, "bad_request: Transfer-Encoding repeated");
    if (nhost > 1)
        return refuse(hc, 400, "bad_request: Host repeated");
    if (v11 && nhost == 0)
        return refuse(hc, 400, "bad_request: no Host (HTTP/1.1)");
    return 0;
}

/* ---- making the request ---- */

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)tolower((unsigned char)ch);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Percent-decode n bytes at src into dst (NUL-terminated; '+' is a space
 * when plus).  -1 on %00.  A % not followed by two hex digits stays. */
static int decode(char *dst, const char *src, size_t n, bool plus)
{
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = src[i];
        if (ch == '%' && i + 2 < n && hexval(src[i + 1]) >= 0 &&
            hexval(src[i + 2]) >= 0) {
            ch = (char)(hexval(src[i + 1]) * 16 + hexval(src[i + 2]));
            if (ch == 0)
                return -1;
            i += 2;
        } else if (ch == '+' && plus) {
            ch = ' ';
        }
        dst[j++] = ch;
    }
    dst[j] = '\0';
    return 0;
}

/* The request of c's head (c->h, c->url_*): one allocation. */
static int make_request(struct hconn *c)
{
    const char *url = c->in + c->url_o;
    size_t ul = c->url_l;
    const char *path = url, *query = NULL;
    size_t pl = ul, ql = 0;
    if (ul == 0 || (url[0] != '/' && !(ul == 1 && url[0] == '*'))) {
        struct http_parser_url u;
        http_parser_url_init(&u);
        if (http_parser_parse_url(url, ul, 0, &u) != 0 ||
            !(u.field_set & (1 << UF_PATH))) {
            snprintf(c->why, sizeof c->why, "bad_request: a bad target");
            return 400;
        }
        path = url + u.field_data[UF_PATH].off;
        pl = u.field_data[UF_PATH].len;
        if (u.field_set & (1 << UF_QUERY)) {
            query = url + u.field_data[UF_QUERY].off;
            ql = u.field_data[UF_QUERY].len;
        }
    } else {
        const char *qm = memchr(url, '?', ul);
        const char *hash = memchr(url, '#', ul);
        if (hash && (!qm || hash < qm))
            qm = NULL;
        size_t stop = hash ? (size_t)(hash - url) : ul;
        if (qm) {
            pl = (size_t)(qm - url);
            query = qm + 1;
            ql = stop - pl - 1;
        } else {
            pl = stop;
        }
    }
    int nq = 0;
    if (query && ql) {
        nq = 1;
        for (size_t i = 0; i < ql; i++)
            nq += query[i] == '&';
    }
    const char *m = http_method_str((enum http_method)c->p.method);
    size_t strs = strlen(m) + 1 + pl + 1 + ql + 2 * (size_t)nq;
    for (int i = 0; i < c->nh; i++)
        strs += c->h[i].nl + c->h[i].vl + 2;
    size_t ptrs = sizeof(char *) * 2 * (size_t)(c->nh + nq);
    struct seda_http_req_s *r = calloc(1, sizeof *r + ptrs + strs);
    if (!r) {
        snprintf(c->why, sizeof c->why, "out_of_memory");
        return 500;
    }
    r->hdr = (char **)(r + 1);
    r->q = r->hdr + 2 * c->nh;
    char *w = (char *)(r->q + 2 * nq);
    r->method = w;
    strcpy(w, m);
    w += strlen(m) + 1;
    r->path = w;
    if (decode(w, path, pl, false) != 0) {
        free(r);
        snprintf(c->why, sizeof c->why, "bad_request: %%00 in the path");
        return 400;
    }
    w += strlen(w) + 1;
    for (size_t i = 0, start = 0; query && i <= ql; i++) {
        if (i < ql && query[i] != '&')
            continue;
        const char *part = query + start;
        size_t n = i - start;
        start = i + 1;
        if (n == 0)
            continue;
        const char *eq = memchr(part, '=', n);
        size_t kl = eq ? (size_t)(eq - part) : n;
        char *k = w;
        if (decode(k, part, kl, true) != 0)
            goto nul;
        w += strlen(k) + 1;
        char *v = w;
        if (decode(v, eq ? eq + 1 : "", eq ? n - kl - 1 : 0, true) != 0)
            goto nul;
        w += strlen(v) + 1;
        r->q[2 * r->nq] = k;
        r->q[2 * r->nq + 1] = v;
        r->nq++;
    }
    for (int i = 0; i < c->nh; i++) {
        const struct hline *h = &c->h[i];
        char *k = w;
        for (uint32_t j = 0; j < h->nl; j++)
            k[j] = (char)tolower((unsigned char)c->in[h->no + j]);
        k[h->nl] = '\0';
        w += h->nl + 1;
        const char *v = c->in + h->vo;
        size_t vl = h->vl;
        trim(&v, &vl);
        memcpy(w, v, vl);
        w[vl] = '\0';
        r->hdr[2 * i] = k;
        r->hdr[2 * i + 1] = w;
        w += vl + 1;
    }
    r->nh = c->nh;
    r->head = c->p.method == HTTP_HEAD;
    r->close = !http_should_keep_alive(&c->p) || c->p.upgrade;
    r->keep10 = !r->close && c->p.http_major == 1 && c->p.http_minor == 0;
    c->building = r;
    return 0;
nul:
    free(r);
    snprintf(c->why, sizeof c->why, "bad_request: %%00 in the query");
    return 400;
}

/* ---- http-parser's callbacks ---- */

static int on_url(http_parser *p, const char *at, size_t len)
{
    struct hconn *c = p->data;
    if (c->url_l == 0)
        c->url_o = (size_t)(at - c->in);
    c->url_l += len;
    return 0;
}

static int on_field(http_parser *p, const char *at, size_t len)
{
    struct hconn *c = p->data;
    if (c->nh == 0 || c->h_value) {
        if (c->nh == c->hcap) {
            int cap = c->hcap ? 2 * c->hcap : 16;
            struct hline *h = realloc(c->h, sizeof *h * (size_t)cap);
            if (!h)
                return -1;
            c->h = h;
            c->hcap = cap;
        }
        c->h[c->nh++] = (struct hline){ (uint32_t)(at - c->in),
                                        (uint32_t)len, 0, 0 };
        c->h_value = false;
        return 0;
    }
    c->h[c->nh - 1].nl += (uint32_t)len;
    return 0;
}

static int on_value(http_parser *p, const char *at, size_t len)
{
    struct hconn *c = p->data;
    if (c->nh == 0)
        return -1;
    struct hline *h = &c->h[c->nh - 1];
    if (!c->h_value)
        h->vo = (uint32_t)(at - c->in);
    h->vl += (uint32_t)len;
    c->h_value = true;
    return 0;
}

static int on_headers(http_parser *p)
{
    struct hconn *c = p->data;
    if (p->content_length != ULLONG_MAX && p->content_length > c->max_body) {
        c->refuse = 413;
        snprintf(c->why, sizeof c->why, "too_large");
        return -1;
    }
    int st = make_request(c);
    if (st) {
        c->refuse = st;
        return -1;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    struct hconn *c = p->data;
    if (c->blen + len > c->max_body) {
        c->refuse = 413;
        snprintf(c->why, sizeof c->why, "too_large");
        return -1;
    }
    if (c->blen + len > c->bcap) {
        size_t cap = c->bcap ? c->bcap : 1024;
        while (cap < c->blen + len)
            cap *= 2;
        unsigned char *b = realloc(c->body, cap);
        if (!b) {
            c->refuse = 500;
            snprintf(c->why, sizeof c->why, "out_of_memory");
            return -1;
        }
        c->body = b;
        c->bcap = cap;
    }
    memcpy(c->body + c->blen, at, len);
    c->blen += len;
    return 0;
}

static int on_complete(http_parser *p)
{
    struct hconn *c = p->data;
    c->complete = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

/* ---- the step ---- */

/* Where the head that starts at c->in_off ends (one past its empty
 * line's LF), or 0 when it has not all come. */
static size_t head_end(struct hconn *c)
{
    size_t from = c->scan > c->in_off + 2 ? c->scan - 2 : c->in_off;
    for (size_t i = from; i < c->in_len; i++) {
        if (c->in[i] != '\n')
            continue;
        if (i + 1 < c->in_len && c->in[i + 1] == '\n')
            return i + 2;
        if (i + 2 < c->in_len && c->in[i + 1] == '\r' && c->in[i + 2] == '\n')
            return i + 3;
    }
    c->scan = c->in_len;
    return 0;
}

static int fail(seda_http_server_t *s, struct hconn *c, int status,
                const char *why)
{
    if (c->building) {
        seda__http_req_free(c->building);
        c->building = NULL;
    }
    seda__http_refuse(s, c, status, why);
    return -1;
}

static int parser_error(seda_http_server_t *s, struct hconn *c)
{
    if (c->refuse)
        return fail(s, c, c->refuse, c->why);
    char why[160];
    snprintf(why, sizeof why, "bad_request: %s",
             http_errno_description(HTTP_PARSER_ERRNO(&c->p)));
    return fail(s, c, 400, why);
}

/* Read a request from what c holds: 1 one was handed over, 0 more bytes
 * are needed, -1 refused (the answer is on its way, the connection
 * closes after it). */
int seda__http_parse(seda_http_server_t *s, struct hconn *c)
{
    if (!c->in_body) {
        /* Empty lines before a request are skipped (RFC 9112 2.2). */
        while (c->in_off < c->in_len &&
               (c->in[c->in_off] == '\n' ||
                (c->in[c->in_off] == '\r' && c->in_off + 1 < c->in_len &&
                 c->in[c->in_off + 1] == '\n')))
            c->in_off += c->in[c->in_off] == '\r' ? 2 : 1;
        if (c->in_off == c->in_len)
            return 0;
        size_t end = head_end(c);
        size_t max = seda__http_max_header(s);
        if (end == 0) {
            if (c->in_len - c->in_off > max)
                return fail(s, c, 431, "header_too_large");
            return 0;
        }
        size_t len = end - c->in_off;
        if (len > max)
            return fail(s, c, 431, "header_too_large");
        struct headcheck hc = { 0 };
        if (check_head(c->in + c->in_off, len, &hc) != 0)
            return fail(s, c, hc.status, hc.why);
        c->nh = 0;
        c->url_l = 0;
        c->h_value = false;
        c->blen = 0;
        c->refuse = 0;
        c->complete = false;
        size_t n = http_parser_execute(&c->p, &settings, c->in + c->in_off,
                                       len);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
        if ((e != HPE_OK && e != HPE_PAUSED) || !c->building)
            return parser_error(s, c);
        c->in_off += n;
        c->in_body = true;
        /* A client waiting to be told to send its body is told. */
        if (hc.expect && !c->complete && c->in_off == c->in_len) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            ssize_t w = send(c->fd, cont, sizeof cont - 1,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;            /* not taken: the client sends anyway */
        }
    }
    if (!c->complete && c->in_off < c->in_len) {
        size_t n = http_parser_execute(&c->p, &settings, c->in + c->in_off,
                                       c->in_len - c->in_off);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
        if (e != HPE_OK && e != HPE_PAUSED)
            return parser_error(s, c);
        c->in_off += n;
    }
    if (!c->complete)
        return 0;
    struct seda_http_req_s *r = c->building;
    c->building = NULL;
    r->body = c->body;
    r->len = c->blen;
    c->body = NULL;
    c->blen = c->bcap = 0;
    c->in_body = false;
    c->complete = false;
    c->scan = c->in_off;
    http_parser_pause(&c->p, 0);
    seda__http_hand_over(s, c, r);
    return 1;
}

/* ---- request accessors ---- */

const char *seda_http_req_method(const seda_http_req_t *r)
{
    return r->method;
}

const char *seda_http_req_path(const seda_http_req_t *r)
{
    return r->path;
}

int seda_http_req_header_count(const seda_http_req_t *r)
{
    return r->nh;
}

void seda_http_req_header_at(const seda_http_req_t *r, int i,
                             const char **name, const char **value)
{
    *name = r->hdr[2 * i];
    *value = r->hdr[2 * i + 1];
}

int seda_http_req_query_count(const seda_http_req_t *r)
{
    return r->nq;
}

void seda_http_req_query_at(const seda_http_req_t *r, int i,
                            const char **key, const char **value)
{
    *key = r->q[2 * i];
    *value = r->q[2 * i + 1];
}

const void *seda_http_req_body(const seda_http_req_t *r, size_t *len)
{
    *len = r->len;
    return r->body ? (const void *)r->body : (const void *)"";
}

double seda_http_req_arrived(const seda_http_req_t *r)
{
    return r->arrived;
}
