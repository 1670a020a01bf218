/* Tests the engine's deduplication: within a request, an export and across exports; frees
 * on overwrite; both back-ends; dedup disabled globally and per export; xxh3 with verify;
 * a forced hash collision caught by verify; exact counters; clone and delete. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "store/store.h"
#include "util/hash.h"

#define CS 4096

static struct engine_stats
stats_of(struct fx *f, const char *name)
{
    struct engine_stats s;
    cr_assert_eq(engine_stats(f->e, name, &s), 0);
    return s;
}

static void
assert_chunk(struct engine_export *ex, uint64_t off, uint32_t seed)
{
    uint8_t want[CS], got[CS];
    fx_fill(want, CS, seed);
    cr_assert_eq(engine_read(ex, off, CS, got), 0);
    cr_assert(!memcmp(want, got, CS), "chunk at %llu is not seed %u", (unsigned long long) off,
              seed);
}

static void
write_seed(struct engine_export *ex, uint64_t off, uint32_t seed)
{
    uint8_t buf[CS];
    fx_fill(buf, CS, seed);
    cr_assert_eq(engine_write(ex, off, CS, buf, 0), 0);
}

static void
set_dedup(struct fx *f, bool enabled, enum dedupd_hash_alg alg, bool verify)
{
    struct engine_dedup_config c;
    engine_dedup_get(f->e, &c);
    c.enabled = enabled;
    c.hash_alg = alg;
    c.verify = verify;
    cr_assert_eq(engine_dedup_set(f->e, &c), 0);
}

Test(dedup, duplicate_chunks_in_one_request_share_one_chunk)
{
    struct fx f;
    fx_open(&f);
    uint8_t buf[4 * CS];
    fx_fill(buf, CS, 1);
    for (int i = 1; i < 4; i++)
        memcpy(buf + i * CS, buf, CS);
    cr_assert_eq(engine_write(f.ex, 0, sizeof(buf), buf, 0), 0);
    cr_assert_eq(fx_chunks(&f), 1);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_eq(s.dedup_misses, 1);
    cr_assert_eq(s.dedup_hits, 3);
    cr_assert_eq(s.logical_bytes, 4 * CS);
    cr_assert_eq(s.unique_bytes, CS);
    fx_close(&f);
}

Test(dedup, duplicates_within_and_across_exports_share)
{
    struct fx f;
    fx_open(&f);
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, 10 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 1);
    struct engine_export *other;
    cr_assert_eq(engine_export_create(f.e, "other", 1 << 20, 0, 0, NULL), 0);
    cr_assert_eq(engine_export_open(f.e, "other", &other), 0);
    write_seed(other, 5 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 1);
    assert_chunk(other, 5 * CS, 1);
    struct engine_stats so = stats_of(&f, "other");
    cr_assert_eq(so.dedup_hits, 1);
    cr_assert_eq(so.unique_bytes, 0, "a shared chunk is owned by nobody alone");
    /* Repeated only inside one export, a chunk is that export's alone, counted once. */
    write_seed(other, 6 * CS, 7);
    write_seed(other, 7 * CS, 7);
    write_seed(other, 8 * CS, 8);
    so = stats_of(&f, "other");
    cr_assert_eq(so.unique_bytes, 2 * CS, "seeds 7 (twice) and 8 are other's alone");
    cr_assert_eq(stats_of(&f, NULL).unique_bytes, 3 * CS);
    engine_export_close(other);
    fx_close(&f);
}

static void write_seeds(struct engine_export *ex, uint64_t off, uint32_t seed, uint32_t n);

/* Chunks of a multi-chunk request are hashed two at a time (hash_compute2), single chunks
 * alone: both ways must give the same hashes, or the same bytes would not dedup. */
