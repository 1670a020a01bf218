/* Tests server/store: open/close, transactions, refcounts, reads, persistence. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "store/internal.h"
#include "util/crc32c.h"
#include "util/log.h"

static char dir[64];
static char data[256];

static void
setup(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    cr_assert_not_null(tmpdir_new(dir, sizeof(dir)));
    snprintf(data, sizeof(data), "%s/a/b/data", dir); /* parents do not exist yet */
}

static void
teardown(void)
{
    tmpdir_rm(dir);
}

TestSuite(store, .init = setup, .fini = teardown);

static struct store *
open_store(uint64_t seg_bytes)
{
    struct store_options o = {.seg_bytes = seg_bytes, .block_cache_bytes = 8 << 20};
    struct store *st = NULL;
    cr_assert_eq(store_open(data, &o, &st), 0);
    return st;
}

Test(store, open_creates_layout_and_locks)
{
    struct store *st = open_store(0);
    char p[512];
    struct stat sb;
    snprintf(p, sizeof(p), "%s/segments", data);
    cr_assert_eq(stat(p, &sb), 0);
    snprintf(p, sizeof(p), "%s/db/CURRENT", data);
    cr_assert_eq(stat(p, &sb), 0);
    snprintf(p, sizeof(p), "%s/dedupd.lock", data);
    cr_assert_eq(stat(p, &sb), 0);
    struct store *second = NULL;
    cr_assert_eq(store_open(data, NULL, &second), -EBUSY);
    cr_assert_null(second);
    store_close(st);
    /* Released at close. */
    cr_assert_eq(store_open(data, NULL, &second), 0);
    store_close(second);
}

Test(store, write_map_read_back)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 65536);
    cr_assert_gt(b, a);
    cr_assert_eq(store_txn_map_set(tx, 7, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 7, 1, b), 0);
    cr_assert_eq(store_txn_map_set(tx, 7, 5, a), 0);
    struct store_chunk_info ci;
    cr_assert_eq(store_txn_chunk_get(tx, a, &ci), 0);
    cr_assert_eq(ci.refs, 2);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);

    expect_bytes(st, a, 1, 4096);
    expect_bytes(st, b, 2, 65536);
    uint64_t id;
    cr_assert_eq(store_map_get(st, 7, 5, &id), 0);
    cr_assert_eq(id, a);
    cr_assert_eq(store_map_get(st, 7, 2, &id), -ENOENT);
    cr_assert_eq(store_map_get(st, 8, 0, &id), -ENOENT);
    cr_assert_eq(store_chunk_get(st, a, &ci), 0);
    cr_assert_eq(ci.refs, 2);
    cr_assert_eq(ci.raw_len, 4096);
    cr_assert_eq(ci.hash_alg, DEDUPD_HASH_SHA256);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 7, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(store_export_mapped(st, 8, &n), 0);
    cr_assert_eq(n, 0);
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    cr_assert_eq(s.chunks, 2);
    cr_assert_eq(s.chunks_shared, 1);
    cr_assert_eq(s.raw_bytes, 4096 + 65536);
    cr_assert_geq(s.disk_bytes, 4096 + 65536 + 2 * 64);
    uint8_t small[100];
    cr_assert_eq(store_chunk_read(st, a, small, sizeof(small)), -EINVAL);
    cr_assert_eq(store_chunk_read(st, 999, small, sizeof(small)), -ENOENT);
    store_close(st);
}

struct scan {
    uint64_t idx[8], id[8];
    int n;
};

static int
scan_cb(void *arg, uint64_t idx, uint64_t id)
{
    struct scan *s = arg;
    s->idx[s->n] = idx;
    s->id[s->n++] = id;
    return s->n == 8 ? 1 : 0;
}

