/* SPDX-License-Identifier: MIT */
/*
 * seda.h -- the public C API of seda-lua.
 *
 * A staged, broker-less message bus inside one process.  Work is split into
 * named stages; each stage is a bounded FIFO queue plus one or more
 * consumers.  One shared pthread pool drains every stage through batched,
 * self-rescheduling drain tasks gated by per-stage permits (the stage's
 * concurrency).  Envelopes carry a routing slip: when a stage acks, the bus
 * sends the envelope to the next hop or fires the producer's completion
 * callback; nacks retry at the head of the queue, then dead-letter.
 *
 * Conventions:
 *   - Functions that can fail return 0 (or a count) on success and a negative
 *     SEDA_E* code on failure.  A failed call has no effect.
 *   - seda_strerror() maps a code to the short reason word used by the Lua
 *     API ("full", "timeout", ...).
 *   - Every function says which threads may call it.  "Any thread" includes
 *     the pool's own workers (a consumer may publish).
 *   - Objects are opaque.  A bus owns its stages; stages live until
 *     seda_bus_free().  An envelope handed to a consumer is borrowed for the
 *     duration of the call only.
 *   - Handles (bus, stage, envelope, lease) and out-pointers must be valid:
 *     like pthread_mutex_lock(NULL), passing NULL for one is undefined
 *     unless the function says what NULL means (seda_bus_free(NULL) is a
 *     no-op; a NULL opts means the defaults).  Other pointer arguments
 *     that a function checks (names, payloads with a length, arrays with
 *     a count) give SEDA_EINVAL.
 *   - Limits: workers 1..1024 (0: one per CPU), batch 1..256, capacity
 *     1..67108864, concurrency 1..4096, max_attempts 1..65535, max_loans
 *     -1..4096.
 *   - A nack discards the attempt's changes: a consumer changes the
 *     envelope in place, and when it nacks (returns false, or calls
 *     seda_env_fail) its changes to payload and headers, and the hops it
 *     forwarded, are undone, so the retry and a dead letter carry what
 *     the attempt was given.  The Lua binding keeps the same rule.
 *   - Managed blocking: a consumer (or a hop) that waits for room in a
 *     full stage, or for a pull stage, has its worker covered by a loan
 *     thread while it waits (see seda_bus_opts.max_loans), so the stages
 *     it waits on keep draining.
 */
#ifndef SEDA_H
#define SEDA_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SEDA_VERSION "0.1.0"

/* ---- error codes (negative errno values) ---- */

#define SEDA_OK         0
#define SEDA_EFULL      (-EAGAIN)     /* queue full, policy reject */
#define SEDA_ETIMEDOUT  (-ETIMEDOUT)  /* block policy: no room in time */
#define SEDA_EDROPPED   (-ENOBUFS)    /* drop_newest discarded the offer */
#define SEDA_EPAUSED    (-EBUSY)      /* bus paused */
#define SEDA_ECLOSED    (-ECANCELED)  /* bus shutting down or shut down */
#define SEDA_ENOSTAGE   (-ENOENT)     /* no stage of that name */
#define SEDA_EEXIST     (-EEXIST)     /* duplicate stage name */
#define SEDA_EINVAL     (-EINVAL)     /* invalid argument */
#define SEDA_ENOMEM     (-ENOMEM)     /* allocation failed */
#define SEDA_ERANGE     (-ERANGE)     /* a limit was exceeded */
#define SEDA_ETYPE      (-EBADMSG)    /* refused by the stage's check */
#define SEDA_EDUP       (-EALREADY)   /* exactly_once: id already accepted */
#define SEDA_EIO        (-EIO)        /* the journal could not commit */
#define SEDA_ESHED      (-EOVERFLOW)  /* the stage sheds load (its `shed`
                                         rule found the queue too slow) */
#define SEDA_EUNAVAIL   (-ENOTCONN)   /* a remote stage's server is not
                                         reachable now (seda_remote.h) */
#define SEDA_ETOOLARGE  (-EMSGSIZE)   /* payload over the bus's max_payload */

/* The short reason word for rc: "full", "timeout", "dropped", "paused",
 * "closed", "no_such_stage", "exists", "invalid", "nomem", "range", "type",
 * "duplicate", "io", "unavailable", "too_large", or
 * "error" for anything else; "ok" for 0.  Static storage; any thread. */
const char *seda_strerror(int rc);

/* ---- enumerations ---- */

enum seda_policy {
    SEDA_POLICY_BLOCK = 0,   /* wait for room up to the publish timeout */
    SEDA_POLICY_REJECT,      /* refuse at once with SEDA_EFULL */
    SEDA_POLICY_DROP_NEWEST, /* discard the offer, SEDA_EDROPPED */
    SEDA_POLICY_DROP_OLDEST  /* evict the head, admit the offer */
};

enum seda_delivery {
    SEDA_DELIVERY_P2P = 0,   /* one consumer per envelope, round robin */
    SEDA_DELIVERY_PUBSUB     /* every consumer handles every envelope */
};

/* An envelope's priority (seda_publish_opts.priority): a stage delivers
 * high before normal before low, in order within one priority; an
 * envelope that waited longer than the stage's starve_after is delivered
 * next whatever its priority.  Priority travels with the envelope to its
 * next hops; it counts against the capacity like any other. */
enum seda_priority {
    SEDA_PRIO_NORMAL = 0,
    SEDA_PRIO_HIGH,
    SEDA_PRIO_LOW
};

enum seda_durability {
    SEDA_MEMORY = 0,           /* in memory only (default) */
    SEDA_AT_LEAST_ONCE,        /* journaled; replayed after a restart */
    SEDA_EXACTLY_ONCE          /* journaled, and publish refuses an id it
                                  already accepted (SEDA_EDUP) */
};

enum seda_outcome {
    SEDA_COMPLETED = 0,      /* the itinerary ended with an ack */
    SEDA_DEAD_LETTERED,      /* dead-lettered (sent to a DLQ or discarded) */
    SEDA_DROPPED             /* evicted by drop_oldest or swept at shutdown */
};

/* Name <-> enum helpers.  The parse functions return -1 for an unknown
 * name; the name functions return a static string, or NULL for an unknown
 * value.  Pure: any thread. */
int seda_policy_parse(const char *name);
const char *seda_policy_name(int policy);
int seda_delivery_parse(const char *name);
const char *seda_delivery_name(int delivery);

#define SEDA_NAME_MAX        64   /* longest stage name */
#define SEDA_MAX_CONSUMERS   64   /* consumers per stage */
#define SEDA_HEADERS_MAX    1024  /* headers an envelope may carry */
#define SEDA_HEADER_KEY_MAX 256   /* bytes of a header's name */
#define SEDA_HEADER_VALUE_MAX 65536 /* bytes of a header's value; and a
                                     publish's payload plus its headers
                                     (names and values) stay within the
                                     bus's max_payload: past any of these
                                     SEDA_ETOOLARGE */
