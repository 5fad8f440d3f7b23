/* SPDX-License-Identifier: MIT */
/*
 * env.c -- envelope construction, accessors, the routing slip and the
 * undo of a nacked attempt (the headers are env_headers.c's).
 *
 * DESIGN
 *   One allocation per envelope, recycled (see "recycling" below):
 *   payloads up to 248 bytes live in the envelope's tail, in one of three
 *   size classes (8, 56, 248).  Sender, headers and the slip live in an
 *   extension block allocated only when used.  Ids are a process
 *   wide counter handed out to each thread in blocks of 1024, so publishing
 *   does not bounce a shared cache line per envelope.
 */
#include <inttypes.h>
#include <stdio.h>
#include <assert.h>
#include <string.h>

#include "env.h"
#include "tally.h"

/* ---- ids ---- */

#define ID_BLOCK 1024

static atomic_uint_fast64_t g_next_id = 1;  /* relaxed: only uniqueness */
static _Thread_local uint64_t tls_id_next, tls_id_end;

static uint64_t next_id(void)
{
    if (SEDA__UNLIKELY(tls_id_next == tls_id_end)) {
        tls_id_next = atomic_fetch_add_explicit(&g_next_id, ID_BLOCK,
                                                memory_order_relaxed);
        tls_id_end = tls_id_next + ID_BLOCK;
    }
    return tls_id_next++;
}

/* ---- recycling ----
 *
 * HOW IT WORKS
 *   Envelopes are born on producer threads and die on workers, so with
 *   plain malloc every free lands in another thread's arena (a contended
 *   lock) and every malloc misses the allocating thread's cache.  Instead,
 *   envelopes of three inline sizes are recycled: each thread keeps a
 *   stack of up to 2 * BATCH free envelope POINTERS per size class (never
 *   writing into the freed memory, so taking one does not wait for a cache
 *   line the freeing core still holds); a full half goes to a depot (one
 *   lock round and a memcpy per BATCH frees), and a thread whose stack is
 *   empty takes BATCH pointers back (one lock round per BATCH
 *   allocations).  The depot is bounded (DEPOT_MAX pointers per class);
 *   past that, envelopes go back to free().  A thread's stack goes to the
 *   depot when the thread exits.
 *
 *   Recycling is off under AddressSanitizer (so use-after-free stays
 *   visible) and while a custom allocator is installed (so fault injection
 *   sees every allocation).
 */

#define BATCH 32
#define DEPOT_MAX 8192
#define NCLASS 3

#if defined(__SANITIZE_ADDRESS__)
#define RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RECYCLE 0
#endif
#endif
#ifndef RECYCLE
#define RECYCLE 1
#endif

#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 4
#endif

static const uint32_t class_inl[NCLASS] = { 8, 56, 248 };

/*
 * Locking: depot.mu guards p[][] and n[].
 */
static struct {
    pthread_mutex_t mu;
    void *p[NCLASS][DEPOT_MAX];     /* free envelopes, a stack per class */
    int n[NCLASS];
} depot = { PTHREAD_MUTEX_INITIALIZER, { { NULL } }, { 0 } };

struct tcache {
    void *p[NCLASS][2 * BATCH];     /* this thread's free envelopes */
    int n[NCLASS];
    bool registered;                /* flushed at thread exit */
};

static _Thread_local struct tcache tcache;

/* Blocks of the recycled classes allocated and not yet freed (live, or
 * on a stack or in the depot).  Relaxed: only read at quiet moments. */
static atomic_long g_blocks;
static pthread_key_t tcache_key;
static pthread_once_t tcache_once = PTHREAD_ONCE_INIT;

/* Move the top `count` pointers of this thread's class-k stack to the
 * depot (the overflow is freed). */
static void depot_put(int k, int count)
{
    void **src = &tcache.p[k][tcache.n[k] - count];
    pthread_mutex_lock(&depot.mu);
    int room = DEPOT_MAX - depot.n[k];
    int take = count < room ? count : room;
    memcpy(&depot.p[k][depot.n[k]], src, sizeof(void *) * (size_t)take);
    depot.n[k] += take;
    pthread_mutex_unlock(&depot.mu);
    for (int i = take; i < count; i++) {
        seda__free(src[i]);
        atomic_fetch_sub_explicit(&g_blocks, 1, memory_order_relaxed);
    }
    tcache.n[k] -= count;
}

