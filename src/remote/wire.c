/* SPDX-License-Identifier: MIT */
/*
 * wire.c -- the stage message (metadata in Seda-* headers, user headers
 * plain, the payload as the body), the completion message and the
 * escapes they use (the format is described in wire.h and docs/wire.md).
 *
 * DESIGN
 *   Reading takes untrusted input (anyone may publish on a stage's
 *   subject): every header is checked before it is used, and a refusal
 *   names the header and what was wrong.  The completion is decoded in
 *   two passes: the first validates and measures, the second copies the
 *   strings, NUL-terminated, into one allocation.
 *
 *   Sections: buffers, writing, reading (completion), escapes, the stage
 *   message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/seda_int.h"
#include "wire.h"

/* ---- buffers ---- */

int seda__rbuf_put(struct rbuf *b, const void *p, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len)
        return SEDA_ENOMEM;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *np = seda__realloc(b->p, cap);
        if (!np)
            return SEDA_ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

void seda__rbuf_free(struct rbuf *b)
{
    seda__free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- writing ---- */

static int put_u8(struct rbuf *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    return seda__rbuf_put(b, &c, 1);
}

static int put_uv(struct rbuf *b, uint64_t v)
{
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    return seda__rbuf_put(b, tmp, (size_t)n);
}

static int put_str(struct rbuf *b, const char *s)
{
    size_t n = strlen(s);
    int rc = put_uv(b, n);
    return rc ? rc : seda__rbuf_put(b, s, n);
}

int seda__rw_done_encode(struct rbuf *b, const struct rw_done *d)
{
    if (!d->id || !*d->id || !d->stage || d->outcome < 0 ||
        d->outcome > 2 || d->kind < 0 || d->kind > 255 || d->nh < 0 ||
        d->nh > SEDA_RW_MAX_HEADERS || (d->nh && !d->hdr) ||
        (d->plen && !d->payload))
        return SEDA_EINVAL;
    size_t start = b->len;
    int rc = seda__rbuf_put(b, "SDC", 3);
    rc = rc ? rc : put_u8(b, SEDA_RW_VERSION);
    rc = rc ? rc : put_u8(b, (unsigned)d->outcome);
    rc = rc ? rc : put_u8(b, (unsigned)d->kind);
    rc = rc ? rc : put_u8(b, d->sender ? 2u : 0u);
    rc = rc ? rc : put_str(b, d->id);
    rc = rc ? rc : put_str(b, d->stage);
    if (d->sender)
        rc = rc ? rc : put_str(b, d->sender);
    rc = rc ? rc : put_uv(b, (uint64_t)d->nh);
    for (int i = 0; i < 2 * d->nh && !rc; i++)
        rc = put_str(b, d->hdr[i]);
    rc = rc ? rc : seda__rbuf_put(b, d->payload, d->plen);
    if (rc)
        b->len = start;
    return rc;
}

/* ---- reading ---- */

struct rd {
    const unsigned char *p;
    size_t len;
    size_t pos;
    const char *err;            /* first problem, static text */
};

static bool rd_fail(struct rd *r, const char *why)
{
    if (!r->err)
        r->err = why;
    return false;
}

static bool rd_u8(struct rd *r, unsigned *v)
{
    if (r->pos + 1 > r->len)
        return rd_fail(r, "truncated");
    *v = r->p[r->pos++];
    return true;
}

static bool rd_uv(struct rd *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        unsigned c;
        if (!rd_u8(r, &c))
            return false;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return rd_fail(r, "a length is malformed");
}

/* A string: its offset and length in the body; it may not hold a NUL. */
static bool rd_str(struct rd *r, size_t *off, size_t *n, size_t max,
                   const char *what)
{
    uint64_t len;
    if (!rd_uv(r, &len))
        return false;
    if (len > r->len - r->pos)
        return rd_fail(r, "truncated");
    if (len > max)
        return rd_fail(r, what);
    if (memchr(r->p + r->pos, 0, (size_t)len))
        return rd_fail(r, what);
    *off = r->pos;
    *n = (size_t)len;
    r->pos += (size_t)len;
    return true;
}

/* The second pass: strings copied, NUL-terminated, into one block. */
struct sink {
    char *mem;
    size_t used;
};

static const char *sink_str(struct sink *s, const struct rd *r, size_t off,
                            size_t n)
{
    char *d = s->mem + s->used;
    memcpy(d, r->p + off, n);
    d[n] = '\0';
    s->used += n + 1;
    return d;
}

static bool check_magic(struct rd *r, const char *magic, const char *what,
                        char *err, size_t errlen)
{
    if (r->len < 4 || memcmp(r->p, magic, 3) != 0) {
        snprintf(err, errlen, "not a seda %s (no %s header)", what, magic);
        return false;
    }
    if (r->p[3] != SEDA_RW_VERSION) {
        snprintf(err, errlen, "%s version %u unknown (this build reads %d)",
                 what, r->p[3], SEDA_RW_VERSION);
        return false;
    }
    r->pos = 4;
    return true;
}

int seda__rw_done_decode(const void *body, size_t len, struct rw_done *out,
                         void **mem, char *err, size_t errlen)
{
    struct rd r = { body, len, 0, NULL };
    *mem = NULL;
    memset(out, 0, sizeof *out);
    if (!check_magic(&r, "SDC", "completion", err, errlen))
        return -1;
    unsigned outcome = 0, kind = 0, flags = 0;
    size_t id_off = 0, id_n = 0, st_off = 0, st_n = 0, se_off = 0, se_n = 0;
    uint64_t nh = 0;
    size_t h0 = 0, strings = 0;
    bool ok = rd_u8(&r, &outcome) && rd_u8(&r, &kind) && rd_u8(&r, &flags) &&
              rd_str(&r, &id_off, &id_n, SEDA_ID_MAX - 1,
                     "id is too long or holds a NUL") &&
              rd_str(&r, &st_off, &st_n, SEDA_NAME_MAX,
                     "stage is not a stage name");
    if (ok && (outcome > 2 || (flags & ~2u) || id_n == 0))
        ok = rd_fail(&r, "outcome, flags or id out of range");
    if (ok && (flags & 2))
        ok = rd_str(&r, &se_off, &se_n, SIZE_MAX, "sender holds a NUL");
    if (ok)
        ok = rd_uv(&r, &nh);
    if (ok && nh > SEDA_RW_MAX_HEADERS)
        ok = rd_fail(&r, "too many headers");
    h0 = r.pos;
    for (uint64_t i = 0; ok && i < 2 * nh; i++) {
        size_t o, n;
        ok = rd_str(&r, &o, &n, SIZE_MAX, "a header holds a NUL");
        strings += n + 1;
    }
    if (!ok) {
        snprintf(err, errlen, "completion: %s", r.err);
        return -1;
    }
    size_t ptrs = sizeof(char *) * (size_t)(nh ? 2 * nh : 1);
    struct sink s = { seda__malloc(ptrs + strings + id_n + st_n + se_n + 3),
                      ptrs };
    if (!s.mem) {
        snprintf(err, errlen, "completion: out of memory");
        return -1;
    }
    const char **hdr = (const char **)(void *)s.mem;
    out->id = sink_str(&s, &r, id_off, id_n);
    out->stage = sink_str(&s, &r, st_off, st_n);
    out->sender = (flags & 2) ? sink_str(&s, &r, se_off, se_n) : NULL;
    struct rd again = { body, len, h0, NULL };
    for (uint64_t i = 0; i < 2 * nh; i++) {
        size_t o, n;
        rd_str(&again, &o, &n, SIZE_MAX, "");
        hdr[i] = sink_str(&s, &again, o, n);
    }
    out->outcome = (int)outcome;
    out->kind = (int)kind;
    out->nh = (int)nh;
    out->hdr = nh ? hdr : NULL;
    out->payload = r.p + r.pos;
    out->plen = len - r.pos;
    *mem = s.mem;
    return 0;
}

/* ---- header escaping ---- */

static const char hexd[] = "0123456789ABCDEF";

static int put_esc(struct rbuf *b, unsigned char c)
{
    char e[3] = { '%', hexd[c >> 4], hexd[c & 15] };
    return seda__rbuf_put(b, e, 3);
}

int seda__rw_val_escape(struct rbuf *b, const char *val)
{
    size_t start = b->len, n = strlen(val);
    int rc = 0;
    if (n == 0)
        rc = seda__rbuf_put(b, "%", 2);
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)val[i];
        bool blank = c == ' ' || c == '\t';
        bool edge = i == 0 || i == n - 1;
        if (c < 0x20 || c == 0x7f || c == '%' || (blank && edge))
            rc = put_esc(b, c);
        else
            rc = seda__rbuf_put(b, &c, 1);
    }
    if (n && !rc)
        rc = seda__rbuf_put(b, "", 1);
    if (rc)
        b->len = start;
    return rc;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Unescape s[0..n) into b with a NUL; -1 on a bad or NUL escape. */
