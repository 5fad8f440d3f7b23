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

/* The binding's payload formats of remote stages ("json", "msgpack",
 * "raw": what the stage option `format` names; docs/wire.md), for a C
 * program's seda_remote_opts.format, over the Lua codec's payloads (kind
 * 1); NULL for another name.  Static tables; any thread. */
struct seda_remote_format;
const struct seda_remote_format *seda_lua_format(const char *name);

/* Push a read-only module onto O, a Lua state of the caller's that is not
 * the main state (a thread serving metrics, say): buses() lists a view of
 * every live bus of the process in creation order, each with .name and
 * the methods stats, errors, dead_letters and histogram as on the bus
 * object (a view of a bus shut down since returns nil, "closed"); now(),
 * process(), version and shared as in the seda module.  The views never
 * wait for the main state, so they answer while it is busy.  O may be
 * used from any one thread at a time; several observer states may exist.
 * Raises only on allocation failure. */
int seda_lua_open_observer(lua_State *O);

/* ---- driving the main state from a host's event loop ----
 *
 * on_complete callbacks and timers (seda.timer, seda.every) run on the
 * main state L only when something runs them: bus:wait, bus:poll, or the
 * host.  A host with its own loop polls seda_lua_wakefd(L) for reading,
 * with seda_lua_next_timer(L) as the timeout, and calls
 * seda_lua_run_pending(L) when it wakes:
 *
 *     struct pollfd p = { seda_lua_wakefd(L), POLLIN, 0 };
 *     double t = seda_lua_next_timer(L);
 *     poll(&p, 1, t < 0 ? 1000 : (int)(t * 1000) + 1);
 *     seda_lua_run_pending(L);
 *
 * All three are for the main state's thread only. */

/* A descriptor that turns readable when an on_complete callback is
 * queued for L (made with the module; the binding owns it: never close
 * or read it).  -1 when it could not be made (then poll with a short
 * timeout instead). */
int seda_lua_wakefd(lua_State *L);

/* Seconds until L's next timer is due (0 when one is due now), or -1
 * when no timer is pending. */
double seda_lua_next_timer(lua_State *L);

/* How many pending timers of L keep a run alive: every one not made
 * unref'd with handle:unref() (libuv's and Node's rule).  A host that ends
 * when nothing can make more work keeps running while this is over 0. */
int seda_lua_timers_alive(lua_State *L);

/* Run what is pending on L: the queued on_complete callbacks of every
 * live bus, then the timers due now; clears the wake descriptor.  Errors
 * in callbacks are reported on stderr (rate-limited), never raised.
 * Returns how many callbacks ran. */
int seda_lua_run_pending(lua_State *L);

#ifdef __cplusplus
}
#endif
#endif /* SEDA_LUA_H */
