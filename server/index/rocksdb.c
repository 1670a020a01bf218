/* rocksdb.c: the `rocksdb` hash-index back-end (the default) — the persistent `hash`
 * column family of meta, key (hash alg, full hash) -> chunk id.
 * Unbounded and persistent: entries are written into the store transaction's own batch, so
 * they commit atomically with the chunk they name (invariants 2 and 3), and the store
 * deletes the entry of a chunk it frees in the same batch, so entries always name live
 * chunks. A miss (the common case for unique data) is mostly answered by an in-memory
 * filter of every key (filter.c, at most INDEX_FILTER_MAX_BYTES) without RocksDB; the
 * others cost no disk read either, thanks to the bloom filters meta configures on this
 * column family.
 * Knows nothing of the store; writes only through the batch handed in. */
#include <errno.h>
#include <stdlib.h>

#include "index/internal.h"
#include "meta/keys.h"
#include "meta/meta.h"

struct index_rdb {
    struct index base;
    struct meta *m; /* borrowed from the store */
    struct index_filter *filter;
};

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
    int rc = index__filter_start(m, &r->filter);
    if (rc < 0) {
        free(r);
        return rc;
    }
    *out = &r->base;
    return 0;
}

static void
rdb_close(struct index *ix)
{
    struct index_rdb *r = (struct index_rdb *) ix;
    index__filter_stop(r->filter);
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

static void
rdb_remove(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
           uint64_t chunk_id)
{
    /* Redundant with the store, which deletes the `hash` entry of a chunk it frees in the
     * freeing batch; kept exact for callers that free chunks some other way. Only an entry
     * naming this chunk goes: after a verified collision the entry names the other one. */
    uint64_t cur;
    if (!b->mb || rdb_lookup(ix, alg, hash, len, &cur) < 0 || cur != chunk_id)
        return;
    uint8_t key[META_HASH_KEY_MAX];
    size_t klen = meta_key_hash_encode(key, alg, hash, len);
    meta_batch_delete(b->mb, META_CF_HASH, key, klen);
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
