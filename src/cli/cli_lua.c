/* SPDX-License-Identifier: MIT */
/*
 * cli_lua.c -- lua/seda/cli.lua, lua/seda/pretty.lua and lua/seda/test.lua
 * embedded into seda-lua (the Makefile passes their paths as CLI_LUA_FILE,
 * CLI_PRETTY_FILE and CLI_TEST_FILE and makes this object depend on them).
 * seda.test is what a script requires (package.preload, cli_preload_test);
 * the other two are the program's own.
 */
#include <lauxlib.h>

#include "cli.h"

#ifndef CLI_LUA_FILE
#define CLI_LUA_FILE "lua/seda/cli.lua"
#endif
#ifndef CLI_PRETTY_FILE
#define CLI_PRETTY_FILE "lua/seda/pretty.lua"
#endif
#ifndef CLI_TEST_FILE
#define CLI_TEST_FILE "lua/seda/test.lua"
#endif

__asm__(".section .rodata\n"
        ".global cli_lua_src\n"
        ".type cli_lua_src, @object\n"
        "cli_lua_src:\n"
        ".incbin \"" CLI_LUA_FILE "\"\n"
        ".global cli_lua_end\n"
        ".type cli_lua_end, @object\n"
        "cli_lua_end:\n"
        ".byte 0\n"
        ".global cli_pretty_src\n"
        ".type cli_pretty_src, @object\n"
        "cli_pretty_src:\n"
        ".incbin \"" CLI_PRETTY_FILE "\"\n"
        ".global cli_pretty_end\n"
        ".type cli_pretty_end, @object\n"
        "cli_pretty_end:\n"
        ".byte 0\n"
        ".global cli_test_src\n"
        ".type cli_test_src, @object\n"
        "cli_test_src:\n"
        ".incbin \"" CLI_TEST_FILE "\"\n"
        ".global cli_test_end\n"
        ".type cli_test_end, @object\n"
        "cli_test_end:\n"
        ".byte 0\n"
        ".previous\n");

/* package.preload["seda.test"]: the embedded module's loader. */
static int load_test(lua_State *L)
{
    size_t len = (size_t)(cli_test_end - cli_test_src);
    if (luaL_loadbuffer(L, cli_test_src, len, "@lua/seda/test.lua") !=
        LUA_OK)
        return lua_error(L);
    lua_pushvalue(L, 1);                /* the module name */
    lua_call(L, 1, 1);
    return 1;
}

void cli_preload_test(lua_State *L)
{
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, load_test);
    lua_setfield(L, -2, "seda.test");
    lua_pop(L, 1);
}
