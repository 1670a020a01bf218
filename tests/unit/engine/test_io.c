/* Tests the engine's block I/O: reads of unwritten ranges, chunk splitting,
 * read-modify-write at every alignment class, zero detection, trim and write-zeroes,
 * range errors, read-only exports, extents, persistence across reopen. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define CS 4096

static void
assert_reads(struct fx *f, uint64_t off, const uint8_t *want, uint32_t len)
{
    uint8_t *got = malloc(len);
    cr_assert_eq(engine_read(f->ex, off, len, got), 0);
    cr_assert(!memcmp(got, want, len), "data differs at offset %llu", (unsigned long long) off);
    free(got);
}

static struct engine_stats
stats_of(struct fx *f)
{
    struct engine_stats s;
    cr_assert_eq(engine_stats(f->e, "disk", &s), 0);
    return s;
}

Test(io, unwritten_ranges_read_as_zeros)
{
    struct fx f;
    fx_open(&f);
    uint8_t buf[3 * CS + 100], zero[sizeof(buf)] = {0};
    memset(buf, 0xaa, sizeof(buf));
    cr_assert_eq(engine_read(f.ex, 1000, sizeof(buf), buf), 0);
    cr_assert(!memcmp(buf, zero, sizeof(buf)));
    fx_close(&f);
}

Test(io, aligned_multi_chunk_write_reads_back_and_survives_reopen)
{
    struct fx f;
    fx_open(&f);
    uint8_t data[8 * CS];
    fx_fill(data, sizeof(data), 1);
    cr_assert_eq(engine_write(f.ex, 4 * CS, sizeof(data), data, 0), 0);
    assert_reads(&f, 4 * CS, data, sizeof(data));
    cr_assert_eq(fx_chunks(&f), 8);
    fx_reopen(&f);
    assert_reads(&f, 4 * CS, data, sizeof(data));
    cr_assert_eq(stats_of(&f).logical_bytes, sizeof(data));
    fx_close(&f);
}

/* Writes `len` bytes at `off` over a fully written area and checks against a shadow. */
static void
rmw_case(uint64_t off, uint32_t len, uint64_t want_rmw)
{
    struct fx f;
    fx_open(&f);
    uint8_t shadow[4 * CS], patch[3 * CS];
    fx_fill(shadow, sizeof(shadow), 2);
    cr_assert_eq(engine_write(f.ex, 0, sizeof(shadow), shadow, 0), 0);
    cr_assert_leq(len, sizeof(patch));
    fx_fill(patch, len, 3);
    cr_assert_eq(engine_write(f.ex, off, len, patch, 0), 0);
    memcpy(shadow + off, patch, len);
    assert_reads(&f, 0, shadow, sizeof(shadow));
    cr_assert_eq(stats_of(&f).rmw_count, want_rmw);
    /* The replaced chunks were freed: exactly one chunk per chunk of the export. */
    cr_assert_eq(fx_chunks(&f), 4);
    fx_reopen(&f);
    assert_reads(&f, 0, shadow, sizeof(shadow));
    fx_close(&f);
}

Test(io, rmw_at_chunk_start)
{
    rmw_case(CS, 100, 1);
}

Test(io, rmw_in_chunk_middle)
{
    rmw_case(CS + 1000, 513, 1);
}

Test(io, rmw_at_chunk_end)
{
    rmw_case(2 * CS - 7, 7, 1);
}

Test(io, rmw_spanning_two_chunks)
{
    rmw_case(CS + 3000, 2000, 2);
}

Test(io, rmw_at_both_ends_around_a_whole_chunk)
{
    rmw_case(CS + 1, 3 * CS - 2, 2); /* chunk 1 partial, 2 whole, 3 partial */
}

Test(io, partial_write_to_unwritten_chunk_keeps_zeros_around)
{
    struct fx f;
    fx_open(&f);
    uint8_t patch[300], want[CS] = {0};
    fx_fill(patch, sizeof(patch), 4);
    memcpy(want + 1000, patch, sizeof(patch));
    cr_assert_eq(engine_write(f.ex, 5 * CS + 1000, sizeof(patch), patch, 0), 0);
    assert_reads(&f, 5 * CS, want, CS);
    cr_assert_eq(stats_of(&f).rmw_count, 1);
    fx_close(&f);
}

