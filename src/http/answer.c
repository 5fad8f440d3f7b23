/* SPDX-License-Identifier: MIT */
/*
 * answer.c -- an answer's bytes: status line, headers, body, in one
 * buffer the connection sends.
 *
 * The server owns the framing: Content-Length (none for 1xx, 204 and
 * 304), Connection, Date; an application's header of those names is left
 * out, and so is one whose name is not a token or whose value holds a CR,
 * LF or NUL (it would split the answer).  A HEAD request's answer has the
 * headers of its GET and no body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_int.h"

static const char *phrase(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
    }
}

/* The Date header's value for now, made once a second per thread. */
static const char *date_now(void)
{
    static _Thread_local time_t made = -1;
    static _Thread_local char text[40];
    time_t t = time(NULL);
    if (t != made) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        made = t;
    }
    return text;
}

static bool framing(const char *name)
{
    return strcasecmp(name, "content-length") == 0 ||
           strcasecmp(name, "transfer-encoding") == 0 ||
           strcasecmp(name, "connection") == 0 ||
           strcasecmp(name, "date") == 0;
}

static bool token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
              (ch >= 'A' && ch <= 'Z') || strchr("!#$%&'*+-.^_`|~", ch)))
            return false;
    }
    return true;
}

static bool clean_value(const char *s)
{
    return strpbrk(s, "\r\n") == NULL;
}

char *seda__http_format(int status, const char *const *hv, int nh,
                        const void *body, size_t len,
                        const struct seda_http_req_s *r, bool close,
                        size_t *outlen)
{
    bool nobody = status < 200 || status == 204 || status == 304;
    bool head = r && r->head;
    size_t cap = 256 + len;
    for (int i = 0; i < nh; i++)
        if (hv[2 * i] && hv[2 * i + 1])
            cap += strlen(hv[2 * i]) + strlen(hv[2 * i + 1]) + 4;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status,
                     phrase(status), date_now());
    size_t w = (size_t)n;
    for (int i = 0; i < nh; i++) {
        const char *k = hv[2 * i], *v = hv[2 * i + 1];
        if (!k || !v || !token(k) || !clean_value(v) || framing(k))
            continue;
        size_t kl = strlen(k), vl = strlen(v);
        memcpy(out + w, k, kl);
        w += kl;
        out[w++] = ':';
        out[w++] = ' ';
        memcpy(out + w, v, vl);
        w += vl;
        out[w++] = '\r';
        out[w++] = '\n';
    }
    if (!nobody)
        w += (size_t)snprintf(out + w, cap - w, "Content-Length: %zu\r\n",
                              len);
    if (close)
        w += (size_t)snprintf(out + w, cap - w, "Connection: close\r\n");
    else if (r && r->keep10)
        w += (size_t)snprintf(out + w, cap - w,
                              "Connection: keep-alive\r\n");
    out[w++] = '\r';
    out[w++] = '\n';
    if (!nobody && !head && len) {
        memcpy(out + w, body, len);
        w += len;
    }
    *outlen = w;
    return out;
}
