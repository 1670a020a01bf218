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
 * either, thanks to the bloom filters meta configures on this column family. A hash found
 * lately is answered from memory (the hot entries below).
 * Knows nothing of the store; writes only through the batch handed in. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "index/internal.h"
#include "meta/keys.h"
#include "meta/meta.h"

/* Recently freed chunk ids, direct-mapped by id: 8 MiB, the chunks of a 4 GiB export of
 * 4 KiB chunks. An id that a later free pushed out costs only the caller's check. */
#define FREED_SLOTS (1u << 20)

/* Hot entries: what RocksDB last answered for a found hash, direct-mapped by the hash's
 * first bytes. A duplicate write looks the same few hashes up again and again (a file
 * system's repeated blocks, a VM image's copies), and each RocksDB point read behind the
 * filter — a memtable search and block-cache probes — cost ~0.7 us, 13% of the server's
 * CPU in a 2 GiB duplicate write (docs/benchmarks.md, item 46). A slot only ever holds an
 * answer RocksDB gave, and a hit is checked against the freed ids like such an answer.
 * Publishing a batch empties the slots of the hashes it wrote and bumps their generation;
 * a look-up fills a slot only if its generation has not moved since before it asked
 * RocksDB, so it cannot put back an answer that a commit has replaced (the location
 * cache's rule, store/loccache.c). So a hit names its hash's chunk as RocksDB does, or a
 * chunk that is gone, which the caller's hold catches — never another chunk. */
#define HOT_SLOTS   4096u
#define HOT_STRIPES 64u

struct hot_slot {
    uint64_t chunk_id; /* 0: empty */
    uint32_t gen;      /* bumped by every publish of a hash that maps here */
    uint8_t alg, len;
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
};

struct index_rdb {
    struct index base;
    struct meta *m; /* borrowed from the store */
    struct index_filter *filter;
    uint64_t *freed; /* FREED_SLOTS ids (0 = empty), atomic loads and stores */
    struct hot_slot *hot;
    pthread_mutex_t hot_mu[HOT_STRIPES]; /* slot i: hot_mu[i % HOT_STRIPES] */
};

static size_t
freed_slot(uint64_t id)
{
    return (size_t) index__mix64(id) & (FREED_SLOTS - 1); /* ids are sequential: spread */
}

static bool
freed_recently(struct index_rdb *r, uint64_t id)
{
    return __atomic_load_n(&r->freed[freed_slot(id)], __ATOMIC_RELAXED) == id;
}

/* By the first 8 bytes (all a staged key shows of a short hash): uniform in any hash. */
static size_t
hot_index(uint8_t alg, const uint8_t *hash, size_t len)
{
    uint64_t v = 0;
    memcpy(&v, hash, len < sizeof(v) ? len : sizeof(v));
    return (size_t) index__mix64(v ^ alg) & (HOT_SLOTS - 1);
}

/* Whether the slot of hash holds it (*chunk_id: what RocksDB answered); *gen is the slot's
 * generation either way, for hot_fill. */
static bool
hot_get(struct index_rdb *r, uint8_t alg, const uint8_t *hash, size_t len, uint64_t *chunk_id,
        uint32_t *gen)
{
    size_t i = hot_index(alg, hash, len);
    const struct hot_slot *h = &r->hot[i];
    pthread_mutex_lock(&r->hot_mu[i % HOT_STRIPES]);
    bool hit = h->chunk_id && h->alg == alg && h->len == len && !memcmp(h->hash, hash, len);
    if (hit)
        *chunk_id = h->chunk_id;
    *gen = h->gen;
    pthread_mutex_unlock(&r->hot_mu[i % HOT_STRIPES]);
    return hit;
}

/* RocksDB's answer for hash, taken unless a publish touched the slot since gen. */
static void
hot_fill(struct index_rdb *r, uint8_t alg, const uint8_t *hash, size_t len, uint64_t chunk_id,
         uint32_t gen)
{
    size_t i = hot_index(alg, hash, len);
    struct hot_slot *h = &r->hot[i];
    pthread_mutex_lock(&r->hot_mu[i % HOT_STRIPES]);
    if (h->gen == gen) {
        h->chunk_id = chunk_id;
        h->alg = alg;
        h->len = (uint8_t) len;
        memcpy(h->hash, hash, len);
    }
    pthread_mutex_unlock(&r->hot_mu[i % HOT_STRIPES]);
}

/* A committed entry for the hash whose leading bytes staged key s holds. */
static void
hot_replaced(struct index_rdb *r, const struct index_staged *s)
{
    size_t i = hot_index(s->alg, s->key, sizeof(s->key));
    struct hot_slot *h = &r->hot[i];
    pthread_mutex_lock(&r->hot_mu[i % HOT_STRIPES]);
    size_t n = h->len < sizeof(s->key) ? h->len : sizeof(s->key);
    if (h->alg == s->alg && !memcmp(h->hash, s->key, n))
        h->chunk_id = 0;
    h->gen++;
    pthread_mutex_unlock(&r->hot_mu[i % HOT_STRIPES]);
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
    r->hot = calloc(HOT_SLOTS, sizeof(*r->hot));
    int rc = r->freed && r->hot ? index__filter_start(m, &r->filter) : -ENOMEM;
    if (rc < 0) {
        free(r->hot);
        free(r->freed);
        free(r);
        return rc;
    }
    for (unsigned i = 0; i < HOT_STRIPES; i++)
        pthread_mutex_init(&r->hot_mu[i], NULL);
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
    for (unsigned i = 0; i < HOT_STRIPES; i++)
        pthread_mutex_destroy(&r->hot_mu[i]);
    free(r->hot);
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
        return -ENOENT; /* unique data, mostly: the hot slots are not asked */
    uint32_t gen;
    if (hot_get(r, alg, hash, len, chunk_id, &gen) && !freed_recently(r, *chunk_id))
        return 0;
    size_t klen = meta_key_hash_encode(key, alg, hash, len);
    ssize_t n = meta_get(r->m, META_CF_HASH, key, klen, val, sizeof(val));
    if (n < 0)
        return (int) n;
    if (meta_val_id_decode(val, (size_t) n, chunk_id) < 0)
        return -ENOENT; /* malformed: treat as absent; `check` reports it */
    if (freed_recently(r, *chunk_id))
        return -ENOENT; /* a freed chunk's entry: ids are never reused */
    hot_fill(r, alg, hash, len, *chunk_id, gen);
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
    for (size_t i = 0; i < b->n; i++)
        hot_replaced(r, &b->staged[i]);
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
