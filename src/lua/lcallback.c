/* SPDX-License-Identifier: MIT */
/*
 * lcallback.c -- on_complete and on_durable callbacks: from the thread
 * that ended an itinerary (or committed a publish) to the main Lua state.
 *
 * DESIGN
 *   The function is kept in the main registry (struct lcb, shared by the
 *   envelopes of one publish_many); the envelope carries the reference.
 *   When its itinerary ends, the core calls seda__l_callback_on_done on
 *   whatever thread ended it; it copies what the callback needs into a struct
 *   lcompletion and queues it on the lbus.  The main state runs the queue
 *   (seda__l_callback_run) from bus:wait, bus:poll, bus:shutdown and
 *   the seda-lua run loop, so callbacks never run on a worker; queueing
 *   one also signals the main state's wake descriptor (lloop.c), so a
 *   host's loop wakes for it.  Errors in a callback are reported with
 *   their traceback, at most 5 a second.
 *
 *   The queue is bounded by the main state itself: bus:publish and
 *   publish_many first run the queued callbacks when more than
 *   max_pending_callbacks wait (seda__l_callback_bound), so a loop
 *   that publishes with on_complete and never polls keeps a bounded
 *   backlog (each waiting completion holds a copy of the envelope).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lenvtab.h"
#include "lseda.h"
/* ---- completions ---- */

void seda__l_callback_completion_free(struct lcompletion *c)
{
    free(c->sender);
    for (int i = 0; i < 2 * c->nh; i++)
        free(c->hdr[i]);
    free(c->hdr);
    free(c->payload);
    free(c);
}

/* Drop n references to cb; the last one releases the function.  Main
 * thread. */
void seda__l_callback_release(lua_State *L, struct lcb *cb, int n)
{
    cb->refs -= n;
    if (cb->refs <= 0) {
        luaL_unref(L, LUA_REGISTRYINDEX, cb->ref);
        free(cb);
    }
}

/* Make a callback record for the function at idx with `refs` references.
 * Raises on allocation failure (before anything is published). */
struct lcb *seda__l_callback_new(lua_State *L, int idx, int refs)
{
    struct lcb *cb = malloc(sizeof *cb);
    if (!cb)
        luaL_error(L, "publish: out of memory");
    lua_pushvalue(L, idx);
    cb->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    cb->refs = refs;
    cb->lb = NULL;
    cb->lost = 0;
    cb->lost_next = NULL;
    return cb;
}

/* A report of cb found no memory for its completion (any thread, no
 * Lua): its reference is dropped on the main thread all the same
 * (seda__l_callback_drop_lost), so the function is not kept forever. */
static void lose_report(struct lbus *lb, struct lcb *cb)
{
    pthread_mutex_lock(&lb->mu);
    if (cb->lost++ == 0) {
        cb->lost_next = lb->lost;
        lb->lost = cb;
    }
    pthread_cond_broadcast(&lb->cv);
    pthread_mutex_unlock(&lb->mu);
    seda__l_loop_signal(lb->loop);
}

void seda__l_callback_drop_lost(lua_State *L, struct lbus *lb)
{
    for (;;) {
        pthread_mutex_lock(&lb->mu);
        struct lcb *cb = lb->lost;
        int n = 0;
        if (cb) {
            lb->lost = cb->lost_next;
            n = cb->lost;
            cb->lost = 0;
        }
        pthread_mutex_unlock(&lb->mu);
        if (!cb)
            return;
        seda__l_callback_release(L, cb, n);
    }
}

