/* Tests the dedup settings: defaults, validation, persistence across restart, live
 * back-end switches under concurrent writers, and the export catalogue's persistence. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "meta/meta.h"

#define CS 4096

Test(settings, defaults_are_rocksdb_sha256_4k)
{
    struct fx f;
    fx_open(&f);
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    cr_assert(c.enabled);
    cr_assert_str_eq(c.backend, "rocksdb");
    cr_assert_eq(c.hash_alg, DEDUPD_HASH_SHA256);
    cr_assert(!c.verify);
    cr_assert_eq(c.default_chunk_size, DEDUPD_CHUNK_DEFAULT);
    struct engine_export_info info;
    cr_assert_eq(engine_export_lookup(f.e, "", &info), 0);
    cr_assert_str_eq(info.name, "disk");
    cr_assert_str_eq(engine_default_export(f.e), "disk");
    cr_assert_eq(info.chunk_size, CS);
    cr_assert_eq(info.open_handles, 1);
    fx_close(&f);
}

Test(settings, bad_combinations_are_refused)
{
    struct fx f;
    fx_open(&f);
    struct engine_dedup_config c, now;
    engine_dedup_get(f.e, &c);
    struct engine_dedup_config bad = c;
    snprintf(bad.backend, sizeof(bad.backend), "btree");
    cr_assert_eq(engine_dedup_set(f.e, &bad), -EINVAL);
    bad = c;
    bad.default_chunk_size = 6000;
    cr_assert_eq(engine_dedup_set(f.e, &bad), -EINVAL);
    bad.default_chunk_size = 2048;
    cr_assert_eq(engine_dedup_set(f.e, &bad), -EINVAL);
    bad = c;
    bad.hash_alg = (enum dedupd_hash_alg) 77;
    cr_assert_eq(engine_dedup_set(f.e, &bad), -EINVAL);
    engine_dedup_get(f.e, &now);
    cr_assert(!memcmp(&now, &c, sizeof(c)), "a refused change changes nothing");
    cr_assert_eq(engine_export_create(f.e, "x", 1 << 20, 3 << 12, 0, NULL), -EINVAL);
    cr_assert_eq(engine_export_create(f.e, "x", 1 << 20, 16 << 20, 0, NULL), -EINVAL);
    cr_assert_eq(engine_export_create(f.e, "", 1 << 20, 0, 0, NULL), -EINVAL);
    cr_assert_eq(engine_export_create(f.e, "a\nb", 1 << 20, 0, 0, NULL), -EINVAL);
    cr_assert_eq(engine_export_create(f.e, "x", 0, 0, 0, NULL), -EINVAL);
    cr_assert_eq(engine_export_create(f.e, "disk", 1 << 20, 0, 0, NULL), -EEXIST);
    fx_close(&f);
}

Test(settings, settings_and_catalogue_persist_across_restart)
{
    struct fx f;
    fx_open(&f);
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    c.enabled = false;
    snprintf(c.backend, sizeof(c.backend), "memory");
    c.hash_alg = DEDUPD_HASH_XXH3_128;
    c.default_chunk_size = 16 << 10;
    c.limit_nr = 1000;
    c.limit_mem = 1 << 20;
    cr_assert_eq(engine_dedup_set(f.e, &c), 0);
    cr_assert_eq(engine_export_create(f.e, "second", 1 << 30, 0, ENGINE_EXPORT_NO_DEDUP, NULL), 0);
    fx_reopen(&f);
    struct engine_dedup_config r;
    engine_dedup_get(f.e, &r);
    cr_assert(!r.enabled);
    cr_assert_str_eq(r.backend, "memory");
    cr_assert_eq(r.hash_alg, DEDUPD_HASH_XXH3_128);
    cr_assert(r.verify);
    cr_assert_eq(r.default_chunk_size, 16 << 10);
    cr_assert_eq(r.limit_nr, 1000);
    cr_assert_eq(r.limit_mem, 1 << 20);
    struct engine_index_usage u;
    engine_index_usage(f.e, &u);
    cr_assert_eq(u.limit_nr, 1000);
    struct engine_export_info *list;
    size_t n;
    cr_assert_eq(engine_export_list(f.e, &list, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(list[0].name, "disk");
    cr_assert_str_eq(list[1].name, "second");
    cr_assert_eq(list[1].chunk_size, 16 << 10, "created with the default of the time");
    cr_assert(!list[1].dedup);
    cr_assert_gt(list[1].id, list[0].id);
    free(list);
    fx_close(&f);
}

struct writer {
    struct engine_export *ex;
    uint32_t base;
    atomic_int *stop;
    int rc;
};

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    uint8_t buf[CS], got[CS];
    for (uint32_t i = 0; !atomic_load(w->stop) && i < 400; i++) {
        uint64_t off = (uint64_t) (w->base + i % 32) * CS;
        fx_fill(buf, CS, i % 8); /* lots of duplicates */
        if ((w->rc = engine_write(w->ex, off, CS, buf, 0)) < 0)
            break;
        if ((w->rc = engine_read(w->ex, off, CS, got)) < 0)
            break;
        if (memcmp(buf, got, CS)) {
            w->rc = -EILSEQ;
            break;
        }
    }
    return NULL;
}

