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
 * Memory: ~56 MiB for both tables, mapped zeroed so the kernel backs only the (2 MiB) pages
 * used; a look-up makes the first touch of a page a write (first_touch).
 * Knows nothing of exports or hashing beyond the map key. */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define LOC_BITS    19
#define LOC_BUCKETS (1u << LOC_BITS)
#define LOC_STRIPES 256 /* mutexes per table: a run of buckets takes one (stripe_of) */

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

#define LOC_PAGE        4096u
#define LOC_MAP_PAGES   ((LOC_BUCKETS * sizeof(struct map_bucket) + LOC_PAGE - 1) / LOC_PAGE)
#define LOC_CHUNK_PAGES ((LOC_BUCKETS * 2 * sizeof(struct chunk_slot) + LOC_PAGE - 1) / LOC_PAGE)

struct loc_mapping {
    void *base; /* as mmap returned it, NULL if none */
    size_t len;
};

struct store_loccache {
    struct map_bucket *map;
    struct chunk_slot (*chunk)[2];
    struct loc_mapping map_mapping, chunk_mapping;
    /* Pages of each table first_touch wrote (+1: room for a table not page-aligned). */
    uint8_t map_touched[(LOC_MAP_PAGES + 1 + 7) / 8];
    uint8_t chunk_touched[(LOC_CHUNK_PAGES + 1 + 7) / 8];
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

/* The mutex of bucket i: one per run of LOC_RUN buckets, so that a look-up of consecutive
 * keys (a sequential read's chunks) takes it once per run instead of once per key. */
static inline uint32_t
stripe_of(uint32_t i)
{
    return (i >> LOC_RUN_BITS) % LOC_STRIPES;
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

#define LOC_HUGE ((size_t) 2 << 20)

/* A table in a mapping of its own, aligned to and asking for 2 MiB pages: with 4 KiB pages
 * nearly every probe of ~56 MiB of tables, looked up at random by every read and commit,
 * was also a TLB miss (a sequential read's profile stalled on the page walk of the prefetch
 * of each run's first bucket). Zeroed like calloc's; untouched 2 MiB ranges stay unbacked.
 * If the kernel gives no huge pages, the advice is simply not taken. */
static void *
table_alloc(size_t bytes, struct loc_mapping *m)
{
    m->len = bytes + LOC_HUGE;
    m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        return NULL;
    }
    uintptr_t a = ((uintptr_t) m->base + LOC_HUGE - 1) & ~(uintptr_t) (LOC_HUGE - 1);
    (void) madvise((void *) a, (bytes + LOC_HUGE - 1) & ~(LOC_HUGE - 1), MADV_HUGEPAGE);
    return (void *) a;
}

static void
table_free(struct loc_mapping *m)
{
    if (m->base)
        munmap(m->base, m->len);
}

int
store__loc_init(struct store *st)
{
    struct store_loccache *lc = calloc(1, sizeof(*lc));
    if (!lc)
        return -ENOMEM;
    lc->map = table_alloc(LOC_BUCKETS * sizeof(*lc->map), &lc->map_mapping);
    lc->chunk = table_alloc(LOC_BUCKETS * sizeof(*lc->chunk), &lc->chunk_mapping);
    if (!lc->map || !lc->chunk) {
        table_free(&lc->map_mapping);
        table_free(&lc->chunk_mapping);
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
    table_free(&lc->map_mapping);
    table_free(&lc->chunk_mapping);
    free(lc);
    st->loc = NULL;
}

/* Sets page's bit in touched; false if it was set already. */
static inline bool
mark_page(uint8_t *touched, size_t page)
{
    uint8_t bit = (uint8_t) (1u << (page % 8));
    if (__atomic_load_n(&touched[page / 8], __ATOMIC_RELAXED) & bit)
        return false;
    __atomic_fetch_or(&touched[page / 8], bit, __ATOMIC_RELAXED);
    return true;
}

/* Called before reading a bucket, with its stripe mutex held; first and last are its first
 * and last words. The tables are fresh mappings, so their pages start untouched; a look-up that
 * reads one first maps the kernel's zero page, and the store that follows faults again,
 * copies it and shoots down the other cores' TLB entries. Measured here with a second
 * thread running: 12.9 us a page read first, 1.4-2.2 us a page written first — ~13k pages,
 * 2-4% of the CPU of a fresh server's first 2 GiB written. So the first access to each
 * page (a bucket may straddle two) is an atomic add of zero, a write to the CPU, to a word
 * the mutex guards; the bitmap keeps it to once a page. */
static inline void
first_touch(uint8_t *touched, const void *base, uint64_t *first, uint32_t *last)
{
    uintptr_t base_page = (uintptr_t) base / LOC_PAGE;
    size_t p0 = (uintptr_t) first / LOC_PAGE - base_page;
    size_t p1 = (uintptr_t) last / LOC_PAGE - base_page;
    if (mark_page(touched, p0))
        __atomic_fetch_add(first, 0, __ATOMIC_RELAXED);
    if (p1 != p0 && mark_page(touched, p1))
        __atomic_fetch_add(last, 0, __ATOMIC_RELAXED);
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

/* Look-up in bucket i, whose stripe mutex the caller holds. */
static bool
map_get_locked(struct store_loccache *lc, uint32_t i, uint32_t export_id, uint64_t idx,
               uint64_t *chunk_id, uint32_t *gen)
{
    struct map_bucket *b = &lc->map[i];
    first_touch(lc->map_touched, lc->map, &b->way[0].chunk_idx, &b->gen);
    int w = map_way(b, export_id, idx);
    if (w >= 0)
        *chunk_id = b->way[w].chunk_id;
    *gen = b->gen;
    return w >= 0;
}

bool
store__loc_map_get(struct store *st, uint32_t export_id, uint64_t idx, uint64_t *chunk_id,
                   uint32_t *gen)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = map_index(export_id, idx);
    pthread_mutex_t *mu = &lc->map_mu[stripe_of(i)];
    pthread_mutex_lock(mu);
    bool hit = map_get_locked(lc, i, export_id, idx, chunk_id, gen);
    pthread_mutex_unlock(mu);
    return hit;
}

/* Moves the held stripe mutex from *held (NULL: none) to mu. */
static inline void
hold_stripe(pthread_mutex_t **held, pthread_mutex_t *mu)
{
    if (*held == mu)
        return;
    if (*held)
        pthread_mutex_unlock(*held);
    pthread_mutex_lock(mu);
    *held = mu;
}

/* How far ahead the batched look-ups prefetch: a run's first bucket is a cache miss (the
 * tables are tens of MiB), the hardware prefetcher covers the rest of the run. */
#define LOC_PREFETCH_KEYS LOC_RUN_MASK

uint64_t
store__loc_map_get_many(struct store *st, uint32_t export_id, uint64_t first, uint64_t n,
                        uint64_t *chunk_ids, uint32_t *gens, bool *hit)
{
    struct store_loccache *lc = st->loc;
    pthread_mutex_t *held = NULL;
    uint64_t hits = 0;
    for (uint64_t k = 0; k < n; k++) {
        if (k + LOC_PREFETCH_KEYS < n)
            __builtin_prefetch(&lc->map[map_index(export_id, first + k + LOC_PREFETCH_KEYS)]);
        uint32_t i = map_index(export_id, first + k);
        hold_stripe(&held, &lc->map_mu[stripe_of(i)]);
        hit[k] = map_get_locked(lc, i, export_id, first + k, &chunk_ids[k], &gens[k]);
        hits += hit[k];
    }
    if (held)
        pthread_mutex_unlock(held);
    return hits;
}

void
store__loc_map_fill(struct store *st, uint32_t export_id, uint64_t idx, uint64_t chunk_id,
                    uint32_t gen)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = map_index(export_id, idx);
    pthread_mutex_t *mu = &lc->map_mu[stripe_of(i)];
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
    pthread_mutex_t *mu = &lc->map_mu[stripe_of(i)];
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
        pthread_mutex_t *mu = &lc->map_mu[stripe_of(i)];
        pthread_mutex_lock(mu);
        /* Empty, and a new generation: fills begun before this are refused. */
        lc->map[i].way[0].valid = lc->map[i].way[1].valid = false;
        lc->map[i].gen++;
        pthread_mutex_unlock(mu);
        mu = &lc->chunk_mu[stripe_of(i)];
        pthread_mutex_lock(mu);
        lc->chunk[i][0].id = lc->chunk[i][1].id = 0;
        pthread_mutex_unlock(mu);
    }
}

