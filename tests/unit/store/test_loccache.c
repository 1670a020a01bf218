/* Tests server/store/loccache.c and cached.c: the location cache follows every committed
 * change, refuses a fill that a commit overtook, and a stale or wrong chunk location never
 * yields wrong bytes; the non-blocking reads answer from memory or decline with -EAGAIN. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fakes/io_fake.h"
#include "helpers.h"
#include "store/internal.h"
#include "util/log.h"

STORE_SUITE(loccache);

static struct store *
open_store(uint64_t seg_bytes)
{
    struct store_options o = {.seg_bytes = seg_bytes, .block_cache_bytes = 8 << 20};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    return st;
}

/* Maps block idx of export 1 to a new chunk of content seed (0: unmaps it). */
static uint64_t
map_one(struct store *st, uint64_t idx, uint64_t seed)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t id = seed ? add(tx, seed, 4096) : 0;
    cr_assert_eq(store_txn_map_set(tx, 1, idx, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    return id;
}

static uint64_t
mapped(struct store *st, uint64_t idx)
{
    uint64_t id = 99;
    int rc = store_map_get(st, 1, idx, &id);
    cr_assert(rc == 0 || rc == -ENOENT, "map_get: %d", rc);
    return rc == 0 ? id : 0;
}

Test(loccache, map_entries_follow_every_commit)
{
    struct store *st = open_store(0);
    cr_assert_eq(mapped(st, 5), 0); /* a hole, now cached as one */
    uint64_t a = map_one(st, 5, 1);
    cr_assert_eq(mapped(st, 5), a);
    cr_assert_eq(mapped(st, 5), a); /* the cached answer */
    uint64_t b = map_one(st, 5, 2);
    cr_assert_neq(a, b);
    cr_assert_eq(mapped(st, 5), b);
    map_one(st, 5, 0);
    cr_assert_eq(mapped(st, 5), 0);
    uint8_t buf[4096];
    cr_assert_eq(store_chunk_read(st, b, buf, sizeof(buf)), -ENOENT, "b was freed");
    cr_assert_eq(store_chunk_read_cached(st, b, buf, sizeof(buf)), -EAGAIN);
    store_close(st);
}

Test(loccache, a_fill_that_a_commit_overtook_is_refused)
{
    struct store *st = open_store(0);
    uint64_t a = map_one(st, 7, 1), id;
    uint32_t gen, g;
    store__loc_clear(st);
    /* A reader misses, then reads RocksDB (gets a)... */
    cr_assert(!store__loc_map_get(st, 1, 7, &id, &gen));
    /* ...meanwhile a commit maps the block to b... */
    uint64_t b = map_one(st, 7, 2);
    /* ...and the reader's late fill with a must not stick. */
    store__loc_map_fill(st, 1, 7, a, gen);
    cr_assert_eq(mapped(st, 7), b);
    /* A fill nothing overtook is taken (the cache really is what answers). */
    cr_assert(!store__loc_map_get(st, 1, 8, &id, &g));
    store__loc_map_fill(st, 1, 8, b, g);
    cr_assert_eq(mapped(st, 8), b);
    store_close(st);
}

Test(loccache, a_wrong_chunk_location_never_gives_wrong_bytes)
{
    struct store *st = open_store(0);
    uint64_t a = map_one(st, 0, 11), b = map_one(st, 1, 12);
    struct store_chunk_info ia, ib;
    cr_assert_eq(store_chunk_get(st, a, &ia), 0);
    cr_assert_eq(store_chunk_get(st, b, &ib), 0);
    /* a's slot names b's record (a valid record of another chunk), then a place with no
     * record at all, then a segment that does not exist. */
    struct store_loc wrong[] = {{.seg = ib.seg, .off = ib.off, .len = 4096},
                                {.seg = ia.seg, .off = ia.off + 100, .len = 4096},
                                {.seg = ia.seg + 1000, .off = 0, .len = 4096}};
    uint8_t buf[4096], want[4096];
    fill(want, sizeof(want), 11);
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        store__loc_chunk_put(st, a, &wrong[i]);
        ssize_t n = store_chunk_read_cached(st, a, buf, sizeof(buf));
        cr_assert(n == -EAGAIN || (n == 4096 && !memcmp(buf, want, 4096)), "case %zu: %zd", i, n);
        store__loc_chunk_put(st, a, &wrong[i]);
        expect_bytes(st, a, 11, 4096);
        /* The blocking read dropped the wrong slot and cached the right place. */
        struct store_loc now;
        cr_assert(store__loc_chunk_get(st, a, &now));
        cr_assert_eq(now.seg, ia.seg);
        cr_assert_eq(now.off, ia.off);
    }
    /* A multi-chunk read meets the wrong slot too. */
    store__loc_chunk_put(st, a, &wrong[0]);
    uint8_t two[2][4096];
    uint64_t ids[2] = {a, b};
    void *bufs[2] = {two[0], two[1]};
    cr_assert_eq(store_chunks_read(st, ids, 2, bufs, 4096), 0);
    cr_assert(!memcmp(two[0], want, 4096));
    fill(want, sizeof(want), 12);
    cr_assert(!memcmp(two[1], want, 4096));
    store_close(st);
}

