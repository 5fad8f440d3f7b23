/* SPDX-License-Identifier: MIT */
/*
 * test_schema.c -- cmocka tests for typed-stage schemas (src/lua/lschema.c
 * and lschema_bytes.c).
 *
 * Pins down the `accepts` contract: every type name on matching and
 * mismatching values, optional fields, strict mode, nested schemas, bad
 * schemas and their messages, raw-string payloads, and hostile bytes.
 *
 * DESIGN
 *   - One lua_State per test (setup/teardown).  Payloads are written as
 *     Lua expressions; expect() evaluates one and checks it three ways:
 *     seda__schema_check_value on the value, seda__schema_check_bytes on
 *     its seda__codec_encode bytes, and check_value on the value decoded
 *     back from those bytes.  All three must give the same result and the
 *     same message, so the two checkers cannot drift apart.
 *   - Hostile input: every truncation of valid encodings, random and
 *     mutated bytes (checked against the decoder's verdict), hand-made
 *     duplicate keys, NaN keys and over-deep nesting.
 *   - Allocation: outside sanitizer builds this file replaces malloc,
 *     calloc, realloc and free with counting wrappers around glibc's
 *     __libc_* entry points, so a test can show that neither checker
 *     allocates.  Sanitizers own malloc, so there the test is skipped.
 *   - Single-threaded; every test leaves the stack as it found it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lua/lcodec.h"
#include "lua/lschema.h"

/* ---- allocation counting ---- */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NO_MALLOC_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NO_MALLOC_HOOK 1
#endif
#endif

#ifndef NO_MALLOC_HOOK
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

/* volatile: the compiler treats malloc as a builtin that touches no user
 * memory, and would otherwise move or drop the stores around the calls. */
static volatile int counting;   /* 1 while allocations are being counted */
static volatile size_t nallocs; /* allocations seen while counting */

void *malloc(size_t n)
{
    nallocs += counting;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    nallocs += counting;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    nallocs += counting;
    return __libc_realloc(p, n);
}

void free(void *p)
{
    __libc_free(p);
}
#endif

/* ---- helpers ---- */

struct fixture {
    lua_State *L; /* the state under test */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->L = luaL_newstate();
    assert_non_null(f->L);
    luaL_openlibs(f->L);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(lua_gettop(f->L), 0);
    lua_close(f->L);
    free(f);
    return 0;
}

/* Evaluates the Lua expression expr and pushes its value. */
static void push_expr(lua_State *L, const char *expr)
{
    int top = lua_gettop(L);
    lua_pushliteral(L, "return ");
    lua_pushstring(L, expr);
    lua_concat(L, 2);
    const char *chunk = lua_tostring(L, -1);
    if (luaL_loadstring(L, chunk) != 0 || lua_pcall(L, 0, 1, 0) != 0)
        fail_msg("%s: %s", expr, lua_tostring(L, -1));
    lua_remove(L, top + 1);
}

/* Compiles the schema written as a Lua expression; fails the test on a
 * compile error.  The caller frees the result. */
static struct seda_schema *compile(lua_State *L, const char *expr,
                                   bool strict)
{
    char err[256];
    push_expr(L, expr);
    int top = lua_gettop(L);
    struct seda_schema *s = seda__schema_compile(L, -1, strict, err,
                                                 sizeof err);
    assert_int_equal(lua_gettop(L), top);
    lua_pop(L, 1);
    if (s == NULL)
        fail_msg("compile %s: %s", expr, err);
    return s;
}

/* Checks that compiling expr fails with exactly the message want. */
static void bad_schema(lua_State *L, const char *expr, const char *want)
{
    char err[256];
    push_expr(L, expr);
    int top = lua_gettop(L);
    struct seda_schema *s = seda__schema_compile(L, -1, false, err,
                                                 sizeof err);
    assert_int_equal(lua_gettop(L), top);
    lua_pop(L, 1);
    if (s != NULL) {
        seda__schema_free(s);
        fail_msg("compile %s: succeeded, want \"%s\"", expr, want);
    }
    if (strcmp(err, want) != 0)
        fail_msg("compile %s: got \"%s\", want \"%s\"", expr, err, want);
}

/* Compares one checker's verdict with the expectation (want NULL: pass). */
static void verdict(const char *how, const char *expr, int rc,
                    const char *err, const char *want)
{
    if (want == NULL && (rc != 0 || err[0] != '\0'))
        fail_msg("%s(%s): got %d \"%s\", want success", how, expr, rc, err);
    if (want != NULL && (rc != -1 || strcmp(err, want) != 0))
        fail_msg("%s(%s): got %d \"%s\", want \"%s\"", how, expr, rc, err,
                 want);
}

/* Encodes the value at the top of L into b (reset first). */
static void encode_top(lua_State *L, seda_wbuf *b)
{
    char err[256];
    b->len = 0;
    if (seda__codec_encode(L, -1, b, "payload", err, sizeof err) != 0)
        fail_msg("encode: %s", err);
}