static void tcache_flush(void *unused)
{
    (void)unused;
    for (int k = 0; k < NCLASS; k++)
        if (tcache.n[k])
            depot_put(k, tcache.n[k]);
}

static void tcache_key_init(void)
{
    pthread_key_create(&tcache_key, tcache_flush);
}

static inline int class_of(uint32_t inl)
{
    return inl == 8 ? 0 : inl == 56 ? 1 : inl == 248 ? 2 : -1;
}

/* First use of this thread's stacks: flush them at thread exit (a
 * thread that only publishes holds what it took from the depot). */
static void tcache_register(void)
{
    pthread_once(&tcache_once, tcache_key_init);
    pthread_setspecific(tcache_key, &tcache);
    tcache.registered = true;
}

static seda_env_t *env_alloc(uint32_t inl)
{
    int k = class_of(inl);
    if (RECYCLE && k >= 0 && !seda__custom_alloc) {
        int n = tcache.n[k];
        if (n <= PREFETCH_AHEAD) {
            if (SEDA__UNLIKELY(!tcache.registered))
                tcache_register();
            /* Refill below what is left (already being prefetched), so
             * the prefetches run ahead across the refill too. */
            pthread_mutex_lock(&depot.mu);
            int take = depot.n[k] < BATCH ? depot.n[k] : BATCH;
            depot.n[k] -= take;
            if (take > 0) {
                memmove(&tcache.p[k][take], tcache.p[k],
                        sizeof(void *) * (size_t)n);
                memcpy(tcache.p[k], &depot.p[k][depot.n[k]],
                       sizeof(void *) * (size_t)take);
            }
            pthread_mutex_unlock(&depot.mu);
            n += take;
            tcache.n[k] = n;
        }
        if (n > 0) {
            /* The stack's next envelopes were last written by the thread
             * that freed them: start moving their lines here now, so
             * our stores to them later do not stall on the transfer. */
            if (n > PREFETCH_AHEAD) {
                char *next = tcache.p[k][n - 1 - PREFETCH_AHEAD];
                size_t last = sizeof(seda_env_t) + inl - 1;
                for (size_t off = 0; off < last; off += 64)
                    seda__prefetchw(next + off);
                seda__prefetchw(next + last);
            }
            tcache.n[k] = n - 1;
            return tcache.p[k][n - 1];
        }
    }
    seda_env_t *e = seda__malloc(sizeof(seda_env_t) + inl);
    if (k >= 0 && e)
        atomic_fetch_add_explicit(&g_blocks, 1, memory_order_relaxed);
    return e;
}

static inline __attribute__((always_inline)) void env_release(seda_env_t *e)
{
    int k = class_of(e->inl_cap);
    if (RECYCLE && k >= 0 && !seda__custom_alloc) {
        if (SEDA__UNLIKELY(!tcache.registered))
            tcache_register();
        if (tcache.n[k] == 2 * BATCH)
            depot_put(k, BATCH);
        tcache.p[k][tcache.n[k]++] = e;
        return;
    }
    if (k >= 0)
        atomic_fetch_sub_explicit(&g_blocks, 1, memory_order_relaxed);
    seda__free(e);
}

long seda__env_unaccounted(void)
{
    long n = atomic_load_explicit(&g_blocks, memory_order_relaxed);
    pthread_mutex_lock(&depot.mu);
    for (int k = 0; k < NCLASS; k++)
        n -= depot.n[k] + tcache.n[k];
    pthread_mutex_unlock(&depot.mu);
    return n;
}

/* ---- the extension block ---- */

struct env_ext *seda__env_ext(seda_env_t *env)
{
    if (!env->ext)
        env->ext = seda__calloc(1, sizeof *env->ext);
    return env->ext;
}

/* ---- slip ---- */

/* Build a slip holding front[0..nfront) then the hops of rest (may be NULL),
 * visited in that order.  Returns NULL on allocation failure. */
