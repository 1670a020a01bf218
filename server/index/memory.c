/* memory.c: the `memory` hash-index back-end — a bounded table with LRU eviction.
 * Memory use: INDEX_MEMORY_ENTRY_BYTES (40) per entry slot plus 4 bytes per bucket (one
 * bucket per slot, rounded up to a power of two), plus the fixed struct; the arrays grow by
 * doubling up to the limit, so an idle table costs almost nothing. Entries are keyed by
 * (hash alg, the first 16 bytes of the hash), carry the chunk id, and link into a bucket
 * chain and the LRU list by 32-bit slot numbers instead of pointers — 40 bytes, against
 * ~100 for a red-black-tree node holding a full hash.
 * Nothing survives a restart: losing the table loses dedup opportunities, never data.
 * Inserts become visible at index_publish(), i.e. after the store commit (invariant 2);
 * an entry can still go stale if its chunk is freed by a transaction that did not call
 * index_remove, which is why this back-end is not `persistent` and the engine checks a hit
 * against the chunk's recorded hash.
 * Threads: one mutex around the table; every call is short (no I/O). */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "index/internal.h"

#define NIL UINT32_MAX
/* Start small: most exports never need the full window. */
#define INITIAL_SLOTS 1024u
/* Slot numbers are 32-bit; NIL is reserved. */
#define MAX_SLOTS ((uint64_t) UINT32_MAX - 1)

struct ment {
    uint8_t key[INDEX_MEMORY_KEY_BYTES]; /* leading hash bytes (zero-padded if shorter) */
    uint64_t chunk_id;
    uint32_t chain; /* next slot in the bucket chain, or in the free list */
    uint32_t prev;  /* LRU: toward the most recently used */
    uint32_t next;  /* LRU: toward the least recently used */
    uint8_t alg;
};
_Static_assert(sizeof(struct ment) == INDEX_MEMORY_ENTRY_BYTES, "memory index entry size");

struct index_mem {
    struct index base;
    pthread_mutex_t mu; /* guards everything below */
    struct ment *ents;
    uint32_t *buckets; /* heads of the chains, NIL when empty */
    uint64_t cap;      /* slots allocated */
    uint64_t nbuckets; /* power of two (0 before the first insert) */
    uint64_t high;     /* slots [0, high) have been used at least once */
    uint64_t n;        /* live entries */
    uint32_t free_head;
    uint32_t mru, lru;
    uint64_t max_slots; /* from limit_nr and limit_mem */
    uint64_t limit_mem;
    uint64_t evictions;
};

