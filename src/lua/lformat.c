/* SPDX-License-Identifier: MIT */
/*
 * lformat.c -- the payload formats of remote stages (docs/wire.md):
 * `format = "json" | "msgpack" | "raw"`, the Lua codec's bytes written
 * as JSON (libjansson), MessagePack (libmsgpack-c) or a plain string,
 * and read back into the codec's bytes.  Pure C over bytes, no Lua
 * state: the remote layer calls these on any thread (a publisher, a
 * worker routing a hop, the connection's dispatch thread), through the
 * seda_remote_format tables at the end.
 *
 * DESIGN
 *   - Writing walks the codec's bytes (the format of lcodec.c) once,
 *     building a jansson tree or packing MessagePack as it goes; what the
 *     format cannot carry exactly is refused with the path to it
 *     ("payload.items[3]: JSON cannot carry a binary string").
 *   - Reading parses with the library (untrusted input: both libraries
 *     bound what they allocate by the input) and writes the codec's
 *     bytes; JSON's null and MessagePack's nil are seda.null (the codec's
 *     null tag).  Nesting is bounded by SEDA_CODEC_MAX_DEPTH, as the
 *     codec's own decoder is.
 *   - Mappings (docs/wire.md says them to users):
 *       JSON: a table with keys 1..n only is an array, one with string
 *       keys only (or empty) an object; refused: other keys, both kinds
 *       at once, strings that are not UTF-8, nan and inf, and floats with
 *       an integral value (JSON cannot tell 2.0 from 2).  Read back, a
 *       number with an integral value in int64's range is an integer.
 *       MessagePack: exact for every codec value but nil (nil and
 *       seda.null are both nil, read back as seda.null) and the empty
 *       table (a map); strings that are not UTF-8 are bin.
 *       raw: the payload must be a string; the body is its bytes.
 *
 * Sections: paths, reading the codec, JSON, MessagePack, raw,
 * the tables.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lcodec.h"
#include "lcodec_read.h"
#include "lcodec_write.h"
#include "lseda.h"
#include "seda_lua.h"
#include "seda_remote.h"

/* ---- paths ---- */

/* The path to the value at hand, for messages: "payload.items[3]". */
struct path {
    char b[160];
    size_t n;
};

static size_t path_key(struct path *p, const char *k, size_t kl)
{
    size_t old = p->n;
    bool ident = kl > 0 && kl < 40 && !(k[0] >= '0' && k[0] <= '9');
    for (size_t i = 0; i < kl && ident; i++)
        ident = (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z')
                || (k[i] >= '0' && k[i] <= '9') || k[i] == '_';
    int w = ident ? snprintf(p->b + p->n, sizeof p->b - p->n, ".%.*s",
                             (int)kl, k)
                  : snprintf(p->b + p->n, sizeof p->b - p->n, "[\"%.*s\"]",
                             (int)(kl < 40 ? kl : 40), k);
    if (w > 0)
        p->n += (size_t)w < sizeof p->b - p->n ? (size_t)w
                                                : sizeof p->b - p->n - 1;
    return old;
}

static size_t path_idx(struct path *p, long long i)
{
    size_t old = p->n;
    int w = snprintf(p->b + p->n, sizeof p->b - p->n, "[%lld]", i);
    if (w > 0)
        p->n += (size_t)w < sizeof p->b - p->n ? (size_t)w
                                                : sizeof p->b - p->n - 1;
    return old;
}

static void path_back(struct path *p, size_t old)
{
    p->n = old;
    p->b[old] = '\0';
}

/* A refusal: "<path>: <what>" into the caller's err. */
struct ferr {
    char *err;
    size_t errlen;
    bool set;
};

static int refuse(struct ferr *e, const struct path *p, const char *fmt,
                  ...) __attribute__((format(printf, 3, 4)));

static int refuse(struct ferr *e, const struct path *p, const char *fmt, ...)
{
    if (e->set)
        return -1;
    e->set = true;
    int n = snprintf(e->err, e->errlen, "%s: ", p->b);
    if (n < 0 || (size_t)n >= e->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + n, e->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- reading the codec ---- */

static bool utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1
                 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || (k && c < 0xc2) || n - i - 1 < k)
            return false;
        uint32_t cp = k ? c & (0x3fu >> k) : c;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3fu);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += k + 1;
    }
    return true;
}

