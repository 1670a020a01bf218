/* Power-cut test through the engine: dedup-rich writes, overwrites, zeroes and trims on
 * the store's I/O fake (unsynced segment writes dropped or torn at a seeded moment), with
 * RocksDB's directory cut back to its state at the last FLUSH. After each restart the
 * export reads exactly as it did at that FLUSH, and refcounts, hash entries (invariant 2)
 * and the store's check all hold — invariants 4 and 7 as the engine uses them. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakes/io_fake.h"
#include "fakes/tmpdir.h"
#include "fixture.h"
#include "store/store.h"
#include "util/log.h"

#define CS      4096
#define NCHUNKS 48
#define REGION  (NCHUNKS * CS)

static void
copy_dir(const char *from, const char *to)
{
    tmpdir_rm(to);
    cr_assert_eq(mkdir(to, 0755), 0);
    DIR *d = opendir(from);
    cr_assert_not_null(d);
    struct dirent *e;
    static char buf[65536];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/%s", from, e->d_name);
        snprintf(b, sizeof(b), "%s/%s", to, e->d_name);
        int in = open(a, O_RDONLY);
        if (in < 0 && errno == ENOENT)
            continue; /* deleted by RocksDB while we listed */
        int out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        cr_assert(in >= 0 && out >= 0, "copy %s", a);
        ssize_t n;
        while ((n = read(in, buf, sizeof(buf))) > 0)
            cr_assert_eq(write(out, buf, (size_t) n), n);
        close(in);
        close(out);
    }
    closedir(d);
}

static uint64_t rng;

static uint32_t
rnd(uint32_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t) ((rng >> 33) % n);
}

static void
open_engine(struct fx *f, const char *data)
{
    struct engine_options o = {
        .data_dir = data,
        .seg_bytes = 96 << 10, /* several segments per round */
        .default_export = "disk",
        .default_export_size = REGION,
    };
    cr_assert_eq(engine_open(&o, &f->e), 0);
    cr_assert_eq(engine_export_open(f->e, "", &f->ex), 0);
}

static void
assert_reads(struct fx *f, const uint8_t *want)
{
    static uint8_t got[REGION];
    cr_assert_eq(engine_read(f->ex, 0, REGION, got), 0);
    cr_assert(!memcmp(got, want, REGION), "the export differs from its state at the last flush");
}

/* A fresh test directory: the engine's data directory, its database, and the snapshot the
 * power cut restores. */
struct dirs {
    char dir[64], data[128], db[160], snap[160];
};

static void
dirs_new(struct dirs *d)
{
    cr_assert_not_null(tmpdir_new(d->dir, sizeof(d->dir)));
    snprintf(d->data, sizeof(d->data), "%s/data", d->dir);
    snprintf(d->db, sizeof(d->db), "%s/db", d->data);
    snprintf(d->snap, sizeof(d->snap), "%s/snap", d->dir);
}

