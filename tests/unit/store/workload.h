/* A seeded write workload over one export and a model of what must survive, shared by the
 * crash and power-cut tests. The model holds, per block, the content seed as of the last
 * completed sync, and every seed written after it (any of which may legitimately survive a
 * crash, as may the synced one). Seed 0 means unmapped. */
#ifndef DD_TEST_STORE_WORKLOAD_H
#define DD_TEST_STORE_WORKLOAD_H

#include "helpers.h"
#include "util/crc32c.h"

#define WL_BLOCKS   48
#define WL_MAX_POST 64

struct wl_block {
    uint64_t synced;            /* seed as of the last sync (0: unmapped) */
    uint64_t post[WL_MAX_POST]; /* seeds written since, in order */
    unsigned npost;
    bool overflow; /* more than WL_MAX_POST writes since the sync */
};

struct wl_model {
    struct wl_block b[WL_BLOCKS];
};

static inline uint64_t
wl_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline void
wl_note_write(struct wl_model *m, unsigned blk, uint64_t seed)
{
    struct wl_block *b = &m->b[blk];
    if (b->npost < WL_MAX_POST)
        b->post[b->npost++] = seed;
    else
        b->overflow = true;
}

static inline void
wl_note_sync(struct wl_model *m)
{
    for (unsigned i = 0; i < WL_BLOCKS; i++) {
        struct wl_block *b = &m->b[i];
        if (b->npost)
            b->synced = b->post[b->npost - 1];
        b->npost = 0;
        b->overflow = false;
    }
}

/* Describes new chunk content fill(seed) in buf/h for store_append_early. */
static inline struct store_new_chunk
wl_new_chunk(uint8_t buf[4096], uint8_t h[DEDUPD_HASH_MAX_LEN], uint64_t seed)
{
    fill(buf, 4096, seed);
    hash_compute(DEDUPD_HASH_SHA256, buf, 4096, h);
    return (struct store_new_chunk){.buf = buf,
                                    .len = 4096,
                                    .crc = crc32c(0, buf, 4096),
                                    .hash_alg = DEDUPD_HASH_SHA256,
                                    .hash_len = 32,
                                    .hash = h};
}

/* Chunks made by earlier transactions of this process, to be referenced again (so that
 * refcounts of existing chunks go up as well as down, through the store's refcount
 * journal). One may be freed since: wl_ops asks the store first. */
struct wl_recent {
    uint64_t id, seed;
};
static struct wl_recent wl_recent[16];

/* 1-6 block writes in the open transaction tx (some sharing one chunk, some referencing a
 * chunk of an earlier transaction, some unmapping), each reported to note() before the
 * commit. */
static inline int
wl_ops(struct store_txn *tx, uint64_t *rng, uint64_t *next_seed,
       void (*note)(void *arg, unsigned blk, uint64_t seed), void *arg)
{
    int rc = 0;
    unsigned n = 1 + (unsigned) (wl_rand(rng) % 6);
    uint64_t last_id = 0, last_seed = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        unsigned blk = (unsigned) (wl_rand(rng) % WL_BLOCKS);
        unsigned kind = (unsigned) (wl_rand(rng) % 8);
        struct wl_recent *old = &wl_recent[wl_rand(rng) % 16];
        struct store_chunk_info ci;
        uint64_t seed, id;
        if (kind == 0) {
            seed = 0, id = 0; /* trim */
        } else if (kind == 1 && last_id) {
            seed = last_seed, id = last_id; /* same bytes, shared chunk */
        } else if (kind == 2 && old->id && store_txn_chunk_get(tx, old->id, &ci) == 0) {
            seed = old->seed, id = old->id; /* same bytes as an earlier transaction's */
        } else {
            seed = (*next_seed)++;
            uint8_t buf[4096], h[DEDUPD_HASH_MAX_LEN];
            fill(buf, sizeof(buf), seed);
            hash_compute(DEDUPD_HASH_SHA256, buf, sizeof(buf), h);
            rc = store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 32, buf, sizeof(buf), &id);
            if (rc)
                break;
            last_id = id, last_seed = seed;
            wl_recent[seed % 16] = (struct wl_recent){id, seed};
        }
        rc = store_txn_map_set(tx, 1, blk, id);
        if (rc == 0)
            note(arg, blk, seed);
    }
    return rc;
}

