/* A seeded write workload over one export and a model of what must survive, shared by the
 * crash and power-cut tests. The model holds, per block, the content seed as of the last
 * completed sync, and every seed written after it (any of which may legitimately survive a
 * crash, as may the synced one). Seed 0 means unmapped. */
#ifndef DD_TEST_STORE_WORKLOAD_H
#define DD_TEST_STORE_WORKLOAD_H

#include "helpers.h"

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

/* One transaction of 1-6 block writes (some sharing one chunk, some unmapping); each
 * change is reported to note() BEFORE the commit, since a commit may survive a crash even
 * if the process dies before it could tell anyone. Returns the commit's result. */
static inline int
wl_txn(struct store *st, uint64_t *rng, uint64_t *next_seed,
       void (*note)(void *arg, unsigned blk, uint64_t seed), void *arg)
{
    struct store_txn *tx;
    int rc = store_txn_begin(st, &tx);
    if (rc)
        return rc;
    unsigned n = 1 + (unsigned) (wl_rand(rng) % 6);
    uint64_t last_id = 0, last_seed = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        unsigned blk = (unsigned) (wl_rand(rng) % WL_BLOCKS);
        unsigned kind = (unsigned) (wl_rand(rng) % 8);
        uint64_t seed, id;
        if (kind == 0) {
            seed = 0, id = 0; /* trim */
        } else if (kind == 1 && last_id) {
            seed = last_seed, id = last_id; /* same bytes, shared chunk */
        } else {
            seed = (*next_seed)++;
            uint8_t buf[4096], h[DEDUPD_HASH_MAX_LEN];
            fill(buf, sizeof(buf), seed);
            hash_compute(DEDUPD_HASH_SHA256, buf, sizeof(buf), h);
            rc = store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 32, buf, sizeof(buf), &id);
            if (rc)
                break;
            last_id = id, last_seed = seed;
        }
        rc = store_txn_map_set(tx, 1, blk, id);
        if (rc == 0)
            note(arg, blk, seed);
    }
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
