/* SPDX-License-Identifier: MIT */
/*
 * lseda.h -- internals shared by the Lua binding files (lseda.c: the main
 * state's module; lworker.c: per-worker states and Lua handlers; lshared.c:
 * seda.shared).  Like Lua's auxiliary library, these files use only the
 * public seda.h API of the core.
 *
 * NAMES: a function of l<name>.c is seda__l_<name>_* (or seda__l_<name>
 * itself): seda__l_stage_declare is lstage.c's, seda__l_worker_start
 * lworker.c's.  lseda.c, the module's own file, has the plain seda__l_*
 * names no other file's name begins (seda__l_check_bus).  The leaf
 * modules that know nothing of buses keep their own: seda__codec_*
 * (lcodec.c), seda__schema_* (lschema.c), seda__path_* (lpath.c).
 */
#ifndef SEDA_LSEDA_H
#define SEDA_LSEDA_H

#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "lcodec.h"
#include "seda.h"
#include "seda_io.h"
#include "seda_remote.h"

#ifndef SEDA__API
#define SEDA__API __attribute__((visibility("hidden")))
#endif

#define SEDA_KIND_RAW 0         /* payload is a byte string */
#define SEDA_KIND_LUA 1         /* payload is a codec-encoded Lua value */

#define LSEDA_BUS_MT "seda.bus"
#define LSEDA_ENV_MT "seda.env"

/* One consumer's code, as text or as bytecode. */
struct lsrc {
    char *chunkname;            /* "@path" or "=inline handler" */
    char *path;                 /* file to re-read on reload, or NULL */
    char *code;                 /* source text or bytecode */
    size_t len;
    bool binary;                /* bytecode from string.dump */
};

struct lstage;

/* The argument a Lua consumer is registered with. */
struct lconsumer {
    struct lstage *ls;
    int index;                  /* which of the stage's handlers */
};

/*
 * Locking:
 *   mu guards src, prev (the arrays and what they point to), version,
 *   prev_version, last_error, reloads.
 *   Immutable after creation: lb, st, index, nsrc, cons.
 *   Atomic: gen (release after src is replaced / acquire in workers, who
 *   then copy src under mu).
 */
struct lstage {
    struct lbus *lb;
    seda_stage_t *st;
    int index;                  /* seda stage index */
    int nsrc;                   /* handlers (consumers) */
    struct lconsumer *cons;     /* nsrc entries */
    pthread_mutex_t mu;
    struct lsrc *src;           /* nsrc entries; guarded by mu */
    struct lsrc *prev;          /* the code before the last reload (nsrc
                                   entries), kept to go back to if a
                                   worker cannot load src; or NULL;
                                   guarded by mu */
    uint64_t version;           /* the version src is (what stats show:
                                   1, +1 per reload); guarded by mu */
    uint64_t prev_version;      /* prev's; guarded by mu */
    uint64_t max_version;       /* the highest version given so far (a
                                   rolled-back one is never reused);
                                   guarded by mu */
    char *last_error;           /* last reload error; guarded by mu */
    atomic_uint_fast64_t gen;   /* code generation: +1 whenever src
                                   changes (reload or roll back); workers
                                   reload when theirs differs */
    struct seda_schema *accepts;/* typed stage, or NULL; immutable */
    const struct seda_remote_format *format; /* a remote stage's payload
                                   format (json, msgpack, raw), or NULL;
                                   immutable after bus:stage */
    uint64_t reloads;           /* successful reloads; guarded by mu */
    struct lsrc *admit;         /* the admit rule, or NULL; guarded by mu */
    atomic_bool has_admit;      /* admit != NULL (release after it is set,
                                   acquire by publishers) */
    atomic_uint_fast64_t admit_version; /* raised (release) whenever admit
                                   changes; states recompile on a change */
    uint64_t uid;               /* unique in the process, never reused (a
                                   key for struct ladmit_cache); immutable */
    bool replay_pending;        /* durable, not replayed yet; main thread
                                   only (see seda__l_stage_start_all) */
    bool blocking;              /* every handler call runs with its worker
                                   lent (seda_block_begin); immutable */
};

