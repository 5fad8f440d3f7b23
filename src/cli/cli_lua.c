/* SPDX-License-Identifier: MIT */
/*
 * cli_lua.c -- lua/seda/cli.lua and lua/seda/pretty.lua embedded into
 * seda-lua (the Makefile passes their paths as CLI_LUA_FILE and
 * CLI_PRETTY_FILE and makes this object depend on them).
 */
#include "cli.h"

#ifndef CLI_LUA_FILE
#define CLI_LUA_FILE "lua/seda/cli.lua"
#endif
#ifndef CLI_PRETTY_FILE
#define CLI_PRETTY_FILE "lua/seda/pretty.lua"
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
        ".previous\n");
