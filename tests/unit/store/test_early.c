/* Tests server/store/early.c: records appended before their transaction are readable once
 * it commits, are dead bytes when dropped, discarded or never committed (also across a
 * reopen), survive a failed commit for a retry, cross segment seals, keep compaction away
 * while pending, and hold up with several writers appending and committing at once. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>

#include "helpers.h"
#include "util/crc32c.h"

STORE_SUITE(early);

#define CS  4096
#define REC (CS + 64ull) /* record bytes of one chunk */

struct early_chunk {
    uint8_t buf[CS];
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
    struct store_new_chunk nc;
};

/* Describes chunk content fill(seed) for an early append. */
static void
prepare(struct early_chunk *c, uint64_t seed)
{
    fill(c->buf, CS, seed);
    hash_compute(DEDUPD_HASH_SHA256, c->buf, CS, c->hash);
    c->nc = (struct store_new_chunk){.buf = c->buf,
                                     .len = CS,
                                     .crc = crc32c(0, c->buf, CS),
                                     .hash_alg = DEDUPD_HASH_SHA256,
                                     .hash_len = 32,
                                     .hash = c->hash};
}

static void
append_seeds(struct store *st, struct early_chunk *c, struct store_new_chunk *nc, size_t n,
             uint64_t seed0)
{
    for (size_t i = 0; i < n; i++) {
        prepare(&c[i], seed0 + i);
        nc[i] = c[i].nc;
    }
    cr_assert_eq(store_append_early(st, nc, n), 0);
}

/* Maps block blk of export 1 to the early chunk nc in one committed transaction. */
static void
commit_early(struct store *st, const struct store_new_chunk *nc, uint64_t blk)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_add_early(tx, nc), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, blk, nc->id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

static struct store_stats
stats_of(struct store *st)
{
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    return s;
}

static void
expect_clean(struct store *st)
{
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
}

static struct store *
open_with(uint64_t seg_bytes)
{
    struct store_options o = {.seg_bytes = seg_bytes};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    return st;
}

Test(early, committed_records_read_back_and_count_live)
{
    struct store *st = open_with(0);
    struct early_chunk c[3];
    struct store_new_chunk nc[3];
    append_seeds(st, c, nc, 3, 100);
    cr_assert(nc[0].id && nc[1].id == nc[0].id + 1 && nc[2].id == nc[1].id + 1,
              "ids handed out in order");
    cr_assert_eq(nc[1].off, nc[0].off + REC);
    cr_assert_eq(store_chunk_read(st, nc[0].id, c[0].buf, CS), -ENOENT,
                 "not a chunk before its transaction commits");
    for (int i = 0; i < 3; i++)
        commit_early(st, &nc[i], (uint64_t) i);
    for (int i = 0; i < 3; i++)
        expect_bytes(st, nc[i].id, 100 + (uint64_t) i, CS);
    struct store_stats s = stats_of(st);
    cr_assert_eq(s.chunks, 3);
    cr_assert_eq(s.dead_bytes, 0);
    cr_assert_eq(s.disk_bytes, 3 * REC);
    expect_clean(st);
    store_close(st);
    st = open_with(0);
    for (int i = 0; i < 3; i++)
        expect_bytes(st, nc[i].id, 100 + (uint64_t) i, CS);
    cr_assert_eq(stats_of(st).dead_bytes, 0);
    expect_clean(st);
    store_close(st);
}

Test(early, dropped_and_discarded_records_are_dead_bytes)
{
    struct store *st = open_with(0);
    struct early_chunk c[3];
    struct store_new_chunk nc[3];
    append_seeds(st, c, nc, 3, 200);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_add_early(tx, &nc[0]), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, nc[0].id), 0);
    cr_assert_eq(store_txn_drop_early(tx, &nc[1]), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(stats_of(st).dead_bytes, REC, "the dropped record");
    store_early_discard(st, &nc[2], 1);
    struct store_stats s = stats_of(st);
    cr_assert_eq(s.dead_bytes, 2 * REC, "and the discarded one");
    cr_assert_eq(s.chunks, 1);
    cr_assert_eq(store_chunk_read(st, nc[1].id, c[1].buf, CS), -ENOENT);
    expect_bytes(st, nc[0].id, 200, CS);
    expect_clean(st);
    store_close(st);
    st = open_with(0);
    cr_assert_eq(stats_of(st).dead_bytes, 2 * REC, "persisted");
    store_close(st);
}