/* Checks the payload written as the Lua expression expr against s with
 * both checkers, and the decoded copy of its encoding with check_value;
 * each must succeed (want NULL) or fail with exactly want. */
static void expect(lua_State *L, const struct seda_schema *s,
                   const char *expr, const char *want)
{
    int top = lua_gettop(L);
    char err[256];
    seda_wbuf b = {0};

    push_expr(L, expr);
    int rc = seda__schema_check_value(s, L, -1, err, sizeof err);
    assert_int_equal(lua_gettop(L), top + 1);
    verdict("check_value", expr, rc, err, want);

    encode_top(L, &b);
    rc = seda__schema_check_bytes(s, b.p, b.len, SEDA_SCHEMA_CODEC, err,
                                  sizeof err);
    verdict("check_bytes", expr, rc, err, want);

    if (seda__codec_decode(L, b.p, b.len, err, sizeof err) != 0)
        fail_msg("decode(%s): %s", expr, err);
    rc = seda__schema_check_value(s, L, -1, err, sizeof err);
    verdict("check_value(decoded)", expr, rc, err, want);

    seda__codec_wbuf_free(&b);
    lua_settop(L, top);
}

/* Checks the raw bytes p[0..len) with check_bytes only. */
static void expect_bytes(const struct seda_schema *s, const void *p,
                         size_t len, const char *want)
{
    char err[256];
    int rc = seda__schema_check_bytes(s, p, len, SEDA_SCHEMA_CODEC, err,
                                      sizeof err);
    verdict("check_bytes", "<bytes>", rc, err, want);
}

/* A small deterministic PRNG (xorshift64*). */
static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * UINT64_C(2685821657736338717);
}

#define MALFORMED "type: payload: malformed"

/* ---- type names ---- */

static const char *const all_values[] = {
    "'x'", "''", "('a'):rep(300)", "('b'):rep(70000)",
    "0", "-1", "127", "128", "-33", "40000", "1 << 40", "math.mininteger",
    "math.maxinteger", "1.5", "2.0", "-0.0", "1/0", "0/0",
    "true", "false", "{}", "{1, 2, 3}", "{a = {b = {}}}", "{x = 1.5, 'y'}",
};

static void test_schema_type_names_accept_matching_values(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    static const struct {
        const char *type;
        const char *values; /* a Lua list of matching values */
    } cases[] = {
        {"string", "{'x', '', ('a'):rep(300), ('b'):rep(70000)}"},
        {"integer", "{0, -1, 127, 128, -33, 40000, 1 << 40, "
                    "math.mininteger, math.maxinteger}"},
        {"number", "{0, -7, 1 << 40, 1.5, 2.0, -0.0, 1/0, 0/0}"},
        {"boolean", "{true, false}"},
        {"table", "{{}, {1, 2, 3}, {a = {b = {}}}, {x = 1.5, 'y'}}"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char expr[64];
        snprintf(expr, sizeof expr, "'%s'", cases[i].type);
        struct seda_schema *s = compile(L, expr, false);
        push_expr(L, cases[i].values);
        lua_Integer n = luaL_len(L, -1);
        lua_pop(L, 1);
        for (lua_Integer j = 1; j <= n; j++) {
            char item[160];
            snprintf(item, sizeof item, "(%s)[%lld]", cases[i].values,
                     (long long)j);
            expect(L, s, item, NULL);
        }
        seda__schema_free(s);
    }

    struct seda_schema *any = compile(L, "'any'", false);
    for (size_t i = 0; i < sizeof all_values / sizeof all_values[0]; i++)
        expect(L, any, all_values[i], NULL);
    expect(L, any, "nil", "type: payload: expected any, got nil");
    seda__schema_free(any);
}

static void test_schema_type_names_reject_mismatches(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    static const struct {
        const char *type, *value, *want;
    } cases[] = {
        {"string", "1", "type: payload: expected string, got number"},
        {"string", "1.5", "type: payload: expected string, got number"},
        {"string", "{}", "type: payload: expected string, got table"},
        {"string", "true", "type: payload: expected string, got boolean"},
        {"string", "nil", "type: payload: expected string, got nil"},
        {"integer", "'1'", "type: payload: expected integer, got string"},
        {"integer", "{}", "type: payload: expected integer, got table"},
        {"integer", "false", "type: payload: expected integer, got boolean"},
        {"integer", "nil", "type: payload: expected integer, got nil"},
        {"number", "'1'", "type: payload: expected number, got string"},
        {"number", "true", "type: payload: expected number, got boolean"},
        {"number", "{1}", "type: payload: expected number, got table"},
        {"boolean", "0", "type: payload: expected boolean, got number"},
        {"boolean", "'true'", "type: payload: expected boolean, got string"},
        {"boolean", "nil", "type: payload: expected boolean, got nil"},
        {"table", "'x'", "type: payload: expected table, got string"},
        {"table", "42", "type: payload: expected table, got number"},
        {"table", "true", "type: payload: expected table, got boolean"},
        {"table", "nil", "type: payload: expected table, got nil"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char expr[64];
        snprintf(expr, sizeof expr, "'%s'", cases[i].type);
        struct seda_schema *s = compile(L, expr, false);
        expect(L, s, cases[i].value, cases[i].want);
        seda__schema_free(s);
    }
}

static void test_schema_integer_excludes_integral_floats(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, "'integer'", false);
    expect(L, s, "2.0", "type: payload: expected integer, got float");
    expect(L, s, "1.5", "type: payload: expected integer, got float");
    expect(L, s, "2", NULL);
    expect(L, s, "math.tointeger(2.0)", NULL);
    seda__schema_free(s);

    s = compile(L, "{ n = 'integer' }", false);
    expect(L, s, "{ n = 3.0 }", "type: payload.n: expected integer, "
                                "got float");
    expect(L, s, "{ n = 3 }", NULL);
    seda__schema_free(s);

    s = compile(L, "'number'", false);
    expect(L, s, "2.0", NULL);
    expect(L, s, "2", NULL);
    seda__schema_free(s);
}

static void test_schema_top_level_optional_accepts_nil(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, "'string?'", false);
    expect(L, s, "nil", NULL);
    expect(L, s, "'x'", NULL);
    expect(L, s, "1", "type: payload: expected string, got number");
    seda__schema_free(s);

    s = compile(L, "'any?'", false);
    for (size_t i = 0; i < sizeof all_values / sizeof all_values[0]; i++)
        expect(L, s, all_values[i], NULL);
    expect(L, s, "nil", NULL);
    seda__schema_free(s);
}