/* An on_complete callback shared by the envelopes of one publish call.
 * Main thread only: created by publish, released when the last of its
 * envelopes' completions has been run (or dropped). */
struct lcb {
    int ref;                    /* the function in the main registry */
    int refs;                   /* envelopes still to report */
    struct lbus *lb;            /* on_durable's: where to queue */
    int lost;                   /* reports that found no memory to queue
                                   a completion: references to drop;
                                   guarded by the bus's mu */
    struct lcb *lost_next;      /* on the bus's lost list while lost > 0;
                                   guarded by the bus's mu */
};

/* A finished itinerary waiting for the main state. */
struct lcompletion {
    struct lcompletion *next;
    struct lcb *cb;             /* the callback to run and release */
    int outcome;                /* enum seda_outcome; on_durable's: the
                                   publish's result (0 or a SEDA_E*) */
    bool durable;               /* an on_durable report */
    int attempts;
    int kind;                   /* payload kind */
    char id[SEDA_ID_MAX];
    char to[SEDA_NAME_MAX + 1];
    char *sender;               /* owned, or NULL */
    int nh;                     /* header pairs */
    char **hdr;                 /* 2 * nh owned strings */
    unsigned char *payload;     /* owned */
    size_t len;
};

/*
 * The main state's event sources (lloop.c): the wake descriptor that
 * queued completions signal, and the timers.
 * Locking:
 *   Atomic: refs (acq_rel on release, relaxed on take), signalled
 *   (acq_rel exchanges: seda__l_loop_signal's pairs with the host's
 *   drain, see lloop.c).
 *   Immutable after creation: efd.
 *   Main thread only: heap, n, cap, seq.
 */
struct ltimer;
struct lloop {
    atomic_int refs;            /* the registry's userdata + each lbus */
    atomic_int signalled;       /* 1 once efd was written, until drained */
    int efd;                    /* eventfd, or -1 (the host then polls) */
    struct ltimer **heap;       /* pending timers, a min-heap */
    int n, cap;                 /* heap entries, room */
    int nref;                   /* pending timers not unref'd: what keeps
                                   a plain run alive (main thread) */
    uint64_t seq;               /* next scheduling sequence number */
};

/*
 * Locking:
 *   mu guards chead, ctail, stages, nstages, cap_stages, workers,
 *   nworkers, cap_workers; cv is signalled (under mu) when a completion
 *   is queued.
 *   Immutable after creation: bus, loop, memory_limit, package_path,
 *   package_cpath, hop_timeout, max_pending_cb, max_payload, http_idle.
 *   Atomic: npending_cb (relaxed counter: completions queued, not yet
 *   run; a hint for publish, exact when the bus is quiet).
 */
struct lworker;
struct lbus {
    seda_bus_t *bus;            /* NULL once freed */
    char name[SEDA_NAME_MAX + 1];/* stable: the name option, or busN in
                                   creation order; immutable */
    struct lloop *loop;         /* a reference to the main state's loop,
                                   or NULL; released with the lbus */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct lcompletion *chead;  /* guarded by mu */
    struct lcompletion *ctail;  /* guarded by mu */
    struct lcb *lost;           /* callbacks with lost reports (struct
                                   lcb's lost); guarded by mu */
    struct lstage **stages;     /* guarded by mu */
    int nstages;                /* guarded by mu */
    int cap_stages;             /* guarded by mu */
    struct lworker **workers;   /* live worker states (stats); guarded
                                   by mu */
    int nworkers;               /* guarded by mu */
    int cap_workers;            /* guarded by mu */
    size_t memory_limit;        /* bytes per worker state */
    size_t max_payload;         /* the bus's, in bytes */
    int max_pending_cb;         /* publish runs callbacks past this */
    double http_idle;           /* seconds: the HTTP client's idle time */
    atomic_int npending_cb;     /* completions queued; relaxed */
    atomic_int ndurable;        /* on_durable publishes not yet reported
                                   (queued after their completion is):
                                   bus:wait waits for them; acq_rel */
    char *package_path;         /* copied into every worker state */
    char *package_cpath;
    bool shut;                  /* main thread only: shutdown done */
    int start;                  /* main thread only: START_* */
    seda_io_loop_t *io;         /* the bus's I/O loop for its worker states,
                                   made on first use; guarded by mu (its
                                   watch's callback reads it unlocked:
                                   set before the watch exists) */
    seda_watch_t *io_watch;     /* io's descriptor in the workers'
                                   readiness set, or NULL; as io.  Dropped
                                   by seda_bus_free (the workers drive the
                                   loop until they are joined) */
    struct lhttp *listeners;    /* bus:listen's (lhttp.c); guarded by mu,
                                   changed on the main thread only */
    struct lnats *nats;         /* bus:listen{ nats = }'s (lnats.c);
                                   guarded by mu, changed on the main
                                   thread only */
};