#define SEDA_ID_MAX         128   /* buffer size for seda_env_id(); custom
                                     ids are at most SEDA_ID_MAX-1 bytes */
#define SEDA_MAX_LOANS     4096   /* highest max_loans */
#define SEDA_LOAN_INDEX0   1024   /* a loan thread's worker index is this
                                     plus its loan slot */

/* ---- allocator ---- */

/* Replace the allocator used for every allocation the library makes.  Call
 * once, before any other seda_* call; NULL restores malloc/realloc/free.
 * realloc_fn(p, 0) is never called.  Not thread-safe. */
void seda_set_allocator(void *(*malloc_fn)(size_t),
                        void *(*realloc_fn)(void *, size_t),
                        void (*free_fn)(void *));

/* ---- clock ---- */

/* Monotonic clock in seconds.  Any thread; cannot fail. */
double seda_now(void);

/* ---- types ---- */

typedef struct seda_bus_s seda_bus_t;
typedef struct seda_stage_s seda_stage_t;
typedef struct seda_env_s seda_env_t;

/* A consumer: return true to ack, false to nack.  Runs on a pool worker.
 * The envelope is borrowed for the call; the consumer may change its
 * payload and headers and insert hops (seda_env_forward).  It must not
 * block for long: it holds one of the stage's permits. */
typedef bool (*seda_consumer_fn)(seda_env_t *env, void *ud);

/* Called exactly once per published envelope when its itinerary ends
 * (outcome is an enum seda_outcome), on whichever thread ends it: a worker,
 * the publisher (drop_oldest eviction) or the thread that shuts the bus
 * down.  The envelope is borrowed for the call.  Must not block. */
typedef void (*seda_done_fn)(seda_env_t *env, int outcome, void *ud);

/* Per-worker hooks: start runs on each pool thread before it takes work; its
 * result is what seda_worker_data() returns on that thread.  stop runs on
 * the same thread as it exits. */
typedef void *(*seda_worker_start_fn)(int index, void *ud);
typedef void (*seda_worker_stop_fn)(int index, void *data, void *ud);
/* The mail hook: runs on a regular worker that seda_worker_wake woke,
 * before it takes its next task, with its data and the hooks' ud. */
typedef void (*seda_worker_mail_fn)(int index, void *data, void *ud);

/* ---- bus ---- */

typedef struct seda_bus_opts {
    int workers;               /* pool threads; 0 = number of CPUs */
    int batch;                 /* envelopes per drain task (32) */
    double hop_timeout;        /* seconds a worker's publish may wait (5) */
    const char *dead_letter;   /* bus-wide dead-letter stage, or NULL */
    seda_worker_start_fn worker_start;  /* optional */
    seda_worker_stop_fn worker_stop;    /* optional */
    seda_worker_mail_fn worker_mail;    /* optional */
    void *worker_ud;           /* passed to the hooks */
    const char *data_dir;      /* journal directory ("./seda-data") */
    bool sync_normal;          /* journal: no fsync per commit (default:
                                  fsync, survives power loss) */
    int max_loans;             /* loan threads at most (0: 4 * workers,
                                  following seda_bus_set_workers; -1: no
                                  loans at all) */
    int dead_letter_keep;      /* dead letters each stage keeps for
                                  seda_stage_dead_letters (0: 100; -1:
                                  none) */
    double stats_window;       /* seconds the latency quantiles of
                                  seda_stage_stats cover (0: 10) */
    size_t max_payload;        /* bytes a payload may have, at publish and
                                  when a consumer sets one (0: the default,
                                  SEDA_MAX_PAYLOAD_DEFAULT; at most
                                  UINT32_MAX) */
    double hold_warn;          /* seconds a consumer call may hold its
                                  worker outside seda's own waits (managed
                                  blocking, suspension) before it counts as
                                  a long hold (long_holds) and is logged,
                                  at most once a minute per stage (0: the
                                  default, SEDA_HOLD_WARN_DEFAULT; < 0:
                                  never; at most 3600) */
    double group_wait;         /* journal: seconds a commit may wait for
                                  more publishes to share it (0, the
                                  default: commit as soon as the journal
                                  is free; at most 1) */
} seda_bus_opts;

#define SEDA_HOLD_WARN_DEFAULT 0.1

#define SEDA_MAX_PAYLOAD_DEFAULT ((size_t)16 << 20)   /* 16 MiB */

/* The bus's max_payload in bytes.  Any thread; cannot fail. */
size_t seda_bus_max_payload(const seda_bus_t *bus);

/* Fill o (the caller's) with the defaults.  Cannot fail; any thread. */
void seda_bus_opts_init(seda_bus_opts *o);

/* Create a bus and start its pool.  opts may be NULL for the defaults; it is
 * copied (strings too).  On success *out owns the bus (seda_bus_free).
 * Returns 0, SEDA_EINVAL (bad option), SEDA_ENOMEM, or -EAGAIN if a thread
 * could not be started (nothing is left running).  Any thread. */
int seda_bus_new(const seda_bus_opts *opts, seda_bus_t **out);

/* Shut down at once if still running (see seda_bus_shutdown_now), join the
 * pool and free the bus, its stages and every envelope.  NULL is a no-op.
 * Must not be called from a worker of this bus. */
void seda_bus_free(seda_bus_t *bus);

/* Stop or resume accepting publishes (SEDA_EPAUSED while paused).  Work
 * already accepted, hops included, keeps flowing.  Any thread. */
void seda_bus_pause(seda_bus_t *bus);
void seda_bus_resume(seda_bus_t *bus);
bool seda_bus_paused(const seda_bus_t *bus);

/* Block until nothing is queued or in flight in any stage, or timeout
 * seconds pass (timeout < 0: forever).  Envelopes queued in a pull stage
 * wait for a receiver and do not count (leases out do).  Returns 0 when
 * idle, SEDA_ETIMEDOUT otherwise.  Must not be called from a worker of
 * this bus. */
int seda_bus_wait_idle(seda_bus_t *bus, double timeout);

/* Stop accepting, drain for up to timeout seconds, stop the pool.  Returns 0
 * if fully drained; SEDA_ETIMEDOUT if not, in which case what was left is
 * swept and counted dropped (its done callbacks fire with SEDA_DROPPED).
 * Publishers blocked on a full stage are woken with SEDA_ECLOSED.  Calling
 * it again returns the first result.  A consumer call in progress is never
 * cut off: the pool stops once those return, so a long one can keep this
 * past the timeout (Lua handlers have handler_timeout for that).  Must not
 * be called from a worker. */
int seda_bus_shutdown(seda_bus_t *bus, double timeout);

/* seda_bus_shutdown(bus, 0) without a drain: the rest is counted dropped.
 * Like every shutdown it returns once the consumers already running have
 * returned (a call in progress is never cut off).  Any thread but a
 * worker of this bus. */
void seda_bus_shutdown_now(seda_bus_t *bus);

/* True once shutdown has begun.  Any thread. */
bool seda_bus_closed(const seda_bus_t *bus);

