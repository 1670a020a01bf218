/* engine_bench: the engine's write throughput for unique and for duplicate data, at chunk
 * sizes 4 KiB .. 1 MiB, with each hash-index back-end. Each configuration runs on a fresh
 * data directory: pass 1 writes MIB of random (never repeating, never zero) data, pass 2
 * writes the same bytes again at another offset, so every chunk is a dedup hit. Each pass
 * ends with a flush, so the time includes making it durable. Single writer thread: it
 * measures the per-request path (hashing, index, one transaction per request), not
 * parallelism. Results feed docs/engine.md.
 * With --images A,B,..., it instead writes those image files (engine_images.sh builds a
 * set) into one export each, at every chunk size, and reports the dedup ratio the engine
 * reaches: logical non-zero bytes / unique bytes stored.
 * Usage: engine_bench [--mib N] [--req BYTES] [--dir DIR] [--hash sha256|xxh3]
 *                     [--chunk BYTES] [--backend NAME] [--repeat N]
 *        engine_bench --images A,B,... [--dir DIR] */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "util/hash.h"
#include "util/log.h"

static const uint32_t chunk_sizes[] = {4u << 10, 16u << 10, 64u << 10, 128u << 10, 1u << 20};
static const char *const backends[] = {"rocksdb", "memory"};

static double
clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static double
now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of the whole process (RocksDB's threads included): on a shared machine this
 * measures the cost of a pass better than the wall clock does. */
static double
cpu_s(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    return remove(path);
}

static void
fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t v = x | 0x0101010101010101ULL; /* no zero chunk by accident */
        memcpy(p + i, &v, 8);
    }
}

/* Writes data at off in requests of req bytes, then flushes. Wall seconds (and CPU seconds
 * in *cpu), or < 0 on error. */
static double
write_pass(struct engine *e, struct engine_export *ex, uint64_t off, const uint8_t *data,
           uint64_t len, uint32_t req, double *cpu)
{
    double t0 = now_s(), c0 = cpu_s();
    for (uint64_t done = 0; done < len; done += req) {
        uint32_t n = (uint32_t) (len - done < req ? len - done : req);
        int rc = engine_write(ex, off + done, n, data + done, 0);
        if (rc < 0) {
            fprintf(stderr, "engine_bench: write: %s\n", strerror(-rc));
            return -1;
        }
    }
    if (engine_flush(e) < 0)
        return -1;
    *cpu = cpu_s() - c0;
    return now_s() - t0;
}

static int
run_one(const char *base, const char *backend, enum dedupd_hash_alg alg, uint32_t cs,
        const uint8_t *data, uint64_t len, uint32_t req)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/engine-bench-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("engine_bench: mkdtemp");
        return -1;
    }
    struct engine_options o = {.data_dir = dir};
    struct engine *e = NULL;
    struct engine_export *ex = NULL;
    int rc = engine_open(&o, &e);
    if (rc == 0) {
        struct engine_dedup_config c;
        engine_dedup_get(e, &c);
        snprintf(c.backend, sizeof(c.backend), "%s", backend);
        c.hash_alg = alg;
        rc = engine_dedup_set(e, &c);
    }
    if (rc == 0)
        rc = engine_export_create(e, "bench", 2 * len, cs, 0, NULL);
    if (rc == 0)
        rc = engine_export_open(e, "bench", &ex);
    if (rc < 0) {
        fprintf(stderr, "engine_bench: setup: %s\n", strerror(-rc));
    } else {
        uint32_t r = req < cs ? cs : req;
        double cu = 0, cd = 0;
        double tu = write_pass(e, ex, 0, data, len, r, &cu);
        double td = tu < 0 ? -1 : write_pass(e, ex, len, data, len, r, &cd);
        struct engine_stats s;
        engine_stats(e, NULL, &s);
        if (td < 0) {
            rc = -EIO;
        } else {
            double mib = (double) len / (1 << 20);
            printf("| %-7s | %7u KiB | %8.1f | %8.1f | %8.1f | %8.1f | %8" PRIu64 " | %8" PRIu64
                   " |\n",
                   backend, cs >> 10, mib / tu, mib / td, mib / cu, mib / cd, s.dedup_misses,
                   s.dedup_hits);
            fflush(stdout);
        }
    }
    engine_export_close(ex);
    engine_close(e);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return rc;
}