Test(early, records_a_later_commit_passed_are_dead_after_a_reopen)
{
    /* The record of a writer whose transaction never comes (a killed process), below the
     * segment size another writer's commit persisted. */
    struct store *st = open_with(0);
    struct early_chunk c[2];
    struct store_new_chunk nc[2];
    append_seeds(st, c, nc, 1, 300);
    append_seeds(st, c + 1, nc + 1, 1, 301);
    commit_early(st, &nc[1], 7);
    store_close(st);
    st = open_with(0);
    struct store_stats s = stats_of(st);
    cr_assert_eq(s.chunks, 1);
    cr_assert_eq(s.dead_bytes, REC, "the orphan record counted dead at recovery");
    cr_assert_eq(s.disk_bytes, 2 * REC);
    expect_bytes(st, nc[1].id, 301, CS);
    expect_clean(st);
    /* ids stay unique: the next chunk does not take the committed one's id */
    append_seeds(st, c, nc, 1, 302);
    cr_assert_gt(nc[0].id, nc[1].id);
    commit_early(st, &nc[0], 8);
    expect_bytes(st, nc[0].id, 302, CS);
    store_close(st);
}

Test(early, a_failed_commit_leaves_the_records_for_a_retry)
{
    struct store *st = open_with(0);
    struct early_chunk c[2];
    struct store_new_chunk nc[2];
    append_seeds(st, c, nc, 2, 400);
    store_test_fail_commits(st, -EIO, 0, 1);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(store_txn_add_early(tx, &nc[i]), 0);
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, nc[i].id), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), -EIO);
    cr_assert_eq(stats_of(st).dead_bytes, 0, "still the caller's");
    for (int i = 0; i < 2; i++)
        commit_early(st, &nc[i], (uint64_t) i); /* one transaction each, as a retry does */
    for (int i = 0; i < 2; i++)
        expect_bytes(st, nc[i].id, 400 + (uint64_t) i, CS);
    struct store_stats s = stats_of(st);
    cr_assert_eq(s.chunks, 2);
    cr_assert_eq(s.dead_bytes, 0);
    expect_clean(st);
    store_close(st);
}

