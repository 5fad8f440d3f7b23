/* SPDX-License-Identifier: MIT */
/*
 * recorder.c -- the latency recorder: per-slot sample arrays (one slot per
 * pool worker plus one for other threads), exact nearest-rank percentiles
 * by selection after the clock, and `benchrec`, the recorder as Lua
 * handlers see it.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "harness.h"
#include "seda_lua.h"

/* ---- latency recorder ---- */

/* Samples per slot (1 GiB virtual, touched only as far as used): a C
 * consumer at 25 M/s fills 100 M in a 4 s window.  Past it the row says
 * samples_truncated. */
#define REC_CAP ((size_t)256 << 20)

static struct rec_slot g_slot[REC_SLOTS];

int rec_init(void)
{
    for (int i = 0; i < REC_SLOTS; i++) {
        void *p = mmap(NULL, REC_CAP * sizeof(float), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return -1;
        g_slot[i].v = p;
        g_slot[i].cap = REC_CAP;
        g_slot[i].n = 0;
    }
    return 0;
}

void rec_reset(void)
{
    for (int i = 0; i < REC_SLOTS; i++) {
        if (g_slot[i].n) {
            /* Never past the mapping: n keeps counting beyond cap. */
            size_t n = g_slot[i].n < g_slot[i].cap ? g_slot[i].n
                                                   : g_slot[i].cap;
            size_t bytes = n * sizeof(float);
            bytes = (bytes + 4095) & ~(size_t)4095;
            madvise(g_slot[i].v, bytes, MADV_DONTNEED);
        }
        g_slot[i].n = 0;
    }
}

void rec_add(double seconds)
{
    int w = seda_worker_index();
    struct rec_slot *s = &g_slot[w >= 0 && w < REC_SLOTS - 1 ? w
                                                             : REC_SLOTS - 1];
    if (s->n < s->cap)
        s->v[s->n] = (float)(seconds * 1e6);
    s->n++;
}

size_t rec_dump(FILE *f)
{
    size_t total = 0;
    for (int i = 0; i < REC_SLOTS; i++) {
        size_t n = g_slot[i].n < g_slot[i].cap ? g_slot[i].n : g_slot[i].cap;
        total += fwrite(g_slot[i].v, sizeof(float), n, f);
    }
    return total;
}

size_t rec_count(void)
{
    size_t n = 0;
    for (int i = 0; i < REC_SLOTS; i++)
        n += g_slot[i].n;
    return n;
}

/* Rearrange v[lo..hi] so that v[k] holds the value a sort would put there,
 * with nothing larger before it and nothing smaller after it. */
static void select_k(float *v, size_t lo, size_t hi, size_t k)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        float a = v[lo], b = v[mid], c = v[hi];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a))
                            : (a < c ? a : (b < c ? c : b));
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return;
    }
}

void rec_latency(struct latency *out)
{
    memset(out, 0, sizeof *out);
    size_t n = 0;
    for (int i = 0; i < REC_SLOTS; i++) {
        size_t m = g_slot[i].n;
        if (m > g_slot[i].cap) {
            m = g_slot[i].cap;
            out->truncated = true;
        }
        n += m;
    }
    out->n = n;
    if (n == 0)
        return;
    float *all = malloc(n * sizeof *all);
    if (!all) {
        fprintf(stderr, "bench: out of memory merging latencies\n");
        return;
    }
    size_t at = 0;
    for (int i = 0; i < REC_SLOTS; i++) {
        size_t m = g_slot[i].n < g_slot[i].cap ? g_slot[i].n : g_slot[i].cap;
        memcpy(all + at, g_slot[i].v, m * sizeof *all);
        at += m;
    }
    size_t k999 = (size_t)floor(0.999 * (double)(n - 1));
    size_t k99 = (size_t)floor(0.99 * (double)(n - 1));
    size_t k50 = (size_t)floor(0.5 * (double)(n - 1));
    float mx = all[0];
    for (size_t i = 1; i < n; i++)
        if (all[i] > mx)
            mx = all[i];
    select_k(all, 0, n - 1, k999);
    select_k(all, 0, k999, k99);
    select_k(all, 0, k99, k50);
    out->p50 = all[k50];
    out->p99 = all[k99];
    out->p999 = all[k999];
    out->max = mx;
    free(all);
}

void row_latency(struct row *r, const struct latency *l)
{
    row_num(r, "p50_us", l->p50, 2);
    row_num(r, "p99_us", l->p99, 2);
    row_num(r, "p999_us", l->p999, 2);
    row_num(r, "max_us", l->max, 2);
}

/* ---- benchrec: the recorder as seen from Lua handlers ---- */

static int l_rec(lua_State *L)
{
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    double ts;
    if (!s || len < sizeof ts)
        return luaL_error(L, "benchrec.rec: payload is not a timestamp");
    memcpy(&ts, s, sizeof ts);
    rec_add(seda_now() - ts);
    return 0;
}

static int l_rec_ts(lua_State *L)
{
    double ts = luaL_checknumber(L, 1);
    rec_add(seda_now() - ts);
    return 0;
}

int luaopen_benchrec(lua_State *L)
{
    static const luaL_Reg f[] = {
        { "rec", l_rec },
        { "rec_ts", l_rec_ts },
        { NULL, NULL }
    };
    luaL_newlib(L, f);
    return 1;
}
