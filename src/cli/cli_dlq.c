/* SPDX-License-Identifier: MIT */
/*
 * cli_dlq.c -- `seda-lua dlq DATA_DIR list|show ID|replay ID|purge|
 * quarantine`: inspect and replay the dead letters a stopped bus left in
 * its journal, and list the rows its replay quarantined; and
 * `seda-lua dlq --control PATH [list [STAGE]] [--json]`: the dead letters
 * the live buses of a running seda-lua keep (bus:dead_letters()), read
 * through its control socket (cli_dlq_live.c).
 *
 *   list        one line per dead letter (tab-separated, after a header
 *               line): id, stage, x-dead-from, x-dead-reason, attempts,
 *               payload bytes, row key, state (queued: waiting in its
 *               stage; done: its dead-letter stage is done with it, kept
 *               on disk) and the wall-clock publish time
 *   show ID     every dead letter whose envelope id is ID: row key, stage,
 *               state, sender, attempts, publish time (wall clock), headers,
 *               slip and the payload (raw bytes as an escaped string; a Lua
 *               value decoded with the payload codec, as the REPL prints
 *               it)
 *   replay ID   move every dead letter whose id is ID back to its
 *               x-dead-from stage (attempts 1, the x-dead-* headers
 *               removed, key and so replay order kept): the next process
 *               that creates that durable stage replays it
 *   purge       delete every dead letter (and nothing else)
 *   quarantine  one line per quarantined row (tab-separated, after a
 *               header line): row key, stage, reason, id, payload bytes
 *               -- rows a replay found malformed and set aside in the
 *               journal's quarantine table (see src/durable/journal.h)
 *
 * A dead letter is a journal row whose headers blob ("k\0v\0k\0v\0...")
 * has the key x-dead-reason.  The journal allows one user at a time: the
 * CLI opens it through seda__journal_open, which takes DATA_DIR/seda.lock,
 * so it works on a stopped bus's directory and says so when a running bus
 * holds it.  Rows are read with seda__journal_scan and written with
 * seda__journal_apply (seda.db is an ordinary SQLite database, see
 * src/durable/journal.h, but the open journal holds it exclusively).
 *
 * Exit status: 0 done, 1 error (no journal, in use, no such dead letter,
 * I/O; live: cannot connect, not a seda-lua control socket, no such
 * stage), 2 usage.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "cli.h"
#include "durable/journal_admin.h"
#include "seda.h"
#include "seda_lua_admin.h"

static void dlq_usage(FILE *f)
{
    fprintf(f,
        "usage: seda-lua dlq --control SOCK [list [STAGE]] [--json]\n"
        "       seda-lua dlq DATA_DIR list\n"
        "       seda-lua dlq DATA_DIR show ID\n"
        "       seda-lua dlq DATA_DIR replay ID\n"
        "       seda-lua dlq DATA_DIR purge\n"
        "       seda-lua dlq DATA_DIR quarantine\n"
        "Inspect and replay the dead letters in the journal of a stopped "
        "bus\n"
        "(DATA_DIR is its seda.bus{data_dir = ...}).\n"
        "  list        one line per dead letter: id, stage, x-dead-from,\n"
        "              x-dead-reason, attempts (the one it died on,\n"
        "              x-dead-attempts), payload bytes, row key,\n"
        "              state (queued, or done: handled and kept), published\n"
        "  show ID     headers, slip, times and the payload (decoded) of the\n"
        "              dead letter(s) ID\n"
        "  replay ID   move dead letter(s) ID back to their x-dead-from "
        "stage;\n"
        "              the next bus that creates that durable stage replays "
        "them\n"
        "  purge       delete every dead letter (queued and done)\n"
        "  quarantine  rows a replay found malformed and set aside: key,\n"
        "              stage, reason, id, payload bytes (the rows, byte for\n"
        "              byte, are in the quarantine table of seda.db)\n"
        "Dead letters sent to a durable dead-letter stage stay on disk: while\n"
        "they wait there, and once its handler is done with them (done).\n"
        "\n"
        "--control SOCK reads a running seda-lua instead (the socket of its\n"
        "--control SOCK, as attach): the dead letters each stage of its live\n"
        "buses keeps (bus:dead_letters(), dead_letter_keep per stage), one\n"
        "tab-separated line each after a header line: BUS STAGE ID REASON\n"
        "DETAIL (the missing stage of no_such_stage, x-dead-detail) ATTEMPTS\n"
        "DEAD_AT (x-dead-at, UTC) ERROR (x-dead-error) PAYLOAD (a preview);\n"
        "newest first per bus.  list STAGE: that stage's only.  --json: one\n"
        "JSON document, as /dlq.json: {version, now, buses: [{name,\n"
        "dead_letters}]}.  Exit 1 when SOCK cannot be reached or is no\n"
        "seda-lua control socket, or no live bus has STAGE.\n");
}

/* ---- one row, owned copies ---- */

