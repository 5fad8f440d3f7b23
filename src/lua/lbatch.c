/* SPDX-License-Identifier: MIT */
/*
 * lbatch.c -- running Lua handlers: a drain batch in one protected call.
 *
 * Every Lua handler is a batch consumer of its stage (the core's
 * seda_stage_consume_batch): a stage whose only handler it is gets the
 * drain task's whole batch in one call, one with several handlers (round
 * robin, pub/sub) one envelope a call.  Entering Lua from C through a
 * protected call costs more than a handler that reads a field, so a batch
 * sets up one protected call and calls each handler inside it.
 *
 * DESIGN
 *   The trampoline (l_run) is a C function called once per batch, as the
 *   body of the batch's coroutine (pushed straight onto it with the
 *   handler: nothing is moved across stacks per batch).  It loops: take the next envelope
 *   (seda_batch_next), call the handler with its env (a fresh light
 *   userdata token, lenv.c) through lua_call, and settle it with what the
 *   handler returned (false nacks; anything else, or nothing, acks; a
 *   changed payload or headers are copied back first).  A lua_call from
 *   C is cheaper per envelope than a lua_pcall (which saves a recovery
 *   point each time), and than a loop written in Lua that calls the
 *   handler and then a C function to settle it.  The trampoline's stack
 *   is [1] the handler, [2] the last call's result: each call copies the
 *   handler over the result (one API call where pushing a copy and
 *   popping the result took two, the pop the dearer).
 *
 *   Each call runs in the batch's context (w->le, struct lenv): its env,
 *   token and deadline.  A call that suspends keeps that context and the
 *   batch's next call gets another (lsuspend.c).
 *
 *   HOW AN ERROR IS HANDLED
 *   An error in a handler unwinds through the trampoline to the one
 *   lua_pcall in seda__l_batch_consume, whose message handler added the
 *   traceback.  The envelope that was out (w->le->env) is settled there as
 *   a nack carrying the message, and the trampoline is entered again: it
 *   takes the next envelope, which, for a nack with attempts left, is the
 *   same one again at attempt + 1 (the core's retry at the head), so the
 *   order and the retries are those of one call per envelope.  Example: a
 *   batch of a, b, c where b raises on its first attempt (max_attempts 2):
 *   pcall #1 runs a (ack), b (error); b is nacked; pcall #2 runs b again
 *   (attempt 2, ack), then c.
 *
 *   Reload: the trampoline looks at the stage's code version before each
 *   envelope; on a change it returns, the new code is loaded, and the
 *   trampoline is entered again with the new handler: a call already
 *   running finishes on the old code, and nothing is handled twice.
 *
 *   Runaway handlers: a stage's handler_timeout installs a count hook for
 *   the batch; each envelope gets its own deadline when it is taken.  The
 *   hook raises once the deadline passes and then fires on every
 *   instruction, so a handler's own pcall cannot swallow the stop for
 *   long; it is reset for the rest of the batch.  A handler that overran
 *   inside one long C call (where the hook cannot run) is nacked when it
 *   returns.
 *
 *   Threads: a batch runs on the worker that owns the state; w->bt, bls
 *   and bws are that thread's, set for the batch's duration.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lworker.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- one envelope ---- */

/* Give env to the handler: a new token, the call's context pointing at
 * it.  Returns the token. */
static inline uintptr_t env_start(struct lworker *w, seda_env_t *env)
{
    struct lenv *le = w->le;
    le->env = env;
    uintptr_t token = ++w->calls * 2 + 1;
    le->token = token;
    le->timeout = w->timeout;
    if (w->timeout > 0)
        le->deadline = now_ns() + (int64_t)(w->timeout * 1e9);
    return token;
}

/* Settle the envelope out with ok (a nack's message already given to
 * seda_env_fail).  The user values keep the last payload and headers
 * alive until the next envelope overwrites them (the flags say they are
 * stale): one value each, and no barrier work per envelope. */
static inline void env_settle(lua_State *L, struct lworker *w, bool ok)
{
    struct lenv *le = w->le;
    le->env = NULL;
    le->token = 0;
    le->decoded = le->decoded_table = le->payload_set =
        le->headers_loaded = le->responded = false;
    if (w->cur) {
        /* A suspended call that ran again: lsuspend.c settles it once its
         * coroutine is done. */
        w->cur->settled = true;
        w->cur->ok = ok;
    } else {
        seda_batch_result(w->bt, ok);
    }
    if (w->mem_limit && w->mem_used > w->mem_limit / 2)
        lua_gc(L, LUA_GCCOLLECT);
    atomic_store_explicit(&w->mem_seen, w->mem_used, memory_order_relaxed);
}

/* Copy a changed payload or headers back (seda__l_env_finish); false
 * after a failure, reported as the envelope's nack. */