/* Number of pool threads.  Any thread; cannot fail. */
int seda_bus_workers(const seda_bus_t *bus);

/* Grow or shrink the pool to n threads (1..1024) while the bus runs; no
 * envelope is lost (a retiring worker finishes its current task first, its
 * stop hook runs on it).  Returns 0, SEDA_EINVAL, SEDA_ENOMEM, -EAGAIN
 * (some threads could not start; the pool keeps those that did) or
 * SEDA_ECLOSED after shutdown.  Blocks while retiring workers finish.  Must
 * not be called from a worker of this bus. */
int seda_bus_set_workers(seda_bus_t *bus, int n);

/* ---- stages ---- */

typedef struct seda_stage_opts {
    const char *name;          /* required, [A-Za-z0-9_.:-]{1,64} */
    int capacity;              /* queue bound (1024) */
    int concurrency;           /* permits: drain tasks at once (1) */
    int delivery;              /* enum seda_delivery (p2p) */
    int policy;                /* enum seda_policy (block) */
    int max_attempts;          /* handler calls per hop before DLQ (1) */
    const char *dead_letter;   /* this stage's DLQ, else the bus's */
    double publish_timeout;    /* block policy wait, seconds (30) */
    double handler_timeout;    /* for script handlers; 0 = none */
    bool pull;                 /* no consumers: receivers take envelopes
                                  with seda_stage_receive */
    int durable;               /* enum seda_durability */
    int dedup_window;          /* exactly_once: ids remembered (100000) */
    double ack_timeout;        /* pull: seconds to ack a receipt (30) */
    double starve_after;       /* seconds a lower-priority envelope may
                                  wait before it goes next (1) */
    double shed_target;        /* adaptive shedding (CoDel): queue sojourn
                                  target, seconds; 0 = no shedding (0) */
    double shed_interval;      /* ... over this window, seconds (0.1) */
    double retry_backoff;      /* delay before a retry, seconds; 0 = at
                                  once, at the head (0) */
    double retry_max_backoff;  /* the delay's bound (1) */
    double retry_multiplier;   /* growth per attempt (2) */
    bool retry_jitter;         /* spread each delay up to +50% (true) */
} seda_stage_opts;

/* Fill o (the caller's) with the defaults (name NULL).  Cannot fail; any
 * thread. */
void seda_stage_opts_init(seda_stage_opts *o);

/* Add a stage.  opts is copied.  On failure nothing is added and, when err
 * is not NULL, err receives a message naming the stage and the field at
 * fault ("stage 'x': capacity must be > 0").  Returns 0 and sets *out (owned
 * by the bus; valid until seda_bus_free), SEDA_EINVAL, SEDA_EEXIST,
 * SEDA_ECLOSED or SEDA_ENOMEM.  Any thread. */
int seda_stage_add(seda_bus_t *bus, const seda_stage_opts *opts,
                   seda_stage_t **out, char *err, size_t errlen);

/* Find a stage by name; NULL if there is none.  Lock-free; any thread. */
seda_stage_t *seda_bus_stage(seda_bus_t *bus, const char *name);

/* The number of stages, and the i-th in creation order (NULL when out of
 * range).  Any thread. */
int seda_bus_stage_count(seda_bus_t *bus);
seda_stage_t *seda_bus_stage_at(seda_bus_t *bus, int i);

/* The stage's name (owned by the stage) and options.  Any thread. */
const char *seda_stage_name(const seda_stage_t *st);
/* Its durability (enum seda_durability; SEDA_MEMORY for an in-memory or
 * remote stage).  Any thread. */
int seda_stage_durability(const seda_stage_t *st);
double seda_stage_handler_timeout(const seda_stage_t *st);

/* Add a consumer.  Returns its index (>= 0), or SEDA_ERANGE past
 * SEDA_MAX_CONSUMERS, SEDA_EINVAL for a NULL fn.  May be called while the
 * bus runs: envelopes drained afterwards see it.  Any thread. */
int seda_stage_consume(seda_stage_t *st, seda_consumer_fn fn, void *ud);

/* ---- batch consumers ----
 *
 * A batch consumer handles a drain task's whole batch in one call, for a
 * binding whose per-call cost is high (the Lua binding enters Lua once
 * per batch).  It takes the envelopes one at a time and settles each
 * before it takes the next; the core keeps every per-envelope rule of a
 * plain consumer: the sojourn and service histograms (an envelope's
 * service time runs from its seda_batch_next to its seda_batch_result),
 * the nack rule (a nack undoes the attempt's changes), retries at the
 * head (a nacked envelope with attempts left is what the next
 * seda_batch_next returns, at attempt + 1, ahead of the rest), dead
 * letters, the slow-envelope and shutdown cut-offs, and for a durable
 * stage the journal write of the batch's decisions.
 *
 * A stage whose only consumer is a batch consumer hands it whole batches;
 * with several consumers (round robin or pub/sub) each call has one
 * envelope. */
typedef struct seda_batch_s seda_batch_t;

/* Runs on a pool worker with a batch: loop { env = seda_batch_next(b);
 * if (!env) break; ... seda_batch_result(b, ok); }.  Envelopes it does
 * not take go back to the head of the queue, in order, and come in the
 * next batch; one taken and not settled when it takes the next, or
 * returns, counts as a nack.  Each envelope is borrowed from its
 * seda_batch_next to its seda_batch_result, as a consumer's is for its
 * call.  The same rules as a consumer's: it holds a permit, so it must
 * not block for long. */
typedef void (*seda_batch_fn)(seda_batch_t *batch, void *ud);

/* Add a batch consumer.  Returns its index (>= 0), or SEDA_ERANGE past
 * SEDA_MAX_CONSUMERS, SEDA_EINVAL for a NULL fn or a pull stage.  Like
 * seda_stage_consume otherwise.  Any thread. */
int seda_stage_consume_batch(seda_stage_t *st, seda_batch_fn fn, void *ud);

/* The next envelope of the batch (attempt and slip as a consumer would
 * see them), or NULL when the batch is over: all handled, the bus is
 * stopping, or the task gives the rest back (after an envelope that took
 * 20 ms or more while other permits are free, or a retry that waits on
 * its backoff or the journal).  Once NULL, NULL for the rest of the call.
 * Only inside the batch call, on its thread. */
seda_env_t *seda_batch_next(seda_batch_t *batch);

/* Settle the envelope seda_batch_next returned last: ok true acks (unless
 * seda_env_fail was called on it), false nacks.  A call with nothing to
 * settle does nothing.  Only inside the batch call, on its thread. */
void seda_batch_result(seda_batch_t *batch, bool ok);

/* ---- suspended calls ----
 *
 * A batch consumer whose handler must wait (on the network) without
 * holding its worker suspends the envelope out: it leaves the batch
 * unsettled, keeps a permit of its stage (so concurrency bounds a stage's
 * calls in flight, suspended or not) and counts in the stage's suspended;
 * the batch goes on with the next envelope.  Later, on any thread, the
 * holder settles it as seda_batch_result would have: routing, retries,
 * dead letters and the done callback are the same.  While it runs again
 * (a resumed call), the holder brackets that run with enter and leave on
 * the running thread, so what the call changes is undone by a nack and
 * seda_env_fail applies to it.
 */
