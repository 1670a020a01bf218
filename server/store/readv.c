/* readv: reading many chunks at once (store_chunks_read) — the sequential-read path.
 * store_chunk_read costs a RocksDB point read for the chunk entry and a preadv per chunk;
 * a large read of data written in order names chunks with nearby ids whose records lie
 * back to back in a segment. So: the entries of a dense id range come from one iterator
 * pass (a memtable skip-list search per chunk costs more than the CRC of its 4 KiB), and
 * each run of adjacent records is read with one preadv straight into the callers'
 * buffers — or, for a caller that sends the bytes from where they land, as one contiguous
 * piece into record-shaped memory (store_chunks_read_cached_rec). Every record is checked
 * as store_chunk_read checks it (header, id, length, CRC: invariant 5). Anything unusual
 * — an entry not found by the pass, a segment gone to compaction, a short read — falls
 * back to store_chunk_read for that chunk, which knows how to retry.
 * store_chunks_read_cached does the same for the event loop with cached locations and
 * reads that never wait, and gives up (-EAGAIN) instead of falling back. Knows nothing of
 * exports or hashing. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "util/log.h"

/* Records per preadv: two iovecs each (header, bytes), well within Linux's IOV_MAX (1024);
 * 256 records of 4 KiB is 1 MiB per call. */
#define RUN_MAX 256

struct rv_item {
    uint64_t id;
    uint32_t pos; /* index in the caller's arrays */
};

static int
cmp_item(const void *a, const void *b)
{
    const struct rv_item *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills recs[i] and ok[i] for every i with a non-zero id, by one iterator pass over
 * [min, max] of the ids. Entries the pass does not see stay !ok (the caller falls back). */
static int
load_dense(struct store *st, const uint64_t *ids, size_t n, struct meta_chunk_rec *recs, bool *ok,
           struct rv_item *items)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] && !ok[i])
            items[m++] = (struct rv_item){.id = ids[i], .pos = (uint32_t) i};
    qsort(items, m, sizeof(*items), cmp_item);
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_CHUNK);
    if (!it)
        return -ENOMEM;
    uint8_t key[META_CHUNK_KEY_LEN];
    meta_key_chunk_encode(key, items[0].id);
    size_t j = 0;
    for (meta_iter_seek(it, key, sizeof(key)); meta_iter_valid(it) && j < m; meta_iter_next(it)) {
        size_t kl, vl;
        const void *kp = meta_iter_key(it, &kl);
        uint64_t id;
        if (meta_key_chunk_decode(kp, kl, &id))
            break;
        while (j < m && items[j].id < id)
            j++; /* not there: left to the fallback */
        if (j == m)
            break;
        if (items[j].id != id)
            continue;
        const void *vp = meta_iter_value(it, &vl);
        struct meta_chunk_rec r;
        if (meta_chunk_rec_decode(vp, vl, &r) != 0)
            break; /* the fallback logs it */
        for (; j < m && items[j].id == id; j++) {
            recs[items[j].pos] = r;
            ok[items[j].pos] = true;
        }
    }
    int rc = meta_iter_status(it);
    meta_iter_free(it);
    return rc;
}

/* Whether record i can join a run that ends with record p. */
static bool
adjacent(const struct meta_chunk_rec *p, const struct meta_chunk_rec *r)
{
    return p->seg == r->seg && p->off + store_record_len(p->stored_len) == r->off;
}

/* Where chunk i's header and bytes go: headers of a run into hdrs and bytes to bufs[i], or
 * both into the caller's record-shaped memory (rec, store_chunks_read_cached_rec). */
struct rv_dst {
    void *const *bufs;
    uint8_t *rec;
    uint8_t *hdrs;
};

static uint8_t *
dst_hdr(const struct rv_dst *d, uint32_t len, size_t i, size_t a)
{
    return d->rec ? d->rec + i * store_record_len(len) : d->hdrs + (i - a) * STORE_RECORD_HDR_LEN;
}

static uint8_t *
dst_bytes(const struct rv_dst *d, uint32_t len, size_t i)
{
    return d->rec ? d->rec + i * store_record_len(len) + STORE_RECORD_HDR_LEN : d->bufs[i];
}

