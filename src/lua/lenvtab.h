/* SPDX-License-Identifier: MIT */
/*
 * lenvtab.h -- an envelope's copied parts as the Lua tables on_complete
 * callbacks (lcallback.c) and received envelopes (lpull.c) show: its
 * fields and its headers.  See lenvtab.c.
 */
#ifndef SEDA_LENVTAB_H
#define SEDA_LENVTAB_H

#include <lua.h>

#include "lcodec.h" /* SEDA__API */

/* Pushes a new table { id =, to =, sender = (when not NULL), attempts = }
 * with room for nrec fields (the caller may add more).  The strings are
 * copied.  Raises only when out of memory. */
SEDA__API void seda__l_envtab_push_fields(lua_State *L, int nrec,
                                          const char *id, const char *to,
                                          const char *sender, int attempts);

/* Pushes a new table of the nh header pairs kv[0..2 * nh) (name, value,
 * name, value, ...): kv[2i] = kv[2i + 1].  Raises only when out of
 * memory. */
SEDA__API void seda__l_envtab_push_headers(lua_State *L, char *const *kv,
                                           int nh);

#endif /* SEDA_LENVTAB_H */