typedef struct seda_pending_s seda_pending_t;

/* Suspend the envelope out (taken by seda_batch_next, not settled).
 * Returns the handle, or NULL when this batch cannot suspend -- a stage
 * with several consumers (one envelope a call), a durable stage, or no
 * memory -- and then the envelope is still out and is settled as usual.
 * On the batch's thread, inside the batch call. */
seda_pending_t *seda_batch_suspend(seda_batch_t *batch);

/* The envelope of a suspended call (lent to the holder until settled). */
seda_env_t *seda_pending_env(seda_pending_t *p);

/* Bracket a run of the suspended call on the calling thread. */
void seda_pending_enter(seda_pending_t *p);
void seda_pending_leave(seda_pending_t *p);

/* Settle it: ok true acks (unless seda_env_fail was called in one of its
 * runs), false nacks; its permit is given back (or passed to a drain task
 * for what is queued).  Frees p.  Any thread, outside enter/leave, no
 * seda lock held; once per handle.  After the bus began to stop, an
 * envelope whose call acks is routed as any hop then (refused hops are
 * dead-lettered); seda_pending_drop ends one without running it. */
void seda_pending_settle(seda_pending_t *p, bool ok);

/* End a suspended call that will not run again (its state is going away:
 * shutdown_now, a worker that stops): counted dropped, its done callback
 * fires with SEDA_DROPPED, the permit is given back.  Frees p.  Any
 * thread. */
void seda_pending_drop(seda_pending_t *p);

/* Change a running stage: capacity and concurrency (> 0) and policy
 * (enum seda_policy); a value < 0 (or 0 for the counts) leaves that setting
 * unchanged.  Growing takes effect at once (waiting publishers are woken,
 * extra drain tasks scheduled); shrinking never drops queued envelopes: a
 * queue above the new capacity refuses admissions until it drains below
 * it, and surplus drain tasks finish their batch.  Returns 0, SEDA_EINVAL
 * (nothing changed, err names the field) or SEDA_ENOMEM.  Any thread. */
int seda_stage_tune(seda_stage_t *st, int capacity, int concurrency,
                    int policy, char *err, size_t errlen);

/* Change a running stage's admission options, taken from o: what is a
 * mask of SEDA_TUNE_SHED (shed_target, shed_interval), SEDA_TUNE_RETRY
 * (retry_backoff, retry_max_backoff, retry_multiplier, retry_jitter) and
 * SEDA_TUNE_STARVE (starve_after); the other fields of o are ignored.
 * Every value is checked first: SEDA_EINVAL changes nothing (err names
 * the stage and field).  Takes effect from the next envelope.  Any
 * thread.
 *
 * Adaptive shedding (CoDel on queue sojourn): when every envelope that
 * started in the last shed_interval seconds had waited longer than
 * shed_target in the queue, the stage refuses new low-priority publishes
 * (SEDA_ESHED), after another interval normal ones too, until an envelope
 * starts within target (or the backlog could not take that long).  High
 * priority and hops (envelopes already accepted) are never shed; target
 * 0 turns it off.  Retry backoff: a nacked envelope with attempts left is
 * redelivered after min(max_backoff, backoff * multiplier^(attempts-2))
 * seconds for its attempts-th try (jitter: up to 50% more, still within
 * max_backoff), held by a timer the pool services, not by a worker;
 * backoff 0 retries at once at the head of the queue.  starve_after: see
 * enum seda_priority. */
#define SEDA_TUNE_SHED   1u
#define SEDA_TUNE_RETRY  2u
#define SEDA_TUNE_STARVE 4u
int seda_stage_tune_admission(seda_stage_t *st, const seda_stage_opts *o,
                              unsigned what, char *err, size_t errlen);

/* Count one publish refused by an admission rule outside the core (the
 * Lua binding's `admit`): in the stage's `refused` and `dropped`.  Any
 * thread. */
void seda_stage_count_refused(seda_stage_t *st);

/* An admission check: return 0 to admit, non-zero to refuse (writing a
 * reason into err).  Runs on the publishing thread (a worker for hops),
 * with no lock held; must not block. */
typedef int (*seda_check_fn)(const seda_env_t *env, void *ud, char *err,
                             size_t errlen);

/* Install st's admission check (NULL removes it).  Every publish and hop
 * into st runs it first: a refused publish returns SEDA_ETYPE, a refused
 * hop is dead-lettered with reason "type"; both count in the stage's
 * `invalid`.  A publisher reads the reason through seda_publish_opts.why.  Set it before publishing to the stage.  Any thread. */
void seda_stage_set_check(seda_stage_t *st, seda_check_fn fn, void *ud);

/* Pointer slot for whoever drives the stage (the Lua layer keeps its
 * handler table here).  Set it before publishing.  Any thread. */
void seda_stage_set_userdata(seda_stage_t *st, void *ud);
void *seda_stage_userdata(const seda_stage_t *st);

/* ---- durability ---- */

/* Open the bus's journal now (otherwise the first durable stage opens
 * it), so a corrupt, locked or unwritable data_dir fails early.  Returns 0
 * or a negative code with err naming the path and the problem.  Any
 * thread.
 * Linking: the journal (and with it SQLite, -lsqlite3) is part of a
 * program linked with libseda.a only when the program names a durable
 * function such as this one; a program that names none links with
 * -lpthread -lm alone, and seda_stage_add refuses its durable stages
 * with SEDA_EINVAL and a message that says so. */
int seda_bus_open_journal(seda_bus_t *bus, char *err, size_t errlen);

/* Requeue what a durable stage had journaled and not finished when the
 * process last stopped, in the original order and before new envelopes
 * (it bypasses the capacity bound).  Call it once, after adding the
 * stage's consumers and, since replayed envelopes start moving at once,
 * after declaring the stages their slips name (the Lua binding calls it
 * when the script's main chunk has run: see README "Durable stages").  A
 * replayed envelope whose next hop names no stage yet waits for it (the
 * worker covered by a loan) until hop_timeout after the replay started,
 * reported on stderr; then it is dead-lettered no_such_stage.  A row
 * that cannot be an envelope again (a headers or slip blob without its
 * final NUL, an empty or malformed stage name in the slip, an id of
 * SEDA_ID_MAX bytes or more) is moved, byte for byte, to the journal's
 * quarantine table (`seda-lua dlq DATA_DIR quarantine` lists them),
 * named on stderr and counted in seda_journal_stats.quarantined; the
 * other rows replay.  Returns how many were replayed (>= 0), or a
 * negative code (SEDA_EIO, SEDA_ENOMEM; nothing is replayed then).
 * Replayed envelopes count as accepted; their completion callbacks are
 * gone with the old process.  Any thread but a worker; not twice at once
 * for one stage. */
int seda_stage_replay(seda_stage_t *st);