/* Writes every image into its own export at chunk size cs; prints the ratio row. */
static int
run_images(const char *base, uint32_t cs, char **imgs, int nimg)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/engine-bench-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("engine_bench: mkdtemp");
        return -1;
    }
    struct engine_options o = {.data_dir = dir};
    struct engine *e = NULL;
    int rc = engine_open(&o, &e);
    const uint32_t req = 1u << 20;
    uint8_t *buf = malloc(req);
    uint64_t total = 0;
    double t0 = now_s();
    for (int i = 0; rc == 0 && i < nimg; i++) {
        int fd = open(imgs[i], O_RDONLY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) < 0 || !buf) {
            fprintf(stderr, "engine_bench: %s: %s\n", imgs[i], strerror(errno));
            rc = -EIO;
            if (fd >= 0)
                close(fd);
            break;
        }
        char name[32];
        snprintf(name, sizeof(name), "img%d", i);
        uint64_t size = ((uint64_t) sb.st_size + cs - 1) / cs * cs;
        struct engine_export *ex = NULL;
        rc = engine_export_create(e, name, size, cs, 0, NULL);
        if (rc == 0)
            rc = engine_export_open(e, name, &ex);
        for (uint64_t off = 0; rc == 0 && off < (uint64_t) sb.st_size; off += req) {
            ssize_t n = pread(fd, buf, req, (off_t) off);
            if (n <= 0) {
                rc = -EIO;
                break;
            }
            rc = engine_write(ex, off, (uint32_t) n, buf, 0);
            total += (uint64_t) n;
        }
        engine_export_close(ex);
        close(fd);
    }
    if (rc == 0)
        rc = engine_flush(e);
    double t = now_s() - t0;
    struct engine_stats s;
    if (rc == 0 && engine_stats(e, NULL, &s) == 0) {
        double mib = 1 << 20;
        printf("| %7u KiB | %8.1f | %8.1f | %8.1f | %5.2f | %7.1f |\n", cs >> 10,
               (double) s.logical_bytes / mib, (double) s.unique_bytes / mib,
               (double) s.zero_bytes / mib,
               s.unique_bytes ? (double) s.logical_bytes / (double) s.unique_bytes : 0.0,
               (double) total / mib / t);
        fflush(stdout);
    } else if (rc < 0) {
        fprintf(stderr, "engine_bench: images at chunk %u: %s\n", cs, strerror(-rc));
    }
    free(buf);
    engine_close(e);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static int
images_main(const char *base, char *list)
{
    char *imgs[16];
    int n = 0;
    for (char *tok = strtok(list, ","); tok && n < 16; tok = strtok(NULL, ","))
        imgs[n++] = tok;
    if (n == 0)
        return 2;
    printf("engine_bench: dedup ratio over %d images (sha256, rocksdb back-end)\n\n", n);
    printf("| chunk | logical MiB | unique MiB | zero MiB | ratio | MiB/s |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    for (size_t c = 0; c < sizeof(chunk_sizes) / sizeof(chunk_sizes[0]); c++)
        if (run_images(base, chunk_sizes[c], imgs, n) < 0)
            return 1;
    return 0;
}

int
main(int argc, char **argv)
{
    uint64_t mib = 64;
    uint32_t req = 256u << 10; /* a typical file-system request */
    const char *base = "/tmp";
    enum dedupd_hash_alg alg = DEDUPD_HASH_SHA256;
    char *images = NULL;
    uint32_t only_cs = 0;
    const char *only_backend = NULL;
    int repeat = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--req") && i + 1 < argc)
            req = (uint32_t) strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            only_cs = (uint32_t) strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            only_backend = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--images") && i + 1 < argc)
            images = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            base = argv[++i];
        else if (!strcmp(argv[i], "--hash") && i + 1 < argc) {
            if (hash_parse(argv[++i], &alg) < 0) {
                fprintf(stderr, "engine_bench: unknown hash %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--mib N] [--req BYTES] [--dir DIR] [--hash ALG]\n"
                    "          [--chunk BYTES] [--backend NAME] [--repeat N]\n"
                    "       %s --images A,B,... [--dir DIR]\n",
                    argv[0], argv[0]);
            return 2;
        }
    }
    if (mib == 0 || req == 0 || req > DEDUPD_NBD_MAX_PAYLOAD) {
        fprintf(stderr, "engine_bench: bad --mib or --req\n");
        return 2;
    }
    log_set_level(LOG_LEVEL_WARN);
    if (images)
        return images_main(base, images);
    uint64_t len = mib << 20;
    uint8_t *data = malloc(len);
    if (!data)
        return 1;
    fill_random(data, len, 0x1234567);
    printf("engine_bench: %" PRIu64 " MiB per pass, %u KiB requests, hash %s, 1 writer\n\n", mib,
           req >> 10, hash_name(alg));
    printf("| back-end | chunk | unique MiB/s | duplicate MiB/s | unique MiB/cpu-s | "
           "duplicate MiB/cpu-s | misses | hits |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]) && rc == 0; b++)
        for (size_t c = 0; c < sizeof(chunk_sizes) / sizeof(chunk_sizes[0]) && rc == 0; c++) {
            if ((only_backend && strcmp(only_backend, backends[b])) ||
                (only_cs && only_cs != chunk_sizes[c]))
                continue;
            for (int r = 0; r < repeat && rc == 0; r++)
                rc = run_one(base, backends[b], alg, chunk_sizes[c], data, len, req);
        }
    free(data);
    return rc < 0 ? 1 : 0;
}
