/* SPDX-License-Identifier: MIT */
/*
 * lformat.c -- the payload formats of remote stages (docs/wire.md):
 * `format = "json" | "msgpack" | "raw"`, the Lua codec's bytes written
 * as JSON (the one JSON writer, ljson_write.c; read with libjansson),
 * MessagePack (libmsgpack-c) or a plain string, and read back into the
 * codec's bytes.  Pure C over bytes, no Lua
 * state: the remote layer calls these on any thread (a publisher, a
 * worker routing a hop, the connection's dispatch thread), through the
 * seda_remote_format tables at the end.
 *
 * DESIGN
 *   - Writing walks the codec's bytes (the format of lcodec.c) once,
 *     writing JSON text or packing MessagePack as it goes; what the
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
 *       at once, strings that are not UTF-8, nan and inf.  A float is
 *       written with a fraction or an exponent (3.0), an integer without;
 *       read back, a number with neither is an integer, any other a
 *       float.
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
#include "ljson_write.h"
#include "lseda.h"
#include "seda_lua.h"
#include "seda_remote.h"

/* ---- JSON ---- */

/* Written by the one JSON writer (ljson_write.c), read with jansson. */
static int json_enc(int kind, const void *p, size_t len, void **out,
                    size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    struct seda_jpath path = { "payload", 7 };
    struct seda_jerr e = { err, errlen, false };
    struct buf b = { 0 };
    int rc;
    if (kind == SEDA_KIND_RAW) {        /* a Lua string */
        struct cval v = { .t = CV_STR, .s = p, .len = len };
        rc = seda__l_json_write(&b, NULL, &v, SEDA_JSON_EXACT, &path, 0, &e);
    } else {
        struct cr r = { p, (const unsigned char *)p + len };
        struct cval v;
        rc = seda__l_cr_head(&r, &v) != 0
                 ? seda__l_jrefuse(&e, &path, "not the payload codec's bytes")
                 : seda__l_json_write(&b, &r, &v, SEDA_JSON_EXACT, &path, 0,
                                      &e);
    }
    if (rc == 0 && !b.failed)
        seda__l_cw_byte(&b, 0);         /* the remote layer frees it */
    if (rc != 0 || b.failed) {
        free(b.p);
        if (!e.set)
            snprintf(err, errlen, "out of memory writing JSON");
        return -1;
    }
    *out = b.p;
    *outlen = b.len - 1;
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
    case JSON_REAL:
        /* A number with a fraction or an exponent (3.0, 1e3) is a
         * float; one without (3) an integer (JSON_INTEGER). */
        seda__l_cw_float(b, json_real_value(j));
        break;
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

static int to_mp(struct cr *r, msgpack_packer *pk, struct seda_jpath *path,
                 int depth, struct seda_jerr *e)
{
    struct cval v;
    if (seda__l_cr_head(r, &v) != 0)
        return seda__l_jrefuse(e, path, "not the payload codec's bytes");
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
            return seda__l_jrefuse(e, path, "a string over 4 GiB");
        if (seda__l_utf8_ok(v.s, v.len))
            return msgpack_pack_str_with_body(pk, v.s, v.len);
        return msgpack_pack_bin_with_body(pk, v.s, v.len);
    default:
        break;
    }
    if (depth >= SEDA_CODEC_MAX_DEPTH)
        return seda__l_jrefuse(e, path, "nested deeper than %d",
                      SEDA_CODEC_MAX_DEPTH);
    bool array = v.narr && !v.nrec;
    int rc = array ? msgpack_pack_array(pk, v.narr)
                   : msgpack_pack_map(pk, v.narr + v.nrec);
    for (uint64_t i = 0; !rc && i < v.narr; i++) {
        if (!array)
            rc = msgpack_pack_int64(pk, (int64_t)i + 1);
        size_t old = seda__l_jpath_idx(path, (long long)i + 1);
        rc = rc ? rc : to_mp(r, pk, path, depth + 1, e);
        seda__l_jpath_back(path, old);
    }
    for (uint64_t i = 0; !rc && i < v.nrec; i++) {
        const unsigned char *kp = r->p;
        struct cval k;
        if (seda__l_cr_head(r, &k) != 0)
            return seda__l_jrefuse(e, path, "not the payload codec's bytes");
        r->p = kp;
        rc = to_mp(r, pk, path, depth + 1, e);  /* the key */
        size_t old = k.t == CV_STR ? seda__l_jpath_key(path, (const char *)k.s, k.len)
                     : k.t == CV_INT ? seda__l_jpath_idx(path, (long long)k.i)
                                     : seda__l_jpath_key(path, "?", 1);
        rc = rc ? rc : to_mp(r, pk, path, depth + 1, e);
        seda__l_jpath_back(path, old);
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
    struct seda_jpath path = { "payload", 7 };
    struct seda_jerr e = { err, errlen, false };
    int rc;
    if (kind == SEDA_KIND_RAW)          /* a Lua string */
        rc = len > UINT32_MAX ? seda__l_jrefuse(&e, &path, "a string over 4 GiB")
             : seda__l_utf8_ok(p, len) ? msgpack_pack_str_with_body(&pk, p, len)
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
                                 ? seda__l_cv_name(&v) : "bad bytes");
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