/* The journal's live rows for stages bus does not declare (left by an
 * earlier program, or moved there by `seda-lua dlq replay`): cb(stage,
 * rows, ud) once per such stage.  They wait: a bus that declares the
 * stage replays them.  Returns 0, or a negative code (none called).
 * Any thread; reads the whole journal. */
int seda_bus_journal_orphans(seda_bus_t *bus,
                             void (*cb)(const char *stage, long long rows,
                                        void *ud),
                             void *ud);

/* What the journal found when it opened, and since. */
typedef struct seda_journal_stats {
    bool open;                    /* the bus has a journal */
    uint64_t wal_discarded_frames;/* WAL frames SQLite's recovery dropped
                                     at open (a damaged or cut-short log
                                     left by a crash; said on stderr) */
    uint64_t wal_discarded_bytes; /* the bytes of the file they held */
    uint64_t quarantined;         /* malformed rows replay set aside */
    uint64_t commits;             /* transactions committed (groups) */
    uint64_t requests;            /* write requests they held: a publish
                                     (or publish_many), a drain batch's
                                     decisions, a single hop; requests /
                                     commits is the mean group size */
    uint64_t group_max;           /* most requests in one commit */
    uint64_t fsyncs;              /* fsyncs those commits made (one per
                                     commit at sync = full; checkpoints
                                     only at normal) */
} seda_journal_stats;

/* Fill out (all zero when the bus has no journal).  Any thread; cannot
 * fail. */
void seda_bus_journal_stats(seda_bus_t *bus, seda_journal_stats *out);

/* ---- the pull model ---- */

typedef struct seda_lease_s seda_lease_t;

/* Take the next envelope from a pull stage, waiting up to timeout seconds
 * (< 0: forever).  On 0, *out is a lease the caller must settle with
 * seda_lease_ack or seda_lease_nack (which free it).  A lease not settled
 * within the stage's ack_timeout expires: its envelope counts as nacked
 * (retried or dead-lettered) and the late settle returns SEDA_ETIMEDOUT.
 * Returns 0, SEDA_ETIMEDOUT, SEDA_EINVAL (not a pull stage), SEDA_ENOMEM
 * or SEDA_ECLOSED (shutting down).  Any thread; blocks. */
int seda_stage_receive(seda_stage_t *st, double timeout, seda_lease_t **out);

/* Lock the lease and return its envelope (read or change it: payload,
 * headers, forward), or NULL when it has expired (nothing is then held).
 * Every non-NULL return must be followed by seda_lease_release_env, on the
 * same thread; the envelope is borrowed until then.  Keep the section
 * short: it holds the stage lock.  Any thread (one at a time per lease). */
seda_env_t *seda_lease_env(seda_lease_t *lease);
void seda_lease_release_env(seda_lease_t *lease);

/* Settle and free a lease: ack completes the hop exactly as a consumer's
 * ack would (next hop or completion); nack retries at the head or
 * dead-letters by max_attempts.  Returns 0, or SEDA_ETIMEDOUT when the
 * lease had expired (or was swept by shutdown) before it was settled.
 * Either way the lease is freed.  Any thread; once per lease. */
int seda_lease_ack(seda_lease_t *lease);
int seda_lease_nack(seda_lease_t *lease);

/* ---- publish ---- */

/* Told when a publish made with seda_publish_opts.on_durable is settled:
 * rc 0 (the envelope is in the journal -- on disk at sync = full -- and
 * queued at its stage) or the refusal publish would have returned
 * (SEDA_EIO: the commit failed, SEDA_EDUP, SEDA_ECLOSED...). */
typedef void (*seda_durable_fn)(int rc, void *ud);

typedef struct seda_publish_opts {
    const char *sender;           /* optional */
    const char *const *headers;   /* key, value, key, value, ... */
    int nheaders;                 /* number of key/value pairs */
    const char *const *slip;      /* further hops, in order (NULL for
                                     none: with nslip 0, SEDA_EINVAL) */
    int nslip;
    double timeout;               /* block wait; < 0: the stage's own */
    seda_done_fn done;            /* optional completion callback */
    void *done_ud;
    int kind;                     /* payload kind tag (0: raw bytes) */
    const char *id;               /* custom envelope id, durable stages
                                     only (exactly_once: the dedup key;
                                     elsewhere SEDA_EINVAL), or NULL for
                                     a fresh one */
    int priority;                 /* enum seda_priority (normal) */
    char *why;                    /* optional, the caller's: a SEDA_ETYPE
                                     refusal writes the stage check's
                                     reason here, a SEDA_ESHED at the door
                                     the name of the stage that sheds
                                     (cut to whylen - 1) */
    size_t whylen;
    seda_durable_fn on_durable;   /* durable first stage only: publish
                                     without waiting for the commit (see
                                     seda_publish) */
    void *on_durable_ud;
} seda_publish_opts;

/* Fill o (the caller's) with the defaults (no sender, headers, slip or
 * callback; timeout -1).  Cannot fail; any thread. */
void seda_publish_opts_init(seda_publish_opts *o);

/* Publish a copy of payload[0..len) to the stage named to.  opts may be
 * NULL.  Returns 0 when accepted (the bus now owns the envelope and will
 * end it in exactly one outcome), or SEDA_ENOSTAGE, SEDA_EPAUSED,
 * SEDA_ECLOSED, SEDA_EFULL, SEDA_ETIMEDOUT, SEDA_EDROPPED, SEDA_EINVAL
 * (also: an id for an in-memory stage, a NULL array with a count > 0, a
 * slip array with nslip = 0, a negative count), SEDA_ETYPE (the stage's check refused it),
 * SEDA_ETOOLARGE (len over the bus's max_payload),
 * SEDA_ENOMEM, and for durable stages SEDA_EDUP and SEDA_EIO; on failure
 * done is not called.  Blocks only under the block
 * policy, for at most the timeout (at most the bus's hop_timeout when called
 * from one of its workers), and, on a durable stage, until the journal
 * committed the envelope.  Any thread.
 *
 * With opts->on_durable set (the first stage must be durable, otherwise
 * SEDA_EINVAL), publish does not wait for the commit: it holds the
 * envelope's slot, queues its row for the journal's next group commit and
 * returns 0; on_durable(rc, on_durable_ud) is then called exactly once,
 * on the thread that committed (the journal's committer thread, or a
 * publisher leading a group), with 0 once the row is committed and the
 * envelope queued, or with the refusal (the envelope is then dropped and
 * done never fires).  A refusal before anything was queued is returned
 * by publish itself and on_durable is not called.  Keep on_durable short
 * and never wait in it for another publish's commit: the commits of the
 * whole journal wait for it.  Publishes queued this way by many threads
 * share one transaction and one fsync. */
int seda_publish(seda_bus_t *bus, const char *to, const void *payload,
                 size_t len, const seda_publish_opts *opts);

/* The same, to a stage already looked up (st stays valid until
 * seda_bus_free).  Any thread; blocks as seda_publish does. */
