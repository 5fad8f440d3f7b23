/* SPDX-License-Identifier: MIT */
/*
 * lloop.c -- the main state's event loop sources: a wake descriptor that
 * queued on_complete callbacks signal, and timers (seda.timer,
 * seda.every).  A host (seda-lua's run loop, or any C program embedding
 * the binding) polls the descriptor with the next timer's due time as its
 * timeout, then runs what is pending (seda_lua_run_pending); bus:wait and
 * bus:poll run due timers too.  Nothing here ever runs on a worker.
 *
 * DESIGN
 *   One struct lloop per main Lua state, made by luaopen_seda and kept in
 *   the registry (LOOP_KEY) by a userdata; every bus made on that state
 *   holds a reference (refs), so a completion signalled by a worker during
 *   lua_close still finds the loop.  The last reference frees it.
 *
 *   Waking (any thread -> main thread): a worker that queues a completion
 *   calls seda__l_loop_signal, which writes the eventfd only when it sets
 *   `signalled` from 0 to 1, so a burst of completions costs one write.
 *   The host drains in this order: read the eventfd, then exchange
 *   `signalled` back to 0, then look at the queues.  A completion queued
 *   before that exchange is seen by the look (its exchange to 1 came
 *   first: acquire/release on the flag orders its enqueue before the
 *   look); one queued after it finds 0 and writes again, so the
 *   descriptor is readable for the next turn.  Reading the descriptor
 *   before the exchange means no write that follows a 0 -> 1 exchange is
 *   ever consumed by this drain: no wake-up is lost.
 *
 *   Timers (main thread only): a binary min-heap of struct ltimer ordered
 *   by (due, seq); seq grows with every scheduling, so timers due at the
 *   same moment fire in the order they were set.  A pending timer is kept
 *   alive by a registry reference to its handle (self_ref) and holds its
 *   function (fn_ref); both go when it fires (a one-shot) or is cancelled.
 *   nref counts the pending timers not unref'd: what keeps a plain run
 *   alive (seda_lua_timers_alive), kept by heap_push / heap_remove and
 *   handle:unref() / ref().
 *   One pass runs only the timers scheduled before it began, so a
 *   callback that sets seda.timer(0, ...) cannot keep a pass going; a
 *   repeating timer is rescheduled before its callback runs (a callback
 *   may cancel it), at due + interval, or interval from now when the loop
 *   fell behind (missed ticks are skipped, not run in a burst).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lseda.h"
#include "seda_lua.h"

#define LOOP_KEY "seda.loop"        /* registry: the loop userdata */
#define TIMER_MT "seda.timer"

/* A timer handle (the userdata's memory). */
struct ltimer {
    struct lloop *lp;           /* the loop it belongs to */
    double due;                 /* seda_now() seconds */
    double interval;            /* seda.every's; 0 for seda.timer */
    uint64_t seq;               /* scheduling order, for ties */
    int slot;                   /* heap index, -1 when not pending */
    int fn_ref;                 /* the callback (registry), or NOREF */
    int self_ref;               /* this handle (registry) while pending */
    bool unref;                 /* handle:unref(): keeps no run alive */
};

/* ---- references ---- */

