/* SPDX-License-Identifier: MIT */
/*
 * test_codec.c -- cmocka tests for the payload codec (src/lua/lcodec.c and
 * lcodec_decode.c).
 *
 * Pins down property C10 of the README's correctness table: every supported value survives
 * encode -> decode exactly, unsupported values and cycles fail with the
 * path in the message, and truncated, bit-flipped, random or hostile bytes
 * decode to an error, never a crash.
 *
 * DESIGN
 *   - One lua_State per test, created by the setup with a counting
 *     allocator (so a test can check that hostile input did not allocate)
 *     and three helpers exported to Lua:
 *       rt(v)       encodes and decodes v, returning the copy (raises on
 *                   failure);
 *       enc(v)      returns the encoding as a string, or nil, message;
 *       dec(s)      decodes the bytes of string s (raises on failure);
 *       deq(a, b)   deep equality: same types and subtypes, bit-identical
 *                   floats, equal strings, tables with deep-equal pairs.
 *     Most value checks are then short Lua chunks run with run().
 *   - Single-threaded; every test leaves the stack empty and the state is
 *     closed by the teardown.
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

/* ---- fixture ---- */

struct fixture {
    lua_State *L;   /* the state under test */
    size_t biggest; /* largest single allocation request seen */
};

static void *count_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct fixture *f = ud;
    (void)osize;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (nsize > f->biggest)
        f->biggest = nsize;
    return realloc(ptr, nsize);
}

/* Compares the values at absolute indices a and b.  Returns 1 when equal.
 * Floats compare by bits, so nan equals the same nan and -0.0 differs from
 * 0.0; integers never equal floats. */
static int deep_equal(lua_State *L, int a, int b);

/* Finds in table tb (absolute index) a key deep-equal to the table key at
 * ka whose value is deep-equal to the value at va.  Returns 1 if found. */
static int find_table_key(lua_State *L, int tb, int ka, int va)
{
    lua_pushnil(L);
    while (lua_next(L, tb) != 0) {
        int top = lua_gettop(L);
        if (lua_type(L, top - 1) == LUA_TTABLE &&
            deep_equal(L, ka, top - 1) && deep_equal(L, va, top)) {
            lua_pop(L, 2);
            return 1;
        }
        lua_pop(L, 1);
    }
    return 0;
}

