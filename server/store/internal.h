/* store/internal.h: what the files of store/ share. Not included outside store/ (tests of
 * store/ may include it to reach recovery and accounting details).
 *
 * Locks, in the order they are taken:
 *   commit_lock  transactions (begin..commit/abort), sync, compaction's commits, recovery:
 *                everything that changes chunk/map/hash entries, refcounts, counters,
 *                which segment is active, and segment accounting.
 *   append_lock  the append position of the active segment and the next chunk id: held by
 *                an early append (early.c) for its write, and by a transaction from its
 *                first in-transaction append until its records are written.
 *   seg_lock     the segment table (lookup + reader refcounts); held only briefly.
 *   stat_lock    the in-memory copies of counters read by store_stats/export_mapped. */
#ifndef DD_STORE_INTERNAL_H
#define DD_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "meta/keys.h"
#include "meta/meta.h"
#include "store/io.h"
#include "store/record.h"
#include "store/store.h"

/* Big-endian integers of the store's own `meta` keys and values. */
static inline void
store__put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t) v;
}

static inline uint64_t
store__get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* Spreads an id over the bits of a hash-table index. */
static inline size_t
store__mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t) x;
}

extern const struct store_io_ops *store__io;
ssize_t store__io_read_full(int fd, void *buf, size_t len, uint64_t off);
int store__io_write_full(int fd, const void *buf, size_t len, uint64_t off);
/* Writes every byte of iov[0..cnt) (consumed: the array is modified) at off. */
int store__io_writev_full(int fd, struct iovec *iov, size_t cnt, uint64_t off);
int store__io_mkdir_p(const char *path);

struct store_seg {
    uint32_t id;
    int fd;
    int refs;     /* the table's reference + readers'; seg_lock */
    bool removed; /* no longer in the table: closed when refs reaches 0 */
    /* Below: commit_lock, except size (append_lock; see store__seg_size). */
    uint64_t size;   /* bytes appended (the append position of the active segment) */
    uint64_t synced; /* bytes made durable by fdatasync */
    uint64_t kicked; /* bytes whose write-back was started early (store_txn_commit) */
    uint64_t live;   /* record bytes of live chunks */
    uint64_t dead;   /* record bytes of freed or never-indexed records */
    bool sealed;
    bool dirty;         /* accounting changed since its meta entry was last written */
    bool has_entry;     /* recovery only: a `seg:` entry exists */
    int unsynced;       /* atomic: written since the last fdatasync began (for the WAL hook) */
    uint64_t prefilled; /* append_lock: the file holds bytes (zeros ahead of size) to here */
    /* Atomic: records appended early and not yet committed or dropped. Only the active
     * segment gains any, so once sealed with none, it never has any again: compaction
     * leaves a segment alone until then (it would take the records for dead). */
    int early_pending;
};

/* The persisted global counters ("counters" key in the meta CF). */
struct store_counters {
    uint64_t chunks, shared, raw_bytes, stored_bytes, next_id;
};

struct txn_chunk {             /* overlay entry: one chunk touched by the transaction */
    uint64_t id;               /* 0 = empty slot */
    struct meta_chunk_rec rec; /* as loaded (or as appended, for new chunks) */
    int64_t delta;
    bool is_new;
    bool early; /* appended before the transaction: the caller's until it commits */
};

struct txn_map { /* overlay entry: one map key set by the transaction */
    uint32_t export_id;
    bool used;
    uint64_t chunk_idx;
    uint64_t chunk_id; /* 0 = unmapped */
};

struct txn_export {
    uint32_t export_id;
    int64_t delta;
};

struct txn_seg { /* accounting change of one segment */
    struct store_seg *sg;
    int64_t d_live, d_dead;
    uint32_t early_done; /* early records added or dropped: no longer pending once committed */
};