Test(dedup, chunks_hashed_in_pairs_dedup_against_chunks_hashed_alone)
{
    struct fx f;
    fx_open(&f);
    write_seed(f.ex, 0, 5);
    write_seed(f.ex, CS, 6);
    write_seeds(f.ex, 16 * CS, 5, 2); /* seeds 5 and 6 as one pair */
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(stats_of(&f, NULL).dedup_hits, 2);
    write_seeds(f.ex, 32 * CS, 5, 3); /* a pair and an odd last chunk (seed 7: new) */
    cr_assert_eq(fx_chunks(&f), 3);
    cr_assert_eq(stats_of(&f, NULL).dedup_hits, 4);
    /* 32 chunks: a request large enough to be spread over the hashing threads. */
    write_seeds(f.ex, 64 * CS, 100, 32);
    for (uint32_t i = 0; i < 32; i++)
        write_seed(f.ex, (128 + i) * CS, 100 + i);
    cr_assert_eq(fx_chunks(&f), 3 + 32);
    cr_assert_eq(stats_of(&f, NULL).dedup_hits, 4 + 32);
    for (uint32_t i = 0; i < 32; i++)
        assert_chunk(f.ex, (64 + i) * CS, 100 + i);
    fx_close(&f);
}

Test(dedup, overwrite_frees_the_old_chunk_only_when_unshared)
{
    struct fx f;
    fx_open(&f);
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, CS, 1);
    write_seed(f.ex, 0, 2); /* chunk of seed 1 still held by offset CS */
    cr_assert_eq(fx_chunks(&f), 2);
    write_seed(f.ex, CS, 3); /* now seed 1 is unreferenced and freed */
    cr_assert_eq(fx_chunks(&f), 2);
    assert_chunk(f.ex, 0, 2);
    assert_chunk(f.ex, CS, 3);
    /* Its hash entry names a gone chunk now: writing seed 1 again stores a fresh chunk. */
    struct engine_stats before = stats_of(&f, NULL);
    write_seed(f.ex, 2 * CS, 1);
    struct engine_stats after = stats_of(&f, NULL);
    cr_assert_eq(after.dedup_misses, before.dedup_misses + 1);
    cr_assert_eq(fx_chunks(&f), 3);
    fx_close(&f);
}

static uint64_t
hash_entries(struct fx *f)
{
    struct meta_iter *it = meta_iter_new(store_meta(engine_store(f->e)), META_CF_HASH);
    uint64_t n = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it))
        n++;
    meta_iter_free(it);
    return n;
}

static void
write_seeds(struct engine_export *ex, uint64_t off, uint32_t seed, uint32_t n)
{
    uint8_t *buf = malloc((size_t) n * CS);
    cr_assert_not_null(buf);
    for (uint32_t i = 0; i < n; i++)
        fx_fill(buf + (size_t) i * CS, CS, seed + i);
    cr_assert_eq(engine_write(ex, off, n * CS, buf, 0), 0);
    free(buf);
}

/* Invariant 2: a freed chunk keeps its `hash` entry until the sweep. Writing its bytes
 * again must find no chunk under that id, store a new one and re-point the entry — with
 * and without verify, within one request of several chunks, and after a restart. */
static void
stale_entries_round(enum dedupd_hash_alg alg, bool verify)
{
    struct fx f;
    fx_open(&f);
    set_dedup(&f, true, alg, verify);
    write_seeds(f.ex, 0, 1, 8);
    write_seeds(f.ex, 0, 11, 8); /* frees the chunks of seeds 1..8 */
    cr_assert_eq(fx_chunks(&f), 8);
    cr_assert_eq(hash_entries(&f), 16, "the freed chunks' entries wait for the sweep");
    struct engine_stats before = stats_of(&f, NULL);
    write_seeds(f.ex, 20 * CS, 1, 8);
    struct engine_stats after = stats_of(&f, NULL);
    cr_assert_eq(after.dedup_misses, before.dedup_misses + 8);
    cr_assert_eq(after.dedup_hits, before.dedup_hits);
    cr_assert_eq(fx_chunks(&f), 16);
    cr_assert_eq(hash_entries(&f), 16, "re-pointed, not added");
    for (uint32_t i = 0; i < 8; i++) {
        assert_chunk(f.ex, i * CS, 11 + i);
        assert_chunk(f.ex, (20 + i) * CS, 1 + i);
    }
    fx_check(&f);
    write_seeds(f.ex, 0, 21, 8); /* frees the chunks of seeds 11..18 */
    fx_reopen(&f);
    before = stats_of(&f, NULL);
    write_seeds(f.ex, 40 * CS, 1, 8); /* the re-pointed entries name live chunks */
    after = stats_of(&f, NULL);
    cr_assert_eq(after.dedup_hits, before.dedup_hits + 8);
    cr_assert_eq(fx_chunks(&f), 16);
    /* The restarted back-end does not remember that 11..18 were freed: their entries
     * lead to ids with no chunk, which the transaction finds out. */
    write_seeds(f.ex, 60 * CS, 11, 8);
    struct engine_stats last = stats_of(&f, NULL);
    cr_assert_eq(last.dedup_misses, after.dedup_misses + 8);
    cr_assert_eq(last.dedup_hits, after.dedup_hits);
    cr_assert_eq(fx_chunks(&f), 24);
    for (uint32_t i = 0; i < 8; i++) {
        assert_chunk(f.ex, (40 + i) * CS, 1 + i);
        assert_chunk(f.ex, (60 + i) * CS, 11 + i);
        assert_chunk(f.ex, i * CS, 21 + i);
    }
    fx_check(&f);
    fx_close(&f);
}