/* ---- table schemas ---- */

#define ISSUE_SCHEMA "{ id = 'integer', name = 'string', tags = 'table?' }"

static void test_schema_table_fields_checked(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, false);

    expect(L, s, "{ id = 1, name = 'a' }", NULL);
    expect(L, s, "{ id = 1, name = 'a', tags = { 'x', 'y' } }", NULL);
    expect(L, s, "{ id = '1', name = 'a' }",
           "type: payload.id: expected integer, got string");
    expect(L, s, "{ id = 1.0, name = 'a' }",
           "type: payload.id: expected integer, got float");
    expect(L, s, "{ id = 1, name = 2 }",
           "type: payload.name: expected string, got number");
    expect(L, s, "5", "type: payload: expected table, got number");
    expect(L, s, "'{}'", "type: payload: expected table, got string");
    expect(L, s, "nil", "type: payload: expected table, got nil");
    seda__schema_free(s);
}

static void test_schema_optional_fields(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, false);

    expect(L, s, "{ id = 1, name = 'a' }", NULL);
    expect(L, s, "{ id = 1, name = 'a', tags = nil }", NULL);
    expect(L, s, "{ id = 1, name = 'a', tags = {} }", NULL);
    expect(L, s, "{ id = 1, name = 'a', tags = 'x' }",
           "type: payload.tags: expected table, got string");
    expect(L, s, "{ id = 1, name = 'a', tags = false }",
           "type: payload.tags: expected table, got boolean");
    seda__schema_free(s);

    s = compile(L, "{ a = 'string?', b = 'integer?', c = 'any?' }", false);
    expect(L, s, "{}", NULL);
    expect(L, s, "{ a = 'x', b = 2, c = {} }", NULL);
    expect(L, s, "{ b = 2.5 }", "type: payload.b: expected integer, "
                                "got float");
    seda__schema_free(s);
}

static void test_schema_missing_fields(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, false);

    expect(L, s, "{ id = 1 }",
           "type: payload.name: missing (expected string)");
    expect(L, s, "{ name = 'a', tags = {} }",
           "type: payload.id: missing (expected integer)");
    /* Several missing: the first in name order is reported. */
    expect(L, s, "{}", "type: payload.id: missing (expected integer)");
    expect(L, s, "{ 1, 2, 3 }",
           "type: payload.id: missing (expected integer)");
    seda__schema_free(s);

    s = compile(L, "{ x = 'any', ['odd key'] = 'boolean' }", false);
    expect(L, s, "{ x = 0 }",
           "type: payload[\"odd key\"]: missing (expected boolean)");
    expect(L, s, "{ ['odd key'] = true }",
           "type: payload.x: missing (expected any)");
    seda__schema_free(s);
}