static struct env_slip *slip_build(const char *const *front, int nfront,
                                   const struct env_slip *rest)
{
    int nrest = rest ? rest->n : 0;
    int n = nfront + nrest;
    size_t bytes = 0;
    for (int i = 0; i < nfront; i++)
        bytes += strlen(front[i]) + 1;
    for (int i = 0; i < nrest; i++)
        bytes += strlen(rest->name[i]) + 1;
    struct env_slip *s = seda__malloc(sizeof *s + sizeof(char *) * (size_t)n
                                      + bytes);
    if (!s)
        return NULL;
    s->n = n;
    char *data = (char *)(s->name + n);
    /* Reversed: the next hop is name[n-1].  rest is already reversed. */
    for (int i = 0; i < nrest; i++) {
        size_t l = strlen(rest->name[i]) + 1;
        memcpy(data, rest->name[i], l);
        s->name[i] = data;
        data += l;
    }
    for (int i = 0; i < nfront; i++) {
        size_t l = strlen(front[i]) + 1;
        memcpy(data, front[i], l);
        s->name[n - 1 - i] = data;
        data += l;
    }
    return s;
}

#define SLIP(env) ((env)->ext ? (env)->ext->slip : NULL)

const char *seda__env_slip_pop(seda_env_t *env)
{
    struct env_slip *sl = SLIP(env);
    if (!sl || sl->n == 0)
        return NULL;
    return sl->name[--sl->n];
}

/* The envelope this thread's consumer call is handling (NULL outside
 * one), and whether the consumer called seda_env_fail on it. */
static _Thread_local seda_env_t *tls_delivering;
static _Thread_local bool tls_failed;

/* Undo records (see env.h): where this thread records the first change
 * of each part of one envelope -- the current consumer call's own record,
 * or a pull lease's while the lease's envelope is open. */
static _Thread_local struct seda__undo tls_call_undo = { .reuse = true };
static _Thread_local seda_env_t *tls_undo_env;
static _Thread_local struct seda__undo *tls_undo;

/* A consumer call's record keeps its payload buffer between calls (a
 * handler that changes its payload, as a Lua handler that assigns
 * env.payload does, pays a memcpy, not a malloc, to keep the delivered
 * one), up to UNDO_KEEP bytes; the thread's exit frees it. */
#define UNDO_KEEP 65536
static pthread_key_t undo_key;
static pthread_once_t undo_once = PTHREAD_ONCE_INIT;

static void undo_thread_exit(void *u)
{
    struct seda__undo *r = u;
    seda__free(r->pay);
    r->pay = NULL;
    r->cap = 0;
}

static void undo_key_init(void)
{
    pthread_key_create(&undo_key, undo_thread_exit);
}

/* Before a tracked change of env's payload or headers: keep what it was.
 * Returns 0, or SEDA_ENOMEM (the change must then not be made: it could
 * not be undone). */
static int undo_save_payload(seda_env_t *env)
{
    struct seda__undo *u = tls_undo;
    if (env != tls_undo_env || u->payload)
        return 0;
    if (env->len > u->cap) {
        unsigned char *c = seda__realloc(u->pay, env->len);
        if (!c)
            return SEDA_ENOMEM;
        if (u->reuse && !u->pay) {
            pthread_once(&undo_once, undo_key_init);
            pthread_setspecific(undo_key, u);
        }
        u->pay = c;
        u->cap = env->len;
    }
    if (env->len)
        memcpy(u->pay, env->payload, env->len);
    u->len = env->len;
    u->kind = env->kind;
    u->payload = true;
    return 0;
}

int seda__env_undo_save_headers(seda_env_t *env)
{
    struct seda__undo *u = tls_undo;
    if (env != tls_undo_env || u->hdrs)
        return 0;
    bool ok;
    struct env_hdrs *c = seda__env_headers_dup(env->ext ? env->ext->hdrs
                                                          : NULL, &ok);
    if (!ok)
        return SEDA_ENOMEM;
    u->saved = c;
    u->hdrs = true;
    return 0;
}

void seda__env_undo_track(seda_env_t *env, struct seda__undo *u)
{
    tls_undo_env = env;
    tls_undo = u;
}

