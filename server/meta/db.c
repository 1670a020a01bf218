/* db: opening, tuning and closing dedupd's RocksDB, point reads, syncs, size estimates.
 * Owns every rocksdb_*_t handle; the rest of the server sees enum meta_cf and bytes.
 * Must not know what the keys mean beyond the format_version key in the meta CF.
 *
 * Tuning, and why:
 * - One shared LRU block cache for all column families (size configurable, default
 *   64 MiB): the hot set moves between CFs (map on reads, hash on writes), so one pool
 *   beats fixed per-CF slices.
 * - Bloom filter, 10 bits/key (~1% false positives), on every CF. It matters most on
 *   `hash`: with unique data nearly every look-up is a miss, and the filter answers a miss
 *   without a data-block read. On `map` it makes reads of never-written blocks cheap.
 *   optimize_filters_for_hits stays off for the same reason (misses are the common case).
 *   The skip-list memtables have a whole-key filter of their own (see make_options: it
 *   pays for itself once immutable memtables pile up; `hash` uses a hash memtable).
 * - `hash` keys and values are random bytes, so its blocks are stored uncompressed;
 *   the other CFs keep RocksDB's default compression (big-endian ids compress well).
 * - WAL on, and flushed manually (manual_wal_flush) with a large write buffer: a committed
 *   batch sits in memory until meta_flush_wal()/meta_sync(), so the WAL never reaches the
 *   disk before the segment bytes its batches reference have been fdatasync'ed (the store
 *   calls fdatasync first: invariant 4). A crash loses the unflushed tail, which is allowed
 *   because nothing acknowledged a flush for it. Point-in-time WAL recovery keeps a prefix.
 * - create_missing_column_families only for a fresh database: an existing directory must
 *   already have exactly our CFs and a format_version we understand, else -EPROTO and we
 *   touch nothing (the check is done read-only before the read-write open).
 * - max_total_wal_size is large so that RocksDB does not force memtable flushes on its own
 *   schedule; the store preempts flushes (meta_flush_memtables) after a segment sync. */
#include "meta/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dedupd/version.h"
#include "meta/keys.h"
#include "util/log.h"

#define DEFAULT_CACHE_BYTES  (64ULL << 20)
#define WRITE_BUFFER_BYTES   (64ULL << 20) /* per CF memtable */
#define WAL_BUFFER_BYTES     (16ULL << 20) /* in-memory WAL buffer before a forced write */
#define METADATA_BLOCK_BYTES 4096          /* filter and index partitions */
#define HASH_PREFIX_LEN      9             /* algorithm byte + 8 bytes of the hash */
#define FORMAT_KEY           "format_version"

/* Bucket heads come out of the memtable's own 64 MiB (8 MiB of them), so more buckets
 * cost no memory, only slightly earlier flushes. A full `hash` memtable holds ~1 M
 * entries: at 2^18 buckets each insert and look-up walked a sorted chain of up to ~4
 * scattered nodes (7% of a unique write's CPU in the chain walks); at 2^20 about one. */
#define HASH_MEMTABLE_BUCKETS (1u << 20)

static const char *const cf_names[META_CF__COUNT + 1] = {
    "default", "map", "chunk", "hash", "rev", "export", "meta",
};

int
meta__errno(const char *err)
{
    /* Status::NoSpace's text, whatever RocksDB was writing (WAL, SST, manifest) */
    return err && strstr(err, "No space left on device") ? -ENOSPC : -EIO;
}

static int
rdb_err(const char *what, const char *dir, char *err)
{
    log_err("meta: %s %s: %s", what, dir ? dir : "", err ? err : "unknown error");
    int rc = meta__errno(err);
    free(err);
    return rc;
}

static void
free_handles(struct meta *m)
{
    for (int i = 0; i <= META_CF__COUNT; i++) {
        if (m->cf[i])
            rocksdb_column_family_handle_destroy(m->cf[i]);
        m->cf[i] = NULL;
    }
}

