/* engine.c: opening and closing the engine (store, settings, index, catalogue), FLUSH, the
 * store's freed callback and the test hook. The I/O paths live in write.c, read.c and
 * zero.c; the catalogue in catalog.c; settings in settings.c.
 * Knows nothing of NBD or protobuf. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/log.h"

int
engine_open(const struct engine_options *opt, struct engine **out)
{
    if (!opt || !opt->data_dir)
        return -EINVAL;
    struct engine *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    pthread_mutex_init(&e->set_mu, NULL);
    pthread_mutex_init(&e->cat_mu, NULL);
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    /* engine_dedup_set must not starve behind a steady stream of writes. */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&e->settings_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    e->hash_fn = hash_compute;
    e->hash2_fn = hash_compute2;
    engine__commitq_init(&e->commitq, engine__commit_writes, NULL);

    struct store_options so = {
        .seg_bytes = opt->seg_bytes,
        .block_cache_bytes = opt->block_cache_bytes,
        .compact_live_ratio = opt->compact_live_ratio,
        .compact_bytes_per_sec = opt->compact_bytes_per_sec,
        .background_compaction = opt->background_compaction,
        .reserve_bytes = opt->reserve_bytes,
    };
    int rc = engine__hashpool_start(&e->hp);
    if (rc == 0)
        rc = engine__vcache_create(&e->vcache);
    if (rc < 0)
        goto fail;
    rc = store_open(opt->data_dir, &so, &e->st);
    if (rc < 0)
        goto fail;
    e->m = store_meta(e->st);
    rc = engine__settings_load(e);
    if (rc < 0)
        goto fail;
    rc = engine__catalog_load(e, opt);
    if (rc < 0)
        goto fail;
    engine__counters_load(e);
    *out = e;
    return 0;
fail:
    e->m = NULL; /* nothing to save: counters were never loaded */
    engine_close(e);
    return rc;
}

void
engine_close(struct engine *e)
{
    if (!e)
        return;
    if (e->m && engine__counters_save(e) < 0)
        log_warn("engine: counters not saved at close");
    engine__catalog_fini(e);
    engine__settings_fini(e);
    store_close(e->st);
    engine__hashpool_stop(e->hp);
    engine__vcache_destroy(e->vcache);
    engine__commitq_destroy(&e->commitq);
    pthread_rwlock_destroy(&e->settings_lock);
    pthread_mutex_destroy(&e->cat_mu);
    pthread_mutex_destroy(&e->set_mu);
    free(e);
}

struct store *
engine_store(struct engine *e)
{
    return e->st;
}

int
engine_flush(struct engine *e)
{
    /* One store for every export: syncing it covers writes on all of them (invariant 4 is
     * the store's: segments first, then the WAL). The counters ride along. */
    int rc = engine__counters_save(e);
    if (rc < 0)
        return rc;
    return store_sync(e->st);
}

void
engine_test_set_hash_fn(struct engine *e, engine_hash_fn fn)
{
    pthread_rwlock_wrlock(&e->settings_lock);
    e->hash_fn = fn ? fn : hash_compute;
    e->hash2_fn = fn ? NULL : hash_compute2; /* an override sees every chunk on its own */
    pthread_rwlock_unlock(&e->settings_lock);
}

void
engine__on_freed(void *arg, const struct store_chunk_info *freed)
{
    struct engine_freed_ctx *ctx = arg;
    /* Every back-end hears of it: the memory one drops the entry, the rocksdb one keeps it
     * for its sweep and stops answering with this id (invariant 2). */
    if (!ctx->ix || freed->hash_alg == DEDUPD_HASH_NONE)
        return;
    index_remove(ctx->ix, ctx->ib, freed->hash_alg, freed->hash, freed->hash_len, freed->id);
}