static int deep_equal(lua_State *L, int a, int b)
{
    int t = lua_type(L, a);
    if (t != lua_type(L, b))
        return 0;
    switch (t) {
    case LUA_TNIL:
        return 1;
    case LUA_TBOOLEAN:
        return lua_toboolean(L, a) == lua_toboolean(L, b);
    case LUA_TNUMBER:
        if (lua_isinteger(L, a) != lua_isinteger(L, b))
            return 0;
        if (lua_isinteger(L, a))
            return lua_tointeger(L, a) == lua_tointeger(L, b);
        else {
            double x = lua_tonumber(L, a), y = lua_tonumber(L, b);
            return memcmp(&x, &y, sizeof x) == 0;
        }
    case LUA_TSTRING: {
        size_t la, lb;
        const char *sa = lua_tolstring(L, a, &la);
        const char *sb = lua_tolstring(L, b, &lb);
        return la == lb && memcmp(sa, sb, la) == 0;
    }
    case LUA_TTABLE: {
        luaL_checkstack(L, 6, "deep_equal");
        size_t na = 0, nb = 0;
        lua_pushnil(L);
        while (lua_next(L, a) != 0) {
            int top = lua_gettop(L);
            int ok;
            na++;
            if (lua_type(L, top - 1) == LUA_TTABLE) {
                ok = find_table_key(L, b, top - 1, top);
            } else {
                lua_pushvalue(L, top - 1);
                lua_rawget(L, b);
                ok = deep_equal(L, top, top + 1);
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
            if (!ok) {
                lua_pop(L, 1);
                return 0;
            }
        }
        lua_pushnil(L);
        while (lua_next(L, b) != 0) {
            nb++;
            lua_pop(L, 1);
        }
        return na == nb;
    }
    default:
        return lua_rawequal(L, a, b);
    }
}

/* Lua: deq(a, b) -> boolean. */
static int l_deq(lua_State *L)
{
    lua_settop(L, 2);
    lua_pushboolean(L, deep_equal(L, 1, 2));
    return 1;
}

/* Lua: enc(v) -> string | nil, message. */
static int l_enc(lua_State *L)
{
    seda_wbuf b = {0};
    char err[1024];
    lua_settop(L, 1);
    if (seda__codec_encode(L, 1, &b, "payload", err, sizeof err) != 0) {
        seda__codec_wbuf_free(&b);
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    luaL_checkstack(L, 1, NULL);
    lua_pushlstring(L, (const char *)b.p, b.len);
    seda__codec_wbuf_free(&b);
    return 1;
}

/* Lua: dec(s) -> the value the bytes of s encode; raises on failure. */
static int l_dec(lua_State *L)
{
    size_t len;
    const char *p = luaL_checklstring(L, 1, &len);
    char err[256];
    lua_settop(L, 1);
    if (seda__codec_decode(L, p, len, err, sizeof err) != 0)
        return luaL_error(L, "decode: %s", err);
    if (lua_gettop(L) != 2)
        return luaL_error(L, "decode pushed %d values", lua_gettop(L) - 1);
    return 1;
}

/* Lua: rt(v) -> copy of v through the codec; raises on failure. */
static int l_rt(lua_State *L)
{
    seda_wbuf b = {0};
    char err[256];
    lua_settop(L, 1);
    if (seda__codec_encode(L, 1, &b, "payload", err, sizeof err) != 0) {
        seda__codec_wbuf_free(&b);
        return luaL_error(L, "encode: %s", err);
    }
    if (lua_gettop(L) != 1) {
        seda__codec_wbuf_free(&b);
        return luaL_error(L, "encode left the stack unbalanced");
    }
    int rc = seda__codec_decode(L, b.p, b.len, err, sizeof err);
    seda__codec_wbuf_free(&b);
    if (rc != 0)
        return luaL_error(L, "decode: %s", err);
    if (lua_gettop(L) != 2)
        return luaL_error(L, "decode pushed %d values", lua_gettop(L) - 1);
    if (!deep_equal(L, 1, 2))
        return luaL_error(L, "round trip changed the value");
    return 1;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->L = lua_newstate(count_alloc, f);
    if (f->L == NULL) {
        free(f);
        return -1;
    }
    luaL_openlibs(f->L);
    lua_register(f->L, "deq", l_deq);
    lua_register(f->L, "enc", l_enc);
    lua_register(f->L, "dec", l_dec);
    lua_register(f->L, "rt", l_rt);
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

/* Runs a Lua chunk and fails the test with its error message. */
static void run(lua_State *L, const char *code)
{
    if (luaL_dostring(L, code) != 0)
        fail_msg("Lua: %s", lua_tostring(L, -1));
    lua_settop(L, 0);
}

/* Evaluates expr and pushes its single value. */
static void eval(lua_State *L, const char *expr)
{
    char code[1024];
    snprintf(code, sizeof code, "return %s", expr);
    if (luaL_loadstring(L, code) != 0 || lua_pcall(L, 0, 1, 0) != 0)
        fail_msg("Lua: %s", lua_tostring(L, -1));
}

/* Encodes expr and checks that it fails with exactly `want`. */
static void expect_error(lua_State *L, const char *expr, const char *root,
                         const char *want)
{
    seda_wbuf b = {0};
    char err[256];
    eval(L, expr);
    int top = lua_gettop(L);
    assert_int_equal(seda__codec_encode(L, -1, &b, root, err, sizeof err),
                     -1);
    assert_int_equal(lua_gettop(L), top);
    assert_int_equal(b.len, 0);
    assert_string_equal(err, want);
    lua_settop(L, 0);
    seda__codec_wbuf_free(&b);
}

/* Encodes the value of expr into b (which the caller frees). */
static void encode_expr(lua_State *L, const char *expr, seda_wbuf *b)
{
    char err[256];
    eval(L, expr);
    b->len = 0;
    if (seda__codec_encode(L, -1, b, "payload", err, sizeof err) != 0)
        fail_msg("encode %s: %s", expr, err);
    lua_settop(L, 0);
}

/* ---- supported values survive exactly ---- */

static void test_codec_integers_exact(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local v = {0, 1, -1, 31, 32, -32, -33, 127, 128, -128, -129, 255,"
        "  256, 32767, 32768, -32768, -32769, 65535, 65536,"
        "  2147483647, 2147483648, -2147483648, -2147483649,"
        "  4294967295, 4294967296, math.maxinteger, math.mininteger,"
        "  math.maxinteger - 1, math.mininteger + 1,"
        "  (1 << 53) - 1, 1 << 53, (1 << 53) + 1,"
        "  -(1 << 53) - 1, -(1 << 53), -(1 << 53) + 1}\n"
        "for _, x in ipairs(v) do\n"
        "  local y = rt(x)\n"
        "  assert(math.type(y) == 'integer', tostring(x))\n"
        "  assert(y == x, tostring(x))\n"
        "end\n"
        "assert(#enc(5) == 1 and #enc(-32) == 1 and #enc(200) == 3)\n"
        "assert(#enc(math.mininteger) == 9)\n");
}

static void test_codec_floats_exact(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local v = {0.0, 1.0, 1.5, -2.5, 0.1, 1/3, 2^53, -2^63, 2^63,"
        "  1e308, 1.7976931348623157e308, 2.2250738585072014e-308,"
        "  2.2250738585072009e-308, 4.9e-324, -4.9e-324, math.huge,"
        "  -math.huge, math.pi}\n"
        "for _, x in ipairs(v) do\n"
        "  local y = rt(x)\n"
        "  assert(math.type(y) == 'float', tostring(x))\n"
        "  assert(y == x and string.pack('d', y) == string.pack('d', x),"
        "         tostring(x))\n"
        "end\n"
        "local nz = rt(-0.0)\n"
        "assert(math.type(nz) == 'float' and nz == 0 and 1/nz == -math.huge)\n"
        "assert(1/rt(0.0) == math.huge)\n"
        "local nan = rt(0/0)\n"
        "assert(math.type(nan) == 'float' and nan ~= nan)\n"
        "local qn = string.unpack('<d',"
        "  string.pack('<I8', 0x7ff8000000000123))\n"
        "assert(string.pack('<d', rt(qn)) == string.pack('<d', qn))\n");
}

static void test_codec_strings_binary_safe(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local all = {}\n"
        "for i = 0, 255 do all[#all + 1] = string.char(i) end\n"
        "all = table.concat(all)\n"
        "local v = {'', 'a', 'a\\0b', '\\0', all, all:rep(300),"
        "  ('x'):rep(31), ('x'):rep(32), ('x'):rep(255), ('x'):rep(256),"
        "  ('y'):rep(65535), ('y'):rep(65536), ('z'):rep(70000),"
        "  ('\\0\\1'):rep(1 << 19)}\n"
        "for _, s in ipairs(v) do\n"
        "  local t = rt(s)\n"
        "  assert(t == s and #t == #s, #s)\n"
        "end\n"
        "assert(#enc('abc') == 4 and #enc(('x'):rep(32)) == 34)\n");
}

static void test_codec_nested_tables(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local t = {id = 12345, name = 'sensor-17', value = 21.5, ok = true,"
        "  tags = {'a', 'b', {deep = {deeper = {deepest = {1, 2.5, 'x',"
        "  false, {}}}}}}, n = {[-1] = 'neg', [0] = 'zero'}}\n"
        "local c = rt(t)\n"
        "assert(c ~= t and deq(c, t))\n"
        "assert(c.tags[3].deep.deeper.deepest[2] == 2.5)\n"
        "assert(c.n[-1] == 'neg' and c.n[0] == 'zero')\n");
}

static void test_codec_mixed_keys_distinct(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local t = {[1] = 'int', [1.5] = 'float', ['1'] = 'str',"
        "  [true] = 'yes', [false] = 'no', [2.0] = 'two', [-0.0] = 'zero',"
        "  [math.huge] = 'inf', [math.mininteger] = 'min'}\n"
        "local c = rt(t)\n"
        "assert(c[1] == 'int' and c[1.5] == 'float' and c['1'] == 'str')\n"
        "assert(c[true] == 'yes' and c[false] == 'no' and c[2] == 'two')\n"
        "assert(c[0] == 'zero' and c[math.huge] == 'inf')\n"
        "assert(c[math.mininteger] == 'min')\n"
        "for k in pairs(c) do\n"
        "  if k == 2 or k == 1 or k == 0 then\n"
        "    assert(math.type(k) == 'integer')\n"
        "  end\n"
        "end\n"
        "local n = 0; for _ in pairs(c) do n = n + 1 end\n"
        "assert(n == 9)\n"
        "local k = {1, 2}\n"
        "local tk = rt({[k] = 'tablekey'})\n"
        "local key, val = next(tk)\n"
        "assert(type(key) == 'table' and key ~= k and deq(key, k))\n"
        "assert(val == 'tablekey')\n");
}

static void test_codec_sparse_arrays(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local cases = {{1, nil, 3}, {nil, nil, 3}, {1, 2, 3, nil, 5,"
        "  [10] = 10, [100] = 100}, {[3] = 3, [2] = 2, [1] = 1},"
        "  {[2] = 'b'}, {[0] = 0, 1, 2}}\n"
        "for i, t in ipairs(cases) do\n"
        "  local c = rt(t)\n"
        "  assert(deq(c, t), i)\n"
        "end\n"
        "local c = rt({1, nil, 3})\n"
        "assert(c[1] == 1 and c[2] == nil and c[3] == 3)\n"
        "local t = {}\n"
        "for i = 1, 10 do t[i] = i end\n"
        "t[5] = nil\n"
        "assert(deq(rt(t), t))\n");
}

static void test_codec_empty_table(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local c = rt({})\n"
        "assert(type(c) == 'table' and next(c) == nil)\n"
        "assert(enc({}) == '\\12\\0\\0')\n"
        "assert(rt(nil) == nil and rt(true) == true and rt(false) == false)\n"
        "assert(select('#', rt(nil)) == 1)\n");
}

static void test_codec_large_tables(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    /* Array parts over 255 use the large header up front; hash parts over
     * 255 widen the header after the walk (memmove), also when nested. */
    run(L,
        "local a = {}\n"
        "for i = 1, 1000 do a[i] = i * 3 end\n"
        "assert(deq(rt(a), a))\n"
        "local h = {}\n"
        "for i = 1, 300 do h['k' .. i] = i end\n"
        "assert(deq(rt(h), h))\n"
        "local outer = {}\n"
        "for i = 1, 300 do outer['o' .. i] = (i % 50 == 0) and h or i end\n"
        "outer.arr = a\n"
        "outer[1] = h\n"
        "assert(deq(rt(outer), outer))\n"
        "local m = {}\n"
        "for i = 1, 256 do m[i] = i; m[-i] = i end\n"
        "assert(deq(rt(m), m))\n");
}

/* The decoder keeps recently decoded short keys in a per-state cache
 * (lcodec.c).  Keys that share a cache set or evict each other, keys just
 * over the cached length, binary and empty keys, and keys whose only
 * remaining reference is the cache (across full collections) must all
 * come back exactly, each with its own value. */
static void test_codec_key_cache(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local function check(t)\n"
        "  local c = rt(t); assert(deq(c, t)); return c\n"
        "end\n"
        /* Far more distinct keys than the cache has slots. */
        "local big = {}\n"
        "for i = 1, 500 do big['k' .. i] = i end\n"
        "for round = 1, 3 do check(big); collectgarbage() end\n"
        /* Lengths 1..40 (the cache takes 1..31), keys differing only in
         * one middle byte or in length, NULs, the empty key. */
        "local odd = {['a\\0b'] = 1, ['a\\0c'] = 2, a = 3, aa = 4,"
        "  [''] = 5}\n"
        "for n = 1, 40 do\n"
        "  local h = n // 2\n"
        "  odd[string.rep('x', n)] = n\n"
        "  odd[string.rep('x', h) .. 'y' .. string.rep('x', n - h - 1)] = -n\n"
        "end\n"
        "for round = 1, 3 do check(odd) end\n"
        /* Changing key sets: every key must map to its own value. */
        "for i = 1, 300 do\n"
        "  local f, g = 'f' .. i % 97, 'g' .. i % 89\n"
        "  local c = check({[f] = i, [g] = -i, id = i})\n"
        "  assert(c[f] == i and c[g] == -i and c.id == i)\n"
        "  if i % 50 == 0 then collectgarbage() end\n"
        "end\n"
        /* Keys built at run time, dropped, collected, decoded again from
         * the bytes alone: the cache's copies must still be valid. */
        "local bytes = {}\n"
        "for i = 1, 100 do\n"
        "  bytes[i] = enc({['gone' .. i] = i, ['gone' .. i + 1] = -i})\n"
        "  dec(bytes[i])\n"
        "end\n"
        "collectgarbage(); collectgarbage()\n"
        "for i = 100, 1, -1 do\n"
        "  local c = dec(bytes[i])\n"
        "  assert(c['gone' .. i] == i and c['gone' .. i + 1] == -i)\n"
        "  local n = 0; for _ in pairs(c) do n = n + 1 end\n"
        "  assert(n == 2)\n"
        "end\n"
        /* Someone else's value under the cache's registry key (the only
         * light userdata key with a full userdata value), and a registry
         * with a metatable, which raw access ignores. */
        "local reg = debug.getregistry()\n"
        "local key\n"
        "for k, v in pairs(reg) do\n"
        "  if type(k) == 'userdata' and type(v) == 'userdata' then\n"
        "    assert(key == nil); key = k\n"
        "  end\n"
        "end\n"
        "assert(key ~= nil)\n"
        "for _, v in ipairs({{}, io.stdout, 'x'}) do\n"
        "  reg[key] = v\n"
        "  check({alpha = 1, beta = 2})\n"
        "  assert(type(reg[key]) == 'userdata' and reg[key] ~= io.stdout)\n"
        "  check({alpha = 1, beta = 2})\n"
        "end\n"
        "setmetatable(reg, {__index = function() error('called') end,"
        "  __newindex = function() error('called') end})\n"
        "reg[key] = nil\n"
        "check({alpha = 1, beta = 2}); check({alpha = 1, beta = 2})\n"
        "setmetatable(reg, nil)\n");
}

static void test_codec_shared_table_copied_twice(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local shared = {x = 1}\n"
        "local t = {a = shared, b = shared, list = {shared, shared}}\n"
        "local c = rt(t)\n"
        "assert(c.a ~= c.b and deq(c.a, shared) and deq(c.b, shared))\n"
        "assert(c.list[1] ~= c.list[2])\n");
}

