/* Tests server/store/compact.c: space comes back after overwrites, live data survives
 * being moved (also across a reopen and with readers running), the background thread
 * compacts on its own. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fakes/io_fake.h"
#include "helpers.h"
#include "util/log.h"

STORE_SUITE(compact);

#define NBLK 300

static struct store *
open_small(bool background)
{
    struct store_options o = {.seg_bytes = 64 << 10,
                              .background_compaction = background,
                              .compact_bytes_per_sec = 64 << 20};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    return st;
}

/* Writes blocks [0, NBLK) where (blk % every == 0) with content seed base + blk. */
static void
write_blocks(struct store *st, uint64_t base, unsigned every)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned b = 0; b < NBLK; b += every) {
        uint64_t id = add(tx, base + b, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, b, id), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_sync(st), 0);
}

/* Overwrites 3 of every 4 blocks with seeds 9000 + blk: old segments stay ~25% live. */
static void
overwrite_3_of_4(struct store *st, uint64_t *seed_of)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned b = 0; b < NBLK; b++) {
        if (b % 4 == 0)
            continue;
        seed_of[b] = 9000 + b;
        cr_assert_eq(store_txn_map_set(tx, 1, b, add(tx, seed_of[b], 4096)), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

/* Blocks written, then 3 of 4 overwritten: the old segments ~25% live, block 0's chunk
 * among the live. Returns that chunk's id. */
static uint64_t
quarter_live(struct store *st, uint64_t *seed_of)
{
    write_blocks(st, 1000, 1);
    for (unsigned b = 0; b < NBLK; b++)
        seed_of[b] = 1000 + b;
    overwrite_3_of_4(st, seed_of);
    uint64_t id0;
    cr_assert_eq(store_map_get(st, 1, 0, &id0), 0);
    return id0;
}

static void
expect_blocks(struct store *st, const uint64_t *seed_of)
{
    for (unsigned b = 0; b < NBLK; b++) {
        uint64_t id;
        cr_assert_eq(store_map_get(st, 1, b, &id), 0);
        expect_bytes(st, id, seed_of[b], 4096);
    }
}

static void
expect_clean(struct store *st)
{
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
}

/* Every block reads back, check is clean, and both hold after a reopen; closes st. */
static void
expect_blocks_across_reopen(struct store *st, const uint64_t *seed_of)
{
    for (int round = 0; round < 2; round++) {
        if (round)
            st = open_small(false);
        expect_blocks(st, seed_of);
        expect_clean(st);
        store_close(st);
    }
}

Test(compact, disk_bytes_go_down_after_a_full_overwrite)
{
    struct store *st = open_small(false);
    uint64_t seed_of[NBLK];
    write_blocks(st, 1000, 1);
    write_blocks(st, 5000, 1); /* every old chunk is freed */
    for (unsigned b = 0; b < NBLK; b++)
        seed_of[b] = 5000 + b;
    struct store_stats before, after;
    cr_assert_eq(store_stats(st, &before), 0);
    cr_assert_geq(before.dead_bytes, NBLK * 4160ull);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    cr_assert_geq(res.segments_compacted, NBLK * 4160ull / (64 << 10) - 1);
    cr_assert_eq(store_stats(st, &after), 0);
    cr_log_info("disk bytes %lu -> %lu, dead %lu -> %lu", (unsigned long) before.disk_bytes,
                (unsigned long) after.disk_bytes, (unsigned long) before.dead_bytes,
                (unsigned long) after.dead_bytes);
    cr_assert_lt(after.disk_bytes, before.disk_bytes - NBLK * 4096ull * 3 / 4);
    cr_assert_lt(after.segments, before.segments);
    cr_assert_eq(after.compactions, res.segments_compacted);
    expect_blocks_across_reopen(st, seed_of);
}

/* A segment with nothing live left is read once before its file goes (to make sure no
 * chunk entry still names a record in it), not twice: there is nothing to move. Only the
 * segment the two writes shared still has live records and is walked again to move them. */
Test(compact, a_dead_segment_is_read_once)
{
    io_fake_install();
    struct store_options o = {.seg_bytes = 64 << 10};
    struct store *st = NULL;
    char sub[256];
    snprintf(sub, sizeof(sub), "%s/fake", dir);
    cr_assert_eq(store_open(sub, &o, &st), 0);
    uint64_t seed_of[NBLK];
    write_blocks(st, 1000, 1);
    write_blocks(st, 5000, 1); /* every old chunk is freed */
    for (unsigned b = 0; b < NBLK; b++)
        seed_of[b] = 5000 + b;
    uint64_t before = io_fake_bytes_read();
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    uint64_t read = io_fake_bytes_read() - before;
    cr_log_info("%lu segments, %lu bytes reclaimed, %lu read",
                (unsigned long) res.segments_compacted, (unsigned long) res.bytes_reclaimed,
                (unsigned long) read);
    cr_assert_geq(res.segments_compacted, NBLK * 4160ull / (64 << 10) - 1);
    cr_assert_lt(read, res.bytes_reclaimed + res.bytes_reclaimed / 4,
                 "%lu bytes read to remove %lu", (unsigned long) read,
                 (unsigned long) res.bytes_reclaimed);
    expect_blocks(st, seed_of);
    expect_clean(st);
    store_close(st);
    io_fake_uninstall();
}

Test(compact, live_records_are_moved_and_survive_reopen)
{
    struct store *st = open_small(false);
    uint64_t seed_of[NBLK];
    uint64_t id0 = quarter_live(st, seed_of);
    struct store_chunk_info ci0;
    cr_assert_eq(store_chunk_get(st, id0, &ci0), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    cr_assert_gt(res.segments_compacted, 0);
    cr_assert_gt(res.bytes_moved, 0);
    struct store_chunk_info ci1;
    cr_assert_eq(store_chunk_get(st, id0, &ci1), 0);
    cr_assert(ci1.seg != ci0.seg, "block 0's chunk was not moved");
    cr_assert_eq(ci1.refs, 1);
    expect_blocks(st, seed_of);
    expect_clean(st);
    store_close(st);
    st = open_small(false);
    expect_blocks(st, seed_of);
    expect_clean(st);
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, NULL, NULL, &sr), 0);
    cr_assert_eq(sr.crc_errors + sr.hash_errors + sr.io_errors, 0);
    store_close(st);
}

Test(compact, an_entry_preloaded_before_a_move_is_read_afresh)
{
    struct store *st = open_small(false);
    uint64_t seed_of[NBLK];
    uint64_t id0 = quarter_live(st, seed_of);
    struct store_chunk_pre pre;
    cr_assert_eq(store_chunk_preload(st, id0, &pre), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    cr_assert_gt(res.bytes_moved, 0);
    struct store_stats before, after;
    cr_assert_eq(store_stats(st, &before), 0);

    /* Block 0 overwritten with the entry read before its chunk moved: the freed record's
     * bytes must be counted dead where the record is now. */
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    seed_of[0] = 7777;
    cr_assert_eq(store_txn_map_set_known(tx, 1, 0, id0, &pre, add(tx, seed_of[0], 4096)), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_stats(st, &after), 0);
    cr_assert_eq(after.dead_bytes, before.dead_bytes + 4096 + 64);
    expect_blocks_across_reopen(st, seed_of);
}

Test(compact, threshold_spares_mostly_live_segments_unless_forced)
{
    struct store *st = open_small(false);
    write_blocks(st, 1000, 1);
    write_blocks(st, 7000, 8); /* 1 in 8 overwritten: old segments ~87% live */
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    cr_assert_eq(res.segments_compacted, 0);
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_gt(res.segments_compacted, 0);
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    expect_clean(st);
    store_close(st);
}

struct reader {
    struct store *st;
    atomic_bool stop;
    unsigned reads, errors;
};

static void *
read_loop(void *arg)
{
    struct reader *r = arg;
    uint8_t buf[4096];
    while (!atomic_load(&r->stop)) {
        for (unsigned b = 0; b < NBLK; b += 4) {
            uint64_t id;
            if (store_map_get(r->st, 1, b, &id) != 0 ||
                store_chunk_read(r->st, id, buf, sizeof(buf)) != 4096)
                r->errors++;
            r->reads++;
        }
    }
    return NULL;
}

Test(compact, reads_during_compaction_never_fail)
{
    struct store *st = open_small(false);
    write_blocks(st, 1000, 1);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned b = 1; b < NBLK; b += 1)
        if (b % 4)
            cr_assert_eq(store_txn_map_set(tx, 1, b, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct reader r = {.st = st};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_loop, &r), 0);
    usleep(20000);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    usleep(20000);
    atomic_store(&r.stop, true);
    pthread_join(t, NULL);
    cr_assert_gt(res.segments_compacted, 0);
    cr_assert_gt(r.reads, 0);
    cr_assert_eq(r.errors, 0);
    store_close(st);
}

Test(compact, background_thread_compacts_on_its_own)
{
    struct store *st = open_small(true);
    write_blocks(st, 1000, 1);
    write_blocks(st, 5000, 1);
    struct store_stats s = {0};
    for (int i = 0; i < 150 && s.compactions == 0; i++) { /* up to 15 s */
        usleep(100000);
        cr_assert_eq(store_stats(st, &s), 0);
    }
    cr_assert_gt(s.compactions, 0);
    store_close(st); /* stops the thread */
}

static int
count_progress(void *arg, const struct store_progress *p)
{
    (void) p;
    (*(int *) arg)++;
    return 0;
}

Test(compact, progress_is_reported)
{
    struct store *st = open_small(false);
    write_blocks(st, 1000, 1);
    write_blocks(st, 2000, 2);
    int calls = 0;
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, count_progress, &calls, &res), 0);
    cr_assert_gt(res.bytes_moved, 0);
    cr_assert_gt(calls, 0);
    store_close(st);
}

