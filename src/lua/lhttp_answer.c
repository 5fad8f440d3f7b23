/* SPDX-License-Identifier: MIT */
/*
 * lhttp_answer.c -- bus:listen's answers: what an itinerary's end (the
 * done callback of the envelope a request became) is as HTTP, and the
 * bus's own answers (no route, refused, no such stage, dropped).
 *
 * DESIGN
 *   The done callback runs where the itinerary ends (a worker, usually)
 *   and turns the final payload into the answer by reading the wire
 *   format (lcodec_read.h), without a Lua state: a string is a 200 body;
 *   a table { status =, headers =, body = } says all three, a table body
 *   being written as JSON; any other table is sent as JSON.  Dead letters
 *   are 500 with x-dead-reason; a drop (shutdown) is 503.  What the
 *   handler gave that could not be sent as given is logged, once per
 *   answer.  Any thread; nothing here holds a lock but the log's.
 *   Requests become envelopes in lhttp.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lhttp_answer.h"
#include "lhttp_wire.h"
#include "ljson_write.h"

#define MAX_HDRS 64

struct answer {
    int status;
    const char *hv[2 * MAX_HDRS + 4];
    int nh;
    char tmp[MAX_HDRS][32];     /* numbers given as header values */
    struct buf names;           /* header names/values copied NUL-ended */
    size_t offs[2 * MAX_HDRS];
    const void *body;
    size_t len;
    struct buf json;
    const char *ctype;          /* unless the headers name one */
    char bad[200];              /* the first thing of the answer not sent
                                 * as given (logged), or "" */
    char why[200];              /* what JSON could not carry, or "" */
    bool bad_st;                /* the status given was outside 200-599 */
    double bad_status;          /* and it was this */
};

/* Say on a's log line what was not sent as given (the first thing). */
__attribute__((format(printf, 2, 3)))
static void answer_bad(struct answer *a, const char *fmt, ...)
{
    if (a->bad[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->bad, sizeof a->bad, fmt, ap);
    va_end(ap);
}

/* Whether s[0..n) is an HTTP header name (RFC 9110 token). */
static bool header_name_ok(const unsigned char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') ||
              strchr("!#$%&'*+-.^_`|~", s[i])))
            return false;
    return true;
}

/* The log line of an answer not sent as given: at most one a second for
 * the process (a handler answering every request so would flood the
 * log), the ones left out counted on the next.  Any thread. */
static void answer_log(const char *stage, const char *id, const char *what)
{
    static _Atomic int64_t last_ns;
    static atomic_uint skipped;
    int64_t now = (int64_t)(seda_now() * 1e9);
    int64_t last = atomic_load_explicit(&last_ns, memory_order_relaxed);
    if ((last != 0 && now - last < 1000000000) ||
        !atomic_compare_exchange_strong_explicit(&last_ns, &last, now,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed)) {
        atomic_fetch_add_explicit(&skipped, 1, memory_order_relaxed);
        return;
    }
    unsigned n = atomic_exchange_explicit(&skipped, 0, memory_order_relaxed);
    char msg[400];
    snprintf(msg, sizeof msg, "listen: the answer to request %s: %s%s", id,
             what, n ? " (and more answers like it, not logged)" : "");
    seda_log_write(SEDA_LOG_WARN, stage, msg);
}

static bool has_header(const struct answer *a, const char *name)
{
    for (int i = 0; i < a->nh; i++)
        if (strcasecmp(a->hv[2 * i], name) == 0)
            return true;
    return false;
}

/* The headers table at r (its head in v): string keys, string or number
 * values; others are skipped. */