static int unescape(struct rbuf *b, const char *s, size_t n)
{
    size_t start = b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = n - i >= 3 ? hexv(s[i + 1]) : -1;
            int lo = n - i >= 3 ? hexv(s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
                b->len = start;
                return -1;
            }
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        }
        if (seda__rbuf_put(b, &c, 1)) {
            b->len = start;
            return SEDA_ENOMEM;
        }
    }
    if (seda__rbuf_put(b, "", 1)) {
        b->len = start;
        return SEDA_ENOMEM;
    }
    return 0;
}

int seda__rw_val_unescape(struct rbuf *b, const char *nv)
{
    if (strcmp(nv, "%") == 0)
        return seda__rbuf_put(b, "", 1);
    return unescape(b, nv, strlen(nv));
}

/* ---- the stage message ---- */

bool seda__rw_key_plain(const char *key)
{
    static const char *const reserved[] = { "nats-", "seda-" };
    static const char *const exact[] = { "content-type", "status",
                                         "description" };
    if (!*key)
        return false;
    for (size_t i = 0; i < 2; i++)
        if (strncasecmp(key, reserved[i], 5) == 0)
            return false;
    for (size_t i = 0; i < 3; i++)
        if (strcasecmp(key, exact[i]) == 0)
            return false;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || strchr("!#$&'*+.^_`|~-", *p)))
            return false;
    return true;
}