struct store_txn {
    struct store *st;
    struct meta_batch *batch;
    /* Open-addressed tables, power-of-two sized, cleared after each transaction by walking
     * the list of used slots, so a small transaction does not pay for a big table. */
    struct txn_chunk *chunks;
    size_t chunks_cap;
    uint32_t *chunk_used; /* slot indices in insertion order */
    size_t nchunks;
    struct txn_map *maps;
    size_t maps_cap;
    uint32_t *map_used;
    size_t nmaps;
    struct txn_export exports[16];
    size_t nexports;
    struct txn_seg *segs;
    size_t nsegs, segs_cap;
    /* Appended records not yet written: one pwritev at commit (or at a seal) of the pieces
     * in order. A piece is either the next iov_len bytes of wbuf (iov_base NULL: wbuf may
     * move while it grows) or caller bytes borrowed until commit (add_chunk_ref). wlen is
     * the total, wused the part in wbuf. */
    uint8_t *wbuf;
    size_t wlen, wcap, wused;
    /* Chunk entries as last committed, by id, direct-mapped (commit_lock): a duplicate
     * write references the same few hot chunks over and over, and reading their entries
     * back from RocksDB inside the commit lock cost every writer. Every committed change
     * of a chunk entry updates or drops its slot (txn commit, compaction's moves, check's
     * repairs: store__ccache_drop_all). id 0 = empty. */
    struct store_ccache_slot *ccache;
    struct iovec *wiov;
    size_t nwiov, wiov_cap;
    uint64_t woff;  /* offset in the active segment of wbuf[0] (valid while appending) */
    bool appending; /* holds append_lock: in-transaction records reserved, not all written */
    bool broken;    /* an append failed: only abort is allowed */
    bool active;
};

/* refs.c: the refcount journal (see there). */
#define STORE_REFS_FOLD_IDS   8192       /* chunks remembered before a commit folds */
#define STORE_REFS_FOLD_KEYS  4096       /* journal entries before a commit folds */
#define STORE_REFS_FOLD_BYTES (8u << 20) /* journal bytes before a commit folds */
struct store_refs_slot {
    uint64_t id; /* 0 = empty */
    uint64_t refs;
};
struct store_refs {
    pthread_mutex_t lock; /* changes: commit_lock + lock; readers outside the commit: lock */
    struct store_refs_slot *tab;
    size_t cap, n;
    uint64_t seq_lo, seq_hi; /* journal entries [seq_lo, seq_hi) may exist */
    uint64_t jbytes;         /* in those entries */
    uint8_t *jbuf;           /* the journal entry being built (commit_lock) */
    size_t jlen, jcap;
};

struct store_export_count {
    uint32_t export_id;
    uint64_t mapped;
};

struct store {
    char *dir, *seg_dir, *db_dir;
    int lock_fd;
    struct store_options opt;
    struct meta *meta;

    pthread_mutex_t commit_lock;
    pthread_mutex_t append_lock;
    /* Shared by a commit from its segment write to its batch write; exclusive for a WAL
     * flush asked by someone else (store__wal_hook), so no batch slips into that flush
     * after its segments were synced. */
    pthread_rwlock_t wal_lock;
    pthread_mutex_t seg_lock;
    pthread_mutex_t stat_lock;

    struct store_seg **segs; /* sorted by id; seg_lock (readers) + commit_lock (writers) */
    size_t nsegs, segs_cap;
    struct store_seg *active;
    int dir_dirty; /* atomic: a segment file was created or removed since the last sync */
    bool opened;   /* open completed: close may sync */

    struct store_counters cnt; /* commit_lock (writes), stat_lock (reads) */
    uint64_t id_next; /* append_lock: the next chunk id; cnt.next_id is its committed copy */
    /* append_lock (space.c): free space beyond the reserve at the last statvfs, and bytes
     * appended since; space_low: the last claim was refused (logged once per episode). */
    uint64_t space_room, space_spent;
    bool space_low;
    struct store_export_count *exports; /* stat_lock; loaded lazily */
    size_t nexports, exports_cap;
    uint64_t compactions;

    struct store_loccache *loc; /* loccache.c: map entries and chunk locations for reads */
    struct store_mapend {       /* mapend.c, mapend_lock: where each map region's entries end */
        uint32_t export_id;
        bool untracked;    /* its table could not grow: every look-up asks RocksDB */
        uint16_t *regions; /* per STORE_MAPEND_REGION chunks: end of its entries, or unknown */
        uint64_t nregions;
    } * mapend;
    size_t nmapend; /* of STORE_MAPEND_EXPORTS slots */
    pthread_mutex_t mapend_lock;
    struct store_txn txn; /* the one transaction: reused under commit_lock */
    /* Bumped (under commit_lock, after the batch) whenever chunk entries are rewritten other
     * than through the refcount journal: a store_chunk_pre read before is then stale. */
    _Atomic uint64_t entry_epoch;
    struct store_refs refs; /* refs.c */
    uint64_t wal_unflushed; /* batch bytes since the last WAL flush */
    uint64_t mem_unpolled;  /* batch bytes since the last memtable size poll */
    int seg_sync_err;       /* atomic: the first failed segment fdatasync (-errno), sticky */
    unsigned test_fail_skip, test_fail_commits; /* commit_lock: store_test_fail_commits */
    int test_fail_rc;

