/* SPDX-License-Identifier: MIT */
/*
 * env.h -- envelopes: id, destination, sender, headers, payload, attempts,
 * routing slip, publish time and completion callback.
 *
 * An envelope has one owner at a time: the publisher until admission, then
 * the stage queue, then the drain task that took it, which either requeues
 * it, hands it to the next stage, or ends it.  So its fields need no lock.
 */
#ifndef SEDA_ENV_H
#define SEDA_ENV_H

#include "seda_int.h"

struct seda_stage_s;
struct stage_counters;

/* The routing slip: remaining hops, stored reversed (the next hop is
 * name[n-1]) so popping is n--.  One allocation holds the header, the
 * pointer array and the strings. */
struct env_slip {
    int n;                      /* hops remaining */
    const char *name[];         /* reversed; strings follow the array */
};

struct env_hdr {
    char *key;                  /* owned */
    char *value;                /* owned */
};

struct env_hdrs {
    int n;                      /* pairs in use */
    int cap;                    /* pairs allocated */
    struct env_hdr kv[];
};

enum {
    ENV_DEAD = 1,               /* already counted dead-lettered */
    ENV_REPLAYED = 2,           /* came back from the journal: a hop to a
                                   stage not declared yet waits for it
                                   (seda__route_hop_target) */
    /* 4 is free (delivery state is per thread: env.c) */
    ENV_JDONE = 8,              /* the journal already reflects the
                                   routing decision about to be made */
};

/* What most envelopes do not carry, allocated on first use. */
struct env_ext {
    char *sender;               /* owned, or NULL */
    struct env_hdrs *hdrs;      /* owned, or NULL when none */
    struct env_slip *slip;      /* owned, or NULL when empty */
    struct env_slip *slip_prev; /* the slip before a forward during the
                                   current delivery (restored on nack) */
    bool slip_saved;            /* slip_prev holds the pre-delivery slip */
    char *id;                   /* custom id (owned), or NULL */
    char *to;                   /* the stage name seda_env_to reports
                                   instead of at's (owned), or NULL: an
                                   itinerary that ended in another
                                   process, at a stage this bus lacks */
    char *last_error;           /* the first line of the latest
                                   seda_env_fail message (owned), or NULL:
                                   what a dead letter says it died of */
    int64_t jkey;               /* journal row, or 0 when not journaled */
    int64_t due;                /* a journaled retry's due time (monotonic
                                   ns), written with its row before the
                                   retry is timed, or read back at replay;
                                   0 = none.  Owned by whoever holds the
                                   envelope */
};

struct seda_env_s {
    struct seda_stage_s *at;    /* stage it is queued at or headed for */
    uint64_t seq;               /* numeric id */
    struct env_ext *ext;        /* sender, headers, slip; or NULL */
    unsigned char *payload;     /* inl or owned heap bytes */
    uint32_t len;               /* payload length */
    uint16_t inl_cap;           /* bytes available in inl (<= 248) */
    uint16_t attempts;          /* delivery attempt on this hop, from 1 */
    uint8_t kind;               /* payload kind, free for the binding */
    uint8_t flags;              /* ENV_* */
    uint8_t prio;               /* enum seda_priority */
    uint64_t acked;             /* pub/sub: consumers that acked */
    int64_t ts;                 /* publish time, timestamp clock ns */
    int64_t enq_ts;             /* admitted to the current stage, ns */
    seda_done_fn done;          /* completion callback, or NULL */
    void *done_ud;              /* its argument */
    unsigned char inl[];        /* inline payload storage */
};

/* Build an envelope holding a copy of payload and of the opts' sender,
 * headers and slip.  Returns NULL on allocation failure (nothing leaked)
 * or, with *rc = SEDA_EINVAL, for a malformed slip name or a NULL header.
 * Any thread. */
SEDA__API seda_env_t *seda__env_new(const void *payload, size_t len,
                                    const seda_publish_opts *opts, int *rc);

/* The journal row of env (0 when none), and setting it (0, or
 * SEDA_ENOMEM). */
static inline int64_t seda__env_jkey(const seda_env_t *env)
{
    return env->ext ? env->ext->jkey : 0;
}
SEDA__API int seda__env_set_jkey(seda_env_t *env, int64_t key);

/* Set a custom id (copied): 0, SEDA_EINVAL (empty or too long) or
 * SEDA_ENOMEM. */
SEDA__API int seda__env_set_id(seda_env_t *env, const char *id);

/* Make seda_env_to report name (copied) instead of the name of the stage
 * env is at (the remote layer: a completion from another process): 0 or
 * SEDA_ENOMEM. */
SEDA__API int seda__env_set_to(seda_env_t *env, const char *name);

/* Blocks of the recycled size classes that are neither on the calling
 * thread's free stacks nor in the depot: envelopes alive, or lost.  With
 * no envelope alive and every other thread that used envelopes exited,
 * it is 0 (the test of the thread-exit flush).  With recycling off
 * (AddressSanitizer builds) it counts the envelopes alive. */
SEDA__API long seda__env_unaccounted(void);

/* Free an envelope and everything it owns.  NULL is a no-op. */
SEDA__API void seda__env_free(seda_env_t *env);

/* Pop the next hop name (borrowed until the slip changes); NULL if none. */
SEDA__API const char *seda__env_slip_pop(seda_env_t *env);

/* Bracket a consumer call on this thread.  The state lives in the
 * thread, not in the envelope: a delivery that only reads the envelope
 * leaves its cache lines clean, so the publisher that reuses the block
 * takes it back with an invalidation instead of a transfer.  end returns
 * the result (acked, and seda_env_fail not called); on a nack, hops
 * inserted by seda_env_forward during the call are undone (the retry
 * sees the slip as it was). */
