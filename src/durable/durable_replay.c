/* SPDX-License-Identifier: MIT */
/*
 * durable_replay.c -- a durable stage's restart: seda_stage_replay
 * requeues the stage's journaled rows in key (publish) order, setting
 * malformed rows aside in the quarantine, and seda_bus_journal_orphans
 * lists the rows of stages the bus does not declare.  durable.c has the
 * design and the rest of the glue between the bus and its journal.
 */
#include <stdio.h>
#include <string.h>

#include "core/door.h"
#include "core/store.h"
#include "journal.h"

static struct seda_journal *journal_of(struct seda_stage_s *st)
{
    return seda__bus_store(seda__stage_bus(st));
}

/* ---- replay ---- */

/* Malformed rows named one by one on stderr; the rest are counted in
 * the summary. */
#define QUARANTINE_SAID 3

struct replay_ctx {
    struct seda_stage_s *st;
    seda_env_t **envs;
    int n, cap;
    int quarantined;            /* malformed rows set aside */
    int delayed;                /* retries not yet due among envs */
    int rc;
};

/* Split a blob of NUL-terminated strings into *out (seda__malloc'd, the
 * pointers into blob).  Returns the count, or -1 with why set (the blob
 * does not end in NUL), or -2 when out of memory. */
static int split_blob(const char *blob, size_t len, const char ***out,
                      char *why, size_t whylen, const char *what)
{
    *out = NULL;
    if (!blob || len == 0)
        return 0;
    if (blob[len - 1] != '\0') {
        snprintf(why, whylen, "%s blob (%zu bytes) does not end in NUL",
                 what, len);
        return -1;
    }
    int n = 0;
    for (size_t i = 0; i < len; i++)
        n += blob[i] == '\0';
    const char **a = seda__malloc(sizeof *a * (size_t)n);
    if (!a)
        return -2;
    int k = 0;
    for (const char *p = blob; p < blob + len; p += strlen(p) + 1)
        a[k++] = p;
    *out = a;
    return n;
}

/* Check a journal row before it becomes an envelope again.  Returns 0,
 * 1 (malformed: why says what is wrong), or SEDA_ENOMEM. */
static int parse_row(const seda_jrec *rec, const char ***hk, int *nh,
                     const char ***sl, int *ns, char *why, size_t whylen)
{
    *hk = *sl = NULL;
    size_t idlen = rec->id ? strlen(rec->id) : 0;
    if (idlen >= SEDA_ID_MAX) {
        snprintf(why, whylen, "id is %zu bytes (at most %d)", idlen,
                 SEDA_ID_MAX - 1);
        return 1;
    }
    if (rec->attempts < 0 || rec->attempts > 65535) {
        snprintf(why, whylen, "attempts %d out of range", rec->attempts);
        return 1;
    }
    if (rec->kind < 0 || rec->kind > 255) {
        snprintf(why, whylen, "payload kind %d out of range", rec->kind);
        return 1;
    }
    if (rec->plen > UINT32_MAX) {
        snprintf(why, whylen, "payload of %zu bytes", rec->plen);
        return 1;
    }
    *nh = split_blob(rec->headers, rec->hlen, hk, why, whylen, "headers");
    if (*nh >= 0 && *nh % 2 != 0) {
        snprintf(why, whylen, "headers blob holds %d strings, not key/value "
                 "pairs", *nh);
        *nh = -1;
    }
    if (*nh >= 0)
        *ns = split_blob(rec->slip, rec->slen, sl, why, whylen, "slip");
    if (*nh == -2 || (*nh >= 0 && *ns == -2))
        return SEDA_ENOMEM;
    if (*nh < 0 || *ns < 0)
        return 1;
    for (int i = 0; i < *ns; i++) {
        if (!seda__valid_name((*sl)[i])) {
            snprintf(why, whylen, "slip[%d] (\"%.40s\") is not a stage name",
                     i + 1, (*sl)[i]);
            return 1;
        }
    }
    for (int i = 0; i < *nh; i += 2) {
        if (!(*hk)[i][0]) {
            snprintf(why, whylen, "header %d has an empty key", i / 2 + 1);
            return 1;
        }
    }
    return 0;
}

/* Set a malformed row aside (the quarantine table), and say so.  Returns
 * 0, or the journal's error. */
static int quarantine(struct replay_ctx *c, const seda_jrec *rec,
                      const char *why)
{
    seda_jop op = { .op = SEDA_JOP_QUARANTINE, .reason = why };
    op.rec.key = rec->key;
    int rc = seda__journal_apply(journal_of(c->st), &op, 1);
    if (c->quarantined < QUARANTINE_SAID || rc != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "replay: journal row %lld (id "
                 "\"%.40s%s\") is malformed: %s; %s", (long long)rec->key,
                 rec->id ? rec->id : "",
                 rec->id && strlen(rec->id) > 40 ? "..." : "", why,
                 rc == 0 ? "quarantined" : "could not quarantine it");
        seda_stage_report(c->st, msg);
    }
    if (rc == 0)
        c->quarantined++;
    return rc;
}