static void queue_completion(struct lbus *lb, struct lcompletion *c)
{
    pthread_mutex_lock(&lb->mu);
    /* An on_durable report leaves the count in the same step (lb->mu,
     * before the broadcast): bus:wait sees it counted or queued. */
    if (c->durable)
        atomic_fetch_sub_explicit(&lb->ndurable, 1, memory_order_acq_rel);
    if (lb->ctail)
        lb->ctail->next = c;
    else
        lb->chead = c;
    lb->ctail = c;
    pthread_cond_broadcast(&lb->cv);
    pthread_mutex_unlock(&lb->mu);
    atomic_fetch_add_explicit(&lb->npending_cb, 1, memory_order_relaxed);
    seda__l_loop_signal(lb->loop);      /* after the enqueue: see lloop.c */
}

void seda__l_callback_on_durable(int rc, void *ud)
{
    struct lcb *cb = ud;
    struct lcompletion *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "seda: out of memory queueing on_durable\n");
        atomic_fetch_sub_explicit(&cb->lb->ndurable, 1,
                                  memory_order_acq_rel);
        lose_report(cb->lb, cb);
        return;
    }
    c->cb = cb;
    c->durable = true;
    c->outcome = rc;
    queue_completion(cb->lb, c);
}

/* The core's done callback: any thread, no Lua. */
void seda__l_callback_on_done(seda_env_t *env, int outcome, void *ud)
{
    struct lstage *ls = seda_stage_userdata(seda_env_stage(env));
    struct lbus *lb = ls->lb;
    struct lcompletion *c = calloc(1, sizeof *c);
    if (!c) {
        seda_log_write(SEDA_LOG_ERROR, NULL,
                       "out of memory queueing on_complete");
        lose_report(lb, ud);
        return;
    }
    c->cb = ud;
    c->outcome = outcome;
    if (outcome == SEDA_COMPLETED) {
        bool ok = true;
        seda_env_id(env, c->id);
        snprintf(c->to, sizeof c->to, "%s", seda_env_to(env));
        c->attempts = seda_env_attempts(env);
        if (seda_env_sender(env))
            ok &= (c->sender = strdup(seda_env_sender(env))) != NULL;
        int nh = seda_env_header_count(env);
        if (nh > 0 && (c->hdr = calloc((size_t)nh * 2, sizeof *c->hdr))) {
            for (int i = 0; i < nh; i++) {
                const char *k, *v;
                seda_env_header_at(env, i, &k, &v);
                c->hdr[2 * i] = strdup(k);
                c->hdr[2 * i + 1] = strdup(v);
                ok &= c->hdr[2 * i] && c->hdr[2 * i + 1];
                c->nh = i + 1;
            }
        } else {
            ok &= nh == 0;
        }
        size_t len;
        const void *p = seda_env_payload(env, &len);
        c->kind = seda_env_payload_kind(env);
        c->len = len;
        if ((c->payload = malloc(len ? len : 1)))
            memcpy(c->payload, p, len);
        ok &= c->payload != NULL;
        if (!ok) {
            seda_log_write(SEDA_LOG_ERROR, NULL,
                           "out of memory copying a completion");
            c->outcome = SEDA_DROPPED;   /* still release the callback */
        }
    }
    queue_completion(lb, c);
}


/* Protected part of running one completion: push the env table and call
 * the callback at index 1 (on_durable's: ok, reason). */
static int call_completion(lua_State *L)
{
    struct lcompletion *c = lua_touserdata(L, 2);
    if (c->durable) {
        lua_settop(L, 1);
        lua_pushboolean(L, c->outcome == 0);
        if (c->outcome)
            lua_pushstring(L, seda_strerror(c->outcome));
        lua_call(L, c->outcome ? 2 : 1, 0);
        return 0;
    }
    lua_settop(L, 1);
    seda__l_envtab_push_fields(L, 7, c->id, c->to, c->sender, c->attempts);
    seda__l_envtab_push_headers(L, c->hdr, c->nh);
    lua_setfield(L, -2, "headers");
    lua_newtable(L);                    /* completed: no hops remain */
    lua_setfield(L, -2, "slip");
    lua_pushliteral(L, "payload");
    seda__l_push_payload(L, c->payload, c->len, c->kind, 0);
    lua_rawset(L, -3);
    lua_call(L, 1, 0);                  /* inside the caller's pcall */
    return 0;
}