Test(store, map_scan_is_ordered_and_bounded)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096);
    uint64_t idxs[] = {300, 2, 256, 9, 1000};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(store_txn_map_set(tx, 3, idxs[i], a), 0);
    cr_assert_eq(store_txn_map_set(tx, 4, 5, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 2, 5, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct scan s = {0};
    cr_assert_eq(store_map_scan(st, 3, 2, 299, scan_cb, &s), 0); /* [2, 301) */
    cr_assert_eq(s.n, 4);
    cr_assert(s.idx[0] == 2 && s.idx[1] == 9 && s.idx[2] == 256 && s.idx[3] == 300);
    cr_assert_eq(s.id[0], a);
    memset(&s, 0, sizeof(s));
    cr_assert_eq(store_map_scan(st, 3, 0, UINT64_MAX, scan_cb, &s), 0);
    cr_assert_eq(s.n, 5);
    store_close(st);
}

struct freed_log {
    uint64_t ids[16];
    int n;
};

static void
on_freed(void *arg, const struct store_chunk_info *ci)
{
    struct freed_log *f = arg;
    f->ids[f->n++] = ci->id;
}

Test(store, refcounts_free_at_zero_and_leave_the_hash_entry_for_the_sweep)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 2, b), 0);
    /* The hash back-end adds its entries to the same batch. */
    struct store_chunk_info ca, cb;
    cr_assert_eq(store_txn_chunk_get(tx, a, &ca), 0);
    cr_assert_eq(store_txn_chunk_get(tx, b, &cb), 0);
    uint8_t hk[META_HASH_KEY_MAX], v[8];
    size_t hl = meta_key_hash_encode(hk, ca.hash_alg, ca.hash, ca.hash_len);
    meta_val_id_encode(v, a);
    meta_batch_put(store_txn_batch(tx), META_CF_HASH, hk, hl, v, 8);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);

    struct freed_log f = {0};
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, b), 0); /* a: 2 -> 1, b: 1 -> 2 */
    cr_assert_eq(store_txn_commit(tx, on_freed, &f), 0);
    cr_assert_eq(f.n, 0);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a, &ci), 0);
    cr_assert_eq(ci.refs, 1);

    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, 0), 0); /* a: 1 -> 0, freed */
    cr_assert_eq(store_txn_commit(tx, on_freed, &f), 0);
    cr_assert_eq(f.n, 1);
    cr_assert_eq(f.ids[0], a);
    cr_assert_eq(store_chunk_get(st, a, &ci), -ENOENT);
    uint8_t buf[4096];
    cr_assert_eq(store_chunk_read(st, a, buf, sizeof(buf)), -ENOENT);
    /* Its `hash` entry stays (invariant 2): it names an id no chunk has any more. check
     * counts it as stale, not as a problem; repair drops it. */
    uint64_t owner;
    cr_assert_eq(meta_get(store_meta(st), META_CF_HASH, hk, hl, v, 8), 8);
    cr_assert_eq(meta_val_id_decode(v, 8, &owner), 0);
    cr_assert_eq(owner, a);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    cr_assert_eq(cr.hash_stale, 1);
    cr_assert_eq(cr.hash_entries, 1);
    cr_assert_eq(store_check(st, true, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.hash_stale, 1);
    cr_assert_eq(meta_get(store_meta(st), META_CF_HASH, hk, hl, v, 8), -ENOENT);
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.hash_stale, 0);
    cr_assert_eq(cr.problems, 0);
    /* Data format 2: the old `rev` family gets nothing (record headers name their chunk). */
    struct meta_iter *it = meta_iter_new(store_meta(st), META_CF_REV);
    meta_iter_seek_first(it);
    cr_assert(!meta_iter_valid(it));
    meta_iter_free(it);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 1, &n), 0);
    cr_assert_eq(n, 2);
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    cr_assert_eq(s.chunks, 1);
    cr_assert_eq(s.chunks_shared, 1);
    cr_assert_eq(s.dead_bytes, 4096 + 64);
    store_close(st);
}

Test(store, hash_entry_naming_another_chunk_is_kept)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 1, 4096); /* same bytes, dedup off */
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, b), 0);
    struct store_chunk_info ca;
    cr_assert_eq(store_txn_chunk_get(tx, a, &ca), 0);
    uint8_t hk[META_HASH_KEY_MAX], v[8];
    size_t hl = meta_key_hash_encode(hk, ca.hash_alg, ca.hash, ca.hash_len);
    meta_val_id_encode(v, b);
    meta_batch_put(store_txn_batch(tx), META_CF_HASH, hk, hl, v, 8);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, 0), 0); /* frees a */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    uint64_t owner;
    cr_assert_eq(meta_get(store_meta(st), META_CF_HASH, hk, hl, v, 8), 8);
    meta_val_id_decode(v, 8, &owner);
    cr_assert_eq(owner, b);
    store_close(st);
}