/* Appends [p, p + len) to iov[0..n), merged into the last entry where memory continues
 * it: a run read into record-shaped memory is then one entry, one contiguous copy from the
 * page cache instead of two per record. Returns the new count. */
static int
iov_add(struct iovec *iov, int n, uint8_t *p, size_t len)
{
    if (n > 0 && (uint8_t *) iov[n - 1].iov_base + iov[n - 1].iov_len == p) {
        iov[n - 1].iov_len += len;
        return n;
    }
    iov[n] = (struct iovec){p, len};
    return n + 1;
}

/* Reads records [a, b) of one run (all ok, raw, len bytes) with one preadv (one that does
 * not wait for the disk when nowait) and checks them; a record that does not check out is
 * marked !ok for the fallback. */
static void
read_run(struct store *st, const uint64_t *ids, const struct rv_dst *d, uint32_t len,
         const struct meta_chunk_rec *recs, bool *ok, size_t a, size_t b, struct iovec *iov,
         bool nowait)
{
    struct store_seg *sg = store__seg_get(st, recs[a].seg);
    if (!sg) {
        for (size_t i = a; i < b; i++)
            ok[i] = false; /* compacted away meanwhile: store_chunk_read re-reads the entry */
        return;
    }
    int niov = 0;
    for (size_t i = a; i < b; i++) {
        niov = iov_add(iov, niov, dst_hdr(d, len, i, a), STORE_RECORD_HDR_LEN);
        niov = iov_add(iov, niov, dst_bytes(d, len, i), len);
    }
    ssize_t got;
    if (nowait)
        got = store__io->preadv_nowait(sg->fd, iov, niov, recs[a].off);
    else
        do
            got = store__io->preadv(sg->fd, iov, niov, recs[a].off);
        while (got == -EINTR);
    store__seg_put(st, sg);
    for (size_t i = a; i < b; i++) {
        size_t end = (i - a + 1) * (STORE_RECORD_HDR_LEN + len);
        if (got < 0 || (size_t) got < end ||
            !store_record_holds(dst_hdr(d, len, i, a), ids[i], len, dst_bytes(d, len, i)))
            ok[i] = false; /* store_chunk_read reads it again and logs what is wrong */
    }
}

/* store_chunks_read, and with nowait its non-blocking twin: locations from the cache
 * only, reads that do not wait, -EAGAIN instead of any fallback. */
