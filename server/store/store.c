/* store: opening and closing a data directory, reads (chunk info, chunk bytes, block map),
 * sync, statistics, and the persisted counters. Transactions are in txn.c, recovery in
 * recover.c, compaction in compact.c, check and scrub in check.c/scrub.c. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define DEFAULT_SEG_BYTES  (256ULL << 20)
#define MIN_SEG_BYTES      (64ULL << 10)
#define WAL_FLUSH_BYTES    (8ULL << 20) /* half the in-memory WAL buffer (meta/db.c) */
#define MEM_POLL_BYTES     (1ULL << 20)
#define MEM_HEADROOM_BYTES (8ULL << 20)
#define IDLE_FLUSH_TICKS   2     /* seconds without a write before the idle flush */
#define IDLE_FLUSH_ENTRIES 65536 /* default store_options.idle_flush_entries */

static char *
join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (p) {
        memcpy(p, a, la);
        p[la] = '/';
        memcpy(p + la + 1, b, lb + 1);
    }
    return p;
}

/* counters value v1: version u8 | chunks | shared | raw_bytes | stored_bytes | next_id */
#define COUNTERS_LEN (1 + 5 * 8)

void
store__counters_put(struct store *st, struct meta_batch *b, const struct store_counters *c)
{
    (void) st;
    uint8_t v[COUNTERS_LEN];
    v[0] = 1;
    store__put_be64(v + 1, c->chunks);
    store__put_be64(v + 9, c->shared);
    store__put_be64(v + 17, c->raw_bytes);
    store__put_be64(v + 25, c->stored_bytes);
    store__put_be64(v + 33, c->next_id);
    meta_batch_put(b, META_CF_META, STORE_META_COUNTERS, strlen(STORE_META_COUNTERS), v, sizeof(v));
}

static int
counters_load(struct store *st)
{
    uint8_t v[COUNTERS_LEN];
    ssize_t n = meta_get(st->meta, META_CF_META, STORE_META_COUNTERS, strlen(STORE_META_COUNTERS),
                         v, sizeof(v));
    if (n == -ENOENT) {
        memset(&st->cnt, 0, sizeof(st->cnt));
        st->cnt.next_id = st->id_next = 1;
        return 0;
    }
    if (n < 0)
        return (int) n;
    if (n != COUNTERS_LEN || v[0] != 1) {
        log_err("store: %s: malformed counters entry; run check with repair", st->dir);
        return -EPROTO;
    }
    st->cnt.chunks = store__get_be64(v + 1);
    st->cnt.shared = store__get_be64(v + 9);
    st->cnt.raw_bytes = store__get_be64(v + 17);
    st->cnt.stored_bytes = store__get_be64(v + 25);
    st->cnt.next_id = store__get_be64(v + 33);
    if (st->cnt.next_id == 0)
        st->cnt.next_id = 1;
    st->id_next = st->cnt.next_id;
    return 0;
}

static void
export_key(uint8_t key[sizeof(STORE_META_EXPORT) - 1 + 4], uint32_t export_id)
{
    memcpy(key, STORE_META_EXPORT, sizeof(STORE_META_EXPORT) - 1);
    meta_key_export_encode(key + sizeof(STORE_META_EXPORT) - 1, export_id);
}

void
store__export_put(struct meta_batch *b, uint32_t export_id, uint64_t v)
{
    uint8_t key[sizeof(STORE_META_EXPORT) - 1 + 4], val[8];
    export_key(key, export_id);
    store__put_be64(val, v);
    meta_batch_put(b, META_CF_META, key, sizeof(key), val, sizeof(val));
}

/* Caller holds stat_lock. */
static struct store_export_count *
export_slot(struct store *st, uint32_t export_id, bool create)
{
    for (size_t i = 0; i < st->nexports; i++)
        if (st->exports[i].export_id == export_id)
            return &st->exports[i];
    if (!create)
        return NULL;
    if (st->nexports == st->exports_cap) {
        size_t cap = st->exports_cap ? st->exports_cap * 2 : 8;
        struct store_export_count *n = realloc(st->exports, cap * sizeof(*n));
        if (!n)
            return NULL;
        st->exports = n;
        st->exports_cap = cap;
    }
    struct store_export_count *e = &st->exports[st->nexports++];
    e->export_id = export_id;
    e->mapped = 0;
    return e;
}

