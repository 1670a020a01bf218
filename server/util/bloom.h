/* bloom: a blocked bloom filter over 64-bit key hashes — "certainly absent" or "maybe
 * present", never a false "absent". Each key sets BLOOM_PROBES bits inside one 64-byte
 * block (one cache line), so a test costs one cache miss whatever the size; ~10 bits per
 * key give about 1% false "maybe". No removal: a removed key stays a false "maybe" until the
 * owner builds a new filter.
 * Threads: bloom_add and bloom_may_contain on any threads at once (bits are set with atomic
 * ORs and read with atomic loads); bloom_new/bloom_free are the owner's. */
#ifndef DD_UTIL_BLOOM_H
#define DD_UTIL_BLOOM_H

#include <stdbool.h>
#include <stdint.h>

#define BLOOM_BITS_PER_KEY 10
#define BLOOM_PROBES       6

struct bloom; /* opaque */

/* A filter sized for `keys` keys at BLOOM_BITS_PER_KEY, at most max_bytes (0 = no limit;
 * a full filter then answers "maybe" more often, never "absent" for a key it holds), at
 * least one block. NULL on out-of-memory. */
struct bloom *bloom_new(uint64_t keys, uint64_t max_bytes);
void bloom_free(struct bloom *b); /* NULL is fine */
void bloom_add(struct bloom *b, uint64_t h);
/* False only if h was never added. */
bool bloom_may_contain(const struct bloom *b, uint64_t h);
uint64_t bloom_bytes(const struct bloom *b);
/* Keys the filter holds at its designed rate (bytes * 8 / BLOOM_BITS_PER_KEY). */
uint64_t bloom_capacity(const struct bloom *b);

#endif
