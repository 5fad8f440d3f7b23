/* SPDX-License-Identifier: MIT */
/*
 * cli_history.c -- the last five minutes of every live bus, one sample a
 * second: what the status page draws, /history.json serves and the REPL's
 * top() sketches.
 *
 * Per stage (in declaration order) the series of HS_* below: rates (the
 * change of a counter of bus:stats() over the second, divided by the
 * seconds that really passed), levels read at the sample (depth, in
 * flight, suspended, the shedding level: at least 1 when itineraries
 * were refused at the door for this stage during the second), and the
 * p99 of the sojourn and service times of that second alone (the
 * change of the stage's cumulative histogram, bus:histogram, at
 * HIST_BOUNDS log-spaced bounds: the bound the 99th sample falls under,
 * within a factor of 1.29).  Per
 * listener: requests/s, responses/s by class, and the listener's own p99
 * (its last 10 s, as bus:stats() gives it).  Per bus: completed/s and
 * dead-lettered/s.  A series' first second, and the seconds before a
 * stage or listener existed, are NaN (null in JSON).
 *
 * DESIGN
 *   The samples are taken off the hot path, through the same read-only
 *   bus:stats() and bus:histogram() every scrape uses: by the observer
 *   thread (cli_observe.c) on its own state when --http or --metrics runs
 *   it, else by the run loop (cli_periodic) on the main state.  Memory is
 *   bounded: every series is a ring of HIST_SLOTS floats sharing its bus's
 *   ring of sample times; a stage, listener or bus that is gone at a
 *   sample is dropped with its rings.  About 15.6 KB per stage (HS_N =
 *   12 rings of 300 4-byte floats, 14 400 bytes, and the previous
 *   histogram counts), 8.5 KB per listener (7 rings), 2.4 KB per bus,
 *   and the 2.4 KB of sample times.
 *
 *   One thread samples at a time (the observer's while it runs, else the
 *   main one): it reads every bus through Lua with no lock of ours held
 *   (struct reading), then writes the rings under hist.mu, which the
 *   readers (/history.json on the observer thread, top() on the main
 *   one) take while they copy.  Lua is never called with hist.mu held.
 */
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"
#include "seda.h"

/* Per-stage series; the first HS_RATES are rates of the stats counter
 * named in stage_counter. */
enum {
    HS_DELIVERED, HS_NACKED, HS_DEAD, HS_SHED, HS_DOOR, HS_COMPLETED,
    HS_RATES,
    HS_DEPTH = HS_RATES, HS_IN_FLIGHT, HS_SUSPENDED, HS_SHEDDING,
    HS_SOJOURN_P99, HS_SERVICE_P99,
    HS_N
};
static const char *const stage_series[HS_N] = {
    "delivered", "nacked", "dead_lettered", "shed", "door_refused",
    "completed", "depth", "in_flight", "suspended", "shedding",
    "sojourn_p99", "service_p99"
};
static const char *const stage_counter[HS_RATES] = {
    "delivered", "nacked", "dead_lettered", "shed", "shed_for", "completed"
};

/* Per-listener series: the rates of requests and response classes, then
 * the p99. */
enum { HL_REQUESTS, HL_2XX, HL_3XX, HL_4XX, HL_5XX, HL_503, HL_RATES,
       HL_P99 = HL_RATES, HL_N };
static const char *const listener_series[HL_N] = {
    "requests", "2xx", "3xx", "4xx", "5xx", "503", "p99"
};

#define HIST_BOUNDS 64          /* bus:histogram's most */
#define ADDR_MAX 96

/* The rings.  Locking: every field of these three and of `hist` below
 * is guarded by hist.mu, but for hist.le (written once, before the first
 * sample, by the only thread that samples, and read by it alone). */
struct hstage {
    char name[SEDA_NAME_MAX + 1];       /* guarded by mu */
    int index;                  /* declaration order, from 1; mu */
    double capacity, concurrency;       /* at the last sample; mu */
    bool seen;                  /* in the sample being applied; mu */
    bool primed;                /* prev and hprev hold a sample; mu */
    double prev[HS_RATES];      /* the counters at the last sample; mu */
    double hprev[2][HIST_BOUNDS + 1];   /* sojourn, service: cumulative
                                           counts + count; mu */
    float v[HS_N][HIST_SLOTS];  /* the rings; mu */
};