Test(dedup, a_freed_chunks_hash_entry_is_taken_as_absent_and_replaced)
{
    stale_entries_round(DEDUPD_HASH_SHA256, false);
}

Test(dedup, a_freed_chunks_hash_entry_is_taken_as_absent_and_replaced_with_verify)
{
    stale_entries_round(DEDUPD_HASH_XXH3_128, true);
}

Test(dedup, rocksdb_index_survives_restart)
{
    struct fx f;
    fx_open(&f);
    write_seed(f.ex, 0, 1);
    fx_reopen(&f);
    write_seed(f.ex, CS, 1);
    cr_assert_eq(fx_chunks(&f), 1);
    fx_close(&f);
}

Test(dedup, memory_index_dedupes_and_forgets_on_restart)
{
    struct fx f;
    fx_open(&f);
    fx_set_backend(&f, "memory");
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, CS, 1);
    cr_assert_eq(fx_chunks(&f), 1);
    struct engine_index_usage u;
    engine_index_usage(f.e, &u);
    cr_assert_eq(u.entries, 1);
    /* Overwrite frees the chunk and its entry; the freed chunk is never named again. */
    write_seed(f.ex, 0, 2);
    write_seed(f.ex, CS, 3);
    engine_index_usage(f.e, &u);
    cr_assert_eq(u.entries, 2);
    write_seed(f.ex, 2 * CS, 1);
    assert_chunk(f.ex, 2 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 3);
    fx_reopen(&f); /* the setting persists, the table does not */
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    cr_assert_str_eq(c.backend, "memory");
    write_seed(f.ex, 3 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 4, "memory back-end starts empty after a restart");
    fx_close(&f);
}

Test(dedup, memory_index_eviction_loses_only_dedup)
{
    struct fx f;
    fx_open(&f);
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    snprintf(c.backend, sizeof(c.backend), "memory");
    c.limit_nr = 4;
    cr_assert_eq(engine_dedup_set(f.e, &c), 0);
    for (uint32_t i = 0; i < 8; i++)
        write_seed(f.ex, i * CS, 100 + i);
    struct engine_index_usage u;
    engine_index_usage(f.e, &u);
    cr_assert_eq(u.entries, 4);
    cr_assert_eq(u.limit_nr, 4);
    cr_assert_eq(u.evictions, 4);
    write_seed(f.ex, 20 * CS, 100); /* evicted: stored again */
    write_seed(f.ex, 21 * CS, 107); /* still indexed: shared */
    cr_assert_eq(fx_chunks(&f), 9);
    assert_chunk(f.ex, 20 * CS, 100);
    fx_close(&f);
}

Test(dedup, disabled_dedup_stores_unique_chunks_and_reenabling_shares_again)
{
    struct fx f;
    fx_open(&f);
    set_dedup(&f, false, DEDUPD_HASH_SHA256, false);
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, CS, 1);
    cr_assert_eq(fx_chunks(&f), 2);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_eq(s.dedup_hits + s.dedup_misses, 0);
    set_dedup(&f, true, DEDUPD_HASH_SHA256, false);
    write_seed(f.ex, 2 * CS, 1); /* the unhashed chunks are invisible to the index */
    write_seed(f.ex, 3 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 3);
    assert_chunk(f.ex, 0, 1);
    assert_chunk(f.ex, 3 * CS, 1);
    fx_close(&f);
}

