/* SPDX-License-Identifier: MIT */
/*
 * lstage_reload.c -- a stage's new code while the bus runs:
 * bus:reload([stage]), and the way back when a worker cannot load what
 * the reload validated (seda__l_stage_load_failed).
 *
 * DESIGN
 *   bus:reload re-reads the files, validates them the same way and, only
 *   if all are good, swaps the sources and bumps the stage's version and
 *   code generation (release); workers pick the new code up before their
 *   next envelope.  A reload is all or nothing: the validation runs the
 *   code (top level and init) in a state made as each worker's is, one
 *   per worker index (seda.worker = 0 .. workers-1, and a loan thread's
 *   1024), so an init that fails on a worker fails the reload, with the
 *   version unchanged.  Should a worker still fail to load code that
 *   passed (an init that depends on more than its index), it reports
 *   back and every worker goes back to the code before (the previous
 *   code is kept for that), with the version and last_error saying so.
 *   Stages are declared in lstage.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lseda.h"

/* Re-read and validate every file of ls; on success install the new code
 * and bump the version.  Returns 0, or -1 with err. */
static int reload_stage(struct lbus *lb, struct lstage *ls, char *err,
                        size_t errlen)
{
    struct lsrc *fresh = calloc((size_t)(ls->nsrc ? ls->nsrc : 1),
                                sizeof *fresh);
    if (!fresh) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&ls->mu);
    for (int i = 0; i < ls->nsrc && rc == 0; i++) {
        const struct lsrc *s = &ls->src[i];
        fresh[i].binary = s->binary;
        fresh[i].chunkname = strdup(s->chunkname);
        fresh[i].path = s->path ? strdup(s->path) : NULL;
        if (s->path) {
            fresh[i].code = seda__l_stage_read_file(s->path, &fresh[i].len);
            if (!fresh[i].code) {
                snprintf(err, errlen, "cannot read '%s'", s->path);
                rc = -1;
            }
        } else if ((fresh[i].code = malloc(s->len ? s->len : 1))) {
            memcpy(fresh[i].code, s->code, s->len);
            fresh[i].len = s->len;
        }
        if (rc == 0 && (!fresh[i].code || !fresh[i].chunkname)) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    /* The admit rule is reloaded with the handlers (a file is re-read). */
    struct lsrc *admit = NULL;
    if (rc == 0 && ls->admit &&
        !(admit = seda__l_admit_src_copy(ls->admit, true))) {
        snprintf(err, errlen, ls->admit->path ? "admit: cannot read '%s'"
                                              : "admit: out of memory",
                 ls->admit->path);
        rc = -1;
    }
    pthread_mutex_unlock(&ls->mu);
    for (int i = 0; i < ls->nsrc && rc == 0; i++)
        rc = seda__l_worker_validate(lb, &fresh[i], err, errlen);
    if (rc == 0 && admit &&
        seda__l_worker_validate_admit(lb, admit, err, errlen) != 0) {
        char e2[2048];
        snprintf(e2, sizeof e2, "%s", err);
        snprintf(err, errlen, "admit: %.2000s", e2);
        rc = -1;
    }
    struct lsrc *drop = fresh;
    pthread_mutex_lock(&ls->mu);
    free(ls->last_error);
    ls->last_error = NULL;
    if (rc == 0) {
        /* The code replaced is kept: a worker that cannot load the new
         * one (what validation could not foresee) takes every worker
         * back to it (seda__l_stage_load_failed). */
        drop = ls->prev;
        ls->prev = ls->src;
        ls->prev_version = ls->version;
        ls->src = fresh;
        if (admit) {
            struct lsrc *a = ls->admit;
            ls->admit = admit;
            admit = a;
            /* Release: pairs with the acquire in ladmit.c's push_rule. */
            atomic_fetch_add_explicit(&ls->admit_version, 1,
                                      memory_order_release);
        }
        /* Monotonic: a version number names one code, even after a roll
         * back (the next reload gets a number never used). */
        ls->version = ++ls->max_version;
        ls->reloads++;
        /* Release: pairs with the acquire in lbatch.c. */
        atomic_fetch_add_explicit(&ls->gen, 1, memory_order_release);
    } else {
        ls->last_error = strdup(err);
    }
    pthread_mutex_unlock(&ls->mu);
    seda__l_stage_src_free(drop, ls->nsrc);
    seda__l_admit_src_free(admit);
    return rc;
}

void seda__l_stage_load_failed(struct lstage *ls, uint64_t gen, int index,
                               const char *msg)
{
    char buf[1400];
    struct lsrc *drop = NULL;
    bool said = true;
    pthread_mutex_lock(&ls->mu);
    if (atomic_load_explicit(&ls->gen, memory_order_relaxed) != gen) {
        said = false;           /* changed meanwhile: nothing to undo */
    } else if (ls->prev) {
        snprintf(buf, sizeof buf, "worker %d could not load version %llu "
                 "(%s): every worker went back to version %llu", index,
                 (unsigned long long)ls->version, msg,
                 (unsigned long long)ls->prev_version);
        drop = ls->src;
        ls->src = ls->prev;
        ls->prev = NULL;
        ls->version = ls->prev_version;
        /* Release: pairs with the acquires in lbatch.c. */
        atomic_fetch_add_explicit(&ls->gen, 1, memory_order_release);
    } else {
        snprintf(buf, sizeof buf, "worker %d cannot load handler: %s",
                 index, msg);
    }
    if (said) {
        free(ls->last_error);
        ls->last_error = strdup(buf);
    }
    pthread_mutex_unlock(&ls->mu);
    seda__l_stage_src_free(drop, ls->nsrc);
    if (said)
        seda_stage_report(ls->st, buf);
}

int seda__l_stage_reload(lua_State *L)
{
    struct lbusud *u = seda__l_check_bus(L);
    struct lbus *lb = u->lb;
    const char *name = luaL_optstring(L, 2, NULL);
    char err[2048];
    bool found = false;
    struct lstage *ls;
    for (int i = 0; (ls = seda__l_stage_nth(lb, i)) != NULL; i++) {
        const char *sn = seda_stage_name(ls->st);
        if (name && strcmp(name, sn) != 0)
            continue;
        found = true;
        if (reload_stage(lb, ls, err, sizeof err) != 0) {
            lua_pushboolean(L, 0);
            lua_pushfstring(L, "stage '%s': %s", sn, err);
            return 2;
        }
    }
    if (name && !found) {
        /* The reason publish and stats give for an unknown stage. */
        lua_pushboolean(L, 0);
        lua_pushliteral(L, "no_such_stage");
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}