struct hlistener {
    char addr[ADDR_MAX];        /* guarded by mu */
    bool seen, primed;          /* as hstage's; mu */
    double prev[HL_RATES];      /* the counters at the last sample; mu */
    float v[HL_N][HIST_SLOTS];  /* the rings; mu */
};

struct hbus {
    char name[SEDA_NAME_MAX + 1];       /* guarded by mu */
    int index;                  /* in seda.buses() at the last sample; mu */
    bool seen, primed;          /* as hstage's; mu */
    double prev_completed, prev_dead;   /* the totals last time; mu */
    float completed[HIST_SLOTS], dead[HIST_SLOTS];      /* rings; mu */
    struct hstage **st;         /* declaration order; mu */
    int nst;                    /* mu */
    struct hlistener **ls;      /* by address; mu */
    int nls;                    /* mu */
};

static struct {
    pthread_mutex_t mu;         /* guards everything here but le */
    double t[HIST_SLOTS];       /* wall-clock time of each slot; mu */
    double mono;                /* monotonic time of the last sample; mu */
    double next;                /* monotonic time the next is due; mu */
    int head;                   /* the slot the next sample fills; mu */
    int n;                      /* slots filled, up to HIST_SLOTS; mu */
    struct hbus **b;            /* the buses, seda.buses() order; mu */
    int nb;                     /* mu */
    double le[HIST_BOUNDS];     /* the histogram bounds, seconds: the
                                   sampling thread's */
} hist = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void fill_nan(float *v, int n)
{
    for (int i = 0; i < n; i++)
        v[i] = NAN;
}

/* ---- reading the buses (no lock held) ---- */

/* What one sample read, before it is applied to the rings: the sampling
 * thread's alone. */
struct rstage {
    char name[SEDA_NAME_MAX + 1];
    int index;                  /* stats().index */
    double capacity, concurrency;
    double counter[HS_RATES];   /* stage_counter's, NaN when absent */
    double level[4];            /* depth, in_flight, suspended, shedding */
    bool hok[2];                /* sojourn, service histogram read */
    double cum[2][HIST_BOUNDS + 1];     /* their counts, then the count */
};

struct rlistener {
    char addr[ADDR_MAX];
    double counter[HL_RATES];   /* requests, then responses by class */
    double p99;                 /* NaN without a request in its window */
};

struct rbus {
    char name[SEDA_NAME_MAX + 1];
    int index;                  /* in seda.buses(), from 1 */
    double completed, dead;     /* the bus's totals */
    struct rstage *st;          /* malloc'd, nst of them */
    int nst;
    struct rlistener *ls;       /* malloc'd, nls of them */
    int nls;
};

struct reading {
    struct rbus *b;             /* malloc'd, nb of them */
    int nb;
};

static void reading_free(struct reading *r)
{
    for (int i = 0; i < r->nb; i++) {
        free(r->b[i].st);
        free(r->b[i].ls);
    }
    free(r->b);
    r->b = NULL;
    r->nb = 0;
}

/* Room for one more element of size sz at *arr (n of them): the new one
 * zeroed, or NULL out of memory (*arr unchanged). */
static void *grow(void *arr, int n, size_t sz, void **out)
{
    char *p = realloc(arr, (size_t)(n + 1) * sz);
    if (!p)
        return NULL;
    memset(p + (size_t)n * sz, 0, sz);
    *out = p + (size_t)n * sz;
    return p;
}

static double field_num(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : NAN;
    lua_pop(L, 1);
    return v;
}

/* Read the histogram kind of stage name, of the bus at index bi, at the
 * bounds table at index le into out; false when the bus gives none (a
 * closed bus, a stage gone). */