int seda_stage_publish(seda_stage_t *st, const void *payload, size_t len,
                       const seda_publish_opts *opts);

/* Publish n payloads in order through one admission step.  Returns how many
 * were accepted (>= 0); when fewer than n, *err (if not NULL) says why the
 * next was refused.  The same opts apply to each (on_durable is refused:
 * SEDA_EINVAL).  Any thread. */
int seda_publish_many(seda_bus_t *bus, const char *to,
                      const void *const *payloads, const size_t *lens, int n,
                      const seda_publish_opts *opts, int *err);

/* ---- envelopes (inside a consumer or a done callback) ----
 *
 * An envelope is lent to one consumer or done callback at a time: call
 * these only on that thread, during that call, and keep no pointer to the
 * envelope afterwards.  Strings and bytes they return are the envelope's
 * own: valid until it is changed (a set_* call, forward) or the call
 * returns; copy what you keep.  The set functions and forward copy their
 * arguments. */

/* The envelope's id, written as a NUL-terminated string into buf (at least
 * SEDA_ID_MAX bytes).  Unique within the process.  Returns buf. */
char *seda_env_id(const seda_env_t *env, char *buf);
/* The numeric form of the id. */
uint64_t seda_env_seq(const seda_env_t *env);

/* The stage the envelope is at (or headed for), as an object. */
seda_stage_t *seda_env_stage(const seda_env_t *env);

/* True when a completion callback is still attached. */
bool seda_env_has_done(const seda_env_t *env);

/* The stage the envelope is at (or headed for); its sender (NULL if none). */
const char *seda_env_to(const seda_env_t *env);
const char *seda_env_sender(const seda_env_t *env);

/* Delivery attempt on the current hop, from 1. */
int seda_env_attempts(const seda_env_t *env);

/* Its priority (enum seda_priority). */
int seda_env_priority(const seda_env_t *env);

/* Monotonic publish time in seconds (seda_now() at publish). */
double seda_env_published_at(const seda_env_t *env);

/* The payload bytes (borrowed) and their length. */
const void *seda_env_payload(const seda_env_t *env, size_t *len);

/* Replace the payload with a copy of p[0..len).  Returns 0, SEDA_ENOMEM
 * or SEDA_ETOOLARGE (len over the bus's max_payload); on failure the old
 * payload is kept. */
int seda_env_set_payload(seda_env_t *env, const void *p, size_t len);

/* The payload kind tag: 0 for raw bytes (what C publishers send), other
 * values are a binding's own encodings (1: the Lua value codec).  The set
 * function replaces payload and tag together: 0, SEDA_ENOMEM or
 * SEDA_ETOOLARGE. */
int seda_env_payload_kind(const seda_env_t *env);
int seda_env_set_payload_kind(seda_env_t *env, const void *p, size_t len,
                              int kind);

/* Header lookup (NULL when absent), count, and i-th pair. */
const char *seda_env_header(const seda_env_t *env, const char *key);
int seda_env_header_count(const seda_env_t *env);
int seda_env_header_at(const seda_env_t *env, int i, const char **key,
                       const char **value);

/* Set (value != NULL) or delete (value == NULL) a header.  Returns 0 or
 * SEDA_ENOMEM (headers unchanged). */
int seda_env_set_header(seda_env_t *env, const char *key, const char *value);

/* The remaining routing slip. */
int seda_env_slip_count(const seda_env_t *env);
const char *seda_env_slip_at(const seda_env_t *env, int i);

/* Insert hops at the front of the slip, visited in the order given.
 * Returns 0, SEDA_EINVAL (a NULL or malformed name) or SEDA_ENOMEM (slip
 * unchanged). */
int seda_env_forward(seda_env_t *env, const char *const *stages, int n);

/* Drop the remaining slip: the itinerary ends when this hop acks (what
 * env:respond does).  Undone like a forward when the attempt is nacked.
 * Returns 0; cannot fail. */
int seda_env_slip_end(seda_env_t *env);

/* Mark the current delivery as failed with a message: the consumer's result
 * is taken as a nack and msg is reported on stderr (rate-limited per
 * stage).  msg is copied. */
void seda_env_fail(seda_env_t *env, const char *msg);

/* ---- workers ---- */

/* On a pool worker: its index (0..workers-1, or SEDA_LOAN_INDEX0 + slot on
 * a loan thread) and the value its start hook returned (a loan thread runs
 * the hook on its first seda_worker_data() call, or takes over the value
 * an earlier thread of its loan slot made: the first few slots keep it
 * when their thread exits, and the pool's free stops it).  Elsewhere: -1
 * and NULL.  Any thread; cannot fail. */
int seda_worker_index(void);
void *seda_worker_data(void);

/* A regular pool worker as a handle another thread can wake: the calling
 * worker's, or NULL off the pool and on a loan thread (whose thread may
 * end with its loan).  Valid until that worker's stop hook returns.
 * Any thread; cannot fail. */
typedef struct seda_worker_s seda_worker_t;
seda_worker_t *seda_worker_self(void);

/* Managed blocking (the pool's loans, as for a publish that waits for
 * room): a consumer about to make a call that blocks its thread (a C
 * library, a socket) brackets it with these, and while it waits the pool
 * lends a thread within max_loans so the stages keep draining.  begin
 * returns a token for end (NULL off the pool, when no loan can be had,
 * or once the pool stops; end(NULL) is a no-op).  Hold no seda lock
 * around either. */
void *seda_block_begin(void);
void seda_block_end(void *token);

/* Have w run the bus's worker_mail hook soon: before its next task, woken
 * if it sleeps (a call already running finishes first).  Several wakes
 * before it runs make one run.  Any thread; never blocks for long. */
void seda_worker_wake(seda_worker_t *w);

/* ---- readiness: descriptors the workers watch (SPEC.md section 16) ----
 *
 * The bus's workers wait for work and for network readiness in one place,
 * so a server needs no thread of its own.  A watched descriptor's
 * callback runs on a worker when epoll(7) reports events for it (events:
 * EPOLLIN, EPOLLOUT, ... of <sys/epoll.h>, level-triggered).  An idle
 * worker waits for them; a busy one looks between tasks; and when every
 * worker has been inside a task for a millisecond without a look, the
 * pool's keeper thread looks (it runs no handler: there seda_worker_index
 * is -1 and seda_worker_data NULL), so readiness waits about a
 * millisecond at most, however long the handlers run.  One
 * watch's callback never runs on two threads at once.  It must not block
 * (no waiting on a socket) and may publish: what it publishes is queued
 * behind what is there and is often that worker's next task.  Events may
 * be stale: a read may find nothing (EAGAIN). */
typedef struct seda_watch_s seda_watch_t;
typedef void (*seda_watch_fn)(void *ud, uint32_t events);
typedef void (*seda_watch_release_fn)(void *ud);

/* Watch fd for events with fn(ud, events).  0 with *out set,
 * SEDA_ECLOSED (the bus stops), SEDA_ENOMEM, or a negative errno from
 * epoll_ctl (-EEXIST: fd is watched already).  Any thread. */