Test(store, one_chunk_touched_many_times_in_one_txn)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 4096);
    for (uint64_t i = 0; i < 3000; i++) /* grows the overlay tables too */
        cr_assert_eq(store_txn_map_set(tx, 1, i, a), 0);
    for (uint64_t i = 0; i < 3000; i += 2)
        cr_assert_eq(store_txn_map_set(tx, 1, i, b), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, 0), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, a), 0);
    cr_assert_eq(store_txn_ref(tx, a, 5), 0);
    cr_assert_eq(store_txn_ref(tx, a, -5), 0);
    cr_assert_eq(store_txn_ref(tx, a, -1501), -EINVAL); /* would go below zero */
    cr_assert_eq(store_txn_ref(tx, 12345, 1), -ENOENT);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a, &ci), 0);
    cr_assert_eq(ci.refs, 1500);
    cr_assert_eq(store_chunk_get(st, b, &ci), 0);
    cr_assert_eq(ci.refs, 1500);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 1, &n), 0);
    cr_assert_eq(n, 3000);
    store_close(st);
}

Test(store, abort_leaves_nothing_and_unreferenced_new_chunk_is_dead)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    store_txn_abort(tx);
    uint64_t id;
    cr_assert_eq(store_map_get(st, 1, 0, &id), -ENOENT);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a, &ci), -ENOENT);

    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t b = add(tx, 2, 4096);
    cr_assert_gt(b, a);                                /* ids are never reused */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0); /* b never referenced */
    cr_assert_eq(store_chunk_get(st, b, &ci), -ENOENT);
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    cr_assert_eq(s.chunks, 0);
    cr_assert_eq(s.dead_bytes, 4096 + 64);
    store_close(st);
}

Test(store, everything_survives_reopen_across_sealed_segments)
{
    struct store *st = open_store(64 << 10); /* 15 records of 4 KiB per segment */
    uint64_t ids[200];
    for (int t = 0; t < 10; t++) {
        struct store_txn *tx;
        cr_assert_eq(store_txn_begin(st, &tx), 0);
        for (int i = 0; i < 20; i++) {
            int k = t * 20 + i;
            ids[k] = add(tx, (uint64_t) k + 100, 4096);
            cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) k, ids[k]), 0);
        }
        cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    }
    cr_assert_eq(store_sync(st), 0);
    struct store_stats s1, s2;
    cr_assert_eq(store_stats(st, &s1), 0);
    cr_assert_geq(s1.segments, 13);
    store_close(st);

    st = open_store(64 << 10);
    for (int k = 0; k < 200; k++) {
        uint64_t id;
        cr_assert_eq(store_map_get(st, 1, (uint64_t) k, &id), 0);
        cr_assert_eq(id, ids[k]);
        expect_bytes(st, id, (uint64_t) k + 100, 4096);
    }
    cr_assert_eq(store_stats(st, &s2), 0);
    cr_assert_eq(s2.chunks, 200);
    cr_assert_eq(s2.raw_bytes, s1.raw_bytes);
    cr_assert_eq(s2.disk_bytes, s1.disk_bytes);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 1, &n), 0);
    cr_assert_eq(n, 200);
    /* New ids continue after the old ones. */
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_gt(add(tx, 5, 4096), ids[199]);
    store_txn_abort(tx);
    store_close(st);
}

Test(store, flipped_byte_reads_as_euclean)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    flip_data_byte(st, data, a, 1000, 0x10);
    uint8_t buf[4096];
    cr_assert_eq(store_chunk_read(st, a, buf, sizeof(buf)), -EUCLEAN);
    store_close(st);
}

Test(store, bad_arguments_are_einval)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    uint8_t buf[16] = {0};
    uint64_t id;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_add_chunk(tx, 0, NULL, 0, buf, 0, &id), -EINVAL);
    cr_assert_eq(store_txn_add_chunk(tx, 1, NULL, 32, buf, 16, &id), -EINVAL);
    uint8_t h[32] = {0};
    cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 16, buf, 16, &id), -EINVAL);
    cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_XXH3_128, h, 16, buf, 16, &id), 0);
    cr_assert_eq(store_txn_add_chunk(tx, 0, NULL, 0, buf, 16, &id), 0); /* no hash: fine */
    cr_assert_eq(store_txn_map_set(tx, 1, 0, 777), -ENOENT);
    store_txn_abort(tx);
    store_close(st);
}

static int64_t
hash_owner(struct store *st, uint64_t seed)
{
    uint8_t buf[4096], h[32], hk[META_HASH_KEY_MAX], v[8];
    fill(buf, sizeof(buf), seed);
    hash_compute(DEDUPD_HASH_SHA256, buf, sizeof(buf), h);
    size_t hl = meta_key_hash_encode(hk, DEDUPD_HASH_SHA256, h, 32);
    uint64_t id;
    if (meta_get(store_meta(st), META_CF_HASH, hk, hl, v, 8) != 8)
        return -1;
    meta_val_id_decode(v, 8, &id);
    return (int64_t) id;
}