Test(io, zero_chunks_are_never_stored)
{
    struct fx f;
    fx_open(&f);
    uint8_t *zeros = calloc(4, CS);
    cr_assert_eq(engine_write(f.ex, 0, 4 * CS, zeros, 0), 0);
    cr_assert_eq(fx_chunks(&f), 0);
    struct engine_stats s = stats_of(&f);
    cr_assert_eq(s.zero_bytes, 4 * CS);
    cr_assert_eq(s.logical_bytes, 0);
    cr_assert_eq(s.dedup_hits + s.dedup_misses, 0, "zero chunks are not hashed");
    assert_reads(&f, 0, zeros, 4 * CS);
    free(zeros);
    fx_close(&f);
}

Test(io, overwriting_with_zeros_frees_the_chunk)
{
    struct fx f;
    fx_open(&f);
    uint8_t data[2 * CS], zeros[CS] = {0};
    fx_fill(data, sizeof(data), 5);
    cr_assert_eq(engine_write(f.ex, 0, sizeof(data), data, 0), 0);
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(engine_write(f.ex, CS, CS, zeros, 0), 0);
    cr_assert_eq(fx_chunks(&f), 1);
    assert_reads(&f, CS, zeros, CS);
    /* A partial write that leaves a chunk all zero unmaps it too. */
    cr_assert_eq(engine_write(f.ex, 100, CS - 100, zeros, 0), 0);
    uint8_t head[100];
    memcpy(head, data, 100);
    assert_reads(&f, 0, head, 100);
    cr_assert_eq(fx_chunks(&f), 1);
    cr_assert_eq(engine_write(f.ex, 0, 100, zeros, 0), 0);
    cr_assert_eq(fx_chunks(&f), 0);
    cr_assert_eq(stats_of(&f).logical_bytes, 0);
    fx_close(&f);
}

Test(io, trim_frees_whole_chunks_and_zeroes_partial_ones)
{
    struct fx f;
    fx_open(&f);
    uint8_t data[6 * CS], want[6 * CS];
    fx_fill(data, sizeof(data), 6);
    cr_assert_eq(engine_write(f.ex, 0, sizeof(data), data, 0), 0);
    memcpy(want, data, sizeof(want));
    /* From the middle of chunk 1 to the middle of chunk 4: chunks 2 and 3 go. */
    cr_assert_eq(engine_trim(f.ex, CS + 100, 3 * CS, 0), 0);
    memset(want + CS + 100, 0, 3 * CS);
    assert_reads(&f, 0, want, sizeof(want));
    cr_assert_eq(fx_chunks(&f), 4);
    struct engine_stats s = stats_of(&f);
    cr_assert_eq(s.zero_bytes, 0, "a trim is not a write of zeros");
    cr_assert_eq(s.rmw_count, 2);
    fx_close(&f);
}

Test(io, write_zeroes_frees_and_counts_zero_bytes)
{
    struct fx f;
    fx_open(&f);
    uint8_t data[4 * CS], want[4 * CS];
    fx_fill(data, sizeof(data), 7);
    cr_assert_eq(engine_write(f.ex, 0, sizeof(data), data, 0), 0);
    memcpy(want, data, sizeof(want));
    cr_assert_eq(engine_zero(f.ex, 0, 2 * CS + 10, ENGINE_FUA), 0);
    memset(want, 0, 2 * CS + 10);
    assert_reads(&f, 0, want, sizeof(want));
    cr_assert_eq(fx_chunks(&f), 2);
    struct engine_stats s = stats_of(&f);
    /* Two whole chunks count; the 10 bytes landed in a chunk that still holds data. */
    cr_assert_eq(s.zero_bytes, 2 * CS);
    /* A huge zero over mostly unwritten space is cheap and exact. */
    cr_assert_eq(engine_zero(f.ex, 0, FX_SIZE, 0), 0);
    cr_assert_eq(fx_chunks(&f), 0);
    fx_close(&f);
}

Test(io, ranges_past_the_end_are_einval)
{
    struct fx f;
    fx_open(&f);
    uint8_t buf[CS];
    fx_fill(buf, sizeof(buf), 8);
    cr_assert_eq(engine_write(f.ex, FX_SIZE - 10, 20, buf, 0), -EINVAL);
    cr_assert_eq(engine_read(f.ex, FX_SIZE, 1, buf), -EINVAL);
    cr_assert_eq(engine_trim(f.ex, FX_SIZE - 1, 2, 0), -EINVAL);
    cr_assert_eq(engine_zero(f.ex, UINT64_MAX, 2, 0), -EINVAL);
    cr_assert_eq(engine_write(f.ex, FX_SIZE - CS, CS, buf, 0), 0);
    cr_assert_eq(engine_read(f.ex, FX_SIZE, 0, buf), 0);
    fx_close(&f);
}

