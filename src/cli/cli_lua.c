/* SPDX-License-Identifier: MIT */
/*
 * cli_lua.c -- lua/seda/cli.lua embedded into seda-lua (the Makefile
 * passes its path as CLI_LUA_FILE and makes this object depend on it).
 */
#include "cli.h"

#ifndef CLI_LUA_FILE
#define CLI_LUA_FILE "lua/seda/cli.lua"
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
        ".previous\n");
