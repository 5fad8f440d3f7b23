/* SPDX-License-Identifier: MIT */
/*
 * seda_lua_admin.h -- the Lua binding's internals that seda-lua's own
 * tools (src/cli) and the benchmarks (bench/) use: the payload codec, the
 * handlers' kind of Lua state, and the hooks a program hosting the main
 * state needs.  What lauxlib.h is to lapi.c: a small door, so the tools
 * never include the binding's internal headers (src/lua/lseda.h,
 * src/lua/lcodec.h), which include this one for the same declarations.
 *
 * Not installed and not a stable API: the functions are hidden
 * (SEDA__API), reachable only by a program linked with libsedalua.a.
 * Include after <lua.h>.
 */
#ifndef SEDA_LUA_ADMIN_H
#define SEDA_LUA_ADMIN_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

/* ---- the payload codec (src/lua/lcodec.c) ---- */

/* The deepest table nesting either direction accepts.  A table that holds
 * no tables is one level. */
#define SEDA_CODEC_MAX_DEPTH 200

/* A growable output buffer, reused by the caller across encodes.  An
 * all-zero buffer is ready (malloc'd storage, no limit); the owner may
 * set limit, and alloc to count the storage in a Lua state's memory (a
 * worker's: its memory_limit then bounds encoding too). */
typedef struct seda_wbuf {
    unsigned char *p; /* storage, NULL when cap is 0 */
    size_t len;       /* bytes in use */
    size_t cap;       /* bytes allocated */
    size_t limit;     /* len may not pass this (0: no limit): an encode
                         that would fails with "too_large" and sets over */
    lua_Alloc alloc;  /* storage allocator (lua_Alloc contract), or NULL
                         for realloc/free */
    void *alloc_ud;   /* its first argument */
    int over;         /* the last encode failed at limit (1) or because
                         alloc refused (2); 0 otherwise */
} seda_wbuf;

enum { SEDA_WBUF_OVER_LIMIT = 1, SEDA_WBUF_OVER_MEMORY = 2 };

/* Frees b->p (through b->alloc when set) and empties *b, keeping limit
 * and alloc.  Accepts NULL and an all-zero buffer.  Cannot fail. */
SEDA__API void seda__codec_wbuf_free(seda_wbuf *b);

/* Encodes the Lua value at stack index idx and appends the bytes to b.
 * b->len is not reset: set it to 0 first to reuse the buffer.  The buffer
 * grows by doubling (malloc/realloc); the caller owns it and frees it with
 * seda__codec_wbuf_free().
 *
 * Returns 0 on success.  Returns -1 when the value holds a function,
 * userdata, thread, cyclic table, or nests deeper than
 * SEDA_CODEC_MAX_DEPTH, when the encoding would pass b->limit ("too_large:
 * ..."; b->over says so), or when growing b runs out of memory ("out of
 * memory", or "not enough memory: ..." when b->alloc refused); then err
 * receives a NUL-terminated message (truncated to
 * errlen) whose path is rooted at `root`, e.g.
 * "payload.items[3].cb: cannot encode a function", and b->len is restored
 * to its value on entry.  err may be NULL when errlen is 0.  Path steps:
 * `.name` for identifier keys, `["odd key"]` (escaped, cut after 32
 * bytes), `[3]`, `[1.5]`, `[true]`, `[{...}]` after a table key and
 * `{key}` inside one; a bad key itself reads
 * "payload.a: cannot encode a function as a table key".
 *
 * Never raises a Lua error and never calls a metamethod.  The Lua stack is
 * the same on return as on entry.  Any thread that owns L. */
SEDA__API int seda__codec_encode(lua_State *L, int idx, seda_wbuf *b,
                                 const char *root, char *err, size_t errlen);

/* Decodes exactly one value from p[0..len) and pushes it on L's stack.
 *
 * Returns 0 after pushing the value.  Returns -1 and pushes nothing when
 * the bytes are malformed, truncated, followed by trailing bytes, nested
 * deeper than SEDA_CODEC_MAX_DEPTH, or otherwise hostile; then err receives
 * a NUL-terminated message (truncated to errlen).  p is borrowed and only
 * read within [p, p + len).
 *
 * A claimed length or element count larger than the remaining input could
 * justify is rejected before anything is allocated, so the memory used is
 * proportional to len.  May raise a Lua memory error (it creates Lua
 * strings and tables); raises nothing else.  Any thread that owns L.
 *
 * The first table decoded successfully in a state also leaves a cache of
 * recently decoded short keys (about 1.6 KB, 64 strings of at most 31
 * bytes) in L's registry, under a private key, for the state's life. */