static bool read_hist(lua_State *L, int bi, const char *name,
                      const char *kind, int le, double *out)
{
    int top = lua_gettop(L);
    lua_getfield(L, bi, "histogram");
    lua_pushvalue(L, bi);
    lua_pushstring(L, name);
    lua_pushstring(L, kind);
    lua_pushvalue(L, le);
    if (lua_pcall(L, 4, 2, 0) != LUA_OK || !lua_istable(L, -2)) {
        lua_settop(L, top);
        return false;
    }
    for (int i = 0; i < HIST_BOUNDS; i++) {
        lua_rawgeti(L, -2, i + 1);
        out[i] = (double)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    out[HIST_BOUNDS] = (double)lua_tointeger(L, -1);
    lua_pop(L, 2);
    return true;
}

/* The stages of the stats table at index st (bus at bi) into rb. */
static void read_stages(lua_State *L, struct rbus *rb, int bi, int st,
                        int le)
{
    static const char *const levels[4] = { "depth", "in_flight",
                                           "suspended", "shedding" };
    static const char *const kinds[2] = { "sojourn", "service" };
    lua_getfield(L, st, "stages");
    int t = lua_gettop(L);
    if (!lua_istable(L, t)) {
        lua_pop(L, 1);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, t)) {
        struct rstage *r;
        void *p;
        if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1) ||
            !(p = grow(rb->st, rb->nst, sizeof *rb->st, (void **)&r))) {
            lua_pop(L, 1);
            continue;
        }
        rb->st = p;
        rb->nst++;
        int s = lua_gettop(L);
        const char *name = lua_tostring(L, -2);
        snprintf(r->name, sizeof r->name, "%s", name);
        double idx = field_num(L, s, "index");
        r->index = isnan(idx) ? 0 : (int)idx;
        r->capacity = field_num(L, s, "capacity");
        r->concurrency = field_num(L, s, "concurrency");
        for (int k = 0; k < HS_RATES; k++)
            r->counter[k] = field_num(L, s, stage_counter[k]);
        for (int k = 0; k < 4; k++)
            r->level[k] = field_num(L, s, levels[k]);
        for (int k = 0; k < 2; k++)
            r->hok[k] = read_hist(L, bi, r->name, kinds[k], le, r->cum[k]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void read_listeners(lua_State *L, struct rbus *rb, int st)
{
    lua_getfield(L, st, "listeners");
    int t = lua_gettop(L);
    if (!lua_istable(L, t)) {
        lua_pop(L, 1);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, t)) {
        struct rlistener *r;
        void *p;
        if (lua_type(L, -2) != LUA_TSTRING || !lua_istable(L, -1) ||
            !(p = grow(rb->ls, rb->nls, sizeof *rb->ls, (void **)&r))) {
            lua_pop(L, 1);
            continue;
        }
        rb->ls = p;
        rb->nls++;
        int l = lua_gettop(L);
        snprintf(r->addr, sizeof r->addr, "%s", lua_tostring(L, -2));
        r->counter[HL_REQUESTS] = field_num(L, l, "requests");
        lua_getfield(L, l, "responses");
        int rs = lua_istable(L, -1) ? lua_gettop(L) : 0;
        for (int k = HL_2XX; k < HL_RATES; k++)
            r->counter[k] = rs ? field_num(L, rs, listener_series[k]) : NAN;
        lua_pop(L, 1);
        r->p99 = field_num(L, l, "latency_count") > 0
                     ? field_num(L, l, "latency_p99") : NAN;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* A lua_CFunction run protected (running out of memory raises): every
 * live bus seen through the state's `seda` module, into the struct
 * reading given as argument 1 (a light userdata; what it holds when this
 * raises is still the caller's to free). */
static int read_all(lua_State *L)
{
    struct reading *rd = lua_touserdata(L, 1);
    lua_createtable(L, HIST_BOUNDS, 0);
    for (int i = 0; i < HIST_BOUNDS; i++) {
        lua_pushnumber(L, hist.le[i]);
        lua_rawseti(L, -2, i + 1);
    }
    int le = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "seda");
    if (!lua_istable(L, -1))
        return 0;
    lua_getfield(L, -1, "buses");
    if (lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_istable(L, -1))
        return 0;
    int list = lua_gettop(L);
    lua_Integer n = (lua_Integer)lua_rawlen(L, list);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_settop(L, list);
        lua_rawgeti(L, list, i);
        int bi = lua_gettop(L);
        lua_getfield(L, bi, "stats");
        lua_pushvalue(L, bi);
        if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_istable(L, -1))
            continue;
        int st = lua_gettop(L);
        struct rbus *rb;
        void *p = grow(rd->b, rd->nb, sizeof *rd->b, (void **)&rb);
        if (!p)
            return luaL_error(L, "history: out of memory");
        rd->b = p;
        rd->nb++;
        lua_getfield(L, st, "name");
        if (lua_type(L, -1) == LUA_TSTRING)
            snprintf(rb->name, sizeof rb->name, "%s", lua_tostring(L, -1));
        else
            snprintf(rb->name, sizeof rb->name, "bus%d", (int)i);
        lua_pop(L, 1);
        rb->index = (int)i;
        rb->completed = field_num(L, st, "completed");
        rb->dead = field_num(L, st, "dead_lettered");
        read_stages(L, rb, bi, st, le);
        read_listeners(L, rb, st);
    }
    return 0;
}

