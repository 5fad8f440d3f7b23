/* SPDX-License-Identifier: MIT */
/*
 * lsuspend.c -- handler calls that wait without holding their worker.
 *
 * Every batch of handler calls runs in a coroutine of the worker's state
 * (lbatch.c), reused from batch to batch.  A C function that must wait
 * (seda.sleep, an HTTP request, a cosocket read: lio.c) asks
 * seda__l_suspend_begin whether the running call can be suspended:
 *
 *   - In a handler call on a regular worker whose batch can suspend (the
 *     stage's only handler, not durable), the core takes the envelope out
 *     of the batch unsettled (seda_batch_suspend: it keeps a permit of its
 *     stage, not the worker), and the function arms its operation to post
 *     the call when it ends, then seda__l_suspend_yield leaves the call
 *     its context (struct lenv: its view of its envelope, its token and
 *     deadline) and gives the batch the spare context begin made, and the
 *     coroutine yields.  Nothing is copied: each call owns its context
 *     from its start to its end, as lua-nginx-module gives each coroutine
 *     its ctx.  lbatch.c sees the yield, leaves the coroutine to the call
 *     and goes on with the batch in a fresh coroutine.  When the
 *     operation ends, on whatever thread, seda__l_suspend_post queues the
 *     call in its worker's mailbox and wakes the worker
 *     (seda_worker_wake), which runs seda__l_suspend_mail before its next
 *     task: the call's context becomes the running one (w->le), the
 *     coroutine is resumed (the waiting function's continuation reads the
 *     result), and when the handler returns the call is settled as a
 *     batch's envelope would be.
 *   - Anywhere else (begin returns NULL) the function blocks, with a loan
 *     when it runs on a pool worker: the main state, a loan's state (its
 *     thread may end with the loan), a stage with several handlers, a
 *     durable stage, a coroutine of the handler's own.
 *
 *   A post only queues the call: the worker resumes it from its mail
 *   hook, after the batch call that is yielding it returned, so a
 *   coroutine is never resumed before it has yielded, even when the
 *   operation ends first.
 *
 *   handler_timeout covers the wait: a waiting function caps its
 *   operation's timeout at what is left (seda__l_suspend_budget), and a
 *   call whose deadline passed while it waited is not run again: it nacks
 *   with "handler timeout".
 *
 *   Stopping: a worker that stops while its state has suspended calls
 *   either finishes them (a pool that shrinks: it keeps serving its
 *   mailbox until none is left) or, when the bus stops, cancels their
 *   waits, waits for each post (so no operation still refers to a call),
 *   and drops them (counted dropped, their done callbacks fire) without
 *   running them again.
 *
 * Threads: everything but seda__l_suspend_wake runs on the thread that owns the
 * worker's state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "lio.h"
#include "lworker.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- coroutines ---- */

static int new_thread(lua_State *L)
{
    lua_newthread(L);
    return 1;
}

lua_State *seda__l_suspend_co_take(struct lworker *w)
{
    lua_State *L = w->L;
    lua_State *co = lua_tothread(L, SLOT_CO);
    if (co)
        return co;
    if (w->nco_free > 0) {
        int ref = w->co_free[--w->nco_free];
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        luaL_unref(L, LUA_REGISTRYINDEX, ref);
    } else {
        /* Outside any protected call here: make it in one. */
        lua_pushcfunction(L, new_thread);
        if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
            lua_pop(L, 1);
            return NULL;
        }
    }
    co = lua_tothread(L, -1);
    lua_replace(L, SLOT_CO);
    return co;
}

/* Take the coroutine in SLOT_CO out of it: a suspended call keeps it
 * (anchored by the returned registry ref). */
static int co_detach(struct lworker *w)
{
    lua_State *L = w->L;
    lua_pushvalue(L, SLOT_CO);
    int ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushnil(L);
    lua_replace(L, SLOT_CO);
    return ref;
}