static int read_headers(struct answer *a, struct cr *r, const struct cval *v)
{
    for (uint64_t i = 0; i < v->narr; i++)
        if (seda__l_hw_rd_skip(r, 1) != 0)
            return -1;
    int n = 0;
    for (uint64_t i = 0; i < v->nrec; i++) {
        struct cval k, x;
        if (seda__l_cr_head(r, &k) != 0 || seda__l_hw_rd_skip_rest(r, &k, 1) != 0 ||
            seda__l_cr_head(r, &x) != 0)
            return -1;
        char num[32];
        const void *vs = NULL;
        size_t vl = 0;
        if (x.t == CV_STR) {
            vs = x.s;
            vl = x.len;
        } else if (x.t == CV_INT || x.t == CV_FLOAT) {
            struct buf nb = { 0 };
            if (seda__l_json_num(&nb, &x) != 0) {  /* nan, inf: skipped */
                free(nb.p);
                continue;
            }
            vl = nb.len < sizeof num - 1 ? nb.len : sizeof num - 1;
            if (nb.p)
                memcpy(num, nb.p, vl);
            free(nb.p);
            vs = num;
        } else if (seda__l_hw_rd_skip_rest(r, &x, 1) != 0) {
            return -1;
        }
        if (k.t != CV_STR || !vs) {
            answer_bad(a, "a header that is not a string name with a string "
                       "or number value was dropped");
            continue;
        }
        if (n == MAX_HDRS) {
            answer_bad(a, "headers past the first %d were dropped", MAX_HDRS);
            continue;
        }
        if (!header_name_ok(k.s, k.len)) {
            answer_bad(a, "header '%.*s' was dropped: not a header name "
                       "(letters, digits and !#$%%&'*+-.^_`|~)",
                       (int)(k.len < 60 ? k.len : 60), (const char *)k.s);
            continue;
        }
        if (memchr(vs, 0, vl) || memchr(vs, '\n', vl) ||
            memchr(vs, '\r', vl)) {
            answer_bad(a, "header '%.*s' was dropped: its value holds a "
                       "CR, LF or NUL", (int)k.len, (const char *)k.s);
            continue;
        }
        a->offs[2 * n] = a->names.len;
        seda__l_cw_put(&a->names, k.s, k.len);
        seda__l_cw_byte(&a->names, 0);
        a->offs[2 * n + 1] = a->names.len;
        seda__l_cw_put(&a->names, vs, vl);
        seda__l_cw_byte(&a->names, 0);
        n++;
    }
    if (a->names.failed)
        return -1;
    for (int i = 0; i < 2 * n; i++)
        a->hv[i] = (const char *)a->names.p + a->offs[i];
    a->nh = n;
    return 0;
}

/* The body at r (its head in v), at path (for what JSON refuses). */
static int read_body(struct answer *a, struct cr *r, const struct cval *v,
                     const char *path)
{
    if (v->t == CV_STR) {
        a->body = v->s;
        a->len = v->len;
        return 0;
    }
    if (v->t == CV_NIL || v->t == CV_NULL)
        return 0;
    a->ctype = "application/json";
    struct seda_jpath jp;
    jp.n = (size_t)snprintf(jp.b, sizeof jp.b, "%s", path);
    struct seda_jerr e = { a->why, sizeof a->why, false };
    if (seda__l_json_write(&a->json, r, v, SEDA_JSON_ANSWER, &jp, 1, &e) != 0
        || a->json.failed)
        return -1;
    a->body = a->json.p;
    a->len = a->json.len;
    return 0;
}

static bool key_is(const struct cval *k, const char *s)
{
    return k->t == CV_STR && k->len == strlen(s) && memcmp(k->s, s, k->len) == 0;
}