static const char *cv_name(const struct cval *v)
{
    static const char *const n[] = { "nil", "seda.null", "a boolean",
                                     "an integer", "a float", "a string",
                                     "a table" };
    return n[v->t];
}

/* ---- JSON ---- */

static json_t *to_json(struct cr *r, struct path *path, int depth,
                       struct ferr *e);

static json_t *json_table(struct cr *r, const struct cval *v,
                          struct path *path, int depth, struct ferr *e)
{
    if (depth >= SEDA_CODEC_MAX_DEPTH) {
        refuse(e, path, "nested deeper than %d", SEDA_CODEC_MAX_DEPTH);
        return NULL;
    }
    if (v->narr && v->nrec) {
        refuse(e, path, "JSON cannot carry a table with both list items "
               "and other keys");
        return NULL;
    }
    json_t *t = v->narr ? json_array() : json_object();
    for (uint64_t i = 0; t && i < v->narr; i++) {
        size_t old = path_idx(path, (long long)i + 1);
        json_t *x = to_json(r, path, depth + 1, e);
        path_back(path, old);
        if (!x || json_array_append_new(t, x) != 0) {
            json_decref(t);
            return NULL;
        }
    }
    for (uint64_t i = 0; t && i < v->nrec; i++) {
        struct cval k;
        if (seda__l_cr_head(r, &k) != 0) {
            refuse(e, path, "not the payload codec's bytes");
            json_decref(t);
            return NULL;
        }
        if (k.t != CV_STR || !utf8_ok(k.s, k.len) ||
            memchr(k.s, 0, k.len)) {
            refuse(e, path, "JSON cannot carry the key %s (object keys are "
                   "UTF-8 strings)", k.t == CV_STR ? "(a binary string)"
                                                    : cv_name(&k));
            json_decref(t);
            return NULL;
        }
        size_t old = path_key(path, (const char *)k.s, k.len);
        json_t *x = to_json(r, path, depth + 1, e);
        path_back(path, old);
        if (!x || json_object_setn_new_nocheck(t, (const char *)k.s, k.len,
                                               x) != 0) {
            json_decref(t);
            return NULL;
        }
    }
    return t;
}

static json_t *to_json(struct cr *r, struct path *path, int depth,
                       struct ferr *e)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0) {
        refuse(e, path, "not the payload codec's bytes");
        return NULL;
    }
    switch (v.t) {
    case CV_NIL:
    case CV_NULL:
        return json_null();
    case CV_BOOL:
        return json_boolean(v.i);
    case CV_INT:
        return json_integer((json_int_t)v.i);
    case CV_FLOAT:
        if (!isfinite(v.f)) {
            refuse(e, path, "JSON cannot carry %s", isnan(v.f) ? "nan"
                   : v.f > 0 ? "inf" : "-inf");
            return NULL;
        }
        if (v.f == floor(v.f) && v.f >= -0x1p63 && v.f < 0x1p63) {
            refuse(e, path, "JSON cannot tell the float %.17g from an "
                   "integer (send math.tointeger(x), or use format "
                   "\"msgpack\")", v.f);
            return NULL;
        }
        return json_real(v.f);
    case CV_STR:
        if (!utf8_ok(v.s, v.len)) {
            refuse(e, path, "JSON cannot carry a binary string (not UTF-8; "
                   "use format \"msgpack\")");
            return NULL;
        }
        return json_stringn_nocheck((const char *)v.s, v.len);
    default:
        return json_table(r, &v, path, depth, e);
    }
}

static int json_enc(int kind, const void *p, size_t len, void **out,
                    size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    struct path path = { "payload", 7 };
    struct ferr e = { err, errlen, false };
    json_t *root;
    if (kind == SEDA_KIND_RAW) {        /* a Lua string */
        if (!utf8_ok(p, len))
            return refuse(&e, &path, "JSON cannot carry a binary string "
                          "(not UTF-8; use format \"msgpack\")");
        root = json_stringn_nocheck(p, len);
    } else {
        struct cr r = { p, (const unsigned char *)p + len };
        root = to_json(&r, &path, 0, &e);
    }
    if (!root) {
        if (!e.set)
            snprintf(err, errlen, "out of memory writing JSON");
        return -1;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_ENCODE_ANY |
                                   JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!s) {
        snprintf(err, errlen, "out of memory writing JSON");
        return -1;
    }
    *out = s;
    *outlen = strlen(s);
    return 0;
}

