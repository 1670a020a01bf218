/* store: the chunk store — append-only segment log under DATA_DIR/segments/ plus the chunk
 * and map bookkeeping in meta, with refcounts and freeing at zero.
 * Owns: segment files and their fds, the data directory lock, chunk id allocation, the
 * commit lock that serializes transactions, per-segment live/dead byte accounting,
 * background compaction.
 * Knows nothing of NBD, exports' semantics beyond their map keys, or hashing policy: the
 * caller supplies hashes; the store records them. A freed chunk's `hash` entry stays (its
 * id is never reused, so a look-up that finds it finds no chunk: invariant 2); the index's
 * sweep drops it later, and check reports such entries as stale, not as problems.
 * Threads: any worker thread; never the loop thread (calls may block on disk). */
#ifndef DD_STORE_STORE_H
#define DD_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dedupd/limits.h"

struct meta;
struct meta_batch;

enum store_codec {
    STORE_CODEC_RAW = 0,
    STORE_CODEC_ZSTD = 1, /* reserved: compression on hash miss (not yet written) */
    STORE_CODEC_LZ4 = 2,  /* reserved */
};

struct store; /* opaque */

struct store_options {
    uint64_t seg_bytes;         /* seal the active segment at this size; 0 = 256 MiB */
    uint64_t block_cache_bytes; /* RocksDB block cache; 0 = 64 MiB */
    double compact_live_ratio;  /* compact sealed segments whose live fraction is below; 0 = 0.5 */
    uint64_t compact_bytes_per_sec; /* background compaction I/O bound; 0 = 64 MiB/s */
    bool background_compaction;     /* start the compaction thread at open */
    bool read_only;                 /* check/scrub of a directory without changing it */
    /* Free space on the file system that new data may not take (RocksDB's log, flushes
     * and compactions need it: a full disk must not cost acknowledged writes their index
     * entries); 0 = 64 MiB. Compaction's moves may use it. */
    uint64_t reserve_bytes;
    /* Once nothing has been written for two seconds, the background thread flushes the
     * index's memtables if they hold at least this many entries (0 = 65536); the next
     * burst of writes then does not pay for the last one's flush. */
    uint64_t idle_flush_entries;
};

/* Opens (creating if absent) DATA_DIR: takes DATA_DIR/dedupd.lock (-EBUSY if another
 * process holds it), opens meta at DATA_DIR/db, recovers the active segment tail
 * (truncating torn or unindexed records; invariants 1-3 hold afterwards).
 * -EPROTO: newer format or not a dedupd directory (logged; nothing touched).
 * On success *out is the caller's; release with store_close(). */
int store_open(const char *data_dir, const struct store_options *opt, struct store **out);
/* Stops compaction, syncs, closes files and meta, releases the lock. NULL is fine. */
void store_close(struct store *st);
/* The metadata database, for the index back-end and the export catalogue. Borrowed. */
struct meta *store_meta(struct store *st);

/* ---- reading ---- */

struct store_chunk_info {
    uint64_t id;
    uint32_t seg;
    uint64_t off;
    uint32_t raw_len;
    uint32_t stored_len;
    uint8_t codec;
    uint8_t hash_alg;
    uint8_t hash_len;
    uint64_t refs;
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
};

/* 0, -ENOENT (no such live chunk), -EIO. */
int store_chunk_get(struct store *st, uint64_t chunk_id, struct store_chunk_info *out);
/* Reads a live chunk's raw bytes into buf (cap >= raw_len). Safe against concurrent
 * compaction moving the record. Returns raw_len, -ENOENT, -EUCLEAN (CRC mismatch: logged
 * with segment and offset; never wrong bytes), -EIO. */
ssize_t store_chunk_read(struct store *st, uint64_t chunk_id, void *buf, size_t cap);

/* Reads chunks ids[0..n) (an id of 0 is skipped), each of exactly len raw bytes, into
 * bufs[i]: store_chunk_read for each, with the same checks and errors (a chunk of another
 * length is -EIO), but cheaper for many chunks: the entries of a dense id range come from one
 * iterator pass, and records that lie back to back in a segment are read with one preadv.
 * 0 or the first -errno. */
int store_chunks_read(struct store *st, const uint64_t *ids, size_t n, void *const *bufs,
                      uint32_t len);

/* Block map lookups. 0 and *chunk_id, or -ENOENT when unmapped (reads as zeros). */
int store_map_get(struct store *st, uint32_t export_id, uint64_t chunk_idx, uint64_t *chunk_id);

