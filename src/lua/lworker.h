/* SPDX-License-Identifier: MIT */
/*
 * lworker.h -- a worker's Lua state and the envelope object handlers get
 * (internal to lworker.c and lenv.c).
 */
#ifndef SEDA_LWORKER_H
#define SEDA_LWORKER_H

#include <pthread.h>

#include <lua.h>

#include "lseda.h"

/* What a worker state keeps on its stack for its whole life. */
#define SLOT_MSGH 1             /* the message handler (traceback) */
#define SLOT_ENV 2              /* the first struct lenv's userdata */
#define SLOT_CO 3               /* the coroutine batches run in, kept from
                                   batch to batch; nil when a suspended
                                   call took it (lsuspend.c) */

/* A worker's view of one stage's handlers. */
struct wstage {
    uint64_t version;           /* code generation (lstage.gen) these
                                   refs came from */
    int n;                      /* handler refs */
    int *ref;                   /* registry refs to handler functions */
};

/* Small blocks (strings, tables, closures up to SMALL_MAX bytes) come
 * from a free list per 16-byte size class, kept per state: a state lives
 * on one thread, so no locking, and an envelope's short-lived payload
 * string costs a pointer pop and push instead of a malloc and a free.
 * 256 bytes covers a decoded record's hash part up to 8 fields (8 nodes
 * of 24 bytes): raising the limit from 128 took a 5-field table's
 * encode + decode from 5690 to 5480 instructions (callgrind).  A list
 * holds what the collector freed at once, as glibc's bins would. */
#define SMALL_MAX 256
#define SMALL_CLASSES (SMALL_MAX / 16)
#define SMALL_KEEP 1024             /* blocks kept per class, at most */

struct small_block {
    struct small_block *next;
};

struct lcall;

struct lworker {
    lua_State *L;
    struct lbus *lb;
    int index;                  /* worker index, -1 for a scratch state */
    bool registered;            /* listed in the bus's workers (stats) */
    size_t mem_used;            /* bytes allocated by L (its thread) */
    atomic_size_t mem_seen;     /* mem_used as of the end of the last
                                   handler call, for stats (relaxed:
                                   a figure, no ordering) */
    size_t mem_limit;           /* refuse past this (0 = none) */
    seda_wbuf wb;               /* encode buffer, reused */
    struct ladmit_cache ac;     /* admit rules compiled here */
    struct wstage *ws;          /* indexed by stage index */
    int nws;
    double timeout;             /* the batch's stage's handler_timeout
                                   (0: none), for its calls' lenv */
    struct lenv *le;            /* the context of the call running now,
                                   or of the batch's next call */
    struct lenv *le_free;       /* contexts no call owns (lenv.next) */
    uintptr_t calls;            /* handler calls so far (for tokens) */
    /* The batch being run (lbatch.c), NULL between batches. */
    seda_batch_t *bt;           /* the core's session */
    struct lstage *bls;         /* its stage */
    struct wstage *bws;         /* this worker's view of its code */
    int bindex;                 /* which of the stage's handlers */
    bool reload;                /* the trampoline stopped for new code */
    /* Suspended calls (lsuspend.c).  Owner thread only, but the mailbox. */
    seda_worker_t *self;        /* the pool worker that owns this state,
                                   NULL for a loan's or a scratch state */
    lua_State *bco;             /* the coroutine running the batch now */
    struct lcall *cur;          /* the suspended call running again now */
    struct lcall *yielded;      /* set by seda__l_suspend_wait as it yields */
    struct lcall *susp;         /* every suspended call of this state */
    int nsusp;                  /* how many */
    int *co_free;               /* registry refs of idle coroutines */
    int nco_free, co_cap;
    pthread_mutex_t mail_mu;    /* guards mail and mail_cv's predicate */
    pthread_cond_t mail_cv;     /* a stopping worker waits here */
    struct lcall *mail;         /* calls whose wait ended; mail_mu */
    /* The envelope's field names as interned in this state (anchored in
     * the registry): env_index compares a key's address, not its bytes. */
    const char *k_payload, *k_headers, *k_id, *k_to, *k_sender, *k_slip,
        *k_attempts, *k_forward, *k_published_at,
        *k_respond;
    struct small_block *small[SMALL_CLASSES]; /* freed small blocks */
    int nsmall[SMALL_CLASSES];  /* how many each list holds */
};

/* A handler call's context: its view of its envelope (what `env` reaches)
 * and its deadline, as lua-nginx-module gives each coroutine its own ctx.
 * The call owns it from its start to its end, so a call that suspends
 * keeps its context and copies nothing: the batch goes on with another
 * (w->le), and a call that runs again is given its own back.  A full
 * userdata (anchored by ref) whose user values hold the decoded payload
 * (1) and the headers table (2).  Owner thread only. */
struct lenv {
    seda_env_t *env;            /* NULL outside a handler call */
    uintptr_t token;            /* the call's env value (odd), 0 none */
    int64_t deadline;           /* handler_timeout, monotonic ns */
    double timeout;             /* its stage's handler_timeout, 0 none */
    struct lenv *next;          /* w->le_free */
    int ref;                    /* registry ref of its userdata */
    bool decoded;               /* payload value cached in user value 1 */
    bool decoded_table;         /* ... and it is a table (may be changed
                                   in place, so it is written back) */
    bool payload_set;           /* assigned during this call */
    bool headers_loaded;        /* headers table cached in user value 2 */
    bool responded;             /* env:respond called during this call */
};

/* The worker behind a state (its extra space points back at it). */
static inline struct lworker *worker_of(lua_State *L)
{
    return *(struct lworker **)lua_getextraspace(L);
}

/* Install the envelope metatable on light userdata.  Runs in setup,
 * under lua_pcall. */
