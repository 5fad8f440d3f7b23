/* SPDX-License-Identifier: MIT */
/*
 * seda_lua.h -- embedding seda-lua's Lua binding in a C program.
 *
 * Include after <lua.h>.  Link with libsedalua.a and libseda.a (or load
 * seda.so from a stock lua5.4 with require "seda").
 */
#ifndef SEDA_LUA_H
#define SEDA_LUA_H

#include <lua.h>

#include "seda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open the `seda` module (what require "seda" returns).  Main state only;
 * raises on allocation failure like any lua_CFunction. */
int luaopen_seda(lua_State *L);

/* The C bus behind the Lua bus object at idx, or NULL if the value is not a
 * live bus.  The pointer is valid until the bus object is shut down or
 * collected; C producers may publish to it from any thread meanwhile. */
seda_bus_t *seda_lua_tobus(lua_State *L, int idx);

/* Make `require(name)` return open(L)'s result in every worker state
 * created after this call (and in the scratch states handlers are checked
 * in), so handlers can reach the embedder's C functions.  Process-wide;
 * call before creating buses.  Returns 0, SEDA_EINVAL (bad name or NULL
 * open), SEDA_ERANGE (more than 32 modules) or SEDA_ENOMEM.  Not
 * thread-safe with bus creation. */
int seda_lua_preload(const char *name, lua_CFunction open);

#ifdef __cplusplus
}
#endif
#endif /* SEDA_LUA_H */