static void
run(uint64_t seed, const char *backend)
{
    struct dirs d;
    dirs_new(&d);
    io_fake_install();
    rng = seed;
    static uint8_t shadow[REGION], synced[REGION], pat[6][CS], buf[4 * CS];
    memset(shadow, 0, sizeof(shadow));
    memset(synced, 0, sizeof(synced));
    for (int i = 0; i < 6; i++)
        fx_fill(pat[i], CS, (uint32_t) (seed * 10 + (uint64_t) i));
    for (int round = 0; round < 4; round++) {
        struct fx f = {0};
        open_engine(&f, d.data);
        if (round == 0)
            fx_set_backend(&f, backend);
        assert_reads(&f, synced);
        fx_check(&f);
        memcpy(shadow, synced, sizeof(shadow));
        cr_assert_eq(engine_flush(f.e), 0);
        copy_dir(d.db, d.snap);
        for (int op = 0; op < 60; op++) {
            uint32_t len = 1 + rnd(sizeof(buf));
            uint64_t off = rnd(REGION - len + 1);
            if (rnd(2))
                off -= off % CS;
            int kind = (int) rnd(8);
            if (kind == 0) {
                cr_assert_eq(engine_trim(f.ex, off, len, 0), 0);
                memset(shadow + off, 0, len);
            } else if (kind == 1) {
                cr_assert_eq(engine_zero(f.ex, off, len, 0), 0);
                memset(shadow + off, 0, len);
            } else {
                for (uint32_t k = 0; k < len; k++) {
                    uint64_t pos = off + k;
                    buf[k] = pat[(pos / CS + (uint64_t) kind) % 6][pos % CS];
                }
                cr_assert_eq(engine_write(f.ex, off, len, buf, 0), 0);
                memcpy(shadow + off, buf, len);
            }
            if (rnd(10) == 0) {
                cr_assert_eq(engine_flush(f.e), 0);
                memcpy(synced, shadow, sizeof(synced));
                copy_dir(d.db, d.snap);
            }
        }
        /* Power off: no more I/O reaches the fake disk; closing must not crash or leak. */
        io_fake_fail_all(true);
        engine_export_close(f.ex);
        engine_close(f.e);
        io_fake_fail_all(false);
        io_fake_power_cut(seed * 31 + (uint64_t) round);
        tmpdir_rm(d.db);
        copy_dir(d.snap, d.db);
    }
    struct fx f = {0};
    open_engine(&f, d.data);
    assert_reads(&f, synced);
    fx_check(&f);
    struct engine_stats s;
    cr_assert_eq(engine_stats(f.e, NULL, &s), 0);
    cr_assert_gt(s.dedup_hits, 0, "the patterns must have been shared");
    engine_export_close(f.ex);
    engine_close(f.e);
    io_fake_uninstall();
    tmpdir_rm(d.dir);
}

Test(powercut, flushed_state_survives_with_rocksdb_index)
{
    log_set_level(LOG_LEVEL_ERROR);
    for (uint64_t s = 1; s <= 2; s++)
        run(s, "rocksdb");
}

Test(powercut, flushed_state_survives_with_memory_index)
{
    log_set_level(LOG_LEVEL_ERROR);
    run(3, "memory");
}

/* A failed segment fdatasync (Linux forgets the failed pages) fails every later FLUSH of
 * that engine, is reported by store_stats, and after a power cut and restart the export
 * reads as at the last successful FLUSH, with a clean check and working flushes again. */
Test(powercut, a_failed_sync_fails_every_later_flush_until_restart)
{
    log_set_level(LOG_LEVEL_ERROR);
    struct dirs d;
    dirs_new(&d);
    io_fake_install();
    static uint8_t synced[REGION], later[REGION];
    fx_fill(synced, REGION, 77);
    fx_fill(later, REGION, 78);
    struct fx f = {0};
    open_engine(&f, d.data);
    cr_assert_eq(engine_write(f.ex, 0, REGION, synced, 0), 0);
    cr_assert_eq(engine_flush(f.e), 0);
    copy_dir(d.db, d.snap);
    struct store_stats ss;
    cr_assert_eq(store_stats(engine_store(f.e), &ss), 0);
    cr_assert_eq(ss.sync_error, 0);

    cr_assert_eq(engine_write(f.ex, 0, REGION / 2, later, 0), 0);
    io_fake_fail_syncs(1);
    cr_assert_eq(engine_flush(f.e), -EIO);
    cr_assert_eq(engine_write(f.ex, REGION / 2, REGION / 2, later + REGION / 2, 0), 0);
    cr_assert_eq(engine_flush(f.e), -EIO, "the next flush must not promise the lost bytes");
    cr_assert_eq(store_stats(engine_store(f.e), &ss), 0);
    cr_assert_eq(ss.sync_error, -EIO);

    io_fake_fail_all(true);
    engine_export_close(f.ex);
    engine_close(f.e);
    io_fake_fail_all(false);
    io_fake_power_cut(7);
    tmpdir_rm(d.db);
    copy_dir(d.snap, d.db);
    open_engine(&f, d.data);
    assert_reads(&f, synced);
    fx_check(&f);
    cr_assert_eq(engine_flush(f.e), 0);
    cr_assert_eq(store_stats(engine_store(f.e), &ss), 0);
    cr_assert_eq(ss.sync_error, 0);
    engine_export_close(f.ex);
    engine_close(f.e);
    io_fake_uninstall();
    tmpdir_rm(d.dir);
}