SEDA__API void seda__l_env_metatable(lua_State *L);

/* A context no call owns, or a new one (a userdata anchored in the
 * registry by its ref); NULL when out of memory.  Raises nothing.  L: a
 * thread of w's state that may call (the running coroutine, or the state
 * between batches). */
SEDA__API struct lenv *seda__l_env_new(lua_State *L, struct lworker *w);

/* Give context le back once its call is over: its view is cleared (what
 * its user values held is let go) and it waits in w->le_free. */
SEDA__API void seda__l_env_give(lua_State *L, struct lworker *w,
                                struct lenv *le);

/* Intern the envelope's field names into w (runs in setup, under
 * lua_pcall). */
SEDA__API void seda__l_env_keys(lua_State *L, struct lworker *w);

/* After an acking handler: copy its view of the envelope (w->le) back
 * into it when something changed and someone will see it (the next hop, a
 * completion callback, another pub/sub consumer: nhandlers > 1).  Returns
 * 0, or -1 with err (bad headers, a payload that cannot be encoded).
 * Raises only a memory error. */
SEDA__API int seda__l_env_finish(lua_State *L, struct lworker *w,
                                 int nhandlers, char *err, size_t errlen);

/* The worker's view of stage ls (NULL when out of memory), and bringing
 * it up to the stage's current code (lworker.c). */
SEDA__API struct wstage *seda__l_worker_wstage(struct lworker *w,
                                               struct lstage *ls);
SEDA__API void seda__l_worker_refresh(struct lworker *w, struct lstage *ls,
                                      struct wstage *c);

/* ---- suspended calls (lsuspend.c) ---- */

/* A handler call suspended on a wait: its coroutine, the core's handle,
 * and its context (lenv), which other calls do not touch meanwhile.
 * Owned by its state's thread, but mail_next (the mailbox's, guarded by
 * w->mail_mu). */
struct lcall {
    struct lcall *next;         /* w->calls */
    struct lcall *mail_next;    /* w->mail; guarded by w->mail_mu */
    bool posted;                /* its wait's end is in the mailbox (its
                                   poster is done with it); guarded by
                                   w->mail_mu */
    struct lworker *w;
    lua_State *co;              /* the call's coroutine */
    int co_ref;                 /* its registry anchor */
    seda_pending_t *p;          /* the core's handle */
    void (*cancel)(void *);     /* ends its wait early */
    void *wait_arg;             /* its argument */
    bool suspended;             /* waiting now (not running) */
    struct lenv *le;            /* its context, its own from its first
                                   wait to its end (NULL before) */
    struct lenv *spare;         /* the batch's next context, made before
                                   the call suspends (nothing can fail
                                   once it has); NULL once given */
    struct lstage *ls;          /* its stage */
    int bindex;                 /* which of the stage's handlers */
    /* The run that just ended settled it (lbatch.c): with what. */
    bool settled, ok;
};

/* The running handler call as one that can be suspended, made on its
 * first wait (seda_batch_suspend takes its envelope out of the batch), or
 * NULL where the caller must block instead: the main state, a loan's
 * state (its thread may end with the loan), a stage with several
 * handlers, a durable stage, a coroutine of the handler's own. */
SEDA__API struct lcall *seda__l_suspend_begin(lua_State *L);

/* Suspend c until seda__l_suspend_post(c), then continue with
 * k(L, LUA_YIELD, ctx).  The waiter armed what posts it first (it may
 * already have: a post only queues c; it runs after this batch call
 * returns).  cancel(arg) ends the wait early (a worker that stops
 * uses it; any thread).  Yields. */
SEDA__API int seda__l_suspend_yield(lua_State *L, struct lcall *c,
                                    void (*cancel)(void *), void *arg,
                                    lua_KContext ctx, lua_KFunction k);

/* seda.blocking(fn, ...): fn(...) with the worker lent (a loan covers
 * it, as for any managed block); returns fn's results, raises its
 * error. */
SEDA__API int seda__l_suspend_blocking(lua_State *L);

/* Queue c to run again on its worker (which is woken).  Any thread, once
 * per wait. */
SEDA__API void seda__l_suspend_post(struct lcall *c);

/* Seconds left before the running handler call's handler_timeout (a
 * wait should end by then), or -1 when it has none or L runs no handler
 * call. */
SEDA__API double seda__l_suspend_budget(lua_State *L);

/* The worker state L belongs to (any of its coroutines), or NULL for a
 * state that is not a worker's (the main state). */
SEDA__API struct lworker *seda__l_worker_of(lua_State *L);

/* Arm the handler_timeout hook on coroutine co (lbatch.c). */
SEDA__API void seda__l_batch_timeout_hook(lua_State *co);

/* The worker hooks of suspended calls: run the calls whose wait ended
 * (the bus's worker_mail hook), and end the state's calls as its worker
 * stops (finished when the bus still runs -- a pool that shrinks --,
 * cancelled and dropped when the bus stops). */
SEDA__API void seda__l_suspend_end(struct lworker *w);
SEDA__API void seda__l_suspend_init(struct lworker *w);
SEDA__API void seda__l_suspend_free(struct lworker *w);

/* The coroutine to run a batch in (SLOT_CO, made when empty: a
 * suspended call took the last; NULL when out of memory), and giving a
 * coroutine back when a call that had one is over (reset, and not kept,
 * when it ended in an error). */
SEDA__API lua_State *seda__l_suspend_co_take(struct lworker *w);
SEDA__API void seda__l_suspend_co_give(struct lworker *w, lua_State *co, bool reset);

/* The message of an error that ended coroutine co, with its traceback,
 * pushed on L. */
SEDA__API void seda__l_suspend_co_error(lua_State *L, lua_State *co);

#endif /* SEDA_LWORKER_H */