Test(store, freeing_a_chunk_keeps_a_hash_entry_repointed_in_the_same_batch)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    put_hash(tx, a);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(hash_owner(st, 1), (int64_t) a);
    /* Same bytes written again as a new chunk (say, after a verify mismatch), which the
     * back-end indexes, while the old one is freed by the overwrite. */
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t b = add(tx, 1, 4096);
    put_hash(tx, b);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, b), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(hash_owner(st, 1), (int64_t) b);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}

Test(store, an_unmapped_new_chunk_takes_its_hash_entry_with_it)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 4096);
    put_hash(tx, a);
    put_hash(tx, b);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, b), 0); /* a is never referenced at commit */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(hash_owner(st, 1), -1);
    cr_assert_eq(hash_owner(st, 2), (int64_t) b);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}

Test(store, map_set_known_uses_the_given_old_value_and_chunk_hold_sees_live_chunks)
{
    struct store *st = open_store(0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, a), 0);
    cr_assert_eq(store_txn_chunk_hold(tx, b), 0); /* new in this transaction */
    cr_assert_eq(store_txn_map_set(tx, 1, 2, b), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);

    /* Entry 0 read before the transaction (a): a loses a reference, b gains one. */
    uint64_t old;
    cr_assert_eq(store_map_get(st, 1, 0, &old), 0);
    cr_assert_eq(old, a);
    struct freed_log f = {0};
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_chunk_hold(tx, a), 0);
    cr_assert_eq(store_txn_chunk_hold(tx, b), 0);
    cr_assert_eq(store_txn_chunk_hold(tx, 999), -ENOENT);
    cr_assert_eq(store_txn_chunk_hold(tx, 0), -ENOENT);
    cr_assert_eq(store_txn_map_set_known(tx, 1, 0, old, NULL, b), 0);
    /* An unmapped entry (old 0) and one set earlier in the transaction. */
    cr_assert_eq(store_txn_map_set_known(tx, 1, 7, 0, NULL, a), 0);
    cr_assert_eq(store_txn_map_set_known(tx, 1, 7, 0, NULL, b), 0); /* the overlay says a */
    /* A stale value naming a chunk that no longer exists falls back to the database. */
    cr_assert_eq(store_txn_map_set_known(tx, 1, 1, 999, NULL, 0), 0);
    cr_assert_eq(store_txn_commit(tx, on_freed, &f), 0);
    cr_assert_eq(f.n, 1);
    cr_assert_eq(f.ids[0], a); /* 2 refs - entry 0 - entry 1 + entry 7 (a) - entry 7 (b) */
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a, &ci), -ENOENT);
    cr_assert_eq(store_chunk_get(st, b, &ci), 0);
    cr_assert_eq(ci.refs, 3);
    uint64_t n;
    cr_assert_eq(store_export_mapped(st, 1, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(store_map_get(st, 1, 1, &old), -ENOENT);
    cr_assert_eq(store_map_get(st, 1, 7, &old), 0);
    cr_assert_eq(old, b);
    struct store_check_result cres;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cres), 0);
    cr_assert_eq(cres.problems, 0);
    store_close(st);
}

Test(store, a_preloaded_old_entry_is_used_only_while_current)
{
    struct store *st = open_store(0);
    struct store_chunk_pre pre;
    cr_assert_eq(store_chunk_preload(st, 999, &pre), -ENOENT);
    cr_assert_eq(pre.id, 0);

    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t a = add(tx, 1, 4096), b = add(tx, 2, 4096);
    cr_assert_eq(store_txn_map_set(tx, 1, 0, a), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 5, b), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);

    /* Current: the overwrite frees b through its preloaded entry. */
    cr_assert_eq(store_chunk_preload(st, b, &pre), 0);
    cr_assert_eq(pre.id, b);
    struct freed_log f = {0};
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set_known(tx, 1, 5, b, &pre, 0), 0);
    cr_assert_eq(store_txn_commit(tx, on_freed, &f), 0);
    cr_assert_eq(f.n, 1);
    cr_assert_eq(f.ids[0], b);

    /* Stale: a is preloaded with 1 reference, gains a second (journaled), and a fold writes
     * that into its entry and empties the journal's table. The overwrite must see 2. */
    cr_assert_eq(store_chunk_preload(st, a, &pre), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0); /* folds first */
    store__ccache_drop_all(st); /* as other chunks' traffic would evict it */
    f.n = 0;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set_known(tx, 1, 0, a, &pre, 0), 0);
    cr_assert_eq(store_txn_commit(tx, on_freed, &f), 0);
    cr_assert_eq(f.n, 0, "a was freed through a stale preloaded refcount");
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a, &ci), 0);
    cr_assert_eq(ci.refs, 1);
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0);
    store_close(st);
}