/* Fill a from a completed itinerary's payload.  0, or -1 (unreadable). */
static int answer_from(struct answer *a, const void *p, size_t len, int kind)
{
    a->status = 200;
    a->ctype = "text/plain; charset=utf-8";
    if (kind == SEDA_KIND_RAW) {
        a->body = p;
        a->len = len;
        return 0;
    }
    struct cr r = { p, (const unsigned char *)p + len };
    struct cval v;
    if (seda__l_cr_head(&r, &v) != 0)
        return -1;
    if (v.t != CV_TABLE) {
        if (v.t == CV_NIL || v.t == CV_NULL)
            a->status = 204;
        return read_body(a, &r, &v, "payload");
    }
    /* { status =, headers =, body = }?  Look before reading.  A status
     * that is not a number makes the table data (sent as JSON): a record
     * such as { status = "shipped", id = 7 } is not an HTTP answer. */
    struct cr look = r;
    bool shaped = false, data = false;
    for (uint64_t i = 0; i < v.narr; i++)
        if (seda__l_hw_rd_skip(&look, 1) != 0)
            return -1;
    for (uint64_t i = 0; i < v.nrec && !data; i++) {
        struct cval k, x;
        if (seda__l_cr_head(&look, &k) != 0 || seda__l_hw_rd_skip_rest(&look, &k, 1) != 0 ||
            seda__l_cr_head(&look, &x) != 0)
            return -1;
        if (key_is(&k, "status"))
            data = x.t != CV_INT && x.t != CV_FLOAT;
        shaped = shaped || key_is(&k, "status") || key_is(&k, "body") ||
                 key_is(&k, "headers");
        if (seda__l_hw_rd_skip_rest(&look, &x, 1) != 0)
            return -1;
    }
    if (!shaped || data)
        return read_body(a, &r, &v, "payload");
    for (uint64_t i = 0; i < v.narr; i++)
        if (seda__l_hw_rd_skip(&r, 1) != 0)
            return -1;
    bool body_seen = false;
    for (uint64_t i = 0; i < v.nrec; i++) {
        struct cval k, x;
        if (seda__l_cr_head(&r, &k) != 0 || seda__l_hw_rd_skip_rest(&r, &k, 1) != 0 ||
            seda__l_cr_head(&r, &x) != 0)
            return -1;
        if (key_is(&k, "status") && (x.t == CV_INT || x.t == CV_FLOAT)) {
            double s = x.t == CV_INT ? (double)x.i : x.f;
            if (s >= 200 && s <= 599 && s == floor(s)) {
                a->status = (int)s;
            } else {                    /* on_done answers 500 naming it */
                a->status = 500;
                a->bad_status = s;
                a->bad_st = true;
            }
        } else if (key_is(&k, "headers") && x.t == CV_TABLE) {
            if (read_headers(a, &r, &x) != 0)
                return -1;
        } else if (key_is(&k, "body")) {
            body_seen = true;
            if (read_body(a, &r, &x, "payload.body") != 0)
                return -1;
        } else if (seda__l_hw_rd_skip_rest(&r, &x, 1) != 0) {
            return -1;
        }
    }
    (void)body_seen;
    return 0;
}

static void answer_send(seda_http_req_t *req, struct answer *a)
{
    if (a->ctype && !has_header(a, "Content-Type") && a->nh < MAX_HDRS + 2) {
        a->hv[2 * a->nh] = "Content-Type";
        a->hv[2 * a->nh + 1] = a->ctype;
        a->nh++;
    }
    seda_http_respond(req, a->status, a->hv, a->nh, a->body, a->len);
    free(a->names.p);
    free(a->json.p);
}

/* An answer of the bus's own: status, reason (Seda-Reason), and for 503 a
 * Retry-After. */
static void answer_detail(seda_http_req_t *req, int status, const char *why,
                          const char *detail)
{
    char body[300];
    int n = snprintf(body, sizeof body, "%d %s%s\n", status, why, detail);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof body)
        n = sizeof body - 1;
    /* The reason goes in a header: only its first line, printable. */
    char reason[200];
    size_t k = 0;
    for (; why[k] && k < sizeof reason - 1; k++)
        reason[k] = why[k] == '\r' || why[k] == '\n' ? ' ' : why[k];
    reason[k] = '\0';
    const char *hv[] = { "Content-Type", "text/plain; charset=utf-8",
                         "Seda-Reason", reason, "Retry-After", "1" };
    seda_http_respond(req, status, hv, status == 503 ? 3 : 2, body,
                      (size_t)n);
}

void seda__l_http_answer_plain(seda_http_req_t *req, int status,
                               const char *why)
{
    answer_detail(req, status, why, "");
}