int
store__export_count_get(struct store *st, uint32_t export_id, uint64_t *out)
{
    pthread_mutex_lock(&st->stat_lock);
    struct store_export_count *e = export_slot(st, export_id, false);
    if (e) {
        *out = e->mapped;
        pthread_mutex_unlock(&st->stat_lock);
        return 0;
    }
    pthread_mutex_unlock(&st->stat_lock);
    uint8_t key[sizeof(STORE_META_EXPORT) - 1 + 4], val[8];
    export_key(key, export_id);
    ssize_t n = meta_get(st->meta, META_CF_META, key, sizeof(key), val, sizeof(val));
    uint64_t v = 0;
    if (n == 8)
        v = store__get_be64(val);
    else if (n != -ENOENT)
        return n < 0 ? (int) n : -EBADMSG;
    pthread_mutex_lock(&st->stat_lock);
    /* A commit may have filled the slot meanwhile; its value is newer than ours. */
    e = export_slot(st, export_id, false);
    if (!e) {
        e = export_slot(st, export_id, true);
        if (!e) {
            pthread_mutex_unlock(&st->stat_lock);
            return -ENOMEM;
        }
        e->mapped = v;
    }
    *out = e->mapped;
    pthread_mutex_unlock(&st->stat_lock);
    return 0;
}

void
store__export_count_set(struct store *st, uint32_t export_id, uint64_t v)
{
    pthread_mutex_lock(&st->stat_lock);
    struct store_export_count *e = export_slot(st, export_id, true);
    if (e)
        e->mapped = v;
    pthread_mutex_unlock(&st->stat_lock);
}

int
store_export_mapped(struct store *st, uint32_t export_id, uint64_t *chunks)
{
    return store__export_count_get(st, export_id, chunks);
}

int
store__chunk_load(struct store *st, uint64_t id, struct meta_chunk_rec *r)
{
    uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
    meta_key_chunk_encode(key, id);
    ssize_t n = meta_get(st->meta, META_CF_CHUNK, key, sizeof(key), val, sizeof(val));
    if (n < 0)
        return (int) n;
    return store__chunk_decode(st, id, val, (size_t) n, r);
}

int
store__chunk_decode(struct store *st, uint64_t id, const void *val, size_t n,
                    struct meta_chunk_rec *r)
{
    if (n > META_CHUNK_VAL_MAX || meta_chunk_rec_decode(val, n, r) != 0) {
        log_err("store: chunk %" PRIu64 ": malformed chunk entry", id);
        return -EIO;
    }
    store__refs_get(st, id, &r->refs); /* a journaled refcount is newer than the entry's */
    return 0;
}

static void
info_from_rec(struct store_chunk_info *out, uint64_t id, const struct meta_chunk_rec *r)
{
    out->id = id;
    out->seg = r->seg;
    out->off = r->off;
    out->raw_len = r->raw_len;
    out->stored_len = r->stored_len;
    out->codec = r->codec;
    out->hash_alg = r->hash_alg;
    out->hash_len = r->hash_len;
    out->refs = r->refs;
    memcpy(out->hash, r->hash, sizeof(out->hash));
}

int
store_chunk_get(struct store *st, uint64_t chunk_id, struct store_chunk_info *out)
{
    struct meta_chunk_rec r;
    int rc = store__chunk_load(st, chunk_id, &r);
    if (rc == 0)
        info_from_rec(out, chunk_id, &r);
    return rc;
}

/* The record at the chunk's cached location, if there is one and it checks out (header
 * names the chunk, CRC good); else the slot is dropped and -EAGAIN sends the caller to the
 * chunk entry, which also reports any real error. */
