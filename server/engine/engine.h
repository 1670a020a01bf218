/* engine: block I/O on exports turned into shared chunks — split on chunk boundaries,
 * read-modify-write for partial chunks, zero detection, hashing, index look-up, verify,
 * refcounts through store transactions, per-range locking, counters; plus the export
 * catalogue and the persisted dedup settings.
 * Owns: the store (and through it meta), the hash index, export handles, counters.
 * Knows nothing of NBD or protobuf.
 * Threads: engine_read/write/trim/zero/flush/extents block and run on worker threads;
 * engine_submit() is the one door from a loop thread (one or several loops) to them.
 * Catalogue and settings
 * calls are any-thread but may block briefly on RocksDB (the control server runs them
 * through engine_submit_fn()). */
#ifndef DD_ENGINE_ENGINE_H
#define DD_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "dedupd/hash.h"
#include "dedupd/limits.h"

struct engine;        /* opaque */
struct engine_export; /* opaque: an open handle on one export */
struct store;

struct engine_options {
    const char *data_dir;
    uint64_t seg_bytes;             /* 0 = store default */
    uint64_t block_cache_bytes;     /* 0 = store default */
    double compact_live_ratio;      /* 0 = store default */
    uint64_t compact_bytes_per_sec; /* 0 = store default */
    uint64_t reserve_bytes;         /* 0 = store default (store_options.reserve_bytes) */
    bool background_compaction;
    /* Created at open when no export exists yet (NULL = none). */
    const char *default_export;
    uint64_t default_export_size;
};

/* Opens the store under data_dir, loads the persisted dedup settings and applies them,
 * creates the default export on a fresh directory. 0 or -errno (logged). */
int engine_open(const struct engine_options *opt, struct engine **out);
/* Syncs and closes. Every export handle must be closed first. NULL is fine. */
void engine_close(struct engine *e);
/* Borrowed: for maintenance commands (compact, check, scrub, stats). */
struct store *engine_store(struct engine *e);

/* ---- dedup settings (persisted in meta, applied live) ---- */

struct engine_dedup_config {
    bool enabled;                  /* off: chunks stored without hashing, never shared */
    char backend[16];              /* "rocksdb" (default, persistent) or "memory" (bounded) */
    enum dedupd_hash_alg hash_alg; /* SHA-256 default; xxh3 forces verify */
    bool verify;                   /* byte-compare before sharing */
    uint32_t default_chunk_size;   /* for exports created without one */
    uint64_t limit_nr;             /* memory back-end: max entries (0 = default) */
    uint64_t limit_mem;            /* memory back-end: max bytes (0 = no byte limit) */
};
void engine_dedup_get(struct engine *e, struct engine_dedup_config *out);
/* Validates, persists, then switches: writes in flight finish under the old settings, later
 * ones use the new. -EINVAL for a bad combination (unknown backend, bad chunk size). */
int engine_dedup_set(struct engine *e, const struct engine_dedup_config *cfg);

struct engine_index_usage {
    uint64_t entries;
    uint64_t bytes; /* exact memory of the memory back-end, or on-disk size of `hash` */
    uint64_t limit_nr;
    uint64_t limit_mem;
    uint64_t evictions;
    /* For sizing decisions (status): what one memory back-end entry costs (slot plus its
     * share of the bucket array) and the entry limit it gets when none is configured. */
    uint64_t mem_entry_bytes;
    uint64_t mem_default_limit_nr;
    /* rocksdb: its in-memory filter (struct index_usage) */
    uint64_t filter_bytes, filter_building_bytes, filter_builds, filter_skips;
};
void engine_index_usage(struct engine *e, struct engine_index_usage *out);

/* ---- export catalogue ---- */

struct engine_export_info {
    uint32_t id;
    char name[DEDUPD_EXPORT_NAME_MAX + 1];
    uint64_t size;
    uint32_t chunk_size;
    bool dedup;
    bool read_only;
    uint32_t parent_id;
    uint32_t open_handles; /* NBD connections using it now */
};

#define ENGINE_EXPORT_NO_DEDUP  (1u << 0)
#define ENGINE_EXPORT_READ_ONLY (1u << 1)

/* chunk_size 0 = the dedup default. -EEXIST, -EINVAL (name, size, chunk size). */
int engine_export_create(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size,
                         unsigned flags, struct engine_export_info *out);
/* New export sharing every chunk of src (refcounts +1), inheriting its dedup property and
 * chunk size. -ENOENT, -EEXIST. */
int engine_export_clone(struct engine *e, const char *src, const char *name,
                        struct engine_export_info *out);
