/* loccache.c: the location cache — where a read finds its bytes without asking RocksDB.
 * Two direct-mapped tables: block map entries ((export, chunk index) -> chunk id, 0 for a
 * known hole) and chunk locations (chunk id -> segment, offset, length). A random 4 KiB
 * read used to cost two RocksDB point reads, each a skip-list search of a memtable of up
 * to a million random keys (the largest share of a read's CPU in profiles); a slot costs a
 * hash and an uncontended mutex.
 *
 * Why a stale entry can never give wrong bytes:
 *   - map slots are set by the commit that changes the entry, after its batch is applied
 *     and under the commit lock; a reader that missed fills its slot only if no commit
 *     touched the slot since before its own RocksDB read (the slot's generation), so it
 *     cannot put back a value a commit has replaced;
 *   - chunk locations only move (compaction) or die (free); a stale one is caught by the
 *     record itself: its header names the chunk id (ids are never reused) and its CRC
 *     covers the bytes, and a segment compacted away is simply gone, so the reader drops
 *     the slot and asks RocksDB.
 * Each table is 2-way set-associative: 2^LOC_BITS buckets of two slots (a direct-mapped
 * table half full of a 2 GiB export's entries lost a fifth of them to collisions).
 * Memory: ~56 MiB for both tables, allocated zeroed so the kernel backs only the pages used.
 * Knows nothing of exports or hashing beyond the map key. */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>

#define LOC_BITS    19
#define LOC_BUCKETS (1u << LOC_BITS)
#define LOC_STRIPES 256 /* mutexes per table: bucket i takes stripe i % LOC_STRIPES */

struct map_slot {
    uint64_t chunk_idx;
    uint64_t chunk_id; /* 0: known unmapped */
    uint32_t export_id;
    bool valid;
};

struct map_bucket {
    struct map_slot way[2];
    uint32_t gen;   /* changes made by commits (and clears) to this bucket */
    uint8_t victim; /* the way a new key replaces when both are taken */
};

struct chunk_slot {
    uint64_t id; /* 0: empty */
    uint64_t off;
    uint32_t seg;
    uint32_t len;
};

struct store_loccache {
    struct map_bucket *map;
    struct chunk_slot (*chunk)[2];
    pthread_mutex_t map_mu[LOC_STRIPES];
    pthread_mutex_t chunk_mu[LOC_STRIPES];
};

static inline uint32_t
mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ULL;
    x ^= x >> 29;
    return (uint32_t) (x >> 32) & (LOC_BUCKETS - 1);
}

/* Keys that follow each other (chunk index i and i+1 of an export, chunk id n and n+1)
 * share one random placement, LOC_RUN at a time, in adjacent buckets: a sequential read
 * of 64 chunks probes a few runs of neighbouring cache lines on one or two pages instead
 * of 64 random lines, each a cache miss and most a TLB miss in tables of ~56 MiB. The
 * runs themselves are spread by the hash, so collisions stay those of a random table. */
#define LOC_RUN_BITS 4
#define LOC_RUN_MASK ((1u << LOC_RUN_BITS) - 1)

static inline uint32_t
bucket_of(uint64_t key, uint64_t salt)
{
    return (mix((key >> LOC_RUN_BITS) ^ salt) & ~LOC_RUN_MASK) | (uint32_t) (key & LOC_RUN_MASK);
}

static inline uint32_t
map_index(uint32_t export_id, uint64_t idx)
{
    return bucket_of(idx, ((uint64_t) export_id << 40) ^ export_id);
}

static inline uint32_t
chunk_index(uint64_t id)
{
    return bucket_of(id, 0);
}

int
store__loc_init(struct store *st)
{
    struct store_loccache *lc = calloc(1, sizeof(*lc));
    if (!lc)
        return -ENOMEM;
    lc->map = calloc(LOC_BUCKETS, sizeof(*lc->map));
    lc->chunk = calloc(LOC_BUCKETS, sizeof(*lc->chunk));
    if (!lc->map || !lc->chunk) {
        free(lc->map);
        free(lc->chunk);
        free(lc);
        return -ENOMEM;
    }
    for (int i = 0; i < LOC_STRIPES; i++) {
        pthread_mutex_init(&lc->map_mu[i], NULL);
        pthread_mutex_init(&lc->chunk_mu[i], NULL);
    }
    st->loc = lc;
    return 0;
}

void
store__loc_fini(struct store *st)
{
    struct store_loccache *lc = st->loc;
    if (!lc)
        return;
    for (int i = 0; i < LOC_STRIPES; i++) {
        pthread_mutex_destroy(&lc->map_mu[i]);
        pthread_mutex_destroy(&lc->chunk_mu[i]);
    }
    free(lc->map);
    free(lc->chunk);
    free(lc);
    st->loc = NULL;
}

