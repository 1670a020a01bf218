/* Shared by the store tests: a data directory per test and chunk contents by seed. */
#ifndef DD_TEST_STORE_HELPERS_H
#define DD_TEST_STORE_HELPERS_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakes/tmpdir.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "store/record.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/log.h"

/* Declares test suite `name` with what most store test files share: a fresh data
 * directory per test in `dir` (removed after it) and the log quieted to errors. */
#define STORE_SUITE(name)                                                                          \
    static char dir[64];                                                                           \
    static void name##_init(void)                                                                  \
    {                                                                                              \
        log_set_level(LOG_LEVEL_ERROR);                                                            \
        /* unit_store_check_windows: every check in windows of a few chunks */                     \
        const char *w_ = getenv("DEDUPD_TEST_CHECK_WINDOW");                                       \
        store_test_check_window(w_ ? strtoull(w_, NULL, 10) : 0);                                  \
        cr_assert_not_null(tmpdir_new(dir, sizeof(dir)));                                          \
    }                                                                                              \
    static void name##_fini(void)                                                                  \
    {                                                                                              \
        tmpdir_rm(dir);                                                                            \
    }                                                                                              \
    TestSuite(name, .init = name##_init, .fini = name##_fini)

/* Deterministic bytes for (seed, len): different seeds give different chunks. */
static inline void
fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t) x;
    }
}

/* Adds a chunk with content fill(seed) and its SHA-256; returns the id. */
static inline uint64_t
add(struct store_txn *tx, uint64_t seed, uint32_t len)
{
    uint8_t buf[65536], h[DEDUPD_HASH_MAX_LEN];
    cr_assert_leq(len, sizeof(buf));
    fill(buf, len, seed);
    hash_compute(DEDUPD_HASH_SHA256, buf, len, h);
    uint64_t id = 0;
    cr_assert_eq(store_txn_add_chunk(tx, DEDUPD_HASH_SHA256, h, 32, buf, len, &id), 0);
    return id;
}

/* Puts the `hash` entry naming chunk id into the transaction's batch, as the rocksdb index
 * back-end does for a new chunk. */
static inline void
put_hash(struct store_txn *tx, uint64_t id)
{
    struct store_chunk_info ci;
    cr_assert_eq(store_txn_chunk_get(tx, id, &ci), 0);
    uint8_t hk[META_HASH_KEY_MAX], v[8];
    size_t hl = meta_key_hash_encode(hk, ci.hash_alg, ci.hash, ci.hash_len);
    meta_val_id_encode(v, id);
    meta_batch_put(store_txn_batch(tx), META_CF_HASH, hk, hl, v, 8);
}

/* Opens the database of the (closed) store in data_dir directly, bypassing the store. */
static inline struct meta *
open_db_of(const char *data_dir, bool read_only)
{
    char db[256];
    snprintf(db, sizeof(db), "%s/db", data_dir);
    struct meta *m = NULL;
    struct meta_options mo = {.read_only = read_only};
    cr_assert_eq(meta_open(db, &mo, &m), 0);
    return m;
}

/* Damages chunk id's record on disk in the store at data_dir: the byte `at` bytes into
 * its stored data gets `mask` xored in. */
static inline void
flip_data_byte(struct store *st, const char *data_dir, uint64_t id, uint32_t at, uint8_t mask)
{
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, id, &ci), 0);
    char path[512];
    snprintf(path, sizeof(path), "%s/segments/seg-%08u.log", data_dir, ci.seg);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t c;
    off_t off = (off_t) ci.off + STORE_RECORD_HDR_LEN + at;
    cr_assert_eq(pread(fd, &c, 1, off), 1);
    c ^= mask;
    cr_assert_eq(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

static inline void
expect_bytes(struct store *st, uint64_t id, uint64_t seed, uint32_t len)
{
    uint8_t buf[65536], want[65536];
    fill(want, len, seed);
    cr_assert_eq(store_chunk_read(st, id, buf, sizeof(buf)), (ssize_t) len, "chunk %lu",
                 (unsigned long) id);
    cr_assert_eq(memcmp(buf, want, len), 0, "chunk %lu bytes differ", (unsigned long) id);
}

#endif