struct drow {
    int64_t key;
    char *stage, *id, *sender;
    int attempts, kind;
    unsigned char *hdr, *slip, *payload;
    size_t hlen, slen, plen;
    double published_at;        /* the bus's monotonic clock */
    double published_wall;      /* seconds since the epoch, 0 unknown */
    double done_at;             /* seconds since the epoch, 0 queued */
};

static void drow_free(struct drow *r)
{
    free(r->stage);
    free(r->id);
    free(r->sender);
    free(r->hdr);
    free(r->slip);
    free(r->payload);
    memset(r, 0, sizeof *r);
}

static char *dup_text(const unsigned char *s)
{
    return s ? strdup((const char *)s) : NULL;
}

static unsigned char *dup_blob(const void *p, int n, size_t *len)
{
    *len = n > 0 ? (size_t)n : 0;
    unsigned char *c = malloc(*len + 1);   /* +1: never malloc(0) */
    if (c && *len)
        memcpy(c, p, *len);
    return c;
}

/* The value of header key k in blob h[0..hlen), or NULL.  Keys sit at even
 * positions; a truncated final pair is ignored. */
/* Step through a header blob (key\0value\0 pairs): sets *key and *val to
 * the pair at *p and moves *p past it.  False at the end or at a
 * truncated pair. */
static bool hdr_next(const char **p, const char *end, const char **key,
                     const char **val)
{
    if (!*p || *p >= end)
        return false;
    const char *kz = memchr(*p, '\0', (size_t)(end - *p));
    if (!kz || kz + 1 >= end)
        return false;
    const char *vz = memchr(kz + 1, '\0', (size_t)(end - (kz + 1)));
    if (!vz)
        return false;
    *key = *p;
    *val = kz + 1;
    *p = vz + 1;
    return true;
}

static const char *hdr_get(const unsigned char *h, size_t hlen, const char *k)
{
    const char *p = (const char *)h, *end = p + hlen, *key, *val;
    while (hdr_next(&p, end, &key, &val))
        if (strcmp(key, k) == 0)
            return val;
    return NULL;
}

/* The attempt a dead letter died on (x-dead-attempts; its row counts
 * the attempts in its dead-letter stage, from 1), or the row's count for
 * one journaled without it. */
static int died_on(const struct drow *r)
{
    const char *a = hdr_get(r->hdr, r->hlen, "x-dead-attempts");
    char *end;
    long v = a ? strtol(a, &end, 10) : 0;
    return a && *a && !*end && v > 0 && v <= INT_MAX ? (int)v : r->attempts;
}

static bool is_dead(const struct drow *r)
{
    return r->hdr && hdr_get(r->hdr, r->hlen, "x-dead-reason") != NULL;
}

struct load {
    struct drow *rows;
    int n, cap;
    bool nomem;
};