bool seda__rw_val_plain(const char *val)
{
    size_t n = strlen(val);
    if (n == 0 || val[0] == ' ' || val[0] == '\t' || val[n - 1] == ' ' ||
        val[n - 1] == '\t')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)val[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

static int pct(struct rbuf *b, const char *s)
{
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
        bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
                    *p == '~' || *p == '-';
        rc = keep ? seda__rbuf_put(b, p, 1) : put_esc(b, *p);
    }
    return rc;
}

int seda__rw_hdr_pack(struct rbuf *b, const char *key, const char *val)
{
    size_t start = b->len;
    int rc = pct(b, key);
    rc = rc ? rc : seda__rbuf_put(b, "=", 1);
    rc = rc ? rc : pct(b, val);
    rc = rc ? rc : seda__rbuf_put(b, "", 1);
    if (rc)
        b->len = start;
    return rc;
}

int seda__rw_hdr_unpack(struct rbuf *b, const char *packed, size_t *voff)
{
    const char *eq = strchr(packed, '=');
    if (!eq)
        return -1;
    size_t start = b->len;
    int rc = unescape(b, packed, (size_t)(eq - packed));
    *voff = b->len;
    if (rc == 0)
        rc = unescape(b, eq + 1, strlen(eq + 1));
    if (rc) {
        b->len = start;
        return -1;
    }
    return 0;
}

const char *seda__rw_kind_type(int kind)
{
    return kind == 0 ? "application/octet-stream" : "application/x-seda";
}

int seda__rw_type_kind(const char *ct)
{
    if (!ct)
        return -1;
    /* Parameters (";charset=...") do not change the kind. */
    size_t n = strcspn(ct, "; \t");
    if (n == 24 && strncasecmp(ct, "application/octet-stream", n) == 0)
        return 0;
    if (n == 18 && strncasecmp(ct, "application/x-seda", n) == 0)
        return 1;
    return -1;
}

/* A slip entry: a stage name, or "nats:<subject>" (a subject without
 * wildcards, blanks or commas). */
