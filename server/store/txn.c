/* txn: store transactions — appending chunk records, block map changes and refcounts,
 * applied in one RocksDB batch at commit (invariant 3: the segment bytes are written
 * before the batch). The commit lock is held from begin to commit/abort, so look-ups made
 * inside a transaction cannot race with frees. Refcounts are read-modify-written under that
 * lock through an overlay, so one chunk touched many times in one transaction gets one
 * final value. Knows nothing of hashing policy or exports beyond map keys. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32c.h"
#include "util/hash.h"
#include "util/log.h"

/* Bytes appended to the active segment between two early write-back starts. */
#define WRITEBACK_KICK_BYTES (4ULL << 20)

int
store__txn_init(struct store_txn *tx, struct store *st)
{
    memset(tx, 0, sizeof(*tx));
    tx->st = st;
    tx->batch = meta_batch_new();
    tx->chunks_cap = 1024;
    tx->chunks = calloc(tx->chunks_cap, sizeof(*tx->chunks));
    tx->chunk_used = malloc(tx->chunks_cap * sizeof(*tx->chunk_used));
    tx->maps_cap = 1024;
    tx->maps = calloc(tx->maps_cap, sizeof(*tx->maps));
    tx->map_used = malloc(tx->maps_cap * sizeof(*tx->map_used));
    tx->ccache = calloc(STORE_CCACHE_SLOTS, sizeof(*tx->ccache));
    if (!tx->batch || !tx->chunks || !tx->chunk_used || !tx->maps || !tx->map_used || !tx->ccache)
        return -ENOMEM;
    return 0;
}

void
store__txn_fini(struct store_txn *tx)
{
    meta_batch_free(tx->batch);
    free(tx->chunks);
    free(tx->chunk_used);
    free(tx->maps);
    free(tx->map_used);
    free(tx->wbuf);
    free(tx->wiov);
    free(tx->ccache);
    free(tx->segs);
    memset(tx, 0, sizeof(*tx));
}

static void
txn_reset(struct store_txn *tx)
{
    for (size_t i = 0; i < tx->nchunks; i++)
        tx->chunks[tx->chunk_used[i]].id = 0;
    for (size_t i = 0; i < tx->nmaps; i++)
        tx->maps[tx->map_used[i]].used = false;
    tx->nchunks = tx->nmaps = tx->nexports = tx->nsegs = 0;
    tx->wlen = tx->wused = tx->nwiov = 0;
    tx->broken = false;
    tx->active = false;
    meta_batch_clear(tx->batch);
}

/* ---- overlay tables ---- */

static struct txn_chunk *
chunk_slot(struct store_txn *tx, uint64_t id, bool *found)
{
    size_t mask = tx->chunks_cap - 1;
    for (size_t i = store__mix64(id) & mask;; i = (i + 1) & mask) {
        if (tx->chunks[i].id == id) {
            *found = true;
            return &tx->chunks[i];
        }
        if (tx->chunks[i].id == 0) {
            *found = false;
            return &tx->chunks[i];
        }
    }
}

static int
chunks_grow(struct store_txn *tx)
{
    size_t cap = tx->chunks_cap * 2;
    struct txn_chunk *old = tx->chunks;
    uint32_t *used = malloc(cap * sizeof(*used));
    struct txn_chunk *n = calloc(cap, sizeof(*n));
    if (!n || !used) {
        free(n);
        free(used);
        return -ENOMEM;
    }
    tx->chunks = n;
    tx->chunks_cap = cap;
    for (size_t i = 0; i < tx->nchunks; i++) {
        bool f;
        struct txn_chunk *s = chunk_slot(tx, old[tx->chunk_used[i]].id, &f);
        *s = old[tx->chunk_used[i]];
        used[i] = (uint32_t) (s - n);
    }
    free(old);
    free(tx->chunk_used);
    tx->chunk_used = used;
    return 0;
}

/* ---- the chunk-entry cache (see struct store_txn) ---- */

static struct store_ccache_slot *
ccache_slot(struct store_txn *tx, uint64_t id)
{
    return &tx->ccache[store__mix64(id) & (STORE_CCACHE_SLOTS - 1)];
}

static void
ccache_put(struct store_txn *tx, uint64_t id, const struct meta_chunk_rec *r)
{
    struct store_ccache_slot *s = ccache_slot(tx, id);
    s->id = id;
    s->rec = *r;
}

static void
ccache_drop(struct store_txn *tx, uint64_t id)
{
    struct store_ccache_slot *s = ccache_slot(tx, id);
    if (s->id == id)
        s->id = 0;
}

void
store__ccache_drop_all(struct store *st)
{
    memset(st->txn.ccache, 0, STORE_CCACHE_SLOTS * sizeof(*st->txn.ccache));
}

_Static_assert(STORE_CHUNK_PRE_VAL_MAX >= META_CHUNK_VAL_MAX, "store_chunk_pre too small");

void
store__entries_rewritten(struct store *st)
{
    atomic_fetch_add_explicit(&st->entry_epoch, 1, memory_order_release);
}

int
store_chunk_preload(struct store *st, uint64_t chunk_id, struct store_chunk_pre *out)
{
    out->id = 0;
    /* The epoch first: an entry rewritten after this load bumps it past what we record. */
    out->epoch = atomic_load_explicit(&st->entry_epoch, memory_order_acquire);
    uint8_t key[META_CHUNK_KEY_LEN];
    meta_key_chunk_encode(key, chunk_id);
    ssize_t n = meta_get(st->meta, META_CF_CHUNK, key, sizeof(key), out->val, sizeof(out->val));
    if (n < 0)
        return (int) n;
    if ((size_t) n > sizeof(out->val))
        return -EIO; /* the transaction's own read reports it */
    out->len = (uint8_t) n;
    out->id = chunk_id;
    return 0;
}