static void loop_unref(struct lloop *lp)
{
    if (atomic_fetch_sub_explicit(&lp->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (lp->efd >= 0)
        close(lp->efd);
    free(lp->heap);
    free(lp);
}

void seda__l_loop_release(struct lloop *lp)
{
    if (lp)
        loop_unref(lp);
}

/* ---- waking ---- */

void seda__l_loop_signal(struct lloop *lp)
{
    if (!lp || lp->efd < 0)
        return;
    /* acq_rel: pairs with the exchange in loop_drain (see DESIGN). */
    if (atomic_exchange_explicit(&lp->signalled, 1,
                                 memory_order_acq_rel) == 0) {
        uint64_t one = 1;
        ssize_t w;
        do
            w = write(lp->efd, &one, sizeof one);
        while (w < 0 && errno == EINTR);
    }
}

/* Clear the descriptor and the flag before the queues are looked at. */
static void loop_drain(struct lloop *lp)
{
    if (lp->efd < 0)
        return;
    uint64_t v;
    ssize_t r;
    do
        r = read(lp->efd, &v, sizeof v);
    while (r < 0 && errno == EINTR);
    /* acq_rel: pairs with the exchange in seda__l_loop_signal. */
    atomic_exchange_explicit(&lp->signalled, 0, memory_order_acq_rel);
}

/* The loop of the main state L (made by luaopen_seda), or NULL. */
struct lloop *seda__l_loop(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, LOOP_KEY);
    struct lloop **u = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return u ? *u : NULL;
}

struct lloop *seda__l_loop_ref(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    if (lp)
        atomic_fetch_add_explicit(&lp->refs, 1, memory_order_relaxed);
    return lp;
}

/* ---- the timer heap (main thread) ---- */

static bool before(const struct ltimer *a, const struct ltimer *b)
{
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void heap_set(struct lloop *lp, int i, struct ltimer *t)
{
    lp->heap[i] = t;
    t->slot = i;
}

static void heap_up(struct lloop *lp, int i)
{
    struct ltimer *t = lp->heap[i];
    while (i > 0 && before(t, lp->heap[(i - 1) / 2])) {
        heap_set(lp, i, lp->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(lp, i, t);
}

static void heap_down(struct lloop *lp, int i)
{
    struct ltimer *t = lp->heap[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= lp->n)
            break;
        if (c + 1 < lp->n && before(lp->heap[c + 1], lp->heap[c]))
            c++;
        if (!before(lp->heap[c], t))
            break;
        heap_set(lp, i, lp->heap[c]);
        i = c;
    }
    heap_set(lp, i, t);
}

/* Add t (room was made by the caller). */
static void heap_push(struct lloop *lp, struct ltimer *t)
{
    if (!t->unref)
        lp->nref++;
    t->seq = lp->seq++;
    lp->heap[lp->n] = t;
    t->slot = lp->n++;
    heap_up(lp, t->slot);
}

static void heap_remove(struct lloop *lp, struct ltimer *t)
{
    int i = t->slot;
    t->slot = -1;
    if (!t->unref)
        lp->nref--;
    struct ltimer *last = lp->heap[--lp->n];
    if (i == lp->n)
        return;
    heap_set(lp, i, last);
    heap_down(lp, i);
    heap_up(lp, last->slot);
}

/* ---- seda.timer, seda.every ---- */

/* Forget a timer that will not fire again: its function and the
 * reference that kept it alive. */
static void timer_release(lua_State *L, struct ltimer *t)
{
    luaL_unref(L, LUA_REGISTRYINDEX, t->fn_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, t->self_ref);
    t->fn_ref = t->self_ref = LUA_NOREF;
}

/* seda.timer(delay, fn) / seda.every(interval, fn) -> handle.  Misuse
 * (a bad delay, no function) raises naming the argument. */
static int new_timer(lua_State *L, bool every)
{
    const char *what = every ? "seda.every" : "seda.timer";
    if (lua_type(L, 1) != LUA_TNUMBER)
        return luaL_error(L, "%s: %s must be a number of seconds", what,
                          every ? "interval" : "delay");
    double d = lua_tonumber(L, 1);
    if (every ? !(d > 0) : !(d >= 0))
        return luaL_error(L, "%s: %s must be %s (got %f)", what,
                          every ? "interval" : "delay",
                          every ? "> 0" : ">= 0", d);
    if (!isfinite(d) || d >= 1e9)
        d = 1e9;                        /* never, in practice */
    if (!lua_isfunction(L, 2))
        return luaL_error(L, "%s: the second argument must be a function",
                          what);
    struct lloop *lp = seda__l_loop(L);
    if (!lp)
        return luaL_error(L, "%s: the seda module is not open here", what);
    if (lp->n == lp->cap) {
        int nc = lp->cap ? lp->cap * 2 : 16;
        struct ltimer **nh = realloc(lp->heap, sizeof *nh * (size_t)nc);
        if (!nh)
            return luaL_error(L, "%s: out of memory", what);
        lp->heap = nh;
        lp->cap = nc;
    }
    struct ltimer *t = lua_newuserdatauv(L, sizeof *t, 0);
    memset(t, 0, sizeof *t);
    t->slot = -1;
    t->fn_ref = t->self_ref = LUA_NOREF;
    luaL_setmetatable(L, TIMER_MT);
    t->lp = lp;
    t->interval = every ? d : 0;
    t->due = seda_now() + d;
    lua_pushvalue(L, 2);
    t->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, -1);
    t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    heap_push(lp, t);                   /* room made above: cannot fail */
    return 1;
}

static int l_timer(lua_State *L)
{
    return new_timer(L, false);
}

static int l_every(lua_State *L)
{
    return new_timer(L, true);
}

/* handle:cancel() -> true when it was pending (it will not fire again),
 * false when it had fired (a one-shot) or was cancelled already. */
static int timer_cancel(lua_State *L)
{
    struct ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    if (t->slot < 0 && t->fn_ref == LUA_NOREF) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (t->slot >= 0)
        heap_remove(t->lp, t);
    t->interval = 0;                    /* a running every() stops too */
    timer_release(L, t);
    lua_pushboolean(L, 1);
    return 1;
}

/* handle:pending() -> true while it will still fire. */
static int timer_pending(lua_State *L)
{
    struct ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    lua_pushboolean(L, t->slot >= 0);
    return 1;
}

/* handle:unref() / handle:ref() -> handle.  An unref'd timer still fires,
 * but does not keep a plain run alive on its own; ref undoes it.  Either
 * works on a timer that has fired, and carries over while it repeats. */
static int timer_setref(lua_State *L, bool unref)
{
    struct ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    if (t->unref != unref && t->slot >= 0)
        t->lp->nref += unref ? -1 : 1;
    t->unref = unref;
    lua_settop(L, 1);
    return 1;
}

static int timer_unref(lua_State *L)
{
    return timer_setref(L, true);
}

static int timer_ref(lua_State *L)
{
    return timer_setref(L, false);
}

/* handle:has_ref() -> false after unref(), else true. */
static int timer_has_ref(lua_State *L)
{
    struct ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    lua_pushboolean(L, !t->unref);
    return 1;
}

static int timer_tostring(lua_State *L)
{
    struct ltimer *t = luaL_checkudata(L, 1, TIMER_MT);
    if (t->slot < 0)
        lua_pushstring(L, "seda.timer (done)");
    else
        lua_pushfstring(L, "seda.timer (%s, due in %fs%s)",
                        t->interval > 0 ? "every" : "once",
                        t->due - seda_now(), t->unref ? ", unref'd" : "");
    return 1;
}

/* Protected part of running one timer: the function at 1, the handle
 * at 2. */
static int call_timer(lua_State *L)
{
    lua_call(L, 1, 0);
    return 0;
}

/* Run the timers due now that were scheduled before this call.  Returns
 * how many ran.  Errors are reported like on_complete's (rate-limited,
 * with a traceback).  Main thread. */
int seda__l_loop_run_timers(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    if (!lp || lp->n == 0)
        return 0;
    double now = seda_now();
    uint64_t limit = lp->seq;
    int ran = 0;
    while (lp->n > 0 && lp->heap[0]->due <= now && lp->heap[0]->seq < limit) {
        struct ltimer *t = lp->heap[0];
        int top = lua_gettop(L);
        lua_pushcfunction(L, seda__l_worker_msghandler);
        lua_pushcfunction(L, call_timer);
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->fn_ref);
        lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref);  /* alive below */
        heap_remove(lp, t);
        if (t->interval > 0) {
            t->due += t->interval;
            if (t->due <= now)
                t->due = now + t->interval;
            heap_push(lp, t);       /* a pop just made room */
        } else {
            timer_release(L, t);
        }
        seda__l_callback_depth++;
        int rc = lua_pcall(L, 2, 0, top + 1);
        seda__l_callback_depth--;
        if (rc != LUA_OK)
            seda__l_callback_report_error("timer", lua_tostring(L, -1));
        lua_settop(L, top);
        ran++;
    }
    return ran;
}