static bool slip_ok(const char *h)
{
    if (strncmp(h, "nats:", 5) == 0) {
        const char *s = h + 5;
        size_t n = strlen(s);
        if (n == 0 || n > 255 || s[0] == '.' || s[n - 1] == '.' ||
            strstr(s, ".."))
            return false;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
            if (*p <= 0x20 || *p == 0x7f || *p == ',' || *p == '*' ||
                *p == '>')
                return false;
        return true;
    }
    return seda__valid_name(h);
}

/* The keys set plainly so far: a new key collides with one of them
 * when either is a prefix of the other (see wire.h). */
struct keyset {
    const char *small[24];
    const char **k;
    int n, cap;
};

static bool keyset_clash(const struct keyset *s, const char *key)
{
    size_t kl = strlen(key);
    for (int i = 0; i < s->n; i++) {
        size_t l = strlen(s->k[i]);
        if (strncmp(s->k[i], key, l < kl ? l : kl) == 0)
            return true;
    }
    return false;
}

static int keyset_add(struct keyset *s, const char *key)
{
    if (s->n == s->cap) {
        int cap = s->cap * 2;
        const char **k = seda__malloc(sizeof *k * (size_t)cap);
        if (!k)
            return SEDA_ENOMEM;
        memcpy(k, s->k, sizeof *k * (size_t)s->n);
        if (s->k != s->small)
            seda__free(s->k);
        s->k = k;
        s->cap = cap;
    }
    s->k[s->n++] = key;
    return 0;
}

/* Set key: value on m, and note key (a string that outlives the set). */
static int hset(natsMsg *m, struct keyset *ks, const char *key,
                const char *val)
{
    if (natsMsgHeader_Set(m, key, val) != NATS_OK)
        return SEDA_ENOMEM;
    return keyset_add(ks, key);
}

static int hset_esc(natsMsg *m, struct keyset *ks, const char *key,
                    const char *val, struct rbuf *tmp)
{
    tmp->len = 0;
    if (seda__rw_val_escape(tmp, val) != 0)
        return SEDA_ENOMEM;
    return hset(m, ks, key, (const char *)tmp->p);
}

static const char *const prio_names[] = { "normal", "high", "low" };

static bool env_ok(const struct rw_env *e)
{
    if (!e->id || !*e->id || strlen(e->id) >= SEDA_ID_MAX || e->kind < 0 ||
        e->kind > 255 || e->priority < 0 || e->priority > 2 ||
        e->attempts < 1 || e->attempts > 65535 || e->rhop < 1 ||
        e->nslip < 0 || e->nslip > SEDA_RW_MAX_SLIP ||
        (e->nslip && !e->slip) || (e->plen && !e->payload) ||
        (e->origin && !*e->origin) || e->plen > INT32_MAX)
        return false;
    for (int i = 0; i < e->nslip; i++)
        if (!slip_ok(e->slip[i]))
            return false;
    return true;
}

/* The Seda-* headers and Content-Type of e. */
static int put_meta(natsMsg *m, struct keyset *ks, const char *msgid,
                    const struct rw_env *e, struct rbuf *tmp)
{
    char num[24];
    int rc = hset(m, ks, "Nats-Msg-Id", msgid);
    rc = rc ? rc : hset_esc(m, ks, "Seda-Id", e->id, tmp);
    /* The defaults (attempt 1, normal priority) go unsaid: each header
     * costs cnats three allocations and the server bytes to scan. */
    snprintf(num, sizeof num, "%d", e->attempts);
    if (e->attempts != 1)
        rc = rc ? rc : hset(m, ks, "Seda-Attempts", num);
    if (e->priority != SEDA_PRIO_NORMAL)
        rc = rc ? rc : hset(m, ks, "Seda-Priority",
                            prio_names[e->priority]);
    rc = rc ? rc : hset(m, ks, "Content-Type",
                        e->content_type ? e->content_type
                                        : seda__rw_kind_type(e->kind));
    if (!rc && e->sender)
        rc = hset_esc(m, ks, "Seda-Sender", e->sender, tmp);
    if (!rc && e->origin)
        rc = hset_esc(m, ks, "Seda-Origin", e->origin, tmp);
    if (!rc && e->rhop > 1) {
        snprintf(num, sizeof num, "%u", (unsigned)e->rhop);
        rc = hset(m, ks, "Seda-Hop", num);
    }
    if (!rc && e->nslip) {
        tmp->len = 0;
        for (int i = 0; i < e->nslip && !rc; i++) {
            rc = i ? seda__rbuf_put(tmp, ",", 1) : 0;
            rc = rc ? rc : seda__rbuf_put(tmp, e->slip[i],
                                          strlen(e->slip[i]));
        }
        rc = rc ? rc : seda__rbuf_put(tmp, "", 1);
        rc = rc ? rc : hset(m, ks, "Seda-Slip", (const char *)tmp->p);
    }
    /* Seda-Header's name, so that no plain user key clashes with it
     * (its values are added last, when there are any). */
    rc = rc ? rc : keyset_add(ks, "Seda-Header");
    return rc;
}