static void test_schema_extra_fields_allowed_unless_strict(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    static const char *const extras[][2] = {
        {"extra = true", "type: payload.extra: unexpected field (strict)"},
        {"10", "type: payload[1]: unexpected field (strict)"},
        {"[7] = 0", "type: payload[7]: unexpected field (strict)"},
        {"[-300] = 0", "type: payload[-300]: unexpected field (strict)"},
        {"[1.5] = 0", "type: payload[1.5]: unexpected field (strict)"},
        {"[1e300] = 0", "type: payload[1e+300]: unexpected field (strict)"},
        {"[true] = 0", "type: payload[true]: unexpected field (strict)"},
        {"[false] = 0", "type: payload[false]: unexpected field (strict)"},
        {"['a b'] = 0", "type: payload[\"a b\"]: unexpected field (strict)"},
        {"['end'] = 0", "type: payload[\"end\"]: unexpected field (strict)"},
        {"['q\"\\n'] = 0",
         "type: payload[\"q\\\"\\n\"]: unexpected field (strict)"},
        {"[{}] = 0", "type: payload[{...}]: unexpected field (strict)"},
        {"Id = 1", "type: payload.Id: unexpected field (strict)"},
    };
    struct seda_schema *lax = compile(L, ISSUE_SCHEMA, false);
    struct seda_schema *strict = compile(L, ISSUE_SCHEMA, true);

    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++) {
        char expr[128];
        snprintf(expr, sizeof expr, "{ id = 1, name = 'a', %s }",
                 extras[i][0]);
        expect(L, lax, expr, NULL);
        expect(L, strict, expr, extras[i][1]);
    }
    expect(L, strict, "{ id = 1, name = 'a' }", NULL);
    expect(L, strict, "{ id = 1, name = 'a', tags = { 1, x = 2 } }", NULL);
    seda__schema_free(lax);
    seda__schema_free(strict);

    /* An empty strict schema accepts only the empty table. */
    strict = compile(L, "{}", true);
    expect(L, strict, "{}", NULL);
    expect(L, strict, "{ 1 }", "type: payload[1]: unexpected field (strict)");
    seda__schema_free(strict);
}

static void test_schema_nested_schemas(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    const char *schema =
        "{ id = 'integer', meta = { owner = 'string', "
        "['the size'] = 'number?', inner = { ok = 'boolean' } } }";
    struct seda_schema *s = compile(L, schema, false);

    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = { ok = true } } }",
           NULL);
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = { ok = true }, "
                 "['the size'] = 2.5, more = 1 } }", NULL);
    expect(L, s, "{ id = 1, meta = { owner = 1, inner = { ok = true } } }",
           "type: payload.meta.owner: expected string, got number");
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = { ok = true }, "
                 "['the size'] = 'big' } }",
           "type: payload.meta[\"the size\"]: expected number, got string");
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = {} } }",
           "type: payload.meta.inner.ok: missing (expected boolean)");
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = 'no' } }",
           "type: payload.meta.inner: expected table, got string");
    expect(L, s, "{ id = 1, meta = 'x' }",
           "type: payload.meta: expected table, got string");
    expect(L, s, "{ id = 1 }", "type: payload.meta: missing (expected table)");
    seda__schema_free(s);

    /* strict reaches nested schemas, not plain "table" fields. */
    s = compile(L, schema, true);
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = { ok = true } } }",
           NULL);
    expect(L, s, "{ id = 1, meta = { owner = 'x', inner = { ok = true, "
                 "z = 1 } } }",
           "type: payload.meta.inner.z: unexpected field (strict)");
    seda__schema_free(s);
}

static void test_schema_bad_schemas(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;

    bad_schema(L, "5", "accepts: must be a type name or a table");
    bad_schema(L, "nil", "accepts: must be a type name or a table");
    bad_schema(L, "true", "accepts: must be a type name or a table");
    bad_schema(L, "print", "accepts: must be a type name or a table");
    bad_schema(L, "'strin'", "accepts: unknown type 'strin'");
    bad_schema(L, "''", "accepts: unknown type ''");
    bad_schema(L, "'?'", "accepts: unknown type ''");
    bad_schema(L, "'string?" "?'", "accepts: unknown type 'string?'");
    bad_schema(L, "'String'", "accepts: unknown type 'String'");
    bad_schema(L, "'nil'", "accepts: unknown type 'nil'");
    bad_schema(L, "{ tags = 'tabel?' }", "accepts.tags: unknown type 'tabel'");
    bad_schema(L, "{ x = 5 }", "accepts.x: expected a type name or a table");
    bad_schema(L, "{ x = true }",
               "accepts.x: expected a type name or a table");
    bad_schema(L, "{ 'string' }", "accepts[1]: field names must be strings");
    bad_schema(L, "{ [true] = 'string' }",
               "accepts[true]: field names must be strings");
    bad_schema(L, "{ meta = { owner = 'strng' } }",
               "accepts.meta.owner: unknown type 'strng'");
    bad_schema(L, "{ ['a b'] = { 2 } }",
               "accepts[\"a b\"][1]: field names must be strings");
    bad_schema(L, "(function() local t = {} t.self = t return t end)()",
               "accepts.self: cyclic schema");
    bad_schema(L, "(function() local t = {} for i = 1, 257 do "
                  "t['f' .. i] = 'any' end return t end)()",
               "accepts: more than 256 fields");

    /* 256 fields is fine. */
    struct seda_schema *s = compile(L,
        "(function() local t = {} for i = 1, 256 do "
        "t['f' .. i] = 'integer' end return t end)()", false);
    expect(L, s, "(function() local t = {} for i = 1, 256 do "
                 "t['f' .. i] = i end return t end)()", NULL);
    expect(L, s, "(function() local t = {} for i = 1, 256 do "
                 "t['f' .. i] = i end t.f200 = nil return t end)()",
           "type: payload.f200: missing (expected integer)");
    seda__schema_free(s);

    /* Nesting: 200 levels compile, 201 do not. */
    s = compile(L, "(function() local t = { x = 'any' } for i = 2, 200 do "
                   "t = { a = t } end return t end)()", false);
    seda__schema_free(s);
    char err[256];
    push_expr(L, "(function() local t = { x = 'any' } for i = 2, 201 do "
                 "t = { a = t } end return t end)()");
    assert_null(seda__schema_compile(L, -1, false, err, sizeof err));
    lua_pop(L, 1);
    assert_non_null(strstr(err, ": nested deeper than 200 levels"));
    assert_memory_equal(err, "accepts.a.a.a", 13);
}