    /* background thread (compact.c): compaction passes and the idle flush (store.c) */
    uint64_t idle_entries;         /* background thread: memtable entries at the last tick */
    unsigned idle_ticks;           /* background thread: ticks since they last changed */
    _Atomic uint64_t idle_flushes; /* memtable flushes made because writes stopped */
    pthread_t compact_thread;
    bool compact_running;
    pthread_mutex_t compact_mu; /* guards compact_stop; compact_cv waits on it */
    pthread_cond_t compact_cv;
    bool compact_stop;
    pthread_mutex_t compact_run; /* one compaction pass at a time (taken before commit_lock) */
};

/* mapend.c. Exports beyond the first STORE_MAPEND_EXPORTS looked up are not tracked (their
 * look-ups always ask RocksDB). */
#define STORE_MAPEND_EXPORTS 1024
#define STORE_MAPEND_REGION  4096          /* chunks per region (16 MiB of 4 KiB chunks) */
int store__mapend_init(struct store *st);  /* mapend_lock is initialized with the others */
void store__mapend_fini(struct store *st); /* and destroyed here */
/* True when chunk_idx of the export cannot have a map entry (past its region's end). */
bool store__map_unwritten(struct store *st, uint32_t export_id, uint64_t chunk_idx);
/* A commit's batch is applied: raise the ends of the exports it mapped chunks in. */
void store__mapend_commit(struct store *st, const struct store_txn *tx);

/* txn.c, for add_chunk and early appends: the arguments of a new chunk record are
 * consistent; the header of its (raw) record. */
bool store__new_chunk_ok(uint8_t hash_alg, const uint8_t *hash, size_t hash_len, uint32_t len);
void store__encode_new_record(uint8_t out[STORE_RECORD_HDR_LEN], uint64_t id, uint8_t hash_alg,
                              const uint8_t *hash, size_t hash_len, uint32_t len, uint32_t crc);

/* loccache.c (see there for why a stale entry never yields wrong bytes). Any thread. */
struct store_loc {
    uint32_t seg;
    uint32_t len; /* stored length */
    uint64_t off;
};
int store__loc_init(struct store *st);
void store__loc_fini(struct store *st);
/* A hit: true and *chunk_id (0: known unmapped). A miss: false and *gen, to pass to
 * store__loc_map_fill with what RocksDB answered after this call. */
bool store__loc_map_get(struct store *st, uint32_t export_id, uint64_t idx, uint64_t *chunk_id,
                        uint32_t *gen);
void store__loc_map_fill(struct store *st, uint32_t export_id, uint64_t idx, uint64_t chunk_id,
                         uint32_t gen);
/* A commit changed the entry (its batch is applied): every fill begun before is refused. */
void store__loc_map_set(struct store *st, uint32_t export_id, uint64_t idx, uint64_t chunk_id);
void store__loc_clear(struct store *st); /* after changes made outside transactions */
bool store__loc_chunk_get(struct store *st, uint64_t id, struct store_loc *out);
/* The look-ups of n keys at once, taking each stripe mutex once per run of consecutive keys
 * rather than once per key: hit[k] says whether out[k] (gens[k]: as store__loc_map_get) was
 * found; an id of 0 is a miss. Returns the number of hits. */
uint64_t store__loc_map_get_many(struct store *st, uint32_t export_id, uint64_t first, uint64_t n,
                                 uint64_t *chunk_ids, uint32_t *gens, bool *hit);
uint64_t store__loc_chunk_get_many(struct store *st, const uint64_t *ids, uint64_t n,
                                   struct store_loc *out, bool *hit);
void store__loc_chunk_put(struct store *st, uint64_t id, const struct store_loc *loc);
void store__loc_chunk_drop(struct store *st, uint64_t id);
/* A committed move (compaction): a cached location of id now names loc; an id not cached
 * stays out, so a pass over cold segments does not push hot chunks out of the table. */
void store__loc_chunk_moved(struct store *st, uint64_t id, const struct store_loc *loc);
/* The map entry of one chunk from RocksDB (0 and -ENOENT when unmapped), put into the location
 * cache under gen, which the caller's cache miss returned before this read (nowait: the
 * cached twins' read, -EAGAIN for anything but a clean answer). */
