/* bufpool: size-class free lists of payload buffers (contract in bufpool.h). An idle
 * buffer's first bytes hold the link to the next one of its size, so the pool itself
 * allocates nothing per buffer. */
#include "util/bufpool.h"

#include <stdlib.h>

#define MIN_SHIFT 12 /* log2(BUFPOOL_MIN) */
#define MAX_SHIFT 22 /* log2(BUFPOOL_MAX) */
#define N_CLASSES (MAX_SHIFT - MIN_SHIFT + 1)

_Static_assert(BUFPOOL_MIN == (size_t) 1 << MIN_SHIFT, "MIN_SHIFT");
_Static_assert(BUFPOOL_MAX == (size_t) 1 << MAX_SHIFT, "MAX_SHIFT");

struct idle_buf {
    struct idle_buf *next;
};

struct bufpool {
    struct idle_buf *free[N_CLASSES];
    size_t max_idle;
    size_t idle_bytes;
    uint64_t hits;
    uint64_t misses;
};

/* The class of len, or -1 when len is not pooled. */
static int
class_of(size_t len)
{
    if (len == 0 || len > BUFPOOL_MAX)
        return -1;
    if (len <= BUFPOOL_MIN)
        return len == BUFPOOL_MIN ? 0 : -1; /* small ones: malloc's own caches do well */
    int shift = 64 - __builtin_clzll((unsigned long long) (len - 1));
    return shift - MIN_SHIFT;
}

static size_t
class_size(int cls)
{
    return (size_t) 1 << (cls + MIN_SHIFT);
}

struct bufpool *
bufpool_new(size_t max_idle)
{
    struct bufpool *p = calloc(1, sizeof(*p));
    if (p)
        p->max_idle = max_idle;
    return p;
}

void
bufpool_trim(struct bufpool *p)
{
    for (int i = 0; i < N_CLASSES; i++) {
        while (p->free[i]) {
            struct idle_buf *b = p->free[i];
            p->free[i] = b->next;
            free(b);
        }
    }
    p->idle_bytes = 0;
}

void
bufpool_destroy(struct bufpool *p)
{
    if (!p)
        return;
    bufpool_trim(p);
    free(p);
}

void *
bufpool_get(struct bufpool *p, size_t len)
{
    int cls = class_of(len);
    if (cls < 0)
        return malloc(len ? len : 1);
    struct idle_buf *b = p->free[cls];
    if (b) {
        p->free[cls] = b->next;
        p->idle_bytes -= class_size(cls);
        p->hits++;
        return b;
    }
    p->misses++;
    return malloc(class_size(cls));
}

void
bufpool_put(struct bufpool *p, void *buf, size_t len)
{
    if (!buf)
        return;
    int cls = class_of(len);
    if (cls < 0 || p->idle_bytes + class_size(cls) > p->max_idle) {
        free(buf);
        return;
    }
    struct idle_buf *b = buf;
    b->next = p->free[cls];
    p->free[cls] = b;
    p->idle_bytes += class_size(cls);
}

void
bufpool_get_stats(const struct bufpool *p, struct bufpool_stats *out)
{
    out->hits = p->hits;
    out->misses = p->misses;
    out->idle_bytes = p->idle_bytes;
}