static ssize_t
read_at_cached_loc(struct store *st, uint64_t chunk_id, void *buf, size_t cap)
{
    struct store_loc loc;
    if (!st->loc || !store__loc_chunk_get(st, chunk_id, &loc))
        return -EAGAIN;
    struct store_seg *sg = loc.len <= cap ? store__seg_get(st, loc.seg) : NULL;
    if (sg) {
        struct store_record_hdr h;
        int rc = store__read_record(st, sg, loc.off, &h, buf, cap, loc.len);
        store__seg_put(st, sg);
        if (rc == 0 && h.chunk_id == chunk_id && h.stored_len == loc.len &&
            h.codec == STORE_CODEC_RAW && h.raw_len == h.stored_len)
            return (ssize_t) h.raw_len;
    }
    store__loc_chunk_drop(st, chunk_id);
    return -EAGAIN;
}

ssize_t
store_chunk_read(struct store *st, uint64_t chunk_id, void *buf, size_t cap)
{
    /* Compaction may move the record between our look-up and our read. The old segment
     * is only removed after the new location is committed, so a missing segment means
     * "look again"; a reader that got the segment keeps its fd open until it is done. */
    ssize_t got = read_at_cached_loc(st, chunk_id, buf, cap);
    if (got >= 0)
        return got;
    for (int attempt = 0; attempt < 4; attempt++) {
        struct meta_chunk_rec r;
        int rc = store__chunk_load(st, chunk_id, &r);
        if (rc)
            return rc;
        if (r.raw_len > cap)
            return -EINVAL;
        if (r.codec != STORE_CODEC_RAW) {
            log_err("store: chunk %" PRIu64 ": codec %u not supported", chunk_id, r.codec);
            return -EIO;
        }
        struct store_seg *sg = store__seg_get(st, r.seg);
        if (!sg)
            continue;
        struct store_record_hdr h;
        rc = store__read_record(st, sg, r.off, &h, buf, cap, r.stored_len);
        store__seg_put(st, sg);
        if (rc == 0 && (h.chunk_id != chunk_id || h.raw_len != r.raw_len))
            rc = -EUCLEAN;
        if (rc == -EUCLEAN)
            log_err("store: chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64
                    ": record corrupt (bad header, length or crc)",
                    chunk_id, r.seg, r.off);
        else if (rc)
            log_err("store: chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64 ": read: %s", chunk_id,
                    r.seg, r.off, strerror(-rc));
        if (rc == 0 && st->loc) /* a raw record: checked above */
            store__loc_chunk_put(
                st, chunk_id, &(struct store_loc){.seg = r.seg, .off = r.off, .len = r.stored_len});
        return rc ? rc : (ssize_t) r.raw_len;
    }
    log_err("store: chunk %" PRIu64 ": its segment is missing", chunk_id);
    return -EIO;
}

/* The map entry of one chunk from RocksDB, put into the location cache under gen (taken
 * by the cache miss before this read, as store__loc_map_fill requires). */
int
store__map_read(struct store *st, uint32_t export_id, uint64_t chunk_idx, uint64_t *chunk_id,
                uint32_t gen, bool nowait)
{
    uint8_t key[META_MAP_KEY_LEN], val[META_ID_VAL_LEN];
    meta_key_map_encode(key, export_id, chunk_idx);
    ssize_t n = -ENOENT;
    if (nowait || !store__map_unwritten(st, export_id, chunk_idx))
        n = (nowait ? meta_get_cached : meta_get)(st->meta, META_CF_MAP, key, sizeof(key), val,
                                                  sizeof(val));
    if (n < 0 && n != -ENOENT)
        return nowait ? -EAGAIN : (int) n;
    if (n == -ENOENT) {
        *chunk_id = 0;
    } else if (meta_val_id_decode(val, (size_t) n, chunk_id) != 0 || *chunk_id == 0) {
        if (nowait)
            return -EAGAIN;
        log_err("store: export %" PRIu32 " chunk %" PRIu64 ": malformed map entry", export_id,
                chunk_idx);
        return -EIO;
    }
    if (st->loc)
        store__loc_map_fill(st, export_id, chunk_idx, *chunk_id, gen);
    return *chunk_id ? 0 : -ENOENT;
}