/* A record header that no longer decodes, in a dead record: the walk cannot step past it,
 * so the live records before it move, those after it stay, and the segment is kept. */
Test(compact, an_unreadable_header_keeps_its_segment_and_loses_nothing)
{
    struct store *st = open_small(false);
    uint64_t seed_of[NBLK];
    write_blocks(st, 1000, 1);
    for (unsigned b = 0; b < NBLK; b++)
        seed_of[b] = 1000 + b;
    struct store_chunk_info c0, c1, c4;
    uint64_t id0, id1, id4;
    cr_assert_eq(store_map_get(st, 1, 0, &id0), 0);
    cr_assert_eq(store_map_get(st, 1, 1, &id1), 0);
    cr_assert_eq(store_map_get(st, 1, 4, &id4), 0);
    cr_assert_eq(store_chunk_get(st, id0, &c0), 0);
    cr_assert_eq(store_chunk_get(st, id1, &c1), 0);
    cr_assert_eq(store_chunk_get(st, id4, &c4), 0);
    cr_assert(c1.seg == c0.seg && c4.seg == c0.seg && c0.off < c1.off && c1.off < c4.off);
    overwrite_3_of_4(st, seed_of);
    /* Block 1's old record is dead now: break its magic. */
    char path[256];
    snprintf(path, sizeof(path), "%s/segments/seg-%08u.log", dir, c0.seg);
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0, "%s", path);
    cr_assert_eq(pwrite(fd, "\xde\xad\xbe\xef", 4, (off_t) c1.off), 4); /* not the magic */
    close(fd);

    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    struct store_chunk_info n0, n4;
    cr_assert_eq(store_chunk_get(st, id0, &n0), 0);
    cr_assert_eq(store_chunk_get(st, id4, &n4), 0);
    cr_assert_neq(n0.seg, c0.seg, "the record before the bad header moved");
    cr_assert_eq(n4.seg, c0.seg, "the one after it stayed");
    cr_assert_eq(n4.off, c4.off);
    expect_blocks_across_reopen(st, seed_of);
}

