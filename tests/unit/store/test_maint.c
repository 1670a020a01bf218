/* Tests server/store/check.c and scrub.c: clean stores pass, planted faults are found and
 * (where safe) repaired. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "helpers.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "util/log.h"

STORE_SUITE(maint);

struct findings {
    int n;
    char last[512];
};

static void
on_finding(void *arg, const char *line)
{
    struct findings *f = arg;
    f->n++;
    snprintf(f->last, sizeof(f->last), "%s", line);
}

/* 40 chunks over export 1, a few shared, a few freed, with hash entries. */
static struct store *
populated(uint64_t *ids)
{
    struct store_options o = {.seg_bytes = 64 << 10};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (int i = 0; i < 40; i++) {
        ids[i] = add(tx, (uint64_t) i + 1, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, ids[i]), 0);
        put_hash(tx, ids[i]);
    }
    for (int i = 0; i < 5; i++)
        cr_assert_eq(store_txn_map_set(tx, 2, (uint64_t) i, ids[i]), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (int i = 30; i < 40; i++)
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, 0), 0); /* frees 30..39 */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    return st;
}

Test(maint, clean_store_has_no_findings)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    struct findings f = {0};
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, on_finding, &f, &cr), 0);
    cr_assert_eq(cr.problems, 0, "%s", f.last);
    cr_assert_eq(cr.chunks, 30);
    cr_assert_eq(cr.map_entries, 35);
    cr_assert_eq(cr.hash_entries, 40, "the freed chunks' entries wait for the sweep");
    cr_assert_eq(cr.hash_stale, 10);
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, on_finding, &f, &sr), 0);
    cr_assert_eq(sr.chunks, 30);
    cr_assert_eq(sr.bytes, 30 * 4096);
    cr_assert_eq(sr.crc_errors + sr.hash_errors + sr.io_errors, 0);
    store_close(st);
}

Test(maint, broken_refcount_is_found_and_repaired)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    /* Plant the fault below the store: chunk 3's refcount says 7. */
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, ids[3], &ci), 0);
    struct meta_chunk_rec r = {.seg = ci.seg,
                               .off = ci.off,
                               .raw_len = ci.raw_len,
                               .stored_len = ci.stored_len,
                               .codec = ci.codec,
                               .hash_alg = ci.hash_alg,
                               .hash_len = ci.hash_len,
                               .refs = 7};
    memcpy(r.hash, ci.hash, sizeof(r.hash));
    uint8_t k[8], v[META_CHUNK_VAL_MAX];
    meta_key_chunk_encode(k, ids[3]);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_CHUNK, k, 8, v, meta_chunk_rec_encode(v, &r));
    /* and a hash entry naming a live chunk that has another hash (one naming a freed
     * chunk is no problem: invariant 2) */
    uint8_t hk[META_HASH_KEY_MAX], idv[8];
    uint8_t fake_hash[32] = {1, 2, 3};
    size_t hl = meta_key_hash_encode(hk, 1, fake_hash, 32);
    meta_val_id_encode(idv, ids[5]);
    meta_batch_put(b, META_CF_HASH, hk, hl, idv, 8);
    cr_assert_eq(meta_batch_commit(store_meta(st), b, false), 0);
    meta_batch_free(b);

    struct findings f = {0};
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, on_finding, &f, &cr), 0);
    cr_assert_eq(cr.problems, 2, "%s", f.last); /* the refcount and the hash entry */
    cr_assert_eq(cr.repaired, 0);
    cr_assert_eq(store_chunk_get(st, ids[3], &ci), 0);
    cr_assert_eq(ci.refs, 7); /* check alone changes nothing */

    cr_assert_eq(store_check(st, true, NULL, on_finding, &f, &cr), 0);
    cr_assert_eq(cr.repaired, 2);
    cr_assert_eq(store_chunk_get(st, ids[3], &ci), 0);
    cr_assert_eq(ci.refs, 2);
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}

/* Writes one entry straight into meta, as damage the store did not make. */
static void
put_behind_the_store(struct store *st, enum meta_cf cf, const void *k, size_t kl, const void *v,
                     size_t vl)
{
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, cf, k, kl, v, vl);
    cr_assert_eq(meta_batch_commit(store_meta(st), b, false), 0);
    meta_batch_free(b);
}

