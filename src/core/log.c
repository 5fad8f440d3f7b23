/* SPDX-License-Identifier: MIT */
/*
 * log.c -- the event log on stderr: one line per event, with its time
 * (RFC 3339, UTC, milliseconds), its level and its stage, as text or as
 * one JSON object per line (seda_log_set_format).
 *
 * A message is made safe for a terminal on the way: a traceback's lines
 * fold into the one line (" | " between them, a tab as a space), and
 * every other control byte (ESC among them: a payload must not retitle a
 * window, clear a screen or fake a line) and DEL are written as \xNN.
 * One write(2) per line, so lines of several threads do not interleave.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "seda_int.h"

/* relaxed: settings read per line, changed at start-up or by an
 * operator (seda.log_level); a line racing a change may go either way. */
static atomic_int g_format = SEDA_LOG_TEXT;
static atomic_int g_level = SEDA_LOG_INFO;

void seda_log_set_format(int format)
{
    atomic_store_explicit(&g_format, format == SEDA_LOG_JSON
                                         ? SEDA_LOG_JSON : SEDA_LOG_TEXT,
                          memory_order_relaxed);
}

int seda_log_format(void)
{
    return atomic_load_explicit(&g_format, memory_order_relaxed);
}

void seda_log_set_level(int level)
{
    if (level < SEDA_LOG_DEBUG)
        level = SEDA_LOG_DEBUG;
    if (level > SEDA_LOG_ERROR)
        level = SEDA_LOG_ERROR;
    atomic_store_explicit(&g_level, level, memory_order_relaxed);
}

int seda_log_level(void)
{
    return atomic_load_explicit(&g_level, memory_order_relaxed);
}

bool seda_log_enabled(int level)
{
    return level >= atomic_load_explicit(&g_level, memory_order_relaxed);
}

static const char *const level_names[] = { "debug", "info", "warn",
                                           "error" };

const char *seda_log_level_name(int level)
{
    return level >= SEDA_LOG_DEBUG && level <= SEDA_LOG_ERROR
               ? level_names[level] : NULL;
}