static void from_json(struct buf *b, json_t *j, int depth, bool *deep)
{
    if (depth >= SEDA_CODEC_MAX_DEPTH) {
        *deep = true;
        return;
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        seda__l_cw_byte(b, SEDA_TAG_NULL);
        break;
    case JSON_TRUE:
        seda__l_cw_byte(b, SEDA_TAG_TRUE);
        break;
    case JSON_FALSE:
        seda__l_cw_byte(b, SEDA_TAG_FALSE);
        break;
    case JSON_INTEGER:
        seda__l_cw_int(b, (int64_t)json_integer_value(j));
        break;
    case JSON_REAL: {
        /* 2.0 is 2: JSON does not tell them apart (nor do writers). */
        double d = json_real_value(j);
        if (d == floor(d) && d >= -0x1p63 && d < 0x1p63)
            seda__l_cw_int(b, (int64_t)d);
        else
            seda__l_cw_float(b, d);
        break;
    }
    case JSON_STRING:
        seda__l_cw_str(b, json_string_value(j), json_string_length(j));
        break;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        seda__l_cw_table(b, n, 0);
        for (size_t i = 0; i < n; i++)
            from_json(b, json_array_get(j, i), depth + 1, deep);
        break;
    }
    case JSON_OBJECT: {
        seda__l_cw_table(b, 0, json_object_size(j));
        const char *k;
        size_t kl;
        json_t *x;
        json_object_keylen_foreach(j, k, kl, x) {
            seda__l_cw_str(b, k, kl);
            from_json(b, x, depth + 1, deep);
        }
        break;
    }
    }
}

static int json_dec(const void *p, size_t len, int *kind, void **out,
                    size_t *outlen, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(p, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!root) {
        snprintf(err, errlen, "JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        return -1;
    }
    struct buf b = { 0 };
    bool deep = false;
    from_json(&b, root, 0, &deep);
    json_decref(root);
    if (b.failed || deep) {
        free(b.p);
        snprintf(err, errlen, deep ? "JSON: nested deeper than %d"
                                   : "out of memory reading JSON",
                 SEDA_CODEC_MAX_DEPTH);
        return -1;
    }
    *kind = SEDA_KIND_LUA;
    *out = b.p;
    *outlen = b.len;
    return 0;
}

/* ---- MessagePack ---- */

static int to_mp(struct cr *r, msgpack_packer *pk, struct path *path,
                 int depth, struct ferr *e)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0)
        return refuse(e, path, "not the payload codec's bytes");
    switch (v.t) {
    case CV_NIL:
    case CV_NULL:
        return msgpack_pack_nil(pk);
    case CV_BOOL:
        return v.i ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case CV_INT:
        return msgpack_pack_int64(pk, v.i);
    case CV_FLOAT:
        return msgpack_pack_double(pk, v.f);
    case CV_STR:
        if (v.len > UINT32_MAX)
            return refuse(e, path, "a string over 4 GiB");
        if (utf8_ok(v.s, v.len))
            return msgpack_pack_str_with_body(pk, v.s, v.len);
        return msgpack_pack_bin_with_body(pk, v.s, v.len);
    default:
        break;
    }
    if (depth >= SEDA_CODEC_MAX_DEPTH)
        return refuse(e, path, "nested deeper than %d",
                      SEDA_CODEC_MAX_DEPTH);
    bool array = v.narr && !v.nrec;
    int rc = array ? msgpack_pack_array(pk, v.narr)
                   : msgpack_pack_map(pk, v.narr + v.nrec);
    for (uint64_t i = 0; !rc && i < v.narr; i++) {
        if (!array)
            rc = msgpack_pack_int64(pk, (int64_t)i + 1);
        size_t old = path_idx(path, (long long)i + 1);
        rc = rc ? rc : to_mp(r, pk, path, depth + 1, e);
        path_back(path, old);
    }
    for (uint64_t i = 0; !rc && i < v.nrec; i++) {
        const unsigned char *kp = r->p;
        struct cval k;
        if (seda__l_cr_head(r, &k) != 0)
            return refuse(e, path, "not the payload codec's bytes");
        r->p = kp;
        rc = to_mp(r, pk, path, depth + 1, e);  /* the key */
        size_t old = k.t == CV_STR ? path_key(path, (const char *)k.s, k.len)
                     : k.t == CV_INT ? path_idx(path, (long long)k.i)
                                     : path_key(path, "?", 1);
        rc = rc ? rc : to_mp(r, pk, path, depth + 1, e);
        path_back(path, old);
    }
    return rc;
}