/* When a bus's durable stages replay (lbus.start). */
enum {
    START_NOT_YET = 0,          /* declared stages wait to replay */
    START_DONE = 1,             /* replayed; new durable stages replay at
                                   declaration */
    START_HELD = -1             /* never: the program failed before it
                                   ran (rows stay in the journal) */
};

/* The bus userdata (main state). */
/* A publishing context's quick way to the admit rules it has compiled
 * (ladmit.c): registry references, so a publish reaches its rule and the
 * two views by array index rather than by hashing pointers.  One per bus
 * object in the main state and one per worker; all zero is empty.  Only
 * its own state's thread touches it. */
#define LADMIT_SLOTS 8
struct ladmit_cache {
    bool ready;                 /* env_ref and stage_ref are made */
    int env_ref, stage_ref;     /* the state's two views */
    struct {
        uint64_t uid;           /* the stage (struct lstage uid), 0 empty */
        uint64_t version;       /* its admit_version compiled */
        int ref;                /* the rule, or LUA_NOREF: none */
    } slot[LADMIT_SLOTS];       /* direct-mapped by uid */
};

struct lbusud {
    const void *tag;            /* &seda__l_bus_tag: a quick type check */
    struct lbus *lb;            /* NULL once freed */
    seda_wbuf wb;               /* main-state encode buffer */
    struct ladmit_cache ac;     /* main-state admit rules */
};

/* ---- lseda.c (shared helpers, payloads) ---- */

/* The address a bus object's tag holds. */
SEDA__API extern const char seda__l_bus_tag;

/* The bus object at index 1; raises when it is not a live bus. */
SEDA__API struct lbusud *seda__l_check_bus(lua_State *L);

/* Raise "<what>: unknown option 'k'" for a key of table t not in keys. */
SEDA__API void seda__l_check_keys(lua_State *L, int t,
                                  const char *const *keys, const char *what);

/* Push a payload as a Lua value: a string for raw bytes, the decoded value
 * otherwise (through the key cache at index kci when it is not 0, see
 * seda__codec_decode_kc).  Raises on a payload that cannot be decoded. */
SEDA__API void seda__l_push_payload(lua_State *L, const void *p, size_t len,
                                    int kind, int kci);

/* Encode the value at idx as a payload into wb (strings go raw: *p points
 * into the Lua string, valid while it stays on the stack).  Returns 0, or
 * -1 with err naming the path; a payload over wb->limit (the bus's
 * max_payload) gives "too_large: ..." with wb->over set, one that passes
 * a worker's memory_limit "payload: not enough memory: ...".  A buffer
 * grown past SEDA_WBUF_KEEP for an earlier payload is freed first. */
#define SEDA_WBUF_KEEP (64 * 1024)
SEDA__API int seda__l_encode_payload(lua_State *L, int idx, seda_wbuf *wb,
                                     const void **p, size_t *len, int *kind,
                                     char *err, size_t errlen);

/* True when s is a valid stage name ([A-Za-z0-9_.:-]{1,64}). */
SEDA__API bool seda__l_valid_name(const char *s);
/* A slip entry or forward hop: a valid stage name; one beginning "nats:"
 * also needs a subject after it (tokens separated by single dots). */
