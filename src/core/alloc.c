/* SPDX-License-Identifier: MIT */
/*
 * alloc.c -- the allocator every seda allocation goes through, which a
 * program may replace once before anything else (seda_set_allocator).
 */
#include <stdlib.h>
#include <string.h>

#include "seda_int.h"

/* ---- allocation ---- */

/* Set once before any other call (seda_set_allocator says so), then only
 * read: no lock needed. */
static void *(*g_malloc)(size_t) = malloc;
static void *(*g_realloc)(void *, size_t) = realloc;
static void (*g_free)(void *) = free;

void seda_set_allocator(void *(*malloc_fn)(size_t),
                        void *(*realloc_fn)(void *, size_t),
                        void (*free_fn)(void *))
{
    g_malloc = malloc_fn ? malloc_fn : malloc;
    seda__custom_alloc = malloc_fn || realloc_fn || free_fn;
    g_realloc = realloc_fn ? realloc_fn : realloc;
    g_free = free_fn ? free_fn : free;
}

void *seda__malloc(size_t n) { return g_malloc(n ? n : 1); }

bool seda__custom_alloc;


void *seda__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    void *p = g_malloc(bytes ? bytes : 1);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void *seda__realloc(void *p, size_t n)
{
    return p ? g_realloc(p, n ? n : 1) : g_malloc(n ? n : 1);
}

void seda__free(void *p)
{
    if (p)
        g_free(p);
}

char *seda__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = seda__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