Test(io, read_only_exports_refuse_writes)
{
    struct fx f;
    fx_open(&f);
    struct engine_export_info info;
    cr_assert_eq(engine_export_create(f.e, "ro", 1 << 20, 0, ENGINE_EXPORT_READ_ONLY, &info), 0);
    cr_assert(info.read_only);
    struct engine_export *ro;
    cr_assert_eq(engine_export_open(f.e, "ro", &ro), 0);
    uint8_t buf[CS];
    fx_fill(buf, sizeof(buf), 9);
    cr_assert_eq(engine_write(ro, 0, CS, buf, 0), -EROFS);
    cr_assert_eq(engine_trim(ro, 0, CS, 0), -EROFS);
    cr_assert_eq(engine_zero(ro, 0, CS, 0), -EROFS);
    cr_assert_eq(engine_read(ro, 0, CS, buf), 0);
    engine_export_close(ro);
    fx_close(&f);
}

Test(io, larger_chunk_sizes_split_and_rmw_the_same_way)
{
    struct fx f;
    fx_open(&f);
    struct engine_export *ex;
    cr_assert_eq(engine_export_create(f.e, "big", 8 << 20, 64 << 10, 0, NULL), 0);
    cr_assert_eq(engine_export_open(f.e, "big", &ex), 0);
    enum { LEN = 200 << 10 };
    uint8_t *data = malloc(LEN), *got = malloc(LEN);
    fx_fill(data, LEN, 10);
    cr_assert_eq(engine_write(ex, 5000, LEN, data, 0), 0);
    cr_assert_eq(engine_read(ex, 5000, LEN, got), 0);
    cr_assert(!memcmp(data, got, LEN));
    cr_assert_eq(fx_chunks(&f), 4); /* [5000, 209800) touches chunks 0..3 */
    free(data);
    free(got);
    engine_export_close(ex);
    fx_close(&f);
}

Test(io, extents_report_holes_data_and_shared_runs)
{
    struct fx f;
    fx_open(&f);
    uint8_t a[CS], b[CS];
    fx_fill(a, CS, 11);
    fx_fill(b, CS, 12);
    cr_assert_eq(engine_write(f.ex, 2 * CS, CS, a, 0), 0);
    cr_assert_eq(engine_write(f.ex, 3 * CS, CS, b, 0), 0);
    cr_assert_eq(engine_write(f.ex, 5 * CS, CS, a, 0), 0); /* shares with chunk 2 */
    struct engine_extent ext[8];
    int n = engine_extents(f.ex, 100, 8 * CS - 100, ext, 8);
    cr_assert_eq(n, 6);
    uint32_t hz = ENGINE_EXT_HOLE | ENGINE_EXT_ZERO;
    cr_assert_eq(ext[0].flags, hz);
    cr_assert_eq(ext[0].len, 2 * CS - 100);
    cr_assert_eq(ext[1].flags, ENGINE_EXT_SHARED);
    cr_assert_eq(ext[1].len, CS);
    cr_assert_eq(ext[2].flags, 0);
    cr_assert_eq(ext[2].len, CS);
    cr_assert_eq(ext[3].flags, hz);
    cr_assert_eq(ext[3].len, CS);
    cr_assert_eq(ext[4].flags, ENGINE_EXT_SHARED);
    cr_assert_eq(ext[5].flags, hz);
    cr_assert_eq(ext[5].len, 2 * CS);
    /* A short array: the runs cover a prefix. */
    cr_assert_eq(engine_extents(f.ex, 0, 8 * CS, ext, 2), 2);
    cr_assert_eq(ext[0].len, 2 * CS);
    cr_assert_eq(ext[1].len, CS);
    /* Allocation only: the mapped chunks 2..3 merge into one data run, no SHARED. */
    n = engine_extents_opt(f.ex, 100, 8 * CS - 100, ext, 8, ENGINE_EXTENTS_ALLOC_ONLY);
    cr_assert_eq(n, 5);
    cr_assert_eq(ext[0].flags, hz);
    cr_assert_eq(ext[0].len, 2 * CS - 100);
    cr_assert_eq(ext[1].flags, 0);
    cr_assert_eq(ext[1].len, 2 * CS);
    cr_assert_eq(ext[2].flags, hz);
    cr_assert_eq(ext[2].len, CS);
    cr_assert_eq(ext[3].flags, 0);
    cr_assert_eq(ext[3].len, CS);
    cr_assert_eq(ext[4].flags, hz);
    cr_assert_eq(ext[4].len, 2 * CS);
    fx_close(&f);
}

