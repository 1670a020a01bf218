/* Data format 1 -> 2: a store written in format 1 (a `rev` entry per chunk, chunk values
 * of version 1 without the flags byte) opens, is upgraded, reads back every byte, frees,
 * compacts and checks clean under format 2. The format-1 directory is made by rewriting a
 * format-2 one the way format 1 stored it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "dedupd/version.h"
#include "helpers.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "util/log.h"

STORE_SUITE(format);

#define N 60

static struct store_options opts = {.seg_bytes = 64 << 10};

/* Rewrites the closed store's database as format 1 stored it. */
static void
make_format_1(void)
{
    struct meta *m = open_db_of(dir, false);
    struct meta_batch *b = meta_batch_new();
    struct meta_iter *it = meta_iter_new(m, META_CF_CHUNK);
    int n = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const uint8_t *v = meta_iter_value(it, &vl);
        uint64_t id;
        struct meta_chunk_rec r;
        cr_assert_eq(meta_key_chunk_decode(k, kl, &id), 0);
        cr_assert_eq(meta_chunk_rec_decode(v, vl, &r), 0);
        /* version 1: the version-2 layout without the flags byte at offset 32 */
        uint8_t v1[META_CHUNK_VAL_MAX];
        memcpy(v1, v, 32);
        v1[0] = 1;
        memcpy(v1 + 32, v + 33, vl - 33);
        meta_batch_put(b, META_CF_CHUNK, k, kl, v1, vl - 1);
        uint8_t rk[12], rv[META_ID_VAL_LEN];
        for (int i = 0; i < 4; i++)
            rk[i] = (uint8_t) (r.seg >> (24 - 8 * i));
        for (int i = 0; i < 8; i++)
            rk[4 + i] = (uint8_t) (r.off >> (56 - 8 * i));
        meta_val_id_encode(rv, id);
        meta_batch_put(b, META_CF_REV, rk, sizeof(rk), rv, sizeof(rv));
        n++;
    }
    meta_iter_free(it);
    cr_assert_eq(n, N);
    uint8_t ver[4] = {0, 0, 0, 1};
    meta_batch_put(b, META_CF_META, "format_version", 14, ver, 4);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
}

static bool
rev_empty(struct store *st)
{
    struct meta_iter *it = meta_iter_new(store_meta(st), META_CF_REV);
    meta_iter_seek_first(it);
    bool empty = !meta_iter_valid(it);
    meta_iter_free(it);
    return empty;
}

Test(format, a_format_1_store_is_upgraded_and_keeps_working)
{
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    uint64_t ids[N];
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned i = 0; i < N; i++) {
        ids[i] = add(tx, 100 + i, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, i, ids[i]), 0);
        put_hash(tx, ids[i]);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_sync(st), 0);
    store_close(st);
    make_format_1();

    cr_assert_eq(store_open(dir, &opts, &st), 0);
    cr_assert(rev_empty(st), "the upgrade emptied rev");
    for (unsigned i = 0; i < N; i++)
        expect_bytes(st, ids[i], 100 + i, 4096);
    /* Free the first half (version-1 values: whom their hash entry names is read) and
     * compact every segment with a dead byte: the walk finds the live records. */
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned i = 0; i < N / 2; i++)
        cr_assert_eq(store_txn_map_set(tx, 1, i, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_gt(res.segments_compacted, 0);
    for (unsigned i = N / 2; i < N; i++)
        expect_bytes(st, ids[i], 100 + i, 4096);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    cr_assert_eq(cr.chunks, N / 2);
    cr_assert_eq(cr.hash_entries, N, "the freed chunks' entries wait for the sweep");
    cr_assert_eq(cr.hash_stale, N / 2);
    cr_assert(rev_empty(st));
    store_close(st);

    struct meta *m = open_db_of(dir, true);
    uint8_t ver[4];
    cr_assert_eq(meta_get(m, META_CF_META, "format_version", 14, ver, 4), 4);
    cr_assert_eq(ver[3], DEDUPD_FORMAT_VERSION);
    meta_close(m);
}

/* Data format 2 -> 3: nothing to convert (a format-2 directory has no refcount journal),
 * but the version is raised at the first read-write open, and the journal then works. */
Test(format, a_format_2_store_is_upgraded_to_3)
{
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t id = add(tx, 7, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    store_close(st);
    struct meta *m = open_db_of(dir, false);
    struct meta_batch *b = meta_batch_new();
    uint8_t ver[4] = {0, 0, 0, 2};
    meta_batch_put(b, META_CF_META, "format_version", 14, ver, 4);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);

    cr_assert_eq(store_open(dir, &opts, &st), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, id), 0); /* refcount 2, journaled */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, id, &ci), 0);
    cr_assert_eq(ci.refs, 2);
    expect_bytes(st, id, 7, 4096);
    store_close(st);
    m = open_db_of(dir, true);
    cr_assert_eq(meta_get(m, META_CF_META, "format_version", 14, ver, 4), 4);
    cr_assert_eq(ver[3], 3);
    meta_close(m);
}