void seda__env_undo_finish(seda_env_t *env, struct seda__undo *u, bool keep)
{
    struct env_ext *x = env->ext;
    if (x && x->slip_saved) {
        /* Hops forwarded while tracked (seda_env_forward). */
        if (keep) {
            seda__free(x->slip_prev);
        } else {
            seda__free(x->slip);
            x->slip = x->slip_prev;
        }
        x->slip_prev = NULL;
        x->slip_saved = false;
    }
    if (u->payload) {
        if (!keep) {
            /* Back into the envelope's own storage: the old size fitted
             * there before, so only a grown heap buffer can need memory,
             * and a failing malloc leaves the change (reported by
             * nothing: out of memory at the worst moment). */
            seda_env_t *was = tls_undo_env;
            tls_undo_env = NULL;
            (void)seda__env_put_payload(env, u->pay, u->len, u->kind,
                                        SIZE_MAX);
            tls_undo_env = was;
        }
        u->payload = false;
    }
    /* Outside the branch above: a suspended call's record (reuse false)
     * may own the buffer its worker kept from an earlier call without
     * having saved anything in it (seda__env_suspend moves it over). */
    if (u->pay && (!u->reuse || u->cap > UNDO_KEEP)) {
        seda__free(u->pay);
        u->pay = NULL;
        u->cap = 0;
    }
    if (u->hdrs) {
        if (!keep && env->ext) {
            seda__env_headers_free(env->ext->hdrs);
            env->ext->hdrs = u->saved;
        } else {
            seda__env_headers_free(u->saved);
        }
        u->saved = NULL;
        u->hdrs = false;
    }
}

bool seda__env_in_delivery(void)
{
    return tls_delivering != NULL;
}

const seda_env_t *seda__env_delivering(void)
{
    return tls_delivering;
}

void seda__env_delivery_begin(seda_env_t *env)
{
    tls_delivering = env;
    tls_failed = false;
    tls_undo_env = env;
    tls_undo = &tls_call_undo;
}

bool seda__env_delivery_end(seda_env_t *env, bool acked)
{
    acked = acked && !tls_failed;
    tls_delivering = NULL;
    tls_undo_env = NULL;
    if (SEDA__UNLIKELY(tls_call_undo.payload || tls_call_undo.hdrs ||
                       (env->ext && env->ext->slip_saved)))
        seda__env_undo_finish(env, &tls_call_undo, acked);
    return acked;
}

void seda__env_suspend(seda_env_t *env, struct seda__undo *u, bool *failed)
{
    assert(env == tls_delivering);
    *failed = tls_failed;
    *u = tls_call_undo;
    u->reuse = false;                   /* its buffer is u's now */
    tls_call_undo.payload = tls_call_undo.hdrs = false;
    tls_call_undo.pay = NULL;
    tls_call_undo.cap = 0;
    tls_call_undo.saved = NULL;
    tls_delivering = NULL;
    tls_failed = false;
    tls_undo_env = NULL;
}

void seda__env_resume_begin(seda_env_t *env, struct seda__undo *u,
                            bool failed)
{
    tls_delivering = env;
    tls_failed = failed;
    tls_undo_env = env;
    tls_undo = u;
}

bool seda__env_resume_end(void)
{
    bool failed = tls_failed;
    tls_delivering = NULL;
    tls_failed = false;
    tls_undo_env = NULL;
    tls_undo = &tls_call_undo;
    return failed;
}

void seda__env_slip_clear(seda_env_t *env)
{
    if (env->ext) {
        seda__free(env->ext->slip);
        env->ext->slip = NULL;
    }
}

int seda_env_slip_count(const seda_env_t *env)
{
    struct env_slip *sl = SLIP(env);
    return sl ? sl->n : 0;
}

const char *seda_env_slip_at(const seda_env_t *env, int i)
{
    struct env_slip *sl = SLIP(env);
    if (!sl || i < 0 || i >= sl->n)
        return NULL;
    return sl->name[sl->n - 1 - i];
}

int seda__env_slip_insert(seda_env_t *env, const char *const *stages,
                          int n)
{
    if (!seda__env_ext(env))
        return SEDA_ENOMEM;
    struct env_slip *s = slip_build(stages, n, env->ext->slip);
    if (!s)
        return SEDA_ENOMEM;
    if (env == tls_undo_env && !env->ext->slip_saved) {
        env->ext->slip_prev = env->ext->slip;   /* restored on nack */
        env->ext->slip_saved = true;
    } else {
        seda__free(env->ext->slip);
    }
    env->ext->slip = s;
    return 0;
}

