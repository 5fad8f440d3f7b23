/* SPDX-License-Identifier: MIT */
/*
 * lcodec_decode.c -- the payload codec's decoder: bytes back to a Lua
 * value on the calling state, with the per-state cache of short keys.
 *
 * The wire format, and the design both directions follow (no allocation
 * beyond the tables it builds, hostile input refused by the "pending"
 * debt before anything is allocated), are described in lcodec.c's header;
 * the encoder is there.  Threads: none of its own; it uses only the
 * lua_State passed in, which the calling thread owns.
 */
#include "lcodec.h"
#include "lcodec_int.h"
#include "lpath.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key cache.  Payloads of one kind repeat their keys, and pushing a
 * key with lua_pushlstring hashes it and looks it up in the string table
 * every time.  Each state keeps, in its registry, a full userdata whose
 * user values hold the last short keys decoded there (placed by a hash of
 * a key's length and bytes into sets of two slots) and whose block holds
 * a pointer to each one's bytes: a repeated key costs a hash, a
 * comparison and a lua_getiuservalue.  Lua strings never move, and a
 * slot's pointer and user value are always replaced together, so the
 * pointer stays valid.
 * The cache is created after the first table decoded in a state (never by
 * input that fails), lives as long as the state, and holds at most
 * KC_SLOTS strings of at most KC_MAXLEN bytes. */
enum {
    KC_SLOTS = 64,       /* power of two */
    KC_MAXLEN = FIXSTR_MAX
};

struct kcache {
    const struct kcache *self;    /* its own address: proof it is ours */
    const char *s[KC_SLOTS];      /* bytes of user value i + 1 */
    unsigned char len[KC_SLOTS];  /* its length; 0xff for an empty slot */
};

/* The cache's registry key is this variable's address.  Access is raw,
 * so a registry with a metatable cannot make the decoder call Lua. */
static const char kc_key;

struct dec {
    lua_State *L;
    const unsigned char *start; /* first input byte, for offsets */
    const unsigned char *p;     /* next byte to read */
    const unsigned char *end;   /* one past the last byte */
    size_t pending;             /* values open tables still owe, >= 1 B */
    int depth;                  /* tables currently open */
    struct kcache *kc;          /* key cache, or NULL */
    int kci;                    /* its stack index (when kc is set) */
    char *err;                  /* message output, borrowed */
    size_t errlen;              /* size of err */
};

/* Writes "<what> at byte <offset>" to d->err.  Returns -1. */
static COLD int dfail(struct dec *d, const char *what)
{
    struct seda_msgbuf m;
    char tmp[48];
    seda__path_buf_init(&m, d->err, d->errlen);
    seda__path_buf_str(&m, what);
    snprintf(tmp, sizeof tmp, " at byte %zu", (size_t)(d->p - d->start));
    seda__path_buf_str(&m, tmp);
    return -1;
}

/* Bytes that may still be consumed: what is left after reserving one
 * byte for every value an open table still owes.  The decoder keeps
 * pending <= end - p, so this never wraps. */
static inline size_t avail(const struct dec *d)
{
    return (size_t)(d->end - d->p) - d->pending;
}

/* The first of the two cache slots for the n-byte key s (1 <= n <=
 * KC_MAXLEN): a hash of its length and of up to three overlapping
 * windows of its bytes (all of them when n <= 24). */
static inline unsigned kc_set(const unsigned char *s, size_t n)
{
    uint64_t h;
    if (n >= 8)
        h = seda__ld64(s) * UINT64_C(0x9e3779b97f4a7c15) ^
            seda__ld64(s + (n >> 1) - 4) * UINT64_C(0xc2b2ae3d27d4eb4f) ^
            seda__ld64(s + n - 8);
    else if (n >= 4)
        h = seda__ld32(s) * UINT64_C(0x9e3779b97f4a7c15) ^
            seda__ld32(s + n - 4);
    else
        h = (uint64_t)s[0] << 16 ^ (uint64_t)s[n >> 1] << 8 ^ s[n - 1];
    h = (h ^ n) * UINT64_C(0xff51afd7ed558ccd);
    return (unsigned)(h >> 59) * 2; /* KC_SLOTS / 2 sets of two */
}

/* Whether the n-byte strings a and b (1 <= n <= KC_MAXLEN) are equal:
 * two overlapping loads each up to 16 bytes, memcmp beyond. */
static ALWAYS_INLINE int kc_same(const unsigned char *a,
                                 const unsigned char *b, size_t n)
{
    if (n >= 8)
        return n > 16 ? memcmp(a, b, n) == 0
                      : seda__ld64(a) == seda__ld64(b) &&
                        seda__ld64(a + n - 8) == seda__ld64(b + n - 8);
    if (n >= 4)
        return seda__ld32(a) == seda__ld32(b) &&
               seda__ld32(a + n - 4) == seda__ld32(b + n - 4);
    return a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1];
}