Test(early, appends_seal_a_full_segment_and_compaction_waits_for_pending_records)
{
    /* 64 KiB segments hold 15 records: the 16th goes to a new segment. */
    struct store *st = open_with(64 << 10);
    struct early_chunk c[16];
    struct store_new_chunk nc[16];
    append_seeds(st, c, nc, 15, 500);
    append_seeds(st, c + 15, nc + 15, 1, 515);
    cr_assert_neq(nc[15].seg, nc[0].seg, "sealed, then appended to the next");
    cr_assert_eq(nc[15].off, 0);
    /* The full segment is sealed with nothing live in it yet: forced compaction must not
     * take its pending records for dead bytes and remove it. */
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_eq(res.segments_compacted, 0);
    for (int i = 0; i < 16; i++)
        commit_early(st, &nc[i], (uint64_t) i);
    for (int i = 0; i < 16; i++)
        expect_bytes(st, nc[i].id, 500 + (uint64_t) i, CS);
    /* Pending no more: free half of the first segment's chunks; now it may go. */
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (uint64_t b = 0; b < 15; b += 2)
        cr_assert_eq(store_txn_map_set(tx, 1, b, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_eq(res.segments_compacted, 1);
    for (int i = 1; i < 16; i += 2)
        expect_bytes(st, nc[i].id, 500 + (uint64_t) i, CS);
    expect_clean(st);
    store_close(st);
}

Test(early, bad_arguments_are_refused)
{
    struct store *st = open_with(0);
    struct early_chunk c;
    prepare(&c, 600);
    struct store_new_chunk bad = c.nc;
    bad.len = 0;
    cr_assert_eq(store_append_early(st, &bad, 1), -EINVAL);
    bad = c.nc;
    bad.hash_len = 20; /* SHA-256 digests are 32 bytes */
    cr_assert_eq(store_append_early(st, &bad, 1), -EINVAL);
    struct store_new_chunk nc = c.nc;
    cr_assert_eq(store_append_early(st, &nc, 1), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    bad = nc;
    bad.id = nc.id + 1; /* never handed out */
    cr_assert_eq(store_txn_add_early(tx, &bad), -EINVAL);
    bad = nc;
    bad.off = nc.off + REC; /* past the segment's end */
    cr_assert_eq(store_txn_add_early(tx, &bad), -EINVAL);
    cr_assert_eq(store_txn_add_early(tx, &nc), 0);
    cr_assert_eq(store_txn_add_early(tx, &nc), -EINVAL, "added twice");
    cr_assert_eq(store_txn_map_set(tx, 1, 0, nc.id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    expect_bytes(st, nc.id, 600, CS);
    expect_clean(st);
    store_close(st);
    struct store_options ro = {.read_only = true};
    cr_assert_eq(store_open(dir, &ro, &st), 0);
    nc = c.nc;
    cr_assert_eq(store_append_early(st, &nc, 1), -EROFS);
    store_close(st);
}

/* ---- several writers at once ---- */

#define WRITERS 4
#define ROUNDS  150

struct writer {
    struct store *st;
    unsigned k;
    int rc;
};

/* Each round appends 1-4 chunks early for its own blocks, then commits them (dropping
 * every fifth), while the others do the same: appends interleave with commits. */
static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    struct early_chunk *c = malloc(4 * sizeof(*c));
    struct store_new_chunk nc[4];
    for (unsigned r = 0; r < ROUNDS && w->rc == 0; r++) {
        unsigned n = 1 + (r + w->k) % 4;
        for (unsigned i = 0; i < n; i++) {
            prepare(&c[i], 10000 + (uint64_t) w->k * 100000 + r * 4 + i);
            nc[i] = c[i].nc;
        }
        w->rc = store_append_early(w->st, nc, n);
        struct store_txn *tx;
        if (w->rc || (w->rc = store_txn_begin(w->st, &tx)))
            break;
        for (unsigned i = 0; i < n && w->rc == 0; i++) {
            uint64_t blk = (uint64_t) w->k * 1000 + (r * 4 + i) % 200;
            if ((r * 4 + i) % 5 == 4)
                w->rc = store_txn_drop_early(tx, &nc[i]);
            else if ((w->rc = store_txn_add_early(tx, &nc[i])) == 0)
                w->rc = store_txn_map_set(tx, 1, blk, nc[i].id);
        }
        if (w->rc)
            store_txn_abort(tx);
        else
            w->rc = store_txn_commit(tx, NULL, NULL);
    }
    free(c);
    return NULL;
}

Test(early, concurrent_writers_lose_nothing)
{
    struct store *st = open_with(256 << 10); /* seals now and then */
    struct writer w[WRITERS];
    pthread_t t[WRITERS];
    for (unsigned k = 0; k < WRITERS; k++) {
        w[k] = (struct writer){.st = st, .k = k};
        cr_assert_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
    }
    for (unsigned k = 0; k < WRITERS; k++) {
        pthread_join(t[k], NULL);
        cr_assert_eq(w[k].rc, 0, "writer %u", k);
    }
    /* Every block holds the last seed its writer mapped there. */
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned k = 0; k < WRITERS; k++) {
            uint64_t last[200] = {0};
            for (unsigned r = 0; r < ROUNDS; r++) {
                unsigned n = 1 + (r + k) % 4;
                for (unsigned i = 0; i < n; i++)
                    if ((r * 4 + i) % 5 != 4)
                        last[(r * 4 + i) % 200] = 10000 + (uint64_t) k * 100000 + r * 4 + i;
            }
            for (unsigned b = 0; b < 200; b++) {
                uint64_t id;
                int rc = store_map_get(st, 1, (uint64_t) k * 1000 + b, &id);
                if (!last[b]) {
                    cr_assert_eq(rc, -ENOENT);
                    continue;
                }
                cr_assert_eq(rc, 0);
                expect_bytes(st, id, last[b], CS);
            }
        }
        struct store_stats s = stats_of(st);
        cr_assert_eq(s.disk_bytes - s.dead_bytes, s.chunks * REC,
                     "every byte on disk is live or dead");
        expect_clean(st);
        store_close(st);
        st = pass == 0 ? open_with(256 << 10) : NULL;
    }
}