/* check (no repair) reports exactly one problem, whose line contains what. */
static void
expect_one_finding(struct store *st, const char *what)
{
    struct findings f = {0};
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, on_finding, &f, &cr), 0);
    cr_assert_eq(cr.problems, 1);
    cr_assert(strstr(f.last, what) != NULL, "%s", f.last);
}

Test(maint, map_entry_naming_missing_chunk_is_found)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    uint8_t k[META_MAP_KEY_LEN], v[8];
    meta_key_map_encode(k, 9, 9);
    meta_val_id_encode(v, 424242);
    put_behind_the_store(st, META_CF_MAP, k, sizeof(k), v, 8);
    expect_one_finding(st, "424242");
    store_close(st);
}

Test(maint, chunk_entry_pointing_past_its_segment_is_found)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    uint8_t k[META_CHUNK_KEY_LEN], v[META_CHUNK_VAL_MAX];
    meta_key_chunk_encode(k, ids[3]);
    ssize_t n = meta_get(store_meta(st), META_CF_CHUNK, k, sizeof(k), v, sizeof(v));
    cr_assert_gt(n, 0);
    struct meta_chunk_rec r;
    cr_assert_eq(meta_chunk_rec_decode(v, (size_t) n, &r), 0);
    r.off = 1ull << 40; /* no segment is that long */
    put_behind_the_store(st, META_CF_CHUNK, k, sizeof(k), v, meta_chunk_rec_encode(v, &r));
    expect_one_finding(st, "ends past the segment");
    store_close(st);
}

Test(maint, scrub_finds_a_flipped_byte)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    flip_data_byte(st, dir, ids[17], 4095, 1);
    struct findings f = {0};
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, on_finding, &f, &sr), 0);
    cr_assert_eq(sr.crc_errors, 1);
    cr_assert_eq(sr.hash_errors + sr.io_errors, 0);
    cr_assert_eq(f.n, 1);
    char want[64];
    snprintf(want, sizeof(want), "chunk %lu ", (unsigned long) ids[17]);
    cr_assert(strstr(f.last, want) != NULL, "%s", f.last);
    store_close(st);
}

Test(maint, scrub_finds_bytes_that_do_not_match_their_hash)
{
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, NULL, &st), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint8_t buf[4096], wrong[32] = {0};
    fill(buf, sizeof(buf), 3);
    uint64_t id;
    /* CRC is right (the store computed it) but the caller's hash is not of these bytes. */
    cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, wrong, 32, buf, 4096, &id), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, NULL, NULL, &sr), 0);
    cr_assert_eq(sr.hash_errors, 1);
    cr_assert_eq(sr.crc_errors, 0);
    store_close(st);
}

static int
cancel_at_once(void *arg, const struct store_progress *p)
{
    (void) arg;
    return p->done > 0;
}

Test(maint, progress_can_cancel_scrub)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, cancel_at_once, NULL, NULL, &sr), -ECANCELED);
    cr_assert_eq(sr.chunks, 1);
    store_close(st);
}

Test(maint, wrong_export_count_is_found_and_repaired)
{
    uint64_t ids[40];
    struct store *st = populated(ids);
    uint8_t k[7 + 4], v[8] = {0, 0, 0, 0, 0, 0, 3, 0xe7}; /* 999 */
    memcpy(k, "mapped:", 7);
    meta_key_export_encode(k + 7, 1);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_META, k, sizeof(k), v, 8);
    meta_key_export_encode(k + 7, 77); /* an export with a count and no map entry */
    meta_batch_put(b, META_CF_META, k, sizeof(k), v, 8);
    cr_assert_eq(meta_batch_commit(store_meta(st), b, false), 0);
    meta_batch_free(b);
    struct findings f = {0};
    struct store_check_result cr;
    cr_assert_eq(store_check(st, true, NULL, on_finding, &f, &cr), 0);
    cr_assert_eq(cr.problems, 2, "%s", f.last);
    cr_assert_eq(cr.repaired, 2);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 1, &n), 0);
    cr_assert_eq(n, 30);
    cr_assert_eq(store_export_mapped(st, 77, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}