/* ---- raw payloads ---- */

static void test_schema_raw_string_payloads(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    static const struct {
        const char *schema, *want;
    } cases[] = {
        {"'string'", NULL},
        {"'string?'", NULL},
        {"'any'", NULL},
        {"'integer'", "type: payload: expected integer, got string"},
        {"'table'", "type: payload: expected table, got string"},
        {ISSUE_SCHEMA, "type: payload: expected table, got string"},
    };
    char err[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct seda_schema *s = compile(L, cases[i].schema, true);
        int rc = seda__schema_check_bytes(s, "\x0c\x00\x00", 3,
                                          SEDA_SCHEMA_RAW, err, sizeof err);
        verdict("raw", cases[i].schema, rc, err, cases[i].want);
        rc = seda__schema_check_bytes(s, NULL, 0, SEDA_SCHEMA_RAW, err,
                                      sizeof err);
        verdict("raw empty", cases[i].schema, rc, err, cases[i].want);
        seda__schema_free(s);
    }

    struct seda_schema *s = compile(L, "'any?'", false);
    assert_int_equal(seda__schema_check_bytes(s, "x", 1, 7, err, sizeof err),
                     -1);
    assert_string_equal(err, MALFORMED);
    seda__schema_free(s);
}

/* ---- hostile bytes ---- */

static const char *const valid_payloads[] = {
    "{ id = 1, name = 'a' }",
    "{ id = -40000, name = ('n'):rep(40), tags = { 1, 2.5, 'x', {}, "
    "[{}] = true } }",
    "{ id = 1 << 40, name = '', tags = { [1.5] = false } , 7, 8 }",
    "(function() local t = { id = 3, name = 'big' } for i = 1, 300 do "
    "t[i] = i end return t end)()",
};

static void test_schema_truncated_encodings_are_malformed(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, false);
    struct seda_schema *any = compile(L, "'any?'", false);
    seda_wbuf b = {0};
    char err[256];

    for (size_t i = 0; i < sizeof valid_payloads / sizeof valid_payloads[0];
         i++) {
        push_expr(L, valid_payloads[i]);
        encode_top(L, &b);
        lua_pop(L, 1);
        expect_bytes(s, b.p, b.len, NULL);
        expect_bytes(any, b.p, b.len, NULL);
        for (size_t n = 0; n < b.len; n++) {
            /* A copy of exactly n bytes, so ASan sees any overread. */
            unsigned char *cut = malloc(n > 0 ? n : 1);
            assert_non_null(cut);
            memcpy(cut, b.p, n);
            expect_bytes(s, cut, n, MALFORMED);
            expect_bytes(any, cut, n, MALFORMED);
            assert_int_equal(seda__codec_decode(L, cut, n, err, sizeof err),
                             -1);
            free(cut);
        }
        /* One trailing byte too many. */
        unsigned char *more = malloc(b.len + 1);
        assert_non_null(more);
        memcpy(more, b.p, b.len);
        more[b.len] = 0x80;
        expect_bytes(s, more, b.len + 1, MALFORMED);
        expect_bytes(any, more, b.len + 1, MALFORMED);
        free(more);
    }
    expect_bytes(s, NULL, 0, MALFORMED);
    seda__codec_wbuf_free(&b);
    seda__schema_free(s);
    seda__schema_free(any);
}

/* Checks p[0..n) with every schema in ss against the decoder: with "any?"
 * the checker accepts exactly what the decoder accepts; with any schema,
 * an accepted payload decodes to a value check_value accepts. */