static int mp_enc(int kind, const void *p, size_t len, void **out,
                  size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    struct cr r = { p, (const unsigned char *)p + len };
    struct path path = { "payload", 7 };
    struct ferr e = { err, errlen, false };
    int rc;
    if (kind == SEDA_KIND_RAW)          /* a Lua string */
        rc = len > UINT32_MAX ? refuse(&e, &path, "a string over 4 GiB")
             : utf8_ok(p, len) ? msgpack_pack_str_with_body(&pk, p, len)
                               : msgpack_pack_bin_with_body(&pk, p, len);
    else
        rc = to_mp(&r, &pk, &path, 0, &e);
    if (rc != 0) {
        if (!e.set)
            snprintf(err, errlen, "out of memory writing MessagePack");
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    *outlen = sb.size;                  /* release zeroes it */
    *out = msgpack_sbuffer_release(&sb);
    if (!*out) {                        /* an empty buffer: never here */
        *out = malloc(1);
        if (!*out)
            return -1;
    }
    return 0;
}

static void mp_refuse(char *err, size_t errlen, bool *bad, const char *why)
{
    if (!*bad)
        snprintf(err, errlen, "MessagePack: %s", why);
    *bad = true;
}

static void from_mp(struct buf *b, const msgpack_object *o, int depth,
                    bool key, char *err, size_t errlen, bool *bad)
{
    if (depth >= SEDA_CODEC_MAX_DEPTH)
        return mp_refuse(err, errlen, bad, "nested too deep");
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        if (key)
            return mp_refuse(err, errlen, bad, "a map key is nil");
        seda__l_cw_byte(b, SEDA_TAG_NULL);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        seda__l_cw_byte(b, o->via.boolean ? SEDA_TAG_TRUE : SEDA_TAG_FALSE);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > INT64_MAX)
            return mp_refuse(err, errlen, bad, "an integer over 2^63-1");
        seda__l_cw_int(b, (int64_t)o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        seda__l_cw_int(b, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (key && isnan(o->via.f64))
            return mp_refuse(err, errlen, bad, "a map key is nan");
        seda__l_cw_float(b, o->via.f64);
        break;
    case MSGPACK_OBJECT_STR:
        seda__l_cw_str(b, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        seda__l_cw_str(b, o->via.bin.ptr, o->via.bin.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
        seda__l_cw_table(b, o->via.array.size, 0);
        for (uint32_t i = 0; i < o->via.array.size && !*bad; i++)
            from_mp(b, &o->via.array.ptr[i], depth + 1, false, err, errlen,
                    bad);
        break;
    case MSGPACK_OBJECT_MAP:
        seda__l_cw_table(b, 0, o->via.map.size);
        for (uint32_t i = 0; i < o->via.map.size && !*bad; i++) {
            from_mp(b, &o->via.map.ptr[i].key, depth + 1, true, err, errlen,
                    bad);
            from_mp(b, &o->via.map.ptr[i].val, depth + 1, false, err,
                    errlen, bad);
        }
        break;
    default: {
        char why[64];
        snprintf(why, sizeof why, "ext type %d is not supported",
                 o->type == MSGPACK_OBJECT_EXT ? o->via.ext.type : -1);
        mp_refuse(err, errlen, bad, why);
    }
    }
}

static uint64_t be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* msgpack-c allocates a container's elements from its header before it
 * reads them, so a 5-byte body claiming 2^32 elements would cost
 * gigabytes: the claims are checked first.  Every value takes a byte at
 * least, so the elements still owed (pending) can never exceed the bytes
 * left.  Only the headers are read; msgpack-c parses the rest. */
static bool mp_sane(const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    uint64_t pending = 1;
    while (pending && p < end) {
        pending--;
        unsigned c = *p++;
        size_t left = (size_t)(end - p);
        uint64_t skip = 0, add = 0;
        if (c <= 0x7f || c >= 0xe0 || (c >= 0xc0 && c <= 0xc3 && c != 0xc1))
            continue;
        if (c >= 0x80 && c <= 0x8f)
            add = 2 * (uint64_t)(c & 0x0f);
        else if (c >= 0x90 && c <= 0x9f)
            add = c & 0x0f;
        else if (c >= 0xa0 && c <= 0xbf)
            skip = c & 0x1f;
        else {
            static const signed char hdr[32] = {
                /* c0 */ 0, -1, 0, 0, 1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8,
                /* d0 */ 1, 2, 4, 8, 2, 3, 5, 9, 17, 1, 2, 4, 2, 4, 2, 4,
            };
            int h = hdr[c - 0xc0];
            if (h < 0 || (size_t)h > left)
                return false;
            if (c >= 0xc4 && c <= 0xc6)                 /* bin */
                skip = be(p, h);
            else if (c >= 0xc7 && c <= 0xc9)            /* ext */
                skip = be(p, h) + 1;
            else if (c >= 0xd9 && c <= 0xdb)            /* str */
                skip = be(p, h);
            else if (c == 0xdc || c == 0xdd)            /* array */
                add = be(p, h);
            else if (c == 0xde || c == 0xdf)            /* map */
                add = 2 * be(p, h);
            p += h;
            left -= (size_t)h;
            if (c >= 0xd4 && c <= 0xd8) {               /* fixext: body */
                p -= h;
                left += (size_t)h;
                skip = (uint64_t)h;
            }
        }
        if (skip > left)
            return false;
        p += skip;
        pending += add;
        if (pending > (uint64_t)(end - p))
            return false;
    }
    return true;
}

static int mp_dec(const void *p, size_t len, int *kind, void **out,
                  size_t *outlen, char *err, size_t errlen)
{
    if (!mp_sane(p, len)) {
        snprintf(err, errlen, "MessagePack: truncated, or a length "
                 "longer than the body");
        return -1;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&u, p, len, &off);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
        snprintf(err, errlen, "MessagePack: %s",
                 ur == MSGPACK_UNPACK_CONTINUE ? "truncated"
                 : ur == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory"
                 : ur == MSGPACK_UNPACK_SUCCESS ? "bytes after the value"
                                                : "malformed");
        msgpack_unpacked_destroy(&u);
        return -1;
    }
    struct buf b = { 0 };
    bool bad = false;
    from_mp(&b, &u.data, 0, false, err, errlen, &bad);
    msgpack_unpacked_destroy(&u);
    if (bad || b.failed) {
        if (!bad)
            snprintf(err, errlen, "out of memory reading MessagePack");
        free(b.p);
        return -1;
    }
    *kind = SEDA_KIND_LUA;
    *out = b.p;
    *outlen = b.len;
    return 0;
}

/* ---- raw ---- */

static int raw_enc(int kind, const void *p, size_t len, void **out,
                   size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (kind == SEDA_KIND_RAW)          /* a Lua string: as it is */
        return 0;
    struct cr r = { p, (const unsigned char *)p + len };
    struct cval v;
    if (seda__l_cr_head(&r, &v) != 0 || v.t != CV_STR) {
        snprintf(err, errlen, "payload: format \"raw\" carries a string "
                 "(got %s)", seda__l_cr_head(&(struct cr){ p, r.end }, &v) == 0
                                 ? cv_name(&v) : "bad bytes");
        return -1;
    }
    *out = malloc(v.len ? v.len : 1);
    if (!*out) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(*out, v.s, v.len);
    *outlen = v.len;
    return 0;
}

static int raw_dec(const void *p, size_t len, int *kind, void **out,
                   size_t *outlen, char *err, size_t errlen)
{
    (void)p, (void)len, (void)err, (void)errlen;
    *kind = SEDA_KIND_RAW;
    *out = NULL;                        /* the body as it is */
    *outlen = 0;
    return 0;
}

/* ---- the tables ---- */

static const seda_remote_format f_json = {
    "json", "application/json", json_enc, json_dec,
};
static const seda_remote_format f_msgpack = {
    "msgpack", "application/msgpack", mp_enc, mp_dec,
};
static const seda_remote_format f_raw = {
    "raw", "application/octet-stream", raw_enc, raw_dec,
};

/* The readers every remote stage of the binding has: a message names
 * its format with Content-Type. */
static const seda_remote_format *const readers[] = { &f_json, &f_msgpack,
                                                     NULL };

const seda_remote_format *seda__l_format(const char *name)
{
    if (strcmp(name, "json") == 0)
        return &f_json;
    if (strcmp(name, "msgpack") == 0)
        return &f_msgpack;
    if (strcmp(name, "raw") == 0)
        return &f_raw;
    return NULL;
}

const struct seda_remote_format *seda_lua_format(const char *name)
{
    return name ? seda__l_format(name) : NULL;
}

const seda_remote_format *const *seda__l_format_readers(void)
{
    return readers;
}
