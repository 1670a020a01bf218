/* Tests concurrent requests on one export: overlapping multi-chunk writes never interleave
 * (a read sees one writer's request whole), writers on disjoint chunks all land, and a
 * chunk freed between a request's early index look-up and its transaction is not shared. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define CS     4096
#define REGION (16 * CS)
#define ROUNDS 60

struct worker {
    struct engine_export *ex;
    int id;
    uint64_t base; /* disjoint mode: own area */
    int bad;       /* torn reads seen */
    int rc;
};

/* Writer w's request: block b holds pattern (w, b), so every block differs and a read
 * shows which writer's request it saw, block by block. */
static void
pattern(uint8_t *buf, int w)
{
    for (int b = 0; b < REGION / CS; b++)
        fx_fill(buf + b * CS, CS, (uint32_t) (w * 100 + b));
}

static void *
overlap_main(void *arg)
{
    struct worker *w = arg;
    uint8_t *mine = malloc(REGION), *got = malloc(REGION), *other = malloc(REGION);
    pattern(mine, w->id);
    for (int r = 0; r < ROUNDS && w->rc == 0; r++) {
        /* Offset by half a chunk: the first and last chunks take the RMW path too. */
        w->rc = engine_write(w->ex, CS / 2, REGION - CS, mine + CS / 2, 0);
        if (w->rc == 0)
            w->rc = engine_read(w->ex, CS / 2, REGION - CS, got);
        if (w->rc)
            break;
        /* Whatever we read must be exactly one writer's request. */
        int match = 0;
        for (int k = 0; k < 4 && !match; k++) {
            pattern(other, k);
            match = !memcmp(got, other + CS / 2, REGION - CS);
        }
        w->bad += !match;
    }
    free(mine);
    free(got);
    free(other);
    return NULL;
}

Test(concurrency, overlapping_multi_chunk_writes_never_interleave)
{
    struct fx f;
    fx_open(&f);
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.ex = f.ex, .id = i};
        cr_assert_eq(pthread_create(&t[i], NULL, overlap_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].rc, 0);
        cr_assert_eq(w[i].bad, 0, "writer %d read a torn request", i);
    }
    fx_close(&f);
}

static void *
disjoint_main(void *arg)
{
    struct worker *w = arg;
    uint8_t buf[CS];
    for (int r = 0; r < ROUNDS && w->rc == 0; r++) {
        fx_fill(buf, CS, (uint32_t) (r % 7)); /* shared across writers: dedup under contention */
        w->rc = engine_write(w->ex, w->base + (uint64_t) r * CS, CS, buf, 0);
    }
    return NULL;
}

Test(concurrency, disjoint_writers_all_land_and_share)
{
    struct fx f;
    fx_open(&f);
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.ex = f.ex, .id = i, .base = (uint64_t) i * ROUNDS * CS};
        cr_assert_eq(pthread_create(&t[i], NULL, disjoint_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].rc, 0);
    }
    cr_assert_eq(fx_chunks(&f), 7, "7 distinct blocks, however the writers raced");
    uint8_t want[CS], got[CS];
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < ROUNDS; r++) {
            fx_fill(want, CS, (uint32_t) (r % 7));
            cr_assert_eq(engine_read(f.ex, w[i].base + (uint64_t) r * CS, CS, got), 0);
            cr_assert(!memcmp(want, got, CS));
        }
    struct engine_stats s;
    cr_assert_eq(engine_stats(f.e, NULL, &s), 0);
    cr_assert_eq(s.dedup_misses, 7);
    cr_assert_eq(s.dedup_hits, 4 * ROUNDS - 7);
    fx_close(&f);
}

/* Every writer maps the same two blocks at its own offset and unmaps them again, so their
 * chunks are created and freed over and over. The look-ups, made before the commit lock,
 * often name a chunk that another writer frees before the transaction: sharing it would
 * leave a map entry naming a dead chunk. */
static void *
churn_main(void *arg)
{
    struct worker *w = arg;
    uint8_t buf[2 * CS];
    fx_fill(buf, CS, 1000);
    fx_fill(buf + CS, CS, 1001);
    for (int r = 0; r < 32 * ROUNDS && w->rc == 0; r++) {
        uint64_t off = w->base + (uint64_t) (r % 4) * 2 * CS;
        w->rc = engine_write(w->ex, off, 2 * CS, buf, 0);
        if (w->rc == 0 && (r + w->id) % 4)
            w->rc = engine_trim(w->ex, off, 2 * CS, 0);
    }
    return NULL;
}

Test(concurrency, chunks_freed_between_lookup_and_commit_are_not_shared)
{
    struct fx f;
    fx_open(&f);
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.ex = f.ex, .id = i, .base = (uint64_t) i * 8 * CS};
        cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].rc, 0);
    }
    /* Every block still mapped reads back as written, whichever chunk it ended on. */
    uint8_t want[2 * CS], got[2 * CS];
    fx_fill(want, CS, 1000);
    fx_fill(want + CS, CS, 1001);
    static const uint8_t zero[2 * CS];
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) {
            cr_assert_eq(engine_read(f.ex, w[i].base + (uint64_t) k * 2 * CS, 2 * CS, got), 0);
            cr_assert(!memcmp(got, want, sizeof(got)) || !memcmp(got, zero, sizeof(got)));
        }
    cr_assert_leq(fx_chunks(&f), 2);
    fx_close(&f); /* refcounts = map entries, hash entries name live chunks */
}
