/* hash: dispatch from algorithm id to the library that computes it. */
#include "hash.h"

#include <errno.h>
#include <string.h>

#include <openssl/sha.h>
#include <xxhash.h>

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