static void test_codec_metatables_ignored(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local called = false\n"
        "local mt = {__index = function() called = true; return 1 end,"
        "  __newindex = function() called = true end,"
        "  __pairs = function() called = true; return next, {}, nil end,"
        "  __len = function() called = true; return 1000 end}\n"
        "local t = setmetatable({a = 1, 2}, mt)\n"
        "local c = rt(t)\n"
        "assert(not called and getmetatable(c) == nil)\n"
        "assert(c.a == 1 and c[1] == 2 and rawlen(c) == 1)\n");
}

static void test_codec_depth_limit(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    run(L,
        "local function nest(n)\n"
        "  local t = {leaf = true}\n"
        "  for _ = 2, n do t = {t} end\n"
        "  return t\n"
        "end\n"
        "local ok = nest(200)\n"
        "assert(deq(rt(ok), ok))\n"
        "local s, err = enc(nest(201))\n"
        "assert(s == nil and err:find('nested deeper than 200 levels',"
        "  1, true), err)\n"
        "assert(err:sub(1, 14) == 'payload[1][1][', err)\n");

    /* A hand-made 201-level encoding: the decoder refuses it. */
    char err[128];
    /* 201 tables, each holding the next; the last one is empty. */
    unsigned char buf[201 * 3];
    for (int i = 0; i < 201; i++) {
        buf[3 * i] = 0x0c;
        buf[3 * i + 1] = i == 200 ? 0 : 1;
        buf[3 * i + 2] = 0;
    }
    assert_int_equal(seda__codec_decode(L, buf, sizeof buf, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "nested deeper than 200 levels"));
    assert_int_equal(lua_gettop(L), 0);
    /* The same with 200 levels decodes. */
    assert_int_equal(seda__codec_decode(L, buf + 3, sizeof buf - 3, err,
                                        sizeof err), 0);
    lua_settop(L, 0);
}