int seda_watch_add(seda_bus_t *bus, int fd, uint32_t events,
                   seda_watch_fn fn, void *ud, seda_watch_t **out);
/* The events w waits for now (0: none; errors and hang-ups are reported
 * all the same).  0 or a negative errno.  Any thread. */
int seda_watch_mod(seda_watch_t *w, uint32_t events);
/* Stop watching (before closing the descriptor) and give ud back through
 * release (may be NULL): at once when the callback is not running, else
 * on its thread when it returns -- never waiting, so a callback may end
 * its own watch.  w is dead after it.  Any thread.  Watches are ended
 * before seda_bus_free (one left then is dropped without its release). */
void seda_watch_del(seda_watch_t *w, seda_watch_release_fn release);

/* ---- envelope snapshots ----
 *
 * A copy of what an envelope was at one moment: its id, headers and the
 * first bytes of its payload.  Live taps (seda_tap_entry) and a stage's
 * kept dead letters (seda_dead_letter) hand out the same record; the
 * fields a kind does not fill are zero (empty strings, NULL). */
typedef struct seda_env_snapshot {
    char id[SEDA_ID_MAX];      /* the envelope's id */
    char reason[32];           /* dead letter: x-dead-reason; tap: "" */
    char missing[SEDA_NAME_MAX + 1]; /* no_such_stage: the name; else "" */
    const char *error;         /* dead letter: x-dead-error, or NULL */
    int attempts;
    double at;                 /* tap: seda_now() when it entered; dead
                                  letter: seconds since the epoch */
    int kind;                  /* the payload's kind */
    const void *payload;       /* its first bytes (tap: at most 128, dead
                                  letter: at most 256) */
    size_t payload_len;        /* how many */
    size_t payload_size;       /* the whole payload's size */
    int nheaders;              /* its headers (a dead letter's x-dead-*
                                  ones too) */
    const char *const *headers;/* key, value, key, value, ...; NULL when
                                  there are none */
    void *priv;                /* tap: the copy, for seda_tap_entry_free;
                                  dead letter: NULL */
} seda_env_snapshot;

/* ---- live taps ----
 *
 * A tap copies the envelopes entering a stage (id, headers, the first 128
 * bytes of the payload) into a bounded ring its reader empties; a reader
 * slower than the traffic loses copies (counted), never slows the stage.
 * With no tap open a stage pays one relaxed load per admission. */
typedef struct seda_tap_s seda_tap_t;
/* A tap's copy is an envelope snapshot (below, with the dead letters):
 * at is seda_now() when it entered, reason and missing are empty, error
 * is NULL, and priv holds the copy until seda_tap_entry_free. */
typedef struct seda_env_snapshot seda_tap_entry;

/* Open a tap of `capacity` copies on st: 0, SEDA_EINVAL or SEDA_ENOMEM.
 * Close it (any thread, once) before the bus is freed. */
int seda_tap_open(seda_stage_t *st, int capacity, seda_tap_t **out);
/* Take up to max copies, waiting up to timeout seconds for the first;
 * returns how many (free each with seda_tap_entry_free); *missed (if not
 * NULL) the copies lost so far.  One reader at a time per tap. */
int seda_tap_read(seda_tap_t *tap, seda_tap_entry *out, int max,
                  double timeout, uint64_t *missed);
void seda_tap_entry_free(seda_tap_entry *e);
void seda_tap_close(seda_tap_t *tap);

/* ---- the log ----
 *
 * Events go to stderr one line each: an RFC 3339 time, a level, the
 * stage when there is one, the message (a traceback folded into the line
 * with " | ", control bytes written as \xNN).  SEDA_LOG_JSON makes each
 * line one JSON object {"time", "level", "stage", "msg"}. */
enum { SEDA_LOG_DEBUG, SEDA_LOG_INFO, SEDA_LOG_WARN, SEDA_LOG_ERROR };
enum { SEDA_LOG_TEXT, SEDA_LOG_JSON };
void seda_log_set_format(int format);   /* process-wide; any thread */
int seda_log_format(void);
/* "debug", "info", "warn", "error"; NULL for another level. */
const char *seda_log_level_name(int level);
/* Write one event (stage may be NULL).  Any thread; never blocks long.
 * Nothing is written for a level below seda_log_level(). */
void seda_log_write(int level, const char *stage, const char *msg);
/* The least level written (default SEDA_LOG_INFO: debug lines are left
 * out); process-wide, any thread, clamped to DEBUG..ERROR. */
void seda_log_set_level(int level);
int seda_log_level(void);
bool seda_log_enabled(int level);       /* level >= seda_log_level() */
/* The level named "debug", "info", "warn" or "error"; -1 for another. */
int seda_log_level_from_name(const char *name);
/* A field of an event: "key":value in JSON, key=value in text (quoted
 * when it has a space, a quote or '=').  raw: the value is a JSON number
 * or boolean, written unquoted. */
struct seda_log_field {
    const char *key;
    const char *value;
    bool raw;
};
/* seda_log_write with fields, in the given order (JSON: before "msg";
 * text: after the message).  Fields that would leave the message less
 * than 512 bytes of the 4 KiB line are left out, "fields_cut":true (or
 * "..." in text) saying so. */
void seda_log_write_fields(int level, const char *stage, const char *msg,
                           const struct seda_log_field *fields, size_t n);

/* Report an error for a stage on stderr, rate-limited per stage (at most a
 * few lines a second; suppressed lines are counted and summarised).  Counts
 * in the stage's errors, and keeps msg (copied) in the stage's recent-errors
 * ring whether or not the line was printed.  Any thread. */
void seda_stage_report(seda_stage_t *st, const char *msg);

/* ---- recent errors (like Redis's SLOWLOG) ----
 *
 * Every message seda_stage_report takes (handler errors with their
 * tracebacks, hop timeouts, journal failures, ...) is kept per stage: the
 * last SEDA_ERRORS_KEPT distinct messages.  A message equal to one already
 * kept is folded into that entry (repeats + 1, time updated, moved to the
 * front) instead of pushing others out, so a storm of one error leaves the
 * rarer ones visible.  A message longer than SEDA_ERROR_MSG_MAX - 1 bytes
 * is cut there, ending in "...". */

#define SEDA_ERRORS_KEPT     32   /* distinct errors kept per stage */
#define SEDA_ERROR_MSG_MAX 4096   /* bytes kept of one message, with NUL */

typedef struct seda_error {
    double time;               /* wall clock (seconds since the Unix
                                  epoch) of its latest occurrence */
    double first;              /* ... and of its first */
    uint64_t repeats;          /* occurrences: 1 + the duplicates folded
                                  into this entry */
    const char *message;       /* NUL-terminated; owned by the array;
                                  "(out of memory: message not kept)" when
                                  there was no memory to copy it */
} seda_error;

