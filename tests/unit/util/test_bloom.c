/* Tests server/util/bloom.c: no false "absent", a false "maybe" rate near the design's, the
 * size limit, and adds racing tests from another thread. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/bloom.h"

/* splitmix64: distinct, well-mixed key hashes from a counter. */
static uint64_t
key(uint64_t i)
{
    uint64_t z = i + 0x9e3779b97f4a7c15ULL * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

Test(bloom, holds_every_key_added)
{
    struct bloom *b = bloom_new(100000, 0);
    cr_assert_not_null(b);
    for (uint64_t i = 0; i < 100000; i++)
        bloom_add(b, key(i));
    for (uint64_t i = 0; i < 100000; i++)
        cr_assert(bloom_may_contain(b, key(i)), "key %llu lost", (unsigned long long) i);
    bloom_free(b);
}

Test(bloom, empty_filter_holds_nothing)
{
    struct bloom *b = bloom_new(1000, 0);
    cr_assert_not_null(b);
    for (uint64_t i = 0; i < 10000; i++)
        cr_assert_not(bloom_may_contain(b, key(i)));
    bloom_free(b);
}

Test(bloom, false_maybe_rate_at_capacity)
{
    struct bloom *b = bloom_new(200000, 0);
    cr_assert_not_null(b);
    uint64_t cap = bloom_capacity(b);
    cr_assert_geq(cap, 200000);
    cr_assert_lt(cap, 200000 + 64 * 8 / BLOOM_BITS_PER_KEY + 1);
    for (uint64_t i = 0; i < cap; i++)
        bloom_add(b, key(i));
    uint64_t fp = 0, n = 400000;
    for (uint64_t i = 0; i < n; i++)
        fp += bloom_may_contain(b, key(cap + 1000 + i));
    /* ~1.2% for a blocked filter at 10 bits per key and 6 probes; 2.5% would mean the probe
     * bits or the block choice are not independent. */
    cr_assert_lt(fp * 1000 / n, 25, "false maybe rate %.2f%%", 100.0 * (double) fp / (double) n);
    cr_assert_gt(fp, 0, "a full filter answers maybe to some absent keys");
    bloom_free(b);
}

Test(bloom, size_is_capped_and_still_exact_for_added_keys)
{
    struct bloom *b = bloom_new(1000000, 4096);
    cr_assert_not_null(b);
    cr_assert_eq(bloom_bytes(b), 4096);
    cr_assert_eq(bloom_capacity(b), 4096 * 8 / BLOOM_BITS_PER_KEY);
    for (uint64_t i = 0; i < 20000; i++)
        bloom_add(b, key(i));
    for (uint64_t i = 0; i < 20000; i++)
        cr_assert(bloom_may_contain(b, key(i)));
    bloom_free(b);
    b = bloom_new(0, 0); /* at least one block */
    cr_assert_not_null(b);
    cr_assert_eq(bloom_bytes(b), 64);
    bloom_add(b, key(1));
    cr_assert(bloom_may_contain(b, key(1)));
    bloom_free(b);
    bloom_free(NULL);
}

/* Two threads add 16 keys each into the same one-block filter (8 words) at the same time,
 * round after round, each round started when both finished the last: a non-atomic |= loses bits
 * there within a few rounds on two cores. */
#define RACE_ROUNDS 5000
#define RACE_KEYS   16

struct race {
    struct bloom **f;
    int done[2]; /* the last round each thread finished */
};

struct racer {
    struct race *r;
    int id;
};

static void *
race_adds(void *arg)
{
    struct racer *me = arg;
    struct race *r = me->r;
    for (int round = 1; round <= RACE_ROUNDS; round++) {
        while (__atomic_load_n(&r->done[!me->id], __ATOMIC_ACQUIRE) < round - 1)
            sched_yield();
        for (uint64_t k = 0; k < RACE_KEYS; k++)
            bloom_add(r->f[round - 1], key((uint64_t) round * 64 + (uint64_t) me->id * 32 + k));
        __atomic_store_n(&r->done[me->id], round, __ATOMIC_RELEASE);
    }
    return NULL;
}

Test(bloom, concurrent_adds_lose_no_bit)
{
    struct race r = {.f = calloc(RACE_ROUNDS, sizeof(struct bloom *))};
    cr_assert_not_null(r.f);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        r.f[i] = bloom_new(0, 0);
        cr_assert_not_null(r.f[i]);
    }
    struct racer who[2] = {{&r, 0}, {&r, 1}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, race_adds, &who[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int round = 1; round <= RACE_ROUNDS; round++) {
        for (uint64_t id = 0; id < 2; id++)
            for (uint64_t k = 0; k < RACE_KEYS; k++)
                cr_assert(
                    bloom_may_contain(r.f[round - 1], key((uint64_t) round * 64 + id * 32 + k)),
                    "round %d: a bit was lost", round);
        bloom_free(r.f[round - 1]);
    }
    free(r.f);
}