static __attribute__((noinline)) bool env_copy_back(lua_State *L,
                                                    struct lworker *w)
{
    char err[1024];
    if (seda__l_env_finish(L, w, w->bls->nsrc, err, sizeof err) == 0)
        return true;
    char buf[2048];
    lua_Debug ar;
    ar.linedefined = 0;
    /* Where the handler is defined says where to look. */
    if (lua_rawgeti(L, LUA_REGISTRYINDEX, w->bws->ref[w->bindex]) ==
        LUA_TFUNCTION)
        lua_getinfo(L, ">S", &ar);      /* pops the function */
    else
        lua_pop(L, 1);
    if (ar.linedefined > 0)
        snprintf(buf, sizeof buf, "handler result: %s (the handler at "
                 "%s:%d)", err, ar.short_src, ar.linedefined);
    else
        snprintf(buf, sizeof buf, "handler result: %s", err);
    seda_env_fail(w->le->env, buf);
    return false;
}

/* A handler that returned inside one long C call after its deadline. */
static __attribute__((noinline)) bool env_late(struct lworker *w)
{
    /* The hook only sees Lua instructions: a handler that overran inside
     * a C call (a blocking read, os.execute) and returned soon after is
     * over its limit all the same. */
    if (now_ns() < w->le->deadline)
        return false;
    char buf[96];
    snprintf(buf, sizeof buf, "handler error: handler timeout (%gs): "
             "returned after its deadline", w->le->timeout);
    seda_env_fail(w->le->env, buf);
    return true;
}

/* Settle the envelope out after its handler returned (res: the stack
 * index of its result).  Runs in l_run. */
static inline void env_returned(lua_State *L, struct lworker *w, int res)
{
    struct lenv *le = w->le;
    bool ok = !(lua_type(L, res) == LUA_TBOOLEAN && !lua_toboolean(L, res));
    if (ok && le->timeout > 0 && env_late(w))
        ok = false;
    if (ok && (le->payload_set || le->headers_loaded || le->decoded_table))
        ok = env_copy_back(L, w);
    env_settle(L, w, ok);
}

/* ---- the trampoline ---- */

static int run_loop(lua_State *L, struct lworker *w);

/* Where a handler call that waited (lsuspend.c) continues once it
 * returns: settle it, and end -- the batch it came from went on without
 * it -- or, in a batch that never suspended, go on with the batch. */
static int run_k(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    struct lworker *w = worker_of(L);
    env_returned(L, w, 2);
    if (w->cur)
        return 0;
    return run_loop(L, w);
}

/* run(h), in the batch's coroutine: hand the batch's envelopes to the
 * handler h one by one, settling each with what it returned.  Returns
 * when the batch is over, or when new code must be loaded first
 * (w->reload). */
static int l_run(lua_State *L)
{
    lua_pushnil(L);                     /* [2]: each call's result */
    return run_loop(L, worker_of(L));
}

/* The stack: [1] the handler, [2] the last result (see DESIGN). */
static int run_loop(lua_State *L, struct lworker *w)
{
    for (;;) {
        /* Acquire: pairs with the release in reload; the new sources are
         * visible (and copied under ls->mu anyway). */
        if (w->bws->version != atomic_load_explicit(&w->bls->gen,
                                                    memory_order_acquire)) {
            w->reload = true;
            return 0;
        }
        seda_env_t *env = seda_batch_next(w->bt);
        if (!env)
            return 0;
        uintptr_t token = env_start(w, env);
        lua_copy(L, 1, 2);
        lua_pushlightuserdata(L, (void *)token);
        lua_callk(L, 1, 1, 0, run_k);
        env_returned(L, w, 2);
    }
}

/* ---- runaway handlers ---- */

static void timeout_hook(lua_State *L, lua_Debug *ar);

void seda__l_batch_timeout_hook(lua_State *co)
{
    lua_sethook(co, timeout_hook, LUA_MASKCOUNT, 1000);
}

static void timeout_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct lworker *w = worker_of(L);
    if (!w->le->env || now_ns() < w->le->deadline)
        return;
    /* From now on every instruction raises, so a pcall inside the handler
     * cannot keep it running. */
    lua_sethook(L, timeout_hook, LUA_MASKCOUNT, 1);
    char msg[64];
    snprintf(msg, sizeof msg, "handler timeout (%gs)", w->le->timeout);
    lua_pushstring(L, msg);
    lua_error(L);
}

/* ---- the batch ---- */

/* Nack every envelope of the batch with msg (no code to run them). */
static void fail_all(seda_batch_t *bt, const char *msg)
{
    seda_env_t *env;
    while ((env = seda_batch_next(bt)) != NULL) {
        seda_env_fail(env, msg);
        seda_batch_result(bt, false);
    }
}

/* Load the stage's current code into c if it changed.  False when the
 * handler is not there to run. */