/* Pushes the n-byte key s (1 <= n <= KC_MAXLEN, n bytes readable),
 * through the cache d->kc.  Each key may sit in either slot of its set;
 * a new key takes the first and moves the one there to the second, so
 * two keys that share a set both stay.  May raise a Lua memory error. */
static ALWAYS_INLINE void push_key(struct dec *d, const unsigned char *s,
                                   size_t n)
{
    lua_State *L = d->L;
    struct kcache *kc = d->kc;
    unsigned i = kc_set(s, n);

    if (kc->len[i] == n && kc_same((const unsigned char *)kc->s[i], s, n)) {
        lua_getiuservalue(L, d->kci, (int)i + 1);
        return;
    }
    if (kc->len[i + 1] == n &&
        kc_same((const unsigned char *)kc->s[i + 1], s, n)) {
        lua_getiuservalue(L, d->kci, (int)i + 2);
        return;
    }
    lua_pushlstring(L, (const char *)s, n);
    if (kc->len[i] != 0xff) {
        lua_getiuservalue(L, d->kci, (int)i + 1);
        lua_setiuservalue(L, d->kci, (int)i + 2);
        kc->s[i + 1] = kc->s[i];
        kc->len[i + 1] = kc->len[i];
    }
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, d->kci, (int)i + 1);
    kc->s[i] = lua_tostring(L, -1);
    kc->len[i] = (unsigned char)n;
}

/* Pushes the key cache of L and returns it, or returns NULL and pushes
 * nothing when L has none yet. */
static struct kcache *kc_get(lua_State *L)
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &kc_key) == LUA_TUSERDATA &&
        lua_rawlen(L, -1) == sizeof(struct kcache)) {
        struct kcache *kc = lua_touserdata(L, -1);
        if (kc->self == kc)
            return kc;
    }
    lua_pop(L, 1);
    return NULL;
}

/* Gives L an empty key cache.  May raise a Lua memory error. */
static void kc_new(lua_State *L)
{
    struct kcache *kc = lua_newuserdatauv(L, sizeof *kc, KC_SLOTS);
    memset(kc, 0, sizeof *kc);
    kc->self = kc;
    memset(kc->len, 0xff, sizeof kc->len);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &kc_key);
}

static int dec_any(struct dec *d);
static NOINLINE int dec_table(struct dec *d, uint64_t narr, uint64_t nrec);

/* Decodes one value and pushes it.  Returns 0, or -1 with the message set
 * (and possibly partial values left on the stack for the caller to drop).
 * Inlined into the table loops; dec_any() is the out-of-line copy. */
