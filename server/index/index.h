/* index: the hash index — full chunk hash -> chunk id — behind one interface with two
 * back-ends: `rocksdb` (the `hash` column family, persistent, unbounded; the default) and
 * `memory` (a bounded table with LRU eviction, lost on restart).
 * Owns: the back-end state (the memory table; for rocksdb an in-memory filter of its keys,
 * built in the background from the chunk records in meta, its builder thread, and the last
 * answers RocksDB gave for found hashes, which repeats of them are answered from).
 * Knows nothing of exports, the block map or store transactions: inserts are staged in a
 * struct index_batch that carries the store transaction's meta batch; the caller publishes
 * them after that batch committed, so an entry never becomes visible before its chunk
 * (invariant 2). The caller reports freed chunks (index_remove from the store's freed
 * callback): the memory back-end drops their entries; the rocksdb one leaves them in the
 * `hash` family for its sweep (RocksDB's compactions, meta_set_hash_sweep) and stops
 * answering with recently freed ids — an entry it still returns may name a chunk that is
 * gone, never another chunk (ids are never reused), so callers hold the chunk before
 * sharing it.
 * Threads: any worker thread, concurrently; calls may block on RocksDB. */
#ifndef DD_INDEX_INDEX_H
#define DD_INDEX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedupd/limits.h"

struct meta;
struct meta_batch;

/* Memory back-end default: 2^20 entries = a 4 GiB window of unique data at 4 KiB chunks,
 * the same window btrfs's 32768-entry default covered at 128 KiB, for 40 bytes per entry
 * plus 4 per bucket, about 44 MiB when full (docs/engine.md). */
#define INDEX_MEMORY_DEFAULT_LIMIT_NR (1ULL << 20)
/* Bytes of one memory-table entry (hash prefix, chunk id, links) — exported for estimates. */
#define INDEX_MEMORY_ENTRY_BYTES 40
/* The memory back-end keys entries by this many leading bytes of the hash (all of an
 * xxh3-128 digest; half of a SHA-256 one, which the engine re-checks against the chunk's
 * full recorded hash before sharing). */
#define INDEX_MEMORY_KEY_BYTES 16

struct index; /* opaque: one open back-end */

struct index_limits {
    uint64_t limit_nr;  /* memory: max entries; 0 = INDEX_MEMORY_DEFAULT_LIMIT_NR */
    uint64_t limit_mem; /* memory: max bytes of the table; 0 = no byte limit */
};

struct index_usage {
    uint64_t entries;   /* memory: exact; rocksdb: RocksDB's key estimate of `hash` */
    uint64_t bytes;     /* memory: exact bytes allocated; rocksdb: on-disk size of `hash` */
    uint64_t limit_nr;  /* effective entry limit (memory; 0 = unbounded) */
    uint64_t limit_mem; /* as configured (0 = none) */
    uint64_t evictions; /* memory: entries dropped by LRU since open */
    /* rocksdb: the in-memory filter of its keys (index/filter.c) */
    uint64_t filter_bytes;          /* in use; 0 while the first build runs */
    uint64_t filter_building_bytes; /* being built (the filter is off meanwhile) */
    uint64_t filter_builds;         /* finished since open */
    uint64_t filter_skips;          /* look-ups it answered without RocksDB */
};

/* An insert waiting for its store transaction to commit (memory back-end). */
struct index_staged {
    uint8_t key[INDEX_MEMORY_KEY_BYTES];
    uint64_t chunk_id;
    uint8_t alg;
};

/* The index changes of one store transaction. A value the caller owns (e.g. one per
 * request, reused): index_batch_init, then index_batch_reset(b, txn_batch) per
 * transaction, index_stage() inside it, index_publish() after the commit succeeded (or
 * just reset again after an abort), index_batch_fini at the end. */
struct index_batch {
    struct meta_batch *mb; /* borrowed: the store transaction's batch (rocksdb writes here) */
    struct index_staged *staged;
    size_t n, cap;
};

void index_batch_init(struct index_batch *b);
/* Drops staged inserts; mb (may be NULL for back-ends that do not write to meta) becomes the
 * batch of the next transaction. */
void index_batch_reset(struct index_batch *b, struct meta_batch *mb);
/* Preallocates room for n staged inserts so that staging does not allocate: 0 or -ENOMEM. */
int index_batch_reserve(struct index_batch *b, size_t n);
void index_batch_fini(struct index_batch *b);

/* Back-end names in order, NULL-terminated; the first is the default. */
const char *const *index_backend_names(void);
bool index_backend_exists(const char *name);

/* Opens back-end `name` ("rocksdb" needs m; "memory" ignores it). 0, -ENOENT (unknown
 * name), -ENOMEM. On success *out is the caller's; release with index_close(). */
int index_open(const char *name, struct meta *m, const struct index_limits *lim,
               struct index **out);
void index_close(struct index *ix); /* NULL is fine */
const char *index_name(const struct index *ix);
/* True when entries survive a restart and name either their hash's chunk or an id no chunk
 * has any more, so a hit whose chunk exists needs no further check (rocksdb). False
 * (memory): an entry may name a chunk freed by a transaction that did not call
 * index_remove, and keys on a prefix, so callers confirm a hit against the chunk's
 * recorded hash. */
bool index_persistent(const struct index *ix);

/* 0 and *chunk_id, -ENOENT (no entry), -EIO. Sees committed/published entries only. */
int index_lookup(struct index *ix, uint8_t alg, const uint8_t *hash, size_t len,
                 uint64_t *chunk_id);
/* Stages hash -> chunk_id in b: visible once b->mb has been committed and index_publish()
 * was called. An existing entry for the same hash is replaced. 0 or -ENOMEM (only when
 * index_batch_reserve was not called for enough entries). */
int index_stage(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash,
                size_t len, uint64_t chunk_id);
/* Makes b's staged entries visible (call only after b->mb committed). */
void index_publish(struct index *ix, struct index_batch *b);
/* Reports chunk_id (with this hash) as freed by the transaction of b. memory: removes the
 * entry if it names chunk_id, at once. rocksdb: look-ups stop answering with chunk_id at
 * once (for the ~1 M most recently freed ids; older ones callers catch by holding the
 * chunk); the entry stays in `hash` until the sweep. Never fails. */
void index_remove(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash,
                  size_t len, uint64_t chunk_id);
void index_usage(struct index *ix, struct index_usage *out);

#endif