int
store_map_get(struct store *st, uint32_t export_id, uint64_t chunk_idx, uint64_t *chunk_id)
{
    uint32_t gen = 0;
    if (st->loc && store__loc_map_get(st, export_id, chunk_idx, chunk_id, &gen))
        return *chunk_id ? 0 : -ENOENT;
    return store__map_read(st, export_id, chunk_idx, chunk_id, gen, false);
}

struct range_fill {
    uint64_t first;
    uint64_t *ids;
    const uint32_t *gens; /* UINT32_MAX: a cache hit, left as it is */
};

static int
range_collect(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct range_fill *r = arg;
    uint64_t i = chunk_idx - r->first;
    if (!r->gens || r->gens[i] != UINT32_MAX)
        r->ids[i] = chunk_id;
    return 0;
}

/* Misses of one store_map_get_range call read one by one rather than by an iterator: a
 * point read of a key the memtable holds is cheaper than building an iterator, for a few.
 * A 2 GiB export's half-million map entries fit the cache's 2^19 two-way buckets only
 * about nine in ten (collisions), so a 64-chunk read of it misses a few; one that misses
 * more takes the iterator pass. */
#define RANGE_POINT_MAX 16

int
store_map_get_range(struct store *st, uint32_t export_id, uint64_t first, uint64_t n, uint64_t *ids)
{
    if (n == 0)
        return 0;
    uint64_t lo = 0, hi = n, miss = n; /* misses lie in [lo, hi) */
    uint32_t *gens = NULL;
    if (st->loc) {
        gens = malloc(n * (sizeof(*gens) + sizeof(bool)));
        if (!gens)
            return -ENOMEM;
        bool *hit = (bool *) (gens + n);
        /* A miss's generation is taken before RocksDB is read, as store__loc_map_fill
         * requires; a hit's is not needed. */
        miss = n - store__loc_map_get_many(st, export_id, first, n, ids, gens, hit);
        lo = n, hi = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (hit[i]) {
                gens[i] = UINT32_MAX;
                continue;
            }
            if (gens[i] == UINT32_MAX)
                gens[i] = 0; /* never the hit mark: that fill is refused, harmlessly */
            lo = i < lo ? i : lo;
            hi = i + 1;
        }
    }
    int rc = 0;
    if (miss > 0 && miss <= RANGE_POINT_MAX && gens) {
        for (uint64_t i = lo; rc == 0 && i < hi; i++) {
            if (gens[i] == UINT32_MAX)
                continue;
            rc = store__map_read(st, export_id, first + i, &ids[i], gens[i], false);
            if (rc == -ENOENT)
                rc = 0; /* ids[i] is 0 */
        }
    } else if (miss > 0) {
        for (uint64_t i = lo; i < hi; i++)
            if (!gens || gens[i] != UINT32_MAX)
                ids[i] = 0;
        struct range_fill r = {.first = first, .ids = ids, .gens = gens};
        rc = store_map_scan(st, export_id, first + lo, hi - lo, range_collect, &r);
        if (rc == 0 && gens)
            for (uint64_t i = lo; i < hi; i++)
                if (gens[i] != UINT32_MAX)
                    store__loc_map_fill(st, export_id, first + i, ids[i], gens[i]);
    }
    free(gens);
    return rc;
}

int
store_map_scan(struct store *st, uint32_t export_id, uint64_t first, uint64_t count,
               int (*fn)(void *arg, uint64_t chunk_idx, uint64_t chunk_id), void *arg)
{
    if (count == 0)
        return 0;
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_MAP);
    if (!it)
        return -ENOMEM;
    uint8_t key[META_MAP_KEY_LEN];
    meta_key_map_encode(key, export_id, first);
    int rc = 0;
    uint64_t last = first + count - 1 < first ? UINT64_MAX : first + count - 1;
    for (meta_iter_seek(it, key, sizeof(key)); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint32_t e;
        uint64_t idx, id;
        if (meta_key_map_decode(k, kl, &e, &idx) || meta_val_id_decode(v, vl, &id)) {
            log_err("store: export %" PRIu32 ": malformed map entry during scan", export_id);
            rc = -EIO;
            break;
        }
        if (e != export_id || idx > last)
            break;
        rc = fn(arg, idx, id);
        if (rc)
            break;
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    return rc;
}

