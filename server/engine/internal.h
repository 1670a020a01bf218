/* engine/internal.h: state shared by the files of engine/ only.
 *
 * Lock order (take in this order, release in reverse):
 *   1. an export's chunklock range (engine__chunklock_acquire)
 *   2. e->settings_lock, read side (a write request) / write side (engine_dedup_set)
 *   3. the store's commit lock (store_txn_begin .. commit)
 *   e->commitq.mu is a leaf: a group's leader releases it before it takes 3, and waiters
 *   hold 1 and 2 while they wait (the leader never takes 1 or 2 for them).
 *   e->cat_mu (the catalogue) is a leaf: never held while taking any of the above, except
 *   that catalogue changes which write block maps take 1-3 without it and re-take it after.
 * e->set_mu serializes engine_dedup_set callers and is taken before settings_lock. */
#ifndef DD_ENGINE_INTERNAL_H
#define DD_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "index/index.h"
#include "meta/keys.h"

struct meta;
struct store_chunk_info;

/* ---- range locks on chunk indices (chunklock.c) ---- */

struct engine_chunkrange { /* one queued request; lives on the caller's stack */
    uint64_t first, last;  /* chunk indices, inclusive */
    bool excl;             /* writers exclude everyone; readers share */
    struct engine_chunkrange *prev, *next;
};

struct engine_chunklock {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct engine_chunkrange *head, *tail; /* arrival order: running and waiting */
};

void engine__chunklock_init(struct engine_chunklock *cl);
void engine__chunklock_destroy(struct engine_chunklock *cl);
/* Blocks until no earlier overlapping request in a conflicting mode remains. */
void engine__chunklock_acquire(struct engine_chunklock *cl, struct engine_chunkrange *r,
                               uint64_t first, uint64_t last, bool excl);
/* acquire that never waits: false (r not queued) when an earlier request conflicts. */
bool engine__chunklock_try(struct engine_chunklock *cl, struct engine_chunkrange *r, uint64_t first,
                           uint64_t last, bool excl);
void engine__chunklock_release(struct engine_chunklock *cl, struct engine_chunkrange *r);

/* ---- group commit (commitq.c) ---- */

/* One request waiting to commit; lives in the caller's request state. */
struct engine_commitq_item {
    struct engine_commitq_item *next;
    uint32_t weight; /* the request's share of a group's budget (its chunks) */
    int rc;          /* set by whoever ran the request's transaction */
    bool done;
};

/* Runs items[0..n) — one or several requests, in arrival order — and sets each one's rc. */
typedef void (*engine_commit_fn)(void *arg, struct engine_commitq_item **items, size_t n);

struct engine_commitq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct engine_commitq_item *head, *tail; /* queued, not yet taken by a leader */
    bool leading;                            /* a leader is running a group */
    engine_commit_fn fn;
    void *arg;
};

#define ENGINE_GROUP_MAX_ITEMS  16   /* a store transaction touches at most 16 exports */
#define ENGINE_GROUP_MAX_WEIGHT 1024 /* chunks: one group's share of the commit lock */

void engine__commitq_init(struct engine_commitq *q, engine_commit_fn fn, void *arg);
void engine__commitq_destroy(struct engine_commitq *q);
/* Queues it and returns its rc once its transaction ran: either this thread becomes the
 * leader and runs a group of queued items (its own among them, in one or more rounds), or
 * another leader runs it. */
int engine__commitq_run(struct engine_commitq *q, struct engine_commitq_item *it);
/* engine__commitq_run for n items of one thread, queued together (in this order) so that
 * they can share a group; returns when all ran. Each item's rc is its own; the return
 * value is its[0]->rc. */
int engine__commitq_run_many(struct engine_commitq *q, struct engine_commitq_item *const *its,
                             size_t n);

/* ---- counters ---- */

