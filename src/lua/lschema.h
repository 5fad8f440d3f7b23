/* SPDX-License-Identifier: MIT */
/*
 * lschema.h -- typed stages: the `accepts` schema compiler and checkers.
 *
 * A stage may declare what it accepts: a Lua type name ("string",
 * "integer", "number", "boolean", "table", "any") or a table schema such as
 * { id = "integer", name = "string", tags = "table?" }.  The schema is
 * compiled once, from the Lua value, into an immutable C tree, and then
 * checked against every payload before admission: against a Lua value on
 * the publish path (seda__schema_check_value) and against encoded bytes on
 * the worker hop path and for C publishers (seda__schema_check_bytes).
 * Both checkers give the same verdict and the same message for the same
 * payload.
 *
 * DESIGN
 *   - A compiled schema is immutable and holds no Lua references, so one
 *     schema may be shared by any number of threads and lua_States.
 *   - Neither checker raises a Lua error or allocates; the byte checker
 *     calls no Lua at all and trusts nothing in its input.
 *   - Every message starts with "type: " and names the path to the
 *     offending value, rooted at "payload", in lcodec's path notation.
 */
#ifndef SEDA_LSCHEMA_H
#define SEDA_LSCHEMA_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>

#include "lcodec.h" /* SEDA__API */

/* The most fields one table schema may list. */
#define SEDA_SCHEMA_MAX_FIELDS 256

/* seda__schema_check_bytes() kinds. */
#define SEDA_SCHEMA_RAW 0   /* the bytes are a raw Lua string */
#define SEDA_SCHEMA_CODEC 1 /* the bytes are one lcodec-encoded value */

/* A compiled `accepts` schema.  Opaque; immutable after compile. */
struct seda_schema;

/* Compiles the `accepts` value at stack index idx: a type name, or a table
 * whose keys are field names (strings) and whose values are type names or
 * nested table schemas.  A type name is one of "string", "integer",
 * "number", "boolean", "table", "any", optionally followed by '?' (nil or
 * absent is then also accepted).  A nested table schema is a required
 * field holding a table.  strict applies to the table schema and every
 * nested one: a key not listed is then an error.
 *
 * Returns a schema the caller frees with seda__schema_free(), or NULL with
 * a NUL-terminated message in err (cut to errlen; err may be NULL when
 * errlen is 0):
 *   "accepts: must be a type name or a table"
 *   "accepts.tags: unknown type 'tabel'"
 *   "accepts.x: expected a type name or a table"
 *   "accepts[1]: field names must be strings"
 *   "accepts.meta: cyclic schema"
 *   "accepts: more than 256 fields"
 *   "accepts.a.b...: nested deeper than 200 levels"
 *   "accepts: out of memory"
 * Raw access only (no metamethods).  Never raises a Lua error; the stack
 * is unchanged on return.  Allocates with malloc.  Any thread that owns
 * L. */
SEDA__API struct seda_schema *seda__schema_compile(lua_State *L, int idx,
                                                   bool strict, char *err,
                                                   size_t errlen);

/* Frees s.  Accepts NULL.  Cannot fail.  No other thread may be using
 * s. */
SEDA__API void seda__schema_free(struct seda_schema *s);

/* Checks the Lua value at stack index idx against s.  Returns 0 when it
 * conforms, else -1 with a NUL-terminated message in err (cut to errlen;
 * err may be NULL when errlen is 0):
 *   "type: payload.id: expected integer, got string"
 *   "type: payload.n: expected integer, got float"
 *   "type: payload.name: missing (expected string)"
 *   "type: payload.extra: unexpected field (strict)"
 *   "type: payload: expected table, got number"
 *   "type: payload: nested too deeply" (no Lua stack space left)
 * Type mismatches and unexpected fields are reported in lua_next order,
 * before missing fields; missing fields in byte order of their names.
 * "got" names the Lua type, except that a float is "float" when an
 * integer was expected.
 *
 * Raw access only.  Never raises, never allocates; the stack is unchanged
 * on return.  Any thread that owns L; s may be shared. */
SEDA__API int seda__schema_check_value(const struct seda_schema *s,
                                       lua_State *L, int idx, char *err,
                                       size_t errlen);

/* Checks the payload p[0..len) against s without Lua.  kind is
 * SEDA_SCHEMA_RAW (the bytes are a Lua string) or SEDA_SCHEMA_CODEC (one
 * value encoded by seda__codec_encode).  Returns 0 or -1 with the same
 * messages as seda__schema_check_value, plus
 *   "type: payload: malformed"
 * for an unknown kind and for bytes seda__codec_decode would refuse
 * (truncated, invalid tags, trailing bytes, nil or NaN keys, claims
 * larger than the input, tables nested deeper than SEDA_CODEC_MAX_DEPTH).
 * Bytes the encoder never writes are refused as malformed too: a key that
 * names a schema field appearing twice in one table.  A nil value in a
 * table counts as absent, as it does after decoding.  Whenever it returns
 * 0, decoding succeeds and the decoded value passes check_value.
 *
 * p is borrowed and read only within [p, p + len); p may be NULL when len
 * is 0.  Never allocates, holds no locks, recursion is bounded by
 * SEDA_CODEC_MAX_DEPTH.  Any thread; s may be shared. */
SEDA__API int seda__schema_check_bytes(const struct seda_schema *s,
                                       const void *p, size_t len, int kind,
                                       char *err, size_t errlen);

#endif /* SEDA_LSCHEMA_H */