/* ---- applying a reading to the rings (hist.mu held) ---- */

/* The rate of counter cur against *prev over dt seconds (NaN for the
 * first sample or a missing counter; a counter that went back, as after
 * a bus of the same name replaced another, reads 0). */
static float rate(double cur, double *prev, bool primed, double dt)
{
    double p = *prev;
    *prev = cur;
    if (!primed || isnan(cur) || isnan(p) || dt <= 0)
        return NAN;
    return cur < p ? 0.0f : (float)((cur - p) / dt);
}

/* The 99th percentile of the samples between two cumulative histograms
 * (cum[HIST_BOUNDS] is the count): the first bound holding 99 % of them;
 * past the last bound, the last bound.  NaN when there were none. */
static float p99_of(const double *prev, const double *cum)
{
    double total = cum[HIST_BOUNDS] - prev[HIST_BOUNDS];
    if (!(total > 0))
        return NAN;
    double want = ceil(total * 0.99);
    for (int i = 0; i < HIST_BOUNDS; i++)
        if (cum[i] - prev[i] >= want)
            return (float)hist.le[i];
    return (float)hist.le[HIST_BOUNDS - 1];
}

static struct hbus *find_bus(const char *name)
{
    for (int i = 0; i < hist.nb; i++)
        if (strcmp(hist.b[i]->name, name) == 0)
            return hist.b[i];
    struct hbus **p = realloc(hist.b, (size_t)(hist.nb + 1) * sizeof *p);
    if (!p)
        return NULL;
    hist.b = p;
    struct hbus *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    snprintf(b->name, sizeof b->name, "%s", name);
    fill_nan(b->completed, HIST_SLOTS);
    fill_nan(b->dead, HIST_SLOTS);
    hist.b[hist.nb++] = b;
    return b;
}

static struct hstage *find_stage(struct hbus *b, const char *name)
{
    for (int i = 0; i < b->nst; i++)
        if (strcmp(b->st[i]->name, name) == 0)
            return b->st[i];
    struct hstage **p = realloc(b->st, (size_t)(b->nst + 1) * sizeof *p);
    if (!p)
        return NULL;
    b->st = p;
    struct hstage *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    memset(s, 0, offsetof(struct hstage, v));
    snprintf(s->name, sizeof s->name, "%s", name);
    fill_nan(&s->v[0][0], HS_N * HIST_SLOTS);
    b->st[b->nst++] = s;
    return s;
}

static struct hlistener *find_listener(struct hbus *b, const char *addr)
{
    for (int i = 0; i < b->nls; i++)
        if (strcmp(b->ls[i]->addr, addr) == 0)
            return b->ls[i];
    struct hlistener **p = realloc(b->ls, (size_t)(b->nls + 1) * sizeof *p);
    if (!p)
        return NULL;
    b->ls = p;
    struct hlistener *l = malloc(sizeof *l);
    if (!l)
        return NULL;
    memset(l, 0, offsetof(struct hlistener, v));
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    fill_nan(&l->v[0][0], HL_N * HIST_SLOTS);
    b->ls[b->nls++] = l;
    return l;
}