static void
free_options(struct meta *m)
{
    if (m->ropts)
        rocksdb_readoptions_destroy(m->ropts);
    if (m->ropts_cached)
        rocksdb_readoptions_destroy(m->ropts_cached);
    if (m->wopts)
        rocksdb_writeoptions_destroy(m->wopts);
    if (m->fopts)
        rocksdb_flushoptions_destroy(m->fopts);
    if (m->fopts_nowait)
        rocksdb_flushoptions_destroy(m->fopts_nowait);
    if (m->cf_opts)
        rocksdb_options_destroy(m->cf_opts);
    if (m->hash_opts)
        rocksdb_options_destroy(m->hash_opts);
    if (m->db_opts)
        rocksdb_options_destroy(m->db_opts);
    if (m->table_opts)
        rocksdb_block_based_options_destroy(m->table_opts);
    if (m->cache)
        rocksdb_cache_destroy(m->cache);
    meta__sweep_fini(m); /* the options and the database are gone: nothing calls it now */
}

/* The `hash` CF's prefix extractor: the first HASH_PREFIX_LEN bytes, or the whole key if
 * shorter (the name is stored in SST properties: keep it stable). */
static void
prefix_free(void *state)
{
    (void) state;
}

static char *
prefix_of(void *state, const char *key, size_t len, size_t *out_len)
{
    (void) state;
    *out_len = len < HASH_PREFIX_LEN ? len : HASH_PREFIX_LEN;
    return (char *) key;
}

static unsigned char
prefix_in_domain(void *state, const char *key, size_t len)
{
    (void) state;
    (void) key;
    (void) len;
    return 1;
}

static unsigned char
prefix_in_range(void *state, const char *key, size_t len)
{
    (void) state;
    (void) key;
    (void) len;
    return 0;
}

static const char *
prefix_name(void *state)
{
    (void) state;
    return "dedupd.hash.capped9";
}