/* seda__journal_scan callback: keep a copy of rec if it is dead. */
static int load_one(const seda_jrec *rec, void *ud)
{
    struct load *l = ud;
    struct drow r = { 0 };
    r.key = rec->key;
    r.stage = dup_text((const unsigned char *)rec->stage);
    r.id = dup_text((const unsigned char *)rec->id);
    r.attempts = rec->attempts;
    r.sender = dup_text((const unsigned char *)rec->sender);
    r.hdr = dup_blob(rec->headers, (int)rec->hlen, &r.hlen);
    r.slip = dup_blob(rec->slip, (int)rec->slen, &r.slen);
    r.kind = rec->kind;
    r.payload = dup_blob(rec->payload, (int)rec->plen, &r.plen);
    r.published_at = rec->published_at;
    r.published_wall = rec->published_wall;
    r.done_at = rec->done_at;
    if (!r.stage || !r.id || !r.hdr || !r.slip || !r.payload ||
        (rec->sender && !r.sender)) {
        drow_free(&r);
        l->nomem = true;
        return 1;
    }
    if (!is_dead(&r)) {
        drow_free(&r);
        return 0;
    }
    if (l->n == l->cap) {
        int c = l->cap ? l->cap * 2 : 16;
        struct drow *a = realloc(l->rows, sizeof *a * (size_t)c);
        if (!a) {
            drow_free(&r);
            l->nomem = true;
            return 1;
        }
        l->rows = a;
        l->cap = c;
    }
    l->rows[l->n++] = r;
    return 0;
}

/* Every dead letter (id == NULL) or the dead letters with that id, in key
 * order.  Returns 0 with *rows and *n (free with rows_free), or -1 after
 * printing the error. */
static int load_dead(struct seda_journal *j, const char *path,
                     const char *id, struct drow **rows, int *n)
{
    struct load l = { 0 };
    int rc = seda__journal_scan(j, id ? "WHERE id = ?1"
                                : "WHERE instr(headers, CAST('x-dead-reason'"
                                  " AS BLOB)) > 0", id, load_one, &l);
    if (rc == 0 && l.nomem)
        rc = -ENOMEM;
    if (rc != 0) {
        fprintf(stderr, "seda-lua dlq: %s: %s\n", path,
                rc == -ENOMEM ? "out of memory" : "cannot read the journal");
        for (int i = 0; i < l.n; i++)
            drow_free(&l.rows[i]);
        free(l.rows);
        return -1;
    }
    *rows = l.rows;
    *n = l.n;
    return 0;
}

static void rows_free(struct drow *rows, int n)
{
    for (int i = 0; i < n; i++)
        drow_free(&rows[i]);
    free(rows);
}

/* ---- printing ---- */

/* s[0..n) as a C-style escaped, quoted string. */
static void put_escaped(FILE *f, const unsigned char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c >= 0x20 && c < 0x7f)
                fputc(c, f);
            else
                fprintf(f, "\\x%02x", c);
        }
    }
    fputc('"', f);
}

static void put_cstr(FILE *f, const char *s)
{
    put_escaped(f, (const unsigned char *)s, strlen(s));
}

/* For list: a field made safe for a terminal (cli_term.c: controls,
 * tabs and newlines among them, shown \xNN), "-" when empty. */
static void put_field(FILE *f, const char *s)
{
    if (!s || !*s) {
        fputc('-', f);
        return;
    }
    cli_term_put(f, s, strlen(s), 0);
}

static void put_hex(FILE *f, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", p[i]);
}

/* A wall-clock time as ISO 8601 with milliseconds and the UTC offset,
 * or "-" when unknown. */
static void put_time(FILE *f, double t)
{
    if (!(t > 0)) {
        fputc('-', f);
        return;
    }
    time_t s = (time_t)t;
    struct tm tm;
    char buf[64], zone[16];
    localtime_r(&s, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(zone, sizeof zone, "%z", &tm);
    fprintf(f, "%s.%03d%s", buf, (int)((t - (double)s) * 1000), zone);
}

/* The payload of a Lua-encoded dead letter, decoded with the payload
 * codec and shown as the REPL shows values (lua/seda/pretty.lua), on
 * its own lines.  False when it cannot be decoded (msg says why). */
static bool put_lua_value(FILE *f, const unsigned char *p, size_t n,
                          char *msg, size_t msglen)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        snprintf(msg, msglen, "out of memory");
        return false;
    }
    luaL_openlibs(L);
    bool ok = false;
    size_t plen = (size_t)(cli_pretty_end - cli_pretty_src);
    if (luaL_loadbuffer(L, cli_pretty_src, plen, "=[seda-lua pretty]") !=
            LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        snprintf(msg, msglen, "%s", lua_tostring(L, -1));
    } else {
        lua_getfield(L, -1, "pretty");
        if (seda__codec_decode(L, p, n, msg, msglen) == 0 &&
            lua_pcall(L, 1, 1, 0) == LUA_OK) {
            fprintf(f, "%s", lua_tostring(L, -1));
            ok = true;
        } else if (lua_isstring(L, -1)) {
            snprintf(msg, msglen, "%s", lua_tostring(L, -1));
        }
    }
    lua_close(L);
    return ok;
}