/* ---- unsupported values name their path ---- */

static void test_codec_unsupported_values_name_path(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    expect_error(L, "{items = {1, 2, {cb = print}}}", "payload",
                 "payload.items[3].cb: cannot encode a function");
    expect_error(L, "print", "payload", "payload: cannot encode a function");
    expect_error(L, "io.stdout", "payload",
                 "payload: cannot encode a userdata");
    expect_error(L, "{co = coroutine.create(print)}", "msg",
                 "msg.co: cannot encode a thread");
    expect_error(L, "{['odd key'] = {x = print}}", "payload",
                 "payload[\"odd key\"].x: cannot encode a function");
    expect_error(L, "{['end'] = print}", "payload",
                 "payload[\"end\"]: cannot encode a function");
    expect_error(L, "{['a\"b\\\\c\\n\\0'] = print}", "payload",
                 "payload[\"a\\\"b\\\\c\\n\\0\"]: cannot encode a function");
    expect_error(L, "{[('k '):rep(20)] = print}", "payload",
                 "payload[\"k k k k k k k k k k k k k k k k ...\"]: "
                 "cannot encode a function");
    expect_error(L, "{[('k'):rep(40)] = print}", "payload",
                 "payload.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk: "
                 "cannot encode a function");
    expect_error(L, "{[true] = print}", "payload",
                 "payload[true]: cannot encode a function");
    expect_error(L, "{[1.5] = {[-7] = print}}", "payload",
                 "payload[1.5][-7]: cannot encode a function");
    expect_error(L, "{_x9 = {[0.1 + 0.2] = print}}", "payload",
                 "payload._x9[0.30000000000000004]: cannot encode a function");
    expect_error(L, "{[0.1] = print}", "payload",
                 "payload[0.1]: cannot encode a function");
    expect_error(L, "{[-math.huge] = print}", "payload",
                 "payload[-inf]: cannot encode a function");
    expect_error(L, "{[1e300] = {[false] = print}}", "payload",
                 "payload[1e+300][false]: cannot encode a function");
    expect_error(L, "{[print] = 1}", "payload",
                 "payload: cannot encode a function as a table key");
    expect_error(L, "{a = {b = {[io.stdout] = 1}}}", "payload",
                 "payload.a.b: cannot encode a userdata as a table key");
    expect_error(L, "{[{f = print}] = 1}", "payload",
                 "payload{key}.f: cannot encode a function");
    expect_error(L, "{1, 2, 3, 4, {ok = 1, fn = print}}", "payload",
                 "payload[5].fn: cannot encode a function");

    /* Light userdata is refused like a full one. */
    seda_wbuf b = {0};
    char err[128];
    lua_pushlightuserdata(L, &b);
    assert_int_equal(seda__codec_encode(L, 1, &b, "payload", err, sizeof err),
                     -1);
    assert_string_equal(err, "payload: cannot encode a userdata");
    lua_settop(L, 0);
    seda__codec_wbuf_free(&b);
}