enum { N_MOVE = 200 };

/* Blocks 0..N_MOVE-1 written (seeds 100 + i) and read (every location cached), then 3 of
 * every 4 overwritten (seeds 1000 + i): the old segments mostly dead. ids[i]: the block's
 * chunk now. */
static struct store *
cached_then_mostly_overwritten(uint64_t *ids)
{
    struct store *st = open_store(64 << 10);
    for (unsigned i = 0; i < N_MOVE; i++)
        ids[i] = map_one(st, i, 100 + i);
    for (unsigned i = 0; i < N_MOVE; i++)
        expect_bytes(st, ids[i], 100 + i, 4096);
    for (unsigned i = 0; i < N_MOVE; i++)
        if (i % 4)
            ids[i] = map_one(st, i, 1000 + i);
    return st;
}

Test(loccache, reads_after_compaction_moves_and_removes_segments)
{
    enum { N = N_MOVE };
    uint64_t ids[N];
    struct store *st = cached_then_mostly_overwritten(ids);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_gt(res.segments_compacted, 0);
    uint8_t buf[4096], want[4096];
    for (unsigned i = 0; i < N; i++) {
        uint64_t seed = i % 4 ? 1000 + i : 100 + i;
        cr_assert_eq(mapped(st, i), ids[i]);
        fill(want, sizeof(want), seed);
        ssize_t n = store_chunk_read_cached(st, ids[i], buf, sizeof(buf));
        cr_assert(n == -EAGAIN || (n == 4096 && !memcmp(buf, want, 4096)), "block %u", i);
        expect_bytes(st, ids[i], seed, 4096);
    }
    store_close(st);
}

/* Compaction re-points the cached locations of the chunks it moves (a cache that forgot
 * them sent every read after a compaction to RocksDB) and leaves uncached ones out. */