Test(settings, live_switches_under_concurrent_writers_keep_data_intact)
{
    struct fx f;
    fx_open(&f);
    atomic_int stop = 0;
    struct writer w[2] = {{f.ex, 0, &stop, 0}, {f.ex, 100, &stop, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
    const char *backends[] = {"memory", "rocksdb"};
    for (int k = 0; k < 12; k++) {
        struct engine_dedup_config c;
        engine_dedup_get(f.e, &c);
        snprintf(c.backend, sizeof(c.backend), "%s", backends[k % 2]);
        c.enabled = k % 3 != 2;
        c.hash_alg = k % 4 == 3 ? DEDUPD_HASH_XXH3_128 : DEDUPD_HASH_SHA256;
        cr_assert_eq(engine_dedup_set(f.e, &c), 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].rc, 0, "writer %d: %d", i, w[i].rc);
    }
    fx_close(&f); /* the store check proves refcounts and hash entries */
}

Test(settings, export_ids_are_never_reused_even_across_restarts)
{
    struct fx f;
    fx_open(&f);
    struct engine_export_info a, b;
    cr_assert_eq(engine_export_create(f.e, "a", 1 << 20, 0, 0, &a), 0);
    cr_assert_eq(engine_export_delete(f.e, "a"), 0);
    fx_reopen(&f);
    cr_assert_eq(engine_export_create(f.e, "b", 1 << 20, 0, 0, &b), 0);
    cr_assert_gt(b.id, a.id);
    fx_close(&f);
}

Test(settings, unreadable_persisted_settings_refuse_to_open)
{
    struct fx f;
    fx_open(&f);
    engine_export_close(f.ex);
    f.ex = NULL;
    engine_close(f.e);
    f.e = NULL;
    char db[96];
    snprintf(db, sizeof(db), "%s/db", f.dir);
    struct meta *m;
    struct meta_options mo = {0};
    cr_assert_eq(meta_open(db, &mo, &m), 0);
    struct meta_batch *b = meta_batch_new();
    meta_batch_put(b, META_CF_META, "engine.dedup", 12, "\x01garbage", 8);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
    struct engine_options o = {.data_dir = f.dir};
    struct engine *e = NULL;
    cr_assert_eq(engine_open(&o, &e), -EBADMSG);
    cr_assert_null(e);
    /* A newer format is refused as such. */
    cr_assert_eq(meta_open(db, &mo, &m), 0);
    b = meta_batch_new();
    meta_batch_put(b, META_CF_META, "engine.dedup", 12, "\x09", 1);
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
    cr_assert_eq(engine_open(&o, &e), -EPROTO);
    fx_remove_dir(&f);
}
