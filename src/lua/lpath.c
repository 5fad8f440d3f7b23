/* SPDX-License-Identifier: MIT */
/*
 * lpath.c -- the path notation of payload messages, shared by lcodec and
 * lschema (see lpath.h).
 *
 * Everything here runs only when a message is being built, that is on an
 * error path or while compiling a schema, so it favours plainness over
 * speed.
 *
 * Sections: message buffer, path steps.
 */
#include "lpath.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- message buffer ---- */

void seda__path_buf_init(struct seda_msgbuf *m, char *buf, size_t cap)
{
    m->p = buf;
    m->n = 0;
    m->cap = buf != NULL ? cap : 0;
    if (m->cap > 0)
        buf[0] = '\0';
}

void seda__path_buf_add(struct seda_msgbuf *m, const char *s, size_t len)
{
    if (m->cap == 0)
        return;
    size_t room = m->cap - 1 - m->n;
    if (len > room)
        len = room;
    memcpy(m->p + m->n, s, len);
    m->n += len;
    m->p[m->n] = '\0';
}

void seda__path_buf_str(struct seda_msgbuf *m, const char *s)
{
    seda__path_buf_add(m, s, strlen(s));
}

/* ---- path steps ---- */

static const char *const reserved[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for",
    "function", "goto", "if", "in", "local", "nil", "not", "or", "repeat",
    "return", "then", "true", "until", "while", NULL
};

/* Returns 1 when s[0..len) is a Lua name (letters, digits, underscores,
 * not starting with a digit, not a reserved word), else 0. */
static int is_identifier(const char *s, size_t len)
{
    if (len == 0 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return 0;
    }
    for (int i = 0; reserved[i] != NULL; i++)
        if (strlen(reserved[i]) == len && memcmp(reserved[i], s, len) == 0)
            return 0;
    return 1;
}

void seda__path_name(struct seda_msgbuf *m, const char *s, size_t len)
{
    enum { QUOTE_MAX = 32 };
    if (is_identifier(s, len)) {
        seda__path_buf_str(m, ".");
        seda__path_buf_add(m, s, len);
        return;
    }
    seda__path_buf_str(m, "[\"");
    for (size_t i = 0; i < len && i < QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            seda__path_buf_add(m, tmp, 2);
        } else if (c == '\n') {
            seda__path_buf_str(m, "\\n");
        } else if (c < 0x20 || c >= 0x7f) {
            snprintf(tmp, sizeof tmp, "\\%u", (unsigned)c);
            seda__path_buf_str(m, tmp);
        } else {
            seda__path_buf_add(m, (const char *)&c, 1);
        }
    }
    if (len > QUOTE_MAX)
        seda__path_buf_str(m, "...");
    seda__path_buf_str(m, "\"]");
}

void seda__path_int(struct seda_msgbuf *m, lua_Integer v)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "[" LUA_INTEGER_FMT "]", v);
    seda__path_buf_str(m, tmp);
}

void seda__path_float(struct seda_msgbuf *m, double v)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.14g", v);
    if (strtod(tmp, NULL) != v)
        snprintf(tmp, sizeof tmp, "%.17g", v);
    if (strpbrk(tmp, ".eEni") == NULL)
        strcat(tmp, ".0");
    seda__path_buf_str(m, "[");
    seda__path_buf_str(m, tmp);
    seda__path_buf_str(m, "]");
}

void seda__path_key(struct seda_msgbuf *m, lua_State *L, int k)
{
    switch (lua_type(L, k)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, k, &len);
        seda__path_name(m, s, len);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, k))
            seda__path_int(m, lua_tointeger(L, k));
        else
            seda__path_float(m, (double)lua_tonumber(L, k));
        break;
    case LUA_TBOOLEAN:
        seda__path_buf_str(m, lua_toboolean(L, k) ? "[true]" : "[false]");
        break;
    default:
        seda__path_buf_str(m, "[{...}]"); /* a table used as a key */
        break;
    }
}
