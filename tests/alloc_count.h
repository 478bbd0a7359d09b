/*
 * alloc_count.h — counts the allocations of a test program linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (tests/client.cmake), so a
 * test can assert that a path allocates nothing (g_allocs unchanged).
 * Include it in exactly one file of the program: it defines the wrappers.
 */
#ifndef MD_TEST_ALLOC_COUNT_H
#define MD_TEST_ALLOC_COUNT_H

#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static volatile long g_allocs;
void *__wrap_malloc(size_t n) { g_allocs++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { g_allocs++; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { g_allocs++; return __real_realloc(p, n); }

#endif