/* seda.null (the NULL light userdata, also lua-cjson's cjson.null) is a
 * value: a field or a list slot that is present. */
static void test_codec_null_round_trip(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0};
    char err[128];
    lua_createtable(L, 3, 1);
    lua_pushinteger(L, 1);
    lua_rawseti(L, -2, 1);
    lua_pushlightuserdata(L, NULL);
    lua_rawseti(L, -2, 2);
    lua_pushinteger(L, 3);
    lua_rawseti(L, -2, 3);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "none");
    assert_int_equal(seda__codec_encode(L, 1, &b, "payload", err, sizeof err),
                     0);
    lua_settop(L, 0);
    assert_int_equal(seda__codec_decode(L, b.p, b.len, err, sizeof err), 0);
    assert_int_equal(lua_rawlen(L, 1), 3);
    assert_int_equal(lua_rawgeti(L, 1, 2), LUA_TLIGHTUSERDATA);
    assert_null(lua_touserdata(L, -1));
    assert_int_equal(lua_getfield(L, 1, "none"), LUA_TLIGHTUSERDATA);
    assert_null(lua_touserdata(L, -1));
    lua_settop(L, 0);
    seda__codec_wbuf_free(&b);
}

static void test_codec_cycles_refused(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    expect_error(L, "(function() local t = {a = {b = {}}}; t.a.b = t;"
                    " return t end)()", "payload",
                 "payload.a.b: cannot encode a cyclic table");
    expect_error(L, "(function() local t = {}; t[1] = t; return t end)()",
                 "payload", "payload[1]: cannot encode a cyclic table");
    expect_error(L, "(function() local t = {x = {}}; t.x.y = t.x;"
                    " return t end)()", "payload",
                 "payload.x.y: cannot encode a cyclic table");
    expect_error(L, "(function() local t = {}; t[t] = 1; return t end)()",
                 "payload", "payload{key}: cannot encode a cyclic table");
}

