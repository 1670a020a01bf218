/* Tests server/store/mapend.c through store_map_get: look-ups past what a region of the
 * block map has ever held answer "unmapped" without RocksDB, and never hide an entry — as
 * commits raise a region's end, for regions read before and after a commit, across exports
 * and across a reopen (ends read back from the database). */
#include <criterion/criterion.h>
#include <errno.h>

#include "helpers.h"
#include "store/internal.h"

STORE_SUITE(mapend);

#define R STORE_MAPEND_REGION

/* Maps (export, idx) to a new chunk of content seed; returns its id. */
static uint64_t
map_new(struct store *st, uint32_t export_id, uint64_t idx, uint64_t seed)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t id = add(tx, seed, 4096);
    cr_assert_eq(store_txn_map_set(tx, export_id, idx, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    return id;
}

static void
unmap(struct store *st, uint32_t export_id, uint64_t idx)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, export_id, idx, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

static void
expect_map(struct store *st, uint32_t export_id, uint64_t idx, uint64_t want)
{
    uint64_t id = 0;
    int rc = store_map_get(st, export_id, idx, &id);
    if (!want) {
        cr_assert_eq(rc, -ENOENT, "export %u chunk %lu: unmapped expected, got %d", export_id,
                     (unsigned long) idx, rc);
        return;
    }
    cr_assert_eq(rc, 0, "export %u chunk %lu: mapped expected", export_id, (unsigned long) idx);
    cr_assert_eq(id, want);
}

/* The fast answer itself (store_map_get may answer from the location cache). */
static void
expect_unwritten(struct store *st, uint32_t export_id, uint64_t idx, bool want)
{
    cr_assert_eq(store__map_unwritten(st, export_id, idx), want, "export %u chunk %lu", export_id,
                 (unsigned long) idx);
}

Test(mapend, entries_are_found_wherever_commits_put_them)
{
    struct store_options o = {0};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    /* Region 0 read while empty, then written at 10: the end moves past it. */
    expect_map(st, 1, 10, 0);
    expect_map(st, 1, 11, 0);
    expect_unwritten(st, 1, 10, true);
    uint64_t a = map_new(st, 1, 10, 1);
    expect_unwritten(st, 1, 10, false);
    expect_unwritten(st, 1, 11, true);
    expect_map(st, 1, 10, a);
    expect_map(st, 1, 11, 0);
    /* Below the end, still unmapped; past it again. */
    uint64_t b = map_new(st, 1, 5, 2);
    expect_map(st, 1, 5, b);
    uint64_t c = map_new(st, 1, R - 1, 3); /* the region's last chunk */
    expect_map(st, 1, R - 1, c);
    expect_map(st, 1, R - 2, 0);
    expect_unwritten(st, 1, R - 2, false); /* below the end: RocksDB answers */
    expect_unwritten(st, 1, R, true);      /* the next region, empty */
    /* A region never looked up before its commit; another export's same indexes. */
    uint64_t d = map_new(st, 1, 3 * R + 7, 4);
    expect_unwritten(st, 1, 3 * R + 7, false); /* its end read now, with the entry */
    expect_unwritten(st, 1, 3 * R + 8, true);
    expect_map(st, 1, 3 * R + 7, d);
    expect_map(st, 2, 10, 0);
    uint64_t e = map_new(st, 2, 10, 5);
    expect_map(st, 2, 10, e);
    expect_map(st, 1, 10, a);
    /* Unmapping does not lower an end; mapping again below it is found. */
    unmap(st, 1, R - 1);
    expect_map(st, 1, R - 1, 0);
    expect_unwritten(st, 1, R - 1, false);
    uint64_t f = map_new(st, 1, R - 3, 6);
    expect_map(st, 1, R - 3, f);
    /* Far past every region read so far (the table grows). */
    uint64_t g = map_new(st, 1, 5000 * (uint64_t) R + 1, 7);
    expect_map(st, 1, 5000 * (uint64_t) R + 1, g);
    expect_map(st, 1, 5000 * (uint64_t) R, 0);
    store_close(st);

    /* Reopened: every end is read back from the database. */
    cr_assert_eq(store_open(dir, &o, &st), 0);
    expect_unwritten(st, 1, 10, false);
    expect_unwritten(st, 1, R - 3, false);
    expect_unwritten(st, 1, R - 2, true); /* the unmapped last chunk no longer counts */
    expect_unwritten(st, 1, 3 * R + 8, true);
    expect_unwritten(st, 2, 11, true);
    expect_map(st, 1, 11, 0);
    expect_map(st, 1, 10, a);
    expect_map(st, 1, 5, b);
    expect_map(st, 1, R - 1, 0);
    expect_map(st, 1, R - 3, f);
    expect_map(st, 1, 3 * R + 7, d);
    expect_map(st, 1, 3 * R + 8, 0);
    expect_map(st, 2, 10, e);
    expect_map(st, 1, 5000 * (uint64_t) R + 1, g);
    expect_map(st, 3, 0, 0);
    /* A region read after the reopen, then written past its end. */
    uint64_t h = map_new(st, 1, 3 * R + 100, 8);
    expect_unwritten(st, 1, 3 * R + 100, false);
    expect_unwritten(st, 1, 3 * R + 101, true);
    expect_map(st, 1, 3 * R + 100, h);
    expect_map(st, 1, 3 * R + 7, d);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}