Test(io, writes_longer_than_one_transaction_are_split)
{
    struct fx f;
    fx_open(&f);
    const uint32_t len = DEDUPD_NBD_MAX_PAYLOAD + 3 * CS + 100;
    uint8_t *data = malloc(len), *got = malloc(len);
    fx_fill(data, len, 13);
    cr_assert_eq(engine_write(f.ex, 100, len, data, 0), 0);
    cr_assert_eq(engine_read(f.ex, 100, len, got), 0);
    cr_assert(!memcmp(data, got, len));
    struct engine_stats s = stats_of(&f);
    cr_assert_eq(s.rmw_count, 2, "only the two ends are partial");
    cr_assert_eq(s.logical_bytes, (uint64_t) (len + 100 + CS - 1) / CS * CS);
    free(data);
    free(got);
    fx_close(&f);
}

Test(io, extents_over_a_large_mapped_range_describe_a_prefix)
{
    struct fx f;
    fx_open(&f);
    struct engine_export *ex;
    cr_assert_eq(engine_export_create(f.e, "wide", 1ULL << 30, 0, 0, NULL), 0);
    cr_assert_eq(engine_export_open(f.e, "wide", &ex), 0);
    /* 16385 map entries sharing one chunk: cheap to write, as costly to describe as any. */
    const uint32_t n = 16385, per = 4096;
    uint8_t *buf = malloc((size_t) per * CS);
    fx_fill(buf, CS, 14);
    for (uint32_t i = 1; i < per; i++)
        memcpy(buf + (size_t) i * CS, buf, CS);
    for (uint32_t done = 0; done < n; done += per) {
        uint32_t k = n - done < per ? n - done : per;
        cr_assert_eq(engine_write(ex, (uint64_t) done * CS, k * CS, buf, 0), 0);
    }
    free(buf);
    cr_assert_eq(fx_chunks(&f), 1);
    struct engine_extent ext[4];
    int r = engine_extents(ex, 0, 2ULL * n * CS, ext, 4);
    cr_assert_eq(r, 1);
    cr_assert_eq(ext[0].flags, ENGINE_EXT_SHARED);
    cr_assert_eq(ext[0].len, 16384ULL * CS, "one call examines at most 16384 mapped chunks");
    /* Asking again from there finishes the job. */
    r = engine_extents(ex, 16384ULL * CS, 2ULL * n * CS - 16384ULL * CS, ext, 4);
    cr_assert_eq(r, 2);
    cr_assert_eq(ext[0].len, CS);
    cr_assert_eq(ext[1].flags, ENGINE_EXT_HOLE | ENGINE_EXT_ZERO);
    cr_assert_eq(ext[1].len, (uint64_t) n * CS);
    engine_export_close(ex);
    fx_close(&f);
}

Test(io, an_export_size_that_is_not_a_chunk_multiple_works_to_the_last_byte)
{
    struct fx f;
    fx_open(&f);
    struct engine_export *ex;
    const uint64_t size = 2 * CS + 1000;
    cr_assert_eq(engine_export_create(f.e, "odd", size, 0, 0, NULL), 0);
    cr_assert_eq(engine_export_open(f.e, "odd", &ex), 0);
    uint8_t data[CS + 1000], got[CS + 1000];
    fx_fill(data, sizeof(data), 15);
    cr_assert_eq(engine_write(ex, CS, sizeof(data), data, 0), 0);
    cr_assert_eq(engine_write(ex, CS, sizeof(data) + 1, data, 0), -EINVAL);
    cr_assert_eq(engine_read(ex, CS, sizeof(got), got), 0);
    cr_assert(!memcmp(data, got, sizeof(got)));
    struct engine_extent ext[4];
    cr_assert_eq(engine_extents(ex, 0, size, ext, 4), 2);
    cr_assert_eq(ext[0].len, CS);
    cr_assert_eq(ext[1].len, CS + 1000, "runs stop at the export's end");
    cr_assert_eq(engine_zero(ex, 0, size, 0), 0);
    cr_assert_eq(fx_chunks(&f), 0);
    engine_export_close(ex);
    fx_close(&f);
}