int seda__rw_msg_new(natsMsg **out, const char *subject, const char *reply,
                     const char *msgid, const struct rw_env *e, int nh,
                     const char *const *hdr)
{
    *out = NULL;
    if (!env_ok(e) || !msgid || !*msgid || nh < 0 || (nh && !hdr))
        return SEDA_EINVAL;
    natsMsg *m = NULL;
    if (natsMsg_Create(&m, subject, reply, (const char *)e->payload,
                       (int)e->plen) != NATS_OK)
        return SEDA_ENOMEM;
    struct keyset ks = { .n = 0, .cap = 24 };
    ks.k = ks.small;
    struct rbuf tmp = { 0 }, pk = { 0 };
    int rc = put_meta(m, &ks, msgid, e, &tmp);
    int packed = 0;
    for (int i = 0; i < nh && !rc; i++) {
        const char *k = hdr[2 * i], *v = hdr[2 * i + 1];
        if (seda__rw_key_plain(k) && seda__rw_val_plain(v) &&
            !keyset_clash(&ks, k)) {
            rc = hset(m, &ks, k, v);
        } else {
            rc = seda__rw_hdr_pack(&pk, k, v);
            packed++;
        }
    }
    /* Seda-Header: one value per header that could not travel plain. */
    const char *pv = (const char *)pk.p;
    for (int i = 0; i < packed && !rc; i++) {
        if (natsMsgHeader_Add(m, "Seda-Header", pv) != NATS_OK)
            rc = SEDA_ENOMEM;
        pv += strlen(pv) + 1;
    }
    seda__rbuf_free(&pk);
    if (ks.k != ks.small)
        seda__free(ks.k);
    seda__rbuf_free(&tmp);
    if (rc) {
        natsMsg_Destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ---- reading the stage message ---- */

static bool reserved_key(const char *k)
{
    return strncasecmp(k, "nats-", 5) == 0 || strncasecmp(k, "seda-", 5) == 0
           || strcasecmp(k, "content-type") == 0 ||
           strcasecmp(k, "status") == 0 || strcasecmp(k, "description") == 0;
}

/* Strings gathered into in->strs by offset (the buffer may move while it
 * grows); the pointers are made at the end. */
struct gather {
    struct rbuf *s;
    size_t *off;
    int n, cap;
};

static int g_mark(struct gather *g)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 32;
        size_t *o = seda__realloc(g->off, sizeof *o * (size_t)cap);
        if (!o)
            return -1;
        g->off = o;
        g->cap = cap;
    }
    g->off[g->n] = g->s->len;
    return g->n++;
}

/* Copy s (n bytes) with a NUL; its index, or -1 out of memory. */
static int g_str(struct gather *g, const char *s, size_t n)
{
    int i = g_mark(g);
    if (i < 0 || seda__rbuf_put(g->s, s, n) || seda__rbuf_put(g->s, "", 1))
        return -1;
    return i;
}

/* A Seda-Id, -Sender or -Origin header unescaped; -1 absent, -2 bad. */
static int g_esc(struct gather *g, natsMsg *m, const char *key)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(m, key, &v) != NATS_OK || !v)
        return -1;
    int i = g_mark(g);
    if (i < 0 || seda__rw_val_unescape(g->s, v) != 0)
        return -2;
    return i;
}

