/* The idle flush: once writes stop, the background thread flushes well-filled memtables
 * (store.c, store__idle_tick), and only then. */
#include "helpers.h"

#include <dirent.h>
#include <time.h>

STORE_SUITE(idle);

#define NBLK 64

static struct store *
open_idle(uint64_t idle_flush_entries)
{
    struct store_options o = {.background_compaction = true,
                              .idle_flush_entries = idle_flush_entries};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    return st;
}

/* Maps blocks [0, NBLK) to new chunks with seeds base + blk, one transaction. */
static void
write_blocks(struct store *st, uint64_t base)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (unsigned b = 0; b < NBLK; b++)
        cr_assert_eq(store_txn_map_set(tx, 1, b, add(tx, base + b, 4096)), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

static void
expect_blocks(struct store *st, uint64_t base)
{
    for (unsigned b = 0; b < NBLK; b++) {
        uint64_t id = 0;
        cr_assert_eq(store_map_get(st, 1, b, &id), 0);
        expect_bytes(st, id, base + b, 4096);
    }
}

static uint64_t
idle_flushes(struct store *st)
{
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    return s.idle_flushes;
}

/* SST files in the database: a new one appears with each memtable flush. */
static unsigned
sst_files(void)
{
    char db[256];
    snprintf(db, sizeof(db), "%s/db", dir);
    DIR *d = opendir(db);
    cr_assert_not_null(d);
    unsigned n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        n += len > 4 && !strcmp(e->d_name + len - 4, ".sst");
    }
    closedir(d);
    return n;
}

static void
sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Up to 10 s for the idle flush count to reach want. */
static void
await_idle_flushes(struct store *st, uint64_t want)
{
    for (int i = 0; i < 100 && idle_flushes(st) < want; i++)
        sleep_ms(100);
    cr_assert_eq(idle_flushes(st), want);
}

Test(idle, memtables_are_flushed_once_writes_stop_and_not_while_they_go_on)
{
    struct store *st = open_idle(100);
    const unsigned ssts = sst_files(); /* the open may have flushed the format entries */
    /* A write every half second for 4 s: never two idle ticks in a row. */
    for (int i = 0; i < 8; i++) {
        write_blocks(st, 1000 * (uint64_t) (i + 1));
        sleep_ms(500);
    }
    cr_assert_eq(idle_flushes(st), 0, "flushed while writes went on");
    cr_assert_eq(sst_files(), ssts);

    await_idle_flushes(st, 1);
    for (int i = 0; i < 100 && sst_files() == ssts; i++) /* the flush is not waited for */
        sleep_ms(100);
    cr_assert_gt(sst_files(), ssts, "no SST file after the idle flush");
    expect_blocks(st, 8000);

    /* Still idle: nothing more to flush, and no second flush. */
    sleep_ms(3500);
    cr_assert_eq(idle_flushes(st), 1);

    /* A new burst and a new pause: one more. */
    write_blocks(st, 20000);
    write_blocks(st, 30000);
    await_idle_flushes(st, 2);
    expect_blocks(st, 30000);

    store_close(st);
    st = open_idle(100);
    expect_blocks(st, 30000);
    store_close(st);
}

Test(idle, small_memtables_stay_in_memory)
{
    struct store *st = open_idle(0); /* the default: 65536 entries */
    const unsigned ssts = sst_files();
    write_blocks(st, 1000);
    sleep_ms(4000);
    cr_assert_eq(idle_flushes(st), 0);
    cr_assert_eq(sst_files(), ssts);
    store_close(st);
}