void seda__l_suspend_co_give(struct lworker *w, lua_State *co, bool reset)
{
    lua_State *L = w->L;
    bool in_slot = lua_tothread(L, SLOT_CO) == co;
    if (reset) {
        /* Ended in an error (or a stray yield): close what it holds and
         * let the collector have it.  Not reused: an error raised in a
         * hook (handler_timeout's) leaves the thread's hooks disabled. */
        lua_resetthread(co);
        if (in_slot) {
            lua_pushnil(L);
            lua_replace(L, SLOT_CO);
        }
        return;
    }
    lua_settop(co, 0);
    lua_sethook(co, NULL, 0, 0);
    if (in_slot)
        return;
    if (lua_isnil(L, SLOT_CO)) {
        lua_pushthread(co);
        lua_xmove(co, L, 1);
        lua_replace(L, SLOT_CO);
        return;
    }
    if (w->nco_free == w->co_cap) {
        int cap = w->co_cap ? w->co_cap * 2 : 8;
        int *n = realloc(w->co_free, sizeof *n * (size_t)cap);
        if (!n)
            return;                     /* not kept: collected */
        w->co_free = n;
        w->co_cap = cap;
    }
    lua_pushthread(co);
    lua_xmove(co, L, 1);
    w->co_free[w->nco_free++] = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* The message of an error object (at 1), as the message handler words
 * it: a string, its __tostring, or its type. */
static int error_text(lua_State *L)
{
    if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
        lua_tostring(L, 1);
        lua_settop(L, 1);
        return 1;
    }
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
        return 1;
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    return 1;
}

void seda__l_suspend_co_error(lua_State *L, lua_State *co)
{
    /* The object's __tostring may raise: word it in a protected call on
     * L (co is dead), and read the traceback off co's stack. */
    lua_pushcfunction(L, error_text);
    lua_xmove(co, L, 1);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushliteral(L, "(error object is not a string)");
    }
    luaL_traceback(L, co, lua_tostring(L, -1), 0);
    lua_remove(L, -2);
    /* A handler's traceback ends in the batch trampoline, a C function
     * (lbatch.c) that says nothing to its reader. */
    size_t len;
    const char *tb = lua_tolstring(L, -1, &len);
    static const char tail[] = "\n\t[C]: in ?";
    if (len >= sizeof tail - 1 &&
        memcmp(tb + len - (sizeof tail - 1), tail, sizeof tail - 1) == 0) {
        lua_pushlstring(L, tb, len - (sizeof tail - 1));
        lua_remove(L, -2);
    }
}

/* ---- waits ---- */

void seda__l_suspend_post(struct lcall *c)
{
    /* Everything under mail_mu, the wake included: once a stopping
     * worker sees c->posted (under the same mutex) it may free c and
     * itself, so the poster must touch neither after the unlock. */
    struct lworker *w = c->w;
    pthread_mutex_lock(&w->mail_mu);
    c->mail_next = w->mail;
    w->mail = c;
    c->posted = true;
    pthread_cond_broadcast(&w->mail_cv);
    seda_worker_wake(w->self);
    pthread_mutex_unlock(&w->mail_mu);
}

struct lcall *seda__l_suspend_begin(lua_State *L)
{
    if (!lua_isyieldable(L))
        return NULL;
    struct lworker *w = seda__l_worker_of(L);
    if (!w || !w->self)
        return NULL;                    /* main, loan or scratch state */
    if (w->cur)
        return w->cur->co == L ? w->cur : NULL;
    if (!w->bt || w->bco != L || !w->le->env)
        return NULL;                    /* not the batch's handler call */
    if (w->bls && w->bls->blocking)
        return NULL;                    /* blocking = true: its worker is
                                           lent for the whole call */
    struct lcall *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    /* The batch's next context, made now: once the core took the
     * envelope out, nothing may fail. */
    struct lenv *spare = seda__l_env_new(L, w);
    if (!spare) {
        free(c);
        return NULL;
    }
    seda_pending_t *p = seda_batch_suspend(w->bt);
    if (!p) {
        seda__l_env_give(L, w, spare);
        free(c);
        return NULL;
    }
    c->w = w;
    c->co = L;
    c->p = p;
    c->spare = spare;
    c->ls = w->bls;
    c->bindex = w->bindex;
    /* The coroutine is the call's now: the batch goes on in another. */
    c->co_ref = co_detach(w);
    c->next = w->susp;
    w->susp = c;
    w->nsusp++;
    return c;
}