static int
make_options(struct meta *m, uint64_t cache_bytes)
{
    m->cache = rocksdb_cache_create_lru(cache_bytes ? cache_bytes : DEFAULT_CACHE_BYTES);
    m->table_opts = rocksdb_block_based_options_create();
    m->db_opts = rocksdb_options_create();
    m->cf_opts = rocksdb_options_create();
    m->hash_opts = rocksdb_options_create();
    m->ropts = rocksdb_readoptions_create();
    m->ropts_cached = rocksdb_readoptions_create();
    m->wopts = rocksdb_writeoptions_create();
    m->fopts = rocksdb_flushoptions_create();
    m->fopts_nowait = rocksdb_flushoptions_create();
    if (!m->cache || !m->table_opts || !m->db_opts || !m->cf_opts || !m->hash_opts || !m->ropts ||
        !m->ropts_cached || !m->wopts || !m->fopts || !m->fopts_nowait)
        return -ENOMEM;
    int rc = meta__sweep_init(m);
    if (rc)
        return rc;
    rocksdb_readoptions_set_read_tier(m->ropts_cached, 1); /* kBlockCacheTier */

    rocksdb_block_based_options_set_block_cache(m->table_opts, m->cache);
    /* The table options own the policy from here on (RocksDB wraps it in a shared_ptr,
     * copied into each CF's table factory). */
    rocksdb_block_based_options_set_filter_policy(m->table_opts,
                                                  rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_block_based_options_set_whole_key_filtering(m->table_opts, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(m->table_opts, 1);
    /* Partitioned filters and a two-level index. A full filter is one block per SST file
     * (~1.6 MiB for a 64 MiB `hash` table), larger than one shard of the LRU cache (64
     * shards: 1 MiB each at the default size), so it was never kept: every point read of a
     * random key re-read and re-checksummed whole filters from each file. Measured while
     * filling a store past ~1.5 M chunks: 43% of dedupd's CPU in the kernel copying filter
     * blocks, writes down to ~20 MiB/s. Partitions of METADATA_BLOCK_BYTES are cached like
     * data blocks; the small top-level indexes stay pinned, and L0's filters with them. */
    rocksdb_block_based_options_set_index_type(
        m->table_opts, rocksdb_block_based_table_index_type_two_level_index_search);
    rocksdb_block_based_options_set_partition_filters(m->table_opts, 1);
    rocksdb_block_based_options_set_metadata_block_size(m->table_opts, METADATA_BLOCK_BYTES);
    rocksdb_block_based_options_set_pin_top_level_index_and_filter(m->table_opts, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(m->table_opts, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks_with_high_priority(m->table_opts,
                                                                                     1);

    rocksdb_options_t *all[3] = {m->db_opts, m->cf_opts, m->hash_opts};
    for (int i = 0; i < 3; i++) {
        rocksdb_options_set_block_based_table_factory(all[i], m->table_opts);
        rocksdb_options_set_write_buffer_size(all[i], WRITE_BUFFER_BYTES);
        rocksdb_options_set_level_compaction_dynamic_level_bytes(all[i], 1);
    }
    /* A bloom filter over each skip-list memtable's whole keys (5% of its size): a point
     * read of a key that memtable does not hold — most of them, once there are immutable
     * memtables waiting to be flushed — skips a full skip-list search. Random 4 KiB writes
     * over 2 GiB: 11,300 -> 13,500 IOPS; sequential writes unchanged. */
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(m->cf_opts, 0.05);
    rocksdb_options_set_memtable_whole_key_filtering(m->cf_opts, 1);
    rocksdb_options_set_compression(m->hash_opts, rocksdb_no_compression);
    /* `hash` keys are random, so in a skip-list memtable every insert and look-up is a
     * full-height search with a cache miss per level — measured ~30% of a unique write's
     * time, all of the inserts inside the store's commit lock. A hash-linked-list
     * memtable, bucketed by the key's first HASH_PREFIX_LEN bytes (algorithm + 8 hash
     * bytes; shorter keys, which dedupd never writes there, are their own prefix rather
     * than a crash: RocksDB's fixed-prefix transform asserts on them), makes both O(1). Iterators
     * then need total_order_seek (meta/batch.c sets it on all of them); the memtable cannot take
     * concurrent inserts, which dedupd never makes (the store serializes its writers). */
    rocksdb_options_set_prefix_extractor(
        m->hash_opts, rocksdb_slicetransform_create(NULL, prefix_free, prefix_of, prefix_in_domain,
                                                    prefix_in_range, prefix_name));
    rocksdb_options_set_hash_link_list_rep(m->hash_opts, HASH_MEMTABLE_BUCKETS);
    rocksdb_options_set_allow_concurrent_memtable_write(m->db_opts, 0);

    rocksdb_options_set_max_background_jobs(m->db_opts, 2); /* two cores, shared */
    rocksdb_options_set_manual_wal_flush(m->db_opts, 1);
    rocksdb_options_set_writable_file_max_buffer_size(m->db_opts, WAL_BUFFER_BYTES);
    rocksdb_options_set_max_total_wal_size(m->db_opts, 1ULL << 30);
    rocksdb_options_set_wal_recovery_mode(m->db_opts, 2 /* kPointInTimeRecovery */);
    rocksdb_options_set_keep_log_file_num(m->db_opts, 4);
    rocksdb_options_set_max_log_file_size(m->db_opts, 4ULL << 20);
    /* RocksDB's own LOG file: fatal lines only. Debian's librocksdb keeps its assertions,
     * and a LOG write that fails (the file system is full) makes the next one abort the
     * process (WritableFileWriter::AssertFalseAndGetStatusForPrevError) — the first
     * background error it logs on a full disk did so. Every RocksDB error that matters
     * reaches dedupd as a status, which meta logs (tests/integration/disk-full-other.sh). */
    rocksdb_options_set_info_log_level(m->db_opts, 4 /* FATAL */);
    rocksdb_flushoptions_set_wait(m->fopts, 1);
    rocksdb_flushoptions_set_wait(m->fopts_nowait, 0);
    return 0;
}

static const rocksdb_options_t *const *
cf_option_array(struct meta *m, const rocksdb_options_t *arr[META_CF__COUNT + 1])
{
    for (int i = 0; i <= META_CF__COUNT; i++)
        arr[i] = m->cf_opts;
    arr[0] = m->db_opts;
    arr[META_CF_HASH + 1] = m->hash_opts;
    return arr;
}

/* 1: the directory exists and holds something; 0: absent or empty; -errno. */
static int
dir_nonempty(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            found = 1;
            break;
        }
    }
    closedir(d);
    return found;
}

/* Exactly our column families, in any order; anything else is another program's DB. */
static int
check_cf_list(struct meta *m, const char *dir)
{
    char *err = NULL;
    size_t n = 0;
    char **names = rocksdb_list_column_families(m->db_opts, dir, &n, &err);
    if (err) {
        log_err("meta: %s: not a readable RocksDB database (%s); refusing to touch it", dir, err);
        free(err);
        if (names)
            rocksdb_list_column_families_destroy(names, n);
        return -EPROTO;
    }
    int rc = 0;
    bool seen[META_CF__COUNT + 1] = {0};
    for (size_t i = 0; i < n; i++) {
        int j;
        for (j = 0; j <= META_CF__COUNT; j++)
            if (strcmp(names[i], cf_names[j]) == 0)
                break;
        if (j > META_CF__COUNT) {
            log_err("meta: %s: unknown column family '%s': not a dedupd database; refusing "
                    "to touch it",
                    dir, names[i]);
            rc = -EPROTO;
            break;
        }
        seen[j] = true;
    }
    for (int j = 1; rc == 0 && j <= META_CF__COUNT; j++) {
        if (!seen[j]) {
            log_err("meta: %s: column family '%s' missing: not a dedupd database; refusing "
                    "to touch it",
                    dir, cf_names[j]);
            rc = -EPROTO;
        }
    }
    rocksdb_list_column_families_destroy(names, n);
    return rc;
}

static int
read_format(struct meta *m, const char *dir, uint32_t *out)
{
    uint8_t v[8];
    ssize_t n = meta_get(m, META_CF_META, FORMAT_KEY, strlen(FORMAT_KEY), v, sizeof(v));
    if (n == -ENOENT) {
        log_err("meta: %s: no %s key: not a dedupd database; refusing to touch it", dir,
                FORMAT_KEY);
        return -EPROTO;
    }
    if (n < 0)
        return (int) n;
    if (n != 4) {
        log_err("meta: %s: malformed %s (%zd bytes); refusing to touch it", dir, FORMAT_KEY, n);
        return -EPROTO;
    }
    uint32_t ver = (uint32_t) v[0] << 24 | (uint32_t) v[1] << 16 | (uint32_t) v[2] << 8 | v[3];
    if (ver == 0 || ver > DEDUPD_FORMAT_VERSION) {
        log_err("meta: %s: format version %" PRIu32 " but this dedupd reads up to %d; "
                "refusing to touch it",
                dir, ver, DEDUPD_FORMAT_VERSION);
        return -EPROTO;
    }
    *out = ver;
    return 0;
}

/* Format 1 -> 2: the `rev` family (segment, offset -> chunk id) is no longer kept — record
 * headers name their chunk, so compaction and recovery walk segments instead. Its entries
 * go in one range delete, together with the new version, in one synced write; the family
 * itself stays, so that every format has the same list of families. A dedupd that reads
 * only format 1 refuses the upgraded directory instead of trusting an empty `rev`.
 * Format 2 -> 3: refcounts may be newer in the store's journal (`meta` keys "refs:") than
 * in the chunk entries; nothing to convert (a format-2 directory has no journal), but a
 * dedupd that reads only format 2 must refuse a directory that may have one. The range
 * delete finds `rev` empty then. */
static int
upgrade_format(struct meta *m, const char *dir, uint32_t ver)
{
    uint8_t hi[13]; /* every `rev` key (12 bytes) sorts below it */
    memset(hi, 0xff, sizeof(hi));
    uint8_t v[4] = {0, 0, 0, DEDUPD_FORMAT_VERSION};
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    if (!wb || !wo) {
        rocksdb_writebatch_destroy(wb);
        rocksdb_writeoptions_destroy(wo);
        return -ENOMEM;
    }
    rocksdb_writebatch_delete_range_cf(wb, meta__cf(m, META_CF_REV), "", 0, (const char *) hi,
                                       sizeof(hi));
    rocksdb_writebatch_put_cf(wb, meta__cf(m, META_CF_META), FORMAT_KEY, strlen(FORMAT_KEY),
                              (const char *) v, sizeof(v));
    rocksdb_writeoptions_set_sync(wo, 1);
    char *err = NULL;
    rocksdb_write(m->db, wo, wb, &err);
    rocksdb_writebatch_destroy(wb);
    rocksdb_writeoptions_destroy(wo);
    if (err) {
        log_err("meta: %s: upgrading format %" PRIu32 " to %d: %s", dir, ver, DEDUPD_FORMAT_VERSION,
                err);
        rocksdb_free(err);
        return -EIO;
    }
    log_info("meta: %s: upgraded from format %" PRIu32 " to %d%s", dir, ver, DEDUPD_FORMAT_VERSION,
             ver < 2 ? " (the `rev` family is emptied)" : "");
    return 0;
}

static int
open_db(struct meta *m, const char *dir, bool ro, bool fresh)
{
    const rocksdb_options_t *arr[META_CF__COUNT + 1];
    char *err = NULL;
    rocksdb_options_set_create_if_missing(m->db_opts, fresh);
    rocksdb_options_set_create_missing_column_families(m->db_opts, fresh);
    if (ro)
        m->db = rocksdb_open_for_read_only_column_families(
            m->db_opts, dir, META_CF__COUNT + 1, cf_names, cf_option_array(m, arr), m->cf, 0, &err);
    else
        m->db = rocksdb_open_column_families(m->db_opts, dir, META_CF__COUNT + 1, cf_names,
                                             cf_option_array(m, arr), m->cf, &err);
    if (err) {
        m->db = NULL;
        free_handles(m);
        return rdb_err("open", dir, err);
    }
    m->read_only = ro;
    return 0;
}

static void
close_db(struct meta *m)
{
    free_handles(m);
    if (m->db)
        rocksdb_close(m->db);
    m->db = NULL;
}

static int
rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    return remove(path);
}

/* The directory that holds path ("." for a bare name, "/" for one in the root). */
static void
parent_dir(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash && slash != out)
        *slash = 0;
    else
        snprintf(out, cap, "%s", slash ? "/" : ".");
}

