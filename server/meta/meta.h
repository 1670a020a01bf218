/* meta: the RocksDB database under DATA_DIR/db with dedupd's column families.
 * Owns: the rocksdb handle, its options, the column family handles. No header outside
 * meta/ mentions rocksdb_; callers see column families as enum meta_cf and keys/values as
 * bytes encoded by meta/keys.h. RocksDB errors become -EIO plus one log line here, or
 * -ENOSPC when RocksDB could not write because the file system is full.
 * Threads: any thread, concurrently (RocksDB is thread-safe); calls may block on disk,
 * so never the loop thread. */
#ifndef DD_META_META_H
#define DD_META_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum meta_cf {
    META_CF_MAP = 0, /* (export id, chunk idx) -> chunk id: the block maps */
    META_CF_CHUNK,   /* chunk id -> struct meta_chunk_rec: the extent tree with refcounts */
    META_CF_HASH,    /* (hash alg, hash) -> chunk id: the on-disk dedup back-end */
    META_CF_REV,     /* unused and empty since data format 2 (was: segment, offset -> chunk id) */
    META_CF_EXPORT,  /* export id -> struct meta_export_rec: the export catalogue */
    META_CF_META,    /* name -> value: format version, dedup settings, counters, segments */
    META_CF__COUNT,
};

struct meta;       /* opaque */
struct meta_batch; /* opaque: a RocksDB write batch */
struct meta_iter;  /* opaque: an iterator over one column family */

struct meta_options {
    uint64_t block_cache_bytes; /* shared LRU block cache; 0 = default (64 MiB) */
    bool create_if_missing;     /* false: a missing database is -ENOENT */
    bool read_only;             /* open for check/inspection; writes fail with -EROFS */
};

/* 0 or -errno. -ENOENT: no database and !create_if_missing. -EPROTO: the directory holds a
 * database of another program or a newer DEDUPD_FORMAT_VERSION (logged; nothing touched).
 * -ENOSPC: its file system has under 4 MiB free, too little for RocksDB to open (logged).
 * On success *out is the caller's; release it with meta_close(). */
int meta_open(const char *db_dir, const struct meta_options *opt, struct meta **out);
void meta_close(struct meta *m); /* NULL is fine */

/* Point read. Returns the value length (which may exceed cap: then only cap bytes were
 * copied), -ENOENT when absent, -EIO on a database error. */
ssize_t meta_get(struct meta *m, enum meta_cf cf, const void *key, size_t klen, void *val,
                 size_t cap);
/* meta_get that never does I/O: it answers from the memtables and the block cache only, and
 * returns -EAGAIN where it would have to read a table file (or on any database error, which
 * meta_get then reports). For callers that must not block (the event loop). */
ssize_t meta_get_cached(struct meta *m, enum meta_cf cf, const void *key, size_t klen, void *val,
                        size_t cap);

/* Batches: every index change of one logical operation goes into one batch (invariant 3).
 * meta_batch_new returns NULL only on out-of-memory. A batch belongs to one thread. */
struct meta_batch *meta_batch_new(void);
void meta_batch_free(struct meta_batch *b); /* NULL is fine */
void meta_batch_clear(struct meta_batch *b);
void meta_batch_put(struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen,
                    const void *val, size_t vlen);
void meta_batch_delete(struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen);
size_t meta_batch_count(const struct meta_batch *b);
size_t meta_batch_bytes(const struct meta_batch *b); /* encoded size, for flush pacing */
/* The last change b makes to key in cf: 1 for a put (its value copied to val, up to cap
 * bytes; *vlen = its length), 0 for a delete, -ENOENT if b does not touch the key. Scans
 * the whole batch: for rare checks, not per entry. */
int meta_batch_find(const struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen,
                    void *val, size_t cap, size_t *vlen);
/* Writes the batch atomically; b stays the caller's. With sync the WAL is fsynced first.
 * 0, -ENOMEM, -EIO, or -ENOSPC: the file system is full (another process may have filled
 * it past the store's reserve), and RocksDB refuses writes until its background retries
 * find room again — then, without a restart, batches are taken again. */
int meta_batch_commit(struct meta *m, struct meta_batch *b, bool sync);

/* Makes every committed batch durable (WAL fsync). Invariant 4: call after the segment
 * data those batches reference is durable. */
int meta_sync(struct meta *m);
/* The WAL is flushed manually (see db.c): committed batches stay in memory until this
 * writes them to the WAL file (and fsyncs it with sync). meta_sync() == flush with sync.
 * Callers must have made the segment bytes those batches reference durable first if the
 * write may reach the disk (invariant 4). 0, -EIO or -ENOSPC. */