SEDA__API bool seda__l_valid_hop(const char *s);

/* ---- lstage.c ---- */

/* Build the source of a handler (or rule) given at stack index idx (a file
 * name, resolved against dir, or a function) into *out.  Raises naming
 * the stage and field. */
SEDA__API void seda__l_stage_build_src(lua_State *L, const char *stage, int idx,
                                       const char *field, const char *dir,
                                       struct lsrc *out);
/* Push the directory of the calling chunk ("" when unknown). */
SEDA__API void seda__l_stage_caller_dir(lua_State *L);
/* A whole file in malloc'd memory, or NULL. */
SEDA__API char *seda__l_stage_read_file(const char *path, size_t *len);
/* Start the bus (lb->start): replay every durable stage declared so far
 * and not replayed yet, in declaration order.  Returns 0, or -1 with err
 * naming the stage and why (the other stages still replayed).  A held or
 * started bus: 0 and nothing happens.  Main thread. */
SEDA__API int seda__l_stage_start_all(struct lbus *lb, char *err,
                                      size_t errlen);
/* Replay one stage now if it waits to (0, or -1 with err). */
SEDA__API int seda__l_stage_replay(struct lstage *ls, char *err,
                                   size_t errlen);

/* The same as a Lua call on the bus at index 1 (bus:start()), raising on
 * failure; and the implicit start that publish, publish_many, receive,
 * wait and poll on the main state make (raising the same way). */
SEDA__API int seda__l_stage_start_method(lua_State *L);
SEDA__API void seda__l_stage_autostart(lua_State *L, struct lbus *lb);

SEDA__API int seda__l_stage_declare(lua_State *L);
SEDA__API int seda__l_stage_reload(lua_State *L);
SEDA__API int seda__l_stage_tune(lua_State *L);
SEDA__API int seda__l_stage_handler_files(lua_State *L);
SEDA__API void seda__l_stage_free(struct lstage *ls);
/* lb's stage i in declaration order, or NULL past the last (read under
 * lb->mu: a worker may look while the main thread declares one). */
SEDA__API struct lstage *seda__l_stage_nth(struct lbus *lb, int i);

/* ---- lworker.c ---- */

/* Also seda__l_worker_msghandler, seda__l_worker_newstate and
 * seda__l_worker_closestate, in seda_lua_admin.h (the tools use them). */

/* The hooks the bus is created with: one Lua state per pool thread. */
SEDA__API void *seda__l_worker_start(int index, void *ud);
SEDA__API void seda__l_worker_stop(int index, void *data, void *ud);
/* The bus's worker_mail hook: suspended calls whose wait ended run
 * (lsuspend.c). */
SEDA__API void seda__l_suspend_mail(int index, void *data, void *ud);

/* The memory of lb's live worker and loan states (bytes allocated by
 * each, as of the end of its last handler call) with their indices
 * (seda.worker: 0.. for workers, 1024 + slot for loan threads), in index
 * order.  Returns how many; when that is more than max, nothing useful
 * was stored and the caller asks again with room for them.  Takes
 * lb->mu; any thread. */
SEDA__API int seda__l_worker_memory(struct lbus *lb, size_t *bytes, int *index,
                                    int max);

/* The batch consumer every Lua handler is registered as (lbatch.c; ud:
 * its struct lconsumer). */
SEDA__API void seda__l_batch_consume(seda_batch_t *bt, void *ud);

/* Load src into scratch states made as workers' are, one per worker
 * index a state may have (seda.worker = 0 .. workers-1, and the first
 * loan thread's SEDA_LOAN_INDEX0 when loans are allowed), running its top
 * level and init, and check that each yields a handler.  Returns 0, or
 * -1 with a message naming the index and file:line in err.  Main
 * thread. */
SEDA__API int seda__l_worker_validate(struct lbus *lb, const struct lsrc *src,
                                      char *err, size_t errlen);