/* Buffers filled from ids (seeds in want_seed; an id of 0 left at 0xee). */
static void
expect_chunks(uint8_t (*bufs)[4096], const uint64_t *ids, const uint64_t *want_seed, int n,
              const char *how)
{
    uint8_t want[4096];
    for (int i = 0; i < n; i++) {
        if (!ids[i]) {
            cr_assert_eq(bufs[i][0], 0xee, "%s: a skipped id leaves its buffer alone", how);
            continue;
        }
        fill(want, sizeof(want), want_seed[i]);
        cr_assert_eq(memcmp(bufs[i], want, 4096), 0, "%s: chunk %d", how, i);
    }
}

/* ... and store_chunks_read_cached, from the locations the commits cached and the page
 * cache, gives the same bytes or declines (-EAGAIN), never wrong ones. */
Test(store, chunks_read_many_matches_one_by_one_and_catches_a_flipped_byte)
{
    struct store *st = open_store(64 << 10); /* small segments: runs cross a seal */
    enum { N = 40 };
    uint64_t id[N];
    struct store_txn *tx;
    for (int t = 0; t < 2; t++) { /* two transactions: two runs of adjacent records */
        cr_assert_eq(store_txn_begin(st, &tx), 0);
        for (int i = t * N / 2; i < (t + 1) * N / 2; i++) {
            id[i] = add(tx, 100 + (uint64_t) i, 4096);
            cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, id[i]), 0);
        }
        cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    }
    /* Ids out of order, repeated, and skipped (0). */
    uint64_t want_seed[N + 3], ids[N + 3];
    for (int i = 0; i < N; i++) {
        ids[i] = id[i];
        want_seed[i] = 100 + (uint64_t) i;
    }
    ids[5] = id[30];
    want_seed[5] = 130;
    ids[N] = 0;
    ids[N + 1] = id[0];
    want_seed[N + 1] = 100;
    ids[N + 2] = id[N - 1];
    want_seed[N + 2] = 100 + N - 1;
    static uint8_t bufs[N + 3][4096];
    void *p[N + 3];
    for (int i = 0; i < N + 3; i++) {
        p[i] = bufs[i];
        memset(bufs[i], 0xee, 4096);
    }
    cr_assert_eq(store_chunks_read(st, ids, N + 3, p, 4096), 0);
    expect_chunks(bufs, ids, want_seed, N + 3, "blocking");
    for (int i = 0; i < N + 3; i++)
        memset(bufs[i], 0xee, 4096);
    cr_assert_eq(store_chunks_read_cached(st, ids, N + 3, p, 4096), 0);
    expect_chunks(bufs, ids, want_seed, N + 3, "cached");
    /* A missing chunk and a wrong length are errors, as with store_chunk_read; the cached
     * twin leaves them to it. */
    uint64_t bad[2] = {id[1], 99999};
    cr_assert_eq(store_chunks_read(st, bad, 2, p, 4096), -ENOENT);
    cr_assert_lt(store_chunks_read(st, ids, 8, p, 2048), 0);
    cr_assert_eq(store_chunks_read_cached(st, bad, 2, p, 4096), -EAGAIN);
    cr_assert_eq(store_chunks_read_cached(st, ids, 8, p, 2048), -EAGAIN);
    /* One chunk (the random-read case) goes the single-chunk way: the same answers. */
    uint64_t one = id[3], gone = 99999;
    memset(bufs[0], 0xee, 4096);
    cr_assert_eq(store_chunks_read_cached(st, &one, 1, p, 4096), 0);
    expect_chunks(bufs, &one, &want_seed[3], 1, "cached, one chunk");
    cr_assert_eq(store_chunks_read_cached(st, &gone, 1, p, 4096), -EAGAIN);

    /* A flipped byte in the middle of a run: -EUCLEAN, never wrong bytes. */
    flip_data_byte(st, data, id[12], 7, 0x01);
    cr_assert_eq(store_chunks_read_cached(st, id, N, p, 4096), -EAGAIN);
    cr_assert_eq(store_chunks_read(st, id, N, p, 4096), -EUCLEAN);
    cr_assert_eq(store_chunks_read(st, id, 12, p, 4096), 0); /* the ones before are fine */
    cr_assert_eq(store_chunks_read_cached(st, id, 12, p, 4096), 0);

    /* Locations not in the cache: declined. */
    store__loc_clear(st);
    cr_assert_eq(store_chunks_read_cached(st, id, 12, p, 4096), -EAGAIN);
    store_close(st);
}