static void apply_stage(struct hstage *h, const struct rstage *r, int slot,
                        double dt)
{
    h->seen = true;
    h->index = r->index;
    h->capacity = r->capacity;
    h->concurrency = r->concurrency;
    for (int k = 0; k < HS_RATES; k++)
        h->v[k][slot] = rate(r->counter[k], &h->prev[k], h->primed, dt);
    for (int k = 0; k < 4; k++)
        h->v[HS_DEPTH + k][slot] = (float)r->level[k];
    /* The shedding level at the sample; at least 1 when new itineraries
     * were refused at the door for this stage during the second
     * (shedding comes and goes within a second: the level alone would
     * miss most of it).  Not its `shed`, which counts refusals at its
     * door for a later stage too. */
    if (h->v[HS_DOOR][slot] > 0 && !(h->v[HS_SHEDDING][slot] >= 1))
        h->v[HS_SHEDDING][slot] = 1;
    for (int k = 0; k < 2; k++) {
        float v = NAN;
        if (r->hok[k]) {
            if (h->primed)
                v = p99_of(h->hprev[k], r->cum[k]);
            memcpy(h->hprev[k], r->cum[k], sizeof h->hprev[k]);
        }
        h->v[HS_SOJOURN_P99 + k][slot] = v;
    }
    h->primed = true;
}

static void apply_listener(struct hlistener *h, const struct rlistener *r,
                           int slot, double dt)
{
    h->seen = true;
    for (int k = 0; k < HL_RATES; k++)
        h->v[k][slot] = rate(r->counter[k], &h->prev[k], h->primed, dt);
    h->v[HL_P99][slot] = (float)r->p99;
    h->primed = true;
}

/* Drop what was not seen at this sample (a stage, listener or bus gone). */
static void sweep(void)
{
    int k = 0;
    for (int i = 0; i < hist.nb; i++) {
        struct hbus *b = hist.b[i];
        if (!b->seen) {
            for (int j = 0; j < b->nst; j++)
                free(b->st[j]);
            for (int j = 0; j < b->nls; j++)
                free(b->ls[j]);
            free(b->st);
            free(b->ls);
            free(b);
            continue;
        }
        int m = 0;
        for (int j = 0; j < b->nst; j++) {
            if (b->st[j]->seen)
                b->st[m++] = b->st[j];
            else
                free(b->st[j]);
        }
        b->nst = m;
        m = 0;
        for (int j = 0; j < b->nls; j++) {
            if (b->ls[j]->seen)
                b->ls[m++] = b->ls[j];
            else
                free(b->ls[j]);
        }
        b->nls = m;
        hist.b[k++] = b;
    }
    hist.nb = k;
}

static int by_index(const void *a, const void *b)
{
    const struct hstage *x = *(struct hstage *const *)a;
    const struct hstage *y = *(struct hstage *const *)b;
    return (x->index > y->index) - (x->index < y->index);
}

static int by_addr(const void *a, const void *b)
{
    return strcmp((*(struct hlistener *const *)a)->addr,
                  (*(struct hlistener *const *)b)->addr);
}

/* Write the reading rd, taken at monotonic time mono and wall-clock time
 * wall, into the next slot.  hist.mu held. */