/* A fresh database is built under "<db_dir>.creating" and renamed into place once it has
 * all its column families and its format_version, so that a crash half-way through never
 * leaves a directory that later opens would refuse as foreign. */
static int
create_fresh(struct meta *m, const char *db_dir)
{
    char tmp[4096], parent[4096];
    snprintf(tmp, sizeof(tmp), "%s.creating", db_dir);
    nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS); /* a leftover of a crashed creation */
    int rc = open_db(m, tmp, false, true);
    if (rc)
        return rc;
    uint8_t v[4] = {0, 0, 0, DEDUPD_FORMAT_VERSION};
    struct meta_batch *b = meta_batch_new();
    if (!b) {
        close_db(m);
        return -ENOMEM;
    }
    meta_batch_put(b, META_CF_META, FORMAT_KEY, strlen(FORMAT_KEY), v, sizeof(v));
    rc = meta_batch_commit(m, b, true);
    meta_batch_free(b);
    close_db(m);
    if (rc)
        return rc;
    if (rmdir(db_dir) < 0 && errno != ENOENT) { /* empty (checked by the caller) */
        rc = -errno;
        log_err("meta: rmdir %s: %s", db_dir, strerror(errno));
        return rc;
    }
    if (rename(tmp, db_dir) < 0) {
        rc = -errno;
        log_err("meta: rename %s -> %s: %s", tmp, db_dir, strerror(errno));
        return rc;
    }
    parent_dir(db_dir, parent, sizeof(parent));
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    log_info("meta: created database %s (format %d)", db_dir, DEDUPD_FORMAT_VERSION);
    return 0;
}