/* The map entries of chunks [first, first + n) of an export: ids[i] is chunk first+i's id,
 * 0 when unmapped. From the location cache when it holds all of them (a sequential read
 * of recently written data), else with one iterator pass, whose answers then fill the
 * cache. 0 or -errno. */
int store_map_get_range(struct store *st, uint32_t export_id, uint64_t first, uint64_t n,
                        uint64_t *ids);

/* Non-blocking twins of store_map_get_range and store_chunk_read for the event loop (cached.c):
 * they answer only from memory (RocksDB memtables and block cache, the page cache) and
 * return -EAGAIN wherever the blocking call would wait for the disk or take the commit
 * lock — and also on anything unusual (a corrupt record, a segment being compacted away,
 * a database error), which the blocking call then meets, reports and handles. So -EAGAIN
 * always means "ask the blocking call", never an error of its own. Any thread. */
int store_map_get_range_cached(struct store *st, uint32_t export_id, uint64_t first, uint64_t n,
                               uint64_t *ids); /* of store_map_get_range: 0 or -EAGAIN */
ssize_t store_chunk_read_cached(struct store *st, uint64_t chunk_id, void *buf, size_t cap);
/* ... and of store_chunks_read: every location from the location cache, each run of
 * adjacent records with one read from the page cache; 0 or -EAGAIN. */
int store_chunks_read_cached(struct store *st, const uint64_t *ids, size_t n, void *const *bufs,
                             uint32_t len);
/* ... and store_chunks_read_cached into record-shaped memory, for a caller that can send
 * the bytes from where they land (the event loop's READ reply): chunk i's record, header
 * then len bytes, goes to rec + i * store_rec_stride(len), so its bytes are at that plus
 * store_rec_skip(). A run of adjacent records then comes from the page cache as one
 * contiguous copy, not as two per record, one of them straddling pages (a tenth of a
 * sequential read's CPU: docs/benchmarks.md, item 47). The slots of ids[i] == 0 are left
 * alone; the headers in the others are the store's. 0 or -EAGAIN. */
int store_chunks_read_cached_rec(struct store *st, const uint64_t *ids, size_t n, uint8_t *rec,
                                 uint32_t len);
size_t store_rec_stride(uint32_t len);
size_t store_rec_skip(void);
/* Calls fn for each mapped chunk index in [first, first + count) in ascending order; stops
 * early and returns fn's value if fn returns non-zero. 0 or -errno. */
int store_map_scan(struct store *st, uint32_t export_id, uint64_t first, uint64_t count,
                   int (*fn)(void *arg, uint64_t chunk_idx, uint64_t chunk_id), void *arg);

/* Chunks currently mapped by one export (maintained by map_set; persisted), for its
 * logical-bytes counter. 0 or -errno. */
int store_export_mapped(struct store *st, uint32_t export_id, uint64_t *chunks);

/* ---- writing: transactions ---- */

/* A transaction holds the store's commit lock from begin to commit/abort, so look-ups made
 * inside it (hash index, refcounts) cannot race with frees. Keep it short: hash before
 * beginning. Changes are applied to RocksDB in ONE batch at commit (invariant 3), after the
 * segment bytes appended inside it have been written (not yet synced). */
struct store_txn; /* opaque */

/* 0 or -errno; on success *out must be committed or aborted by the same thread. */
int store_txn_begin(struct store *st, struct store_txn **out);
/* Appends a record for a new chunk (refs start at 0; map_set/ref add them) and returns its
 * new, never reused id. hash may be NULL with hash_alg 0 (dedup off). -ENOSPC when the disk
 * is full (the transaction is then unusable: abort it). The bytes are copied; they reach the
 * segment file at commit (one write per transaction), so -ENOSPC/-EIO may come from
 * store_txn_commit instead. Not readable with store_chunk_read before commit. */
int store_txn_add_chunk(struct store_txn *tx, uint8_t hash_alg, const uint8_t *hash,
                        size_t hash_len, const void *buf, uint32_t len, uint64_t *chunk_id);
/* store_txn_add_chunk for a caller that computed crc = crc32c(0, buf, len) itself (outside
 * the commit lock) and keeps buf unchanged until commit/abort returns: the bytes are
 * borrowed, not copied, and go to the segment straight from buf. */
int store_txn_add_chunk_ref(struct store_txn *tx, uint8_t hash_alg, const uint8_t *hash,
                            size_t hash_len, const void *buf, uint32_t len, uint32_t crc,
                            uint64_t *chunk_id);