static ALWAYS_INLINE int dec_value(struct dec *d)
{
    lua_State *L = d->L;

    if (avail(d) < 1)
        return dfail(d, "truncated input");
    const unsigned char *p = d->p;
    unsigned tag = *p;
    uint64_t n;
    size_t w;

    if (tag >= SEDA_TAG_FIXINT) {
        lua_pushinteger(L, (lua_Integer)tag - 0x80);
        d->p++;
        return 0;
    }
    if (tag >= SEDA_TAG_FIXSTR && tag <= SEDA_TAG_FIXSTR + FIXSTR_MAX) {
        n = tag - SEDA_TAG_FIXSTR;
        if (n > avail(d) - 1)
            return dfail(d, "truncated string");
        lua_pushlstring(L, (const char *)p + 1, (size_t)n);
        d->p += 1 + n;
        return 0;
    }
    switch (tag) {
    case SEDA_TAG_NIL:
        lua_pushnil(L);
        break;
    case SEDA_TAG_NULL:
        lua_pushlightuserdata(L, NULL);     /* seda.null */
        break;
    case SEDA_TAG_FALSE:
    case SEDA_TAG_TRUE:
        lua_pushboolean(L, tag == SEDA_TAG_TRUE);
        break;
    case SEDA_TAG_FLOAT: {
        if (avail(d) < 9)
            return dfail(d, "truncated float");
        uint64_t u = seda__ld64(p + 1);
        double v;
        memcpy(&v, &u, sizeof v);
        lua_pushnumber(L, (lua_Number)v);
        d->p += 9;
        return 0;
    }
    case SEDA_TAG_INT8:
    case SEDA_TAG_INT8 + 1:
    case SEDA_TAG_INT8 + 2:
    case SEDA_TAG_INT8 + 3: {
        w = (size_t)1 << (tag - SEDA_TAG_INT8);
        if (avail(d) < 1 + w)
            return dfail(d, "truncated integer");
        int64_t v;
        switch (w) {
        case 1: v = (int8_t)p[1]; break;
        case 2: v = (int16_t)(uint16_t)seda__ld16(p + 1); break;
        case 4: v = (int32_t)(uint32_t)seda__ld32(p + 1); break;
        default: v = (int64_t)seda__ld64(p + 1); break;
        }
        lua_pushinteger(L, (lua_Integer)v);
        d->p += 1 + w;
        return 0;
    }
    case SEDA_TAG_STR8:
    case SEDA_TAG_STR8 + 1:
    case SEDA_TAG_STR8 + 2:
    case SEDA_TAG_STR8 + 3:
        w = (size_t)1 << (tag - SEDA_TAG_STR8);
        if (avail(d) < 1 + w)
            return dfail(d, "truncated string length");
        n = w == 1 ? p[1] : w == 2 ? seda__ld16(p + 1)
            : w == 4 ? seda__ld32(p + 1) : seda__ld64(p + 1);
        if (n > avail(d) - 1 - w)
            return dfail(d, "string length exceeds the input");
        lua_pushlstring(L, (const char *)p + 1 + w, (size_t)n);
        d->p += 1 + w + n;
        return 0;
    case SEDA_TAG_TBL8:
        if (avail(d) < 3)
            return dfail(d, "truncated table header");
        d->p += 3;
        return dec_table(d, p[1], p[2]);
    case SEDA_TAG_TBL32:
        if (avail(d) < 9)
            return dfail(d, "truncated table header");
        d->p += 9;
        return dec_table(d, seda__ld32(p + 1), seda__ld32(p + 5));
    default: {
        char what[32];
        snprintf(what, sizeof what, "invalid tag 0x%02x", tag);
        return dfail(d, what);
    }
    }
    d->p++;
    return 0;
}

static int dec_any(struct dec *d)
{
    return dec_value(d);
}

/* Decodes a table key and pushes it: a short string through the key
 * cache, anything else through dec_any().  Returns 0 or -1 as
 * dec_value() does. */
static ALWAYS_INLINE int dec_key(struct dec *d)
{
    size_t left = avail(d);
    if (left < 1)
        return dfail(d, "truncated input");
    const unsigned char *p = d->p;
    size_t n = (size_t)p[0] - SEDA_TAG_FIXSTR; /* wraps for tags below */
    if (n - 1 < KC_MAXLEN && n < left && d->kc != NULL) {
        push_key(d, p + 1, n);
        d->p += 1 + n;
        return 0;
    }
    /* lua_rawset would raise on a nil or NaN key: refuse them from the
     * bytes, before anything is pushed. */
    if (p[0] == SEDA_TAG_NIL)
        return dfail(d, "table key is nil");
    if (p[0] == SEDA_TAG_NULL)          /* the encoder never writes one */
        return dfail(d, "table key is seda.null");
    if (left >= 9 && p[0] == SEDA_TAG_FLOAT &&
        (seda__ld64(p + 1) & ~(UINT64_C(1) << 63)) > UINT64_C(0x7ff) << 52)
        return dfail(d, "table key is NaN");
    return dec_any(d);
}