/* Free bytes RocksDB needs to open a database: it writes its LOG file's header lines
 * (option dumps), an OPTIONS file and a new MANIFEST — well under 1 MiB here — before any
 * status can say that the disk is full. */
#define OPEN_ROOM_BYTES (4ULL << 20)

/* -ENOSPC (logged) when the file system of db_dir (or of its parent, before it exists)
 * has less than OPEN_ROOM_BYTES free. Why refuse rather than try: Debian's librocksdb
 * keeps its assertions, and a LOG line it cannot write makes the next one abort the
 * process — at open, on a file system filled to the last byte, that was dedupd's start. */
static int
check_room(const char *db_dir)
{
    struct statvfs sv;
    char parent[4096];
    parent_dir(db_dir, parent, sizeof(parent));
    if (statvfs(db_dir, &sv) < 0 && statvfs(parent, &sv) < 0)
        return 0; /* unknown: let RocksDB say what is wrong */
    uint64_t free_bytes = (uint64_t) sv.f_bavail * (uint64_t) sv.f_frsize;
    if (free_bytes >= OPEN_ROOM_BYTES)
        return 0;
    log_err("meta: %s: only %" PRIu64 " KiB free on its file system; RocksDB needs %llu MiB "
            "to open the index (its log, options and manifest files): free some space and start "
            "again",
            db_dir, free_bytes >> 10, OPEN_ROOM_BYTES >> 20);
    return -ENOSPC;
}