int store__map_read(struct store *st, uint32_t export_id, uint64_t chunk_idx, uint64_t *chunk_id,
                    uint32_t gen, bool nowait);

/* segment.c */
int store__seg_open_all(struct store *st);
int store__seg_create(struct store *st, uint32_t id, struct store_seg **out);
struct store_seg *store__seg_find(struct store *st, uint32_t id); /* commit_lock */
struct store_seg *store__seg_get(struct store *st, uint32_t id);  /* +ref, any thread */
void store__seg_put(struct store *st, struct store_seg *sg);
void store__seg_remove(struct store *st, struct store_seg *sg);
void store__seg_close_all(struct store *st);
void store__seg_path(const struct store *st, uint32_t id, char *buf, size_t cap);
void store__seg_put_meta(struct store *st, struct meta_batch *b, struct store_seg *sg);
/* The same with live/dead adjusted by deltas not yet applied (a commit's batch). */
void store__seg_put_meta_delta(struct meta_batch *b, const struct store_seg *sg, int64_t d_live,
                               int64_t d_dead);
/* The same with its synced watermark for size, for a batch made durable without the WAL
 * hook (store__sync_locked): early appends made after the segment's fdatasync must not be
 * promised. Every committed record lies below it (the commit lock is held). */
void store__seg_put_meta_synced(struct meta_batch *b, const struct store_seg *sg);
/* size is written under append_lock, dead under commit_lock, and both are read without
 * them (store_stats; a commit reads size): stored and loaded atomically, no data races. */
static inline void
store__seg_set_size(struct store_seg *sg, uint64_t v)
{
    __atomic_store_n(&sg->size, v, __ATOMIC_RELAXED);
}

static inline uint64_t
store__seg_size(const struct store_seg *sg)
{
    return __atomic_load_n(&sg->size, __ATOMIC_RELAXED);
}

static inline void
store__seg_set_dead(struct store_seg *sg, uint64_t v)
{
    __atomic_store_n(&sg->dead, v, __ATOMIC_RELAXED);
}
int store__seg_sync_all(struct store *st);   /* commit_lock: fdatasync segments, dir */
int store__seg_sync_dir(struct store *st);   /* any thread */
int store__wal_hook(void *arg, bool before); /* any thread; see meta_set_wal_hook() */
int store__seal_active(struct store *st);    /* commit_lock + append_lock */
/* space.c (append_lock): room for `bytes` more of new data without eating into the
 * reserved free space, else -ENOSPC. Claimed where new data enters (add_chunk, early
 * appends); compaction's moves claim nothing: they are what frees space. */
int store__space_claim(struct store *st, uint64_t bytes);
/* space.c (any thread): store_stats' free_bytes, reserve_bytes and new_data_refused. */
void store__space_report(struct store *st, struct store_stats *out);
/* Before an append of [off, end) to the active segment, off being its size (append_lock):
 * fills the window-aligned stretch the append will write with zeros, so the page cache
 * backs it with large folios. A hint: errors are ignored. store__seg_trim cuts the zeros
 * past the size off (append_lock). */
void store__seg_prefill(struct store_seg *sg, uint64_t off, uint64_t end);
void store__seg_trim(struct store_seg *sg);
int store__read_record(struct store *st, struct store_seg *sg, uint64_t off,
                       struct store_record_hdr *h, void *buf, size_t cap, uint32_t expect_len);
/* One record met by store__seg_walk: rec holds the whole record (header first); whether
 * its stored bytes match data_crc is the callee's to check. Non-zero stops the walk. */
typedef int (*store_walk_fn)(void *arg, uint64_t off, const struct store_record_hdr *h,
                             const uint8_t *rec);
/* The window every segment walk reads through: 1 MiB more than the largest record, so that
 * a record of the largest chunk size fits whole. */
#define STORE_WALK_BYTES (DEDUPD_CHUNK_MAX + (1u << 20))
/* Walks sg's records in [from, to) in order — from must be a record boundary — reading the
 * file through win (wcap >= store_record_len(DEDUPD_CHUNK_MAX) bytes: STORE_WALK_BYTES). Stops at
 * fn's non-zero value (returned), or at a header that is short or does not decode, or a record that
 * does not end by `to` (-EUCLEAN: the records after it cannot be found). *end gets the offset it
 * stopped at (`to` after the last record). -errno on a read error. */
