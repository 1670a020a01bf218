/* store_bench: throughput of the chunk store's put and get, and its metadata bytes per
 * chunk, on this machine. Not a test: run by hand (docs/store.md has the numbers).
 *
 *   store_bench [--dir DIR] [--mib N] [--chunk BYTES]... [--txn CHUNKS] [--seg-mib N]
 *
 * put: transactions of --txn unique chunks (add_chunk + map_set + a hash entry in the same
 *      batch, as the engine with the rocksdb hash back-end does), then one store_sync;
 *      the sync is inside the timing.
 * get: map_get + store_chunk_read of every block in a shuffled order (page cache warm,
 *      since the data was just written: this measures the store's own overhead).
 * meta: RocksDB bytes on disk after flushing memtables, divided by live chunks.
 * Chunk contents are xorshift noise (no dedup, nothing compressible). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "meta/keys.h"
#include "meta/meta.h"
#include "store/store.h"
#include "util/log.h"

static double
now_sec(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

static void
fill(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

static int
run(const char *dir, uint32_t chunk, uint64_t total, unsigned per_txn, uint64_t seg_bytes)
{
    struct store_options o = {.seg_bytes = seg_bytes};
    struct store *st = NULL;
    int rc = store_open(dir, &o, &st);
    if (rc) {
        fprintf(stderr, "store_bench: open %s: %s\n", dir, strerror(-rc));
        return 1;
    }
    uint64_t n = total / chunk;
    uint8_t *buf = malloc(chunk);
    uint64_t *order = malloc(n * sizeof(*order));
    if (!buf || !order)
        return 1;
    uint32_t export_id = chunk; /* one export per chunk size */

    double t0 = now_sec();
    for (uint64_t i = 0; i < n && rc == 0;) {
        struct store_txn *tx;
        rc = store_txn_begin(st, &tx);
        for (unsigned k = 0; k < per_txn && i < n && rc == 0; k++, i++) {
            fill(buf, chunk, i + 1 + ((uint64_t) chunk << 32));
            uint8_t hash[32];
            memcpy(hash, buf, 32); /* the store records hashes, it does not compute them */
            uint64_t id;
            rc = store_txn_add_chunk(tx, 1, hash, 32, buf, chunk, &id);
            if (rc == 0)
                rc = store_txn_map_set(tx, export_id, i, id);
            if (rc == 0) {
                uint8_t hk[META_HASH_KEY_MAX], hv[META_ID_VAL_LEN];
                size_t hl = meta_key_hash_encode(hk, 1, hash, 32);
                meta_val_id_encode(hv, id);
                meta_batch_put(store_txn_batch(tx), META_CF_HASH, hk, hl, hv, sizeof(hv));
            }
        }
        if (rc == 0)
            rc = store_txn_commit(tx, NULL, NULL);
        else
            store_txn_abort(tx);
    }
    if (rc == 0)
        rc = store_sync(st);
    double t_put = now_sec() - t0;
    if (rc) {
        fprintf(stderr, "store_bench: put: %s\n", strerror(-rc));
        return 1;
    }

    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    uint64_t x = 88172645463325252ULL;
    for (uint64_t i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t j = x % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    t0 = now_sec();
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id;
        rc = store_map_get(st, export_id, order[i], &id);
        ssize_t r = rc ? rc : store_chunk_read(st, id, buf, chunk);
        if (r != (ssize_t) chunk) {
            fprintf(stderr, "store_bench: get block %" PRIu64 ": %zd\n", order[i], r);
            return 1;
        }
    }
    double t_get = now_sec() - t0;

    meta_flush_memtables(store_meta(st), true);
    struct store_stats s;
    store_stats(st, &s);
    double mib = (double) (n * chunk) / (1 << 20);
    printf("chunk %6u B  txn %3u  %7" PRIu64 " chunks  put %8.1f MiB/s %9.0f chunks/s  "
           "get %8.1f MiB/s %9.0f chunks/s  meta %6.1f B/chunk  segments %.3f B/B\n",
           chunk, per_txn, n, mib / t_put, (double) n / t_put, mib / t_get, (double) n / t_get,
           s.chunks ? (double) s.meta_bytes / (double) s.chunks : 0.0,
           (double) s.disk_bytes / (double) (n * chunk));
    free(buf);
    free(order);
    store_close(st);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *dir = NULL;
    uint64_t mib = 64, seg_mib = 256;
    unsigned per_txn = 8;
    uint32_t chunks[8];
    int nchunks = 0;
    static const struct option longopts[] = {
        {"dir", required_argument, NULL, 'd'},     {"mib", required_argument, NULL, 'm'},
        {"chunk", required_argument, NULL, 'c'},   {"txn", required_argument, NULL, 't'},
        {"seg-mib", required_argument, NULL, 's'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:m:c:t:s:", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 'm':
            mib = strtoull(optarg, NULL, 10);
            break;
        case 'c':
            if (nchunks < 8)
                chunks[nchunks++] = (uint32_t) strtoul(optarg, NULL, 10);
            break;
        case 't':
            per_txn = (unsigned) strtoul(optarg, NULL, 10);
            break;
        case 's':
            seg_mib = strtoull(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: store_bench [--dir DIR] [--mib N] [--chunk BYTES]... "
                            "[--txn CHUNKS] [--seg-mib N]\n");
            return 2;
        }
    }
    if (nchunks == 0) {
        chunks[nchunks++] = 4096;
        chunks[nchunks++] = 65536;
    }
    if (per_txn == 0 || mib == 0)
        return 2;
    char tmp[] = "/tmp/store-bench-XXXXXX";
    if (!dir && !(dir = mkdtemp(tmp))) {
        perror("store_bench: mkdtemp");
        return 1;
    }
    log_set_level(LOG_LEVEL_WARN);
    for (int i = 0; i < nchunks; i++) {
        if (chunks[i] < DEDUPD_CHUNK_MIN || chunks[i] > DEDUPD_CHUNK_MAX) {
            fprintf(stderr, "store_bench: chunk size %u out of range\n", chunks[i]);
            return 2;
        }
        char sub[4096];
        snprintf(sub, sizeof(sub), "%s/c%u", dir, chunks[i]);
        if (run(sub, chunks[i], mib << 20, per_txn, seg_mib << 20))
            return 1;
    }
    if (dir == tmp)
        printf("(data left in %s)\n", tmp);
    return 0;
}
