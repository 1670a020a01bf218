/* meta/internal.h: what db.c, batch.c, iter.c and sweep.c share. Not included outside meta/. */
#ifndef DD_META_INTERNAL_H
#define DD_META_INTERNAL_H

#include <pthread.h>
#include <rocksdb/c.h>

#include "meta/meta.h"

struct meta {
    rocksdb_t *db;
    rocksdb_options_t *db_opts;   /* DB-wide options, also used for the default CF */
    rocksdb_options_t *cf_opts;   /* map, chunk, rev (unused), export, meta */
    rocksdb_options_t *hash_opts; /* hash: random keys, no compression */
    rocksdb_block_based_table_options_t *table_opts;
    rocksdb_cache_t *cache;
    rocksdb_column_family_handle_t *cf[META_CF__COUNT + 1]; /* [0] default, [cf + 1] ours */
    rocksdb_readoptions_t *ropts;
    rocksdb_readoptions_t *ropts_cached; /* read tier: memtables and block cache only */
    rocksdb_writeoptions_t *wopts;
    rocksdb_flushoptions_t *fopts;
    rocksdb_flushoptions_t *fopts_nowait;
    bool read_only;
    int (*wal_hook)(void *arg, bool before); /* see meta_set_wal_hook() */
    void *wal_hook_arg;
    /* sweep.c: the `hash` family's compaction filter and whom it asks */
    rocksdb_compactionfilter_t *sweep_filter;
    pthread_rwlock_t sweep_lock; /* guards sweep_keep/arg against calls in flight */
    meta_keep_fn sweep_keep;
    void *sweep_arg;
    uint64_t sweep_dropped; /* entries dropped since open (atomic) */
};

/* The errno for a RocksDB error (the C API gives only its text): -ENOSPC when RocksDB
 * found the file system full, so that the NBD edge answers NBD_ENOSPC (qemu's default
 * werror=enospc then pauses the guest rather than failing its I/O), else -EIO. */
int meta__errno(const char *err);

int meta__sweep_init(struct meta *m);  /* before the database opens: 0 or -ENOMEM */
void meta__sweep_fini(struct meta *m); /* after it closed */

/* A batch is built before it meets a database (meta_batch_new takes no meta), but
 * RocksDB needs a column family handle per entry. So entries are kept in our own buffer
 * and replayed into a rocksdb_writebatch_t at commit; the copy is a few hundred bytes per
 * chunk, small beside the 4 KiB+ of chunk data each one describes.
 * Entry layout: op u8 (1 put, 2 delete) | cf u8 | klen u32 | vlen u32 | key | value. */
struct meta_batch {
    unsigned char *buf;
    size_t len, cap;
    size_t count;
    bool oom; /* an append failed: commit refuses with -ENOMEM */
};

static inline rocksdb_column_family_handle_t *
meta__cf(struct meta *m, enum meta_cf cf)
{
    return m->cf[(int) cf + 1];
}

#endif
