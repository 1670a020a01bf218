/* read.c: the read path (unmapped chunks read as zeros; mapped ones come CRC-checked from
 * the store, invariant 5) and block-status extents (holes, zeros, shared chunks).
 * Reads take their chunks' range lock shared, so they never see half of a concurrent
 * multi-chunk write to the same chunks. Knows nothing of NBD. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "store/store.h"
#include "util/log.h"

/* [*lo, *hi): the bytes of the chunk at cstart that the request [off, off+len) covers. */
static void
overlap(uint64_t cstart, uint32_t cs, uint64_t off, uint32_t len, uint64_t *lo, uint64_t *hi)
{
    *lo = off > cstart ? off : cstart;
    *hi = off + len < cstart + cs ? off + len : cstart + cs;
}

static int
read_chunk(struct engine *e, struct engine_xstate *xs, uint64_t idx, uint64_t id, uint8_t *dst)
{
    uint32_t cs = xs->rec.chunk_size;
    ssize_t n = store_chunk_read(e->st, id, dst, cs);
    if (n < 0)
        return (int) n; /* logged by the store with segment and offset */
    if ((uint64_t) n != cs) {
        log_err("engine: export %s chunk %" PRIu64 ": chunk id %" PRIu64 " holds %zd bytes, "
                "expected %u",
                xs->rec.name, idx, id, n, cs);
        return -EIO;
    }
    return 0;
}

static int
read_locked(struct engine *e, struct engine_xstate *xs, uint64_t off, uint32_t len, uint8_t *buf)
{
    const uint32_t cs = xs->rec.chunk_size;
    const uint64_t first = off / cs, last = (off + len - 1) / cs;
    const uint64_t n = last - first + 1;
    uint64_t one;
    uint64_t *ids = &one;
    int rc;
    if (n == 1) {
        rc = store_map_get(e->st, xs->id, first, &one);
        if (rc == -ENOENT) {
            one = 0;
            rc = 0;
        }
    } else {
        /* The location cache, or one iterator pass over the map: both beat n point reads. */
        ids = malloc(n * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        rc = store_map_get_range(e->st, xs->id, first, n, ids);
    }
    uint8_t *scratch = NULL;
    /* Whole mapped chunks of a multi-chunk read go to the store in one call (one iterator
     * pass over their entries, one preadv per run of adjacent records): their ids stay
     * in ids[], their destinations in bufs[]; the rest is done here. */
    void **bufs = NULL;
    if (n > 1 && rc == 0 && !(bufs = malloc(n * sizeof(*bufs))))
        rc = -ENOMEM;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        uint64_t cstart = (first + i) * cs, lo, hi;
        overlap(cstart, cs, off, len, &lo, &hi);
        uint8_t *dst = buf + (lo - off);
        if (bufs)
            bufs[i] = dst;
        if (!ids[i]) {
            memset(dst, 0, hi - lo);
        } else if (hi - lo == cs) {
            if (!bufs)
                rc = read_chunk(e, xs, first + i, ids[i], dst);
        } else {
            if (!scratch && !(scratch = malloc(cs))) {
                rc = -ENOMEM;
                break;
            }
            rc = read_chunk(e, xs, first + i, ids[i], scratch);
            if (rc == 0)
                memcpy(dst, scratch + (lo - cstart), hi - lo);
            if (bufs)
                ids[i] = 0; /* done */
        }
    }
    if (rc == 0 && bufs) {
        rc = store_chunks_read(e->st, ids, n, bufs, cs);
        if (rc < 0)
            log_err_limited("engine: export %s chunks %" PRIu64 "+%" PRIu64 ": read failed: %s",
                            xs->rec.name, first, n, strerror(-rc));
    }
    free(bufs);
    free(scratch);
    if (ids != &one)
        free(ids);
    return rc;
}

int
engine_read(struct engine_export *ex, uint64_t off, uint32_t len, void *buf)
{
    struct engine *e = ex->e;
    struct engine_xstate *xs = ex->xs;
    if (!engine__range_ok(xs, off, len) || (len && !buf))
        return -EINVAL;
    if (len == 0)
        return 0;
    const uint32_t cs = xs->rec.chunk_size;
    struct engine_chunkrange r;
    engine__chunklock_acquire(&xs->lock, &r, off / cs, (off + len - 1) / cs, false);
    int rc = read_locked(e, xs, off, len, buf);
    engine__chunklock_release(&xs->lock, &r);
    if (rc == 0)
        ENGINE_COUNT(e, xs, bytes_read, len);
    return rc;
}