static void test_codec_error_message_truncated(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0};
    char err[8];
    eval(L, "{abcdef = print}");
    memset(err, 'z', sizeof err);
    assert_int_equal(seda__codec_encode(L, 1, &b, "payload", err, sizeof err),
                     -1);
    assert_string_equal(err, "payload");
    assert_int_equal(seda__codec_encode(L, 1, &b, "payload", NULL, 0), -1);
    lua_settop(L, 0);
    seda__codec_wbuf_free(&b);
}

static void test_codec_encode_failure_leaves_buffer_and_stack(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0};
    char err[128];

    encode_expr(L, "{1, 2, 3}", &b);
    size_t len = b.len;
    unsigned char copy[16];
    memcpy(copy, b.p, len);

    /* Appending a second value keeps the first. */
    eval(L, "'tail'");
    lua_pushinteger(L, 99); /* a value above the one encoded */
    assert_int_equal(seda__codec_encode(L, 1, &b, "p", err, sizeof err), 0);
    assert_int_equal(lua_gettop(L), 2);
    assert_int_equal(b.len, len + 5);
    assert_memory_equal(b.p, copy, len);
    lua_settop(L, 0);

    /* A failure deep inside a big value restores len and the stack. */
    eval(L, "(function() local t = {}; for i = 1, 500 do t[i] = "
            "{i, ('s'):rep(i)} end; t[400][3] = {f = print}; return t end)()");
    lua_pushinteger(L, 7);
    size_t before = b.len;
    assert_int_equal(seda__codec_encode(L, -2, &b, "payload", err, sizeof err),
                     -1);
    assert_string_equal(err, "payload[400][3].f: cannot encode a function");
    assert_int_equal(b.len, before);
    assert_int_equal(lua_gettop(L), 2);
    assert_int_equal(lua_tointeger(L, 2), 7);
    lua_settop(L, 0);
    seda__codec_wbuf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.cap, 0);
    seda__codec_wbuf_free(&b);
    seda__codec_wbuf_free(NULL);
}

