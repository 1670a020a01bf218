/* Tests server/index/filter.c through the rocksdb back-end: the in-memory filter answers
 * absent keys without RocksDB and never hides a committed key — after a build at open,
 * for keys committed while a build scans, and across the rebuilds that grow it. Batches
 * carry a chunk record with each key, as the store's do: builds read the keys from them.
 * And what the filter decides for the back-end's handling of freed chunks: the sweep of
 * their entries, and look-ups of recently freed ids. */
#include <criterion/criterion.h>
#include <errno.h>

#include "fx.h"
#include "index/internal.h"
#include "meta/keys.h"

static struct index_filter *
filter_of(struct fx *f)
{
    struct index_filter *x = index__rocksdb_filter(f->ix);
    cr_assert_not_null(x);
    return x;
}

/* Stages the key of seed (chunk id 1000 + seed) and, as the store does in the same batch,
 * its chunk's record, which the filter's builds read. 0 or index_stage's error. */
static int
stage_one(struct fx *f, uint32_t seed)
{
    struct meta_chunk_rec r = {.seg = 1,
                               .raw_len = 4096,
                               .stored_len = 4096,
                               .hash_alg = 1,
                               .hash_len = 32,
                               .refs = 1,
                               .owns_hash = true};
    make_hash(r.hash, seed);
    uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
    meta_key_chunk_encode(key, 1000 + seed);
    meta_batch_put(f->mb, META_CF_CHUNK, key, sizeof(key), val, meta_chunk_rec_encode(val, &r));
    return index_stage(f->ix, &f->b, 1, r.hash, 32, 1000 + seed);
}

/* Stages keys [from, from + n) into the fixture's batch. */
static void
stage_keys(struct fx *f, uint32_t from, uint32_t n)
{
    for (uint32_t s = from; s < from + n; s++)
        cr_assert_eq(stage_one(f, s), 0);
}

static void
commit_keys(struct fx *f, uint32_t from, uint32_t n, uint32_t per_batch)
{
    for (uint32_t s = from; s < from + n; s += per_batch) {
        stage_keys(f, s, per_batch < from + n - s ? per_batch : from + n - s);
        fx_commit(f);
    }
}

static void
assert_found(struct fx *f, uint32_t from, uint32_t n)
{
    uint8_t h[32];
    for (uint32_t s = from; s < from + n; s++) {
        uint64_t id = 0;
        make_hash(h, s);
        cr_assert_eq(index_lookup(f->ix, 1, h, 32, &id), 0, "key %u hidden", s);
        cr_assert_eq(id, 1000 + s);
    }
}

/* Looks up n keys never committed; returns how many the filter answered. */
static uint64_t
skipped_absent(struct fx *f, uint32_t from, uint32_t n)
{
    struct index_usage u0, u1;
    index_usage(f->ix, &u0);
    uint8_t h[32];
    for (uint32_t s = from; s < from + n; s++) {
        uint64_t id;
        make_hash(h, s);
        cr_assert_eq(index_lookup(f->ix, 1, h, 32, &id), -ENOENT);
    }
    index_usage(f->ix, &u1);
    return u1.filter_skips - u0.filter_skips;
}

Test(filter, answers_absent_keys_without_rocksdb)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    index__filter_wait(filter_of(&f));
    commit_keys(&f, 1, 2000, 500);
    assert_found(&f, 1, 2000);
    /* ~1% of absent keys pass a filter at its designed rate; 3% would be a broken one. */
    cr_assert_geq(skipped_absent(&f, 100001, 10000), 9700);
    struct index_usage u;
    index_usage(f.ix, &u);
    cr_assert_geq(u.filter_bytes, INDEX_FILTER_MIN_KEYS * 10 / 8);
    cr_assert_eq(u.filter_builds, 1);
    fx_close(&f);
}

Test(filter, built_at_open_from_every_committed_key)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    commit_keys(&f, 1, 3000, 1000);
    /* Committed but never published, as after a crash between the two. */
    stage_keys(&f, 5001, 500);
    cr_assert_eq(meta_batch_commit(f.m, f.mb, false), 0);
    meta_batch_clear(f.mb);
    index_batch_reset(&f.b, f.mb);
    index_close(f.ix);
    cr_assert_eq(index_open("rocksdb", f.m, NULL, &f.ix), 0);
    index__filter_wait(filter_of(&f));
    assert_found(&f, 1, 3000);
    assert_found(&f, 5001, 500);
    cr_assert_geq(skipped_absent(&f, 200001, 5000), 4850);
    fx_close(&f);
}