static void show_row(FILE *f, const struct drow *r)
{
    fprintf(f, "key: %lld\nid: ", (long long)r->key);
    put_cstr(f, r->id);
    fputs("\nstage: ", f);
    put_cstr(f, r->stage);
    fputs("\nsender: ", f);
    if (r->sender)
        put_cstr(f, r->sender);
    else
        fputs("-", f);
    fputs("\nstate: ", f);
    if (r->done_at > 0) {
        fputs("done ", f);
        put_time(f, r->done_at);
        fputs(" (its dead-letter stage is done with it; kept on disk until "
              "purged)", f);
    } else {
        fputs("queued (delivered when a bus declares its stage)", f);
    }
    fprintf(f, "\nattempts: %d", r->attempts);
    if (hdr_get(r->hdr, r->hlen, "x-dead-attempts"))
        fprintf(f, " in its dead-letter stage; it died on attempt %d",
                died_on(r));
    fputs("\npublished: ", f);
    if (r->published_wall > 0)
        put_time(f, r->published_wall);
    else
        fputs("unknown (journaled before schema 2)", f);
    /* Wall-clock only: the publishing bus's monotonic clock (published_at,
     * what replay orders by) means nothing outside that process. */
    fputs("\nheaders:\n", f);
    const char *p = (const char *)r->hdr, *end = p + r->hlen, *k, *v;
    while (hdr_next(&p, end, &k, &v)) {
        fputs("  ", f);
        put_cstr(f, k);
        fputs(": ", f);
        put_cstr(f, v);
        fputc('\n', f);
    }
    fputs("slip:", f);
    p = (const char *)r->slip;
    end = p + r->slen;
    if (p >= end)
        fputs(" (empty)", f);
    while (p < end) {
        const char *z = memchr(p, '\0', (size_t)(end - p));
        size_t len = z ? (size_t)(z - p) : (size_t)(end - p);
        fputc(' ', f);
        put_escaped(f, (const unsigned char *)p, len);
        p += len + 1;
    }
    fprintf(f, "\nkind: %d\npayload: ", r->kind);
    char msg[256];
    if (r->kind == 0) {
        put_escaped(f, r->payload, r->plen);
    } else if (r->kind == 1) {
        fprintf(f, "(a Lua value, %zu bytes)\n", r->plen);
        if (!put_lua_value(f, r->payload, r->plen, msg, sizeof msg)) {
            fprintf(f, "<cannot decode it: %s> ", msg);
            put_hex(f, r->payload, r->plen);
        }
    } else {
        fprintf(f, "<encoded value, %zu bytes> ", r->plen);
        put_hex(f, r->payload, r->plen);
    }
    fputc('\n', f);
}


/* A usage error (exit 2): what is wrong, then the usage. */
__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("seda-lua dlq: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n", stderr);
    dlq_usage(stderr);
    return 2;
}

/* ---- commands ---- */