static int replay_one(const seda_jrec *rec, void *ud)
{
    struct replay_ctx *c = ud;
    const char **hk, **sl;
    int nh = 0, ns = 0;
    char why[256];
    int rc = parse_row(rec, &hk, &nh, &sl, &ns, why, sizeof why);
    seda_env_t *env = NULL;
    if (rc == 0) {
        seda_publish_opts o;
        seda_publish_opts_init(&o);
        o.sender = rec->sender;
        o.headers = hk;
        o.nheaders = nh / 2;
        o.slip = sl;
        o.nslip = ns;
        o.kind = rec->kind;
        o.id = rec->id && *rec->id ? rec->id : NULL;
        env = seda__env_new(rec->payload, rec->plen, &o, &rc);
        if (!env && rc == SEDA_EINVAL) {
            snprintf(why, sizeof why, "not a valid envelope");
            rc = 1;
        } else if (!env) {
            rc = rc ? rc : SEDA_ENOMEM;
        }
    }
    seda__free(hk);
    seda__free(sl);
    if (rc == 1) {
        rc = quarantine(c, rec, why);
        if (rc == 0)
            return 0;
    }
    if (rc == 0 && seda__env_set_jkey(env, rec->key) != 0)
        rc = SEDA_ENOMEM;
    if (rc == 0 && c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 64;
        seda_env_t **a = seda__realloc(c->envs, sizeof *a * (size_t)cap);
        if (a) {
            c->envs = a;
            c->cap = cap;
        } else {
            rc = SEDA_ENOMEM;
        }
    }
    if (rc != 0) {
        seda__env_free(env);
        c->rc = rc;
        return 1;
    }
    env->attempts = (uint16_t)(rec->attempts > 0 ? rec->attempts : 1);
    env->flags |= ENV_REPLAYED;
    if (rec->due_wall > 0) {
        /* A retry whose backoff had not run out: the rest of it, from
         * now (a due time in the past is due now). */
        double left = rec->due_wall - seda__journal_wall();
        if (left > 0) {
            env->ext->due = seda__now_ns() + seda__secs_to_ns(left);
            c->delayed++;
        }
    }
    c->envs[c->n++] = env;
    return 0;
}

int seda_stage_replay(seda_stage_t *st)
{
    if (!seda__stage_durability(st))
        return 0;
    struct seda_journal *j = journal_of(st);
    if (!j)
        return SEDA_EINVAL;
    struct replay_ctx c = { .st = st };
    int rc = seda__journal_replay(j, seda_stage_name(st), replay_one, &c);
    if (rc == 0)
        rc = c.rc;
    if (rc == 0 && c.n > 0)
        seda__bus_replay_begins(seda__stage_bus(st));
    int later = 0;
    if (rc == 0 && c.delayed > 0) {
        /* Retries not yet due wait out the rest of their backoff on a
         * timer; the others are queued now, in journal order (a timer
         * that cannot be set leaves its envelope among them). */
        int k = 0;
        for (int i = 0; i < c.n; i++) {
            seda_env_t *e = c.envs[i];
            if (e->ext->due && seda__route_requeue_later(st, e) == 0)
                later++;
            else
                c.envs[k++] = e;
        }
        c.n = k;
    }
    if (rc == 0)
        rc = seda__stage_requeue_front(st, c.envs, c.n);
    if (c.quarantined > 0) {
        char line[512];
        snprintf(line, sizeof line, "replay: %d malformed journal row%s "
                 "quarantined, %d envelope%s replayed (seda-lua dlq %s "
                 "quarantine lists them)", c.quarantined,
                 c.quarantined == 1 ? "" : "s", rc == 0 ? c.n + later : 0,
                 rc == 0 && c.n + later == 1 ? "" : "s",
                 seda__bus_data_dir(seda__stage_bus(st)));
        seda_log_write(SEDA_LOG_WARN, seda_stage_name(st), line);
    }
    if (rc != 0) {
        for (int i = 0; i < c.n; i++)
            seda__env_free(c.envs[i]);
        seda__free(c.envs);
        return rc < 0 ? rc : SEDA_EIO;
    }
    seda__free(c.envs);
    return c.n + later;
}

/* ---- rows for stages the bus does not declare ---- */

struct orphans {
    seda_bus_t *bus;
    struct { char name[SEDA_NAME_MAX + 1]; long long n; } *v;
    int n, cap;
    bool oom;
};

static int orphan_row(const seda_jrec *rec, void *ud)
{
    struct orphans *o = ud;
    if (!rec->stage || seda_bus_stage(o->bus, rec->stage))
        return 0;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->v[i].name, rec->stage) == 0) {
            o->v[i].n++;
            return 0;
        }
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 8;
        void *nv = seda__realloc(o->v, sizeof *o->v * (size_t)cap);
        if (!nv) {
            o->oom = true;
            return 1;
        }
        o->v = nv;
        o->cap = cap;
    }
    snprintf(o->v[o->n].name, sizeof o->v[o->n].name, "%s", rec->stage);
    o->v[o->n++].n = 1;
    return 0;
}

int seda_bus_journal_orphans(seda_bus_t *b,
                             void (*cb)(const char *stage, long long rows,
                                        void *ud),
                             void *ud)
{
    struct seda_journal *j = seda__bus_store(b);
    if (!j || !cb)
        return j ? SEDA_EINVAL : 0;
    struct orphans o = { .bus = b };
    int rc = seda__journal_scan(j, "WHERE done_at IS NULL", NULL, orphan_row,
                                &o);
    if (rc == 0 && o.oom)
        rc = SEDA_ENOMEM;
    for (int i = 0; rc == 0 && i < o.n; i++)
        cb(o.v[i].name, o.v[i].n, ud);
    seda__free(o.v);
    return rc < 0 ? rc : 0;
}
