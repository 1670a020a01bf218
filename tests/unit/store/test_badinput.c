/* Bad input on disk: each case gets a clear error (or, for damaged bytes, -EUCLEAN on the
 * reads that touch them), never a crash, and a refused directory is left as it was. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedupd/version.h"
#include "helpers.h"
#include "meta/meta.h"
#include "util/log.h"

STORE_SUITE(badinput);

#define N 60

static struct store_options opts = {.seg_bytes = 64 << 10};

/* N chunks on blocks 0..N-1 over several sealed segments, synced, closed. */
static void
populate(uint64_t *ids)
{
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned i = 0; i < N; i++) {
        ids[i] = add(tx, 100 + i, 4096);
        cr_assert_eq(store_txn_map_set(tx, 1, i, ids[i]), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_sync(st), 0);
    store_close(st);
}

static void
seg_path(char *p, size_t cap, unsigned seg)
{
    snprintf(p, cap, "%s/segments/seg-%08u.log", dir, seg);
}

static off_t
file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? sb.st_size : -1;
}

Test(badinput, truncated_segment_is_refused_untouched_and_readable_read_only)
{
    uint64_t ids[N];
    populate(ids);
    char p[512];
    seg_path(p, sizeof(p), 1);
    off_t full = file_size(p);
    cr_assert_gt(full, 10000);
    cr_assert_eq(truncate(p, full / 2), 0);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), -EUCLEAN);
    cr_assert_null(st);
    cr_assert_eq(file_size(p), full / 2); /* not "repaired" behind our back */

    struct store_options ro = opts;
    ro.read_only = true;
    cr_assert_eq(store_open(dir, &ro, &st), 0);
    uint8_t buf[4096];
    cr_assert_eq(store_chunk_read(st, ids[0], buf, sizeof(buf)), 4096);      /* before the cut */
    cr_assert_eq(store_chunk_read(st, ids[14], buf, sizeof(buf)), -EUCLEAN); /* past it */
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, NULL, NULL, &sr), 0);
    cr_assert_gt(sr.crc_errors, 0);
    cr_assert_lt(sr.crc_errors, 15);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), -EROFS);
    store_close(st);
    cr_assert_eq(file_size(p), full / 2);
}

Test(badinput, garbage_over_a_segment_reads_as_euclean)
{
    uint64_t ids[N];
    populate(ids);
    char p[512];
    seg_path(p, sizeof(p), 2);
    off_t size = file_size(p);
    int fd = open(p, O_WRONLY);
    cr_assert_geq(fd, 0);
    uint8_t junk[4096];
    for (off_t off = 0; off < size; off += (off_t) sizeof(junk)) {
        fill(junk, sizeof(junk), (uint64_t) off + 77);
        size_t n = (size_t) (size - off) < sizeof(junk) ? (size_t) (size - off) : sizeof(junk);
        cr_assert_eq(pwrite(fd, junk, n, off), (ssize_t) n);
    }
    close(fd);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    unsigned bad = 0;
    uint8_t buf[4096];
    for (unsigned i = 0; i < N; i++) {
        struct store_chunk_info ci;
        cr_assert_eq(store_chunk_get(st, ids[i], &ci), 0);
        ssize_t n = store_chunk_read(st, ids[i], buf, sizeof(buf));
        if (ci.seg == 2) {
            cr_assert_eq(n, -EUCLEAN);
            bad++;
        } else {
            cr_assert_eq(n, 4096);
        }
    }
    cr_assert_gt(bad, 0);
    struct store_scrub_result sr;
    cr_assert_eq(store_scrub(st, NULL, NULL, NULL, &sr), 0);
    cr_assert_eq(sr.crc_errors, bad);
    struct store_check_result cr;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
    cr_assert_eq(cr.problems, 0); /* the metadata is fine; the bytes are not */
    store_close(st);
}

Test(badinput, missing_segment_file_is_refused_and_nothing_changes)
{
    uint64_t ids[N];
    populate(ids);
    char p[512], moved[512];
    seg_path(p, sizeof(p), 2);
    snprintf(moved, sizeof(moved), "%s/seg2.bak", dir);
    cr_assert_eq(rename(p, moved), 0);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), -EIO);
    cr_assert_null(st);
    /* Put it back: everything is as it was, so nothing was changed by the refusal. */
    cr_assert_eq(rename(moved, p), 0);
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    for (unsigned i = 0; i < N; i++)
        expect_bytes(st, ids[i], 100 + i, 4096);
    store_close(st);
}

Test(badinput, unknown_older_segment_file_is_refused)
{
    uint64_t ids[N];
    populate(ids);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(store_txn_map_set(tx, 1, i, 0), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    struct store_compact_result res;
    cr_assert_eq(store_compact(st, false, NULL, NULL, &res), 0);
    cr_assert_gt(res.segments_compacted, 0);
    store_close(st);
    char p[512];
    seg_path(p, sizeof(p), 1); /* compacted away; now a stranger of that name appears */
    cr_assert_eq(file_size(p), -1);
    FILE *f = fopen(p, "w");
    fputs("not a segment", f);
    fclose(f);
    cr_assert_eq(store_open(dir, &opts, &st), -EUCLEAN);
    cr_assert_eq(file_size(p), 13);
}

Test(badinput, stray_file_in_segments_is_ignored)
{
    uint64_t ids[N];
    populate(ids);
    char p[512];
    snprintf(p, sizeof(p), "%s/segments/README", dir);
    FILE *f = fopen(p, "w");
    fputs("hello", f);
    fclose(f);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), 0);
    expect_bytes(st, ids[5], 105, 4096);
    store_close(st);
    cr_assert_eq(file_size(p), 5);
}

Test(badinput, foreign_database_directory_is_eproto)
{
    char db[256], p[300];
    snprintf(db, sizeof(db), "%s/db", dir);
    cr_assert_eq(mkdir(db, 0755), 0);
    snprintf(p, sizeof(p), "%s/CURRENT", db);
    FILE *f = fopen(p, "w"); /* looks like RocksDB, is not readable as one */
    fputs("MANIFEST-000099\n", f);
    fclose(f);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), -EPROTO);
    cr_assert_null(st);
    cr_assert_eq(file_size(p), 16);
    char seg[300];
    snprintf(seg, sizeof(seg), "%s/segments", dir);
    cr_assert_eq(file_size(seg), -1); /* no segments directory made in a stranger's place */
}

Test(badinput, newer_format_is_eproto)
{
    uint64_t ids[N];
    populate(ids);
    struct meta *m = open_db_of(dir, false);
    struct meta_batch *b = meta_batch_new();
    uint8_t v[4] = {0, 0, 0, DEDUPD_FORMAT_VERSION + 1};
    meta_batch_put(b, META_CF_META, "format_version", 14, v, 4);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &opts, &st), -EPROTO);
}

Test(badinput, second_open_while_locked_is_ebusy)
{
    struct store *a = NULL, *b = NULL;
    cr_assert_eq(store_open(dir, &opts, &a), 0);
    cr_assert_eq(store_open(dir, &opts, &b), -EBUSY);
    store_close(a);
}