static void cross_check(lua_State *L, struct seda_schema *const *ss,
                        size_t nss, const unsigned char *p, size_t n)
{
    char err[256], derr[256];
    int top = lua_gettop(L);
    int dec = seda__codec_decode(L, p, n, derr, sizeof derr);
    int rc = seda__schema_check_bytes(ss[0], p, n, SEDA_SCHEMA_CODEC, err,
                                      sizeof err);
    if ((rc == 0) != (dec == 0))
        fail_msg("any? says %d \"%s\", decoder says %d \"%s\" (%zu bytes)",
                 rc, err, dec, derr, n);
    for (size_t i = 1; i < nss; i++) {
        rc = seda__schema_check_bytes(ss[i], p, n, SEDA_SCHEMA_CODEC, err,
                                      sizeof err);
        assert_true(strncmp(err, "type: payload", 13) == 0 || rc == 0);
        if (rc != 0)
            continue;
        if (dec != 0)
            fail_msg("schema %zu accepted bytes the decoder refuses: %s",
                     i, derr);
        if (seda__schema_check_value(ss[i], L, -1, err, sizeof err) != 0)
            fail_msg("schema %zu accepted bytes that decode to a value it "
                     "refuses: %s", i, err);
    }
    lua_settop(L, top);
}

static void test_schema_random_bytes_agree_with_decoder(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *ss[] = {
        compile(L, "'any?'", false),
        compile(L, ISSUE_SCHEMA, false),
        compile(L, ISSUE_SCHEMA, true),
        compile(L, "{ id = 'number', tags = { x = 'string?' } }", false),
        compile(L, "'table'", false),
    };
    size_t nss = sizeof ss / sizeof ss[0];
    uint64_t x = UINT64_C(0x9e3779b97f4a7c15);
    unsigned char buf[512];
    seda_wbuf b = {0};
    int iters = getenv("STRESS") != NULL ? 2000000 : 100000;

    /* Pure random bytes, biased towards small tags and counts. */
    for (int it = 0; it < iters; it++) {
        size_t n = (size_t)(rng_next(&x) % 48);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&x);
            buf[i] = (unsigned char)(r % 4 == 0 ? r >> 8 : (r >> 8) % 16);
            if (r % 7 == 0)
                buf[i] = (unsigned char)(0x20 + (r >> 16) % 4);
        }
        cross_check(L, ss, nss, buf, n);
    }

    /* Mutations of valid encodings. */
    for (size_t v = 0; v < sizeof valid_payloads / sizeof valid_payloads[0];
         v++) {
        push_expr(L, valid_payloads[v]);
        encode_top(L, &b);
        lua_pop(L, 1);
        if (b.len > sizeof buf)
            continue;
        for (int it = 0; it < iters / 4; it++) {
            memcpy(buf, b.p, b.len);
            size_t n = b.len;
            int edits = 1 + (int)(rng_next(&x) % 3);
            for (int e = 0; e < edits; e++) {
                uint64_t r = rng_next(&x);
                size_t at = (size_t)(r % n);
                switch ((r >> 32) % 4) {
                case 0: buf[at] = (unsigned char)(r >> 40); break;
                case 1: buf[at] ^= (unsigned char)(1u << ((r >> 40) % 8));
                        break;
                case 2: buf[at] = (unsigned char)((r >> 40) % 16); break;
                default: n = at + 1; break;
                }
            }
            cross_check(L, ss, nss, buf, n);
        }
    }
    seda__codec_wbuf_free(&b);
    for (size_t i = 0; i < nss; i++)
        seda__schema_free(ss[i]);
}

static void test_schema_depth_limit_matches_decoder(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, "'table'", false);
    struct seda_schema *any = compile(L, "'any'", false);
    enum { N = SEDA_CODEC_MAX_DEPTH + 1 };
    unsigned char buf[3 * N + 1];
    char err[256];

    for (int d = SEDA_CODEC_MAX_DEPTH; d <= N; d++) {
        for (int i = 0; i < d; i++) {
            buf[3 * i] = 0x0c;     /* table */
            buf[3 * i + 1] = 0x01; /* one array element: */
            buf[3 * i + 2] = 0x00; /* no pairs */
        }
        buf[3 * d] = 0x80; /* the innermost element, 0 */
        size_t n = 3 * (size_t)d + 1;
        int dec = seda__codec_decode(L, buf, n, err, sizeof err);
        if (dec == 0)
            lua_pop(L, 1);
        assert_int_equal(dec, d == SEDA_CODEC_MAX_DEPTH ? 0 : -1);
        expect_bytes(s, buf, n, d == SEDA_CODEC_MAX_DEPTH ? NULL : MALFORMED);
        expect_bytes(any, buf, n,
                     d == SEDA_CODEC_MAX_DEPTH ? NULL : MALFORMED);
    }
    seda__schema_free(s);
    seda__schema_free(any);
}

/* Expands a string literal to its bytes and length (without the NUL). */
#define B(lit) lit, sizeof(lit) - 1