/* Records of the largest chunk size are walked and moved whole (they are larger than a
 * group). */
Test(compact, a_record_of_the_largest_chunk_size_is_moved)
{
    struct store_options o = {.seg_bytes = 16 << 20};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    uint8_t *big = malloc(DEDUPD_CHUNK_MAX), *got = malloc(DEDUPD_CHUNK_MAX);
    cr_assert(big && got);
    fill(big, DEDUPD_CHUNK_MAX, 77);
    struct store_txn *tx;
    uint64_t small, a, b;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    small = add(tx, 1, 4096);
    cr_assert_eq(store_txn_add_chunk(tx, 0, NULL, 0, big, DEDUPD_CHUNK_MAX, &a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, small), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0); /* does not fit: seals the first segment */
    cr_assert_eq(store_txn_add_chunk(tx, 0, NULL, 0, big, DEDUPD_CHUNK_MAX, &b), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 2, b), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, 0), 0); /* frees small: a dead byte there */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_chunk_info before, after;
    cr_assert_eq(store_chunk_get(st, a, &before), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_geq(res.segments_compacted, 1);
    cr_assert_eq(store_chunk_get(st, a, &after), 0);
    cr_assert_neq(after.seg, before.seg, "the 8 MiB record moved");
    cr_assert_eq(store_chunk_read(st, a, got, DEDUPD_CHUNK_MAX), (ssize_t) DEDUPD_CHUNK_MAX);
    cr_assert_eq(memcmp(got, big, DEDUPD_CHUNK_MAX), 0);
    expect_clean(st);
    store_close(st);
    free(big);
    free(got);
}
