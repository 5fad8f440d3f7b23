/* SPDX-License-Identifier: MIT */
/*
 * lenvtab.c -- an envelope's copied parts as Lua tables.  An on_complete
 * callback's env table (lcallback.c) and a received envelope's fields
 * (lpull.c) are made on the main state from C copies of the envelope
 * taken where it ended or was leased; both say its id, stage, sender and
 * attempts and its headers the same way, written here once.  No state of
 * its own; the calling thread owns L.
 */
#include "lenvtab.h"

void seda__l_envtab_push_fields(lua_State *L, int nrec, const char *id,
                                const char *to, const char *sender,
                                int attempts)
{
    lua_createtable(L, 0, nrec);
    lua_pushstring(L, id);
    lua_setfield(L, -2, "id");
    lua_pushstring(L, to);
    lua_setfield(L, -2, "to");
    if (sender) {
        lua_pushstring(L, sender);
        lua_setfield(L, -2, "sender");
    }
    lua_pushinteger(L, attempts);
    lua_setfield(L, -2, "attempts");
}

void seda__l_envtab_push_headers(lua_State *L, char *const *kv, int nh)
{
    lua_createtable(L, 0, nh);
    for (int i = 0; i < nh; i++) {
        lua_pushstring(L, kv[2 * i + 1]);
        lua_setfield(L, -2, kv[2 * i]);
    }
}
