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

/* relaxed: a setting read per line, changed at most at start-up. */
static atomic_int g_format = SEDA_LOG_TEXT;

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

static const char *const level_names[] = { "debug", "info", "warn",
                                           "error" };

const char *seda_log_level_name(int level)
{
    return level >= SEDA_LOG_DEBUG && level <= SEDA_LOG_ERROR
               ? level_names[level] : NULL;
}

/* A line under construction, cut (with "...") at its end. */
struct line {
    char buf[4096];
    size_t n;
};

static void put(struct line *l, const char *s, size_t len)
{
    size_t room = sizeof l->buf - 5 - l->n;     /* "...\n" and NUL */
    if (len > room)
        len = room;
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* msg made safe: text (folded lines, \xNN for control bytes) or a JSON
 * string's inside. */
static void put_safe(struct line *l, const char *msg, bool json)
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
            puts_(l, json ? "\\r" : "\\r");
        } else if (json && (c == '"' || c == '\\')) {
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

void seda_log_write(int level, const char *stage, const char *msg)
{
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
        puts_(&l, ",\"msg\":\"");
        put_safe(&l, msg ? msg : "", true);
        puts_(&l, "\"}");
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
    }
    if (l.n >= sizeof l.buf - 5) {
        /* Cut: keep a JSON line parseable. */
        memcpy(l.buf + l.n, json ? "...\"" : "...", json ? 4 : 3);
        l.n += json ? 4 : 3;
        if (json)
            l.buf[l.n++] = '}';
    }
    l.buf[l.n++] = '\n';
    ssize_t w = write(STDERR_FILENO, l.buf, l.n);
    (void)w;
}