Test(loccache, a_moved_chunks_cached_location_follows_it)
{
    enum { N = N_MOVE };
    uint64_t ids[N];
    struct store *st = cached_then_mostly_overwritten(ids);
    store__loc_chunk_drop(st, ids[0]); /* one survivor not cached when it moves */
    struct store_chunk_info before[N];
    for (unsigned i = 0; i < N; i += 4)
        cr_assert_eq(store_chunk_get(st, ids[i], &before[i]), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_gt(res.bytes_moved, 0);
    unsigned moved = 0;
    uint8_t buf[4096], want[4096];
    for (unsigned i = 4; i < N; i += 4) {
        struct store_chunk_info now;
        cr_assert_eq(store_chunk_get(st, ids[i], &now), 0);
        if (now.seg == before[i].seg && now.off == before[i].off)
            continue; /* its segment was the active one, or stayed */
        moved++;
        struct store_loc loc;
        cr_assert(store__loc_chunk_get(st, ids[i], &loc), "block %u: moved chunk not cached", i);
        cr_assert_eq(loc.seg, now.seg, "block %u", i);
        cr_assert_eq(loc.off, now.off, "block %u", i);
        fill(want, sizeof(want), 100 + i);
        cr_assert_eq(store_chunk_read_cached(st, ids[i], buf, sizeof(buf)), 4096, "block %u", i);
        cr_assert_eq(memcmp(buf, want, sizeof(want)), 0, "block %u", i);
    }
    cr_assert_gt(moved, 0, "compaction moved none of the survivors");
    struct store_loc loc;
    cr_assert(!store__loc_chunk_get(st, ids[0], &loc), "an uncached chunk was put in");
    expect_bytes(st, ids[0], 100, 4096);
    store_close(st);
}

Test(loccache, cached_reads_answer_from_memory_or_decline)
{
    struct store *st = open_store(0);
    uint64_t a = map_one(st, 3, 21), id = 0;
    cr_assert_eq(store_map_get_range_cached(st, 1, 3, 1, &id), 0);
    cr_assert_eq(id, a);
    cr_assert_eq(store_map_get_range_cached(st, 1, 4, 1, &id), 0);
    cr_assert_eq(id, 0, "a hole");
    uint8_t buf[4096], want[4096];
    fill(want, sizeof(want), 21);
    /* Just written: in the page cache. */
    cr_assert_eq(store_chunk_read_cached(st, a, buf, sizeof(buf)), 4096);
    cr_assert(!memcmp(buf, want, sizeof(want)));
    cr_assert_eq(store_chunk_read_cached(st, a, buf, 100), -EAGAIN, "too small a buffer");
    cr_assert_eq(store_chunk_read_cached(st, a + 1000, buf, sizeof(buf)), -EAGAIN);
    store_close(st);

    /* An io layer without non-blocking reads (the test double): always declined, and the
     * blocking read still works. */
    io_fake_install();
    st = NULL;
    struct store_options o = {.block_cache_bytes = 8 << 20};
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/fake", dir);
    cr_assert_eq(store_open(sub, &o, &st), 0);
    uint64_t b = map_one(st, 0, 22);
    cr_assert_eq(store_chunk_read_cached(st, b, buf, sizeof(buf)), -EAGAIN);
    expect_bytes(st, b, 22, 4096);
    store_close(st);
    io_fake_uninstall();
}

/* store_map_get_range answers like store_map_get for every index, whichever way it takes:
 * all from the cache, an iterator pass over many misses, point reads of a few; and what it
 * had to read from RocksDB is in the cache afterwards. */
Test(loccache, map_range_answers_like_point_reads_and_fills_the_cache)
{
    struct store *st = open_store(0);
    enum { N = 40 };
    uint64_t want[N + 8];
    for (uint64_t i = 0; i < N + 8; i++)
        want[i] = (i < N && i != 3 && i != 17 && i != 30) ? map_one(st, i, 100 + i) : 0;
    uint64_t got[N + 8];
    uint64_t id;
    uint32_t gen;

    /* Every entry was set by its commit: all from the cache. */
    cr_assert_eq(store_map_get_range(st, 1, 0, N + 8, got), 0);
    for (uint64_t i = 0; i < N + 8; i++)
        cr_assert_eq(got[i], want[i], "cached: index %lu", (unsigned long) i);

    /* Nothing cached: one iterator pass, then all of it cached (holes as holes). */
    store__loc_clear(st);
    memset(got, 0xa5, sizeof(got));
    cr_assert_eq(store_map_get_range(st, 1, 0, N + 8, got), 0);
    for (uint64_t i = 0; i < N + 8; i++) {
        cr_assert_eq(got[i], want[i], "scanned: index %lu", (unsigned long) i);
        cr_assert(store__loc_map_get(st, 1, i, &id, &gen), "index %lu not filled",
                  (unsigned long) i);
        cr_assert_eq(id, want[i]);
    }

    /* Two misses among hits (a hole and a mapped chunk): point reads, then cached. */
    store__loc_clear(st);
    for (uint64_t i = 0; i < N; i++)
        if (i != 17 && i != 21)
            mapped(st, i);
    cr_assert(!store__loc_map_get(st, 1, 21, &id, &gen));
    memset(got, 0xa5, sizeof(got));
    cr_assert_eq(store_map_get_range(st, 1, 0, N, got), 0);
    for (uint64_t i = 0; i < N; i++)
        cr_assert_eq(got[i], want[i], "mixed: index %lu", (unsigned long) i);
    cr_assert(store__loc_map_get(st, 1, 21, &id, &gen) && id == want[21]);
    cr_assert(store__loc_map_get(st, 1, 17, &id, &gen) && id == 0);

    /* A later change is what the range sees. */
    uint64_t b = map_one(st, 21, 999);
    map_one(st, 22, 0);
    cr_assert_eq(store_map_get_range(st, 1, 20, 3, got), 0);
    cr_assert_eq(got[0], want[20]);
    cr_assert_eq(got[1], b);
    cr_assert_eq(got[2], 0);
    store_close(st);
}

/* The batched look-ups (one stripe mutex per run of keys) answer like one at a time, across
 * batches and runs and from any start; misses are answered from the memtables. */
Test(loccache, cached_map_range_answers_like_point_reads)
{
    struct store *st = open_store(0);
    enum { N = 150 };
    uint64_t want[N], got[N];
    for (uint64_t i = 0; i < N; i++)
        want[i] = i % 7 == 3 ? 0 : map_one(st, i, 300 + i);
    for (int round = 0; round < 2; round++) {
        if (round)
            store__loc_clear(st); /* all misses: the memtables answer */
        memset(got, 0xa5, sizeof(got));
        cr_assert_eq(store_map_get_range_cached(st, 1, 5, N - 5, got), 0);
        for (uint64_t i = 5; i < N; i++)
            cr_assert_eq(got[i - 5], want[i], "round %d: index %lu", round, (unsigned long) i);
        for (uint64_t i = 0; i < N; i++) {
            uint64_t id = 0;
            int rc = store_map_get(st, 1, i, &id);
            cr_assert_eq(rc, want[i] ? 0 : -ENOENT);
            cr_assert_eq(id, want[i]);
        }
    }
    store_close(st);
}

/* A batched read whose locations the cache did not know (a restarted server) fills them,
 * so the next read of the same chunks is answered by the cached twin; without the fill an
 * export not written since the start was read through a worker forever. */
Test(loccache, a_batched_read_fills_the_chunk_locations_it_looked_up)
{
    struct store *st = open_store(0);
    enum { N = 32 };
    uint64_t ids[N];
    for (uint64_t i = 0; i < N; i++)
        ids[i] = map_one(st, i, 300 + i);
    store__loc_clear(st);
    static uint8_t bufs[N][4096];
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = bufs[i];
    cr_assert_eq(store_chunks_read_cached(st, ids, N, p, 4096), -EAGAIN, "nothing cached yet");
    cr_assert_eq(store_chunks_read(st, ids, N, p, 4096), 0);
    struct store_loc loc;
    for (int i = 0; i < N; i++)
        cr_assert(store__loc_chunk_get(st, ids[i], &loc) && loc.len == 4096,
                  "chunk %d's location not filled", i);
    memset(bufs, 0xee, sizeof(bufs));
    cr_assert_eq(store_chunks_read_cached(st, ids, N, p, 4096), 0);
    uint8_t want[4096];
    for (int i = 0; i < N; i++) {
        fill(want, sizeof(want), 300 + (uint64_t) i);
        cr_assert_eq(memcmp(bufs[i], want, sizeof(want)), 0, "chunk %d", i);
    }
    store_close(st);
}