/* on_complete and timer errors: at most 5 reports a second, as stages do
 * for handler errors; the rest are counted, and the count is said with
 * the next report or when a bus shuts down.  Locking: cb_mu guards
 * cb_*. */
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static double cb_window;
static int cb_lines;
static unsigned long cb_suppressed;

static void cb_flush_locked(void)
{
    if (cb_suppressed) {
        char line[96];
        snprintf(line, sizeof line, "on_complete/timer: %lu similar errors "
                 "suppressed", cb_suppressed);
        seda_log_write(SEDA_LOG_WARN, NULL, line);
    }
    cb_suppressed = 0;
}

void seda__l_callback_flush(void)
{
    pthread_mutex_lock(&cb_mu);
    cb_flush_locked();
    pthread_mutex_unlock(&cb_mu);
}

void seda__l_callback_report_error(const char *what, const char *msg)
{
    double now = seda_now();
    pthread_mutex_lock(&cb_mu);
    if (now - cb_window >= 1.0) {
        cb_flush_locked();
        cb_window = now;
        cb_lines = 0;
    }
    if (cb_lines < 5) {
        cb_lines++;
        char line[4096];
        snprintf(line, sizeof line, "%s: %s", what, msg);
        seda_log_write(SEDA_LOG_ERROR, NULL, line);
    } else {
        cb_suppressed++;
    }
    pthread_mutex_unlock(&cb_mu);
}

int seda__l_callback_depth;                 /* main thread only */
bool (*seda__l_callback_interrupt_pending)(lua_State *L);

/* Run every queued completion on the main state.  Returns how many
 * callbacks ran.  An error in a callback is printed with its
 * traceback (cb_report). */
int seda__l_callback_run(lua_State *L, struct lbus *lb)
{
    int ran = 0;
    for (;;) {
        seda__l_callback_drop_lost(L, lb);
        pthread_mutex_lock(&lb->mu);
        struct lcompletion *c = lb->chead;
        lb->chead = lb->ctail = NULL;
        pthread_mutex_unlock(&lb->mu);
        if (!c)
            return ran;
        while (c) {
            struct lcompletion *next = c->next;
            atomic_fetch_sub_explicit(&lb->npending_cb, 1,
                                      memory_order_relaxed);
            if (c->outcome == SEDA_COMPLETED || c->durable) {
                int top = lua_gettop(L);
                lua_pushcfunction(L, seda__l_worker_msghandler);
                lua_pushcfunction(L, call_completion);
                lua_rawgeti(L, LUA_REGISTRYINDEX, c->cb->ref);
                lua_pushlightuserdata(L, c);
                seda__l_callback_depth++;
                int rc = lua_pcall(L, 2, 0, top + 1);
                seda__l_callback_depth--;
                if (rc != LUA_OK)
                    seda__l_callback_report_error(c->durable ? "on_durable"
                                                             : "on_complete",
                                                  lua_tostring(L, -1));
                lua_settop(L, top);
                ran++;
            }
            seda__l_callback_release(L, c->cb, 1);
            seda__l_callback_completion_free(c);
            c = next;
        }
    }
}

/* How deep publish may nest callback runs (a callback that publishes
 * with on_complete may run others, up to here). */
#define CB_NEST_MAX 8

void seda__l_callback_bound(lua_State *L, struct lbus *lb)
{
    if (atomic_load_explicit(&lb->npending_cb, memory_order_relaxed) >
            lb->max_pending_cb &&
        seda__l_callback_depth < CB_NEST_MAX)
        seda__l_callback_run(L, lb);
}

bool seda__l_callback_pending(struct lbus *lb)
{
    pthread_mutex_lock(&lb->mu);
    bool any = lb->chead != NULL;
    pthread_mutex_unlock(&lb->mu);
    return any;
}

