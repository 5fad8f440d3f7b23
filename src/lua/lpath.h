/* SPDX-License-Identifier: MIT */
/*
 * lpath.h -- the path notation of payload messages, shared by lcodec and
 * lschema.
 *
 * Codec and schema errors name the offending value by its path from the
 * root, e.g. `payload.items[3]["odd key"]`.  Both modules must print the
 * same path for the same key, so the notation lives here, once, together
 * with the bounded message buffer the paths are written into.
 *
 * DESIGN
 *   - A struct seda_msgbuf writes into a caller-owned buffer, is always
 *     NUL-terminated, and cuts whatever does not fit; nothing here
 *     allocates, fails or keeps state, so any thread may use it on its
 *     own buffer.
 *   - Path steps: `.name` for a string key that is a Lua name, otherwise
 *     `["..."]` with %q-like escapes, cut after 32 bytes with "...";
 *     `[3]` for an integer, `[1.5]` for a float (as Lua prints it),
 *     `[true]`/`[false]`, and `[{...}]` for any other key (a table).
 */
#ifndef SEDA_LPATH_H
#define SEDA_LPATH_H

#include <lua.h>
#include <stddef.h>

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

/* A bounded, always NUL-terminated string being assembled in a caller's
 * buffer.  Callers may read p and n, and may cut the text back to an
 * earlier n (writing the NUL themselves). */
struct seda_msgbuf {
    char *p;    /* the caller's buffer, borrowed */
    size_t n;   /* characters written so far */
    size_t cap; /* buffer size; nothing is written when it is 0 */
};

/* Starts an empty message in buf: buf[0] becomes NUL unless buf is NULL
 * or cap is 0, in which case every later append is a no-op.  buf is
 * borrowed and must outlive m.  Cannot fail. */
SEDA__API void seda__path_buf_init(struct seda_msgbuf *m, char *buf,
                                   size_t cap);

/* Appends s[0..len) (which may hold NULs), cut to what fits.  Cannot
 * fail. */
SEDA__API void seda__path_buf_add(struct seda_msgbuf *m, const char *s,
                                  size_t len);

/* Appends the C string s, cut to what fits.  Cannot fail. */
SEDA__API void seda__path_buf_str(struct seda_msgbuf *m, const char *s);

/* Appends the path step for the string key s[0..len): `.name` when it is
 * a Lua name (letters, digits, underscores, not starting with a digit,
 * not a reserved word), else `["..."]` with `"`, `\` and newline escaped
 * by a backslash, other control and non-ASCII bytes as `\ddd` (decimal),
 * cut after 32 source bytes with "...".  s is borrowed.  Cannot fail. */
SEDA__API void seda__path_name(struct seda_msgbuf *m, const char *s,
                               size_t len);

/* Appends the path step for the integer key v, e.g. `[3]`.  Cannot
 * fail. */
SEDA__API void seda__path_int(struct seda_msgbuf *m, lua_Integer v);

/* Appends the path step for the float key v as Lua would print it, with
 * enough digits to tell it from its neighbours and a ".0" when it would
 * look like an integer, e.g. `[1.5]`, `[2.0]`, `[inf]`.  Cannot fail. */
SEDA__API void seda__path_float(struct seda_msgbuf *m, double v);

/* Appends the path step for the Lua key at stack index k, by its type:
 * a string, integer or float as above, `[true]`/`[false]` for a boolean,
 * and `[{...}]` for anything else (a table used as a key).  Raw access
 * only: never calls a metamethod, never raises, never converts the key;
 * the stack is unchanged.  Any thread that owns L.  Cannot fail. */
SEDA__API void seda__path_key(struct seda_msgbuf *m, lua_State *L, int k);

#endif /* SEDA_LPATH_H */