static int cmd_list(struct drow *rows, int n)
{
    printf("ID\tSTAGE\tFROM\tREASON\tATTEMPTS\tBYTES\tKEY\tSTATE\t"
           "PUBLISHED\n");
    for (int i = 0; i < n; i++) {
        const struct drow *r = &rows[i];
        put_field(stdout, r->id);
        putchar('\t');
        put_field(stdout, r->stage);
        putchar('\t');
        put_field(stdout, hdr_get(r->hdr, r->hlen, "x-dead-from"));
        putchar('\t');
        put_field(stdout, hdr_get(r->hdr, r->hlen, "x-dead-reason"));
        printf("\t%d\t%zu\t%lld\t%s\t", died_on(r), r->plen,
               (long long)r->key, r->done_at > 0 ? "done" : "queued");
        put_time(stdout, r->published_wall);
        putchar('\n');
    }
    return 0;
}

/* r's headers without the x-dead-* pairs, in a new blob. */
static unsigned char *strip_dead(const struct drow *r, size_t *len)
{
    unsigned char *out = malloc(r->hlen + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    const char *p = (const char *)r->hdr, *end = p + r->hlen, *k, *v;
    while (hdr_next(&p, end, &k, &v)) {
        size_t pair = (size_t)(p - k);
        if (strncmp(k, "x-dead-", 7) != 0) {
            memcpy(out + o, k, pair);
            o += pair;
        }
    }
    *len = o;
    return out;
}

/* A stage name as seda accepts one: 1-SEDA_NAME_MAX characters of
 * [A-Za-z0-9_.:-] (a header could say anything: "../../etc"). */
static bool stage_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SEDA_NAME_MAX)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' ||
              *p == ':' || *p == '-'))
            return false;
    return true;
}

static int cmd_replay(struct seda_journal *j, struct drow *rows, int n,
                      const char *id)
{
    if (n == 0) {
        fprintf(stderr, "seda-lua dlq: no dead letter with id '%s'\n", id);
        return 1;
    }
    seda_jop *ops = calloc((size_t)n, sizeof *ops);
    unsigned char **hdrs = calloc((size_t)n, sizeof *hdrs);
    int rc = ops && hdrs ? 0 : -ENOMEM;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct drow *r = &rows[i];
        const char *from = hdr_get(r->hdr, r->hlen, "x-dead-from");
        if (!from || !*from) {
            fputs("seda-lua dlq: dead letter '", stderr);
            put_field(stderr, r->id);
            fprintf(stderr, "' (key %lld) has no x-dead-from header: cannot "
                    "replay it\n", (long long)r->key);
            rc = -EINVAL;
            break;
        }
        if (!stage_name_ok(from)) {
            fputs("seda-lua dlq: dead letter '", stderr);
            put_field(stderr, r->id);
            fprintf(stderr, "' (key %lld): its x-dead-from '",
                    (long long)r->key);
            cli_term_put(stderr, from, strnlen(from, 80), 0);
            fputs("' is not a stage name: not replayed\n", stderr);
            rc = -EINVAL;
            break;
        }
        size_t hlen;
        hdrs[i] = strip_dead(r, &hlen);
        if (!hdrs[i]) {
            rc = -ENOMEM;
            break;
        }
        ops[i].op = SEDA_JOP_MOVE;
        ops[i].rec = (seda_jrec){
            .key = r->key,
            .stage = from,
            .id = r->id,
            .attempts = 1,
            .sender = r->sender,
            .headers = hdrs[i], .hlen = hlen,
            .slip = r->slip, .slen = r->slen,
            .kind = r->kind,
            .payload = r->payload, .plen = r->plen,
            .published_at = r->published_at,
        };
    }
    if (rc == 0)
        rc = seda__journal_apply(j, ops, n);
    if (rc == 0) {
        for (int i = 0; i < n; i++)
            printf("replayed %s (key %lld) -> %s\n", rows[i].id,
                   (long long)rows[i].key, ops[i].rec.stage);
    } else if (rc != -EINVAL) {
        fprintf(stderr, "seda-lua dlq: replay failed: %s\n", strerror(-rc));
    }
    for (int i = 0; hdrs && i < n; i++)
        free(hdrs[i]);
    free(hdrs);
    free(ops);
    return rc == 0 ? 0 : 1;
}