static inline int
wl_commit_ops(struct store *st, uint64_t *rng, uint64_t *next_seed,
              void (*note)(void *arg, unsigned blk, uint64_t seed), void *arg)
{
    struct store_txn *tx;
    int rc = store_txn_begin(st, &tx);
    if (rc == 0 && (rc = wl_ops(tx, rng, next_seed, note, arg)) != 0)
        store_txn_abort(tx);
    else if (rc == 0)
        rc = store_txn_commit(tx, NULL, NULL);
    return rc;
}

/* One write transaction as wl_ops makes them. One time in three, 1-3 new chunks are first
 * appended early (as the engine does): half the time another transaction commits between
 * the append and the transaction that takes them (its commit persists a segment size past
 * them), and the transaction maps three in four of them and drops the rest. Each change is
 * reported to note() BEFORE the commit, since a commit may survive a crash even if the
 * process dies before it could tell anyone. Returns the last commit's result. */
static inline int
wl_txn(struct store *st, uint64_t *rng, uint64_t *next_seed,
       void (*note)(void *arg, unsigned blk, uint64_t seed), void *arg)
{
    uint8_t buf[3][4096], h[3][DEDUPD_HASH_MAX_LEN];
    struct store_new_chunk nc[3];
    uint64_t seeds[3];
    unsigned ne = 0;
    int rc = 0;
    if (wl_rand(rng) % 3 == 0) {
        ne = 1 + (unsigned) (wl_rand(rng) % 3);
        for (unsigned i = 0; i < ne; i++) {
            seeds[i] = (*next_seed)++;
            nc[i] = wl_new_chunk(buf[i], h[i], seeds[i]);
        }
        rc = store_append_early(st, nc, ne);
        if (rc == 0 && wl_rand(rng) % 2)
            rc = wl_commit_ops(st, rng, next_seed, note, arg);
        if (rc)
            return rc;
    }
    struct store_txn *tx;
    rc = store_txn_begin(st, &tx);
    if (rc)
        return rc;
    for (unsigned i = 0; i < ne && rc == 0; i++) {
        unsigned blk = (unsigned) (wl_rand(rng) % WL_BLOCKS);
        if (wl_rand(rng) % 4 == 0) {
            rc = store_txn_drop_early(tx, &nc[i]);
            continue;
        }
        rc = store_txn_add_early(tx, &nc[i]);
        if (rc == 0)
            rc = store_txn_map_set(tx, 1, blk, nc[i].id);
        if (rc == 0)
            note(arg, blk, seeds[i]);
    }
    if (rc == 0)
        rc = wl_ops(tx, rng, next_seed, note, arg);
    if (rc) {
        store_txn_abort(tx);
        return rc;
    }
    return store_txn_commit(tx, NULL, NULL);
}

/* Checks every block against the model; allow_zero: a block written since the sync may
 * also read as unmapped. Returns the seed each block now holds in now[]. */
static inline void
wl_verify(struct store *st, const struct wl_model *m, bool allow_zero, uint64_t now[WL_BLOCKS])
{
    uint8_t buf[4096], want[4096];
    for (unsigned i = 0; i < WL_BLOCKS; i++) {
        const struct wl_block *b = &m->b[i];
        uint64_t id;
        int rc = store_map_get(st, 1, i, &id);
        cr_assert(rc == 0 || rc == -ENOENT, "block %u: map_get %d", i, rc);
        uint64_t got = (uint64_t) -1;
        if (rc == -ENOENT) {
            got = 0;
        } else {
            cr_assert_eq(store_chunk_read(st, id, buf, sizeof(buf)), 4096,
                         "block %u chunk %lu unreadable", i, (unsigned long) id);
            if (b->synced) {
                fill(want, sizeof(want), b->synced);
                if (memcmp(buf, want, sizeof(buf)) == 0)
                    got = b->synced;
            }
            for (unsigned j = 0; j < b->npost && got == (uint64_t) -1; j++) {
                if (!b->post[j])
                    continue;
                fill(want, sizeof(want), b->post[j]);
                if (memcmp(buf, want, sizeof(buf)) == 0)
                    got = b->post[j];
            }
        }
        bool ok = got == b->synced;
        for (unsigned j = 0; j < b->npost && !ok; j++)
            ok = got == b->post[j];
        if (!ok && b->npost && (allow_zero || b->overflow) && got == 0)
            ok = true;
        cr_assert(ok, "block %u: holds %s (synced seed %lu, %u writes since)", i,
                  got == (uint64_t) -1 ? "unknown bytes"
                  : got                ? "a seed"
                                       : "nothing",
                  (unsigned long) b->synced, b->npost);
        now[i] = got;
    }
}

#endif
