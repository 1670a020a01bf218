/* rocksdb.c: the `rocksdb` hash-index back-end (the default) — the persistent `hash`
 * column family of meta, key (hash alg, full hash) -> chunk id.
 * Unbounded and persistent: entries are written into the store transaction's own batch, so
 * they commit atomically with the chunk they name (invariants 2 and 3). A freed chunk
 * keeps its entry (invariant 2: an entry names its hash's chunk or an id no chunk has;
 * callers hold the chunk before sharing it); RocksDB's compactions drop such entries
 * later, asking rdb_keep. Ids freed recently are remembered, so that look-ups answer absent
 * for their entries at once instead of sending the caller to a chunk that is gone. A miss
 * (the common case for unique data) is mostly answered by an in-memory filter of every key
 * (filter.c, at most INDEX_FILTER_MAX_BYTES) without RocksDB; the others cost no disk read
 * either, thanks to the bloom filters meta configures on this column family.
 * Knows nothing of the store; writes only through the batch handed in. */
#include <errno.h>
#include <stdlib.h>

#include "index/internal.h"
#include "meta/keys.h"
#include "meta/meta.h"

/* Recently freed chunk ids, direct-mapped by id: 8 MiB, the chunks of a 4 GiB export of
 * 4 KiB chunks. An id that a later free pushed out costs only the caller's check. */
#define FREED_SLOTS (1u << 20)

struct index_rdb {
    struct index base;
    struct meta *m; /* borrowed from the store */
    struct index_filter *filter;
    uint64_t *freed; /* FREED_SLOTS ids (0 = empty), atomic loads and stores */
};

static size_t
freed_slot(uint64_t id)
{
    return (size_t) index__mix64(id) & (FREED_SLOTS - 1); /* ids are sequential: spread */
}

/* The sweep's question (meta_set_hash_sweep), asked by RocksDB's compactions of `hash`:
 * an entry stays unless the filter is sure no live chunk has its hash. The filter holds
 * the hash of every live chunk (never a false "absent"), so what goes is an entry of a
 * freed chunk whose hash a rebuild of the filter has since left out. While a build runs
 * there is no filter and everything stays. */
static bool
rdb_keep(void *arg, const void *key, size_t klen, const void *val, size_t vlen)
{
    (void) val, (void) vlen;
    struct index_rdb *r = arg;
    const uint8_t *k = key;
    if (klen < 2 || klen > META_HASH_KEY_MAX)
        return true; /* not ours to judge: check reports it */
    return index__filter_holds(r->filter, k[0], k + 1, klen - 1);
}

static int
rdb_open(struct meta *m, const struct index_limits *lim, struct index **out)
{
    (void) lim;
    if (!m)
        return -EINVAL;
    struct index_rdb *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->base.ops = &index__rocksdb_ops;
    r->m = m;
    r->freed = calloc(FREED_SLOTS, sizeof(*r->freed));
    int rc = r->freed ? index__filter_start(m, &r->filter) : -ENOMEM;
    if (rc < 0) {
        free(r->freed);
        free(r);
        return rc;
    }
    meta_set_hash_sweep(m, rdb_keep, r);
    *out = &r->base;
    return 0;
}

static void
rdb_close(struct index *ix)
{
    struct index_rdb *r = (struct index_rdb *) ix;
    meta_set_hash_sweep(r->m, NULL, r); /* before the filter it asks goes */
    index__filter_stop(r->filter);
    free(r->freed);
    free(r);
}

struct index_filter *
index__rocksdb_filter(struct index *ix)
{
    return ix && ix->ops == &index__rocksdb_ops ? ((struct index_rdb *) ix)->filter : NULL;
}

static int
rdb_lookup(struct index *ix, uint8_t alg, const uint8_t *hash, size_t len, uint64_t *chunk_id)
{
    struct index_rdb *r = (struct index_rdb *) ix;
    uint8_t key[META_HASH_KEY_MAX], val[META_ID_VAL_LEN];
    if (len > DEDUPD_HASH_MAX_LEN)
        return -EINVAL;
    if (!index__filter_may_contain(r->filter, alg, hash, len))
        return -ENOENT;
    size_t klen = meta_key_hash_encode(key, alg, hash, len);
    ssize_t n = meta_get(r->m, META_CF_HASH, key, klen, val, sizeof(val));
    if (n < 0)
        return (int) n;
    if (meta_val_id_decode(val, (size_t) n, chunk_id) < 0)
        return -ENOENT; /* malformed: treat as absent; `check` reports it */
    if (__atomic_load_n(&r->freed[freed_slot(*chunk_id)], __ATOMIC_RELAXED) == *chunk_id)
        return -ENOENT; /* a freed chunk's entry: ids are never reused */
    return 0;
}

static int
rdb_stage(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
          uint64_t chunk_id)
{
    (void) ix;
    if (!b->mb || len > DEDUPD_HASH_MAX_LEN)
        return -EINVAL;
    int rc = index__batch_push(b, alg, hash, len, chunk_id); /* for the filter at publish */
    if (rc < 0)
        return rc;
    uint8_t key[META_HASH_KEY_MAX], val[META_ID_VAL_LEN];
    size_t klen = meta_key_hash_encode(key, alg, hash, len);
    meta_val_id_encode(val, chunk_id);
    meta_batch_put(b->mb, META_CF_HASH, key, klen, val, sizeof(val));
    return 0;
}

static void
rdb_publish(struct index *ix, struct index_batch *b)
{
    /* The committed batch made the entries visible in RocksDB; now the filter's turn. */
    struct index_rdb *r = (struct index_rdb *) ix;
    index__filter_add(r->filter, b->staged, b->n);
}

/* A chunk the store freed (index_remove from the engine's freed callback): its entry stays
 * for the sweep, and look-ups stop answering with its id now. Without this a write of the
 * freed bytes again looked them up, found the id, and learnt only inside its transaction,
 * under the store's commit lock, that the chunk was gone — and wrote its chunk there, not
 * ahead of the lock: rewriting data freed earlier ran 30% slower. The store calls back
 * before its batch is written; should that commit fail, a chunk that stays live is taken
 * as absent here: its bytes written again are stored once more and the entry moves to the
 * new copy — dedup lost for that chunk, never a byte. Any thread. */
static void
rdb_remove(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
           uint64_t chunk_id)
{
    (void) b, (void) alg, (void) hash, (void) len;
    struct index_rdb *r = (struct index_rdb *) ix;
    if (chunk_id)
        __atomic_store_n(&r->freed[freed_slot(chunk_id)], chunk_id, __ATOMIC_RELAXED);
}

static void
rdb_usage(struct index *ix, struct index_usage *out)
{
    struct index_rdb *r = (struct index_rdb *) ix;
    /* RocksDB's estimate, not a scan: a scan of `hash` grows with the store and, with its
     * hash-bucketed memtable (meta/db.c), first copies the memtable into sorted order —
     * seconds and tens of MiB for a status command. `check` counts the entries exactly. */
    out->entries = meta_cf_keys_estimate(r->m, META_CF_HASH);
    out->bytes = meta_cf_size(r->m, META_CF_HASH);
    index__filter_usage(r->filter, out);
}

const struct index_ops index__rocksdb_ops = {
    .name = "rocksdb",
    .persistent = true,
    .open = rdb_open,
    .close = rdb_close,
    .lookup = rdb_lookup,
    .stage = rdb_stage,
    .publish = rdb_publish,
    .remove = rdb_remove,
    .usage = rdb_usage,
};