int seda_log_level_from_name(const char *name)
{
    for (int i = SEDA_LOG_DEBUG; name && i <= SEDA_LOG_ERROR; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

/* A line under construction.  A piece that does not fit is left out
 * whole (an escape is never cut in two) and the line marked full. */
#define LINE_MAX_ 4096
#define LINE_END 6                      /* room kept for ..."}\n */
struct line {
    char buf[LINE_MAX_];
    size_t n;
    size_t limit;                       /* bytes usable for content */
    bool full;
};

static void put(struct line *l, const char *s, size_t len)
{
    if (l->full || len > l->limit - l->n) {
        l->full = true;
        return;
    }
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* msg made safe: text (folded lines, \xNN for control bytes; quote
 * also escapes '"' and '\' for a quoted k="v") or a JSON string's
 * inside. */
static void put_safe_q(struct line *l, const char *msg, bool json,
                       bool quote)
{
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        char esc[8];
        unsigned char c = *p;
        if (c == '\n') {
            if (json)
                puts_(l, "\\n");
            else if (p[1])
                puts_(l, " | ");
        } else if (c == '\t') {
            puts_(l, json ? "\\t" : " ");
        } else if (c == '\r') {
            puts_(l, "\\r");
        } else if ((json || quote) && (c == '"' || c == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, json ? "\\u%04x" : "\\x%02x", c);
            puts_(l, esc);
        } else {
            put(l, (const char *)p, 1);
        }
    }
}

static void put_safe(struct line *l, const char *msg, bool json)
{
    put_safe_q(l, msg, json, false);
}

/* Whether a text field's value needs quotes: empty, or with a space,
 * a quote, an '=' or a control byte. */
static bool needs_quotes(const char *v)
{
    if (!*v)
        return true;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == 0x7f)
            return true;
    return false;
}

/* One field into l: ,"key":value (JSON) or  key=value (text). */
static void put_field(struct line *l, const struct seda_log_field *f,
                      bool json)
{
    const char *v = f->value ? f->value : "";
    if (json) {
        puts_(l, ",\"");
        put_safe(l, f->key, true);
        puts_(l, "\":");
        if (f->raw) {
            puts_(l, v);
        } else {
            puts_(l, "\"");
            put_safe(l, v, true);
            puts_(l, "\"");
        }
    } else {
        puts_(l, " ");
        put_safe(l, f->key, false);
        puts_(l, "=");
        bool q = !f->raw && needs_quotes(v);
        if (q)
            puts_(l, "\"");
        put_safe_q(l, v, false, q);
        if (q)
            puts_(l, "\"");
    }
}

/* Room the message keeps when fields are many or long: the fields that
 * do not fit in the rest are left out (and "fields_cut" says so). */
#define MSG_RESERVE 512

void seda_log_write_fields(int level, const char *stage, const char *msg,
                           const struct seda_log_field *fields, size_t nf)
{
    if (!seda_log_enabled(level))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t k = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + k, sizeof when - k, ".%03ldZ", ts.tv_nsec / 1000000);
    const char *lv = seda_log_level_name(level);
    if (!lv)
        lv = "info";
    bool json = seda_log_format() == SEDA_LOG_JSON;
    struct line l;
    l.n = 0;
    l.limit = sizeof l.buf - LINE_END;
    l.full = false;
    /* Fields go before the message in JSON (key order is free there),
     * so a cut line is cut inside "msg" and stays one object; in text
     * they follow the message, as logfmt has them. */
    bool cut_fields = false;
    struct line fl;                     /* one field, tried apart */
    if (json) {
        puts_(&l, "{\"time\":\"");
        puts_(&l, when);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, lv);
        puts_(&l, "\"");
        if (stage) {
            puts_(&l, ",\"stage\":\"");
            put_safe(&l, stage, true);
            puts_(&l, "\"");
        }
        for (size_t i = 0; i < nf && !cut_fields; i++) {
            fl.n = 0;
            fl.limit = sizeof fl.buf - LINE_END;
            fl.full = false;
            put_field(&fl, &fields[i], true);
            if (fl.full || l.n + fl.n + MSG_RESERVE > l.limit)
                cut_fields = true;
            else
                put(&l, fl.buf, fl.n);
        }
        if (cut_fields)
            puts_(&l, ",\"fields_cut\":true");
        puts_(&l, ",\"msg\":\"");
        put_safe(&l, msg ? msg : "", true);
        bool cut = l.full;
        l.limit = sizeof l.buf - 1;     /* LINE_END kept room for this */
        l.full = false;
        puts_(&l, cut ? "...\"}" : "\"}");
    } else {
        puts_(&l, when);
        puts_(&l, " ");
        puts_(&l, lv);
        if (stage) {
            puts_(&l, " stage=");
            put_safe(&l, stage, false);
        }
        puts_(&l, " ");
        put_safe(&l, msg ? msg : "", false);
        for (size_t i = 0; i < nf && !l.full && !cut_fields; i++) {
            fl.n = 0;
            fl.limit = sizeof fl.buf - LINE_END;
            fl.full = false;
            put_field(&fl, &fields[i], false);
            if (fl.full || l.n + fl.n > l.limit)
                cut_fields = true;
            else
                put(&l, fl.buf, fl.n);
        }
        if (l.full || cut_fields) {
            l.limit = sizeof l.buf - 1;
            l.full = false;
            puts_(&l, "...");
        }
    }
    l.buf[l.n++] = '\n';
    ssize_t w = write(STDERR_FILENO, l.buf, l.n);
    (void)w;
}

void seda_log_write(int level, const char *stage, const char *msg)
{
    seda_log_write_fields(level, stage, msg, NULL, 0);
}