int meta_flush_wal(struct meta *m, bool sync);
/* fn(arg, true) runs before, and fn(arg, false) after, the WAL flush of every meta_sync()
 * and meta_batch_commit(.., sync = true) — not of meta_flush_wal() — so that whoever owns
 * data the batches reference (the store's segment files) makes it durable before the WAL
 * that names it (invariant 4), even when the sync was asked for by someone else (the
 * engine's catalogue), and can keep new batches out until the flush is done. It may run
 * on any thread with any of the caller's locks held. A non-zero return of the `before`
 * call fails the sync, and the `after` call is then not made. Set once, before other
 * threads use m; NULL removes it. */
void meta_set_wal_hook(struct meta *m, int (*fn)(void *arg, bool before), void *arg);
/* The sweep of `hash` entries whose chunk is gone (invariant 2 lets freed chunks keep
 * them): RocksDB's compactions of the `hash` family — not its flushes — call keep(arg, key,
 * klen, val, vlen) for every entry they rewrite and drop the entry when it returns false.
 * A keep function must never answer false for an entry a look-up may still need; it runs
 * on RocksDB's compaction threads. keep NULL uninstalls arg's function (not one installed
 * since with another arg): when this returns, no call of it is running and none will
 * start. Any thread. */
typedef bool (*meta_keep_fn)(void *arg, const void *key, size_t klen, const void *val, size_t vlen);
void meta_set_hash_sweep(struct meta *m, meta_keep_fn keep, void *arg);
/* `hash` entries the sweep dropped since open. */
uint64_t meta_hash_swept(struct meta *m);
/* Compacts all of cf now, memtables included (RocksDB's CompactRange): for `hash`, the sweep
 * sees every entry. Blocks for as long as that takes; for maintenance and tests. 0,
 * -EINVAL, -EROFS (read-only). */
int meta_compact(struct meta *m, enum meta_cf cf);
/* Flushes every memtable to SST files; with !wait it returns once each column family's
 * memtable has been switched for an empty one (RocksDB does that in the call) and the
 * flush is scheduled. Either way the flush covers exactly the batches committed before
 * the call, so the store calls it right after a segment fdatasync: RocksDB's own flush
 * (which persists batches regardless of the WAL) then never writes references to segment
 * bytes that are not yet durable. 0, -EIO or -ENOSPC. */
int meta_flush_memtables(struct meta *m, bool wait);
/* Largest active memtable among the column families, and the size at which RocksDB flushes
 * one on its own. */
uint64_t meta_memtable_bytes(struct meta *m);
uint64_t meta_memtable_limit(void);
/* Entries (puts and deletes) in the active memtables of all column families together: it
 * changes with every committed batch, so an unchanged count means nothing was written. */
uint64_t meta_memtable_entries(struct meta *m);

/* Iterators see the database as it was at meta_iter_new (RocksDB's implicit snapshot: no
 * snapshot is registered, see batch.c). NULL on out-of-memory. */
struct meta_iter *meta_iter_new(struct meta *m, enum meta_cf cf);
void meta_iter_free(struct meta_iter *it);                                    /* NULL is fine */
void meta_iter_seek(struct meta_iter *it, const void *key, size_t klen);      /* first >= key */
void meta_iter_seek_last(struct meta_iter *it, const void *key, size_t klen); /* last <= key */
void meta_iter_seek_first(struct meta_iter *it);
bool meta_iter_valid(const struct meta_iter *it);
void meta_iter_next(struct meta_iter *it);
/* Borrowed until the iterator moves or is freed. */
const void *meta_iter_key(const struct meta_iter *it, size_t *klen);
const void *meta_iter_value(const struct meta_iter *it, size_t *vlen);
/* 0, or -EIO when iteration stopped on a database error rather than the end. */
int meta_iter_status(const struct meta_iter *it);

/* Approximate on-disk bytes of one column family (SST + memtables, the latter without the
 * `hash` memtables' bucket arrays), for stats/estimates. */
uint64_t meta_cf_size(struct meta *m, enum meta_cf cf);
/* RocksDB's estimate of the live keys in a column family (rocksdb.estimate-num-keys): exact
 * while nothing was deleted, close otherwise; costs no scan. */
uint64_t meta_cf_keys_estimate(struct meta *m, enum meta_cf cf);
/* "map", "chunk", ... for log lines. */
const char *meta_cf_name(enum meta_cf cf);

#endif