/* Look-up in bucket i, whose stripe mutex the caller holds. */
static bool
chunk_get_locked(struct store_loccache *lc, uint32_t i, uint64_t id, struct store_loc *out)
{
    first_touch(lc->chunk_touched, lc->chunk, &lc->chunk[i][0].id, &lc->chunk[i][1].len);
    for (int w = 0; w < 2 && id; w++) {
        const struct chunk_slot *s = &lc->chunk[i][w];
        if (s->id == id) {
            *out = (struct store_loc){.seg = s->seg, .off = s->off, .len = s->len};
            return true;
        }
    }
    return false;
}

bool
store__loc_chunk_get(struct store *st, uint64_t id, struct store_loc *out)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    pthread_mutex_t *mu = &lc->chunk_mu[stripe_of(i)];
    pthread_mutex_lock(mu);
    bool hit = chunk_get_locked(lc, i, id, out);
    pthread_mutex_unlock(mu);
    return hit;
}

uint64_t
store__loc_chunk_get_many(struct store *st, const uint64_t *ids, uint64_t n, struct store_loc *out,
                          bool *hit)
{
    struct store_loccache *lc = st->loc;
    pthread_mutex_t *held = NULL;
    uint64_t hits = 0;
    for (uint64_t k = 0; k < n; k++) {
        hit[k] = false;
        if (k + LOC_PREFETCH_KEYS < n && ids[k + LOC_PREFETCH_KEYS])
            __builtin_prefetch(&lc->chunk[chunk_index(ids[k + LOC_PREFETCH_KEYS])]);
        if (!ids[k])
            continue;
        uint32_t i = chunk_index(ids[k]);
        hold_stripe(&held, &lc->chunk_mu[stripe_of(i)]);
        hit[k] = chunk_get_locked(lc, i, ids[k], &out[k]);
        hits += hit[k];
    }
    if (held)
        pthread_mutex_unlock(held);
    return hits;
}