SEDA__API void seda__env_delivery_begin(seda_env_t *env);
/* True on a thread inside a consumer call, and the envelope it handles
 * (NULL outside one). */
SEDA__API bool seda__env_in_delivery(void);
SEDA__API const seda_env_t *seda__env_delivering(void);
SEDA__API bool seda__env_delivery_end(seda_env_t *env, bool acked);

/* A nack discards the attempt's changes.  Changes to an
 * envelope are recorded while it is tracked on the calling thread: the
 * first change of the payload, and of the headers, keeps a copy of what
 * was there (and a forward keeps the slip it replaced, in the envelope's
 * ext).  delivery_begin/end track a consumer call's envelope (end
 * undoes on a nack); a pull lease tracks its envelope while it is open
 * (seda_lease_env .. seda_lease_release_env) into its own record, which
 * the settle finishes.  finish(keep = false) puts the recorded parts
 * back; either way the record is emptied. */
struct seda__undo {
    bool payload;               /* pay/len/kind hold the earlier payload */
    bool reuse;                 /* keep pay's buffer between uses */
    unsigned char *pay;         /* owned buffer for the copy, or NULL */
    uint32_t cap;               /* its size */
    uint32_t len;
    uint8_t kind;
    bool hdrs;                  /* saved holds the earlier headers */
    struct env_hdrs *saved;     /* owned deep copy, or NULL for none */
};
SEDA__API void seda__env_undo_track(seda_env_t *env, struct seda__undo *u);
SEDA__API void seda__env_undo_finish(seda_env_t *env, struct seda__undo *u,
                                     bool keep);

/* A consumer call's envelope leaves the call unsettled (suspended): what
 * the thread recorded for it moves into *u (which owns it from here, not
 * reused) and *failed (seda_env_fail was called), and the thread is out
 * of the delivery.  resume_begin/end bracket a later run of it on some
 * thread, recording into u; end returns whether it failed meanwhile. */
SEDA__API void seda__env_suspend(seda_env_t *env, struct seda__undo *u,
                                 bool *failed);
SEDA__API void seda__env_resume_begin(seda_env_t *env, struct seda__undo *u,
                                      bool failed);
SEDA__API bool seda__env_resume_end(void);

/* The latest failure's message (first line), or NULL. */
SEDA__API const char *seda__env_last_error(const seda_env_t *env);

/* A snapshot of env (seda.h's seda_env_snapshot, for taps and dead
 * letters): its id, attempts, kind, headers, the first `keep` bytes of
 * its payload and, when with_error, its last error, into *out (the rest
 * zero), their copies in one allocation of *len bytes that the caller
 * owns (seda__free) and *out points into.  Returns it, or NULL when out
 * of memory (*out is then not to be used).  Any thread; env is only
 * read. */
SEDA__API char *seda__env_snapshot(const seda_env_t *env, size_t keep,
                                   bool with_error, seda_env_snapshot *out,
                                   size_t *len);

/* End an envelope with an outcome: count it (in tally, or in c under mu
 * when tally is NULL: the stage's counters and lock), fire done, free it
 * (the end of every envelope). */
SEDA__API void seda__env_end(seda_env_t *env, int outcome,
                             struct stage_counters *tally, seda__mutex_t *mu,
                             struct stage_counters *c);

/* End an envelope that was evicted or swept (its stage already counted
 * it dropped): fire done with SEDA_DROPPED, free it. */
SEDA__API void seda__env_end_dropped(seda_env_t *env);

/* Put stages (n > 0 valid names) before env's remaining slip; a nack of
 * the current delivery restores the slip it replaced.  0 or SEDA_ENOMEM.
 * (seda_env_forward, route.c, checks the names and tells the bus.) */
SEDA__API int seda__env_slip_insert(seda_env_t *env,
                                    const char *const *stages, int n);

/* Replace env's payload with a copy of p (len bytes, of the binding's
 * kind): 0, SEDA_EINVAL (over 4 GiB), SEDA_ETOOLARGE (over max: the bus's
 * publish limit) or SEDA_ENOMEM.  The first change during a delivery
 * keeps the old payload for a nack. */
SEDA__API int seda__env_put_payload(seda_env_t *env, const void *p,
                                    size_t len, int kind, size_t max);

/* Keep msg's first line as env's last error and, when env is the one
 * being delivered on this thread, mark the delivery failed (what
 * seda_env_fail does to the envelope; route.c tells the stage). */
SEDA__API void seda__env_fail_note(seda_env_t *env, const char *msg);

/* env's extension block, made on first use; NULL when out of memory. */
SEDA__API struct env_ext *seda__env_ext(seda_env_t *env);

/* Before a change of env's headers: when env is tracked on this thread
 * and its headers not saved yet, keep a copy of them for a nack.  0, or
 * SEDA_ENOMEM (the change must then not be made). */
SEDA__API int seda__env_undo_save_headers(seda_env_t *env);

/* A header table's end (NULL is a no-op) and its deep copy (NULL for
 * none or empty; *ok false when out of memory) (env_headers.c). */
SEDA__API void seda__env_headers_free(struct env_hdrs *h);
SEDA__API struct env_hdrs *seda__env_headers_dup(const struct env_hdrs *h,
                                                 bool *ok);

/* Drop the remaining slip. */
SEDA__API void seda__env_slip_clear(seda_env_t *env);

#endif /* SEDA_ENV_H */
