/* Tests server/index/memory.c beyond the contract: LRU eviction at limit_nr and limit_mem,
 * exact byte accounting, and a randomized run against a simple LRU model. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index/index.h"

static void
make_hash(uint8_t h[32], uint32_t seed)
{
    for (int i = 0; i < 32; i++) {
        seed = seed * 1103515245u + 12345u;
        h[i] = (uint8_t) (seed >> 16);
    }
}

static struct index *
open_mem(uint64_t limit_nr, uint64_t limit_mem)
{
    struct index_limits lim = {.limit_nr = limit_nr, .limit_mem = limit_mem};
    struct index *ix = NULL;
    cr_assert_eq(index_open("memory", NULL, &lim, &ix), 0);
    cr_assert(!index_persistent(ix));
    return ix;
}

static void
put(struct index *ix, uint32_t seed, uint64_t id)
{
    struct index_batch b;
    uint8_t h[32];
    index_batch_init(&b);
    make_hash(h, seed);
    cr_assert_eq(index_stage(ix, &b, 1, h, 32, id), 0);
    index_publish(ix, &b);
    index_batch_fini(&b);
}

static bool
has(struct index *ix, uint32_t seed, uint64_t *id)
{
    uint8_t h[32];
    uint64_t tmp;
    make_hash(h, seed);
    return index_lookup(ix, 1, h, 32, id ? id : &tmp) == 0;
}

Test(memory, default_limit_gives_a_4gib_window_at_4k)
{
    struct index *ix = open_mem(0, 0);
    struct index_usage u;
    index_usage(ix, &u);
    cr_assert_eq(u.limit_nr, INDEX_MEMORY_DEFAULT_LIMIT_NR);
    cr_assert_eq(u.limit_nr * 4096, 4ULL << 30);
    cr_assert_eq(u.entries, 0);
    cr_assert_lt(u.bytes, 1024, "an unused table allocates nothing");
    index_close(ix);
}

Test(memory, evicts_least_recently_used_at_limit_nr)
{
    struct index *ix = open_mem(100, 0);
    for (uint32_t i = 0; i < 150; i++)
        put(ix, i, 1000 + i);
    struct index_usage u;
    index_usage(ix, &u);
    cr_assert_eq(u.entries, 100);
    cr_assert_eq(u.evictions, 50);
    for (uint32_t i = 0; i < 50; i++)
        cr_assert(!has(ix, i, NULL), "oldest entry %u should be evicted", i);
    for (uint32_t i = 50; i < 150; i++) {
        uint64_t id;
        cr_assert(has(ix, i, &id), "entry %u lost", i);
        cr_assert_eq(id, 1000 + i);
    }
    index_close(ix);
}

Test(memory, a_lookup_hit_refreshes_an_entry)
{
    struct index *ix = open_mem(3, 0);
    put(ix, 1, 1);
    put(ix, 2, 2);
    put(ix, 3, 3);
    cr_assert(has(ix, 1, NULL)); /* 1 becomes most recent: 2 is now the oldest */
    put(ix, 4, 4);
    cr_assert(has(ix, 1, NULL));
    cr_assert(!has(ix, 2, NULL));
    cr_assert(has(ix, 3, NULL));
    cr_assert(has(ix, 4, NULL));
    index_close(ix);
}

Test(memory, bytes_are_reported_exactly)
{
    struct index *ix = open_mem(0, 0);
    struct index_usage empty, one, many;
    index_usage(ix, &empty);
    put(ix, 1, 1);
    index_usage(ix, &one);
    /* The first insert allocates 1024 slots of 40 bytes and 1024 four-byte buckets. */
    cr_assert_eq(one.bytes - empty.bytes, 1024 * (INDEX_MEMORY_ENTRY_BYTES + 4));
    for (uint32_t i = 2; i <= 1025; i++)
        put(ix, i, i);
    index_usage(ix, &many);
    cr_assert_eq(many.entries, 1025);
    cr_assert_eq(many.bytes - empty.bytes, 2048 * (INDEX_MEMORY_ENTRY_BYTES + 4));
    index_close(ix);
}

Test(memory, limit_mem_bounds_the_table)
{
    const uint64_t limit = 64 * 1024;
    struct index *ix = open_mem(0, limit);
    struct index_usage u;
    index_usage(ix, &u);
    uint64_t cap = u.limit_nr;
    /* 44 bytes per entry (40 + a bucket, rounded to a power of two) within 64 KiB. */
    cr_assert_gt(cap, 1000);
    cr_assert_lt(cap, limit / INDEX_MEMORY_ENTRY_BYTES);
    for (uint32_t i = 0; i < 5000; i++)
        put(ix, i, i + 1);
    index_usage(ix, &u);
    cr_assert_leq(u.bytes, limit);
    cr_assert_gt(u.bytes + INDEX_MEMORY_ENTRY_BYTES, limit - 4096, "most of the budget is used");
    cr_assert_eq(u.entries, cap);
    cr_assert_eq(u.evictions, 5000 - cap);
    cr_assert_eq(u.limit_mem, limit);
    cr_assert(has(ix, 4999, NULL));
    cr_assert(!has(ix, 0, NULL));
    index_close(ix);
}

