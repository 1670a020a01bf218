/* Tests server/meta/db.c and batch.c on real RocksDB directories in /tmp. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedupd/version.h"
#include "fakes/tmpdir.h"
#include "meta/internal.h"
#include "meta/meta.h"
#include "util/log.h"

static char dir[64];
static char db[128];

static void
setup(void)
{
    log_set_level(LOG_LEVEL_ERROR);
    cr_assert_not_null(tmpdir_new(dir, sizeof(dir)));
    snprintf(db, sizeof(db), "%s/db", dir);
}

static void
teardown(void)
{
    tmpdir_rm(dir);
}

TestSuite(db, .init = setup, .fini = teardown);

static struct meta *
open_ok(bool create)
{
    struct meta_options o = {.block_cache_bytes = 8 << 20, .create_if_missing = create};
    struct meta *m = NULL;
    cr_assert_eq(meta_open(db, &o, &m), 0);
    return m;
}

Test(db, put_get_delete_survive_reopen)
{
    struct meta *m = open_ok(true);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_MAP, "k1", 2, "v1", 2);
    meta_batch_put(b, META_CF_HASH, "k1", 2, "other-cf", 8);
    meta_batch_put(b, META_CF_MAP, "k2", 2, "v2", 2);
    meta_batch_delete(b, META_CF_MAP, "k2", 2);
    cr_assert_eq(meta_batch_count(b), 4);
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    char v[16];
    cr_assert_eq(meta_get(m, META_CF_MAP, "k1", 2, v, sizeof(v)), 2);
    cr_assert_eq(memcmp(v, "v1", 2), 0);
    cr_assert_eq(meta_get(m, META_CF_MAP, "k2", 2, v, sizeof(v)), -ENOENT);
    /* Value longer than cap: full length returned, cap bytes copied. */
    cr_assert_eq(meta_get(m, META_CF_HASH, "k1", 2, v, 3), 8);
    cr_assert_eq(memcmp(v, "oth", 3), 0);
    cr_assert_eq(meta_sync(m), 0);
    meta_close(m);

    m = open_ok(false);
    cr_assert_eq(meta_get(m, META_CF_MAP, "k1", 2, v, sizeof(v)), 2);
    cr_assert_eq(meta_get(m, META_CF_CHUNK, "k1", 2, v, sizeof(v)), -ENOENT);
    meta_close(m);
}

Test(db, unsynced_batches_are_flushed_at_close)
{
    struct meta *m = open_ok(true);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_CHUNK, "a", 1, "1", 1);
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    meta_close(m);
    m = open_ok(false);
    char v[4];
    cr_assert_eq(meta_get(m, META_CF_CHUNK, "a", 1, v, sizeof(v)), 1);
    meta_close(m);
}

/* Bytes in the directory's write-ahead log files (*.log). */
static off_t
wal_bytes(void)
{
    DIR *d = opendir(db);
    cr_assert_not_null(d);
    off_t sum = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".log") != 0)
            continue;
        char path[512];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", db, e->d_name);
        cr_assert_eq(stat(path, &st), 0);
        sum += st.st_size;
    }
    closedir(d);
    return sum;
}

#define VAL_LEN 200

/* n batches, each putting "key%06d" -> VAL_LEN bytes in `map` and 8 bytes in `hash`. */
static void
put_keys(struct meta *m, int n)
{
    char key[16], val[VAL_LEN];
    memset(val, 'v', sizeof(val));
    for (int i = 0; i < n; i++) {
        struct meta_batch *b = meta_batch_new();
        snprintf(key, sizeof(key), "key%06d", i);
        meta_batch_put(b, META_CF_MAP, key, strlen(key), val, sizeof(val));
        meta_batch_put(b, META_CF_HASH, key, strlen(key), val, 8);
        cr_assert_eq(meta_batch_commit(m, b, false), 0);
        meta_batch_free(b);
    }
}

Test(db, clean_close_leaves_no_log_to_replay)
{
    struct meta *m = open_ok(true);
    put_keys(m, 5000);
    cr_assert_eq(meta_sync(m), 0);
    cr_assert_gt(wal_bytes(), 5000 * VAL_LEN, "the batches are in the log while open");
    meta_close(m);
    cr_assert_lt(wal_bytes(), 4096, "memtables flushed at close: nothing left to replay");
    m = open_ok(false);
    char v[256];
    cr_assert_eq(meta_get(m, META_CF_MAP, "key004999", 9, v, sizeof(v)), (ssize_t) VAL_LEN);
    cr_assert_eq(meta_get(m, META_CF_HASH, "key000000", 9, v, sizeof(v)), 8);
    meta_close(m);
}