SEDA__API int seda__codec_decode(lua_State *L, const void *p, size_t len,
                                 char *err, size_t errlen);

/* ---- handlers' states (src/lua/lworker.c) ---- */

/* A state that allocates and collects the way handlers' states do (the
 * per-state small-block allocator, generational collection, no memory
 * limit), with nothing loaded: for benchmarks and tests that measure what
 * handlers get.  Returns NULL when out of memory.  Close it with
 * seda__l_worker_closestate() (which accepts NULL), never lua_close.  Any
 * thread; the state then belongs to that thread. */
SEDA__API lua_State *seda__l_worker_newstate(void);
SEDA__API void seda__l_worker_closestate(lua_State *L);

/* The message handler every protected call uses: the error (or its
 * __tostring, or a note of its type) with a traceback. */
SEDA__API int seda__l_worker_msghandler(lua_State *L);

/* ---- live taps seen by a tool (src/lua/lerrors.c, src/lua/lobserve.c) ---- */

struct seda_env_snapshot;       /* seda.h: seda_tap_entry, seda_dead_letter */

/* Push a table for the envelope snapshot e (a tap's copy or a dead
 * letter): id, at, attempts, payload_size, headers, and payload when the
 * whole payload was kept and decodes, else payload_preview; a dead letter
 * also reason, error, missing (when set) and payload_preview beside a
 * decoded codec payload; stage when not NULL.  May raise (memory).  Any
 * thread that owns L. */
SEDA__API void seda__l_errors_snapshot(lua_State *L,
                                       const struct seda_env_snapshot *e,
                                       const char *stage);

/* An observer's tap: a tap (seda_tap_open) on a stage of a live bus that
 * a thread other than the main one reads (seda-lua's /tap).  A bus can be
 * shut down and freed on the main thread at any time; its observer taps
 * are closed first, and a read says so, so the reader never touches a
 * freed stage. */
typedef struct seda_lua_otap seda_lua_otap;

/* Open a tap of capacity copies on the stage label names among the live
 * buses: "name" is the first bus's stage of that name, "name#N" the N-th
 * bus's that has one (as stats() and the REPL name them).  0;
 * SEDA_ENOSTAGE (-ENOENT) when no live bus has it; SEDA_EINVAL or
 * SEDA_ENOMEM (seda_tap_open's).  Close it with seda__l_observe_tap_close.
 * Any thread. */
SEDA__API int seda__l_observe_tap_open(const char *label, int capacity,
                                       seda_lua_otap **out);
/* Take up to max copies without waiting (free each with
 * seda_tap_entry_free); *missed the copies lost so far.  Returns how
 * many, or SEDA_ECLOSED (-ECANCELED) once the bus has been shut down (the
 * tap is then closed: only seda__l_observe_tap_close is left to call).
 * One reader at a time per tap; any thread. */
SEDA__API int seda__l_observe_tap_read(seda_lua_otap *t,
                                       struct seda_env_snapshot *out,
                                       int max,
                                       uint64_t *missed);
/* Close t (accepts NULL).  Any thread; cannot fail. */
SEDA__API void seda__l_observe_tap_close(seda_lua_otap *t);

/* ---- hosting the main state (src/lua/lcallback.c) ---- */

/* For a program hosting the main state (seda-lua's REPL): how many
 * on_complete callbacks are running on it now (an interrupt waits until
 * they return: it stops the command, never a callback), and a check that
 * bus:wait() makes between waits, returning true to give up waiting (an
 * interrupt is pending; the caller then sees it at its next
 * instruction).  Main thread only. */
SEDA__API extern int seda__l_callback_depth;
SEDA__API extern bool (*seda__l_callback_interrupt_pending)(lua_State *L);

/* Listeners (bus:listen) open in the process, every bus's: a plain run of
 * seda-lua with one keeps serving, as --serve does.  Any thread. */
SEDA__API int seda__l_http_open(void);
/* The same for NATS service listeners (bus:listen{ nats = ... }). */
SEDA__API int seda__l_nats_open(void);

/* The listeners of the bus at idx (nothing if it is not a live bus) stop
 * accepting connections, as bus:shutdown's first step: the program's
 * drain at a signal or the end of its run.  Main thread. */
SEDA__API void seda__l_bus_quiesce(lua_State *L, int idx);

#endif /* SEDA_LUA_ADMIN_H */