/* -EBUSY while handles are open; frees its map and chunk references. */
int engine_export_delete(struct engine *e, const char *name);
/* "" selects the default export. -ENOENT. */
int engine_export_lookup(struct engine *e, const char *name, struct engine_export_info *out);
/* *out is a malloc'd array the caller frees. */
int engine_export_list(struct engine *e, struct engine_export_info **out, size_t *n);
int engine_export_set_dedup(struct engine *e, const char *name, bool dedup);
/* Name of the default export ("" resolves to it). */
const char *engine_default_export(struct engine *e);

/* Handles keep an export from being deleted. "" = the default export. -ENOENT. */
int engine_export_open(struct engine *e, const char *name, struct engine_export **out);
void engine_export_close(struct engine_export *ex); /* NULL is fine */
/* Snapshot of the export's info. */
void engine_export_get_info(const struct engine_export *ex, struct engine_export_info *out);

/* ---- block I/O: worker threads only; may block ---- */

#define ENGINE_FUA (1u << 0) /* durable before return (invariant 4) */
#define ENGINE_NO_HOLE                                                                             \
    (1u << 1) /* zero: keep allocation — accepted and ignored: a zero                            \
                 chunk is never stored either way */

/* Range errors: -EINVAL past the end of the export. -EROFS on a read-only export.
 * -EUCLEAN when a chunk's bytes are corrupt on disk, -EIO, -ENOSPC.
 * Byte granularity; requests on overlapping chunks of one export run one at a time in
 * arrival order, others in parallel. A write of up to DEDUPD_NBD_MAX_PAYLOAD bytes is one
 * store transaction (all or nothing); TRIM/ZERO of a large range may take several. Reads
 * of never-written or trimmed ranges return zeros. */
int engine_read(struct engine_export *ex, uint64_t off, uint32_t len, void *buf);
/* engine_read for the event loop: never blocks. Answers a read of at most
 * ENGINE_NOWAIT_MAX_BYTES from memory alone (cached metadata, the page cache) and returns 0,
 * or -EAGAIN when it cannot — the data is not cached, a write to the export is queued or
 * holds the chunks, the request is larger, or anything is unusual; the caller then submits
 * the read (engine_submit), whose answer, errors included, is the authoritative one.
 * Any thread; the loop thread is the one it is for. */
#define ENGINE_NOWAIT_MAX_BYTES (1u << 20)
int engine_read_nowait(struct engine_export *ex, uint64_t off, uint32_t len, void *buf);
/* engine_read_nowait for a caller that sends the bytes from where they land: chunk i of
 * the read is left at buf + i * sp->stride + sp->skip (chunk_size bytes each), with the
 * store's record headers between chunks, so that the store copies each run of adjacent
 * records from the page cache in one piece (store_chunks_read_cached_rec). Only for whole
 * chunks: engine_read_spread_size is the size buf needs for the read, or 0 for a read
 * this does not take (not aligned to chunks, a single chunk, past the end, over
 * ENGINE_NOWAIT_MAX_BYTES), which then goes to engine_read_nowait. 0 or -EAGAIN, as
 * engine_read_nowait. */
struct engine_spread {
    uint32_t stride, skip;
};
size_t engine_read_spread_size(const struct engine_export *ex, uint64_t off, uint32_t len);
int engine_read_nowait_spread(struct engine_export *ex, uint64_t off, uint32_t len, void *buf,
                              struct engine_spread *sp);
int engine_write(struct engine_export *ex, uint64_t off, uint32_t len, const void *buf,
                 unsigned flags);
int engine_trim(struct engine_export *ex, uint64_t off, uint64_t len, unsigned flags);
int engine_zero(struct engine_export *ex, uint64_t off, uint64_t len, unsigned flags);
/* Makes every write completed before the call durable, on every export (multi-conn safe). */
int engine_flush(struct engine *e);

/* Describes [off, off+len) as runs, in order, covering it exactly unless cap runs out or
 * the range holds more mapped chunks than one call examines (16384): then the runs cover
 * only a prefix and the caller asks again from its end (NBD allows a short reply). Flags
 * per run: */
#define ENGINE_EXT_HOLE   (1u << 0) /* unmapped: reads as zeros, nothing stored */
#define ENGINE_EXT_ZERO   (1u << 1) /* reads as zeros */
#define ENGINE_EXT_SHARED (1u << 2) /* mapped chunk(s) with refs > 1 */
struct engine_extent {
    uint64_t len;
    uint32_t flags;
};
/* Returns the number of runs written (>= 1), or -errno. */
int engine_extents(struct engine_export *ex, uint64_t off, uint64_t len, struct engine_extent *ext,
                   size_t cap);
