/* SPDX-License-Identifier: MIT */
/*
 * lcodec.h -- the payload codec: Lua values to bytes and back (see docs/reference.md, Publish options).
 *
 * Payloads cross lua_States as bytes.  seda__codec_encode() turns a plain
 * data value (nil, boolean, number, string, or a tree of tables of those)
 * into a compact, self-delimiting byte string; seda__codec_decode() turns
 * such bytes back into a fresh value in any lua_State.  The wire format is
 * described in the header of lcodec.c.
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

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

/* The deepest table nesting either direction accepts.  A table that holds
 * no tables is one level. */
#define SEDA_CODEC_MAX_DEPTH 200

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

/* A growable output buffer, reused by the caller across encodes.  An
 * all-zero buffer is ready (malloc'd storage, no limit); the owner may
 * set limit, and alloc to count the storage in a Lua state's memory (a
 * worker's: its memory_limit then bounds encoding too). */
typedef struct seda_wbuf {
    unsigned char *p; /* storage, NULL when cap is 0 */
    size_t len;       /* bytes in use */
    size_t cap;       /* bytes allocated */
    size_t limit;     /* len may not pass this (0: no limit): an encode
                         that would fails with "too_large" and sets over */
    lua_Alloc alloc;  /* storage allocator (lua_Alloc contract), or NULL
                         for realloc/free */
    void *alloc_ud;   /* its first argument */
    int over;         /* the last encode failed at limit (1) or because
                         alloc refused (2); 0 otherwise */
} seda_wbuf;

enum { SEDA_WBUF_OVER_LIMIT = 1, SEDA_WBUF_OVER_MEMORY = 2 };

/* Frees b->p (through b->alloc when set) and empties *b, keeping limit
 * and alloc.  Accepts NULL and an all-zero buffer.  Cannot fail. */
SEDA__API void seda__wbuf_free(seda_wbuf *b);

/* Frees b's storage if it is over keep bytes (a big payload's buffer is
 * not kept for the next, small, one).  b->len must be 0 or the bytes
 * unneeded. */
SEDA__API void seda__wbuf_trim(seda_wbuf *b, size_t keep);

/* Encodes the Lua value at stack index idx and appends the bytes to b.
 * b->len is not reset: set it to 0 first to reuse the buffer.  The buffer
 * grows by doubling (malloc/realloc); the caller owns it and frees it with
 * seda__wbuf_free().
 *
 * Returns 0 on success.  Returns -1 when the value holds a function,
 * userdata, thread, cyclic table, or nests deeper than
 * SEDA_CODEC_MAX_DEPTH, when the encoding would pass b->limit ("too_large:
 * ..."; b->over says so), or when growing b runs out of memory ("out of
 * memory", or "not enough memory: ..." when b->alloc refused); then err
 * receives a NUL-terminated message (truncated to
 * errlen) whose path is rooted at `root`, e.g.
 * "payload.items[3].cb: cannot encode a function", and b->len is restored
 * to its value on entry.  err may be NULL when errlen is 0.  Path steps:
 * `.name` for identifier keys, `["odd key"]` (escaped, cut after 32
 * bytes), `[3]`, `[1.5]`, `[true]`, `[{...}]` after a table key and
 * `{key}` inside one; a bad key itself reads
 * "payload.a: cannot encode a function as a table key".
 *
 * Never raises a Lua error and never calls a metamethod.  The Lua stack is
 * the same on return as on entry.  Any thread that owns L. */
SEDA__API int seda__codec_encode(lua_State *L, int idx, seda_wbuf *b,
                                 const char *root, char *err, size_t errlen);

/* Decodes exactly one value from p[0..len) and pushes it on L's stack.
 *
 * Returns 0 after pushing the value.  Returns -1 and pushes nothing when
 * the bytes are malformed, truncated, followed by trailing bytes, nested
 * deeper than SEDA_CODEC_MAX_DEPTH, or otherwise hostile; then err receives
 * a NUL-terminated message (truncated to errlen).  p is borrowed and only
 * read within [p, p + len).
 *
 * A claimed length or element count larger than the remaining input could
 * justify is rejected before anything is allocated, so the memory used is
 * proportional to len.  May raise a Lua memory error (it creates Lua
 * strings and tables); raises nothing else.  Any thread that owns L.
 *
 * The first table decoded successfully in a state also leaves a cache of
 * recently decoded short keys (about 1.6 KB, 64 strings of at most 31
 * bytes) in L's registry, under a private key, for the state's life. */
SEDA__API int seda__codec_decode(lua_State *L, const void *p, size_t len,
                                 char *err, size_t errlen);

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
