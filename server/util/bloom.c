/* bloom.c: the blocked bloom filter. The block is picked by the high 32 bits of the key
 * hash (multiply-shift, so any block count works); the probe bits come from the low 32
 * bits, re-mixed by a multiplication per probe, 9 bits each (a bit of the block's 512). */
#include "util/bloom.h"

#include <stdlib.h>

#define BLOCK_BYTES 64
#define BLOCK_WORDS (BLOCK_BYTES / 8)

struct bloom {
    uint64_t nblocks;
    uint64_t *words; /* nblocks * BLOCK_WORDS, 64-byte aligned, inside mem */
    void *mem;
};

struct bloom *
bloom_new(uint64_t keys, uint64_t max_bytes)
{
    uint64_t bits = keys > UINT64_MAX / BLOOM_BITS_PER_KEY ? UINT64_MAX : keys * BLOOM_BITS_PER_KEY;
    uint64_t nblocks = bits / (BLOCK_BYTES * 8) + 1;
    if (max_bytes && nblocks > max_bytes / BLOCK_BYTES)
        nblocks = max_bytes / BLOCK_BYTES ? max_bytes / BLOCK_BYTES : 1;
    if (nblocks > UINT32_MAX) /* 256 GiB: block_of's multiply-shift works in 64 bits */
        nblocks = UINT32_MAX;
    if (nblocks > SIZE_MAX / BLOCK_BYTES - 1)
        return NULL;
    struct bloom *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->nblocks = nblocks;
    /* calloc, not aligned_alloc + memset: a large calloc gets fresh zero pages from the
     * kernel, so the memory becomes resident as bits are set, not at once — an owner that
     * replaces a filter does not hold two full ones while it swaps them. */
    b->mem = calloc(1, (size_t) nblocks * BLOCK_BYTES + BLOCK_BYTES - 1);
    if (!b->mem) {
        free(b);
        return NULL;
    }
    b->words =
        (uint64_t *) (((uintptr_t) b->mem + BLOCK_BYTES - 1) & ~(uintptr_t) (BLOCK_BYTES - 1));
    return b;
}

void
bloom_free(struct bloom *b)
{
    if (!b)
        return;
    free(b->mem);
    free(b);
}

static uint64_t *
block_of(const struct bloom *b, uint64_t h)
{
    uint64_t i = ((h >> 32) * b->nblocks) >> 32; /* nblocks < 2^32: no overflow */
    return b->words + i * BLOCK_WORDS;
}

void
bloom_add(struct bloom *b, uint64_t h)
{
    uint64_t *blk = block_of(b, h);
    uint32_t x = (uint32_t) h;
    for (int i = 0; i < BLOOM_PROBES; i++) {
        unsigned bit = x >> (32 - 9);
        __atomic_fetch_or(&blk[bit >> 6], 1ULL << (bit & 63), __ATOMIC_RELAXED);
        x *= 0x9e3779b9u;
    }
}

bool
bloom_may_contain(const struct bloom *b, uint64_t h)
{
    const uint64_t *blk = block_of(b, h);
    uint32_t x = (uint32_t) h;
    for (int i = 0; i < BLOOM_PROBES; i++) {
        unsigned bit = x >> (32 - 9);
        if (!(__atomic_load_n(&blk[bit >> 6], __ATOMIC_RELAXED) & (1ULL << (bit & 63))))
            return false;
        x *= 0x9e3779b9u;
    }
    return true;
}

uint64_t
bloom_bytes(const struct bloom *b)
{
    return b->nblocks * BLOCK_BYTES;
}

uint64_t
bloom_capacity(const struct bloom *b)
{
    return b->nblocks * BLOCK_BYTES * 8 / BLOOM_BITS_PER_KEY;
}