static bool read_num(natsMsg *m, const char *key, uint64_t lo, uint64_t hi,
                     uint64_t *out)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(m, key, &v) != NATS_OK || !v)
        return true;                    /* absent: the default */
    char *end = NULL;
    if (*v < '0' || *v > '9')
        return false;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

static int read_slip(struct gather *g, natsMsg *m, int *first, int *n,
                     char *err, size_t errlen)
{
    const char *v = NULL;
    *first = -1;
    *n = 0;
    if (natsMsgHeader_Get(m, "Seda-Slip", &v) != NATS_OK || !v || !*v)
        return 0;
    for (const char *p = v;;) {
        size_t l = strcspn(p, ",");
        while (l && (*p == ' ' || *p == '\t'))
            p++, l--;
        size_t t = l;
        while (t && (p[t - 1] == ' ' || p[t - 1] == '\t'))
            t--;
        int i = g_str(g, p, t);
        if (i < 0)
            return -1;
        if (*first < 0)
            *first = i;
        const char *h = (const char *)g->s->p + g->off[i];
        if (++*n > SEDA_RW_MAX_SLIP) {
            snprintf(err, errlen, "Seda-Slip: more than %d hops (a message "
                     "carries at most %d)", SEDA_RW_MAX_SLIP,
                     SEDA_RW_MAX_SLIP);
            return -2;
        }
        if (!slip_ok(h)) {
            snprintf(err, errlen, "Seda-Slip: '%.80s' is not a stage name "
                     "nor nats:<subject>", h);
            return -2;
        }
        p += l;
        if (*p != ',')
            break;
        p++;
    }
    return 0;
}

static int read_user(struct gather *g, natsMsg *m, int *first, int *n,
                     char *err, size_t errlen)
{
    const char **keys = NULL;
    int nk = 0, rc = 0;
    *first = -1;
    *n = 0;
    if (natsMsgHeader_Keys(m, &keys, &nk) != NATS_OK)
        nk = 0;
    for (int i = 0; i < nk && !rc; i++) {
        const char *v = NULL;
        if (reserved_key(keys[i]) ||
            natsMsgHeader_Get(m, keys[i], &v) != NATS_OK || !v)
            continue;
        int ki = g_str(g, keys[i], strlen(keys[i]));
        rc = ki < 0 || g_str(g, v, strlen(v)) < 0 ? -1 : 0;
        if (*first < 0)
            *first = ki;
        ++*n;
    }
    free((void *)keys);                 /* cnats allocates it with malloc */
    const char **vals = NULL;
    int nv = 0;
    if (!rc && natsMsgHeader_Values(m, "Seda-Header", &vals, &nv) != NATS_OK)
        nv = 0;
    for (int i = 0; i < nv && !rc; i++) {
        int ki = g_mark(g);
        size_t voff;
        if (ki < 0)
            rc = -1;
        else if (seda__rw_hdr_unpack(g->s, vals[i], &voff) != 0) {
            snprintf(err, errlen, "Seda-Header: '%.80s' is not "
                     "<key>=<value> in %%XX escapes", vals[i]);
            rc = -2;
        } else if (g_mark(g) < 0) {
            rc = -1;
        } else {
            g->off[g->n - 1] = voff;
            if (*first < 0)
                *first = ki;
            ++*n;
        }
    }
    free((void *)vals);
    return rc;
}

void seda__rw_in_free(struct rw_in *in)
{
    seda__rbuf_free(&in->strs);
    seda__free(in->hdr);
    seda__free(in->slip);
    in->hdr = NULL;
    in->slip = NULL;
}