static int
chunks_read(struct store *st, const uint64_t *ids, size_t n, struct rv_dst d, uint32_t len,
            bool nowait)
{
    if (nowait && (!store__io->preadv_nowait || !st->loc))
        return -EAGAIN;
    size_t k = 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ids[i])
            continue;
        k++;
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    if (k == 0)
        return 0;
    size_t run_cap = n < RUN_MAX ? n : RUN_MAX;
    size_t sz_r = n * sizeof(struct meta_chunk_rec), sz_ok = n * sizeof(bool);
    size_t sz_it = k * sizeof(struct rv_item), sz_iov = 2 * run_cap * sizeof(struct iovec);
    size_t sz_h = run_cap * STORE_RECORD_HDR_LEN, sz_loc = n * sizeof(struct store_loc);
    uint8_t *mem = malloc(sz_r + sz_loc + sz_it + sz_iov + sz_h + 2 * sz_ok);
    if (!mem)
        return nowait ? -EAGAIN : -ENOMEM;
    struct meta_chunk_rec *recs = (struct meta_chunk_rec *) mem;
    struct store_loc *locs = (struct store_loc *) (mem + sz_r);
    struct rv_item *items = (struct rv_item *) (mem + sz_r + sz_loc);
    struct iovec *iov = (struct iovec *) (mem + sz_r + sz_loc + sz_it);
    uint8_t *hdrs = mem + sz_r + sz_loc + sz_it + sz_iov;
    bool *ok = (bool *) (hdrs + sz_h);
    bool *hit = ok + n; /* the location came from the cache */
    d.hdrs = hdrs;
    memset(ok, 0, 2 * sz_ok);

    int rc = 0;
    /* Locations the cache knows first: hot shared chunks have thousands of versions of
     * their entry (one per refcount change) for an iterator to step over. */
    if (st->loc)
        store__loc_chunk_get_many(st, ids, n, locs, ok);
    k = 0, lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ids[i])
            continue;
        if (ok[i] && locs[i].len == len) {
            hit[i] = true;
            recs[i] = (struct meta_chunk_rec){.seg = locs[i].seg,
                                              .off = locs[i].off,
                                              .raw_len = len,
                                              .stored_len = len,
                                              .codec = STORE_CODEC_RAW};
            continue;
        }
        ok[i] = false;
        k++;
        lo = ids[i] < lo ? ids[i] : lo;
        hi = ids[i] > hi ? ids[i] : hi;
    }
    if (nowait && k > 0) {
        free(mem);
        return -EAGAIN;
    }
    /* An iterator pays for itself only over a dense range of ids; scattered ids (random
     * writes, shared chunks) are left to store_chunk_read's point reads. */
    if (k >= 4 && hi - lo < 4 * (uint64_t) k)
        rc = load_dense(st, ids, n, recs, ok, items);

    for (size_t i = 0; rc == 0 && i < n;) {
        if (!ok[i] || recs[i].codec != STORE_CODEC_RAW || recs[i].raw_len != len ||
            recs[i].stored_len != len) {
            ok[i] = false;
            i++;
            continue;
        }
        size_t b = i + 1;
        while (b < n && b - i < run_cap && ok[b] && recs[b].codec == STORE_CODEC_RAW &&
               recs[b].raw_len == len && recs[b].stored_len == len &&
               adjacent(&recs[b - 1], &recs[b]))
            b++;
        read_run(st, ids, &d, len, recs, ok, i, b, iov, nowait);
        i = b;
    }
    /* Locations the iterator found go into the cache once their records checked out, as
     * store_chunk_read's do: without this, data not written since the server started was
     * read through a worker and an iterator every time (the event loop's cached read
     * declined), a fifth slower than data written since (docs/benchmarks.md, item 39). */
    for (size_t i = 0; rc == 0 && st->loc && i < n; i++)
        if (ids[i] && ok[i] && !hit[i])
            store__loc_chunk_put(st, ids[i],
                                 &(struct store_loc){.seg = recs[i].seg,
                                                     .off = recs[i].off,
                                                     .len = recs[i].stored_len});
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!ids[i] || ok[i])
            continue;
        if (nowait) {
            rc = -EAGAIN; /* the blocking call re-reads it and reports what is wrong */
            break;
        }
        ssize_t got = store_chunk_read(st, ids[i], dst_bytes(&d, len, i), len);
        if (got < 0) {
            rc = (int) got; /* logged by store_chunk_read */
        } else if ((size_t) got != len) {
            log_err("store: chunk %" PRIu64 " holds %zd bytes, expected %" PRIu32, ids[i], got,
                    len);
            rc = -EIO;
        }
    }
    free(mem);
    return rc;
}

int
store_chunks_read(struct store *st, const uint64_t *ids, size_t n, void *const *bufs, uint32_t len)
{
    return chunks_read(st, ids, n, (struct rv_dst){.bufs = bufs}, len, false);
}

int
store_chunks_read_cached(struct store *st, const uint64_t *ids, size_t n, void *const *bufs,
                         uint32_t len)
{
    if (n == 1) /* a random read: no batch to set up, and RocksDB's caches may answer */
        return !ids[0] || store_chunk_read_cached(st, ids[0], bufs[0], len) == (ssize_t) len
                   ? 0
                   : -EAGAIN;
    return chunks_read(st, ids, n, (struct rv_dst){.bufs = bufs}, len, true);
}

size_t
store_rec_stride(uint32_t len)
{
    return store_record_len(len);
}

size_t
store_rec_skip(void)
{
    return STORE_RECORD_HDR_LEN;
}

int
store_chunks_read_cached_rec(struct store *st, const uint64_t *ids, size_t n, uint8_t *rec,
                             uint32_t len)
{
    return chunks_read(st, ids, n, (struct rv_dst){.rec = rec}, len, true);
}