static int cmd_purge(struct seda_journal *j, struct drow *rows, int n)
{
    int rc = 0;
    if (n > 0) {
        seda_jop *ops = calloc((size_t)n, sizeof *ops);
        if (!ops) {
            fprintf(stderr, "seda-lua dlq: out of memory\n");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            ops[i].op = SEDA_JOP_DELETE;
            ops[i].rec.key = rows[i].key;
        }
        rc = seda__journal_apply(j, ops, n);
        free(ops);
    }
    if (rc != 0) {
        fprintf(stderr, "seda-lua dlq: purge failed: %s\n", strerror(-rc));
        return 1;
    }
    printf("purged %d dead letter%s\n", n, n == 1 ? "" : "s");
    return 0;
}

/* seda__journal_quarantined callback: one line per row. */
static int print_quarantined(const seda_jrec *rec, void *ud)
{
    int *n = ud;
    char id[SEDA_ID_MAX + 8];
    size_t idlen = strlen(rec->id);
    snprintf(id, sizeof id, "%.*s%s", SEDA_ID_MAX - 1, rec->id,
             idlen >= SEDA_ID_MAX ? "..." : "");
    printf("%lld\t", (long long)rec->key);
    put_field(stdout, rec->stage);
    putchar('\t');
    put_field(stdout, rec->reason);
    putchar('\t');
    put_field(stdout, id);
    printf("\t%zu\n", rec->plen);
    (*n)++;
    return 0;
}

static int cmd_quarantine(struct seda_journal *j, const char *path)
{
    int n = 0;
    printf("KEY\tSTAGE\tREASON\tID\tBYTES\n");
    int rc = seda__journal_quarantined(j, print_quarantined, &n);
    if (rc != 0) {
        fprintf(stderr, "seda-lua dlq: %s: cannot read the quarantine: "
                "%s\n", path, strerror(-rc));
        return 1;
    }
    return 0;
}

/* `seda-lua dlq --control SOCK [list [STAGE]] [--json]` (the options in
 * any place after "dlq") or `seda-lua dlq DATA_DIR ...`, which takes
 * neither option.  A bad combination is a usage error (2) naming what is
 * wrong. */
/* seda-lua dlq --control SOCK [list [STAGE]] [--json]: the live form;
 * pos[0..npos) are the words after the options. */
static int dlq_control(const char *sock, const char **pos, int npos,
                       bool json)
{
    if (npos == 0)
        return cli_dlq_live(sock, NULL, json);
    if (strcmp(pos[0], "list") != 0) {
        bool journal = strcmp(pos[0], "show") == 0 ||
                       strcmp(pos[0], "replay") == 0 ||
                       strcmp(pos[0], "purge") == 0 ||
                       strcmp(pos[0], "quarantine") == 0;
        if (journal)
            return usage_error("'%s' works on a stopped bus's journal "
                               "(seda-lua dlq DATA_DIR ...), not with "
                               "--control; a live process: list [STAGE]",
                               pos[0]);
        return usage_error("with --control the command is list "
                           "[STAGE], not '%s' (and no DATA_DIR: that "
                           "form reads a stopped bus's journal)", pos[0]);
    }
    if (npos > 2)
        return usage_error("list takes one STAGE at most ('%s' is one "
                           "too many)", pos[2]);
    if (npos == 2 && !stage_name_ok(pos[1]))
        return usage_error("'%s' is not a stage name (1-64 characters "
                           "of A-Z a-z 0-9 _ . : -)", pos[1]);
    return cli_dlq_live(sock, npos == 2 ? pos[1] : NULL, json);
}

/* Open DATA_DIR's journal for the dlq commands (never creating one);
 * 0, or 1 said on stderr.  *path is the journal file's (to free). */
