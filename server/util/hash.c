/* hash: dispatch from algorithm id to the library that computes it. */
#include "hash.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include <openssl/sha.h>
#include <xxhash.h>

#include "sha256x2.h"

size_t
hash_len(enum dedupd_hash_alg alg)
{
    switch (alg) {
    case DEDUPD_HASH_SHA256:
        return 32;
    case DEDUPD_HASH_XXH3_128:
        return 16;
    default:
        return 0;
    }
}

const char *
hash_name(enum dedupd_hash_alg alg)
{
    switch (alg) {
    case DEDUPD_HASH_SHA256:
        return "sha256";
    case DEDUPD_HASH_XXH3_128:
        return "xxh3";
    default:
        return NULL;
    }
}

int
hash_parse(const char *name, enum dedupd_hash_alg *out)
{
    if (!name)
        return -EINVAL;
    if (strcmp(name, "sha256") == 0 || strcmp(name, "sha-256") == 0) {
        *out = DEDUPD_HASH_SHA256;
        return 0;
    }
    if (strcmp(name, "xxh3") == 0 || strcmp(name, "xxh3-128") == 0 || strcmp(name, "xxh128") == 0) {
        *out = DEDUPD_HASH_XXH3_128;
        return 0;
    }
    return -EINVAL;
}

int
hash_needs_verify(enum dedupd_hash_alg alg)
{
    return alg != DEDUPD_HASH_SHA256;
}

int
hash_compute(enum dedupd_hash_alg alg, const void *buf, size_t len,
             uint8_t out[DEDUPD_HASH_MAX_LEN])
{
    switch (alg) {
    case DEDUPD_HASH_SHA256:
        SHA256(buf, len, out);
        return 32;
    case DEDUPD_HASH_XXH3_128: {
        /* Canonical form is big-endian, so the bytes are the same on every host. */
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(buf, len));
        memcpy(out, c.digest, 16);
        return 16;
    }
    default:
        return -EINVAL;
    }
}

/* Whether sha256x2 can run here: asked of the CPU once. */
static bool
have_sha256x2(void)
{
    static _Atomic int known = -1;
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        v = sha256x2_available();
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}

int
hash_compute2(enum dedupd_hash_alg alg, const void *a, const void *b, size_t len,
              uint8_t out_a[DEDUPD_HASH_MAX_LEN], uint8_t out_b[DEDUPD_HASH_MAX_LEN])
{
    if (alg == DEDUPD_HASH_SHA256 && have_sha256x2()) {
        sha256x2(a, b, len, out_a, out_b);
        return 32;
    }
    int rc = hash_compute(alg, a, len, out_a);
    return rc < 0 ? rc : hash_compute(alg, b, len, out_b);
}