struct during {
    struct fx *f;
    int rc;
};

/* In the builder thread, after its snapshot: the batch staged before the build began
 * commits now, and another is staged and committed. Neither is in the snapshot. */
static void
commit_during_scan(void *arg)
{
    struct during *d = arg;
    d->rc = meta_batch_commit(d->f->m, d->f->mb, false);
    index_publish(d->f->ix, &d->f->b);
    meta_batch_clear(d->f->mb);
    index_batch_reset(&d->f->b, d->f->mb);
    for (uint32_t s = 7001; s <= 7100 && d->rc == 0; s++)
        d->rc = stage_one(d->f, s);
    if (d->rc == 0)
        d->rc = meta_batch_commit(d->f->m, d->f->mb, false);
    index_publish(d->f->ix, &d->f->b);
    meta_batch_clear(d->f->mb);
    index_batch_reset(&d->f->b, d->f->mb);
}

Test(filter, keys_committed_while_a_build_scans_are_kept)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    struct index_filter *x = filter_of(&f);
    index__filter_wait(x);
    commit_keys(&f, 1, 1000, 250);
    stage_keys(&f, 6001, 100); /* staged before the build, committed during its scan */
    struct during d = {.f = &f, .rc = -1};
    index__filter_set_hook(x, commit_during_scan, &d);
    index__filter_rebuild(x);
    index__filter_wait(x);
    index__filter_set_hook(x, NULL, NULL);
    cr_assert_eq(d.rc, 0);
    struct index_usage u;
    index_usage(f.ix, &u);
    cr_assert_eq(u.filter_builds, 2);
    cr_assert_gt(u.filter_bytes, 0, "the rebuilt filter is in use");
    assert_found(&f, 1, 1000);
    assert_found(&f, 6001, 100);
    assert_found(&f, 7001, 100);
    fx_close(&f);
}

Test(filter, grows_when_full_and_keeps_every_key_across_scan_pieces)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    struct index_filter *x = filter_of(&f);
    index__filter_wait(x);
    index__filter_set_sizes(x, 1000, 97); /* scans of many pieces, odd boundaries */
    index__filter_rebuild(x);
    index__filter_wait(x);
    struct index_usage u0, u1;
    index_usage(f.ix, &u0);
    cr_assert_lt(u0.filter_bytes, 2048);
    /* Batches of 250 with a wait after each, so a build that a batch asked for ends before
     * the next batch: the filter then keeps up and lets nothing through unchecked. */
    for (uint32_t s = 1; s <= 6000; s += 250) {
        commit_keys(&f, s, 250, 250);
        index__filter_wait(x);
    }
    index_usage(f.ix, &u1);
    cr_assert_geq(u1.filter_builds, u0.filter_builds + 2, "grew %llu times",
                  (unsigned long long) (u1.filter_builds - u0.filter_builds));
    cr_assert_geq(u1.filter_bytes, 6000 * 10 / 8);
    assert_found(&f, 1, 6000);
    cr_assert_geq(skipped_absent(&f, 300001, 5000), 4850);
    fx_close(&f);
}

static uint64_t
hash_entries(struct fx *f)
{
    struct meta_iter *it = meta_iter_new(f->m, META_CF_HASH);
    uint64_t n = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it))
        n++;
    meta_iter_free(it);
    return n;
}

/* The sweep (meta_set_hash_sweep, installed by the rocksdb back-end): RocksDB's compactions
 * of `hash` drop the entries of freed chunks — once a rebuilt filter has left their hashes
 * out — and never an entry of a live chunk. */