int seda_env_slip_end(seda_env_t *env)
{
    if (!env->ext || !env->ext->slip)
        return 0;
    if (env == tls_undo_env && !env->ext->slip_saved) {
        env->ext->slip_prev = env->ext->slip;   /* restored on nack */
        env->ext->slip_saved = true;
    } else {
        seda__free(env->ext->slip);
    }
    env->ext->slip = NULL;
    return 0;
}

/* ---- the snapshot ---- */

/* The bytes the headers of h take as copies: their strings with NULs,
 * and 2 * count pointers. */
static size_t snap_headers_size(const struct env_hdrs *h)
{
    int nh = h ? h->n : 0;
    size_t len = (size_t)nh * 2 * sizeof(char *);
    for (int i = 0; i < nh; i++)
        len += strlen(h->kv[i].key) + strlen(h->kv[i].value) + 2;
    return len;
}

/* Copy the headers of h into q (room for their strings), hv[2i] and
 * hv[2i+1] pointing at the copies of the i-th name and value.  Returns
 * the end of what was written. */
static char *snap_headers_copy(const struct env_hdrs *h, const char **hv,
                               char *q)
{
    int nh = h ? h->n : 0;
    for (int i = 0; i < nh; i++) {
        const char *k = h->kv[i].key, *v = h->kv[i].value;
        size_t kn = strlen(k) + 1, vn = strlen(v) + 1;
        memcpy(q, k, kn);
        hv[2 * i] = q;
        q += kn;
        memcpy(q, v, vn);
        hv[2 * i + 1] = q;
        q += vn;
    }
    return q;
}

char *seda__env_snapshot(const seda_env_t *env, size_t keep,
                         bool with_error, seda_env_snapshot *out,
                         size_t *len)
{
    const char *err = with_error ? seda__env_last_error(env) : NULL;
    size_t plen;
    const void *p = seda_env_payload(env, &plen);
    size_t pkeep = plen < keep ? plen : keep;
    const struct env_hdrs *h = env->ext ? env->ext->hdrs : NULL;
    int nh = h ? h->n : 0;
    size_t n = snap_headers_size(h) + (err ? strlen(err) + 1 : 0) + pkeep;
    char *blob = seda__malloc(n ? n : 1);
    if (!blob)
        return NULL;
    memset(out, 0, sizeof *out);
    seda_env_id(env, out->id);
    out->attempts = seda_env_attempts(env);
    out->kind = seda_env_payload_kind(env);
    out->payload_size = plen;
    out->nheaders = nh;
    const char **hv = (const char **)(void *)blob;
    char *q = blob + (size_t)nh * 2 * sizeof(char *);
    if (err) {
        size_t en = strlen(err) + 1;
        memcpy(q, err, en);
        out->error = q;
        q += en;
    }
    if (pkeep)
        memcpy(q, p, pkeep);
    out->payload = q;
    out->payload_len = pkeep;
    q += pkeep;
    snap_headers_copy(h, hv, q);
    out->headers = nh ? hv : NULL;
    *len = n;
    return blob;
}

/* ---- construction ---- */