/* Decodes the elements of a table whose header (already consumed) claims
 * narr array values and nrec pairs, and pushes the table.  Returns 0, or
 * -1 with the message set (and possibly partial values left on the stack
 * for the caller to drop).  May raise a Lua memory error. */
static int dec_table(struct dec *d, uint64_t narr, uint64_t nrec)
{
    lua_State *L = d->L;

    if (narr > INT_MAX || nrec > INT_MAX || narr + 2 * nrec > avail(d))
        return dfail(d, "table size exceeds the input");
    if (d->depth == SEDA_CODEC_MAX_DEPTH)
        return dfail(d, "tables nested deeper than 200 levels");
    /* The entry point made room for the outermost table, key and value;
     * each nested table needs room for its own key and value. */
    if (d->depth > 0 && !lua_checkstack(L, 2))
        return dfail(d, "Lua stack overflow");
    d->depth++;
    d->pending += (size_t)(narr + 2 * nrec);
    lua_createtable(L, (int)narr, (int)nrec);
    for (lua_Integer i = 1; i <= (lua_Integer)narr; i++) {
        d->pending--;
        if (dec_value(d) != 0)
            return -1;
        lua_rawseti(L, -2, i);
    }
    for (uint64_t i = 0; i < nrec; i++) {
        d->pending--;
        if (dec_key(d) != 0)
            return -1;
        d->pending--;
        if (dec_value(d) != 0)
            return -1;
        lua_rawset(L, -3);
    }
    d->depth--;
    return 0;
}

/* The decoder's entry: one value from p[0..len), the key cache kc (at
 * stack index kci) or none.  Pushes the value (and nothing else) and
 * returns 0, or returns -1 with the message set and pushes nothing. */
static int decode(lua_State *L, const void *p, size_t len,
                  struct kcache *kc, int kci, char *err, size_t errlen)
{
    struct dec d;
    int top = lua_gettop(L);

    d.L = L;
    d.start = p;
    d.p = p;
    d.end = len > 0 ? d.p + len : d.p; /* no arithmetic on a NULL p */
    d.pending = 0;
    d.depth = 0;
    d.kc = kc;
    d.kci = kci;
    d.err = err;
    d.errlen = errlen;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    /* Room for the outermost table, a key and a value. */
    if (!lua_checkstack(L, 3)) {
        dfail(&d, "Lua stack overflow");
        return -1;
    }
    if (dec_any(&d) != 0) {
        lua_settop(L, top);
        return -1;
    }
    if (d.p != d.end) {
        lua_settop(L, top);
        dfail(&d, "trailing bytes after the value");
        return -1;
    }
    return 0;
}

/* Whether the bytes hold a table (the only values the key cache serves). */
static inline int is_table(const void *p, size_t len)
{
    const unsigned char *b = p;
    return len > 0 && (b[0] == SEDA_TAG_TBL8 || b[0] == SEDA_TAG_TBL32);
}

int seda__codec_decode(lua_State *L, const void *p, size_t len,
                       char *err, size_t errlen)
{
    if (!is_table(p, len))
        return decode(L, p, len, NULL, 0, err, errlen);
    if (!lua_checkstack(L, 1)) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "Lua stack overflow at byte 0");
        return -1;
    }
    int top = lua_gettop(L);
    struct kcache *kc = kc_get(L);     /* pushed at top + 1, or nothing */
    int rc = decode(L, p, len, kc, top + 1, err, errlen);
    if (kc != NULL) {
        if (rc == 0)
            lua_replace(L, top + 1);   /* the value over the cache */
        else
            lua_settop(L, top);
    } else if (rc == 0) {
        kc_new(L);
    }
    return rc;
}

void seda__codec_push_keycache(lua_State *L)
{
    if (kc_get(L) == NULL) {
        kc_new(L);
        kc_get(L);
    }
}

int seda__codec_decode_kc(lua_State *L, const void *p, size_t len, int kci,
                          char *err, size_t errlen)
{
    struct kcache *kc = NULL;
    if (is_table(p, len)) {
        kc = lua_touserdata(L, kci);
        if (kc == NULL || kc->self != kc)
            return seda__codec_decode(L, p, len, err, errlen);
    }
    return decode(L, p, len, kc, kci, err, errlen);
}
