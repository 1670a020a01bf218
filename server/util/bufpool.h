/* bufpool: payload buffers kept for reuse by the one thread that owns the pool.
 * Why: a 256 KiB read reply or write payload from malloc lands in heap pages glibc gives
 * back to the kernel once enough is free at the top of the heap, so the next request
 * takes its pages again through page faults (~11 us each on a paravirtualized guest,
 * ~10% of dedupd's CPU in a sequential read) and writes them while they are cold in the
 * CPU caches. Buffers put back here are handed out again last in, first out: mapped, and
 * likely still cached.
 * Sizes from BUFPOOL_MIN to BUFPOOL_MAX are rounded up to a power of two (one free list
 * per size); others go straight to malloc/free. At most max_idle bytes wait in the pool;
 * beyond that a returned buffer is freed. Not thread-safe: one pool per thread. */
#ifndef DD_UTIL_BUFPOOL_H
#define DD_UTIL_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

#define BUFPOOL_MIN ((size_t) 4 << 10)
#define BUFPOOL_MAX ((size_t) 4 << 20)

struct bufpool;

struct bufpool_stats {
    uint64_t hits;     /* gets answered from the pool */
    uint64_t misses;   /* gets of a pooled size that had to malloc */
    size_t idle_bytes; /* bytes waiting in the pool now */
};

/* NULL when out of memory. */
struct bufpool *bufpool_new(size_t max_idle);
/* Frees the idle buffers and the pool; buffers still out must not be put back after. */
void bufpool_destroy(struct bufpool *p);
/* A buffer of at least len bytes (len > 0), or NULL when out of memory. */
void *bufpool_get(struct bufpool *p, size_t len);
/* Returns buf (from bufpool_get with the same len, or NULL: ignored). */
void bufpool_put(struct bufpool *p, void *buf, size_t len);
/* Frees every idle buffer (e.g. when nothing is connected). */
void bufpool_trim(struct bufpool *p);
void bufpool_get_stats(const struct bufpool *p, struct bufpool_stats *out);

#endif