/* The map entries from the location cache, the whole chunks with one batched cached read,
 * a partial first or last chunk on its own; -EAGAIN as soon as anything declines. With sp,
 * the read is of whole chunks and lands spread in buf (engine_read_nowait_spread). */
static int
read_nowait_locked(struct engine *e, struct engine_xstate *xs, uint64_t off, uint32_t len,
                   uint8_t *buf, const struct engine_spread *sp)
{
    const uint32_t cs = xs->rec.chunk_size;
    const uint64_t first = off / cs, last = (off + len - 1) / cs, n = last - first + 1;
    uint8_t *scratch = NULL;
    uint64_t ids_small[8];
    void *bufs_small[8];
    uint64_t *ids = n <= 8 ? ids_small : malloc(n * sizeof(*ids));
    void **bufs = sp || n <= 8 ? bufs_small : malloc(n * sizeof(*bufs));
    int rc = ids && bufs ? store_map_get_range_cached(e->st, xs->id, first, n, ids) : -EAGAIN;
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        if (sp) {
            if (!ids[i])
                memset(buf + i * sp->stride + sp->skip, 0, cs);
            continue;
        }
        uint64_t cstart = (first + i) * cs, lo, hi;
        overlap(cstart, cs, off, len, &lo, &hi);
        uint8_t *dst = buf + (lo - off);
        bufs[i] = dst;
        uint64_t id = ids[i];
        if (id == 0) {
            memset(dst, 0, hi - lo);
            continue;
        }
        if (hi - lo == cs)
            continue; /* below, with the other whole chunks */
        ids[i] = 0;
        if (!scratch && !(scratch = malloc(cs))) {
            rc = -EAGAIN;
            break;
        }
        if (store_chunk_read_cached(e->st, id, scratch, cs) != (ssize_t) cs)
            rc = -EAGAIN; /* not cached, or unusual: engine_read sees to it */
        else
            memcpy(dst, scratch + (lo - cstart), hi - lo);
    }
    if (rc == 0)
        rc = sp ? store_chunks_read_cached_rec(e->st, ids, n, buf, cs)
                : store_chunks_read_cached(e->st, ids, n, bufs, cs);
    free(scratch);
    if (bufs != bufs_small)
        free(bufs);
    if (ids != ids_small)
        free(ids);
    return rc < 0 ? -EAGAIN : 0;
}

static int
read_nowait(struct engine_export *ex, uint64_t off, uint32_t len, void *buf,
            const struct engine_spread *sp)
{
    struct engine *e = ex->e;
    struct engine_xstate *xs = ex->xs;
    if (len == 0 || len > ENGINE_NOWAIT_MAX_BYTES || !buf || !engine__range_ok(xs, off, len) ||
        atomic_load_explicit(&xs->changes_queued, memory_order_acquire) != 0)
        return -EAGAIN;
    const uint32_t cs = xs->rec.chunk_size;
    struct engine_chunkrange r;
    if (!engine__chunklock_try(&xs->lock, &r, off / cs, (off + len - 1) / cs, false))
        return -EAGAIN;
    int rc = read_nowait_locked(e, xs, off, len, buf, sp);
    engine__chunklock_release(&xs->lock, &r);
    if (rc == 0)
        ENGINE_COUNT(e, xs, bytes_read, len);
    return rc;
}

int
engine_read_nowait(struct engine_export *ex, uint64_t off, uint32_t len, void *buf)
{
    return read_nowait(ex, off, len, buf, NULL);
}

size_t
engine_read_spread_size(const struct engine_export *ex, uint64_t off, uint32_t len)
{
    const struct engine_xstate *xs = ex->xs;
    const uint32_t cs = xs->rec.chunk_size;
    if (len < 2 * cs || len > ENGINE_NOWAIT_MAX_BYTES || off % cs || len % cs ||
        !engine__range_ok(xs, off, len))
        return 0;
    return (len / cs) * store_rec_stride(cs);
}

