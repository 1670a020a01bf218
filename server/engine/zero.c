/* zero.c: TRIM and WRITE_ZEROES. Both leave their range reading as zeros: whole chunks are
 * unmapped (their old chunks lose a reference; nothing is stored), partial chunks at the
 * edges go through the write path with zeros (read-modify-write; a chunk that ends all
 * zero is unmapped there too). They differ only in counting: zeroes count as zero bytes
 * written, a trim does not. Also the bounded-batch unmapping used by export delete.
 * Knows nothing of NBD. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "store/store.h"
#include "util/log.h"

/* Map entries removed per transaction: bounds the batch and the commit lock hold time. */
#define UNMAP_BATCH 4096

struct unmap_scan {
    uint64_t idx[UNMAP_BATCH];
    size_t n;
};

static int
collect_idx(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct unmap_scan *s = arg;
    (void) chunk_id;
    s->idx[s->n] = chunk_idx;
    return ++s->n == UNMAP_BATCH ? 1 : 0;
}

static int
unmap_batch(struct engine *e, struct engine_xstate *xs, const struct unmap_scan *s)
{
    pthread_rwlock_rdlock(&e->settings_lock);
    struct index_batch ib;
    index_batch_init(&ib);
    struct store_txn *tx;
    int rc = store_txn_begin(e->st, &tx);
    if (rc == 0) {
        index_batch_reset(&ib, store_txn_batch(tx));
        for (size_t i = 0; rc == 0 && i < s->n; i++)
            rc = store_txn_map_set(tx, xs->id, s->idx[i], 0);
        if (rc == 0) {
            struct engine_freed_ctx fc = {.ix = e->ix, .ib = &ib};
            rc = store_txn_commit(tx, engine__on_freed, &fc);
            if (rc == 0)
                index_publish(e->ix, &ib);
        } else {
            store_txn_abort(tx);
        }
    }
    index_batch_fini(&ib);
    pthread_rwlock_unlock(&e->settings_lock);
    if (rc < 0)
        log_err("engine: export %s: unmapping chunks from %" PRIu64 " failed: %s", xs->rec.name,
                s->idx[0], strerror(-rc));
    return rc;
}

int
engine__unmap_range(struct engine *e, struct engine_xstate *xs, uint64_t first, uint64_t count)
{
    struct unmap_scan *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    uint64_t next = first, end = first + count;
    int rc = 0;
    while (next < end) {
        s->n = 0;
        rc = store_map_scan(e->st, xs->id, next, end - next, collect_idx, s);
        if (rc < 0)
            break;
        rc = 0;
        if (s->n == 0)
            break;
        rc = unmap_batch(e, xs, s);
        if (rc < 0 || s->n < UNMAP_BATCH)
            break;
        next = s->idx[s->n - 1] + 1;
    }
    free(s);
    return rc;
}

/* Zeros [off, off+len) with the range lock held. */
static int
zero_locked(struct engine *e, struct engine_xstate *xs, uint64_t off, uint64_t len, bool count)
{
    const uint32_t cs = xs->rec.chunk_size;
    const uint64_t end = off + len;
    const uint64_t a = (off + cs - 1) / cs; /* first whole chunk */
    const uint64_t b = end / cs;            /* one past the last whole chunk */
    if (a > b)                              /* inside one chunk, touching neither of its edges */
        return engine__write_locked(e, xs, off, len, NULL, count);
    int rc = 0;
    if (off < a * cs)
        rc = engine__write_locked(e, xs, off, a * cs - off, NULL, count);
    if (rc == 0 && a < b) {
        rc = engine__unmap_range(e, xs, a, b - a);
        if (rc == 0 && count)
            ENGINE_COUNT(e, xs, zero_bytes, (b - a) * cs);
    }
    if (rc == 0 && b * cs < end)
        rc = engine__write_locked(e, xs, b * cs, end - b * cs, NULL, count);
    return rc;
}

static int
zero_op(struct engine_export *ex, uint64_t off, uint64_t len, unsigned flags, bool count)
{
    struct engine *e = ex->e;
    struct engine_xstate *xs = ex->xs;
    if (xs->rec.read_only)
        return -EROFS;
    if (!engine__range_ok(xs, off, len))
        return -EINVAL;
    if (len) {
        const uint32_t cs = xs->rec.chunk_size;
        struct engine_chunkrange r;
        engine__chunklock_acquire(&xs->lock, &r, off / cs, (off + len - 1) / cs, true);
        int rc = zero_locked(e, xs, off, len, count);
        engine__chunklock_release(&xs->lock, &r);
        if (rc < 0)
            return rc;
    }
    return (flags & ENGINE_FUA) ? store_sync(e->st) : 0;
}

int
engine_trim(struct engine_export *ex, uint64_t off, uint64_t len, unsigned flags)
{
    return zero_op(ex, off, len, flags, false);
}

int
engine_zero(struct engine_export *ex, uint64_t off, uint64_t len, unsigned flags)
{
    /* ENGINE_NO_HOLE asks to keep the allocation; there is none to keep: a zero chunk is
     * never stored, and reads of it return zeros either way. */
    return zero_op(ex, off, len, flags, true);
}
