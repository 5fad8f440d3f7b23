/* SPDX-License-Identifier: MIT */
/*
 * lcodec.h -- the payload codec: Lua values to bytes and back (see docs/reference.md, Publish options).
 *
 * Payloads cross lua_States as bytes.  seda__codec_encode() turns a plain
 * data value (nil, boolean, number, string, or a tree of tables of those)
 * into a compact, self-delimiting byte string; seda__codec_decode() turns
 * such bytes back into a fresh value in any lua_State.  The wire format is
 * described in the header of lcodec.c.  The declarations the tools use
 * (seda_wbuf, encode, decode) are in seda_lua_admin.h, included here.
 *
 * DESIGN
 *   - Both functions work on one lua_State owned by the calling thread;
 *     they hold no locks and keep no global state, so any number of
 *     threads may call them on different states concurrently.
 *   - The encoder never raises a Lua error: it uses raw access only (no
 *     metamethods) and reports failures through a return code and a message
 *     that names the offending path ("payload.items[3].cb: ...").
 *   - The decoder trusts nothing: every length and count is checked against
 *     the bytes that remain before anything is allocated.
 */
#ifndef SEDA_LCODEC_H
#define SEDA_LCODEC_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#include "seda_lua_admin.h"

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

/* The wire format's tag bytes (described in the header of lcodec.c),
 * shared by the codec and the schema checker (lschema.c). */
enum {
    SEDA_TAG_NIL = 0x00,
    SEDA_TAG_FALSE = 0x01,
    SEDA_TAG_TRUE = 0x02,
    SEDA_TAG_FLOAT = 0x03,
    SEDA_TAG_INT8 = 0x04,   /* ..0x07: 1/2/4/8-byte integer */
    SEDA_TAG_STR8 = 0x08,   /* ..0x0b: 1/2/4/8-byte length, then bytes */
    SEDA_TAG_TBL8 = 0x0c,   /* u8 narr, u8 nrec */
    SEDA_TAG_TBL32 = 0x0d,  /* u32 narr, u32 nrec */
    SEDA_TAG_NULL = 0x0e,   /* seda.null (JSON's null; cjson.null) */
    SEDA_TAG_FIXSTR = 0x20, /* ..0x3f: length tag - 0x20 */
    SEDA_TAG_FIXINT = 0x60  /* ..0xff: value tag - 0x80 */
};

/* Little-endian readers of the wire format's fixed-width fields. */
static inline uint64_t seda__ld16(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8;
}

static inline uint64_t seda__ld32(const unsigned char *p)
{
    return seda__ld16(p) | seda__ld16(p + 2) << 16;
}

static inline uint64_t seda__ld64(const unsigned char *p)
{
    return seda__ld32(p) | seda__ld32(p + 4) << 32;
}

/* Frees b's storage if it is over keep bytes (a big payload's buffer is
 * not kept for the next, small, one).  b->len must be 0 or the bytes
 * unneeded. */
SEDA__API void seda__codec_wbuf_trim(seda_wbuf *b, size_t keep);

/* Push L's key cache (the one seda__codec_decode keeps in the registry),
 * making it if L has none.  May raise a memory error.  For a caller that
 * decodes often: it keeps the cache (an upvalue, a stack slot) and passes
 * its index to seda__codec_decode_kc, which saves the registry lookup. */
SEDA__API void seda__codec_push_keycache(lua_State *L);

/* seda__codec_decode with L's key cache at index kci (an upvalue index
 * works; anything else there is ignored for the registry's).  Pushes
 * exactly the value on success.  Any thread that owns L. */
SEDA__API int seda__codec_decode_kc(lua_State *L, const void *p, size_t len,
                                    int kci, char *err, size_t errlen);

#endif /* SEDA_LCODEC_H */