int
meta_open(const char *db_dir, const struct meta_options *opt, struct meta **out)
{
    struct meta_options dflt = {.create_if_missing = true};
    if (!opt)
        opt = &dflt;
    struct meta *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    int rc = make_options(m, opt->block_cache_bytes);
    if (rc == 0)
        rc = check_room(db_dir);
    if (rc)
        goto fail;

    char current[4096];
    snprintf(current, sizeof(current), "%s/CURRENT", db_dir);
    struct stat sb;
    bool exists = stat(current, &sb) == 0;
    if (!exists) {
        rc = dir_nonempty(db_dir);
        if (rc < 0) {
            log_err("meta: %s: %s", db_dir, strerror(-rc));
            goto fail;
        }
        if (rc == 1) {
            log_err("meta: %s: directory is not empty and holds no RocksDB database; "
                    "refusing to touch it",
                    db_dir);
            rc = -EPROTO;
            goto fail;
        }
        if (!opt->create_if_missing || opt->read_only) {
            rc = -ENOENT;
            goto fail;
        }
        rc = create_fresh(m, db_dir);
        if (rc)
            goto fail;
    }

    rc = check_cf_list(m, db_dir);
    if (rc)
        goto fail;
    /* Check the format on a read-only open so that a refused directory is not modified. */
    rc = open_db(m, db_dir, true, false);
    if (rc)
        goto fail;
    uint32_t ver = 0;
    rc = read_format(m, db_dir, &ver);
    if (rc || opt->read_only)
        goto done;
    close_db(m);
    rc = open_db(m, db_dir, false, false);
    if (rc == 0 && ver < DEDUPD_FORMAT_VERSION)
        rc = upgrade_format(m, db_dir, ver);
done:
    if (rc)
        goto fail;
    *out = m;
    return 0;
fail:
    meta_close(m);
    return rc;
}

void
meta_close(struct meta *m)
{
    if (!m)
        return;
    if (m->db && !m->read_only) {
        /* Through the hook: if the data the WAL references cannot be made durable (the
         * store's segments failed to sync), the WAL must not be either. XXX: rocksdb_close
         * still writes its WAL buffer to the file (not fsynced) on its own; the C API has
         * no way to drop it, so after such an I/O failure a later power loss could keep
         * batches whose segment bytes are gone (recovery's lost-chunk path handles it). */
        int rc = meta_sync(m);
        if (rc)
            log_err("meta: close: the write-ahead log was not synced: %s", strerror(-rc));
        /* Then the memtables out as SST files, so that the next open replays no WAL (after
         * a 2 GiB write the replay took 6 s of start-up). Only after a successful sync:
         * flushed tables are as durable as a synced WAL. A failure costs only that. */
        else if ((rc = meta_flush_memtables(m, true)) < 0)
            log_warn("meta: close: memtables not flushed (%s); the next open replays the log",
                     strerror(-rc));
    }
    close_db(m);
    free_options(m);
    free(m);
}

ssize_t
meta_get(struct meta *m, enum meta_cf cf, const void *key, size_t klen, void *val, size_t cap)
{
    char *err = NULL;
    rocksdb_pinnableslice_t *ps =
        rocksdb_get_pinned_cf(m->db, m->ropts, meta__cf(m, cf), key, klen, &err);
    if (err)
        return rdb_err("get from", cf_names[cf + 1], err);
    if (!ps)
        return -ENOENT;
    size_t vlen;
    const char *v = rocksdb_pinnableslice_value(ps, &vlen);
    if (!v) {
        rocksdb_pinnableslice_destroy(ps);
        return -ENOENT;
    }
    memcpy(val, v, vlen < cap ? vlen : cap);
    rocksdb_pinnableslice_destroy(ps);
    return (ssize_t) vlen;
}

ssize_t
meta_get_cached(struct meta *m, enum meta_cf cf, const void *key, size_t klen, void *val,
                size_t cap)
{
    char *err = NULL;
    rocksdb_pinnableslice_t *ps =
        rocksdb_get_pinned_cf(m->db, m->ropts_cached, meta__cf(m, cf), key, klen, &err);
    if (err) {
        /* Status::Incomplete ("would need I/O") is the expected one; the C API gives only
         * its text. Any error is left to meta_get to report. */
        free(err);
        return -EAGAIN;
    }
    if (!ps)
        return -ENOENT;
    size_t vlen;
    const char *v = rocksdb_pinnableslice_value(ps, &vlen);
    if (v)
        memcpy(val, v, vlen < cap ? vlen : cap);
    rocksdb_pinnableslice_destroy(ps);
    return v ? (ssize_t) vlen : -ENOENT;
}