Test(dedup, export_property_off_never_shares_and_is_inherited_by_clones)
{
    struct fx f;
    fx_open(&f);
    struct engine_export_info info;
    cr_assert_eq(engine_export_create(f.e, "nd", 1 << 20, 0, ENGINE_EXPORT_NO_DEDUP, &info), 0);
    cr_assert(!info.dedup);
    struct engine_export *nd;
    cr_assert_eq(engine_export_open(f.e, "nd", &nd), 0);
    write_seed(f.ex, 0, 1);
    write_seed(nd, 0, 1);
    write_seed(nd, CS, 1);
    cr_assert_eq(fx_chunks(&f), 3);
    cr_assert_eq(engine_export_clone(f.e, "nd", "nd2", &info), 0);
    cr_assert(!info.dedup, "the dedup property is inherited");
    cr_assert_eq(engine_export_set_dedup(f.e, "nd", true), 0);
    write_seed(nd, 2 * CS, 1);
    cr_assert_eq(fx_chunks(&f), 3, "switched on: shares with the indexed chunk");
    engine_export_close(nd);
    fx_close(&f);
}

Test(dedup, xxh3_always_verifies_before_sharing)
{
    struct fx f;
    fx_open(&f);
    set_dedup(&f, true, DEDUPD_HASH_XXH3_128, false);
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    cr_assert(c.verify, "xxh3 forces verify");
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, CS, 1);
    cr_assert_eq(fx_chunks(&f), 1);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_eq(s.verify_compares, 1);
    cr_assert_eq(s.verify_mismatches, 0);
    fx_close(&f);
}

static void
collision_case(enum dedupd_hash_alg alg, const char *backend)
{
    struct fx f;
    fx_open(&f);
    fx_set_backend(&f, backend);
    set_dedup(&f, true, alg, true);
    engine_test_set_hash_fn(f.e, fx_colliding_hash);
    write_seed(f.ex, 0, 1);
    write_seed(f.ex, CS, 2);     /* same "hash", other bytes: must be stored apart */
    write_seed(f.ex, 2 * CS, 1); /* same bytes: shared after comparison */
    uint8_t two[2 * CS];         /* and within one request */
    fx_fill(two, CS, 3);
    fx_fill(two + CS, CS, 4);
    cr_assert_eq(engine_write(f.ex, 3 * CS, sizeof(two), two, 0), 0);
    cr_assert_eq(fx_chunks(&f), 4);
    assert_chunk(f.ex, 0, 1);
    assert_chunk(f.ex, CS, 2);
    assert_chunk(f.ex, 2 * CS, 1);
    assert_chunk(f.ex, 3 * CS, 3);
    assert_chunk(f.ex, 4 * CS, 4);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_eq(s.dedup_hits, 1);
    cr_assert_eq(s.dedup_misses, 4);
    /* seed 2: 1 compare; seed 1 again: 1; seed 3: 1; seed 4: 2 (the request's, the index's) */
    cr_assert_eq(s.verify_compares, 5);
    cr_assert_eq(s.verify_mismatches, 4);
    engine_test_set_hash_fn(f.e, NULL);
    fx_close(&f);
}

Test(dedup, forced_collision_is_caught_by_verify_with_sha256)
{
    collision_case(DEDUPD_HASH_SHA256, "rocksdb");
}

Test(dedup, forced_collision_is_caught_by_verify_with_xxh3_in_memory)
{
    collision_case(DEDUPD_HASH_XXH3_128, "memory");
}

/* The second and later comparisons with a chunk use the bytes verify read back the first
 * time (vcache.c). They must still tell colliding bytes apart, and a chunk freed after it
 * was cached must never be shared again, however its bytes compare. */
Test(dedup, verify_from_cached_bytes_still_separates_collisions_and_forgets_freed_chunks)
{
    struct fx f;
    fx_open(&f);
    set_dedup(&f, true, DEDUPD_HASH_XXH3_128, true);
    engine_test_set_hash_fn(f.e, fx_colliding_hash);
    write_seed(f.ex, 0, 1);      /* chunk A */
    write_seed(f.ex, CS, 1);     /* compared with A (read back): shared */
    write_seed(f.ex, 2 * CS, 2); /* compared with A (cached): differs, stored apart */
    write_seed(f.ex, 3 * CS, 1); /* the index names A or the seed-2 chunk: never wrong */
    cr_assert_eq(fx_chunks(&f), 2);
    assert_chunk(f.ex, 0, 1);
    assert_chunk(f.ex, CS, 1);
    assert_chunk(f.ex, 2 * CS, 2);
    assert_chunk(f.ex, 3 * CS, 1);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_geq(s.verify_mismatches, 1);

    /* Free every seed-1 chunk: their cache entries stay, their ids are gone for good. */
    for (uint64_t off = 0; off < 4 * CS; off += CS)
        if (off != 2 * CS)
            cr_assert_eq(engine_trim(f.ex, off, CS, 0), 0);
    cr_assert_eq(fx_chunks(&f), 1);
    write_seed(f.ex, 4 * CS, 1); /* bytes of a freed, cached chunk: a new chunk */
    cr_assert_eq(fx_chunks(&f), 2);
    assert_chunk(f.ex, 2 * CS, 2);
    assert_chunk(f.ex, 4 * CS, 1);
    engine_test_set_hash_fn(f.e, NULL);
    fx_close(&f);
}

