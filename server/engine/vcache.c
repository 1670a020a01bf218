/* vcache: the bytes of chunks a verifying write recently read back (invariant 6).
 *
 * With verify on (xxh3-128 forces it), every index hit is a byte comparison with the stored
 * chunk. Duplicate data is mostly a few hot chunks written again and again, and reading
 * each back from its segment — a copy out of the page cache and a CRC of 4 KiB — was ~16%
 * of a duplicate write's CPU. A chunk's bytes never change and its id is never reused
 * (invariant 1; compaction moves records, not bytes), so bytes read once, CRC-checked by
 * the store, can be compared with again without reading them. An entry whose chunk has
 * been freed meanwhile is harmless: the write shares only a chunk the transaction finds
 * still live, and an id is never handed out again.
 *
 * Direct-mapped by chunk id, SLOTS slots of VCACHE_CHUNK_BYTES (only chunks of exactly that
 * size are kept: the default chunk size). The byte array is one mapping whose pages become
 * resident only as inserts fill slots, so a server that never verifies keeps none of it.
 * Slots are guarded by striped mutexes; a comparison runs under its stripe's lock (a memcmp
 * of 4 KiB). */
#include "engine/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS_LOG2 12
#define SLOTS      (1u << SLOTS_LOG2) /* 16 MiB of bytes at 4 KiB */
#define STRIPES    64u

struct engine_vcache {
    pthread_mutex_t mu[STRIPES];
    uint64_t ids[SLOTS]; /* 0: empty (chunk ids start at 1) */
    uint8_t *bytes;      /* SLOTS * VCACHE_CHUNK_BYTES */
};

static uint32_t
slot_of(uint64_t id)
{
    return (uint32_t) ((id * 0x9E3779B97F4A7C15ull) >> (64 - SLOTS_LOG2)); /* Fibonacci */
}

int
engine__vcache_create(struct engine_vcache **out)
{
    struct engine_vcache *vc = calloc(1, sizeof(*vc));
    if (!vc)
        return -ENOMEM;
    /* Larger than malloc's mmap threshold: untouched pages cost address space only. */
    vc->bytes = malloc((size_t) SLOTS * VCACHE_CHUNK_BYTES);
    if (!vc->bytes) {
        free(vc);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < STRIPES; i++)
        pthread_mutex_init(&vc->mu[i], NULL);
    *out = vc;
    return 0;
}

void
engine__vcache_destroy(struct engine_vcache *vc)
{
    if (!vc)
        return;
    for (uint32_t i = 0; i < STRIPES; i++)
        pthread_mutex_destroy(&vc->mu[i]);
    free(vc->bytes);
    free(vc);
}

int
engine__vcache_compare(struct engine_vcache *vc, uint64_t id, const void *data, size_t len)
{
    if (len != VCACHE_CHUNK_BYTES || id == 0)
        return -ENOENT;
    uint32_t s = slot_of(id);
    pthread_mutex_t *mu = &vc->mu[s % STRIPES];
    pthread_mutex_lock(mu);
    int rc = -ENOENT;
    if (vc->ids[s] == id)
        rc = memcmp(vc->bytes + (size_t) s * VCACHE_CHUNK_BYTES, data, len) == 0;
    pthread_mutex_unlock(mu);
    return rc;
}

void
engine__vcache_put(struct engine_vcache *vc, uint64_t id, const void *stored, size_t len)
{
    if (len != VCACHE_CHUNK_BYTES || id == 0)
        return;
    uint32_t s = slot_of(id);
    pthread_mutex_t *mu = &vc->mu[s % STRIPES];
    pthread_mutex_lock(mu);
    memcpy(vc->bytes + (size_t) s * VCACHE_CHUNK_BYTES, stored, len);
    vc->ids[s] = id;
    pthread_mutex_unlock(mu);
}