/* pre holds id's entry and no entry was rewritten behind the journal since it was read. */
static bool
pre_current(struct store *st, const struct store_chunk_pre *pre, uint64_t id)
{
    return pre && pre->id == id &&
           pre->epoch == atomic_load_explicit(&st->entry_epoch, memory_order_acquire);
}

/* The committed entry of chunk id: from the cache, else from pre if it is id's and still
 * current, else from meta (then cached). Either way the journal's table gives the refcount
 * when it holds one (store__chunk_decode): those change without an epoch bump. */
static int
chunk_load(struct store_txn *tx, uint64_t id, const struct store_chunk_pre *pre,
           struct meta_chunk_rec *r)
{
    struct store_ccache_slot *s = ccache_slot(tx, id);
    if (s->id == id) {
        *r = s->rec;
        return 0;
    }
    int rc = pre_current(tx->st, pre, id) ? store__chunk_decode(tx->st, id, pre->val, pre->len, r)
                                          : store__chunk_load(tx->st, id, r);
    if (rc == 0)
        ccache_put(tx, id, r);
    return rc;
}

/* The overlay entry of id, loading it (pre: see chunk_load) if the transaction has not
 * touched it. */
static int
chunk_entry_pre(struct store_txn *tx, uint64_t id, const struct store_chunk_pre *pre,
                struct txn_chunk **out)
{
    bool found;
    struct txn_chunk *e = chunk_slot(tx, id, &found);
    if (found) {
        *out = e;
        return 0;
    }
    struct meta_chunk_rec r;
    int rc = chunk_load(tx, id, pre, &r);
    if (rc)
        return rc;
    if ((tx->nchunks + 1) * 2 > tx->chunks_cap) {
        rc = chunks_grow(tx);
        if (rc)
            return rc;
        e = chunk_slot(tx, id, &found);
    }
    e->id = id;
    e->rec = r;
    e->delta = 0;
    e->is_new = false;
    tx->chunk_used[tx->nchunks++] = (uint32_t) (e - tx->chunks);
    *out = e;
    return 0;
}

static int
chunk_entry(struct store_txn *tx, uint64_t id, struct txn_chunk **out)
{
    return chunk_entry_pre(tx, id, NULL, out);
}

static struct txn_map *
map_slot(struct store_txn *tx, uint32_t export_id, uint64_t idx, bool *found)
{
    size_t mask = tx->maps_cap - 1;
    for (size_t i = store__mix64(idx * 31 + export_id) & mask;; i = (i + 1) & mask) {
        struct txn_map *m = &tx->maps[i];
        if (!m->used) {
            *found = false;
            return m;
        }
        if (m->export_id == export_id && m->chunk_idx == idx) {
            *found = true;
            return m;
        }
    }
}

static int
maps_grow(struct store_txn *tx)
{
    size_t cap = tx->maps_cap * 2;
    struct txn_map *old = tx->maps;
    uint32_t *used = malloc(cap * sizeof(*used));
    struct txn_map *n = calloc(cap, sizeof(*n));
    if (!n || !used) {
        free(n);
        free(used);
        return -ENOMEM;
    }
    tx->maps = n;
    tx->maps_cap = cap;
    for (size_t i = 0; i < tx->nmaps; i++) {
        bool f;
        struct txn_map *o = &old[tx->map_used[i]];
        struct txn_map *s = map_slot(tx, o->export_id, o->chunk_idx, &f);
        *s = *o;
        used[i] = (uint32_t) (s - n);
    }
    free(old);
    free(tx->map_used);
    tx->map_used = used;
    return 0;
}

static struct txn_seg *
seg_delta(struct store_txn *tx, struct store_seg *sg)
{
    for (size_t i = 0; i < tx->nsegs; i++)
        if (tx->segs[i].sg == sg)
            return &tx->segs[i];
    if (tx->nsegs == tx->segs_cap) {
        size_t cap = tx->segs_cap ? tx->segs_cap * 2 : 8;
        struct txn_seg *n = realloc(tx->segs, cap * sizeof(*n));
        if (!n)
            return NULL;
        tx->segs = n;
        tx->segs_cap = cap;
    }
    struct txn_seg *d = &tx->segs[tx->nsegs++];
    d->sg = sg;
    d->d_live = d->d_dead = 0;
    d->early_done = 0;
    return d;
}

/* In-transaction appends take the append position for the rest of the transaction (until
 * their records are written, or rolled back): early appenders wait meanwhile. */
static void
append_begin(struct store_txn *tx)
{
    if (tx->appending)
        return;
    pthread_mutex_lock(&tx->st->append_lock);
    tx->appending = true;
    tx->woff = store__seg_size(tx->st->active);
}

static void
append_end(struct store_txn *tx)
{
    if (!tx->appending)
        return;
    tx->appending = false;
    pthread_mutex_unlock(&tx->st->append_lock);
}

/* ---- the API ---- */

int
store_txn_begin(struct store *st, struct store_txn **out)
{
    if (st->opt.read_only)
        return -EROFS;
    pthread_mutex_lock(&st->commit_lock);
    struct store_txn *tx = &st->txn;
    txn_reset(tx);
    tx->active = true;
    *out = tx;
    return 0;
}