/* Early appends: a writer writes the records of the chunks it expects to be new BEFORE
 * its transaction, outside the commit lock (appends serialize only among themselves), then
 * adds them to its transaction. Each record gets its never-reused chunk id at the append.
 * A record no committed transaction adds is dead bytes: say so with store_txn_drop_early
 * (in a transaction) or store_early_discard. Until then it is the caller's: a failed
 * transaction leaves it untouched, so a retry may add it again. */
struct store_new_chunk {
    const void *buf; /* len bytes, unchanged until the append returns */
    uint32_t len;
    uint32_t crc;     /* crc32c(0, buf, len) */
    uint8_t hash_alg; /* 0 with hash_len 0: dedup off */
    uint8_t hash_len;
    const uint8_t *hash;
    /* Set by store_append_early: */
    uint64_t id;
    uint32_t seg;
    uint64_t off;
};
/* Writes the records of c[0..n) to the active segment (one write; a seal first if they do
 * not fit) and fills each one's id, seg and off. 0, -EINVAL, -EROFS, -ENOSPC, -EIO: on
 * failure nothing of the call is appended. */
int store_append_early(struct store *st, struct store_new_chunk *c, size_t n);
/* The transaction takes over a chunk appended early: like store_txn_add_chunk_ref, minus the
 * write. 0, -EINVAL (not an early record of this store), -ENOMEM. */
int store_txn_add_early(struct store_txn *tx, const struct store_new_chunk *c);
/* An early record this transaction will not use: dead bytes once it commits. */
int store_txn_drop_early(struct store_txn *tx, const struct store_new_chunk *c);
/* Early records no transaction will use (after a failed write request): dead bytes now. */
void store_early_discard(struct store *st, const struct store_new_chunk *c, size_t n);
/* Points (export, chunk_idx) at chunk_id, or unmaps it when chunk_id is 0; the new chunk
 * gains a reference and the old one (if any) loses one, all at commit. Sees earlier
 * map_set calls of the same transaction. */
int store_txn_map_set(struct store_txn *tx, uint32_t export_id, uint64_t chunk_idx,
                      uint64_t chunk_id);
/* A chunk's entry read before a transaction, so that the transaction that drops a reference
 * to it (map_set over a mapped chunk) need not read it under the commit lock: on random
 * overwrites that point read was ~10% of the server's CPU, all of it inside the lock. The
 * contents are the store's; the transaction uses them only if no entry was rewritten behind
 * the refcount journal since (a fold, a compaction move, a repair), else it reads afresh. */
#define STORE_CHUNK_PRE_VAL_MAX 72
struct store_chunk_pre {
    uint64_t id; /* 0: nothing preloaded */
    uint64_t epoch;
    uint8_t len;
    uint8_t val[STORE_CHUNK_PRE_VAL_MAX];
};
/* Fills *out for chunk_id outside any transaction. 0, -ENOENT, -EIO (then out->id is 0). */
int store_chunk_preload(struct store *st, uint64_t chunk_id, struct store_chunk_pre *out);
/* map_set for a caller that read the entry's committed value (store_map_get; 0 when
 * unmapped) before the transaction, to keep that read out of the commit lock. Only valid if
 * no other transaction can have changed the entry since (the engine holds the chunk's range
 * lock exclusively); an earlier map_set of the same transaction still takes precedence.
 * old_pre (NULL: none) is old_id's entry from store_chunk_preload, used if still current. */
int store_txn_map_set_known(struct store_txn *tx, uint32_t export_id, uint64_t chunk_idx,
                            uint64_t old_id, const struct store_chunk_pre *old_pre,
                            uint64_t chunk_id);
/* Loads a chunk into the transaction (so that a later map_set/ref on it reads nothing):
 * 0 if it exists (live, or added/held by this transaction), -ENOENT if it does not, -EIO.
 * For a caller that found the id outside the transaction and must know it is still live. */
int store_txn_chunk_hold(struct store_txn *tx, uint64_t chunk_id);
/* Raw reference change for holders other than map entries (clones, tests). */
int store_txn_ref(struct store_txn *tx, uint64_t chunk_id, int64_t delta);
/* Live info of a chunk as this transaction would leave it (refs include pending deltas). */
int store_txn_chunk_get(struct store_txn *tx, uint64_t chunk_id, struct store_chunk_info *out);
/* The batch that commit will write, for callers (the rocksdb hash back-end) that add their
 * own entries to the same atomic write. Borrowed until commit/abort. */
struct meta_batch *store_txn_batch(struct store_txn *tx);