int seda__rw_msg_read(natsMsg *m, const char *fallback_id, struct rw_in *in,
                      char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    struct gather g = { .s = &in->strs };
    const char *oom = "out of memory reading the message";
    int id = g_esc(&g, m, "Seda-Id"), se = -1, og = -1, ct = -1;
    int s0 = -1, ns = 0, h0 = -1, nh = 0, rc = 0;
    uint64_t att = 1, hop = 1;
    const char *pv = NULL;
    int prio = 0;
    /* A foreign message without Seda-Id is known by its Nats-Msg-Id (the
     * id its publisher gave it, which JetStream deduplicates by) when it
     * has one that fits; else by fallback_id (<stream>:<sequence>). */
    if (id == -1 && natsMsgHeader_Get(m, "Nats-Msg-Id", &pv) == NATS_OK &&
        pv && pv[0] && strlen(pv) < SEDA_ID_MAX)
        id = g_str(&g, pv, strlen(pv));
    pv = NULL;
    if (id == -1)
        id = g_str(&g, fallback_id, strlen(fallback_id));
    if (id < 0 || g.s->len - g.off[id] > SEDA_ID_MAX ||
        g.s->len - g.off[id] == 1) {
        snprintf(err, errlen, id == -2 ? "Seda-Id: a bad %%XX escape"
                 : id < 0 ? oom : "Seda-Id: empty or over %d bytes",
                 SEDA_ID_MAX - 1);
        rc = -1;
    }
    if (!rc && (se = g_esc(&g, m, "Seda-Sender")) == -2)
        rc = -1, snprintf(err, errlen, "Seda-Sender: a bad %%XX escape");
    if (!rc && (og = g_esc(&g, m, "Seda-Origin")) == -2)
        rc = -1, snprintf(err, errlen, "Seda-Origin: a bad %%XX escape");
    if (!rc && !read_num(m, "Seda-Attempts", 1, 65535, &att))
        rc = -1, snprintf(err, errlen, "Seda-Attempts: not 1-65535");
    if (!rc && !read_num(m, "Seda-Hop", 1, UINT32_MAX, &hop))
        rc = -1, snprintf(err, errlen, "Seda-Hop: not a count from 1");
    if (!rc && natsMsgHeader_Get(m, "Seda-Priority", &pv) == NATS_OK && pv) {
        for (prio = 0; prio < 3 && strcasecmp(pv, prio_names[prio]); prio++)
            ;
        if (prio == 3)
            rc = -1, snprintf(err, errlen, "Seda-Priority: '%.40s' is not "
                              "high, normal or low", pv);
    }
    if (!rc && natsMsgHeader_Get(m, "Content-Type", &pv) == NATS_OK && pv &&
        (ct = g_str(&g, pv, strlen(pv))) < 0)
        rc = -1, snprintf(err, errlen, "%s", oom);
    if (!rc && (rc = read_slip(&g, m, &s0, &ns, err, errlen)) == -1)
        snprintf(err, errlen, "%s", oom);
    if (!rc && (rc = read_user(&g, m, &h0, &nh, err, errlen)) == -1)
        snprintf(err, errlen, "%s", oom);
    if (!rc && ((ns && !(in->slip = seda__malloc(sizeof(char *) *
                                                  (size_t)ns))) ||
                (nh && !(in->hdr = seda__malloc(sizeof(char *) * 2 *
                                                 (size_t)nh)))))
        rc = -1, snprintf(err, errlen, "%s", oom);
    if (rc) {
        seda__free(g.off);
        return -1;
    }
    const char *base = (const char *)in->strs.p;
    struct rw_env *e = &in->env;
    e->id = base + g.off[id];
    e->sender = se >= 0 ? base + g.off[se] : NULL;
    e->origin = og >= 0 ? base + g.off[og] : NULL;
    e->content_type = ct >= 0 ? base + g.off[ct] : NULL;
    e->kind = 0;
    e->priority = prio;
    e->attempts = (int)att;
    e->rhop = (uint32_t)hop;
    for (int i = 0; i < ns; i++)
        in->slip[i] = base + g.off[s0 + i];
    e->nslip = ns;
    e->slip = ns ? in->slip : NULL;
    for (int i = 0; i < 2 * nh; i++)
        in->hdr[i] = base + g.off[h0 + i];
    in->nh = nh;
    e->payload = natsMsg_GetData(m);
    e->plen = (size_t)natsMsg_GetDataLength(m);
    if (!e->payload)
        e->payload = "";
    seda__free(g.off);
    return 0;
}
