/* Tests server/engine/vcache.c, the verify cache: what it answers before and after an
 * insert, that it keeps only chunks of its size and never id 0, that a slot taken by
 * another id forgets the first, and that concurrent inserts and comparisons never see torn
 * bytes. The engine-level behaviour (verify still catches collisions when the bytes come
 * from the cache, a freed chunk's entry is never used) is in test_dedup.c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

#define CS VCACHE_CHUNK_BYTES

static void
fill(uint8_t *buf, uint64_t id, uint32_t salt)
{
    for (size_t i = 0; i < CS; i += 8) {
        uint64_t v = (id * 0x9E3779B97F4A7C15ull) ^ (i * 0xD6E8FEB86659FD93ull) ^ salt;
        memcpy(buf + i, &v, 8);
    }
}

Test(vcache, answers_only_what_was_put)
{
    struct engine_vcache *vc;
    cr_assert_eq(engine__vcache_create(&vc), 0);
    uint8_t a[CS], b[CS];
    fill(a, 7, 0);
    fill(b, 7, 1);
    cr_assert_eq(engine__vcache_compare(vc, 7, a, CS), -ENOENT, "empty cache");
    engine__vcache_put(vc, 7, a, CS);
    cr_assert_eq(engine__vcache_compare(vc, 7, a, CS), 1);
    cr_assert_eq(engine__vcache_compare(vc, 7, b, CS), 0, "other bytes differ");
    memcpy(b, a, CS);
    b[CS - 1] ^= 1; /* one bit in the last byte */
    cr_assert_eq(engine__vcache_compare(vc, 7, b, CS), 0);
    cr_assert_eq(engine__vcache_compare(vc, 8, a, CS), -ENOENT, "another id");
    engine__vcache_destroy(vc);
}

Test(vcache, keeps_only_its_chunk_size_and_never_id_zero)
{
    struct engine_vcache *vc;
    cr_assert_eq(engine__vcache_create(&vc), 0);
    uint8_t *big = malloc(2 * CS);
    fill(big, 3, 0);
    fill(big + CS, 4, 0);
    engine__vcache_put(vc, 3, big, 2 * CS);
    cr_assert_eq(engine__vcache_compare(vc, 3, big, 2 * CS), -ENOENT);
    cr_assert_eq(engine__vcache_compare(vc, 3, big, CS), -ENOENT, "nothing was kept for 3");
    engine__vcache_put(vc, 0, big, CS);
    cr_assert_eq(engine__vcache_compare(vc, 0, big, CS), -ENOENT);
    engine__vcache_put(vc, 3, big, CS);
    cr_assert_eq(engine__vcache_compare(vc, 3, big, 2 * CS), -ENOENT, "size must match");
    cr_assert_eq(engine__vcache_compare(vc, 3, big, CS / 2), -ENOENT);
    cr_assert_eq(engine__vcache_compare(vc, 3, big, CS), 1);
    free(big);
    engine__vcache_destroy(vc);
}

Test(vcache, an_id_taking_the_slot_evicts_the_one_before)
{
    struct engine_vcache *vc;
    cr_assert_eq(engine__vcache_create(&vc), 0);
    uint8_t a[CS], x[CS];
    fill(a, 1, 0);
    engine__vcache_put(vc, 1, a, CS);
    uint64_t other = 0;
    for (uint64_t id = 2; id < 1000000 && !other; id++) {
        fill(x, id, 0);
        engine__vcache_put(vc, id, x, CS);
        if (engine__vcache_compare(vc, 1, a, CS) == -ENOENT)
            other = id;
    }
    cr_assert_neq(other, 0, "some id shares chunk 1's slot");
    fill(x, other, 0);
    cr_assert_eq(engine__vcache_compare(vc, other, x, CS), 1);
    cr_assert_eq(engine__vcache_compare(vc, other, a, CS), 0, "1's bytes are not other's");
    engine__vcache_destroy(vc);
}

#define THREADS 4
#define IDS     20000 /* more than the slots: constant eviction */
#define ROUNDS  20000

struct worker {
    struct engine_vcache *vc;
    unsigned seed;
    unsigned mismatches; /* a cached id whose bytes compared unequal: torn or mixed up */
    unsigned hits;
};

static void *
hammer(void *arg)
{
    struct worker *w = arg;
    uint8_t buf[CS];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t id = 1 + (uint64_t) rand_r(&w->seed) % IDS;
        fill(buf, id, 0);
        int c = engine__vcache_compare(w->vc, id, buf, CS);
        if (c == 0)
            w->mismatches++;
        else if (c == 1)
            w->hits++;
        else
            engine__vcache_put(w->vc, id, buf, CS);
    }
    return NULL;
}

Test(vcache, concurrent_puts_and_compares_never_see_torn_bytes)
{
    struct engine_vcache *vc;
    cr_assert_eq(engine__vcache_create(&vc), 0);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.vc = vc, .seed = 1234u + (unsigned) i};
        cr_assert_eq(pthread_create(&t[i], NULL, hammer, &w[i]), 0);
    }
    unsigned hits = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].mismatches, 0, "thread %d compared unequal bytes", i);
        hits += w[i].hits;
    }
    cr_assert_gt(hits, 0, "the cache answered some comparisons");
    engine__vcache_destroy(vc);
}