static void test_codec_encode_out_of_memory(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    unsigned char small[4];
    char err[64];
    /* A buffer so full that growing it overflows size_t: the growth path
     * fails exactly as a failed realloc does, and nothing is written. */
    seda_wbuf b = {.p = small, .len = SIZE_MAX - 2, .cap = SIZE_MAX - 2};

    eval(L, "{1, 2, 3}");
    eval(L, "12345");
    eval(L, "'str'");
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(seda__codec_encode(L, i, &b, "payload", err,
                                            sizeof err), -1);
        assert_string_equal(err, "out of memory");
        assert_int_equal(b.len, SIZE_MAX - 2);
        assert_int_equal(lua_gettop(L), 3);
    }
    lua_settop(L, 0);
}

/* ---- hostile input ---- */

static const char *const samples[] = {
    "{id = 12345, name = 'sensor-17', value = 21.5, ok = true, tags = 'a,b'}",
    ("{1, -1, 300, -70000, 1 << 40, math.mininteger, 0.5, 0/0, -0.0, 'x',"
     " ('y'):rep(40), ('z'):rep(300), {}, {a = {b = {c = {true, false}}}},"
     " [2.5] = 'f', [true] = 'b', ['key'] = {nil, 2}}"),
    ("(function() local t = {}; for i = 1, 300 do t[i] = i end;"
     " for i = 1, 260 do t['k' .. i] = -i end; return t end)()"),
};

static void test_codec_every_truncation_rejected(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0};
    char err[128];

    for (size_t s = 0; s < sizeof samples / sizeof samples[0]; s++) {
        encode_expr(L, samples[s], &b);
        for (size_t n = 0; n < b.len; n++) {
            /* A fresh heap copy of exactly n bytes lets ASan catch any
             * read past the end. */
            unsigned char *cut = malloc(n ? n : 1);
            assert_non_null(cut);
            memcpy(cut, b.p, n);
            if (seda__codec_decode(L, cut, n, err, sizeof err) != -1)
                fail_msg("sample %zu prefix %zu decoded", s, n);
            assert_int_equal(lua_gettop(L), 0);
            free(cut);
        }
        assert_int_equal(seda__codec_decode(L, b.p, b.len, err, sizeof err),
                         0);
        lua_settop(L, 0);
    }
    assert_int_equal(seda__codec_decode(L, NULL, 0, err, sizeof err), -1);
    seda__codec_wbuf_free(&b);
}

static void test_codec_trailing_bytes_rejected(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0};
    char err[128];

    encode_expr(L, samples[0], &b);
    b.len = 0;
    eval(L, "1");
    assert_int_equal(seda__codec_encode(L, 1, &b, "p", err, sizeof err), 0);
    assert_int_equal(seda__codec_encode(L, 1, &b, "p", err, sizeof err), 0);
    lua_settop(L, 0);
    assert_int_equal(seda__codec_decode(L, b.p, b.len, err, sizeof err), -1);
    assert_non_null(strstr(err, "trailing bytes"));
    assert_int_equal(lua_gettop(L), 0);
    seda__codec_wbuf_free(&b);
}