int
meta_flush_wal(struct meta *m, bool sync)
{
    if (m->read_only)
        return 0;
    char *err = NULL;
    rocksdb_flush_wal(m->db, sync, &err);
    if (err)
        return rdb_err(sync ? "sync wal of" : "flush wal of", "database", err);
    return 0;
}

void
meta_set_wal_hook(struct meta *m, int (*fn)(void *arg, bool before), void *arg)
{
    m->wal_hook = fn;
    m->wal_hook_arg = arg;
}

int
meta_sync(struct meta *m)
{
    if (m->read_only)
        return 0;
    if (!m->wal_hook)
        return meta_flush_wal(m, true);
    int rc = m->wal_hook(m->wal_hook_arg, true);
    if (rc)
        return rc;
    rc = meta_flush_wal(m, true);
    m->wal_hook(m->wal_hook_arg, false);
    return rc;
}

int
meta_flush_memtables(struct meta *m, bool wait)
{
    if (m->read_only)
        return 0;
    for (int i = 1; i <= META_CF__COUNT; i++) {
        char *err = NULL;
        rocksdb_flush_cf(m->db, wait ? m->fopts : m->fopts_nowait, m->cf[i], &err);
        if (err && !wait) {
            /* RocksDB refuses a flush it may not wait for while writes are stopped (too
             * many L0 files): TryAgain. The memtable must still be switched now, or RocksDB
             * would flush it on its own later, unsynced batches included: wait instead. */
            free(err);
            err = NULL;
            rocksdb_flush_cf(m->db, m->fopts, m->cf[i], &err);
        }
        if (err)
            return rdb_err("flush memtable of", cf_names[i], err);
    }
    return 0;
}

/* An integer property of every column family's active memtable: their largest, or with
 * sum their total. */
static uint64_t
active_memtables(struct meta *m, const char *property, bool sum)
{
    uint64_t out = 0;
    for (int i = 1; i <= META_CF__COUNT; i++) {
        uint64_t v = 0;
        if (rocksdb_property_int_cf(m->db, m->cf[i], property, &v) != 0)
            continue;
        out = sum ? out + v : (v > out ? v : out);
    }
    return out;
}

uint64_t
meta_memtable_bytes(struct meta *m)
{
    return active_memtables(m, "rocksdb.cur-size-active-mem-table", false);
}

uint64_t
meta_memtable_entries(struct meta *m)
{
    return active_memtables(m, "rocksdb.num-entries-active-mem-table", true);
}

uint64_t
meta_memtable_limit(void)
{
    return WRITE_BUFFER_BYTES;
}

uint64_t
meta_cf_size(struct meta *m, enum meta_cf cf)
{
    uint64_t sst = 0, mem = 0, imm = 0;
    rocksdb_property_int_cf(m->db, meta__cf(m, cf), "rocksdb.total-sst-files-size", &sst);
    rocksdb_property_int_cf(m->db, meta__cf(m, cf), "rocksdb.cur-size-all-mem-tables", &mem);
    if (cf == META_CF_HASH) {
        /* Each `hash` memtable's arena starts with its bucket array, which no SST file will
         * hold: without this an index of a few thousand entries reported 9 MiB. */
        rocksdb_property_int_cf(m->db, meta__cf(m, cf), "rocksdb.num-immutable-mem-table", &imm);
        uint64_t buckets = (1 + imm) * HASH_MEMTABLE_BUCKETS * sizeof(void *);
        mem = mem > buckets ? mem - buckets : 0;
    }
    return sst + mem;
}

uint64_t
meta_cf_keys_estimate(struct meta *m, enum meta_cf cf)
{
    uint64_t n = 0;
    rocksdb_property_int_cf(m->db, meta__cf(m, cf), "rocksdb.estimate-num-keys", &n);
    return n;
}

const char *
meta_cf_name(enum meta_cf cf)
{
    if ((int) cf < 0 || cf >= META_CF__COUNT)
        return "?";
    return cf_names[cf + 1];
}