static int nowait_calls, nowait_split; /* preadv_nowait calls; of them, with > 1 iovec */

static ssize_t
preadv_nowait_counting(int fd, const struct iovec *iov, int n, uint64_t off)
{
    nowait_calls++;
    nowait_split += n > 1;
    return store_io_real()->preadv_nowait(fd, iov, n, off);
}

/* store_chunks_read_cached_rec: each chunk's bytes where the record-shaped layout says,
 * slots of ids 0 untouched, and each run of adjacent records one contiguous copy (one
 * iovec) — the point of the layout. A flipped byte: declined, as everywhere. */
Test(store, chunks_read_into_record_shaped_memory_copies_each_run_in_one_piece)
{
    struct store_io_ops io = *store_io_real();
    io.preadv_nowait = preadv_nowait_counting;
    store_io_set(&io);
    struct store *st = open_store(64 << 10); /* small segments: runs end at seals */
    enum { N = 40 };
    uint64_t id[N];
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (int i = 0; i < N; i++) {
        id[i] = add(tx, 700 + (uint64_t) i, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, id[i]), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    uint64_t ids[N];
    memcpy(ids, id, sizeof(ids));
    ids[9] = 0; /* unmapped: its slot is the caller's */
    const size_t stride = store_rec_stride(4096), skip = store_rec_skip();
    cr_assert_geq(skip, 1);
    cr_assert_eq(stride, skip + 4096);
    static uint8_t rec[N * 4200];
    memset(rec, 0xee, sizeof(rec));
    cr_assert_eq(store_chunks_read_cached_rec(st, ids, N, rec, 4096), 0);
    uint8_t want[4096];
    for (int i = 0; i < N; i++) {
        const uint8_t *slot = rec + (size_t) i * stride;
        if (!ids[i]) {
            for (size_t b = 0; b < stride; b++)
                cr_assert_eq(slot[b], 0xee, "slot %d byte %zu was written", i, b);
            continue;
        }
        fill(want, sizeof(want), 700 + (uint64_t) i);
        cr_assert_eq(memcmp(slot + skip, want, 4096), 0, "chunk %d", i);
    }
    cr_assert_gt(nowait_calls, 2, "the seals and the hole split the runs");
    cr_assert_lt(nowait_calls, N / 4, "a read per run, not per chunk");
    cr_assert_eq(nowait_split, 0, "a run was copied in pieces");

    flip_data_byte(st, data, id[20], 100, 0x40);
    cr_assert_eq(store_chunks_read_cached_rec(st, ids, N, rec, 4096), -EAGAIN);
    cr_assert_eq(store_chunks_read_cached_rec(st, ids, 20, rec, 4096), 0, "the ones before");
    store_close(st);
    store_io_set(NULL);
}

Test(store, add_chunk_ref_writes_borrowed_bytes_across_a_seal)
{
    struct store *st = open_store(64 << 10); /* 15 records of 4 KiB per segment */
    enum { N = 40 };
    static uint8_t bufs[N][4096];
    uint64_t id[N];
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (int i = 0; i < N; i++) {
        uint8_t h[DEDUPD_HASH_MAX_LEN];
        fill(bufs[i], 4096, 500 + (uint64_t) i);
        hash_compute(DEDUPD_HASH_SHA256, bufs[i], 4096, h);
        if (i % 3 == 0) { /* copied and borrowed records interleaved */
            cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 32, bufs[i], 4096, &id[i]),
                         0);
        } else {
            uint32_t crc = crc32c(0, bufs[i], 4096) ^ (i == 7); /* record 7: a wrong CRC */
            cr_assert_eq(
                store_txn_add_chunk_ref(tx, DEDUPD_HASH_SHA256, h, 32, bufs[i], 4096, crc, &id[i]),
                0);
        }
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, id[i]), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    memset(bufs, 0, sizeof(bufs)); /* the store must not need them any more */
    store_close(st);
    st = open_store(64 << 10); /* recovery walks the segments: every record is whole */
    for (int i = 0; i < N; i++) {
        if (i == 7) {
            uint8_t b[4096];
            cr_assert_eq(store_chunk_read(st, id[i], b, sizeof(b)), -EUCLEAN);
            continue;
        }
        expect_bytes(st, id[i], 500 + (uint64_t) i, 4096);
    }
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    cr_assert_geq(s.segments, 3);
    store_close(st);
}

