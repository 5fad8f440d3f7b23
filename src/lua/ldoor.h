/* SPDX-License-Identifier: MIT */
/*
 * ldoor.h -- the door of bus:listen's listeners (lhttp.c for HTTP,
 * lnats.c for NATS): where a request, with no Lua state of its own,
 * meets the admit rule of its route's first stage, and why a request
 * found no first stage.  See ldoor.c.
 */
#ifndef SEDA_LDOOR_H
#define SEDA_LDOOR_H

#include <pthread.h>

#include "lseda.h"

/* A listener's door: the Lua state admit rules run in, made on first use
 * and used by one thread at a time.  Embedded in the listener, which
 * owns it (seda__l_door_init/_destroy). */
struct ldoor {
    pthread_mutex_t mu;         /* guards L and ac: the threads that hand
                                   requests over may be several */
    lua_State *L;               /* for admit rules, or NULL; guarded by mu */
    struct ladmit_cache ac;     /* L's compiled rules; guarded by mu */
};

/* Pushes the request req as the Lua table an admit rule reads (one
 * value, on L).  Must not raise but for out of memory. */
typedef void (*seda__l_door_push_fn)(lua_State *L, const void *req);

/* Makes d empty (no state yet).  Cannot fail. */
SEDA__API void seda__l_door_init(struct ldoor *d);

/* Frees d's state, if any (the next admit makes a new one).  No request
 * may be at the door.  Cannot fail; may be called more than once. */
SEDA__API void seda__l_door_reset(struct ldoor *d);

/* Frees d's state and its mutex.  No request may be at the door, nor come
 * after.  Cannot fail. */
SEDA__API void seda__l_door_destroy(struct ldoor *d);

/* Runs the admit rule of st (a route's first stage), if it has one, for
 * req on d's state (made if need be), the request pushed by push and
 * seen by the rule as sent by sender ("http", "nats").  Returns 0
 * admitted, or no rule (*prio may be changed by the rule), 1 refused
 * (why, 200 bytes, says why), -1 no state could be made (why
 * "admit_error").  Blocks while another thread is at the door.  Any
 * thread but one holding a seda lock. */
SEDA__API int seda__l_door_admit(struct ldoor *d, seda_stage_t *st,
                                 const char *sender,
                                 seda__l_door_push_fn push, const void *req,
                                 const char *to, int *prio, char *why);

/* Publishes the request's payload p[0..len) to st, the first of a
 * route's n stages, the others its slip: as sent by sender, never
 * waiting for room, a Lua value in the codec's format, with o's done
 * callback, on_durable and priority (o made by seda_publish_opts_init;
 * its why is set here to why[0..whylen)).  Returns NULL when st took it,
 * else the refusal as a request's answer says it: why (what a typed
 * stage refused), "full", "too_large" or the error's name.  Any thread;
 * never blocks. */
SEDA__API const char *seda__l_door_publish(seda_stage_t *st,
                                           char *const *stages, int n,
                                           const char *sender,
                                           const void *p, size_t len,
                                           seda_publish_opts *o, char *why,
                                           size_t whylen);

/* Why seda_bus_stage(bus, ...) found no stage: SEDA_ECLOSED (the bus is
 * closed), SEDA_EPAUSED (paused: its stages are not reachable) or
 * SEDA_ENOSTAGE (there is no such stage).  Cannot fail; any thread. */
SEDA__API int seda__l_door_lookup_error(seda_bus_t *bus);

#endif /* SEDA_LDOOR_H */