/* A worker (index) could not load generation gen of ls's code, which the
 * validation accepted: unless the code changed meanwhile, go back to the
 * code before the last reload on every worker (a new generation) and
 * say so in last_error and on stderr; the declared code has nothing
 * before it, and is only reported.  Any worker thread; takes ls->mu. */
SEDA__API void seda__l_stage_load_failed(struct lstage *ls, uint64_t gen,
                                         int index, const char *msg);

/* Free an array of n sources (NULL is fine). */
SEDA__API void seda__l_stage_src_free(struct lsrc *s, int n);

/* ---- lcallback.c ---- */

/* Also seda__l_callback_depth and seda__l_callback_interrupt_pending, in
 * seda_lua_admin.h (for seda-lua's REPL). */

/* The core's done callback for envelopes published with on_complete
 * (ud: the struct lcb): any thread, no Lua; queues a completion. */
SEDA__API void seda__l_callback_on_done(seda_env_t *env, int outcome, void *ud);
/* A callback record for the function at idx with `refs` references
 * (raises on allocation failure), and dropping n of them (the last one
 * releases the function).  Main thread. */
SEDA__API struct lcb *seda__l_callback_new(lua_State *L, int idx, int refs);
/* on_durable's seda_durable_fn (ud: an lcb with lb set): any thread. */
SEDA__API void seda__l_callback_on_durable(int rc, void *ud);
SEDA__API void seda__l_callback_release(lua_State *L, struct lcb *cb, int n);
/* Drop the references of reports that found no memory to queue their
 * completion (struct lcb's lost).  Main thread. */
SEDA__API void seda__l_callback_drop_lost(lua_State *L, struct lbus *lb);
SEDA__API void seda__l_callback_completion_free(struct lcompletion *c);
/* Run the bus's queued completions on L; returns how many ran. */
SEDA__API int seda__l_callback_run(lua_State *L, struct lbus *lb);
SEDA__API bool seda__l_callback_pending(struct lbus *lb);
/* Run the queued completions when more than lb->max_pending_cb wait
 * (and callback runs are not nested too deep).  Main thread. */
SEDA__API void seda__l_callback_bound(lua_State *L, struct lbus *lb);
/* Print the count of suppressed callback errors, if any. */
SEDA__API void seda__l_callback_flush(void);
/* Report an error of a main-state callback ("on_complete", "timer") on
 * stderr as "seda: WHAT: MSG", at most 5 a second (the rest are counted
 * and the count said with the next report).  Any thread. */
SEDA__API void seda__l_callback_report_error(const char *what, const char *msg);
/* Run the queued completions of every live bus of L; returns how many. */
SEDA__API int seda__l_run_all_completions(lua_State *L);

/* ---- lloop.c ---- */

/* Make the main state's loop (once per state) and the timer metatable:
 * from luaopen_seda.  Raises when out of memory. */
SEDA__API void seda__l_loop_open(lua_State *L);
/* Set seda.timer and seda.every in the table on top of the stack. */
SEDA__API void seda__l_loop_register(lua_State *L);
/* L's loop, or NULL; with a reference taken (for an lbus), released with
 * seda__l_loop_release (NULL is ignored). */
SEDA__API struct lloop *seda__l_loop(lua_State *L);
SEDA__API struct lloop *seda__l_loop_ref(lua_State *L);
SEDA__API void seda__l_loop_release(struct lloop *lp);
/* A completion was queued: make the wake descriptor readable.  Any
 * thread, no Lua; NULL is ignored. */
SEDA__API void seda__l_loop_signal(struct lloop *lp);
/* Run the due timers of L (those scheduled before the call); returns how
 * many ran.  Main thread. */
SEDA__API int seda__l_loop_run_timers(lua_State *L);
/* Seconds until L's next timer is due (0: due now), or -1 when none. */
SEDA__API double seda__l_loop_next_timer(lua_State *L);

/* ---- lhttp.c ---- */

struct lhttp;
/* bus:listen{ http =, routes =, ... }: a listener handle (SPEC.md
 * section 13).  Raises on misuse and when the address cannot be bound. */
