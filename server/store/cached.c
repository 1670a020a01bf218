/* cached.c: reads that never wait — the event loop's path for small reads whose metadata
 * and bytes are already in memory. They do what store_map_get and store_chunk_read do with
 * the non-blocking primitives (meta_get_cached, preadv_nowait) and give up with -EAGAIN at
 * the first thing that would block or that is unusual; the blocking calls, run on a worker
 * thread, then do the work again and own every error report. A request answered here skips
 * two thread hand-offs, which cost more than the read itself when the data is cached.
 * Knows nothing of exports or hashing. */
#include "store/internal.h"

#include <errno.h>

/* Map entries per location cache batch (stack arrays). */
#define RANGE_BATCH 64

int
store_map_get_range_cached(struct store *st, uint32_t export_id, uint64_t first, uint64_t n,
                           uint64_t *ids)
{
    uint32_t gens[RANGE_BATCH];
    bool hit[RANGE_BATCH] = {0};
    for (uint64_t b = 0; b < n; b += RANGE_BATCH) {
        uint64_t m = n - b < RANGE_BATCH ? n - b : RANGE_BATCH;
        if (st->loc &&
            store__loc_map_get_many(st, export_id, first + b, m, ids + b, gens, hit) == m)
            continue;
        for (uint64_t i = 0; i < m; i++) {
            if (hit[i])
                continue;
            int rc = store__map_read(st, export_id, first + b + i, &ids[b + i],
                                     st->loc ? gens[i] : 0, true);
            if (rc < 0 && rc != -ENOENT) /* -ENOENT: ids[] holds 0 */
                return rc;               /* -EAGAIN */
        }
    }
    return 0;
}

ssize_t
store_chunk_read_cached(struct store *st, uint64_t chunk_id, void *buf, size_t cap)
{
    if (!store__io->preadv_nowait)
        return -EAGAIN;
    struct store_loc loc;
    bool cached = st->loc && store__loc_chunk_get(st, chunk_id, &loc);
    if (!cached) {
        uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
        meta_key_chunk_encode(key, chunk_id);
        ssize_t n = meta_get_cached(st->meta, META_CF_CHUNK, key, sizeof(key), val, sizeof(val));
        struct meta_chunk_rec r;
        if (n < 0 || (size_t) n > sizeof(val) || meta_chunk_rec_decode(val, (size_t) n, &r) != 0 ||
            r.codec != STORE_CODEC_RAW || r.stored_len != r.raw_len)
            return -EAGAIN;
        loc = (struct store_loc){.seg = r.seg, .off = r.off, .len = r.stored_len};
    }
    if (loc.len > cap)
        return -EAGAIN;
    struct store_seg *sg = store__seg_get(st, loc.seg);
    if (!sg)
        return -EAGAIN; /* compacted away meanwhile */
    uint8_t hb[STORE_RECORD_HDR_LEN];
    struct iovec iov[2] = {{hb, sizeof(hb)}, {buf, loc.len}};
    ssize_t got = store__io->preadv_nowait(sg->fd, iov, 2, loc.off);
    store__seg_put(st, sg);
    /* invariant 5: never bytes that fail their check. A record that is not this chunk's
     * means a stale cached location (compaction moved it). */
    if (got != (ssize_t) (sizeof(hb) + loc.len) ||
        !store_record_holds(hb, chunk_id, loc.len, buf)) {
        if (cached && got == (ssize_t) (sizeof(hb) + loc.len))
            store__loc_chunk_drop(st, chunk_id);
        return -EAGAIN;
    }
    if (!cached && st->loc)
        store__loc_chunk_put(st, chunk_id, &loc);
    return (ssize_t) loc.len;
}