struct meta *
store_meta(struct store *st)
{
    return st->meta;
}

/* Invariant 4: segment fdatasync first, then the WAL. The commit lock keeps a transaction
 * from appending between the two (its batch would reach the WAL ahead of its bytes). The
 * synced watermarks go into a small batch between the two steps, so recovery knows which
 * segment bytes it must not doubt. */
int
store__sync_locked(struct store *st)
{
    if (st->opt.read_only)
        return 0;
    int rc = store__seg_sync_all(st);
    if (rc)
        return rc;
    struct meta_batch *b = st->txn.batch;
    meta_batch_clear(b);
    for (size_t i = 0; i < st->nsegs; i++) {
        if (st->segs[i]->dirty) {
            store__seg_put_meta_synced(b, st->segs[i]);
            st->segs[i]->dirty = false;
        }
    }
    rc = meta_batch_commit(st->meta, b, false);
    meta_batch_clear(b);
    if (rc == 0)
        rc = meta_flush_wal(st->meta, true); /* segments are synced above: no hook */
    if (rc == 0)
        st->wal_unflushed = 0;
    return rc;
}

int
store_sync(struct store *st)
{
    pthread_mutex_lock(&st->commit_lock);
    int rc = store__sync_locked(st);
    pthread_mutex_unlock(&st->commit_lock);
    return rc;
}

/* Called after each commit with the commit lock held. Keeps RocksDB from persisting a
 * batch before the segment bytes it references: the in-memory WAL buffer is written out
 * (after an fdatasync) before it fills up on its own, and a memtable close to RocksDB's
 * own flush threshold is flushed here, after an fdatasync, instead. */
int
store__wal_pace(struct store *st, size_t batch_bytes)
{
    st->wal_unflushed += batch_bytes;
    st->mem_unpolled += batch_bytes;
    int rc = 0;
    if (st->mem_unpolled >= MEM_POLL_BYTES) {
        st->mem_unpolled = 0;
        if (meta_memtable_bytes(st->meta) + MEM_HEADROOM_BYTES >= meta_memtable_limit()) {
            /* Not waiting for the flush: it covers only what is committed now, all of it
             * synced above. Waiting held every writer for the whole flush of all column
             * families (seconds on a 2-core machine, the sort of `hash`'s memtable
             * included). A flush still running when the next one is due makes this call
             * wait (RocksDB's memtable limit): the back-pressure we want. */
            rc = store__sync_locked(st);
            if (rc == 0)
                rc = meta_flush_memtables(st->meta, false);
            return rc;
        }
    }
    if (st->wal_unflushed >= WAL_FLUSH_BYTES) {
        rc = store__seg_sync_all(st);
        if (rc == 0)
            rc = meta_flush_wal(st->meta, false);
        if (rc == 0)
            st->wal_unflushed = 0;
    }
    return rc;
}

/* RocksDB flushes a memtable when it is full, that is, in the middle of the burst of
 * writes that fills it. A server whose writes stopped with well-filled memtables made the
 * next writer pay the flush of what the last one wrote: up to a quarter of the server's CPU
 * during random 4 KiB writes after a sequential fill on the 2-core machine, most of it
 * sorting a copy of the `hash` memtable (docs/benchmarks.md, item 48). So once the
 * memtables have not changed for IDLE_FLUSH_TICKS ticks and hold enough entries to be
 * worth an SST file, they are flushed now — after a segment sync, as store__wal_pace does.
 * Nothing waits for the flush; it also lets RocksDB drop its old log files, which shortens
 * the next start's log replay. */