/* Called once per chunk whose refcount reaches zero, before the batch is written; the
 * chunk's `chunk` entry is deleted by the store in the same batch (its `hash` entry stays
 * for the sweep), and its bytes are counted dead in its segment. */
typedef void (*store_freed_fn)(void *arg, const struct store_chunk_info *freed);
/* Writes everything in one batch and releases the commit lock, success or not; tx is
 * freed. 0 or -errno (then nothing of the batch is visible; records appended in the
 * transaction are dead, early ones are still the caller's). */
int store_txn_commit(struct store_txn *tx, store_freed_fn freed, void *arg);
/* Tests only: after `skip` more commits, the next n fail with rc as a failed RocksDB write
 * would, before anything is written. */
void store_test_fail_commits(struct store *st, int rc, unsigned skip, unsigned n);
/* Tests only: store_check works through the chunks this many at a time (0: the default,
 * 4 M), so that small stores take several windows. Process-wide. */
void store_test_check_window(uint64_t chunks);
void store_txn_abort(struct store_txn *tx); /* releases the lock, frees tx; NULL is fine */

/* Invariant 4: segment fdatasync first, then the RocksDB WAL sync. Every transaction
 * committed before the call is durable when it returns 0. */
int store_sync(struct store *st);

/* ---- accounting ---- */

struct store_stats {
    uint64_t chunks;        /* live chunks */
    uint64_t chunks_shared; /* live chunks with refs > 1 */
    uint64_t raw_bytes;     /* sum of raw_len of live chunks (unique bytes stored) */
    uint64_t stored_bytes;  /* sum of stored_len of live chunks */
    uint64_t disk_bytes;    /* bytes of all segment files */
    uint64_t dead_bytes;    /* record bytes in segments no longer live */
    uint64_t segments;
    uint64_t meta_bytes;   /* RocksDB size on disk */
    uint64_t compactions;  /* segments compacted since open */
    uint64_t idle_flushes; /* memtable flushes made because writes had stopped, since open */
    /* 0, or the -errno of the first segment fdatasync that failed since open: from then on
     * every sync fails with it and nothing written is durable until a restart (whose
     * recovery checks the unsynced tail; docs/store.md, Durability). */
    int sync_error;
    /* The segments' file system now (statvfs; UINT64_MAX when it cannot be asked), the
     * free-space reserve kept for the index, and whether new data is being refused because
     * free space went down to it (until a claim fits again). */
    uint64_t free_bytes;
    uint64_t reserve_bytes;
    bool new_data_refused;
};
int store_stats(struct store *st, struct store_stats *out);

/* ---- maintenance: compaction, check, scrub ---- */

struct store_progress {
    uint64_t done;  /* units done (bytes or entries, as the operation says) */
    uint64_t total; /* 0 when unknown */
};
/* Called from the working thread; returning non-zero cancels the operation (-ECANCELED). */
typedef int (*store_progress_fn)(void *arg, const struct store_progress *p);

struct store_compact_result {
    uint64_t segments_compacted;
    uint64_t bytes_moved;
    uint64_t bytes_reclaimed;
};
/* Compacts now every sealed segment below the live threshold (force: every segment with any
 * dead bytes). Blocks until done. 0 or -errno. */
int store_compact(struct store *st, bool force, store_progress_fn progress, void *arg,
                  struct store_compact_result *out);

/* One problem found by check or scrub, as a line of text with context. */
typedef void (*store_finding_fn)(void *arg, const char *finding);

struct store_check_result {
    uint64_t map_entries, chunks, hash_entries;
    uint64_t hash_stale; /* entries of freed chunks waiting for the sweep (repair drops them) */
    uint64_t problems;   /* invariant violations found */
    uint64_t repaired;   /* fixed because repair was asked and the fix is safe */
};
/* Proves invariants 1-3 from the metadata: recomputes refcounts from `map` (and other
 * holders), checks every chunk's record lies inside its segment and every hash entry names
 * a live chunk with that hash. With repair, fixes what is safely fixable (refcounts,
 * dangling hash entries). */
int store_check(struct store *st, bool repair, store_progress_fn progress, store_finding_fn finding,
                void *arg, struct store_check_result *out);

struct store_scrub_result {
    uint64_t chunks, bytes;
    uint64_t crc_errors;  /* -EUCLEAN */
    uint64_t hash_errors; /* bytes read fine but hash to something else */
    uint64_t io_errors;
};
/* Reads every live record, verifies CRC and hash (SHA-256 / xxh3-128 as recorded). */
int store_scrub(struct store *st, store_progress_fn progress, store_finding_fn finding, void *arg,
                struct store_scrub_result *out);

#endif