int store__seg_walk(struct store_seg *sg, uint64_t from, uint64_t to, uint8_t *win, size_t wcap,
                    store_walk_fn fn, void *arg, uint64_t *end);
/* Reads the whole record at off (header + stored bytes) into buf and verifies it; *len
 * gets its length. 0, -EUCLEAN, -ENOSPC (cap too small), -EIO. */
int store__read_raw(struct store_seg *sg, uint64_t off, uint8_t *buf, size_t cap,
                    struct store_record_hdr *h, uint64_t *len);

/* store.c */
void store__counters_put(struct store *st, struct meta_batch *b, const struct store_counters *c);
int store__export_count_get(struct store *st, uint32_t export_id, uint64_t *out); /* stat_lock */
void store__export_count_set(struct store *st, uint32_t export_id, uint64_t v);
void store__export_put(struct meta_batch *b, uint32_t export_id, uint64_t v);
int store__chunk_load(struct store *st, uint64_t id, struct meta_chunk_rec *r);
/* A chunk entry's value as store__chunk_load returns it (the journal's refcount applied);
 * -EIO, logged, when malformed. */
int store__chunk_decode(struct store *st, uint64_t id, const void *val, size_t n,
                        struct meta_chunk_rec *r);
int store__wal_pace(struct store *st, size_t batch_bytes); /* commit_lock */
int store__sync_locked(struct store *st);                  /* commit_lock */

/* txn.c */
int store__txn_init(struct store_txn *tx, struct store *st);
#define STORE_CCACHE_SLOTS 4096 /* ~320 KiB */
struct store_ccache_slot {
    uint64_t id;
    struct meta_chunk_rec rec;
};
/* Forgets every cached chunk entry (after entries changed behind the transactions). */
void store__ccache_drop_all(struct store *st);
/* Chunk entries were rewritten behind the journal (commit_lock, after their batch): entries
 * preloaded before are not used (struct store_chunk_pre). */
void store__entries_rewritten(struct store *st);
void store__txn_fini(struct store_txn *tx);
struct store_move { /* one record compaction wants to copy */
    uint64_t off;   /* in the source segment */
    uint64_t id;    /* chunk id its record header names */
    uint64_t len;   /* record bytes (header + stored) */
    size_t buf_off; /* where the record's bytes are in the caller's buffer */
    /* Set by store__move_records: where the copy went, for the location cache (a raw
     * chunk's record that was moved; to.len == 0 otherwise). */
    struct store_loc to;
};
int store__move_records(struct store *st, struct store_seg *from, struct store_move *mv, size_t n,
                        const uint8_t *buf, uint64_t *moved);

/* refs.c. store__refs_get: the journaled refcount of id, if it has one (any thread).
 * The rest run under the commit lock. */
void store__refs_init(struct store *st);
void store__refs_fini(struct store *st);
int store__refs_load(struct store *st); /* at open, before recovery */
bool store__refs_get(struct store *st, uint64_t id, uint64_t *refs);
bool store__refs_fold_due(const struct store *st, size_t more);
void store__refs_journal_begin(struct store *st);
int store__refs_journal_add(struct store *st, uint64_t id, uint64_t refs);
int store__refs_journal_put(struct store *st, struct meta_batch *b); /* -ENOMEM */
void store__refs_journal_apply(struct store *st);                    /* after the batch committed */
void store__refs_forget(struct store *st, uint64_t id); /* freed: after the batch committed */
int store__refs_fold_put(struct store *st, struct meta_batch *b);
void store__refs_folded(struct store *st); /* after a batch of fold_put committed */
int store__refs_fold(struct store *st);    /* a batch of its own */

/* recover.c */
int store__recover(struct store *st);

/* compact.c */
int store__compact_start(struct store *st);
void store__compact_stop(struct store *st);
/* Called by the background thread once a second: flushes the memtables once writes have
 * stopped (store.c). */
void store__idle_tick(struct store *st);

#define STORE_META_COUNTERS "counters"
#define STORE_META_SEG      "seg:"    /* + be32 segment id */
#define STORE_META_EXPORT   "mapped:" /* + be32 export id */
#define STORE_META_REFS     "refs:"   /* + be64 sequence number: the refcount journal */
#define STORE_REFS_KEY_LEN  (5 + 8)

#endif