Test(filter, the_sweep_drops_entries_of_freed_chunks_and_keeps_live_ones)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    index__filter_wait(filter_of(&f));
    commit_keys(&f, 1, 400, 100);
    /* The store frees a chunk by deleting its record and leaving its `hash` entry. */
    for (uint32_t s = 1; s <= 200; s++) {
        uint8_t key[META_CHUNK_KEY_LEN];
        meta_key_chunk_encode(key, 1000 + s);
        meta_batch_delete(f.mb, META_CF_CHUNK, key, sizeof(key));
    }
    fx_commit(&f);
    /* The filter still holds the freed hashes (a bloom filter forgets nothing): kept. */
    cr_assert_eq(meta_compact(f.m, META_CF_HASH), 0);
    cr_assert_eq(hash_entries(&f), 400);
    cr_assert_eq(meta_hash_swept(f.m), 0);

    index__filter_rebuild(filter_of(&f));
    index__filter_wait(filter_of(&f));
    cr_assert_eq(meta_compact(f.m, META_CF_HASH), 0);
    uint64_t swept = meta_hash_swept(f.m);
    /* All but the filter's false "maybe"s (~1% at its designed rate; 5% would be broken). */
    cr_assert_geq(swept, 190, "swept %llu of 200", (unsigned long long) swept);
    cr_assert_leq(swept, 200);
    cr_assert_eq(hash_entries(&f), 400 - swept);
    assert_found(&f, 201, 200);

    /* Closed, the back-end no longer answers: a compaction keeps whatever is left. */
    index_close(f.ix);
    f.ix = NULL;
    for (uint32_t s = 201; s <= 300; s++) {
        uint8_t key[META_CHUNK_KEY_LEN];
        meta_key_chunk_encode(key, 1000 + s);
        meta_batch_delete(f.mb, META_CF_CHUNK, key, sizeof(key));
    }
    cr_assert_eq(meta_batch_commit(f.m, f.mb, false), 0);
    meta_batch_clear(f.mb);
    cr_assert_eq(meta_compact(f.m, META_CF_HASH), 0);
    cr_assert_eq(meta_hash_swept(f.m), swept);
    cr_assert_eq(hash_entries(&f), 400 - swept);
    cr_assert_eq(index_open("rocksdb", f.m, NULL, &f.ix), 0);
    index_batch_reset(&f.b, f.mb);
    fx_close(&f);
}

/* A freed chunk (index_remove) keeps its `hash` entry, and look-ups stop answering with its
 * id at once; a back-end opened later has forgotten the free and answers with it again —
 * which is why callers hold a chunk before sharing it (engine test_dedup covers that). */
Test(filter, recently_freed_ids_are_not_answered_and_their_entries_stay)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    index__filter_wait(filter_of(&f));
    commit_keys(&f, 1, 100, 100);
    uint8_t h[32];
    for (uint32_t s = 1; s <= 50; s++) {
        make_hash(h, s);
        index_remove(f.ix, &f.b, 1, h, 32, 1000 + s);
    }
    fx_commit(&f);
    for (uint32_t s = 1; s <= 50; s++) {
        uint64_t id;
        make_hash(h, s);
        cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT, "freed key %u answered", s);
    }
    assert_found(&f, 51, 50);
    cr_assert_eq(hash_entries(&f), 100, "entries wait for the sweep");
    index_close(f.ix);
    cr_assert_eq(index_open("rocksdb", f.m, NULL, &f.ix), 0);
    index_batch_reset(&f.b, f.mb);
    assert_found(&f, 1, 100);
    fx_close(&f);
}

/* The back-end's hot entries: a found hash is answered from memory the next time (its
 * RocksDB entry deleted behind the index's back still answers), and never outlives what
 * changes it — a freed chunk is not answered, and a hash staged for another chunk answers
 * that chunk once committed, whether the old one was freed or not. */
Test(filter, hot_entries_answer_from_memory_and_never_outlive_their_chunk)
{
    struct fx f;
    fx_open(&f, "rocksdb");
    index__filter_wait(filter_of(&f));
    commit_keys(&f, 1, 3, 3);
    assert_found(&f, 1, 3); /* each found once: now hot */
    uint8_t h[32], key[META_HASH_KEY_MAX];
    uint64_t id = 0;
    make_hash(h, 1);
    meta_batch_delete(f.mb, META_CF_HASH, key, meta_key_hash_encode(key, 1, h, 32));
    cr_assert_eq(meta_batch_commit(f.m, f.mb, false), 0);
    meta_batch_clear(f.mb);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0, "not answered from memory");
    cr_assert_eq(id, 1001);
    /* Freed: not answered, and once its hash is stored again, the new chunk is. */
    make_hash(h, 2);
    index_remove(f.ix, &f.b, 1, h, 32, 1002);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT, "a freed chunk answered");
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 3002), 0);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 3002);
    /* Replaced without a free that the index saw (an entry's chunk freed long ago): the
     * staged entry wins once committed, and not before. */
    make_hash(h, 3);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 3003), 0);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 1003, "a staged entry answered before its commit");
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 3003, "the hot entry outlived the commit that replaced it");
    fx_close(&f);
}