/* The store's pacing flush does not wait, but it must have switched every memtable by the
 * time it returns: what is flushed is then exactly what was committed before the call. */
Test(db, a_flush_that_does_not_wait_has_switched_the_memtables_on_return)
{
    struct meta *m = open_ok(true);
    uint64_t empty = meta_memtable_bytes(m); /* an empty memtable: arena and filter */
    put_keys(m, 2000);
    cr_assert_gt(meta_memtable_bytes(m), empty + 2000 * VAL_LEN);
    cr_assert_eq(meta_sync(m), 0);
    cr_assert_eq(meta_flush_memtables(m, false), 0);
    cr_assert_leq(meta_memtable_bytes(m), empty + 4096, "active memtables were switched");
    struct meta_batch *b = meta_batch_new(); /* a batch after the call: the new memtable */
    meta_batch_put(b, META_CF_MAP, "later", 5, "x", 1);
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    char v[256];
    cr_assert_eq(meta_get(m, META_CF_MAP, "key001999", 9, v, sizeof(v)), (ssize_t) VAL_LEN);
    cr_assert_eq(meta_get(m, META_CF_MAP, "later", 5, v, sizeof(v)), 1);
    meta_close(m);
}

Test(db, iterator_is_ordered_and_a_snapshot)
{
    struct meta *m = open_ok(true);
    struct meta_batch *b = meta_batch_new();
    const char *keys[] = {"c", "a", "b", "d"};
    for (int i = 0; i < 4; i++)
        meta_batch_put(b, META_CF_REV, keys[i], 1, keys[i], 1);
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    struct meta_iter *it = meta_iter_new(m, META_CF_REV);
    meta_batch_clear(b);
    meta_batch_put(b, META_CF_REV, "bb", 2, "x", 1); /* after the snapshot: unseen */
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    char seen[8] = {0};
    int n = 0;
    for (meta_iter_seek(it, "b", 1); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl;
        const char *k = meta_iter_key(it, &kl);
        seen[n++] = k[0];
        cr_assert_eq(kl, 1);
    }
    cr_assert_str_eq(seen, "bcd");
    size_t kl;
    meta_iter_seek_last(it, "bz", 2); /* the last key <= "bz" */
    cr_assert(meta_iter_valid(it));
    cr_assert_eq(*(const char *) meta_iter_key(it, &kl), 'b');
    meta_iter_seek_last(it, "c", 1); /* an exact key is its own answer */
    cr_assert_eq(*(const char *) meta_iter_key(it, &kl), 'c');
    meta_iter_seek_last(it, "0", 1); /* before every key */
    cr_assert(!meta_iter_valid(it));
    cr_assert_eq(meta_iter_status(it), 0);
    meta_iter_free(it);
    meta_close(m);
}

/* The SST file names in the database, sorted and joined, into out. */
static void
sst_names(char *out, size_t cap)
{
    struct dirent **ents = NULL;
    int n = scandir(db, &ents, NULL, alphasort);
    cr_assert_geq(n, 0);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (len > 4 && !strcmp(ents[i]->d_name + len - 4, ".sst")) {
            cr_assert_lt(strlen(out) + len + 2, cap);
            strcat(out, ents[i]->d_name);
            strcat(out, " ");
        }
        free(ents[i]);
    }
    free(ents);
}

/* An iterator registers no snapshot: releasing one made RocksDB mark every file flushed
 * since as a bottommost file to rewrite (to zero its sequence numbers), and it did so at
 * once, on a compaction thread, in the middle of whatever the server was doing. */
Test(db, an_iterator_ending_does_not_make_rocksdb_rewrite_flushed_files)
{
    struct meta *m = open_ok(true);
    put_keys(m, 2000);
    cr_assert_eq(meta_sync(m), 0);
    cr_assert_eq(meta_flush_memtables(m, true), 0);
    char before[4096], after[4096];
    sst_names(before, sizeof(before));
    cr_assert_neq(before[0], 0, "the flush wrote SST files");

    struct meta_iter *it = meta_iter_new(m, META_CF_MAP);
    meta_iter_seek(it, "key", 3);
    cr_assert(meta_iter_valid(it));
    meta_iter_free(it);
    for (int i = 0; i < 20; i++) { /* 2 s: the rewrite took ~10 ms */
        usleep(100 * 1000);
        sst_names(after, sizeof(after));
        cr_assert_str_eq(after, before, "files were rewritten after the iterator ended");
    }
    meta_close(m);
}

Test(db, missing_database_without_create_is_enoent)
{
    struct meta_options o = {.create_if_missing = false};
    struct meta *m = NULL;
    cr_assert_eq(meta_open(db, &o, &m), -ENOENT);
    cr_assert_null(m);
}