void
store__idle_tick(struct store *st)
{
    uint64_t n = meta_memtable_entries(st->meta);
    if (n != st->idle_entries) {
        st->idle_entries = n;
        st->idle_ticks = 0;
        return;
    }
    if (++st->idle_ticks != IDLE_FLUSH_TICKS || n < st->opt.idle_flush_entries)
        return;
    pthread_mutex_lock(&st->commit_lock);
    int rc = store__sync_locked(st);
    if (rc == 0)
        rc = meta_flush_memtables(st->meta, false);
    pthread_mutex_unlock(&st->commit_lock);
    st->idle_entries = meta_memtable_entries(st->meta);
    if (rc) {
        log_warn("store: idle flush of %" PRIu64 " memtable entries: %s", n, strerror(-rc));
        return;
    }
    __atomic_add_fetch(&st->idle_flushes, 1, __ATOMIC_RELAXED);
    log_debug("store: no writes for %d s: flushing %" PRIu64 " memtable entries", IDLE_FLUSH_TICKS,
              n);
}

int
store_stats(struct store *st, struct store_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&st->stat_lock);
    out->chunks = st->cnt.chunks;
    out->chunks_shared = st->cnt.shared;
    out->raw_bytes = st->cnt.raw_bytes;
    out->stored_bytes = st->cnt.stored_bytes;
    out->compactions = st->compactions;
    out->idle_flushes = __atomic_load_n(&st->idle_flushes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&st->stat_lock);
    out->sync_error = __atomic_load_n(&st->seg_sync_err, __ATOMIC_SEQ_CST);
    store__space_report(st, out);
    /* Segment sizes and dead bytes change under the commit lock; a racy read of 64-bit
     * fields on a 64-bit host is good enough for a statistic, but take seg_lock so the
     * table itself does not move under us. */
    pthread_mutex_lock(&st->seg_lock);
    for (size_t i = 0; i < st->nsegs; i++) {
        out->disk_bytes += __atomic_load_n(&st->segs[i]->size, __ATOMIC_RELAXED);
        out->dead_bytes += __atomic_load_n(&st->segs[i]->dead, __ATOMIC_RELAXED);
    }
    out->segments = st->nsegs;
    pthread_mutex_unlock(&st->seg_lock);
    for (int cf = 0; cf < META_CF__COUNT; cf++)
        out->meta_bytes += meta_cf_size(st->meta, (enum meta_cf) cf);
    return 0;
}