static void test_codec_bit_flips_never_crash(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    seda_wbuf b = {0}, again = {0};
    char err[128];

    for (size_t s = 0; s < 2; s++) {
        encode_expr(L, samples[s], &b);
        unsigned char *m = malloc(b.len);
        assert_non_null(m);
        for (size_t bit = 0; bit < b.len * 8; bit++) {
            memcpy(m, b.p, b.len);
            m[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            int rc = seda__codec_decode(L, m, b.len, err, sizeof err);
            if (rc == 0) {
                /* Whatever decodes is plain data and encodes again. */
                assert_int_equal(lua_gettop(L), 1);
                again.len = 0;
                assert_int_equal(seda__codec_encode(L, 1, &again, "p", err,
                                                    sizeof err), 0);
            }
            lua_settop(L, 0);
        }
        free(m);
    }
    seda__codec_wbuf_free(&b);
    seda__codec_wbuf_free(&again);
}

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void test_codec_random_bytes_never_crash(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    unsigned char buf[80];
    char err[128];
    int ok = 0;

    for (int i = 0; i < 100000; i++) {
        size_t n = xorshift(&seed) % sizeof buf;
        for (size_t j = 0; j < n; j++)
            buf[j] = (unsigned char)xorshift(&seed);
        /* Bias a third of them towards table and string headers. */
        if (n > 0 && i % 3 == 0)
            buf[0] = (unsigned char)(0x08 + xorshift(&seed) % 6);
        unsigned char *m = malloc(n ? n : 1);
        assert_non_null(m);
        memcpy(m, buf, n);
        if (seda__codec_decode(L, m, n, err, sizeof err) == 0) {
            ok++;
            assert_int_equal(lua_gettop(L), 1);
        } else {
            assert_int_equal(lua_gettop(L), 0);
            assert_true(err[0] != '\0');
        }
        lua_settop(L, 0);
        free(m);
    }
    assert_true(ok > 0);
}

static void test_codec_huge_claims_rejected_without_allocating(void **state)
{
    struct fixture *f = *state;
    lua_State *L = f->L;
    char err[128];
    static const struct {
        const char *bytes;
        size_t len;
        const char *why;
    } cases[] = {
        {"\x0b\xff\xff\xff\xff\xff\xff\xff\x7f" "abc", 12, "exceeds"},
        {"\x0b\xff\xff\xff\xff\xff\xff\xff\xff" "abc", 12, "exceeds"},
        {"\x0a\xff\xff\xff\xff" "abc", 8, "exceeds"},
        {"\x09\x00\x01" "abc", 6, "exceeds"},
        {"\x0d\xff\xff\xff\x7f\x00\x00\x00\x00" "\x01\x01", 11, "exceeds"},
        {"\x0d\x00\x00\x00\x00\xff\xff\xff\x7f" "\x01\x01", 11, "exceeds"},
        {"\x0d\xff\xff\xff\xff\xff\xff\xff\xff" "\x01\x01", 11, "exceeds"},
        /* The outer table owes 3 more elements; the inner claim of 6 only
         * fits if it may use the bytes those elements need. */
        {"\x0c\x04\x00" "\x0c\x06\x00" "\x81\x81\x81\x81\x81\x81", 12,
         "exceeds"},
        {"\x0c\x01\x00" "\x0c\x01\x00" "\x08\x09" "x", 9, "exceeds"},
        {"\x0f", 1, "invalid tag"},
        {"\x40", 1, "invalid tag"},
        {"\x0c\x00\x01" "\x00\x01", 5, "key is nil"},
        {"\x0c\x00\x01" "\x0e\x01", 5, "key is seda.null"},
        {"\x0c\x00\x01" "\x03\x00\x00\x00\x00\x00\x00\xf8\x7f" "\x01", 13,
         "key is NaN"},
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f->biggest = 0;
        assert_int_equal(seda__codec_decode(L, cases[i].bytes, cases[i].len,
                                            err, sizeof err), -1);
        if (strstr(err, cases[i].why) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].why);
        assert_int_equal(lua_gettop(L), 0);
        if (f->biggest > 1024)
            fail_msg("case %zu allocated %zu bytes", i, f->biggest);
    }

    /* A legitimate large count with the bytes to back it still works. */
    run(L, "local t = {} for i = 1, 100000 do t[i] = i % 100 end\n"
           "assert(deq(rt(t), t))");
}

static void test_codec_decode_accepts_non_minimal_forms(void **state)
{
    lua_State *L = ((struct fixture *)*state)->L;
    char err[128];
    /* A large header with small counts and a wide integer. */
    static const unsigned char wide[] = {
        0x0d, 1, 0, 0, 0, 1, 0, 0, 0,
        0x07, 5, 0, 0, 0, 0, 0, 0, 0,
        0x09, 1, 0, 'k', 0x02,
    };
    assert_int_equal(seda__codec_decode(L, wide, sizeof wide, err,
                                        sizeof err), 0);
    lua_setglobal(L, "w");
    run(L, "assert(w[1] == 5 and math.type(w[1]) == 'integer')\n"
           "assert(w.k == true) w = nil");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_codec_integers_exact),
        T(test_codec_floats_exact),
        T(test_codec_strings_binary_safe),
        T(test_codec_nested_tables),
        T(test_codec_mixed_keys_distinct),
        T(test_codec_sparse_arrays),
        T(test_codec_empty_table),
        T(test_codec_large_tables),
        T(test_codec_key_cache),
        T(test_codec_shared_table_copied_twice),
        T(test_codec_metatables_ignored),
        T(test_codec_depth_limit),
        T(test_codec_unsupported_values_name_path),
        T(test_codec_cycles_refused),
        T(test_codec_null_round_trip),
        T(test_codec_error_message_truncated),
        T(test_codec_encode_failure_leaves_buffer_and_stack),
        T(test_codec_encode_out_of_memory),
        T(test_codec_every_truncation_rejected),
        T(test_codec_trailing_bytes_rejected),
        T(test_codec_bit_flips_never_crash),
        T(test_codec_random_bytes_never_crash),
        T(test_codec_huge_claims_rejected_without_allocating),
        T(test_codec_decode_accepts_non_minimal_forms),
#undef T
    };
    return cmocka_run_group_tests_name("codec", tests, NULL, NULL);
}