struct meta_batch *
store_txn_batch(struct store_txn *tx)
{
    return tx->batch;
}

/* Queues the next len bytes of the pending write: from wbuf (ext NULL: the bytes at
 * wbuf + wused, already there) or borrowed from the caller. Room was made by reserve_append. */
static void
queue_piece(struct store_txn *tx, const void *ext, size_t len)
{
    struct iovec *last = tx->nwiov ? &tx->wiov[tx->nwiov - 1] : NULL;
    if (!ext && last && !last->iov_base) {
        last->iov_len += len; /* contiguous in wbuf */
    } else {
        tx->wiov[tx->nwiov++] = (struct iovec){(void *) ext, len};
    }
    if (!ext)
        tx->wused += len;
    tx->wlen += len;
}

static int
flush_wbuf(struct store_txn *tx)
{
    struct store *st = tx->st;
    if (tx->wlen == 0)
        return 0;
    size_t at = 0;
    for (size_t i = 0; i < tx->nwiov; i++) {
        if (!tx->wiov[i].iov_base) {
            tx->wiov[i].iov_base = tx->wbuf + at;
            at += tx->wiov[i].iov_len;
        }
    }
    store__seg_prefill(st->active, tx->woff, tx->woff + tx->wlen);
    int rc = store__io_writev_full(st->active->fd, tx->wiov, tx->nwiov, tx->woff);
    /* After the write: a WAL hook that clears the flag then syncs covers these bytes. */
    __atomic_store_n(&st->active->unsynced, 1, __ATOMIC_SEQ_CST);
    if (rc) {
        log_err("store: seg %" PRIu32 " off %" PRIu64 ": write of %zu bytes: %s", st->active->id,
                tx->woff, tx->wlen, strerror(-rc));
        return rc;
    }
    tx->woff += tx->wlen;
    tx->wlen = tx->wused = tx->nwiov = 0;
    return 0;
}

/* Makes room for one record of reclen bytes, wbytes of them copied into wbuf (two pieces at
 * most), sealing the active segment first if the record would not fit in it. The record goes
 * to (st->active, active->size). */