Test(dedup, counters_are_exact_after_a_scripted_sequence)
{
    struct fx f;
    fx_open(&f);
    uint8_t zeros[CS] = {0};
    write_seed(f.ex, 0, 1);                                    /* miss */
    write_seed(f.ex, CS, 1);                                   /* hit */
    write_seed(f.ex, 2 * CS, 2);                               /* miss */
    cr_assert_eq(engine_write(f.ex, 3 * CS, CS, zeros, 0), 0); /* zero: 4096 */
    uint8_t patch[10];
    fx_fill(patch, sizeof(patch), 9);
    cr_assert_eq(engine_write(f.ex, 2 * CS + 5, 10, patch, 0), 0); /* rmw, miss; frees seed 2 */
    cr_assert_eq(engine_zero(f.ex, CS, CS, 0), 0);                 /* zero: 4096, unmap */
    uint8_t buf[CS];
    cr_assert_eq(engine_read(f.ex, 0, CS, buf), 0);
    cr_assert_eq(engine_trim(f.ex, 0, 100, 0), 0); /* rmw, miss */
    struct engine_stats s = stats_of(&f, "disk"), t = stats_of(&f, NULL);
    cr_assert_eq(s.dedup_hits, 1);
    cr_assert_eq(s.dedup_misses, 4);
    cr_assert_eq(s.rmw_count, 2);
    cr_assert_eq(s.zero_bytes, 2 * CS);
    cr_assert_eq(s.bytes_written, 4 * CS + 10);
    cr_assert_eq(s.bytes_read, CS);
    cr_assert_eq(s.logical_bytes, 2 * CS); /* chunks 0 and 2 */
    cr_assert_eq(s.unique_bytes, 2 * CS);
    cr_assert_eq(s.verify_compares, 0);
    cr_assert_eq(t.dedup_hits, s.dedup_hits);
    cr_assert_eq(t.dedup_misses, s.dedup_misses);
    cr_assert_eq(t.logical_bytes, s.logical_bytes);
    cr_assert_eq(t.unique_bytes, 2 * CS);
    cr_assert_gt(t.disk_bytes, 2 * CS);
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(engine_stats(f.e, "nope", &s), -ENOENT);
    /* Saved at close (and at every flush), loaded at open. */
    s = stats_of(&f, "disk");
    fx_reopen(&f);
    struct engine_stats r = stats_of(&f, "disk"), rt = stats_of(&f, NULL);
    cr_assert(!memcmp(&r, &s, sizeof(r)), "per-export counters survive a restart");
    cr_assert_eq(rt.dedup_hits, t.dedup_hits);
    cr_assert_eq(rt.bytes_written, t.bytes_written);
    fx_close(&f);
}