/* The transactions' cache of chunk entries must follow every committed change: a chunk
 * cached by a transaction, then moved by compaction, then referenced again must keep its
 * new location; refcounts repaired by check must be the ones the next transaction sees. */
Test(store, cached_chunk_entries_follow_compaction_and_repair)
{
    struct store *st = open_store(64 << 10);
    struct store_txn *tx;
    uint64_t a = 0;
    for (int i = 0; i < 40; i++) { /* fills and seals a few segments */
        cr_assert_eq(store_txn_begin(st, &tx), 0);
        uint64_t id = add(tx, 700 + (uint64_t) i, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, (uint64_t) i, id), 0);
        cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
        if (i == 0)
            a = id;
    }
    cr_assert_eq(store_txn_begin(st, &tx), 0); /* a is now in the cache, refs 2 */
    cr_assert_eq(store_txn_map_set(tx, 2, 0, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0); /* everything else in a's segment dies */
    for (uint64_t i = 1; i < 40; i++)
        cr_assert_eq(store_txn_map_set(tx, 1, i, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_chunk_info before, after;
    cr_assert_eq(store_chunk_get(st, a, &before), 0);
    struct store_compact_result cres;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &cres), 0);
    cr_assert_eq(store_chunk_get(st, a, &after), 0);
    cr_assert(after.seg != before.seg || after.off != before.off, "a was moved");

    cr_assert_eq(store_txn_begin(st, &tx), 0); /* a referenced again after the move */
    cr_assert_eq(store_txn_map_set(tx, 2, 1, a), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_chunk_info now;
    cr_assert_eq(store_chunk_get(st, a, &now), 0);
    cr_assert_eq(now.seg, after.seg);
    cr_assert_eq(now.off, after.off);
    cr_assert_eq(now.refs, 3);
    expect_bytes(st, a, 700, 4096);

    /* A map entry written behind the store's back makes a's refcount wrong; check repairs
     * it (4): the next transaction must start from the repaired value, not a cached 3. */
    uint8_t key[META_MAP_KEY_LEN], val[META_ID_VAL_LEN];
    meta_key_map_encode(key, 3, 0);
    meta_val_id_encode(val, a);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_MAP, key, sizeof(key), val, sizeof(val));
    cr_assert_eq(meta_batch_commit(store_meta(st), b, false), 0);
    meta_batch_free(b);
    struct store_check_result chk;
    cr_assert_eq(store_check(st, true, NULL, NULL, NULL, &chk), 0);
    cr_assert_geq(chk.repaired, 1);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 2, 0, 0), 0); /* 4 -> 3 */
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_chunk_get(st, a, &now), 0);
    cr_assert_eq(now.refs, 3);
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &chk), 0);
    cr_assert_eq(chk.problems, 0);
    store_close(st);
}

/* The file length of segment id, by stat. */
static uint64_t
seg_file_len(struct store *st, uint32_t id)
{
    char path[4096];
    store__seg_path(st, id, path, sizeof(path));
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s", path);
    return (uint64_t) sb.st_size;
}

/* One transaction of n chunks of 4 KiB, seeds seed.., mapped to blocks blk..; returns the
 * first id. */
static uint64_t
commit_chunks(struct store *st, unsigned n, uint64_t seed, uint64_t blk)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t first = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t id = add(tx, seed + i, 4096);
        first = i ? first : id;
        cr_assert_eq(store_txn_map_set(tx, 1, blk + i, id), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    return first;
}

/* The segment writes of the store: how many, and how many found the file already
 * reaching the end of the last window they write (zeros went first). */
#define WINDOW (256u << 10)
static unsigned long appends, appends_over_zeros;

static ssize_t
pwritev_counting_zeros_first(int fd, const struct iovec *iov, int n, uint64_t off)
{
    uint64_t end = off, flen = 0;
    for (int i = 0; i < n; i++)
        end += iov[i].iov_len;
    cr_assert_eq(store_io_real()->fsize(fd, &flen), 0);
    appends++;
    appends_over_zeros += flen >= (end + WINDOW - 1) / WINDOW * WINDOW;
    return store_io_real()->pwritev(fd, iov, n, off);
}

/* Every append, large or small, first fills the window-aligned stretch it writes with
 * zeros (so the page cache holds its records in window-sized folios); the zeros past the
 * size end at a window boundary, and a seal or a close cuts them off. */