int
store_open(const char *data_dir, const struct store_options *opt, struct store **out)
{
    struct store_options dflt = {0};
    struct store *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->lock_fd = -1;
    st->opt = opt ? *opt : dflt;
    if (st->opt.seg_bytes == 0)
        st->opt.seg_bytes = DEFAULT_SEG_BYTES;
    if (st->opt.seg_bytes < MIN_SEG_BYTES)
        st->opt.seg_bytes = MIN_SEG_BYTES;
    if (st->opt.compact_live_ratio <= 0 || st->opt.compact_live_ratio > 1)
        st->opt.compact_live_ratio = 0.5;
    if (st->opt.compact_bytes_per_sec == 0)
        st->opt.compact_bytes_per_sec = 64ULL << 20;
    if (st->opt.reserve_bytes == 0)
        st->opt.reserve_bytes = 64ULL << 20;
    if (st->opt.idle_flush_entries == 0)
        st->opt.idle_flush_entries = IDLE_FLUSH_ENTRIES;
    pthread_mutex_init(&st->commit_lock, NULL);
    pthread_mutex_init(&st->append_lock, NULL);
    pthread_rwlock_init(&st->wal_lock, NULL);
    pthread_mutex_init(&st->seg_lock, NULL);
    pthread_mutex_init(&st->stat_lock, NULL);
    pthread_mutex_init(&st->compact_mu, NULL);
    pthread_mutex_init(&st->compact_run, NULL);
    pthread_cond_init(&st->compact_cv, NULL);

    pthread_mutex_init(&st->mapend_lock, NULL);
    store__refs_init(st);

    int rc = -ENOMEM;
    st->dir = strdup(data_dir);
    st->seg_dir = join(data_dir, "segments");
    st->db_dir = join(data_dir, "db");
    char *lock_path = join(data_dir, DEDUPD_LOCK_NAME);
    if (!st->dir || !st->seg_dir || !st->db_dir || !lock_path)
        goto fail;
    if (!st->opt.read_only) {
        rc = store__io_mkdir_p(st->dir);
        if (rc) {
            log_err("store: %s: cannot create the directory: %s", data_dir, strerror(-rc));
            goto fail;
        }
    }
    rc = store__io->lock(lock_path);
    if (rc < 0) {
        if (rc == -EBUSY)
            log_err("store: %s: locked by another process (%s)", data_dir, lock_path);
        else
            log_err("store: %s: lock %s: %s", data_dir, lock_path, strerror(-rc));
        goto fail;
    }
    st->lock_fd = rc;

    struct meta_options mo = {
        .block_cache_bytes = st->opt.block_cache_bytes,
        .create_if_missing = !st->opt.read_only,
        .read_only = st->opt.read_only,
    };
    rc = meta_open(st->db_dir, &mo, &st->meta);
    if (rc)
        goto fail;
    meta_set_wal_hook(st->meta, store__wal_hook, st);
    /* Only now that the database is known to be ours (or was just created). */
    if (!st->opt.read_only) {
        rc = store__io->mkdir(st->seg_dir, 0755);
        if (rc && rc != -EEXIST) {
            log_err("store: %s: cannot create: %s", st->seg_dir, strerror(-rc));
            goto fail;
        }
    }
    rc = store__txn_init(&st->txn, st);
    if (rc == 0)
        rc = store__mapend_init(st);
    if (rc)
        goto fail;
    rc = counters_load(st);
    if (rc)
        goto fail;
    rc = store__seg_open_all(st);
    if (rc) {
        log_err("store: %s: cannot open segments: %s", st->seg_dir, strerror(-rc));
        goto fail;
    }
    rc = store__refs_load(st); /* before recovery, which reads refcounts */
    if (rc == 0)
        rc = store__recover(st);
    if (rc)
        goto fail;
    store__ccache_drop_all(st); /* recovery may have removed chunk entries */
    rc = store__loc_init(st);   /* after recovery, which changes entries behind it */
    if (rc)
        goto fail;
    if (st->opt.background_compaction && !st->opt.read_only) {
        rc = store__compact_start(st);
        if (rc)
            goto fail;
    }
    free(lock_path);
    st->opened = true;
    *out = st;
    return 0;
fail:
    free(lock_path);
    store_close(st);
    return rc;
}

void
store_close(struct store *st)
{
    if (!st)
        return;
    store__compact_stop(st);
    if (st->opened && !st->opt.read_only) {
        /* The journal into the chunk entries, so a clean directory holds none (an error
         * is logged; the journal stays and the next open loads it). */
        pthread_mutex_lock(&st->commit_lock);
        store__refs_fold(st);
        pthread_mutex_unlock(&st->commit_lock);
        pthread_mutex_lock(&st->append_lock); /* a clean directory has no zeros past a size */
        if (st->active)
            store__seg_trim(st->active);
        pthread_mutex_unlock(&st->append_lock);
        int rc = store_sync(st);
        if (rc)
            log_err("store: %s: sync at close failed: %s", st->dir, strerror(-rc));
    }
    /* meta first: its closing WAL sync goes through the store's hook, which needs the
     * segments still open (if they cannot be synced, the WAL is not synced either). */
    meta_close(st->meta);
    store__seg_close_all(st);
    store__txn_fini(&st->txn);
    store__loc_fini(st);
    store__mapend_fini(st);
    store__refs_fini(st);
    if (st->lock_fd >= 0)
        store__io->close(st->lock_fd);
    pthread_mutex_destroy(&st->commit_lock);
    pthread_mutex_destroy(&st->append_lock);
    pthread_rwlock_destroy(&st->wal_lock);
    pthread_mutex_destroy(&st->seg_lock);
    pthread_mutex_destroy(&st->stat_lock);
    pthread_mutex_destroy(&st->compact_mu);
    pthread_mutex_destroy(&st->compact_run);
    pthread_cond_destroy(&st->compact_cv);
    free(st->exports);
    free(st->dir);
    free(st->seg_dir);
    free(st->db_dir);
    free(st);
}