static void apply(const struct reading *rd, double mono, double wall)
{
    double dt = hist.n ? mono - hist.mono : 0;
    int slot = hist.head;
    hist.t[slot] = wall;
    hist.mono = mono;
    for (int i = 0; i < hist.nb; i++) {
        struct hbus *b = hist.b[i];
        b->seen = false;
        for (int j = 0; j < b->nst; j++)
            b->st[j]->seen = false;
        for (int j = 0; j < b->nls; j++)
            b->ls[j]->seen = false;
    }
    for (int i = 0; i < rd->nb; i++) {
        const struct rbus *r = &rd->b[i];
        struct hbus *b = find_bus(r->name);
        if (!b || b->seen)
            continue;                   /* out of memory; a name twice */
        b->seen = true;
        b->index = r->index;
        b->completed[slot] = rate(r->completed, &b->prev_completed,
                                  b->primed, dt);
        b->dead[slot] = rate(r->dead, &b->prev_dead, b->primed, dt);
        b->primed = true;
        for (int j = 0; j < r->nst; j++) {
            struct hstage *h = find_stage(b, r->st[j].name);
            if (h)
                apply_stage(h, &r->st[j], slot, dt);
        }
        for (int j = 0; j < r->nls; j++) {
            struct hlistener *h = find_listener(b, r->ls[j].addr);
            if (h)
                apply_listener(h, &r->ls[j], slot, dt);
        }
    }
    sweep();
    for (int i = 0; i < hist.nb; i++) {
        struct hbus *b = hist.b[i];
        /* (an empty list's pointer may be NULL, which qsort must not
         * be given) */
        if (b->nst > 1)
            qsort(b->st, (size_t)b->nst, sizeof *b->st, by_index);
        if (b->nls > 1)
            qsort(b->ls, (size_t)b->nls, sizeof *b->ls, by_addr);
    }
    hist.head = (slot + 1) % HIST_SLOTS;
    if (hist.n < HIST_SLOTS)
        hist.n++;
}

/* ---- the samplers' side ---- */

int cli_history_due(double mono)
{
    pthread_mutex_lock(&hist.mu);
    double next = hist.next;
    pthread_mutex_unlock(&hist.mu);
    if (mono >= next)
        return 0;
    double ms = (next - mono) * 1000.0;
    return ms > 1000 ? 1000 : (int)ms + 1;
}

void cli_history_tick(lua_State *L, double mono)
{
    pthread_mutex_lock(&hist.mu);
    bool due = mono >= hist.next;
    if (due)        /* every second on the second of the first sample;
                     * after a stall, a second from now */
        hist.next = hist.next + 1.0 > mono ? hist.next + 1.0 : mono + 1.0;
    pthread_mutex_unlock(&hist.mu);
    if (!due)
        return;
    if (hist.le[0] == 0)
        for (int i = 0; i < HIST_BOUNDS; i++)    /* 10 us .. 100 s */
            hist.le[i] = 1e-5 * pow(10.0, 7.0 * i / (HIST_BOUNDS - 1));
    /* Read with no lock of ours held (Lua runs: stats() and histogram()
     * take the observer's and the buses' locks), then write. */
    struct reading rd = { 0 };
    int top = lua_gettop(L);
    lua_pushcfunction(L, read_all);
    lua_pushlightuserdata(L, &rd);
    bool ok = lua_pcall(L, 1, 0, 0) == LUA_OK;
    lua_settop(L, top);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* to the millisecond: what /history.json writes, so that a since=
     * given back from it compares equal */
    double wall = round(((double)ts.tv_sec + (double)ts.tv_nsec / 1e9) *
                        1000.0) / 1000.0;
    if (ok) {
        pthread_mutex_lock(&hist.mu);
        apply(&rd, mono, wall);
        pthread_mutex_unlock(&hist.mu);
    }
    reading_free(&rd);
}

void cli_history_free(void)
{
    pthread_mutex_lock(&hist.mu);
    for (int i = 0; i < hist.nb; i++)
        hist.b[i]->seen = false;
    sweep();
    free(hist.b);
    hist.b = NULL;
    hist.n = hist.head = 0;
    hist.next = 0;
    pthread_mutex_unlock(&hist.mu);
}

/* ---- reading ---- */

/* The slot of the i-th oldest sample (0 <= i < hist.n). */
static int slot_of(int i)
{
    return (hist.head - hist.n + i + HIST_SLOTS) % HIST_SLOTS;
}

static void add_s(struct cli_jbuf *j, const char *s)
{
    cli_json_add(j, s, strlen(s));
}

