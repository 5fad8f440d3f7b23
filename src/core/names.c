/* SPDX-License-Identifier: MIT */
/*
 * names.c -- words: valid stage names, the error codes' words
 * (seda_strerror) and the names of policies and deliveries.
 */
#include <string.h>

#include "seda_int.h"

/* ---- names ---- */

bool seda__valid_name(const char *name)
{
    if (!name || !*name)
        return false;
    size_t n = 0;
    for (const char *p = name; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
              c == '-'))
            return false;
    }
    return n <= SEDA_NAME_MAX;
}

const char *seda_strerror(int rc)
{
    switch (rc) {
    case SEDA_OK: return "ok";
    case SEDA_EFULL: return "full";
    case SEDA_ETIMEDOUT: return "timeout";
    case SEDA_EDROPPED: return "dropped";
    case SEDA_EPAUSED: return "paused";
    case SEDA_ECLOSED: return "closed";
    case SEDA_ENOSTAGE: return "no_such_stage";
    case SEDA_EEXIST: return "exists";
    case SEDA_EINVAL: return "invalid";
    case SEDA_ENOMEM: return "nomem";
    case SEDA_ERANGE: return "range";
    case SEDA_ETYPE: return "type";
    case SEDA_EDUP: return "duplicate";
    case SEDA_EIO: return "io";
    case SEDA_ESHED: return "shed";
    case SEDA_EUNAVAIL: return "unavailable";
    case SEDA_ETOOLARGE: return "too_large";
    default: return "error";
    }
}

static const char *const policy_names[] = {
    "block", "reject", "drop_newest", "drop_oldest", NULL
};
static const char *const delivery_names[] = { "p2p", "pubsub", NULL };

static int parse(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

int seda_policy_parse(const char *name) { return parse(policy_names, name); }
int seda_delivery_parse(const char *name)
{
    return parse(delivery_names, name);
}

const char *seda_policy_name(int p)
{
    return p >= 0 && p <= SEDA_POLICY_DROP_OLDEST ? policy_names[p] : NULL;
}

const char *seda_delivery_name(int d)
{
    return d >= 0 && d <= SEDA_DELIVERY_PUBSUB ? delivery_names[d] : NULL;
}