seda_env_t *seda__env_new(const void *payload, size_t len,
                          const seda_publish_opts *opts, int *rc)
{
    *rc = SEDA_ENOMEM;
    if (len > UINT32_MAX) {
        *rc = SEDA_EINVAL;
        return NULL;
    }
    if (opts) {
        if (opts->nslip < 0 || opts->nheaders < 0 ||
            (opts->nslip > 0 && !opts->slip) ||
            (opts->nslip == 0 && opts->slip) ||
            (opts->nheaders > 0 && !opts->headers)) {
            *rc = SEDA_EINVAL;
            return NULL;
        }
        for (int i = 0; i < opts->nslip; i++)
            if (!seda__valid_name(opts->slip[i])) {
                *rc = SEDA_EINVAL;
                return NULL;
            }
        for (int i = 0; i < 2 * opts->nheaders; i++)
            if (!opts->headers[i]) {
                *rc = SEDA_EINVAL;
                return NULL;
            }
        if (opts->nheaders > SEDA_HEADERS_MAX) {
            *rc = SEDA_ETOOLARGE;
            return NULL;
        }
        if (opts->priority < SEDA_PRIO_NORMAL ||
            opts->priority > SEDA_PRIO_LOW) {
            *rc = SEDA_EINVAL;
            return NULL;
        }
    }
    uint32_t inl = len <= class_inl[0] ? class_inl[0]
                 : len <= class_inl[1] ? class_inl[1]
                 : len <= class_inl[2] ? class_inl[2] : class_inl[0];
    seda_env_t *e = env_alloc(inl);
    if (!e)
        return NULL;
    /* Field by field rather than memset: no string-instruction start-up
     * on the publish path. */
    e->at = NULL;
    e->seq = next_id();
    e->ext = NULL;
    e->len = 0;
    e->inl_cap = (uint16_t)inl;
    e->attempts = 1;
    e->kind = 0;
    e->flags = 0;
    e->prio = SEDA_PRIO_NORMAL;
    e->acked = 0;
    e->ts = seda__clock_ns();
    e->enq_ts = e->ts;
    e->done = NULL;
    e->done_ud = NULL;
    if (len <= inl) {
        e->payload = e->inl;
    } else if (!(e->payload = seda__malloc(len))) {
        env_release(e);
        return NULL;
    }
    if (len)
        memcpy(e->payload, payload, len);
    e->len = (uint32_t)len;
    if (opts) {
        e->kind = (uint8_t)opts->kind;
        e->prio = (uint8_t)opts->priority;
        e->done = opts->done;
        e->done_ud = opts->done_ud;
        if (opts->sender && (!seda__env_ext(e) ||
                             !(e->ext->sender = seda__strdup(opts->sender))))
            goto oom;
        for (int i = 0; i < opts->nheaders; i++) {
            int r = seda_env_set_header(e, opts->headers[2 * i],
                                        opts->headers[2 * i + 1]);
            if (r == SEDA_ETOOLARGE) {
                e->done = NULL;
                seda__env_free(e);
                *rc = r;
                return NULL;
            }
            if (r)
                goto oom;
        }
        if (opts->nslip > 0 &&
            (!seda__env_ext(e) ||
             !(e->ext->slip = slip_build(opts->slip, opts->nslip, NULL))))
            goto oom;
        if (opts->id) {
            int r = seda__env_set_id(e, opts->id);
            if (r) {
                e->done = NULL;
                seda__env_free(e);
                *rc = r;
                return NULL;
            }
        }
    }
    *rc = 0;
    return e;
oom:
    e->done = NULL;
    seda__env_free(e);
    return NULL;
}

void seda__env_free(seda_env_t *env)
{
    if (!env)
        return;
    /* The headers' table first: its own file frees it, then every
     * block of the envelope's own goes back in one run. */
    if (env->ext) {
        seda__env_headers_free(env->ext->hdrs);
        seda__free(env->ext->sender);
        seda__free(env->ext->slip);
        seda__free(env->ext->slip_prev);
        seda__free(env->ext->id);
        seda__free(env->ext->to);
        seda__free(env->ext->last_error);
        seda__free(env->ext);
    }
    if (env->payload != env->inl)
        seda__free(env->payload);
    env_release(env);
}

/* ---- accessors ---- */

char *seda_env_id(const seda_env_t *env, char *buf)
{
    if (env->ext && env->ext->id)
        snprintf(buf, SEDA_ID_MAX, "%s", env->ext->id);
    else
        snprintf(buf, SEDA_ID_MAX, "%" PRIu64, env->seq);
    return buf;
}

int seda__env_set_jkey(seda_env_t *env, int64_t key)
{
    if (!key && !env->ext)
        return 0;
    if (!seda__env_ext(env))
        return SEDA_ENOMEM;
    env->ext->jkey = key;
    return 0;
}

int seda__env_set_id(seda_env_t *env, const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= SEDA_ID_MAX)
        return SEDA_EINVAL;
    if (!seda__env_ext(env))
        return SEDA_ENOMEM;
    char *d = seda__strdup(id);
    if (!d)
        return SEDA_ENOMEM;
    seda__free(env->ext->id);
    env->ext->id = d;
    return 0;
}