static void add_num(struct cli_jbuf *j, double v, const char *fmt)
{
    char buf[40];
    if (isnan(v) || isinf(v))
        add_s(j, "null");
    else {
        snprintf(buf, sizeof buf, fmt, v);
        add_s(j, buf);
    }
}

/* "key":[v, ...] over slots first..hist.n-1. */
static void add_series(struct cli_jbuf *j, const char *key, const float *v,
                       int first)
{
    cli_json_string(j, key, strlen(key));
    add_s(j, ":[");
    for (int i = first; i < hist.n; i++) {
        if (i > first)
            add_s(j, ",");
        add_num(j, v[slot_of(i)], "%.6g");
    }
    add_s(j, "]");
}

int cli_history_json(struct cli_jbuf *j, double since)
{
    pthread_mutex_lock(&hist.mu);
    int first = 0;
    while (first < hist.n && !(hist.t[slot_of(first)] > since))
        first++;
    char head[160];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(head, sizeof head, "{\"time\":%.3f,\"interval\":1,"
             "\"slots\":%d,\"t\":[", (double)ts.tv_sec +
             (double)ts.tv_nsec / 1e9, HIST_SLOTS);
    add_s(j, head);
    for (int i = first; i < hist.n; i++) {
        if (i > first)
            add_s(j, ",");
        add_num(j, hist.t[slot_of(i)], "%.3f");
    }
    add_s(j, "],\"buses\":[");
    for (int bi = 0; bi < hist.nb; bi++) {
        struct hbus *b = hist.b[bi];
        add_s(j, bi ? ",{\"name\":" : "{\"name\":");
        cli_json_string(j, b->name, strlen(b->name));
        snprintf(head, sizeof head, ",\"index\":%d,", b->index);
        add_s(j, head);
        add_series(j, "completed", b->completed, first);
        add_s(j, ",");
        add_series(j, "dead_lettered", b->dead, first);
        add_s(j, ",\"stages\":[");
        for (int si = 0; si < b->nst; si++) {
            struct hstage *s = b->st[si];
            add_s(j, si ? ",{\"name\":" : "{\"name\":");
            cli_json_string(j, s->name, strlen(s->name));
            add_s(j, ",\"capacity\":");
            add_num(j, s->capacity, "%.0f");
            add_s(j, ",\"concurrency\":");
            add_num(j, s->concurrency, "%.0f");
            for (int k = 0; k < HS_N; k++) {
                add_s(j, ",");
                add_series(j, stage_series[k], s->v[k], first);
            }
            add_s(j, "}");
        }
        add_s(j, "],\"listeners\":[");
        for (int li = 0; li < b->nls; li++) {
            struct hlistener *l = b->ls[li];
            add_s(j, li ? ",{\"address\":" : "{\"address\":");
            cli_json_string(j, l->addr, strlen(l->addr));
            for (int k = 0; k < HL_N; k++) {
                add_s(j, ",");
                add_series(j, listener_series[k], l->v[k], first);
            }
            add_s(j, "}");
        }
        add_s(j, "]}");
    }
    add_s(j, "]}");
    pthread_mutex_unlock(&hist.mu);
    return j->oom ? -1 : 0;
}

int cli_history_series(const char *bus, const char *stage,
                       const char *series, float *out, int n)
{
    int k = 0;
    while (k < HS_N && strcmp(stage_series[k], series) != 0)
        k++;
    if (k == HS_N)
        return -1;
    pthread_mutex_lock(&hist.mu);
    int got = -1;
    for (int bi = 0; bi < hist.nb && got < 0; bi++) {
        if (strcmp(hist.b[bi]->name, bus) != 0)
            continue;
        for (int si = 0; si < hist.b[bi]->nst; si++) {
            struct hstage *s = hist.b[bi]->st[si];
            if (strcmp(s->name, stage) != 0)
                continue;
            got = n < hist.n ? n : hist.n;
            for (int i = 0; i < got; i++)
                out[i] = s->v[k][slot_of(hist.n - got + i)];
            break;
        }
    }
    pthread_mutex_unlock(&hist.mu);
    return got;
}
