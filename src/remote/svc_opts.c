/* SPDX-License-Identifier: MIT */
/*
 * svc_opts.c -- a NATS service's options checked before anything is made
 * (svc.c): names of letters, digits, _ and -; a semantic version; a
 * queue group; endpoints with subjects requests can be sent to, no two
 * the same.  Pure functions of the options; any thread.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "remote_int.h"

static bool name_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return false;
    return true;
}

/* A subject a request may be sent to: tokens of printable characters
 * separated by single dots; no wildcard other than a whole "*" or a
 * last ">". */
static bool subject_ok(const char *s)
{
    if (!s || !*s || *s == '.' || s[strlen(s) - 1] == '.' ||
        strncmp(s, "$SRV.", 5) == 0)
        return false;
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return false;
        if (*p == '.' && p[1] == '.')
            return false;
        if ((*p == '*' || *p == '>') &&
            !((p == s || p[-1] == '.') && (!p[1] || p[1] == '.')))
            return false;
        if (*p == '>' && p[1])
            return false;
    }
    return true;
}

/* A semantic version: MAJOR.MINOR.PATCH, then -pre and +build parts of
 * [0-9A-Za-z.-]. */
static bool version_ok(const char *v)
{
    if (!v)
        return false;
    for (int part = 0; part < 3; part++) {
        if (*v < '0' || *v > '9')
            return false;
        if (*v == '0' && v[1] >= '0' && v[1] <= '9')
            return false;               /* no leading zero */
        while (*v >= '0' && *v <= '9')
            v++;
        if (part < 2 && *v++ != '.')
            return false;
    }
    if (*v == '-' || *v == '+') {
        for (v++; *v; v++)
            if (!((*v >= '0' && *v <= '9') || (*v >= 'a' && *v <= 'z') ||
                  (*v >= 'A' && *v <= 'Z') || *v == '.' || *v == '-' ||
                  *v == '+'))
                return false;
        return true;
    }
    return *v == '\0';
}

int seda__nsvc_opts_check(const seda_nsvc_opts *o, char *err, size_t errlen)
{
    if (!name_ok(o->name)) {
        snprintf(err, errlen, "service '%s': a service name is letters, "
                 "digits, _ and - only", o->name ? o->name : "");
        return SEDA_EINVAL;
    }
    if (!version_ok(o->version)) {
        snprintf(err, errlen, "service '%s': version '%s' is not a "
                 "semantic version (such as \"1.2.0\")", o->name,
                 o->version ? o->version : "");
        return SEDA_EINVAL;
    }
    if (!o->queue || !*o->queue || strpbrk(o->queue, " \t\r\n")) {
        snprintf(err, errlen, "service '%s': queue must be a non-empty "
                 "word", o->name);
        return SEDA_EINVAL;
    }
    if (o->nendpoints < 1 || !o->ep_names || !o->ep_subjects ||
        !o->on_request || !o->conn) {
        snprintf(err, errlen, "service '%s': no endpoint", o->name);
        return SEDA_EINVAL;
    }
    for (int i = 0; i < o->nendpoints; i++) {
        if (!name_ok(o->ep_names[i])) {
            snprintf(err, errlen, "service '%s': endpoint '%s': a name is "
                     "letters, digits, _ and - only", o->name,
                     o->ep_names[i] ? o->ep_names[i] : "");
            return SEDA_EINVAL;
        }
        if (!subject_ok(o->ep_subjects[i])) {
            snprintf(err, errlen, "service '%s': endpoint '%s': '%s' is "
                     "not a subject requests can be sent to", o->name,
                     o->ep_names[i], o->ep_subjects[i]
                                         ? o->ep_subjects[i] : "");
            return SEDA_EINVAL;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(o->ep_subjects[i], o->ep_subjects[j]) == 0) {
                snprintf(err, errlen, "service '%s': endpoints '%s' and "
                         "'%s' have the same subject '%s'", o->name,
                         o->ep_names[j], o->ep_names[i], o->ep_subjects[i]);
                return SEDA_EINVAL;
            }
    }
    return 0;
}