static int dlq_open(const char *dir, struct seda_journal **j, char **path)
{
    size_t plen = strlen(dir) + sizeof "/" SEDA_JOURNAL_FILE;
    *path = malloc(plen);
    if (!*path) {
        fprintf(stderr, "seda-lua dlq: out of memory\n");
        return 1;
    }
    snprintf(*path, plen, "%s/%s", dir, SEDA_JOURNAL_FILE);
    struct stat sb;
    int rc = 0;
    char err[512];
    if (stat(*path, &sb) != 0) {
        int e = errno;
        fprintf(stderr, "seda-lua dlq: %s: no journal here (%s: %s)\n", dir,
                *path, strerror(e));
        rc = 1;
    } else if ((rc = seda__journal_open(dir, true, j, err, sizeof err)) ==
               -EBUSY) {
        fprintf(stderr, "seda-lua dlq: %s is in use by a running bus (stop "
                "it first)\n", dir);
    } else if (rc != 0) {
        fprintf(stderr, "seda-lua dlq: %s\n", err);
    }
    if (rc != 0) {
        free(*path);
        *path = NULL;
        return 1;
    }
    return 0;
}

/* seda-lua dlq DATA_DIR list|show ID|replay ID|purge|quarantine. */
static int dlq_journal(const char **pos, int npos)
{
    if (npos == 0) {
        dlq_usage(stderr);
        return 2;
    }
    if (npos < 2)
        return usage_error("%s: a command is missing (list, show ID, "
                           "replay ID, purge or quarantine)", pos[0]);
    const char *dir = pos[0], *cmd = pos[1], *id = npos >= 3 ? pos[2]
                                                              : NULL;
    bool list = strcmp(cmd, "list") == 0, show = strcmp(cmd, "show") == 0;
    bool replay = strcmp(cmd, "replay") == 0;
    bool purge = strcmp(cmd, "purge") == 0;
    bool quar = strcmp(cmd, "quarantine") == 0;
    if (!(list || show || replay || purge || quar))
        return usage_error("unknown command '%s' (list, show ID, replay ID, "
                           "purge or quarantine)", cmd);
    if ((show || replay) && !id)
        return usage_error("%s needs the dead letter's ID", cmd);
    if (npos > 3 || (!(show || replay) && id))
        return usage_error("%s takes no more arguments ('%s' is one too "
                           "many)", cmd, pos[npos > 3 ? 3 : 2]);
    struct seda_journal *j = NULL;
    char *path;
    if (dlq_open(dir, &j, &path) != 0)
        return 1;
    int status = 1;
    struct drow *rows;
    int n;
    if (quar)
        status = cmd_quarantine(j, path);
    else if (load_dead(j, path, list || purge ? NULL : id, &rows, &n) == 0) {
        if (list) {
            status = cmd_list(rows, n);
        } else if (show) {
            for (int i = 0; i < n; i++) {
                if (i)
                    putchar('\n');
                show_row(stdout, &rows[i]);
            }
            status = 0;
            if (n == 0) {
                fprintf(stderr, "seda-lua dlq: no dead letter with id "
                        "'%s'\n", id);
                status = 1;
            }
        } else if (replay) {
            status = cmd_replay(j, rows, n, id);
        } else {
            status = cmd_purge(j, rows, n);
        }
        rows_free(rows, n);
    }
    seda__journal_close(j);
    free(path);
    fflush(stdout);
    return status;
}

int cli_dlq(int argc, char **argv)
{
    const char *sock = NULL;
    bool json = false;
    const char *pos[4];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            dlq_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--control") == 0 ||
                   strncmp(a, "--control=", 10) == 0) {
            if (sock)
                return usage_error("--control given twice");
            if (a[9] == '=')
                sock = a + 10;
            else if (i + 1 < argc)
                sock = argv[++i];
            else
                return usage_error("--control needs the socket path "
                                   "(SOCK)");
            if (!*sock)
                return usage_error("--control needs the socket path "
                                   "(SOCK), not an empty one");
        } else if (strncmp(a, "--", 2) == 0) {
            return usage_error("unknown option '%s'", a);
        } else if (npos < 4) {
            pos[npos++] = a;
        } else {
            return usage_error("too many arguments (from '%s')", a);
        }
    }
    if (sock)
        return dlq_control(sock, pos, npos, json);
    if (json)
        return usage_error("--json goes with --control SOCK (a live "
                           "process); the DATA_DIR forms print text");
    return dlq_journal(pos, npos);
}