static void test_schema_hand_made_encodings(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, "{ id = 'integer', opt = 'string?' }",
                                    false);
    struct seda_schema *strict = compile(L, "{}", true);
    struct seda_schema *empty = compile(L, "{}", false);

    /* Duplicate schema field: refused (the decoder would keep the last). */
    expect_bytes(s, B("\x0c\x00\x02" "\x22id\x81" "\x22id\x82"), MALFORMED);
    expect_bytes(s, B("\x0c\x00\x02" "\x22id\x81" "\x22id\x00"), MALFORMED);
    expect_bytes(s, B("\x0c\x00\x02" "\x22id\x00" "\x22id\x81"), MALFORMED);
    /* Duplicates outside the schema do not matter. */
    expect_bytes(s, B("\x0c\x00\x03" "\x22id\x81" "\x21x\x81" "\x21x\x82"),
                 NULL);
    /* A nil value is absent, as after decoding. */
    expect_bytes(s, B("\x0c\x00\x02" "\x22id\x81" "\x23opt\x00"), NULL);
    expect_bytes(s, B("\x0c\x00\x02" "\x22id\x00" "\x23opt\x21z"),
                 "type: payload.id: missing (expected integer)");
    expect_bytes(strict, B("\x0c\x02\x01" "\x00\x00" "\x21x\x00"), NULL);
    expect_bytes(strict, B("\x0c\x02\x00" "\x00\x81"),
                 "type: payload[2]: unexpected field (strict)");
    /* Non-minimal forms the decoder accepts. */
    expect_bytes(s, B("\x0d\x00\x00\x00\x00\x01\x00\x00\x00"
                      "\x0a\x02\x00\x00\x00id"
                      "\x07\x05\x00\x00\x00\x00\x00\x00\x00"), NULL);
    expect_bytes(s, B("\x0c\x00\x01" "\x08\x02id" "\x04\x05"), NULL);
    expect_bytes(s, B("\x0c\x00\x01" "\x08\x02id" "\x03\x00\x00\x00\x00"
                      "\x00\x00\x14\x40"),
                 "type: payload.id: expected integer, got float");
    /* Keys the decoder refuses. */
    expect_bytes(empty, B("\x0c\x00\x01" "\x00\x81"), MALFORMED);
    expect_bytes(empty, B("\x0c\x00\x01" "\x03\x00\x00\x00\x00\x00\x00"
                          "\xf8\x7f" "\x81"), MALFORMED);
    /* A float key that is not NaN is fine, infinity included. */
    expect_bytes(empty, B("\x0c\x00\x01" "\x03\x00\x00\x00\x00\x00\x00"
                          "\xf0\x7f" "\x81"), NULL);
    expect_bytes(strict, B("\x0c\x00\x01" "\x03\x00\x00\x00\x00\x00\x00"
                           "\xf0\x7f" "\x81"),
                 "type: payload[inf]: unexpected field (strict)");
    /* Claims larger than the input. */
    expect_bytes(empty, B("\x0c\xff\x00\x80"), MALFORMED);
    expect_bytes(empty, B("\x0d\xff\xff\xff\x7f\x00\x00\x00\x00\x80"),
                 MALFORMED);
    expect_bytes(empty, B("\x0c\x00\x01" "\x0b\xff\xff\xff\xff\xff\xff"
                          "\xff\xff" "\x80"), MALFORMED);
    /* Invalid tags. */
    expect_bytes(empty, B("\x0f"), MALFORMED);
    /* seda.null is a value, never a key. */
    expect_bytes(empty, B("\x0c\x00\x01" "\x0e\x80"), MALFORMED);
    expect_bytes(empty, B("\x0c\x01\x00\x40"), MALFORMED);
    seda__schema_free(s);
    seda__schema_free(strict);
    seda__schema_free(empty);
}

/* ---- contract details ---- */

static void test_schema_checkers_do_not_allocate(void **state)
{
#ifdef NO_MALLOC_HOOK
    (void)state;
    skip();
#else
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, true);
    seda_wbuf ok = {0}, bad = {0};
    char err[256];

    push_expr(L, "{ id = 1, name = 'a', tags = { 1, 2 } }");
    encode_top(L, &ok);
    push_expr(L, "{ id = 1, name = 'a', [1.25] = 0 }");
    encode_top(L, &bad);

    /* The hook itself works. */
    counting = 1;
    void *volatile probe = malloc(16);
    counting = 0;
    free(probe);
    assert_int_equal(nallocs, 1);

    nallocs = 0;
    counting = 1;
    int r1 = seda__schema_check_bytes(s, ok.p, ok.len, SEDA_SCHEMA_CODEC,
                                      err, sizeof err);
    int r2 = seda__schema_check_bytes(s, bad.p, bad.len, SEDA_SCHEMA_CODEC,
                                      err, sizeof err);
    int r3 = seda__schema_check_bytes(s, bad.p, bad.len - 1,
                                      SEDA_SCHEMA_CODEC, err, sizeof err);
    int r4 = seda__schema_check_bytes(s, "x", 1, SEDA_SCHEMA_RAW, err,
                                      sizeof err);
    int r5 = seda__schema_check_value(s, L, -2, err, sizeof err);
    int r6 = seda__schema_check_value(s, L, -1, err, sizeof err);
    counting = 0;
    assert_int_equal(nallocs, 0);
    assert_int_equal(r1, 0);
    assert_int_equal(r2, -1);
    assert_int_equal(r3, -1);
    assert_int_equal(r4, -1);
    assert_int_equal(r5, 0);
    assert_int_equal(r6, -1);
    assert_string_equal(err, "type: payload[1.25]: unexpected field (strict)");

    lua_pop(L, 2);
    seda__codec_wbuf_free(&ok);
    seda__codec_wbuf_free(&bad);
    seda__schema_free(s);