/* The way of b holding the key, or -1. */
static int
map_way(const struct map_bucket *b, uint32_t export_id, uint64_t idx)
{
    for (int w = 0; w < 2; w++)
        if (b->way[w].valid && b->way[w].export_id == export_id && b->way[w].chunk_idx == idx)
            return w;
    return -1;
}

/* Puts the key into b: its own way, else an empty one, else the victim. */
static void
map_store(struct map_bucket *b, uint32_t export_id, uint64_t idx, uint64_t chunk_id)
{
    int w = map_way(b, export_id, idx);
    if (w < 0) {
        w = !b->way[0].valid ? 0 : !b->way[1].valid ? 1 : b->victim;
        b->victim = (uint8_t) !w;
    }
    b->way[w] = (struct map_slot){
        .chunk_idx = idx, .chunk_id = chunk_id, .export_id = export_id, .valid = true};
}

bool
store__loc_map_get(struct store *st, uint32_t export_id, uint64_t idx, uint64_t *chunk_id,
                   uint32_t *gen)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = map_index(export_id, idx);
    struct map_bucket *b = &lc->map[i];
    pthread_mutex_t *mu = &lc->map_mu[i % LOC_STRIPES];
    pthread_mutex_lock(mu);
    int w = map_way(b, export_id, idx);
    if (w >= 0)
        *chunk_id = b->way[w].chunk_id;
    *gen = b->gen;
    pthread_mutex_unlock(mu);
    return w >= 0;
}

void
store__loc_map_fill(struct store *st, uint32_t export_id, uint64_t idx, uint64_t chunk_id,
                    uint32_t gen)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = map_index(export_id, idx);
    pthread_mutex_t *mu = &lc->map_mu[i % LOC_STRIPES];
    pthread_mutex_lock(mu);
    if (lc->map[i].gen == gen) /* no commit changed the bucket since the caller's read began */
        map_store(&lc->map[i], export_id, idx, chunk_id);
    pthread_mutex_unlock(mu);
}

void
store__loc_map_set(struct store *st, uint32_t export_id, uint64_t idx, uint64_t chunk_id)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = map_index(export_id, idx);
    pthread_mutex_t *mu = &lc->map_mu[i % LOC_STRIPES];
    pthread_mutex_lock(mu);
    map_store(&lc->map[i], export_id, idx, chunk_id);
    lc->map[i].gen++;
    pthread_mutex_unlock(mu);
}

void
store__loc_clear(struct store *st)
{
    struct store_loccache *lc = st->loc;
    if (!lc)
        return;
    for (uint32_t i = 0; i < LOC_BUCKETS; i++) {
        pthread_mutex_t *mu = &lc->map_mu[i % LOC_STRIPES];
        pthread_mutex_lock(mu);
        /* Empty, and a new generation: fills begun before this are refused. */
        lc->map[i].way[0].valid = lc->map[i].way[1].valid = false;
        lc->map[i].gen++;
        pthread_mutex_unlock(mu);
        mu = &lc->chunk_mu[i % LOC_STRIPES];
        pthread_mutex_lock(mu);
        lc->chunk[i][0].id = lc->chunk[i][1].id = 0;
        pthread_mutex_unlock(mu);
    }
}

bool
store__loc_chunk_get(struct store *st, uint64_t id, struct store_loc *out)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    pthread_mutex_t *mu = &lc->chunk_mu[i % LOC_STRIPES];
    bool hit = false;
    pthread_mutex_lock(mu);
    for (int w = 0; w < 2 && id && !hit; w++) {
        const struct chunk_slot *s = &lc->chunk[i][w];
        if ((hit = s->id == id))
            *out = (struct store_loc){.seg = s->seg, .off = s->off, .len = s->len};
    }
    pthread_mutex_unlock(mu);
    return hit;
}

void
store__loc_chunk_put(struct store *st, uint64_t id, const struct store_loc *loc)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    struct chunk_slot *b = lc->chunk[i];
    pthread_mutex_t *mu = &lc->chunk_mu[i % LOC_STRIPES];
    pthread_mutex_lock(mu);
    /* Its own slot, else an empty one, else the older chunk's (lower id: written earlier). */
    int w = b[0].id == id || b[0].id == 0   ? 0
            : b[1].id == id || b[1].id == 0 ? 1
                                            : b[0].id > b[1].id;
    b[w] = (struct chunk_slot){.id = id, .off = loc->off, .seg = loc->seg, .len = loc->len};
    pthread_mutex_unlock(mu);
}

void
store__loc_chunk_drop(struct store *st, uint64_t id)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    pthread_mutex_t *mu = &lc->chunk_mu[i % LOC_STRIPES];
    pthread_mutex_lock(mu);
    for (int w = 0; w < 2; w++)
        if (lc->chunk[i][w].id == id)
            lc->chunk[i][w].id = 0;
    pthread_mutex_unlock(mu);
}