int seda__l_suspend_yield(lua_State *L, struct lcall *c,
                          void (*cancel)(void *), void *arg,
                          lua_KContext ctx, lua_KFunction k)
{
    struct lworker *w = c->w;
    if (c->spare) {
        /* Its first wait: the call keeps the context it ran in, and the
         * batch goes on in the spare (a call run again from the mailbox
         * waits in its own; call_resume puts the batch's back). */
        c->le = w->le;
        w->le = c->spare;
        c->spare = NULL;
    }
    c->cancel = cancel;
    c->wait_arg = arg;
    c->suspended = true;
    w->yielded = c;
    return lua_yieldk(L, 0, ctx, k);
}

/* ---- running calls again ---- */

/* Unlink c from w's calls and free it (its coroutine given back). */
static void call_free(struct lworker *w, struct lcall *c, bool reset)
{
    for (struct lcall **pp = &w->susp; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    w->nsusp--;
    lua_State *L = w->L;
    seda__l_suspend_co_give(w, c->co, reset);   /* anchored anew, or let go */
    luaL_unref(L, LUA_REGISTRYINDEX, c->co_ref);
    if (c->le)
        seda__l_env_give(L, w, c->le);
    if (c->spare)
        seda__l_env_give(L, w, c->spare);
    free(c);
}

/* Resume c (its wait ended) until it waits again or ends; settle it when
 * it ends. */
static void call_resume(struct lworker *w, struct lcall *c)
{
    lua_State *L = w->L;
    c->suspended = false;
    c->settled = false;
    struct lenv *batch_le = w->le;      /* between batches: no call's */
    w->le = c->le;
    w->cur = c;
    w->bls = c->ls;
    w->bws = seda__l_worker_wstage(w, c->ls);
    w->bindex = c->bindex;
    seda_pending_enter(c->p);
    int nres, rc;
    if (c->le->timeout > 0 && now_ns() >= c->le->deadline) {
        /* handler_timeout covers the wait: the call is over (the wait
         * itself ended no later than the deadline: seda__l_suspend_budget
         * capped it).  Not run again. */
        lua_pushfstring(L, "handler timeout (%f s) while waiting",
                        c->le->timeout);
        rc = LUA_ERRRUN;
    } else {
        if (c->le->timeout > 0)
            seda__l_batch_timeout_hook(c->co);
        rc = lua_resume(c->co, L, 0, &nres);
        if (rc != LUA_OK && rc != LUA_YIELD)
            seda__l_suspend_co_error(L, c->co);
    }
    bool reset = false;
    if (rc == LUA_YIELD && w->yielded == c) {
        w->yielded = NULL;
        seda_pending_leave(c->p);       /* waits again */
        w->le = batch_le;
        w->cur = NULL;
        w->bls = NULL;
        w->bws = NULL;
        return;
    }
    if (rc != LUA_OK) {
        /* An error (or a yield of the handler's own, which nothing will
         * resume): the call nacks with it. */
        if (rc == LUA_YIELD)
            lua_pushliteral(L, "a handler yielded outside a coroutine of "
                               "its own");
        char buf[2048];
        snprintf(buf, sizeof buf, "handler error: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        if (!c->settled && w->le->env)
            seda_env_fail(w->le->env, buf);
        c->ok = false;
        reset = true;
    } else if (!c->settled) {
        c->ok = false;                  /* returned without a result */
    }
    lua_settop(c->co, 0);
    seda_pending_leave(c->p);
    w->le = batch_le;                   /* c's goes back with c (call_free) */
    w->cur = NULL;
    w->bls = NULL;
    w->bws = NULL;
    seda_pending_t *p = c->p;
    bool ok = c->ok;
    call_free(w, c, reset);
    seda_pending_settle(p, ok);
}

double seda__l_suspend_budget(lua_State *L)
{
    struct lworker *w = seda__l_worker_of(L);
    if (!w || !(w->le->timeout > 0) || !w->le->env)
        return -1;
    double left = (double)(w->le->deadline - now_ns()) / 1e9;
    return left > 0 ? left : 0;
}

int seda__l_suspend_blocking(lua_State *L)
{
    seda__l_admit_no_wait(L, "seda.blocking");
    luaL_checktype(L, 1, LUA_TFUNCTION);
    void *loan = seda_block_begin();
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    seda_block_end(loan);
    if (rc != LUA_OK)
        return lua_error(L);
    return lua_gettop(L);
}

/* Take the mailbox (mail_mu). */
static struct lcall *mail_take(struct lworker *w)
{
    pthread_mutex_lock(&w->mail_mu);
    struct lcall *m = w->mail;
    w->mail = NULL;
    for (struct lcall *x = m; x; x = x->mail_next)
        x->posted = false;              /* its next wait posts anew */
    pthread_mutex_unlock(&w->mail_mu);
    /* Posted newest first: resume in the order the waits ended. */
    struct lcall *r = NULL;
    while (m) {
        struct lcall *n = m->mail_next;
        m->mail_next = r;
        r = m;
        m = n;
    }
    return r;
}

void seda__l_suspend_mail(int index, void *data, void *ud)
{
    (void)index;
    (void)ud;
    struct lworker *w = data;
    if (!w)
        return;
    struct lcall *c = mail_take(w);
    while (c) {
        struct lcall *n = c->mail_next;
        call_resume(w, c);
        c = n;
    }
}

void seda__l_suspend_init(struct lworker *w)
{
    pthread_mutex_init(&w->mail_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->mail_cv, &ca);
    pthread_condattr_destroy(&ca);
    w->self = seda_worker_self();
}

/* Wait on mail_cv (mail_mu held) for a while, then drive the bus's I/O
 * loop: the ops these waits are for end on that loop, which the workers
 * drive, and every other worker may be stopping (or waiting) too, so
 * this one drives it as well.  Rounds of 10 ms: a post signals mail_cv,
 * which ends the wait at once. */
static void mail_wait_driving(struct lworker *w)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    if (pthread_cond_timedwait(&w->mail_cv, &w->mail_mu, &ts) == 0)
        return;
    pthread_mutex_unlock(&w->mail_mu);  /* the callbacks post under it */
    seda__l_io_drive(w->lb);
    pthread_mutex_lock(&w->mail_mu);
}

void seda__l_suspend_end(struct lworker *w)
{
    if (w->nsusp == 0)
        return;
    if (!seda_bus_closed(w->lb->bus)) {
        /* A pool that shrinks: finish them here. */
        while (w->nsusp > 0) {
            pthread_mutex_lock(&w->mail_mu);
            while (!w->mail)
                mail_wait_driving(w);
            pthread_mutex_unlock(&w->mail_mu);
            seda__l_suspend_mail(w->index, w, NULL);
        }
        return;
    }
    /* The bus stops: end every wait, wait for each post to be done (a
     * wait that has ended is not enough: its poster may still be on its
     * way to the mailbox), drop them. */
    for (struct lcall *c = w->susp; c; c = c->next)
        if (c->suspended && c->cancel)
            c->cancel(c->wait_arg);
    seda__l_io_drive(w->lb);            /* the cancels, here and now */
    for (struct lcall *c = w->susp; c; c = c->next) {
        if (!c->suspended)
            continue;
        pthread_mutex_lock(&w->mail_mu);
        while (!c->posted)
            mail_wait_driving(w);
        pthread_mutex_unlock(&w->mail_mu);
    }
    (void)mail_take(w);                 /* posted; not run again */
    while (w->susp) {
        struct lcall *c = w->susp;
        seda_pending_t *p = c->p;
        call_free(w, c, true);
        seda_pending_drop(p);
    }
}

void seda__l_suspend_free(struct lworker *w)
{
    free(w->co_free);
    w->co_free = NULL;
    pthread_mutex_destroy(&w->mail_mu);
    pthread_cond_destroy(&w->mail_cv);
}