int
engine_read_nowait_spread(struct engine_export *ex, uint64_t off, uint32_t len, void *buf,
                          struct engine_spread *sp)
{
    if (engine_read_spread_size(ex, off, len) == 0)
        return -EAGAIN;
    const uint32_t cs = ex->xs->rec.chunk_size;
    *sp = (struct engine_spread){.stride = (uint32_t) store_rec_stride(cs),
                                 .skip = (uint32_t) store_rec_skip()};
    return read_nowait(ex, off, len, buf, sp);
}

/* ---- extents ---- */

/* Mapped chunks one extents call examines at most (each costs a chunk record read for its
 * refcount): bounds a BLOCK_STATUS over a large written range to a few tens of ms; the
 * runs then cover a prefix, which NBD allows and clients continue from. */
#define EXTENTS_MAX_MAPPED 16384

struct ext_builder {
    struct engine *e;
    bool alloc_only;   /* no ENGINE_EXT_SHARED: no chunk record reads */
    uint64_t examined; /* mapped chunks looked at */
    uint64_t off, end; /* the byte range described */
    uint32_t cs;
    uint64_t cursor; /* next chunk index to describe */
    struct engine_extent *ext;
    size_t cap, n;
    bool full; /* cap reached: stop */
    int err;
};

/* Appends chunks [from, to) with flags, merged with the previous run when alike. */
static void
emit(struct ext_builder *b, uint64_t from, uint64_t to, uint32_t flags)
{
    uint64_t lo = from * b->cs, hi = to * b->cs;
    if (lo < b->off)
        lo = b->off;
    if (hi > b->end)
        hi = b->end;
    if (b->full || hi <= lo)
        return;
    if (b->n && b->ext[b->n - 1].flags == flags) {
        b->ext[b->n - 1].len += hi - lo;
        return;
    }
    if (b->n == b->cap) {
        b->full = true;
        return;
    }
    b->ext[b->n].len = hi - lo;
    b->ext[b->n].flags = flags;
    b->n++;
}

static int
ext_mapped(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct ext_builder *b = arg;
    if (chunk_idx > b->cursor)
        emit(b, b->cursor, chunk_idx, ENGINE_EXT_HOLE | ENGINE_EXT_ZERO);
    if (++b->examined > EXTENTS_MAX_MAPPED) {
        b->full = true; /* described up to chunk_idx: enough for one call */
        return 1;
    }
    struct store_chunk_info info = {.refs = 1};
    int rc = b->alloc_only ? 0 : store_chunk_get(b->e->st, chunk_id, &info);
    if (rc < 0) {
        b->err = rc;
        return 1;
    }
    emit(b, chunk_idx, chunk_idx + 1, info.refs > 1 ? ENGINE_EXT_SHARED : 0);
    b->cursor = chunk_idx + 1;
    return b->full ? 1 : 0;
}

int
engine_extents(struct engine_export *ex, uint64_t off, uint64_t len, struct engine_extent *ext,
               size_t cap)
{
    return engine_extents_opt(ex, off, len, ext, cap, 0);
}

int
engine_extents_opt(struct engine_export *ex, uint64_t off, uint64_t len, struct engine_extent *ext,
                   size_t cap, unsigned flags)
{
    struct engine *e = ex->e;
    struct engine_xstate *xs = ex->xs;
    if (!engine__range_ok(xs, off, len) || len == 0 || cap == 0 || !ext)
        return -EINVAL;
    const uint32_t cs = xs->rec.chunk_size;
    const uint64_t first = off / cs, last = (off + len - 1) / cs;
    struct ext_builder b = {
        .e = e,
        .alloc_only = flags & ENGINE_EXTENTS_ALLOC_ONLY,
        .off = off,
        .end = off + len,
        .cs = cs,
        .cursor = first,
        .ext = ext,
        .cap = cap,
    };
    struct engine_chunkrange r;
    engine__chunklock_acquire(&xs->lock, &r, first, last, false);
    int rc = store_map_scan(e->st, xs->id, first, last - first + 1, ext_mapped, &b);
    engine__chunklock_release(&xs->lock, &r);
    if (b.err < 0)
        return b.err;
    if (rc < 0)
        return rc;
    if (!b.full && b.cursor <= last)
        emit(&b, b.cursor, last + 1, ENGINE_EXT_HOLE | ENGINE_EXT_ZERO);
    return (int) b.n;
}