/* A request that met a stage that does not exist is a mistake in the
 * program (a route or a forward naming it), not load: answered 500
 * naming the stage, and logged at most once every 10 s in the process,
 * saying how many such requests were not logged since.  Any thread. */
static _Atomic int64_t missing_logged;  /* ns (seda_now); relaxed CAS */
static atomic_uint missing_quiet;       /* relaxed: a counter only */

void seda__l_http_answer_missing(seda_http_req_t *req, const char *stage,
                                 const char *from)
{
    char at[200];
    if (from)
        snprintf(at, sizeof at, " (stage %s does not exist; forwarded "
                 "there by stage %s)", stage, from);
    else
        snprintf(at, sizeof at, " (stage %s does not exist)", stage);
    int64_t now = (int64_t)(seda_now() * 1e9) + 1;   /* 0: never logged */
    int64_t last = atomic_load_explicit(&missing_logged,
                                        memory_order_relaxed);
    if ((last && now - last < 10 * (int64_t)1000000000) ||
        !atomic_compare_exchange_strong_explicit(&missing_logged, &last, now,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed)) {
        atomic_fetch_add_explicit(&missing_quiet, 1, memory_order_relaxed);
    } else {
        unsigned quiet = atomic_exchange_explicit(&missing_quiet, 0,
                                                  memory_order_relaxed);
        char msg[512], more[80] = "";
        if (quiet)
            snprintf(more, sizeof more, " (and %u more since the last "
                     "such line)", quiet);
        snprintf(msg, sizeof msg, "listen: %s %s: answered 500 "
                 "no_such_stage%s%s", seda_http_req_method(req),
                 seda_http_req_path(req), at, more);
        seda_log_write(SEDA_LOG_ERROR, from, msg);
    }
    answer_detail(req, 500, "no_such_stage", at);
}

void seda__l_http_answer_done(seda_env_t *env, int outcome, void *ud)
{
    seda_http_req_t *req = ud;
    if (outcome == SEDA_DEAD_LETTERED) {
        const char *why = seda_env_header(env, "x-dead-reason");
        const char *from = seda_env_header(env, "x-dead-from");
        const char *missing = seda_env_header(env, "x-dead-stage");
        if (missing && why && strcmp(why, "no_such_stage") == 0) {
            seda__l_http_answer_missing(req, missing, from);
            return;
        }
        char at[100] = "";
        if (from)
            snprintf(at, sizeof at, " (stage %s)", from);
        answer_detail(req, 500, why ? why : "dead_lettered", at);
        return;
    }
    if (outcome != SEDA_COMPLETED) {
        seda__l_http_answer_plain(req, 503, "dropped");
        return;
    }
    size_t len;
    const void *p = seda_env_payload(env, &len);
    struct answer a = { 0 };
    if (answer_from(&a, p, len, seda_env_payload_kind(env)) != 0) {
        free(a.names.p);
        free(a.json.p);
        /* What JSON could not carry, by its path (nan, inf). */
        char at[220] = "";
        if (a.why[0])
            snprintf(at, sizeof at, " (%s)", a.why);
        answer_detail(req, 500, "bad_response", at);
        return;
    }
    if (a.bad_st) {
        /* 1xx would leave the client waiting for a final answer, 6xx and
         * up are no class of HTTP: the handler's mistake, said. */
        char detail[120], line[200];
        snprintf(detail, sizeof detail, ": the handler's status %.15g is "
                 "outside 200-599", a.bad_status);
        snprintf(line, sizeof line, "listen: %s %s%s",
                 seda_http_req_method(req), seda_http_req_path(req), detail);
        seda_log_write(SEDA_LOG_ERROR, NULL, line);
        free(a.names.p);
        free(a.json.p);
        answer_detail(req, 500, "bad_status", detail);
        return;
    }
    if (a.bad[0]) {
        char id[SEDA_ID_MAX];
        answer_log(seda_env_to(env), seda_env_id(env, id), a.bad);
    }
    answer_send(req, &a);
}