SEDA__API int seda__l_http_listen(lua_State *L);
/* Push { [address] = stats table, ... } of lb's listeners. */
SEDA__API void seda__l_http_push_stats(lua_State *L, struct lbus *lb);
/* Stop accepting (bus:shutdown's first step); then, once drained, close
 * the servers, their last answers sent within grace seconds. */
SEDA__API void seda__l_http_quiesce(struct lbus *lb);
SEDA__API void seda__l_http_close_all(struct lbus *lb, double grace);
/* Close and free every listener (the bus is being collected). */
SEDA__API void seda__l_http_free_all(struct lbus *lb);
/* The listener metatable (luaopen_seda). */
SEDA__API void seda__l_http_open_lib(lua_State *L);

/* ---- lnats.c ---- */

struct lnats;
/* bus:listen{ nats = {...}, routes = {...} }: a NATS service listener
 * (lhttp.c's listen hands a call with a nats table here). */
SEDA__API int seda__l_nats_listen(lua_State *L);
/* Stop taking requests (shutdown's first step, and before the bus is
 * freed); then free them (after the bus is freed: every answer sent). */
SEDA__API void seda__l_nats_stop_all(struct lbus *lb);
SEDA__API void seda__l_nats_free_all(struct lbus *lb);
SEDA__API void seda__l_nats_open_lib(lua_State *L);

/* ---- ladmit.c ---- */

/* Run ls's admit rule (if any) for a publish of the value at pidx to
 * `to` (headers table at hidx, or 0; sender or NULL; *prio the requested
 * enum seda_priority, lowered when the rule says so).  Returns 0 to
 * admit, 1 refused with reason (counted on the stage).  Any state; it may
 * run Lua (never raises).  ac: the publishing context's cache. */
SEDA__API int seda__l_admit(lua_State *L, struct lstage *ls,
                            struct ladmit_cache *ac, const char *to,
                            int pidx, int hidx, const char *sender,
                            int *prio, char *reason, size_t rlen);
/* Raise "<what>: an admit rule must not wait" when an admit rule runs on
 * this thread (the calls that wait -- seda.sleep, seda.http.request,
 * seda.socket, seda.blocking -- call it first; SPEC.md section 12). */
SEDA__API void seda__l_admit_no_wait(lua_State *L, const char *what);
/* Release ac's references in L (its owner is going away). */
SEDA__API void seda__l_admit_cache_free(lua_State *L,
                                        struct ladmit_cache *ac);
/* Load a rule's source into L: pushes the function and returns 0, or
 * returns -1 with an error message pushed. */
SEDA__API int seda__l_admit_load(lua_State *L, const struct lsrc *s);
/* A stage's admit option at idx (a function or a file, resolved against
 * dir), built and checked in a scratch state; raises naming the stage. */
SEDA__API struct lsrc *seda__l_admit_src(lua_State *L, struct lbus *lb,
                                         const char *stage, int idx,
                                         const char *dir);
/* The shed, retry and starve_after options of the table at t into o;
 * raises naming the stage and field. */
SEDA__API void seda__l_admit_opts(lua_State *L, int t, const char *stage,
                                  seda_stage_opts *o);
/* The same options given to bus:tune, applied to st: 0, or -1 with err
 * (nothing changed).  Never raises. */
SEDA__API int seda__l_admit_tune(lua_State *L, int t, const char *stage,
                                 seda_stage_t *st, char *err,
                                 size_t errlen);
/* Free a source (NULL is fine); copy one (re-reading its file when
 * reread and it has one; NULL on failure). */
SEDA__API void seda__l_admit_src_free(struct lsrc *s);
SEDA__API struct lsrc *seda__l_admit_src_copy(const struct lsrc *s,
                                              bool reread);
/* Load src in a scratch state like a worker's (0, or -1 with err). */
SEDA__API int seda__l_worker_validate_admit(struct lbus *lb,
                                            const struct lsrc *src, char *err,
                                            size_t errlen);

/* ---- lpublish.c ---- */