/* Request flag of engine_extents_opt (and of an EXTENTS engine_req): the caller needs holes
 * and data only, so ENGINE_EXT_SHARED is never set and no chunk record is read (one point
 * read per mapped chunk saved: nbdcopy asks for base:allocation over everything it copies). */
#define ENGINE_EXTENTS_ALLOC_ONLY (1u << 0)
int engine_extents_opt(struct engine_export *ex, uint64_t off, uint64_t len,
                       struct engine_extent *ext, size_t cap, unsigned flags);

/* ---- the async door (loop thread) ---- */

enum engine_op {
    ENGINE_OP_READ,
    ENGINE_OP_WRITE,
    ENGINE_OP_TRIM,
    ENGINE_OP_ZERO,
    ENGINE_OP_FLUSH,
    ENGINE_OP_EXTENTS,
    ENGINE_OP_FN, /* run fn(arg) on a worker: control commands */
};

struct engine_req {
    /* in */
    enum engine_op op;
    struct engine *engine;
    struct engine_export *ex; /* I/O ops */
    uint64_t off;
    uint64_t len;
    void *buf; /* READ: filled; WRITE: borrowed until done */
    unsigned flags;
    struct engine_extent *ext; /* EXTENTS: caller's array of ext_cap */
    size_t ext_cap;
    int (*fn)(void *arg); /* FN */
    void *arg;
    void (*done)(struct engine_req *req); /* the submitting loop's thread, exactly once */
    void *user;
    /* out */
    int result; /* 0, a count (EXTENTS) or -errno */
    /* private */
    uv_work_t work;
    struct engine_req *batch_next; /* engine_submit_writes: the next request of the job */
};

/* From loop's thread only. Queues req on the worker pool; req->done runs on loop's thread
 * after.
 * A negative return means done never runs. The request memory is the caller's until done. */
int engine_submit(uv_loop_t *loop, struct engine_req *req);

/* engine_submit for n (1..ENGINE_BATCH_MAX) small WRITE requests arrived together, as ONE
 * worker job: that worker prepares them one after the other (split, hash, look-ups, early
 * appends) and commits them together, so a queue of small writes pays the commit — RocksDB
 * write, counters, commit lock — and the hand-offs between threads once per batch instead
 * of once per request. Each request still succeeds or fails on its own (a failed group is
 * retried one request at a time), and requests on overlapping chunks still run in arrival
 * order. Every req->done runs on loop's thread, in batch order. A negative return means
 * no done runs. Meant for writes of at most ENGINE_BATCH_MAX_BYTES; larger ones work but
 * lose the parallelism of separate jobs. */
#define ENGINE_BATCH_MAX       16
#define ENGINE_BATCH_MAX_BYTES (64u << 10)
int engine_submit_writes(uv_loop_t *loop, struct engine_req **reqs, size_t n);

/* ---- counters ---- */

struct engine_stats {
    uint64_t logical_bytes; /* mapped chunks x chunk size: non-zero data as clients see it */
    uint64_t zero_bytes;    /* bytes written (WRITE, WRITE_ZEROES) that ended in all-zero,
                               hence unmapped, chunks: never stored */
    uint64_t unique_bytes;  /* total: raw bytes of live chunks; per export: of the chunks
                               all of whose references are this export's (what deleting
                               it would free), each counted once */
    uint64_t disk_bytes;    /* segment files (total only; 0 per export) */
    uint64_t dedup_hits, dedup_misses;           /* per chunk, while dedup was on */
    uint64_t verify_compares, verify_mismatches; /* byte comparisons; collisions caught */
    uint64_t rmw_count;                          /* partial chunks read-modified-written */
    uint64_t bytes_written, bytes_read;          /* client bytes of WRITE and READ */
};
/* export NULL = totals. -ENOENT for an unknown export. The cumulative counters survive a
 * restart up to the last FLUSH (saved in meta). A per-export call scans that export's map
 * (for unique_bytes): a control-path call, not a hot one. Dedup ratio = logical / unique. */
int engine_stats(struct engine *e, const char *export_name, struct engine_stats *out);

/* ---- testing ---- */

/* The chunk hash: writes the digest of buf to out and returns its length, or -errno. */
typedef int (*engine_hash_fn)(enum dedupd_hash_alg alg, const void *buf, size_t len,
                              uint8_t out[DEDUPD_HASH_MAX_LEN]);
/* Replaces the chunk hash (NULL restores the real one), so tests can force collisions and
 * watch verify catch them. Only while no I/O is in flight. */
void engine_test_set_hash_fn(struct engine *e, engine_hash_fn fn);

#endif