Test(store, appends_write_over_zeroed_windows_and_seals_and_close_cut_the_zeros)
{
    struct store_io_ops io = *store_io_real();
    io.pwritev = pwritev_counting_zeros_first;
    store_io_set(&io);
    struct store *st = open_store(1 << 20);
    commit_chunks(st, 32, 100, 0); /* one 130 KiB append */
    uint32_t first = st->active->id;
    cr_assert_eq(seg_file_len(st, first), WINDOW);
    uint64_t ids[400];
    for (unsigned i = 0; i < 400; i++) { /* 1.6 MiB in 4 KiB appends: past one seal */
        ids[i] = commit_chunks(st, 1, 1000 + i, 100 + i);
        uint64_t size = st->active->size, flen = seg_file_len(st, st->active->id);
        cr_assert(flen >= size && flen < size + WINDOW && flen % WINDOW == 0,
                  "append %u: %lu bytes, file %lu", i, (unsigned long) size, (unsigned long) flen);
    }
    cr_assert_neq(st->active->id, first, "no seal happened");
    cr_assert_gt(appends, 400);
    cr_assert_eq(appends_over_zeros, appends, "a write went where no zeros were");
    for (uint32_t id = first; id < st->active->id; id++) {
        struct store_seg *sg = store__seg_find(st, id);
        cr_assert_not_null(sg);
        cr_assert_eq(seg_file_len(st, id), sg->size, "sealed seg %u keeps zeros", id);
    }
    /* What lies past the active segment's size is zeros. */
    struct store_seg *a = st->active;
    static uint8_t tail[WINDOW], z[WINDOW];
    size_t past = seg_file_len(st, a->id) - a->size;
    cr_assert_gt(past, 0, "the last append ended on a window boundary: pick another count");
    cr_assert_eq(pread(a->fd, tail, past, (off_t) a->size), (ssize_t) past);
    cr_assert_eq(memcmp(tail, z, past), 0);
    uint32_t last = a->id;
    store_close(st);
    st = open_store(1 << 20);
    cr_assert_eq(seg_file_len(st, last), st->active->size, "close left the zeros");
    for (unsigned i = 0; i < 400; i++)
        expect_bytes(st, ids[i], 1000 + i, 4096);
    store_close(st);
    store_io_set(NULL);
}

/* New data stops at the free-space reserve with -ENOSPC (in a transaction and in an early
 * append) and changes nothing; what frees space still works: metadata-only changes and
 * compaction's moves, which may use the reserve. */
Test(store, new_data_stops_at_the_free_space_reserve)
{
    struct store *st = open_store(64 << 10);
    uint64_t ids[64];
    for (unsigned i = 0; i < 64; i++)
        ids[i] = commit_chunks(st, 1, 500 + i, i);
    for (unsigned i = 0; i < 64; i++) /* 3 of 4 overwritten: dead bytes to reclaim */
        if (i % 4)
            commit_chunks(st, 1, 900 + i, i);
    store_close(st);
    struct store_options o = {.seg_bytes = 64 << 10, .reserve_bytes = 1ULL << 62};
    st = NULL;
    cr_assert_eq(store_open(data, &o, &st), 0);
    struct store_stats ss;
    cr_assert_eq(store_stats(st, &ss), 0);
    cr_assert_not(ss.new_data_refused, "nothing refused yet");
    cr_assert_eq(ss.reserve_bytes, 1ULL << 62);
    cr_assert(ss.free_bytes > 0 && ss.free_bytes < (1ULL << 62), "free: %lu",
              (unsigned long) ss.free_bytes);
    uint8_t buf[4096], h[DEDUPD_HASH_MAX_LEN];
    fill(buf, sizeof(buf), 77);
    hash_compute(DEDUPD_HASH_SHA256, buf, sizeof(buf), h);
    struct store_txn *tx;
    uint64_t id = 0;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 32, buf, sizeof(buf), &id),
                 -ENOSPC);
    store_txn_abort(tx);
    struct store_new_chunk c = {.buf = buf,
                                .len = sizeof(buf),
                                .crc = crc32c(0, buf, sizeof(buf)),
                                .hash_alg = DEDUPD_HASH_SHA256,
                                .hash_len = 32,
                                .hash = h};
    cr_assert_eq(store_append_early(st, &c, 1), -ENOSPC);
    cr_assert_eq(store_stats(st, &ss), 0);
    cr_assert(ss.new_data_refused, "status says new data is refused");
    /* Unmapping block 1 (metadata only) commits. */
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, 1, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, true, NULL, NULL, &res), 0);
    cr_assert_gt(res.bytes_moved, 0, "compaction moved nothing under the reserve");
    for (unsigned i = 0; i < 64; i += 4)
        expect_bytes(st, ids[i], 500 + i, 4096);
    store_close(st);
}