Test(db, read_only_open_refuses_writes)
{
    struct meta *m = open_ok(true);
    meta_close(m);
    struct meta_options o = {.read_only = true};
    cr_assert_eq(meta_open(db, &o, &m), 0);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_MAP, "k", 1, "v", 1);
    cr_assert_eq(meta_batch_commit(m, b, false), -EROFS);
    meta_batch_free(b);
    meta_close(m);
}

Test(db, newer_format_version_is_eproto)
{
    struct meta *m = open_ok(true);
    struct meta_batch *b = meta_batch_new();
    uint8_t v[4] = {0, 0, 0, 99};
    meta_batch_put(b, META_CF_META, "format_version", 14, v, 4);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
    struct meta_options o = {.create_if_missing = true};
    cr_assert_eq(meta_open(db, &o, &m), -EPROTO);
}

Test(db, format_1_is_upgraded_to_2_with_rev_emptied)
{
    /* A format-1 directory: its `rev` family holds entries. */
    struct meta *m = open_ok(true);
    struct meta_batch *b = meta_batch_new();
    uint8_t v[4] = {0, 0, 0, 1};
    meta_batch_put(b, META_CF_META, "format_version", 14, v, 4);
    uint8_t lo[12] = {0}, hi[12];
    memset(hi, 0xff, sizeof(hi));
    meta_batch_put(b, META_CF_REV, lo, sizeof(lo), "idididid", 8);
    meta_batch_put(b, META_CF_REV, hi, sizeof(hi), "idididid", 8);
    meta_batch_put(b, META_CF_MAP, "k", 1, "v", 1);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);

    /* Read-only: refused nothing, changed nothing. */
    struct meta_options ro = {.read_only = true};
    cr_assert_eq(meta_open(db, &ro, &m), 0);
    cr_assert_eq(meta_get(m, META_CF_META, "format_version", 14, v, 4), 4);
    cr_assert_eq(v[3], 1);
    meta_close(m);

    m = open_ok(false);
    cr_assert_eq(meta_get(m, META_CF_META, "format_version", 14, v, 4), 4);
    cr_assert_eq(v[3], DEDUPD_FORMAT_VERSION);
    struct meta_iter *it = meta_iter_new(m, META_CF_REV);
    meta_iter_seek_first(it);
    cr_assert(!meta_iter_valid(it), "rev emptied");
    meta_iter_free(it);
    char val[4];
    cr_assert_eq(meta_get(m, META_CF_MAP, "k", 1, val, sizeof(val)), 1, "the rest kept");
    meta_close(m);
}

Test(db, foreign_rocksdb_is_eproto_and_untouched)
{
    /* A RocksDB written by another program: default column family only. */
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    char *err = NULL;
    rocksdb_t *r = rocksdb_open(o, db, &err);
    cr_assert_null(err);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_put(r, wo, "theirs", 6, "data", 4, &err);
    cr_assert_null(err);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(r);
    rocksdb_options_destroy(o);

    char current[256];
    snprintf(current, sizeof(current), "%s/CURRENT", db);
    struct stat before, after;
    cr_assert_eq(stat(current, &before), 0);
    struct meta_options mo = {.create_if_missing = true};
    struct meta *m = NULL;
    cr_assert_eq(meta_open(db, &mo, &m), -EPROTO);
    cr_assert_null(m);
    cr_assert_eq(stat(current, &after), 0);
    cr_assert_eq(before.st_mtime, after.st_mtime);
    cr_assert_eq(before.st_ino, after.st_ino); /* no new MANIFEST was made current */
}

Test(db, non_empty_directory_without_rocksdb_is_eproto)
{
    mkdir(db, 0755);
    char p[256];
    snprintf(p, sizeof(p), "%s/notes.txt", db);
    FILE *f = fopen(p, "w");
    fputs("mine", f);
    fclose(f);
    struct meta_options mo = {.create_if_missing = true};
    struct meta *m = NULL;
    cr_assert_eq(meta_open(db, &mo, &m), -EPROTO);
}

Test(db, cf_size_grows_with_data)
{
    struct meta *m = open_ok(true);
    uint64_t s0 = meta_cf_size(m, META_CF_MAP);
    struct meta_batch *b = meta_batch_new();
    char k[16], v[64];
    memset(v, 'x', sizeof(v));
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof(k), "%08d", i);
        meta_batch_put(b, META_CF_MAP, k, 8, v, sizeof(v));
    }
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    cr_assert_gt(meta_cf_size(m, META_CF_MAP), s0);
    cr_assert_str_eq(meta_cf_name(META_CF_HASH), "hash");
    meta_close(m);
}