static uint64_t
pow2_ceil(uint64_t v)
{
    uint64_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* Exactly what the table holds allocated with cap slots. */
static uint64_t
bytes_for(uint64_t cap)
{
    if (cap == 0)
        return sizeof(struct index_mem);
    return sizeof(struct index_mem) + cap * sizeof(struct ment) + pow2_ceil(cap) * sizeof(uint32_t);
}

/* Largest slot count within both limits. bytes_for() is monotonic, so bisect. */
static uint64_t
max_slots_for(uint64_t limit_nr, uint64_t limit_mem)
{
    uint64_t hi = limit_nr ? limit_nr : INDEX_MEMORY_DEFAULT_LIMIT_NR;
    if (hi > MAX_SLOTS)
        hi = MAX_SLOTS;
    if (!limit_mem || bytes_for(hi) <= limit_mem)
        return hi;
    uint64_t lo = 0; /* bytes_for(lo) fits or lo == 0 */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (bytes_for(mid) <= limit_mem)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void
make_key(uint8_t key[INDEX_MEMORY_KEY_BYTES], const uint8_t *hash, size_t len)
{
    memset(key, 0, INDEX_MEMORY_KEY_BYTES);
    memcpy(key, hash, len < INDEX_MEMORY_KEY_BYTES ? len : INDEX_MEMORY_KEY_BYTES);
}

static uint64_t
bucket_of(const struct index_mem *t, const uint8_t *key, uint8_t alg)
{
    uint64_t h;
    memcpy(&h, key, sizeof(h)); /* hash output: already uniform */
    h ^= alg;
    h *= 0x9E3779B97F4A7C15ULL;
    h ^= h >> 32;
    return h & (t->nbuckets - 1);
}

/* Slot of the entry for (key, alg) or NIL; *pred is its predecessor in the chain (or NIL). */
static uint32_t
find(const struct index_mem *t, const uint8_t *key, uint8_t alg, uint32_t *pred)
{
    *pred = NIL;
    if (!t->nbuckets)
        return NIL;
    for (uint32_t i = t->buckets[bucket_of(t, key, alg)]; i != NIL; i = t->ents[i].chain) {
        if (t->ents[i].alg == alg && !memcmp(t->ents[i].key, key, INDEX_MEMORY_KEY_BYTES))
            return i;
        *pred = i;
    }
    return NIL;
}

static void
lru_unlink(struct index_mem *t, uint32_t i)
{
    struct ment *e = &t->ents[i];
    if (e->prev != NIL)
        t->ents[e->prev].next = e->next;
    else
        t->mru = e->next;
    if (e->next != NIL)
        t->ents[e->next].prev = e->prev;
    else
        t->lru = e->prev;
}

static void
lru_push_front(struct index_mem *t, uint32_t i)
{
    struct ment *e = &t->ents[i];
    e->prev = NIL;
    e->next = t->mru;
    if (t->mru != NIL)
        t->ents[t->mru].prev = i;
    else
        t->lru = i;
    t->mru = i;
}

static void
chain_push(struct index_mem *t, uint32_t i)
{
    uint64_t b = bucket_of(t, t->ents[i].key, t->ents[i].alg);
    t->ents[i].chain = t->buckets[b];
    t->buckets[b] = i;
}

static void
remove_slot(struct index_mem *t, uint32_t i, uint32_t pred)
{
    struct ment *e = &t->ents[i];
    if (pred == NIL)
        t->buckets[bucket_of(t, e->key, e->alg)] = e->chain;
    else
        t->ents[pred].chain = e->chain;
    lru_unlink(t, i);
    e->chain = t->free_head;
    t->free_head = i;
    t->n--;
}

/* Grows to new_cap slots; rehashes when the bucket array grows. 0 or -ENOMEM (the table
 * is unchanged then). */
static int
grow(struct index_mem *t, uint64_t new_cap)
{
    struct ment *ents = realloc(t->ents, new_cap * sizeof(*ents));
    if (!ents)
        return -ENOMEM;
    t->ents = ents;
    t->cap = new_cap;
    uint64_t nb = pow2_ceil(new_cap);
    if (nb > t->nbuckets) {
        uint32_t *b = malloc(nb * sizeof(*b));
        if (!b)
            return 0; /* keep the old buckets: longer chains, still correct */
        memset(b, 0xff, nb * sizeof(*b));
        free(t->buckets);
        t->buckets = b;
        t->nbuckets = nb;
        for (uint32_t i = t->mru; i != NIL; i = t->ents[i].next)
            chain_push(t, i);
    }
    return 0;
}

/* A free slot, growing or evicting the least recently used entry; NIL if the limits allow
 * no entry at all or memory ran out. */
static uint32_t
take_slot(struct index_mem *t)
{
    if (t->free_head != NIL) {
        uint32_t i = t->free_head;
        t->free_head = t->ents[i].chain;
        return i;
    }
    if (t->high == t->cap && t->cap < t->max_slots) {
        uint64_t c = t->cap ? 2 * t->cap : INITIAL_SLOTS;
        if (c > t->max_slots)
            c = t->max_slots;
        (void) grow(t, c);
    }
    if (t->high < t->cap)
        return (uint32_t) t->high++;
    if (t->lru == NIL)
        return NIL;
    uint32_t victim = t->lru, pred;
    uint32_t found = find(t, t->ents[victim].key, t->ents[victim].alg, &pred);
    assert(found == victim);
    remove_slot(t, found, pred);
    t->evictions++;
    uint32_t i = t->free_head;
    t->free_head = t->ents[i].chain;
    return i;
}

static void
insert_locked(struct index_mem *t, const uint8_t *key, uint8_t alg, uint64_t chunk_id)
{
    uint32_t pred;
    uint32_t i = find(t, key, alg, &pred);
    if (i != NIL) {
        t->ents[i].chunk_id = chunk_id;
        lru_unlink(t, i);
        lru_push_front(t, i);
        return;
    }
    i = take_slot(t);
    if (i == NIL)
        return; /* only the dedup rate suffers */
    struct ment *e = &t->ents[i];
    memcpy(e->key, key, INDEX_MEMORY_KEY_BYTES);
    e->alg = alg;
    e->chunk_id = chunk_id;
    chain_push(t, i);
    lru_push_front(t, i);
    t->n++;
}

static int
mem_open(struct meta *m, const struct index_limits *lim, struct index **out)
{
    (void) m;
    struct index_mem *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->base.ops = &index__memory_ops;
    pthread_mutex_init(&t->mu, NULL);
    t->free_head = t->mru = t->lru = NIL;
    t->limit_mem = lim->limit_mem;
    t->max_slots = max_slots_for(lim->limit_nr, lim->limit_mem);
    *out = &t->base;
    return 0;
}

static void
mem_close(struct index *ix)
{
    struct index_mem *t = (struct index_mem *) ix;
    pthread_mutex_destroy(&t->mu);
    free(t->ents);
    free(t->buckets);
    free(t);
}

static int
mem_lookup(struct index *ix, uint8_t alg, const uint8_t *hash, size_t len, uint64_t *chunk_id)
{
    struct index_mem *t = (struct index_mem *) ix;
    uint8_t key[INDEX_MEMORY_KEY_BYTES];
    make_key(key, hash, len);
    pthread_mutex_lock(&t->mu);
    uint32_t pred;
    uint32_t i = find(t, key, alg, &pred);
    if (i != NIL) {
        *chunk_id = t->ents[i].chunk_id;
        lru_unlink(t, i);
        lru_push_front(t, i);
    }
    pthread_mutex_unlock(&t->mu);
    return i == NIL ? -ENOENT : 0;
}

static int
mem_stage(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
          uint64_t chunk_id)
{
    (void) ix;
    return index__batch_push(b, alg, hash, len, chunk_id);
}

static void
mem_publish(struct index *ix, struct index_batch *b)
{
    struct index_mem *t = (struct index_mem *) ix;
    pthread_mutex_lock(&t->mu);
    for (size_t k = 0; k < b->n; k++)
        insert_locked(t, b->staged[k].key, b->staged[k].alg, b->staged[k].chunk_id);
    pthread_mutex_unlock(&t->mu);
}

static void
mem_remove(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
           uint64_t chunk_id)
{
    /* At once, before the freeing batch is written: if that commit fails the chunk lives on
     * unindexed, which costs dedup rate only. */
    struct index_mem *t = (struct index_mem *) ix;
    (void) b;
    uint8_t key[INDEX_MEMORY_KEY_BYTES];
    make_key(key, hash, len);
    pthread_mutex_lock(&t->mu);
    uint32_t pred;
    uint32_t i = find(t, key, alg, &pred);
    if (i != NIL && t->ents[i].chunk_id == chunk_id)
        remove_slot(t, i, pred);
    pthread_mutex_unlock(&t->mu);
}

static void
mem_usage(struct index *ix, struct index_usage *out)
{
    struct index_mem *t = (struct index_mem *) ix;
    pthread_mutex_lock(&t->mu);
    out->entries = t->n;
    out->bytes =
        sizeof(struct index_mem) + t->cap * sizeof(struct ment) + t->nbuckets * sizeof(uint32_t);
    out->limit_nr = t->max_slots;
    out->limit_mem = t->limit_mem;
    out->evictions = t->evictions;
    pthread_mutex_unlock(&t->mu);
}

const struct index_ops index__memory_ops = {
    .name = "memory",
    .persistent = false,
    .open = mem_open,
    .close = mem_close,
    .lookup = mem_lookup,
    .stage = mem_stage,
    .publish = mem_publish,
    .remove = mem_remove,
    .usage = mem_usage,
};