Test(memory, a_limit_too_small_for_one_entry_stores_nothing)
{
    struct index *ix = open_mem(0, 16);
    put(ix, 1, 1);
    struct index_usage u;
    index_usage(ix, &u);
    cr_assert_eq(u.entries, 0);
    cr_assert(!has(ix, 1, NULL));
    index_close(ix);
}

Test(memory, removed_slots_are_reused)
{
    struct index *ix = open_mem(10, 0);
    struct index_batch b;
    index_batch_init(&b);
    for (uint32_t i = 0; i < 10; i++)
        put(ix, i, i + 1);
    uint8_t h[32];
    for (uint32_t i = 0; i < 5; i++) {
        make_hash(h, i);
        index_remove(ix, &b, 1, h, 32, i + 1);
    }
    for (uint32_t i = 100; i < 105; i++)
        put(ix, i, i);
    struct index_usage u;
    index_usage(ix, &u);
    cr_assert_eq(u.entries, 10);
    cr_assert_eq(u.evictions, 0, "freed slots are used before evicting");
    for (uint32_t i = 5; i < 10; i++)
        cr_assert(has(ix, i, NULL));
    index_batch_fini(&b);
    index_close(ix);
}

/* A model: the keys in recency order, most recent first. */
struct model {
    uint32_t key[64];
    uint64_t id[64];
    int n;
};

static int
model_find(struct model *m, uint32_t k)
{
    for (int i = 0; i < m->n; i++)
        if (m->key[i] == k)
            return i;
    return -1;
}

static void
model_touch(struct model *m, int i)
{
    uint32_t k = m->key[i];
    uint64_t id = m->id[i];
    memmove(&m->key[1], &m->key[0], (size_t) i * sizeof(m->key[0]));
    memmove(&m->id[1], &m->id[0], (size_t) i * sizeof(m->id[0]));
    m->key[0] = k;
    m->id[0] = id;
}

Test(memory, random_operations_match_an_lru_model)
{
    enum { CAP = 64, KEYS = 200, OPS = 20000 };
    struct index *ix = open_mem(CAP, 0);
    struct model m = {.n = 0};
    struct index_batch b;
    index_batch_init(&b);
    uint32_t rnd = 12345;
    uint64_t evictions = 0;
    for (int op = 0; op < OPS; op++) {
        rnd = rnd * 1664525u + 1013904223u;
        uint32_t k = (rnd >> 8) % KEYS;
        int kind = (int) ((rnd >> 24) % 3);
        int i = model_find(&m, k);
        uint64_t id;
        if (kind == 0) { /* insert */
            uint64_t nid = (uint64_t) op + 1;
            put(ix, k, nid);
            if (i >= 0) {
                m.id[i] = nid;
                model_touch(&m, i);
            } else {
                if (m.n == CAP) {
                    m.n--;
                    evictions++;
                }
                memmove(&m.key[1], &m.key[0], (size_t) m.n * sizeof(m.key[0]));
                memmove(&m.id[1], &m.id[0], (size_t) m.n * sizeof(m.id[0]));
                m.key[0] = k;
                m.id[0] = nid;
                m.n++;
            }
        } else if (kind == 1) { /* lookup */
            bool found = has(ix, k, &id);
            cr_assert_eq(found, i >= 0, "op %d key %u", op, k);
            if (found) {
                cr_assert_eq(id, m.id[i]);
                model_touch(&m, i);
            }
        } else if (i >= 0) { /* remove */
            uint8_t h[32];
            make_hash(h, k);
            index_remove(ix, &b, 1, h, 32, m.id[i]);
            memmove(&m.key[i], &m.key[i + 1], (size_t) (m.n - i - 1) * sizeof(m.key[0]));
            memmove(&m.id[i], &m.id[i + 1], (size_t) (m.n - i - 1) * sizeof(m.id[0]));
            m.n--;
        }
    }
    struct index_usage u;
    index_usage(ix, &u);
    cr_assert_eq(u.entries, (uint64_t) m.n);
    cr_assert_eq(u.evictions, evictions);
    index_batch_fini(&b);
    index_close(ix);
}