double seda__l_loop_next_timer(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    if (!lp || lp->n == 0)
        return -1;
    double d = lp->heap[0]->due - seda_now();
    return d > 0 ? d : 0;
}

/* ---- the host's side (seda_lua.h) ---- */

int seda_lua_wakefd(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    return lp ? lp->efd : -1;
}

double seda_lua_next_timer(lua_State *L)
{
    return seda__l_loop_next_timer(L);
}

int seda_lua_timers_alive(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    return lp ? lp->nref : 0;
}

int seda_lua_run_pending(lua_State *L)
{
    struct lloop *lp = seda__l_loop(L);
    if (lp)
        loop_drain(lp);
    return seda__l_run_all_completions(L) + seda__l_loop_run_timers(L);
}

/* ---- the module's part ---- */

static int loop_gc(lua_State *L)
{
    struct lloop **u = lua_touserdata(L, 1);
    if (*u) {
        struct lloop *lp = *u;
        *u = NULL;
        for (int i = 0; i < lp->n; i++)
            lp->heap[i]->slot = -1;     /* the states' refs go with L */
        lp->n = 0;
        lp->nref = 0;
        loop_unref(lp);
    }
    return 0;
}

void seda__l_loop_open(lua_State *L)
{
    if (luaL_newmetatable(L, TIMER_MT)) {
        static const luaL_Reg m[] = {
            { "cancel", timer_cancel },
            { "pending", timer_pending },
            { "unref", timer_unref },
            { "ref", timer_ref },
            { "has_ref", timer_has_ref },
            { NULL, NULL }
        };
        luaL_newlib(L, m);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, timer_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, LOOP_KEY);
    bool have = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (have)
        return;
    struct lloop **u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, loop_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    struct lloop *lp = calloc(1, sizeof *lp);
    if (!lp)
        luaL_error(L, "seda: out of memory");
    atomic_init(&lp->refs, 1);
    atomic_init(&lp->signalled, 0);
    /* Without a descriptor (EMFILE) the host polls instead: -1. */
    lp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    *u = lp;
    lua_setfield(L, LUA_REGISTRYINDEX, LOOP_KEY);
}

/* Functions of the main state's seda table. */
void seda__l_loop_register(lua_State *L)
{
    lua_pushcfunction(L, l_timer);
    lua_setfield(L, -2, "timer");
    lua_pushcfunction(L, l_every);
    lua_setfield(L, -2, "every");
}