void
store__loc_chunk_put(struct store *st, uint64_t id, const struct store_loc *loc)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    struct chunk_slot *b = lc->chunk[i];
    pthread_mutex_t *mu = &lc->chunk_mu[stripe_of(i)];
    pthread_mutex_lock(mu);
    /* Its own slot, else an empty one, else the older chunk's (lower id: written earlier). */
    int w = b[0].id == id || b[0].id == 0   ? 0
            : b[1].id == id || b[1].id == 0 ? 1
                                            : b[0].id > b[1].id;
    b[w] = (struct chunk_slot){.id = id, .off = loc->off, .seg = loc->seg, .len = loc->len};
    pthread_mutex_unlock(mu);
}

/* The slots that hold id get loc, or are emptied (loc NULL); other ids are left alone. */
static void
chunk_rewrite(struct store *st, uint64_t id, const struct store_loc *loc)
{
    struct store_loccache *lc = st->loc;
    uint32_t i = chunk_index(id);
    pthread_mutex_t *mu = &lc->chunk_mu[stripe_of(i)];
    pthread_mutex_lock(mu);
    struct chunk_slot now = {0};
    if (loc)
        now = (struct chunk_slot){.id = id, .off = loc->off, .seg = loc->seg, .len = loc->len};
    for (int w = 0; w < 2; w++)
        if (lc->chunk[i][w].id == id)
            lc->chunk[i][w] = now;
    pthread_mutex_unlock(mu);
}

void
store__loc_chunk_moved(struct store *st, uint64_t id, const struct store_loc *loc)
{
    chunk_rewrite(st, id, loc);
}

void
store__loc_chunk_drop(struct store *st, uint64_t id)
{
    chunk_rewrite(st, id, NULL);
}