/* Copy st's recent errors, newest first, into one new allocation: returns
 * their number n (0..SEDA_ERRORS_KEPT) and sets *out to an array of n
 * entries (NULL when n is 0) that the caller frees with seda_errors_free;
 * or SEDA_ENOMEM (*out NULL, nothing to free).  Takes the stage's error
 * lock briefly, a leaf lock no handler ever waits on.  Any thread. */
int seda_stage_errors(seda_stage_t *st, seda_error **out);

/* Free what seda_stage_errors returned (NULL is a no-op).  Any thread. */
void seda_errors_free(seda_error *errs);

/* ---- dead letters ----
 *
 * A dead letter carries why, as headers added when it is sent to its
 * dead-letter stage: x-dead-reason (max_attempts, no_consumers,
 * no_such_stage, hop_refused, type, ...), x-dead-from (the stage),
 * x-dead-error (the first line of the last error reported for it with
 * seda_env_fail, when there was one), x-dead-attempts, x-dead-at (the
 * wall-clock time, RFC 3339) and, for no_such_stage, x-dead-stage (the
 * missing name).  Each stage also keeps its last dead letters
 * (seda_bus_opts.dead_letter_keep, default 100), whether or not a
 * dead-letter stage took them. */
typedef struct seda_env_snapshot seda_dead_letter;

/* Dead-letter reasons as seda_stage_stats.dead_by_reason counts them;
 * seda_dead_reason_name(i) is the word (x-dead-reason), NULL past the
 * last.  Reasons of other layers count as "other". */
enum { SEDA_DEAD_MAX_ATTEMPTS, SEDA_DEAD_NO_CONSUMERS, SEDA_DEAD_NO_SUCH_STAGE,
       SEDA_DEAD_HOP_REFUSED, SEDA_DEAD_TYPE, SEDA_DEAD_OTHER,
       SEDA_DEAD_REASONS };
const char *seda_dead_reason_name(int reason);

/* The stage's kept dead letters, newest first: returns n (0..keep) and
 * sets *out to an array of n (one allocation: free it with
 * seda_dead_letters_free), or SEDA_ENOMEM.  Any thread. */
int seda_stage_dead_letters(seda_stage_t *st, seda_dead_letter **out);
void seda_dead_letters_free(seda_dead_letter *dl);

/* ---- statistics ---- */

typedef struct seda_stage_stats {
    char name[SEDA_NAME_MAX + 1];
    int depth;                 /* queued now */
    int capacity;
    int concurrency;
    int in_flight;             /* being handled (<= concurrency); a pull
                                  stage: leased, not yet settled */
    int consumers;
    int delivery, policy, max_attempts;
    uint64_t enqueued;         /* admitted into the queue (not retries) */
    uint64_t delivered;        /* acked on this stage */
    uint64_t nacked;           /* nacks (each retry or final failure) */
    uint64_t dropped;          /* refusals and evictions, swept at stop */
    uint64_t dead_lettered;    /* dead-lettered from this stage */
    uint64_t errors;           /* errors reported (raised, seda_env_fail) */
    uint64_t completed;        /* itineraries that ended here */
    uint64_t invalid;          /* refused by the admission check */
    uint64_t refused;          /* refused by an admit rule (Lua `admit`) */
    uint64_t shed;             /* publishes refused by adaptive shedding */
    uint64_t shed_for;         /* new itineraries refused at the door
                                  because this stage (their first or one on
                                  their slip) was shedding (SPEC 13) */
    int delayed;               /* retries waiting out their backoff */
    uint64_t dead_by_reason[6];/* dead_lettered by reason (SEDA_DEAD_*) */
    int suspended;             /* handler calls suspended (waiting on the
                                  network, seda_batch_suspend): counted in
                                  in_flight, holding a permit, no worker */
    int shedding;              /* 0 no, 1 refusing low, 2 low and normal */
    int depth_high, depth_low; /* queued at high and low priority */
    uint64_t handed_off;       /* itineraries that left this process here
                                  for JetStream (a remote stage) */
    uint64_t long_holds;       /* consumer calls that held their worker
                                  longer than the bus's hold_warn outside
                                  seda's own waits */
    double rate;               /* acks per second over the last ~5 s */
    /* Latency in microseconds from log-bucket histograms (about 3 %
     * resolution): sojourn = admitted to this stage -> handler start,
     * service = handler run time; quantiles and maxima over the recent
     * window (the last `window` seconds: the bus's stats_window), with
     * window_count samples in it. */
    double sojourn_p50, sojourn_p99, sojourn_p999, sojourn_max;
    double service_p50, service_p99, service_p999, service_max;
    double window;             /* seconds the figures above cover */
    uint64_t window_count;     /* samples in that window */
    /* Every sample so far (since the stage was added): how many, and
     * their sum in microseconds.  A sojourn and a service sample are
     * taken per handler call (retries included), or per receipt and
     * settle of a pull stage's lease. */
    uint64_t sojourn_count, service_count;
    double sojourn_sum, service_sum;
    int durable;               /* enum seda_durability: a durable stage's
                                  envelopes dropped by a shutdown stay in
                                  its journal (replayed at the next start) */
} seda_stage_stats;

typedef struct seda_bus_stats {
    uint64_t accepted;         /* publishes accepted */
    uint64_t completed;
    uint64_t dead_lettered;
    uint64_t dropped;
    uint64_t handed_off;       /* itineraries handed to remote stages
                                  (JetStream): the process that takes them
                                  counts their end */
    uint64_t in_system;        /* accepted - completed - dead - dropped
                                  - handed_off */
    int workers;
    int stages;
    bool paused, closed;
    int workers_loaned;        /* loan threads in service now */
    int suspended;             /* handler calls suspended, all stages */
    uint64_t loans;            /* loans started so far */
    int loans_peak;            /* the most loan threads in service at once */
    int max_loans;             /* the bound on workers_loaned */
    uint64_t waits_uncovered;  /* waits inside handlers (a full stage, a
                                  receive) no loan covered: max_loans was
                                  reached, so each held its worker */
    uint64_t long_holds;       /* the stages' long_holds, summed */
} seda_bus_stats;

/* Snapshots.  Each stage's figures are read under its lock briefly; the bus
 * totals sum the stages, so they are exact at any quiet moment.  Any
 * thread; cannot fail. */
void seda_stage_stats_get(seda_stage_t *st, seda_stage_stats *out);

/* A stage's latency since it was made as a cumulative histogram, for
 * exposition (Prometheus _bucket): cum[i] = samples of at most le[i]
 * seconds (to the buckets' 1/16 resolution; le[i] = INFINITY: all), for
 * which = SEDA_HIST_SOJOURN or SEDA_HIST_SERVICE; *count and *sum (in
 * seconds) if not NULL.  0 or SEDA_EINVAL.  Any thread. */
enum { SEDA_HIST_SOJOURN = 1, SEDA_HIST_SERVICE = 2 };
int seda_stage_histogram(seda_stage_t *st, int which, const double *le,
                         int n, uint64_t *cum, uint64_t *count, double *sum);
void seda_bus_stats_get(seda_bus_t *bus, seda_bus_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* SEDA_H */