struct engine_counters { /* relaxed atomics: exact totals, no ordering needed */
    _Atomic uint64_t zero_bytes;
    _Atomic uint64_t dedup_hits, dedup_misses;
    _Atomic uint64_t verify_compares, verify_mismatches;
    _Atomic uint64_t rmw_count;
    _Atomic uint64_t bytes_written, bytes_read;
};

static inline void
engine__count(_Atomic uint64_t *c, uint64_t v)
{
    if (v)
        atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* Adds v to one counter of an export and of the totals. */
#define ENGINE_COUNT(e, xs, field, v)                                                              \
    do {                                                                                           \
        engine__count(&(xs)->c.field, (v));                                                        \
        engine__count(&(e)->total.field, (v));                                                     \
    } while (0)

/* ---- exports ---- */

/* One per export in the catalogue, alive from engine_open (or creation) to deletion. */
struct engine_xstate {
    uint32_t id;
    struct meta_export_rec rec;   /* e->cat_mu guards changes; size/chunk_size never change */
    _Atomic bool dedup;           /* rec.dedup, readable without cat_mu by writers */
    uint32_t open_handles;        /* e->cat_mu */
    bool deleting;                /* e->cat_mu: no new handles, clones or lookups */
    struct engine_chunklock lock; /* chunk ranges in flight */
    /* WRITE/TRIM/ZERO requests submitted and not yet done: while any is, engine_read_nowait
     * declines, so a read never overtakes a change still queued for a worker. */
    _Atomic uint32_t changes_queued;
    struct engine_counters c;
    struct engine_xstate *next; /* e->exports list, by id */
};

struct engine_export {
    struct engine *e;
    struct engine_xstate *xs;
};

/* ---- the engine ---- */

#define ENGINE_STAGE_RING 4096 /* a power of two */

struct engine {
    struct store *st;
    struct meta *m; /* borrowed from st */

    pthread_mutex_t set_mu;         /* serializes engine_dedup_set */
    pthread_rwlock_t settings_lock; /* guards cfg and ix; writer-preferring */
    struct engine_dedup_config cfg; /* as persisted */
    struct index *ix;               /* the active back-end */

    pthread_mutex_t cat_mu;        /* the catalogue below */
    struct engine_xstate *exports; /* sorted by id */
    uint32_t next_id;              /* never reused: persisted */
    char default_name[DEDUPD_EXPORT_NAME_MAX + 1];

    struct engine_counters total;
    engine_hash_fn hash_fn; /* hash_compute, or a test's override */
    /* hash_compute2 (two chunks of one size at once), or NULL while a test overrides hash_fn */
    int (*hash2_fn)(enum dedupd_hash_alg alg, const void *a, const void *b, size_t len,
                    uint8_t out_a[DEDUPD_HASH_MAX_LEN], uint8_t out_b[DEDUPD_HASH_MAX_LEN]);
    struct engine_hashpool *hp;   /* helper threads for hashing large requests */
    struct engine_vcache *vcache; /* bytes of chunks verify read back (vcache.c) */
    _Atomic uint32_t hashing;     /* write requests in their hashing step now */

    /* Hash entries staged by write transactions (the first 8 bytes of each hash), so that
     * a request can look its hashes up BEFORE taking the commit lock and, inside it,
     * re-check only those staged since (write.c). stage_ring and stage_seq change under
     * the store's commit lock only; stage_done is stage_seq at the start of the latest
     * write transaction: every entry staged before it has been committed (or dropped). */
    uint64_t stage_ring[ENGINE_STAGE_RING];
    uint64_t stage_seq;
    _Atomic uint64_t stage_done;

    struct engine_commitq commitq; /* write requests ready for their transaction (write.c) */
};

/* hashpool.c: fn(arg, i) for every i in [0, n) on this thread and the pool's helpers;
 * returns when all ran. hp NULL (one core) runs them inline. */
struct engine_hashpool;
int engine__hashpool_start(struct engine_hashpool **out);
void engine__hashpool_stop(struct engine_hashpool *hp);
void engine__hashpool_run(struct engine_hashpool *hp, uint32_t n, void (*fn)(void *arg, uint32_t i),
                          void *arg);

/* vcache.c: the bytes of recently verified chunks of VCACHE_CHUNK_BYTES, by chunk id.
 * compare: 1 when id is cached and its bytes equal data, 0 when they differ, -ENOENT when
 * not cached (or not of that size). put: remembers bytes the store read back (CRC-checked)
 * for id. Any thread. */
#define VCACHE_CHUNK_BYTES DEDUPD_CHUNK_MIN
struct engine_vcache;
int engine__vcache_create(struct engine_vcache **out);
void engine__vcache_destroy(struct engine_vcache *vc);
int engine__vcache_compare(struct engine_vcache *vc, uint64_t id, const void *data, size_t len);
void engine__vcache_put(struct engine_vcache *vc, uint64_t id, const void *stored, size_t len);

/* settings.c */
int engine__settings_load(struct engine *e);
void engine__settings_fini(struct engine *e);

/* catalog.c */
int engine__catalog_load(struct engine *e, const struct engine_options *opt);
void engine__catalog_fini(struct engine *e);

/* write.c: writes [off, off+len) of xs from buf (NULL: zeros) in one store transaction;
 * the caller holds the chunks' range lock exclusively and len spans at most
 * ENGINE_MAX_REQ_CHUNKS chunks. count_zero: add the bytes that end in unmapped (all-zero)
 * chunks to zero_bytes. */
#define ENGINE_MAX_REQ_CHUNKS ((DEDUPD_NBD_MAX_PAYLOAD / DEDUPD_CHUNK_MIN) + 1)
int engine__write_locked(struct engine *e, struct engine_xstate *xs, uint64_t off, uint64_t len,
                         const uint8_t *buf, bool count_zero);
/* write.c: runs the WRITE requests of one engine_submit_writes job and sets each one's
 * result: those whose chunks it can lock at once are prepared and committed together, the
 * rest (and any the batch path does not take) go through engine_write afterwards. */
void engine__write_batch(struct engine_req **reqs, size_t n);
/* write.c: the commit queue's engine_commit_fn for write requests (arg unused). */
void engine__commit_writes(void *arg, struct engine_commitq_item **items, size_t n);
/* Whether [off, off+len) lies inside the export. */
static inline bool
engine__range_ok(const struct engine_xstate *xs, uint64_t off, uint64_t len)
{
    return off <= xs->rec.size && len <= xs->rec.size - off;
}

/* zero.c: unmaps every mapped chunk in [first, first+count) in transactions of bounded
 * size; the caller holds the range lock (or the export is unreachable). */
int engine__unmap_range(struct engine *e, struct engine_xstate *xs, uint64_t first, uint64_t count);

/* stats.c: cumulative counters saved under ENGINE_COUNTERS_KEY (totals) and
 * ENGINE_COUNTERS_KEY "." + export id (4 bytes, big-endian) in the `meta` CF. */
#define ENGINE_COUNTERS_KEY     "engine.counters"
#define ENGINE_COUNTERS_KEY_MAX (sizeof(ENGINE_COUNTERS_KEY) - 1 + 5)
size_t engine__counters_key(uint8_t out[ENGINE_COUNTERS_KEY_MAX], const struct engine_xstate *xs);
void engine__counters_load(struct engine *e);
/* Writes them (not synced: the caller's store_sync makes them durable). 0 or -errno. */
int engine__counters_save(struct engine *e);

/* The store's freed callback: drops index entries of freed chunks. arg: struct
 * engine_freed_ctx. The caller holds settings_lock (read). */
struct engine_freed_ctx {
    struct index *ix;
    struct index_batch *ib;
};
void engine__on_freed(void *arg, const struct store_chunk_info *freed);

#endif
