/* hash: chunk hashes by algorithm id (include/dedupd/hash.h). Any thread; no state.
 * SHA-256 goes through OpenSSL's one-shot SHA256(), which uses SHA-NI / AVX2 where the CPU
 * has them, and pairs of equal-length messages through sha256x2 where the CPU has SHA-NI;
 * xxh3-128 through libxxhash. */
#ifndef DD_UTIL_HASH_H
#define DD_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "dedupd/hash.h"
#include "dedupd/limits.h"

/* Digest length of alg, or 0 for an unknown alg (and for DEDUPD_HASH_NONE). */
size_t hash_len(enum dedupd_hash_alg alg);
/* "sha256", "xxh3" or NULL. */
const char *hash_name(enum dedupd_hash_alg alg);
/* 0 and *out, or -EINVAL. Accepts "sha256", "xxh3", "xxh3-128". */
int hash_parse(const char *name, enum dedupd_hash_alg *out);
/* True when equal hashes are not proof of equal bytes (byte comparison is mandatory). */
int hash_needs_verify(enum dedupd_hash_alg alg);
/* Writes hash_len(alg) bytes to out. Returns that length, or -EINVAL for an unknown alg. */
int hash_compute(enum dedupd_hash_alg alg, const void *buf, size_t len,
                 uint8_t out[DEDUPD_HASH_MAX_LEN]);
/* hash_compute of two buffers of the same length, a into out_a and b into out_b: for
 * SHA-256 both at once where the CPU allows (1.4–1.5 times as fast as one after the other here),
 * else one after the other. Returns the digest length, or -EINVAL for an unknown alg. */
int hash_compute2(enum dedupd_hash_alg alg, const void *a, const void *b, size_t len,
                  uint8_t out_a[DEDUPD_HASH_MAX_LEN], uint8_t out_b[DEDUPD_HASH_MAX_LEN]);

#endif