static bool code_ready(struct lworker *w, struct lstage *ls,
                       struct wstage *c, int index)
{
    /* Acquire: pairs with the release in reload (and roll back); the new
     * sources are visible (and copied under ls->mu anyway). */
    if (c->version != atomic_load_explicit(&ls->gen, memory_order_acquire)) {
        seda__l_worker_refresh(w, ls, c);
        /* A load that failed took the stage back to its previous code (a
         * new generation): load that now, so that this envelope is
         * handled, also by a worker that had no code yet.  Once. */
        if (c->version != atomic_load_explicit(&ls->gen,
                                               memory_order_acquire))
            seda__l_worker_refresh(w, ls, c);
    }
    return index < c->n;
}

void seda__l_batch_consume(seda_batch_t *bt, void *ud)
{
    struct lconsumer *lc = ud;
    struct lstage *ls = lc->ls;
    struct lworker *w = seda_worker_data();
    if (!w) {
        fail_all(bt, "no Lua state on this worker");
        return;
    }
    if (w->bt) {
        /* The core never runs a drain task inline on a thread inside a
         * batch call (help_drain), so this state is never entered twice;
         * should it be, fail rather than clobber the batch that runs. */
        fail_all(bt, "Lua state busy with another batch");
        return;
    }
    lua_State *L = w->L;
    struct wstage *c = seda__l_worker_wstage(w, ls);
    if (!c) {
        fail_all(bt, "out of memory");
        return;
    }
    if (!code_ready(w, ls, c, lc->index)) {
        fail_all(bt, "handler not loaded");
        return;
    }
    w->bt = bt;
    w->bls = ls;
    w->bws = c;
    w->bindex = lc->index;
    /* blocking = true: the whole batch runs with the worker lent. */
    void *loan = ls->blocking ? seda_block_begin() : NULL;
    double timeout = seda_stage_handler_timeout(ls->st);
    if (timeout >= 1e9)
        timeout = 0;    /* 31 years or inf: never fires (as the runtime's
                           own timeouts), so no hook */
    w->timeout = timeout;
    for (;;) {
        lua_State *co = seda__l_suspend_co_take(w);    /* in SLOT_CO */
        if (!co) {
            fail_all(bt, "out of memory");
            break;
        }
        /* The coroutine may come from a batch of another stage (the
         * state keeps one for the next batch): its hook is this stage's,
         * none when the stage has no handler_timeout. */
        if (timeout > 0)
            lua_sethook(co, timeout_hook, LUA_MASKCOUNT, 1000);
        else if (lua_gethook(co))
            lua_sethook(co, NULL, 0, 0);
        w->reload = false;
        w->bco = co;
        lua_pushcfunction(co, l_run);   /* no allocation: a light function */
        lua_rawgeti(co, LUA_REGISTRYINDEX, c->ref[lc->index]);
        int nres;
        int rc = lua_resume(co, L, 1, &nres);
        w->bco = NULL;
        if (rc == LUA_YIELD && w->yielded) {
            /* A handler waits (lsuspend.c): the coroutine is its call's
             * now; on with the rest of the batch in another. */
            w->yielded = NULL;
            lua_settop(L, SLOT_CO);
            continue;
        }
        if (rc == LUA_OK) {
            /* co stays in SLOT_CO for the next batch, empty (l_run
             * returns nothing); L is as it was. */
            if (nres != 0)
                lua_settop(co, 0);
            if (!w->reload)
                break;
            if (!code_ready(w, ls, c, lc->index)) {
                fail_all(bt, "handler not loaded");
                break;
            }
            continue;
        }
        /* An error: it belongs to the envelope out (see HOW AN ERROR IS
         * HANDLED above), which nacks with it; then on with the rest.  A
         * yield of the handler's own (coroutine.yield outside a coroutine
         * it made) is one too: nothing would resume it. */
        char buf[2048];
        if (rc == LUA_YIELD) {
            snprintf(buf, sizeof buf, "handler error: a handler yielded "
                     "outside a coroutine of its own");
        } else {
            seda__l_suspend_co_error(L, co);
            const char *msg = lua_tostring(L, -1);
            snprintf(buf, sizeof buf, "handler error: %s",
                     msg ? msg : rc == LUA_ERRMEM ? "not enough memory"
                                                  : "(no message)");
        }
        seda__l_suspend_co_give(w, co, true);   /* SLOT_CO: nil */
        lua_settop(L, SLOT_CO);
        if (rc == LUA_ERRMEM)
            lua_gc(L, LUA_GCCOLLECT);
        if (!w->le->env) {
            /* Not a handler's (nothing was out): report it and let the
             * core take the rest back. */
            seda_stage_report(ls->st, buf);
            break;
        }
        seda_env_fail(w->le->env, buf);
        env_settle(L, w, false);
    }
    if (lua_gettop(L) != SLOT_CO)
        lua_settop(L, SLOT_CO);
    seda_block_end(loan);
    w->bt = NULL;
    w->bls = NULL;
    w->bws = NULL;
}
