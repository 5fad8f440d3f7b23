/* SPDX-License-Identifier: MIT */
/*
 * lio.h -- what the I/O binding files share (lio.c: the loop of a state,
 * waiting on an op, seda.sleep, seda.http; lio_tcp.c: seda.socket).  A
 * client of include/seda_io.h only.
 */
#ifndef SEDA_LIO_H
#define SEDA_LIO_H

#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "seda_io.h"

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

#define LIO_OP_MT "seda.io.op"

/*
 * Where an op's callback tells the waiting state that it fired.  Held by
 * the op box and, while the op is pending, by the callback (refs).
 * Locking:
 *   mu guards fired; cv is signalled (under mu) when it is set.
 *   Atomic: refs (acq_rel on release, relaxed on take).
 */
struct lcall;
struct lio_waiter {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool fired;                 /* guarded by mu */
    struct lcall *call;         /* a suspended handler call to post when it
                                   fires, or NULL: the waiter blocks on cv;
                                   guarded by mu */
};

/* The op box (a userdata, LIO_OP_MT): anchors a pending op and its
 * waiter on the Lua stack, so an error anywhere frees both (__gc and
 * __close: seda_io_op_free, which cancels an op still pending). */
struct lio_op {
    seda_io_op_t *op;           /* NULL before submission and once done */
    struct lio_waiter *w;       /* NULL once released */
};

/* The loop the state's I/O runs on: a worker state's is its bus's (no
 * thread: the workers drive it), made on first use; any other state's is
 * its own (with a thread), made on first use and kept in the registry;
 * its __gc frees it (cancelling what is pending) at lua_close.  Raises on
 * failure. */
SEDA__API seda_io_loop_t *seda__l_io_loop(lua_State *L);

/* Run LB's loop now, if it has one (seda_io_loop_run): for a worker that
 * waits for an op of it outside its pool's loop (a stopping worker
 * waiting for its suspended calls' posts).  Never blocks; takes lb->mu:
 * call it holding no lock an op's callback takes. */
struct lbus;
SEDA__API void seda__l_io_drive(struct lbus *lb);

/* Push a new op box.  Raises (leaving nothing behind) on no memory. */
SEDA__API struct lio_op *seda__l_io_op_push(lua_State *L);

/* Around a submission: seda__l_io_ud gives the callback's ud (taking the
 * callback's reference to the waiter); if the submission fails, give it
 * back with seda__l_io_unarm. */
SEDA__API void *seda__l_io_ud(struct lio_op *b);
SEDA__API void seda__l_io_unarm(struct lio_op *b);

/* The callback every binding submits with (ud from seda__l_io_ud). */
SEDA__API void seda__l_io_cb(seda_io_op_t *op, void *ud);

/*
 * Wait for the op in the box at stack index BOX, then continue with
 * K(L, status, CTX), which reads the results from the op, pushes them and
 * returns their count; lio_wait returns what K returns.  In a handler call
 * that can be suspended (lsuspend.c) the call yields and its worker goes
 * on with other envelopes until the op's callback posts it; elsewhere the
 * thread blocks (with a loan on a pool worker).  K finds everything it
 * needs on the stack (the box at an absolute index) and in the op.
 */
SEDA__API int seda__l_io_wait(lua_State *L, int box, lua_KFunction k,
                              lua_KContext ctx);

/* The timeout an op of a handler call may have: `t` (seconds, < 0: none)
 * capped at what is left of the call's handler_timeout. */
SEDA__API double seda__l_io_budget(lua_State *L, double t);

/* Let go of the box's op now (its results were read). */
SEDA__API void seda__l_io_op_done(struct lio_op *b);

/* Register sleep, http and socket into the table at the top of L. */
SEDA__API void seda__l_io_register(lua_State *L);

/* lio_tcp.c: push the seda.socket table. */
SEDA__API void seda__l_io_push_socket(lua_State *L);

#endif /* SEDA_LIO_H */
