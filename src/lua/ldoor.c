/* SPDX-License-Identifier: MIT */
/*
 * ldoor.c -- the door of bus:listen's listeners: a route's first stage's
 * admit rule run for a request that came with no Lua state (an HTTP
 * request in lhttp.c, a NATS request in lnats.c), as bus:publish runs it
 * in the main state.
 *
 * DESIGN
 *   Requests are handed over on the threads that read them (the bus's
 *   workers for HTTP, the service's subscription thread for NATS), so
 *   each listener keeps one Lua state for its admit rules, made on the
 *   first request that needs it and used under the door's mutex, one
 *   thread at a time.  The rule sees the request as a table its listener
 *   pushes (seda__l_door_push_fn) and runs through seda__l_admit with
 *   the listener's name for a sender.  Lua is entered through lua_pcall
 *   only; no seda lock is held meanwhile.  An admitted request is
 *   published to the route's first stage with the rest of the route as
 *   its slip, never waiting for room: a full stage is an answer (503),
 *   not a wait on the thread that serves the requests.
 */
#include <stdio.h>
#include <string.h>

#include "ldoor.h"

void seda__l_door_init(struct ldoor *d)
{
    pthread_mutex_init(&d->mu, NULL);
    d->L = NULL;
    memset(&d->ac, 0, sizeof d->ac);
}

void seda__l_door_reset(struct ldoor *d)
{
    if (d->L) {
        seda__l_admit_cache_free(d->L, &d->ac);
        seda__l_worker_closestate(d->L);
        d->L = NULL;
    }
}

void seda__l_door_destroy(struct ldoor *d)
{
    seda__l_door_reset(d);
    pthread_mutex_destroy(&d->mu);
}

/* lua_pcall'ed on the door's state: 1 the door, 2 the stage, 3 the
 * request, 4 its push function, 5 the sender, 6 the stage's name, 7 the
 * priority, 8 the reason's buffer (all but the names light userdata). */
static int admit_call(lua_State *L)
{
    struct ldoor *d = lua_touserdata(L, 1);
    struct lstage *ls = lua_touserdata(L, 2);
    const void *req = lua_touserdata(L, 3);
    seda__l_door_push_fn push = *(seda__l_door_push_fn *)lua_touserdata(L, 4);
    const char *sender = lua_tostring(L, 5);
    const char *to = lua_tostring(L, 6);
    int *prio = lua_touserdata(L, 7);
    char *why = lua_touserdata(L, 8);
    push(L, req);
    int rc = seda__l_admit(L, ls, &d->ac, to, lua_gettop(L), 0, sender,
                           prio, why, 200);
    lua_pushinteger(L, rc);
    return 1;
}

int seda__l_door_admit(struct ldoor *d, seda_stage_t *st,
                       const char *sender, seda__l_door_push_fn push,
                       const void *req, const char *to, int *prio,
                       char *why)
{
    struct lstage *ls = seda_stage_userdata(st);
    if (!ls || !atomic_load_explicit(&ls->has_admit, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&d->mu);
    if (!d->L) {
        d->L = seda__l_worker_newstate();
        if (!d->L) {
            pthread_mutex_unlock(&d->mu);
            snprintf(why, 200, "admit_error");
            return -1;
        }
    }
    lua_State *L = d->L;
    lua_pushcfunction(L, admit_call);
    lua_pushlightuserdata(L, d);
    lua_pushlightuserdata(L, ls);
    lua_pushlightuserdata(L, (void *)req);
    lua_pushlightuserdata(L, &push);
    lua_pushstring(L, sender);
    lua_pushstring(L, to);
    lua_pushlightuserdata(L, prio);
    lua_pushlightuserdata(L, why);
    int rc;
    if (lua_pcall(L, 8, 1, 0) != LUA_OK) {
        snprintf(why, 200, "admit_error");
        rc = 1;
    } else {
        rc = (int)lua_tointeger(L, -1);
    }
    lua_settop(L, 0);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

const char *seda__l_door_publish(seda_stage_t *st, char *const *stages,
                                 int n, const char *sender, const void *p,
                                 size_t len, seda_publish_opts *o, char *why,
                                 size_t whylen)
{
    why[0] = '\0';
    o->why = why;
    o->whylen = whylen;
    o->sender = sender;
    if (n > 1) {                        /* a slip pointer needs a count */
        o->slip = (const char *const *)stages + 1;
        o->nslip = n - 1;
    }
    o->timeout = 0;                     /* never wait for room */
    o->kind = SEDA_KIND_LUA;
    int rc = seda_stage_publish(st, p, len, o);
    if (rc == 0)
        return NULL;
    /* A full block-policy stage says "timeout" after no wait at all. */
    return rc == SEDA_ETYPE ? why
           : rc == SEDA_ETIMEDOUT ? "full"
           : rc == SEDA_ETOOLARGE ? "too_large"
           : seda_strerror(rc);
}

int seda__l_door_lookup_error(seda_bus_t *bus)
{
    return seda_bus_closed(bus) ? SEDA_ECLOSED
           : seda_bus_paused(bus) ? SEDA_EPAUSED
           : SEDA_ENOSTAGE;
}