Test(db, hash_cf_size_counts_entries_not_bucket_arrays)
{
    struct meta *m = open_ok(true);
    /* An empty `hash` memtable already holds its bucket array (8 MiB). */
    cr_assert_lt(meta_cf_size(m, META_CF_HASH), 64 * 1024);
    struct meta_batch *b = meta_batch_new();
    uint8_t k[33], v[8] = {0};
    for (int i = 0; i < 1000; i++) {
        memset(k, 0, sizeof(k));
        k[0] = 1;
        memcpy(k + 1, &i, sizeof(i));
        meta_batch_put(b, META_CF_HASH, k, sizeof(k), v, sizeof(v));
    }
    cr_assert_eq(meta_batch_commit(m, b, false), 0);
    meta_batch_free(b);
    uint64_t s = meta_cf_size(m, META_CF_HASH);
    cr_assert_gt(s, 1000 * (sizeof(k) + sizeof(v)), "size %llu", (unsigned long long) s);
    /* The arena's first 1 MiB block, not the bucket array's 8 MiB. */
    cr_assert_lt(s, 2 * 1024 * 1024, "size %llu", (unsigned long long) s);
    meta_close(m);
}

Test(db, batch_find_reports_the_last_change_to_a_key)
{
    struct meta_batch *b = meta_batch_new();
    char v[8];
    size_t vl = 0;
    cr_assert_eq(meta_batch_find(b, META_CF_HASH, "k", 1, v, sizeof(v), &vl), -ENOENT);
    meta_batch_put(b, META_CF_HASH, "k", 1, "one", 3);
    meta_batch_put(b, META_CF_MAP, "k", 1, "other", 5); /* same key, other CF */
    cr_assert_eq(meta_batch_find(b, META_CF_HASH, "k", 1, v, sizeof(v), &vl), 1);
    cr_assert_eq(vl, 3);
    cr_assert_eq(memcmp(v, "one", 3), 0);
    meta_batch_delete(b, META_CF_HASH, "k", 1);
    cr_assert_eq(meta_batch_find(b, META_CF_HASH, "k", 1, v, sizeof(v), &vl), 0);
    meta_batch_put(b, META_CF_HASH, "k", 1, "three", 5);
    cr_assert_eq(meta_batch_find(b, META_CF_HASH, "k", 1, v, 2, &vl), 1);
    cr_assert_eq(vl, 5);
    cr_assert_eq(memcmp(v, "th", 2), 0);
    cr_assert_eq(meta_batch_find(b, META_CF_HASH, "kk", 2, v, sizeof(v), &vl), -ENOENT);
    meta_batch_free(b);
}

static int hook_calls[2];

static int
count_hook(void *arg, bool before)
{
    (void) arg;
    hook_calls[before ? 0 : 1]++;
    return 0;
}

static int
failing_hook(void *arg, bool before)
{
    (void) arg;
    if (!before)
        hook_calls[1]++;
    return before ? -EIO : 0;
}

Test(db, wal_hook_runs_around_syncs_asked_by_others)
{
    struct meta *m = open_ok(true);
    meta_set_wal_hook(m, count_hook, NULL);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_MAP, "a", 1, "1", 1);
    cr_assert_eq(meta_batch_commit(m, b, false), 0); /* no sync: no hook */
    cr_assert_eq(hook_calls[0] + hook_calls[1], 0);
    cr_assert_eq(meta_flush_wal(m, true), 0); /* the owner's raw flush: no hook */
    cr_assert_eq(hook_calls[0] + hook_calls[1], 0);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    cr_assert_eq(meta_sync(m), 0);
    cr_assert_eq(hook_calls[0], 2);
    cr_assert_eq(hook_calls[1], 2);
    meta_set_wal_hook(m, failing_hook, NULL);
    cr_assert_eq(meta_sync(m), -EIO);
    cr_assert_eq(hook_calls[1], 2); /* no `after` call when `before` failed */
    meta_set_wal_hook(m, NULL, NULL);
    meta_batch_free(b);
    meta_close(m);
}

/* RocksDB's errors come as text: a full file system must reach the NBD edge as ENOSPC
 * (qemu pauses the guest on it), anything else as EIO. */
Test(db, rocksdb_errors_map_no_space_to_enospc_and_the_rest_to_eio)
{
    cr_assert_eq(meta__errno("IO error: No space left on device: While appending to file: "
                             "/d/db/000027.sst: No space left on device"),
                 -ENOSPC);
    cr_assert_eq(meta__errno("IO error: No space left on device"), -ENOSPC);
    cr_assert_eq(meta__errno("IO error: Input/output error: While fsync: a file"), -EIO);
    cr_assert_eq(meta__errno("Corruption: block checksum mismatch"), -EIO);
    cr_assert_eq(meta__errno(NULL), -EIO);
}