/* bus:publish_many(to, payloads, opts). */
SEDA__API int seda__l_publish_many(lua_State *L);

/* Parse (to, payload, opts) at stack index `first` and publish.  Pushes
 * true, or false and a reason; raises on misuse.  on_complete is allowed
 * only on the main state (main = true).  wb and ac: the publishing
 * context's encode buffer and admit cache. */
SEDA__API int seda__l_publish(lua_State *L, struct lbus *lb, int first,
                              seda_wbuf *wb, struct ladmit_cache *ac,
                              bool main);

/* ---- lstats.c ---- */

/* Push bus:stats() (all stages) or one stage's table (name != NULL; nil
 * and "no_such_stage" when unknown).  Returns how many values it pushed. */
SEDA__API int seda__l_stats_push(lua_State *L, struct lbus *lb,
                                 const char *name);
/* bus:histogram(stage, kind, bounds) and seda.process() (exposition). */
SEDA__API int seda__l_stats_histogram(lua_State *L);
SEDA__API int seda__l_stats_process(lua_State *L);
/* bus:stats([stage]) (lstats.c). */
SEDA__API int seda__l_stats(lua_State *L);

/* The live buses an observer state sees (lobserve.c): a bus joins when
 * made and leaves at its shutdown's end or when collected (idempotent).
 * Main thread; takes the observers' mutex, so never with another lock
 * held. */
SEDA__API void seda__l_observe_add(struct lbus *lb);
SEDA__API void seda__l_observe_remove(struct lbus *lb);

/* ---- lerrors.c ---- */

/* bus:errors([stage]): the recent errors, newest first. */
SEDA__API int seda__l_errors(lua_State *L);
/* bus:dead_letters([stage]): the kept dead letters, newest first. */
SEDA__API int seda__l_errors_dead_letters(lua_State *L);
/* bus:tap(stage, n [, seconds]): the next n envelopes entering stage. */
SEDA__API int seda__l_errors_tap(lua_State *L);
/* seda.log(level, ...) (main state and workers). */
SEDA__API int seda__l_errors_log(lua_State *L);
SEDA__API int seda__l_errors_log_level(lua_State *L);
/* The stage of the handler call L runs, or NULL (lworker.c). */
SEDA__API const char *seda__l_log_stage(lua_State *L);

/* ---- lpull.c ---- */

/* receive(stage, timeout) with the stage name at `first`: pushes the
 * received envelope, or nil and a reason ("timeout", "closed").  busidx:
 * the bus object's stack index (main state; it is kept alive by the
 * received envelope), or 0 in a worker. */
SEDA__API int seda__l_pull_receive(lua_State *L, struct lbus *lb, int first,
                                   seda_wbuf *wb, int busidx);

/* ---- lremote.c ---- */

/* Parse the `remote` option table at stack index t (absolute) of stage
 * `stage` into ro (its strings point into the table); raises naming the
 * stage and field. */
SEDA__API void seda__l_remote_opts(lua_State *L, int t, const char *stage,
                                   seda_remote_opts *ro);
/* Push the `remote` table of a remote stage's stats; false (nothing
 * pushed) for another stage. */
SEDA__API bool seda__l_remote_push_stats(lua_State *L, seda_stage_t *st);

/* The stage option format (the stage's table at t): NULL for "seda" or
 * none, else the format's table; raises on a bad name, or a format on a
 * stage that is not remote. */
SEDA__API const struct seda_remote_format *seda__l_remote_format(
    lua_State *L, int t, const char *stage, bool remote);

/* lformat.c: the payload formats of remote stages ("json", "msgpack",
 * "raw"; NULL for another name), and the NULL-terminated list every
 * remote stage reads by Content-Type. */
SEDA__API const struct seda_remote_format *seda__l_format(const char *name);
SEDA__API const struct seda_remote_format *const *seda__l_format_readers(
    void);

/* ---- lshared.c ---- */

/* Push the process-wide seda.shared object. */
SEDA__API void seda__l_shared_push(lua_State *L);

#endif /* SEDA_LSEDA_H */