static int
reserve_append(struct store_txn *tx, uint64_t reclen, size_t wbytes)
{
    struct store *st = tx->st;
    append_begin(tx);
    if (st->active->size > 0 && st->active->size + reclen > st->opt.seg_bytes) {
        /* Seal: the records so far go to the old segment now, the rest to a new one. */
        int rc = flush_wbuf(tx);
        if (rc == 0) {
            struct store_seg *old = st->active;
            rc = store__seal_active(st);
            if (rc == 0 && (!seg_delta(tx, old) || !seg_delta(tx, st->active)))
                rc = -ENOMEM;
        }
        if (rc) {
            tx->broken = true;
            return rc;
        }
        tx->woff = st->active->size;
    }
    if (tx->wused + wbytes > tx->wcap) {
        size_t cap = tx->wcap ? tx->wcap : (1u << 20);
        while (cap < tx->wused + wbytes)
            cap *= 2;
        uint8_t *n = realloc(tx->wbuf, cap);
        if (!n)
            return -ENOMEM;
        tx->wbuf = n;
        tx->wcap = cap;
    }
    if (tx->nwiov + 2 > tx->wiov_cap) {
        size_t cap = tx->wiov_cap ? tx->wiov_cap * 2 : 256;
        struct iovec *n = realloc(tx->wiov, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        tx->wiov = n;
        tx->wiov_cap = cap;
    }
    return seg_delta(tx, st->active) ? 0 : -ENOMEM;
}

/* Digest length of a known algorithm, 0 for none or one this build does not know. */
static size_t
alg_len(uint8_t alg)
{
    return hash_len((enum dedupd_hash_alg) alg);
}

/* Fills overlay slot e for a new chunk whose record is at (seg, off). */
static void
new_entry(struct store_txn *tx, struct txn_chunk *e, uint64_t id, uint32_t seg, uint64_t off,
          uint32_t len, uint8_t hash_alg, const uint8_t *hash, size_t hash_len)
{
    memset(e, 0, sizeof(*e));
    e->id = id;
    e->is_new = true;
    e->rec.seg = seg;
    e->rec.off = off;
    e->rec.raw_len = len;
    e->rec.stored_len = len;
    e->rec.codec = STORE_CODEC_RAW;
    e->rec.hash_alg = hash_alg;
    e->rec.hash_len = (uint8_t) hash_len;
    if (hash_len)
        memcpy(e->rec.hash, hash, hash_len);
    tx->chunk_used[tx->nchunks++] = (uint32_t) (e - tx->chunks);
}

/* The arguments of a new chunk record, as add_chunk and store_append_early take them. */
bool
store__new_chunk_ok(uint8_t hash_alg, const uint8_t *hash, size_t hash_len, uint32_t len)
{
    return len > 0 && len <= DEDUPD_CHUNK_MAX && hash_len <= DEDUPD_HASH_MAX_LEN &&
           (!hash_len || hash) && (!hash_alg || hash_len) &&
           (!alg_len(hash_alg) || alg_len(hash_alg) == hash_len);
}

void
store__encode_new_record(uint8_t out[STORE_RECORD_HDR_LEN], uint64_t id, uint8_t hash_alg,
                         const uint8_t *hash, size_t hash_len, uint32_t len, uint32_t crc)
{
    struct store_record_hdr h = {
        .codec = STORE_CODEC_RAW,
        .hash_alg = hash_alg,
        .hash_len = (uint8_t) hash_len,
        .raw_len = len,
        .stored_len = len,
        .chunk_id = id,
        .data_crc = crc,
    };
    if (hash_len)
        memcpy(h.hash, hash, hash_len);
    store_record_encode(out, &h);
}

static int
add_chunk(struct store_txn *tx, uint8_t hash_alg, const uint8_t *hash, size_t hash_len,
          const void *buf, uint32_t len, bool borrow, uint32_t crc, uint64_t *chunk_id)
{
    struct store *st = tx->st;
    if (tx->broken)
        return -EIO;
    if (!store__new_chunk_ok(hash_alg, hash, hash_len, len))
        return -EINVAL;
    uint64_t reclen = store_record_len(len);
    append_begin(tx); /* new data: claimed against the free-space reserve (append_lock) */
    int rc = store__space_claim(st, reclen);
    if (rc == 0)
        rc = reserve_append(tx, reclen, borrow ? STORE_RECORD_HDR_LEN : reclen);
    if (rc)
        return rc;
    bool found;
    if ((tx->nchunks + 1) * 2 > tx->chunks_cap && chunks_grow(tx))
        return -ENOMEM;
    uint64_t id = st->id_next; /* append_lock: reserve_append took it */
    struct txn_chunk *e = chunk_slot(tx, id, &found);

    store__encode_new_record(tx->wbuf + tx->wused, id, hash_alg, hash, hash_len, len,
                             borrow ? crc : crc32c(0, buf, len));
    if (borrow) {
        queue_piece(tx, NULL, STORE_RECORD_HDR_LEN);
        queue_piece(tx, buf, len);
    } else {
        memcpy(tx->wbuf + tx->wused + STORE_RECORD_HDR_LEN, buf, len);
        queue_piece(tx, NULL, reclen);
    }

    new_entry(tx, e, id, st->active->id, st->active->size, len, hash_alg, hash, hash_len);
    __atomic_store_n(&st->id_next, id + 1, __ATOMIC_RELEASE);
    store__seg_set_size(st->active, st->active->size + reclen);
    *chunk_id = id;
    return 0;
}

int
store_txn_add_chunk(struct store_txn *tx, uint8_t hash_alg, const uint8_t *hash, size_t hash_len,
                    const void *buf, uint32_t len, uint64_t *chunk_id)
{
    return add_chunk(tx, hash_alg, hash, hash_len, buf, len, false, 0, chunk_id);
}

int
store_txn_add_chunk_ref(struct store_txn *tx, uint8_t hash_alg, const uint8_t *hash,
                        size_t hash_len, const void *buf, uint32_t len, uint32_t crc,
                        uint64_t *chunk_id)
{
    return add_chunk(tx, hash_alg, hash, hash_len, buf, len, true, crc, chunk_id);
}

int
store_txn_add_early(struct store_txn *tx, const struct store_new_chunk *c)
{
    struct store *st = tx->st;
    if (tx->broken)
        return -EIO;
    if (!store__new_chunk_ok(c->hash_alg, c->hash, c->hash_len, c->len) || c->id == 0 ||
        c->id >= __atomic_load_n(&st->id_next, __ATOMIC_ACQUIRE))
        return -EINVAL;
    struct store_seg *sg = store__seg_find(st, c->seg);
    if (!sg || c->off + store_record_len(c->len) > store__seg_size(sg))
        return -EINVAL;
    struct txn_seg *d = seg_delta(tx, sg);
    if (!d || ((tx->nchunks + 1) * 2 > tx->chunks_cap && chunks_grow(tx)))
        return -ENOMEM;
    bool found;
    struct txn_chunk *e = chunk_slot(tx, c->id, &found);
    if (found)
        return -EINVAL; /* added twice */
    d->early_done++;
    new_entry(tx, e, c->id, c->seg, c->off, c->len, c->hash_alg, c->hash, c->hash_len);
    e->early = true;
    return 0;
}

int
store_txn_drop_early(struct store_txn *tx, const struct store_new_chunk *c)
{
    struct store_seg *sg = store__seg_find(tx->st, c->seg);
    if (!sg)
        return -EINVAL;
    struct txn_seg *d = seg_delta(tx, sg);
    if (!d)
        return -ENOMEM;
    d->d_dead += (int64_t) store_record_len(c->len);
    d->early_done++;
    return 0;
}

int
store_txn_ref(struct store_txn *tx, uint64_t chunk_id, int64_t delta)
{
    struct txn_chunk *e;
    if (chunk_id == 0)
        return -EINVAL;
    int rc = chunk_entry(tx, chunk_id, &e);
    if (rc) {
        if (rc == -ENOENT)
            log_err("store: ref %+" PRId64 " on chunk %" PRIu64 ": no such chunk", delta, chunk_id);
        return rc;
    }
    if ((int64_t) e->rec.refs + e->delta + delta < 0) {
        log_err("store: ref %+" PRId64 " on chunk %" PRIu64 " would go below zero", delta,
                chunk_id);
        return -EINVAL;
    }
    e->delta += delta;
    return 0;
}

static int
export_delta(struct store_txn *tx, uint32_t export_id, int64_t d)
{
    for (size_t i = 0; i < tx->nexports; i++) {
        if (tx->exports[i].export_id == export_id) {
            tx->exports[i].delta += d;
            return 0;
        }
    }
    if (tx->nexports == sizeof(tx->exports) / sizeof(tx->exports[0])) {
        log_err("store: one transaction touches more than %zu exports", tx->nexports);
        return -E2BIG;
    }
    tx->exports[tx->nexports].export_id = export_id;
    tx->exports[tx->nexports++].delta = d;
    return 0;
}

/* The map entry's value in the database (0 when unmapped). */
static int
map_read(struct store *st, uint32_t export_id, uint64_t chunk_idx, uint64_t *old)
{
    int rc = store_map_get(st, export_id, chunk_idx, old);
    if (rc == -ENOENT) {
        *old = 0;
        rc = 0;
    }
    return rc;
}

/* map_set with the entry's committed value given (known) or read here (!known). */
static int
map_set(struct store_txn *tx, uint32_t export_id, uint64_t chunk_idx, uint64_t chunk_id, bool known,
        uint64_t old, const struct store_chunk_pre *old_pre)
{
    struct store *st = tx->st;
    bool found;
    if ((tx->nmaps + 1) * 2 > tx->maps_cap && maps_grow(tx))
        return -ENOMEM;
    struct txn_map *m = map_slot(tx, export_id, chunk_idx, &found);
    int rc = 0;
    if (found)
        old = m->chunk_id;
    else if (!known && (rc = map_read(st, export_id, chunk_idx, &old)))
        return rc;
    if (old == chunk_id)
        return 0;
    /* Load both before changing either, so a failure leaves the transaction as it was. */
    struct txn_chunk *enew = NULL, *eold = NULL;
    if (chunk_id)
        rc = chunk_entry(tx, chunk_id, &enew);
    if (rc == 0 && old)
        rc = chunk_entry_pre(tx, old, found ? NULL : old_pre, &eold);
    if (rc == -ENOENT && old && known && !found) {
        /* The caller's value is stale after all (check --repair dropped a dangling entry
         * meanwhile): use the committed one. */
        return map_set(tx, export_id, chunk_idx, chunk_id, false, 0, NULL);
    }
    if (rc) {
        if (rc == -ENOENT)
            log_err("store: export %" PRIu32 " chunk %" PRIu64 ": map to chunk %" PRIu64
                    " (was %" PRIu64 "): no such chunk",
                    export_id, chunk_idx, chunk_id, old);
        return rc;
    }
    int64_t d = (old == 0) - (chunk_id == 0);
    if (d && (rc = export_delta(tx, export_id, d)))
        return rc;
    if (chunk_id)
        chunk_entry(tx, chunk_id, &enew); /* tables may have grown: re-find */
    if (enew)
        enew->delta++;
    if (old) {
        chunk_entry(tx, old, &eold);
        eold->delta--;
    }
    if (!found) {
        m->used = true;
        m->export_id = export_id;
        m->chunk_idx = chunk_idx;
        tx->map_used[tx->nmaps++] = (uint32_t) (m - tx->maps);
    }
    m->chunk_id = chunk_id;
    uint8_t key[META_MAP_KEY_LEN];
    meta_key_map_encode(key, export_id, chunk_idx);
    if (chunk_id) {
        uint8_t val[META_ID_VAL_LEN];
        meta_val_id_encode(val, chunk_id);
        meta_batch_put(tx->batch, META_CF_MAP, key, sizeof(key), val, sizeof(val));
    } else {
        meta_batch_delete(tx->batch, META_CF_MAP, key, sizeof(key));
    }
    return 0;
}

int
store_txn_map_set(struct store_txn *tx, uint32_t export_id, uint64_t chunk_idx, uint64_t chunk_id)
{
    return map_set(tx, export_id, chunk_idx, chunk_id, false, 0, NULL);
}

int
store_txn_map_set_known(struct store_txn *tx, uint32_t export_id, uint64_t chunk_idx,
                        uint64_t old_id, const struct store_chunk_pre *old_pre, uint64_t chunk_id)
{
    return map_set(tx, export_id, chunk_idx, chunk_id, true, old_id, old_pre);
}

int
store_txn_chunk_hold(struct store_txn *tx, uint64_t chunk_id)
{
    struct txn_chunk *e;
    if (chunk_id == 0)
        return -ENOENT;
    return chunk_entry(tx, chunk_id, &e);
}

static void
info_of(const struct txn_chunk *e, struct store_chunk_info *out)
{
    out->id = e->id;
    out->seg = e->rec.seg;
    out->off = e->rec.off;
    out->raw_len = e->rec.raw_len;
    out->stored_len = e->rec.stored_len;
    out->codec = e->rec.codec;
    out->hash_alg = e->rec.hash_alg;
    out->hash_len = e->rec.hash_len;
    out->refs = (uint64_t) ((int64_t) e->rec.refs + e->delta);
    memcpy(out->hash, e->rec.hash, sizeof(out->hash));
}

int
store_txn_chunk_get(struct store_txn *tx, uint64_t chunk_id, struct store_chunk_info *out)
{
    bool found;
    struct txn_chunk *e = chunk_slot(tx, chunk_id, &found);
    if (found) {
        info_of(e, out);
        return 0;
    }
    return store_chunk_get(tx->st, chunk_id, out);
}

/* Rolls the in-memory state back after a failed or aborted transaction: records not yet
 * written are un-reserved; records already written (before a seal) are dead bytes. */
static void
txn_unwind(struct store_txn *tx)
{
    struct store *st = tx->st;
    if (tx->wlen && st->active->size == tx->woff + tx->wlen)
        store__seg_set_size(st->active, tx->woff);
    for (size_t i = 0; i < tx->nchunks; i++) {
        struct txn_chunk *e = &tx->chunks[tx->chunk_used[i]];
        if (!e->is_new || e->early)
            continue;
        struct store_seg *sg = store__seg_find(st, e->rec.seg);
        if (sg && e->rec.off < sg->size) {
            store__seg_set_dead(sg, sg->dead + store_record_len(e->rec.stored_len));
            sg->dirty = true;
        }
    }
}

void
store_txn_abort(struct store_txn *tx)
{
    if (!tx)
        return;
    struct store *st = tx->st;
    txn_unwind(tx);
    append_end(tx);
    txn_reset(tx);
    pthread_mutex_unlock(&st->commit_lock);
}

/* A new chunk nobody maps by commit: if the hash back-end put its hash entry into this
 * batch, take it out again. Left in, it would name an id no committed chunk has — harmless
 * (invariant 2), but one more entry for the sweep. */
static void
drop_new_hash(struct store_txn *tx, struct txn_chunk *e)
{
    uint8_t hkey[META_HASH_KEY_MAX], val[META_ID_VAL_LEN];
    size_t hl = meta_key_hash_encode(hkey, e->rec.hash_alg, e->rec.hash, e->rec.hash_len), vl;
    uint64_t owner;
    if (meta_batch_find(tx->batch, META_CF_HASH, hkey, hl, val, sizeof(val), &vl) == 1 &&
        meta_val_id_decode(val, vl, &owner) == 0 && owner == e->id)
        meta_batch_delete(tx->batch, META_CF_HASH, hkey, hl);
}

static void
free_chunk(struct store_txn *tx, struct txn_chunk *e, struct store_counters *c,
           store_freed_fn freed, void *arg)
{
    uint8_t key[META_CHUNK_KEY_LEN];
    if (freed) {
        struct store_chunk_info info;
        info_of(e, &info);
        freed(arg, &info);
    }
    meta_key_chunk_encode(key, e->id);
    meta_batch_delete(tx->batch, META_CF_CHUNK, key, sizeof(key));
    /* Its `hash` entry stays (invariant 2): a look-up that finds it finds no chunk under
     * that id — ids are never reused — and takes it as absent; the `hash` family's
     * compactions drop it later (meta/sweep.c, asking index/rocksdb.c). Deleting it here
     * put a second entry per freed chunk into the commit and into the `hash` memtable,
     * whose flush sorts every entry at random positions: overwrites of unique data ran
     * 10-16% slower with it (benchmarks.md, item 42). */
    c->chunks--;
    c->raw_bytes -= e->rec.raw_len;
    c->stored_bytes -= e->rec.stored_len;
}

void
store_test_fail_commits(struct store *st, int rc, unsigned skip, unsigned n)
{
    pthread_mutex_lock(&st->commit_lock);
    st->test_fail_rc = rc;
    st->test_fail_skip = skip;
    st->test_fail_commits = n;
    pthread_mutex_unlock(&st->commit_lock);
}

int
store_txn_commit(struct store_txn *tx, store_freed_fn freed, void *arg)
{
    struct store *st = tx->st;
    struct store_counters c = st->cnt;
    int rc = 0;
    if (tx->broken) {
        rc = -EIO;
        goto fail;
    }
    if (st->test_fail_skip) {
        st->test_fail_skip--;
    } else if (st->test_fail_commits) {
        st->test_fail_commits--;
        rc = st->test_fail_rc;
        goto fail;
    }
    /* New refcounts of chunks that existed before and still do go to the journal (refs.c),
     * unless this commit folds it: then every journaled refcount is put first, and this
     * commit's own puts (later in the batch) win. */
    bool fold = store__refs_fold_due(st, tx->nchunks);
    if (fold && (rc = store__refs_fold_put(st, tx->batch)) != 0)
        goto fail;
    store__refs_journal_begin(st);
    for (size_t i = 0; i < tx->nchunks; i++) {
        struct txn_chunk *e = &tx->chunks[tx->chunk_used[i]];
        int64_t before = (int64_t) e->rec.refs, after = before + e->delta;
        uint64_t reclen = store_record_len(e->rec.stored_len);
        struct store_seg *sg = store__seg_find(st, e->rec.seg);
        struct txn_seg *sd = sg ? seg_delta(tx, sg) : NULL;
        if (!sd) {
            rc = sg ? -ENOMEM : -EIO;
            if (!sg)
                log_err("store: chunk %" PRIu64 ": segment %" PRIu32 " not open", e->id,
                        e->rec.seg);
            goto fail;
        }
        if (e->is_new && after == 0) {
            sd->d_dead += (int64_t) reclen; /* appended but never referenced */
            if (e->rec.hash_alg)
                drop_new_hash(tx, e);
            continue;
        }
        if (after == 0) {
            free_chunk(tx, e, &c, freed, arg);
            sd->d_live -= (int64_t) reclen;
            sd->d_dead += (int64_t) reclen;
            if (before > 1)
                c.shared--;
            continue;
        }
        if (!e->is_new && e->delta == 0)
            continue;
        if (!e->is_new && !fold) {
            rc = store__refs_journal_add(st, e->id, (uint64_t) after);
            if (rc)
                goto fail;
            c.shared += (after > 1) - (before > 1);
            continue;
        }
        uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
        struct meta_chunk_rec r = e->rec;
        r.refs = (uint64_t) after;
        meta_key_chunk_encode(key, e->id);
        meta_batch_put(tx->batch, META_CF_CHUNK, key, sizeof(key), val,
                       meta_chunk_rec_encode(val, &r));
        if (e->is_new) {
            c.chunks++;
            c.raw_bytes += r.raw_len;
            c.stored_bytes += r.stored_len;
            sd->d_live += (int64_t) reclen;
        }
        c.shared += (after > 1) - (before > 1 && !e->is_new);
    }
    uint64_t export_vals[16];
    for (size_t i = 0; i < tx->nexports; i++) {
        uint64_t cur;
        rc = store__export_count_get(st, tx->exports[i].export_id, &cur);
        if (rc)
            goto fail;
        export_vals[i] = (uint64_t) ((int64_t) cur + tx->exports[i].delta);
        store__export_put(tx->batch, tx->exports[i].export_id, export_vals[i]);
    }
    for (size_t i = 0; i < tx->nsegs; i++) {
        struct txn_seg *d = &tx->segs[i];
        store__seg_put_meta_delta(tx->batch, d->sg, d->d_live, d->d_dead);
    }
    /* Every id of this batch was handed out before now (early appends included). */
    c.next_id = __atomic_load_n(&st->id_next, __ATOMIC_ACQUIRE);
    store__counters_put(st, tx->batch, &c);
    rc = store__refs_journal_put(st, tx->batch); /* also makes room to remember it */
    if (rc)
        goto fail;

    /* invariant 3: segment bytes before batch */
    pthread_rwlock_rdlock(&st->wal_lock);
    rc = flush_wbuf(tx);
    size_t bytes = meta_batch_bytes(tx->batch);
    if (rc == 0)
        rc = meta_batch_commit(st->meta, tx->batch, false);
    pthread_rwlock_unlock(&st->wal_lock);
    if (rc)
        goto fail;

    for (size_t i = 0; i < tx->nsegs; i++) {
        struct txn_seg *d = &tx->segs[i];
        d->sg->live = (uint64_t) ((int64_t) d->sg->live + d->d_live);
        store__seg_set_dead(d->sg, (uint64_t) ((int64_t) d->sg->dead + d->d_dead));
        d->sg->dirty = false;
        __atomic_sub_fetch(&d->sg->early_pending, (int) d->early_done, __ATOMIC_SEQ_CST);
    }
    /* The journal's table follows the batch before any reader can load an entry it wrote
     * (a fold's entries hold what the table did). */
    if (fold)
        store__refs_folded(st);
    store__refs_journal_apply(st);
    store__mapend_commit(st, tx);            /* before any reader can find the new entries cached */
    for (size_t i = 0; i < tx->nmaps; i++) { /* the batch is applied: reads may see it */
        const struct txn_map *m = &tx->maps[tx->map_used[i]];
        store__loc_map_set(st, m->export_id, m->chunk_idx, m->chunk_id);
    }
    for (size_t i = 0; i < tx->nchunks; i++) { /* the caches follow the committed entries */
        struct txn_chunk *e = &tx->chunks[tx->chunk_used[i]];
        int64_t after = (int64_t) e->rec.refs + e->delta;
        if (after == 0) {
            ccache_drop(tx, e->id);
            store__loc_chunk_drop(st, e->id);
            if (!e->is_new)
                store__refs_forget(st, e->id);
        } else if (e->is_new) { /* in the ccache once reused; readers find it at once */
            if (e->rec.codec == STORE_CODEC_RAW)
                store__loc_chunk_put(st, e->id,
                                     &(struct store_loc){.seg = e->rec.seg,
                                                         .off = e->rec.off,
                                                         .len = e->rec.stored_len});
        } else {
            struct meta_chunk_rec r = e->rec;
            r.refs = (uint64_t) after;
            ccache_put(tx, e->id, &r);
        }
    }
    for (size_t i = 0; i < tx->nexports; i++)
        store__export_count_set(st, tx->exports[i].export_id, export_vals[i]);
    pthread_mutex_lock(&st->stat_lock);
    st->cnt = c;
    pthread_mutex_unlock(&st->stat_lock);
    /* The batch is committed: a pacing failure is logged and surfaces at the next sync. */
    rc = store__wal_pace(st, bytes);
    if (rc)
        log_err("store: flushing the write-ahead log after a commit failed: %s", strerror(-rc));
    /* Start write-back of what the active segment got since the last kick, after the lock
     * is released: the fdatasync of the next pacing step or sync, made under the commit
     * lock, then finds little left to write (it used to stall every writer ~40-90 ms). */
    struct store_seg *kick = NULL, *a = st->active;
    uint64_t a_size = store__seg_size(a), kick_off = a->kicked, kick_len = a_size - kick_off;
    if (store__io->writeback && kick_len >= WRITEBACK_KICK_BYTES &&
        (kick = store__seg_get(st, a->id)))
        a->kicked = a_size;
    append_end(tx);
    txn_reset(tx);
    pthread_mutex_unlock(&st->commit_lock);
    if (kick) {
        store__io->writeback(kick->fd, kick_off, kick_len); /* a hint: errors do not matter */
        store__seg_put(st, kick);
    }
    return 0;
fail:
    /* Nothing of the batch is visible. Records written to the segment stay as dead bytes
     * (a later commit persists that), or are truncated by recovery after a crash. */
    if (tx->wlen == 0) {
        for (size_t i = 0; i < tx->nchunks; i++) {
            struct txn_chunk *e = &tx->chunks[tx->chunk_used[i]];
            struct store_seg *sg = e->is_new && !e->early ? store__seg_find(st, e->rec.seg) : NULL;
            if (sg) {
                store__seg_set_dead(sg, sg->dead + store_record_len(e->rec.stored_len));
                sg->dirty = true;
            }
        }
    } else {
        txn_unwind(tx);
    }
    append_end(tx);
    txn_reset(tx);
    pthread_mutex_unlock(&st->commit_lock);
    return rc;
}

/* Compaction's commit: re-appends records read from segment `from` to the active segment
 * and points their chunks at the new copies, in one batch. Caller holds the commit lock.
 * A record whose chunk was freed or moved since it was read is skipped (its bytes are
 * already dead). *moved gets the record bytes moved. The new copies are written but not
 * synced: the caller syncs before it deletes `from`. */
int
store__move_records(struct store *st, struct store_seg *from, struct store_move *mv, size_t n,
                    const uint8_t *buf, uint64_t *moved)
{
    struct store_txn *tx = &st->txn;
    txn_reset(tx);
    tx->active = true;
    *moved = 0;
    struct txn_seg *fd = seg_delta(tx, from);
    int rc = fd ? 0 : -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ccache_drop(tx, mv[i].id); /* their entries move: read them afresh from now on */
        mv[i].to.len = 0;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct meta_chunk_rec r;
        int lr = store__chunk_load(st, mv[i].id, &r);
        if (lr == -ENOENT || (lr == 0 && (r.seg != from->id || r.off != mv[i].off)))
            continue;
        if (lr) {
            rc = lr;
            break;
        }
        uint64_t reclen = store_record_len(r.stored_len);
        if (reclen != mv[i].len) {
            log_err("store: compaction: chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64
                    ": record length disagrees with its chunk entry; left in place",
                    mv[i].id, from->id, mv[i].off);
            continue;
        }
        rc = reserve_append(tx, reclen, reclen);
        if (rc)
            break;
        memcpy(tx->wbuf + tx->wused, buf + mv[i].buf_off, reclen);
        uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
        r.seg = st->active->id;
        r.off = st->active->size;
        if (r.codec == STORE_CODEC_RAW)
            mv[i].to = (struct store_loc){.seg = r.seg, .off = r.off, .len = r.stored_len};
        meta_key_chunk_encode(key, mv[i].id);
        meta_batch_put(tx->batch, META_CF_CHUNK, key, sizeof(key), val,
                       meta_chunk_rec_encode(val, &r));
        queue_piece(tx, NULL, reclen);
        store__seg_set_size(st->active, st->active->size + reclen);
        seg_delta(tx, st->active)->d_live += (int64_t) reclen;
        fd = seg_delta(tx, from); /* the array may have grown */
        fd->d_live -= (int64_t) reclen;
        fd->d_dead += (int64_t) reclen;
        *moved += reclen;
    }
    if (rc == 0) {
        for (size_t i = 0; i < tx->nsegs; i++) {
            struct txn_seg *d = &tx->segs[i];
            store__seg_put_meta_delta(tx->batch, d->sg, d->d_live, d->d_dead);
        }
    }
    size_t bytes = meta_batch_bytes(tx->batch);
    if (rc == 0) {
        pthread_rwlock_rdlock(&st->wal_lock);
        rc = flush_wbuf(tx); /* invariant 3: segment bytes before batch */
        if (rc == 0)
            rc = meta_batch_commit(st->meta, tx->batch, false);
        pthread_rwlock_unlock(&st->wal_lock);
    }
    if (rc == 0) {
        for (size_t i = 0; i < tx->nsegs; i++) {
            struct txn_seg *d = &tx->segs[i];
            d->sg->live = (uint64_t) ((int64_t) d->sg->live + d->d_live);
            store__seg_set_dead(d->sg, (uint64_t) ((int64_t) d->sg->dead + d->d_dead));
            d->sg->dirty = false;
        }
        rc = store__wal_pace(st, bytes);
    } else {
        /* Copies already written are dead; unwritten ones are un-reserved. */
        if (tx->wlen && st->active->size == tx->woff + tx->wlen)
            store__seg_set_size(st->active, tx->woff);
        for (size_t i = 0; i < tx->nsegs; i++) {
            struct txn_seg *d = &tx->segs[i];
            if (d->d_live > 0 && d->sg != from) {
                store__seg_set_dead(d->sg, d->sg->dead + (uint64_t) d->d_live);
                d->sg->dirty = true;
            }
        }
        *moved = 0;
    }
    /* Cached locations name the old copies, valid until the old segment goes (after this
     * commit). A committed move re-points a cached one: a cache that forgot every moved
     * chunk sent the reads after a compaction to RocksDB, whose chunk family has just
     * taken an entry per moved record (random reads after a full compaction at half
     * speed: docs/benchmarks.md, item 43).
     * Anything else is dropped: the next read takes the chunk entry's. A reader that read
     * the old entry before this commit may still put the old copy back; it is caught when
     * that copy's segment goes, as any stale location is. */
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && mv[i].to.len)
            store__loc_chunk_moved(st, mv[i].id, &mv[i].to);
        else
            store__loc_chunk_drop(st, mv[i].id);
    }
    store__entries_rewritten(st);
    append_end(tx);
    txn_reset(tx);
    return rc;
}