uint64_t seda_env_seq(const seda_env_t *env) { return env->seq; }

int seda__env_set_to(seda_env_t *env, const char *name)
{
    if (!seda__env_ext(env))
        return SEDA_ENOMEM;
    char *d = seda__strdup(name);
    if (!d)
        return SEDA_ENOMEM;
    seda__free(env->ext->to);
    env->ext->to = d;
    return 0;
}

const char *seda_env_sender(const seda_env_t *env)
{
    return env->ext ? env->ext->sender : NULL;
}

seda_stage_t *seda_env_stage(const seda_env_t *env) { return env->at; }

bool seda_env_has_done(const seda_env_t *env) { return env->done != NULL; }

int seda_env_attempts(const seda_env_t *env) { return env->attempts; }

int seda_env_priority(const seda_env_t *env) { return env->prio; }

double seda_env_published_at(const seda_env_t *env)
{
    return (double)env->ts / 1e9;
}

const void *seda_env_payload(const seda_env_t *env, size_t *len)
{
    if (len)
        *len = env->len;
    return env->payload;
}

int seda_env_payload_kind(const seda_env_t *env) { return env->kind; }

int seda__env_put_payload(seda_env_t *env, const void *p, size_t len,
                          int kind, size_t max)
{
    if (len > UINT32_MAX)
        return SEDA_EINVAL;
    if (len > max)
        return SEDA_ETOOLARGE;
    if (undo_save_payload(env) != 0)
        return SEDA_ENOMEM;
    unsigned char *dst;
    if (len <= env->inl_cap) {
        dst = env->inl;
    } else if (env->payload != env->inl && len <= env->len) {
        dst = env->payload;             /* shrink in place */
    } else if (!(dst = seda__malloc(len))) {
        return SEDA_ENOMEM;
    }
    if (len)
        memmove(dst, p, len);
    if (env->payload != env->inl && env->payload != dst)
        seda__free(env->payload);
    env->payload = dst;
    env->len = (uint32_t)len;
    env->kind = (uint8_t)kind;
    return 0;
}

/* Keep msg's first line (at most ERR_KEEP bytes) as env's last error;
 * out of memory keeps none. */
#define ERR_KEEP 200
static void keep_error(seda_env_t *env, const char *msg)
{
    struct env_ext *x = seda__env_ext(env);
    if (!x)
        return;
    size_t n = strcspn(msg, "\n");
    if (n > ERR_KEEP)
        n = ERR_KEEP;
    char *c = seda__malloc(n + 1);
    if (!c)
        return;
    memcpy(c, msg, n);
    c[n] = '\0';
    seda__free(x->last_error);
    x->last_error = c;
}

const char *seda__env_last_error(const seda_env_t *env)
{
    return env->ext ? env->ext->last_error : NULL;
}

void seda__env_fail_note(seda_env_t *env, const char *msg)
{
    if (env == tls_delivering)
        tls_failed = true;
    keep_error(env, msg);
}

/* ---- ending an envelope ---- */

void seda__env_end(seda_env_t *env, int outcome, struct stage_counters *tally,
                   seda__mutex_t *mu, struct stage_counters *c)
{
    if (!(env->flags & ENV_DEAD)) {
        if (tally) {
            if (outcome == SEDA_COMPLETED)
                tally->completed++;
            else if (outcome == SEDA_DROPPED)
                tally->it_lost++;
        } else {
            seda__mutex_lock(mu);
            if (outcome == SEDA_COMPLETED)
                c->completed++;
            else if (outcome == SEDA_DROPPED)
                c->it_lost++;
            seda__mutex_unlock(mu);
        }
    }
    if (env->done) {
        seda_done_fn done = env->done;
        env->done = NULL;
        done(env, outcome, env->done_ud);
    }
    seda__env_free(env);
}

/* Evicted or swept: the stage already counted dropped (and it_lost). */
void seda__env_end_dropped(seda_env_t *env)
{
    if (env->done) {
        seda_done_fn done = env->done;
        env->done = NULL;
        done(env, SEDA_DROPPED, env->done_ud);
    }
    seda__env_free(env);
}