Test(dedup, clone_shares_every_chunk_and_diverges_on_write)
{
    struct fx f;
    fx_open(&f);
    for (uint32_t i = 0; i < 10; i++)
        write_seed(f.ex, i * CS, 10 + i);
    struct engine_export_info info;
    cr_assert_eq(engine_export_clone(f.e, "disk", "snap", &info), 0);
    cr_assert_eq(info.size, FX_SIZE);
    cr_assert_eq(info.chunk_size, CS);
    cr_assert_eq(engine_export_clone(f.e, "disk", "snap", NULL), -EEXIST);
    cr_assert_eq(engine_export_clone(f.e, "nope", "x", NULL), -ENOENT);
    cr_assert_eq(fx_chunks(&f), 10);
    struct engine_export *snap;
    cr_assert_eq(engine_export_open(f.e, "snap", &snap), 0);
    for (uint32_t i = 0; i < 10; i++)
        assert_chunk(snap, i * CS, 10 + i);
    write_seed(f.ex, 0, 99);
    assert_chunk(snap, 0, 10);
    cr_assert_eq(stats_of(&f, "snap").logical_bytes, 10 * CS);
    cr_assert_eq(engine_export_delete(f.e, "snap"), -EBUSY);
    engine_export_close(snap);
    fx_reopen(&f);
    cr_assert_eq(engine_export_lookup(f.e, "snap", &info), 0);
    cr_assert_eq(engine_export_delete(f.e, "snap"), 0);
    cr_assert_eq(engine_export_lookup(f.e, "snap", &info), -ENOENT);
    cr_assert_eq(fx_chunks(&f), 10, "seed 10's chunk went with the clone");
    fx_close(&f);
}

Test(dedup, delete_frees_all_references)
{
    struct fx f;
    fx_open(&f);
    struct engine_export *ex;
    cr_assert_eq(engine_export_create(f.e, "tmp", 1 << 20, 0, 0, NULL), 0);
    cr_assert_eq(engine_export_open(f.e, "tmp", &ex), 0);
    write_seed(ex, 0, 1);
    write_seed(ex, CS, 2);
    write_seed(f.ex, 0, 1);
    cr_assert_eq(fx_chunks(&f), 2);
    engine_export_close(ex);
    cr_assert_eq(engine_export_delete(f.e, "tmp"), 0);
    cr_assert_eq(fx_chunks(&f), 1);
    assert_chunk(f.ex, 0, 1);
    cr_assert_eq(engine_export_delete(f.e, "tmp"), -ENOENT);
    /* The name is free again, with a new id and nothing mapped. */
    struct engine_export_info info;
    cr_assert_eq(engine_export_create(f.e, "tmp", 1 << 20, 0, 0, &info), 0);
    cr_assert_eq(engine_export_open(f.e, "tmp", &ex), 0);
    uint8_t buf[CS], zero[CS] = {0};
    cr_assert_eq(engine_read(ex, 0, CS, buf), 0);
    cr_assert(!memcmp(buf, zero, CS));
    engine_export_close(ex);
    fx_close(&f);
}

Test(dedup, switching_back_to_rocksdb_finds_its_entries_again)
{
    struct fx f;
    fx_open(&f);
    write_seed(f.ex, 0, 1);       /* indexed in `hash` */
    fx_set_backend(&f, "memory"); /* an empty table */
    write_seed(f.ex, CS, 1);      /* not found: stored again, indexed in memory only */
    cr_assert_eq(fx_chunks(&f), 2);
    fx_set_backend(&f, "rocksdb");
    write_seed(f.ex, 2 * CS, 1); /* the first chunk's entry is still there */
    cr_assert_eq(fx_chunks(&f), 2);
    struct engine_stats s = stats_of(&f, NULL);
    cr_assert_eq(s.dedup_hits, 1);
    cr_assert_eq(s.dedup_misses, 2);
    fx_close(&f);
}

Test(dedup, map_entries_of_a_vanished_export_are_freed_at_open)
{
    struct fx f;
    fx_open(&f);
    struct engine_export *ex;
    struct engine_export_info info;
    cr_assert_eq(engine_export_create(f.e, "gone", 1 << 20, 0, 0, &info), 0);
    cr_assert_eq(engine_export_open(f.e, "gone", &ex), 0);
    write_seed(ex, 0, 1);
    write_seed(ex, CS, 2);
    write_seed(f.ex, 0, 1);
    engine_export_close(ex);
    cr_assert_eq(fx_chunks(&f), 2);
    /* What a crash between a delete's record removal and its unmapping leaves. */
    struct meta *m = store_meta(engine_store(f.e));
    uint8_t key[META_EXPORT_KEY_LEN];
    meta_key_export_encode(key, info.id);
    struct meta_batch *b = meta_batch_new();
    meta_batch_delete(b, META_CF_EXPORT, key, sizeof(key));
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    fx_reopen(&f);
    cr_assert_eq(engine_export_lookup(f.e, "gone", &info), -ENOENT);
    cr_assert_eq(fx_chunks(&f), 1, "the orphaned references were dropped");
    assert_chunk(f.ex, 0, 1);
    fx_close(&f);
}