#endif
}

static void test_schema_messages_truncate_safely(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, false);
    const char *want = "type: payload.id: expected integer, got string";
    seda_wbuf b = {0};
    char err[64];

    push_expr(L, "{ id = 'x', name = 'a' }");
    encode_top(L, &b);
    for (size_t n = 1; n <= sizeof err; n++) {
        memset(err, 'Z', sizeof err);
        assert_int_equal(seda__schema_check_value(s, L, -1, err, n), -1);
        assert_int_equal(strlen(err), n - 1 < strlen(want) ? n - 1
                                                           : strlen(want));
        assert_memory_equal(err, want, strlen(err));
        memset(err, 'Z', sizeof err);
        assert_int_equal(seda__schema_check_bytes(s, b.p, b.len,
                                                  SEDA_SCHEMA_CODEC, err, n),
                         -1);
        assert_memory_equal(err, want, strlen(err));
    }
    assert_int_equal(seda__schema_check_value(s, L, -1, NULL, 0), -1);
    assert_int_equal(seda__schema_check_bytes(s, b.p, b.len,
                                              SEDA_SCHEMA_CODEC, NULL, 0),
                     -1);
    lua_pop(L, 1);
    /* An absent value (an index past the top) is nil. */
    assert_null(seda__schema_compile(L, 1, false, NULL, 0));
    assert_int_equal(seda__schema_check_value(s, L, 1, err, sizeof err), -1);
    assert_string_equal(err, "type: payload: expected table, got nil");
    seda__codec_wbuf_free(&b);
    seda__schema_free(s);
    seda__schema_free(NULL);
}

static void test_schema_shared_between_states(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, true);

    /* The schema keeps nothing of the state it was compiled in. */
    lua_State *L2 = luaL_newstate();
    assert_non_null(L2);
    luaL_openlibs(L2);
    expect(L2, s, "{ id = 1, name = 'a' }", NULL);
    expect(L2, s, "{ id = 1, name = 'a', x = 0 }",
           "type: payload.x: unexpected field (strict)");
    lua_close(L2);
    lua_gc(L, LUA_GCCOLLECT);
    expect(L, s, "{ id = 1, name = 'a' }", NULL);
    seda__schema_free(s);
}

static void test_schema_metatables_are_ignored(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    struct seda_schema *s = compile(L, ISSUE_SCHEMA, true);
    char err[256];

    push_expr(L, "setmetatable({ id = 1 }, { __index = function() "
                 "error('called') end, __pairs = function() "
                 "error('called') end })");
    assert_int_equal(seda__schema_check_value(s, L, -1, err, sizeof err),
                     -1);
    assert_string_equal(err, "type: payload.name: missing (expected string)");
    lua_pop(L, 1);
    seda__schema_free(s);

    /* A schema table's metatable is ignored too. */
    s = compile(L, "setmetatable({ id = 'integer' }, { __index = "
                   "function() error('called') end })", false);
    expect(L, s, "{ id = 1 }", NULL);
    seda__schema_free(s);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_schema_type_names_accept_matching_values),
        T(test_schema_type_names_reject_mismatches),
        T(test_schema_integer_excludes_integral_floats),
        T(test_schema_top_level_optional_accepts_nil),
        T(test_schema_table_fields_checked),
        T(test_schema_optional_fields),
        T(test_schema_missing_fields),
        T(test_schema_extra_fields_allowed_unless_strict),
        T(test_schema_nested_schemas),
        T(test_schema_bad_schemas),
        T(test_schema_raw_string_payloads),
        T(test_schema_truncated_encodings_are_malformed),
        T(test_schema_random_bytes_agree_with_decoder),
        T(test_schema_depth_limit_matches_decoder),
        T(test_schema_hand_made_encodings),
        T(test_schema_checkers_do_not_allocate),
        T(test_schema_messages_truncate_safely),
        T(test_schema_shared_between_states),
        T(test_schema_metatables_are_ignored),
    };
#undef T
    return cmocka_run_group_tests_name("schema", tests, NULL, NULL);
}
