/* sha256x2: SHA-256 of two messages of the same length at once, for CPUs with the x86 SHA
 * extensions (1.4–1.5 times one stream's throughput here: see sha256x2.c). Any thread; no state. */
#ifndef DD_UTIL_SHA256X2_H
#define DD_UTIL_SHA256X2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when this CPU has the SHA extensions (and SSSE3 and SSE4.1) that sha256x2 uses. */
bool sha256x2_available(void);
/* The SHA-256 digests of msg_a and msg_b, both len bytes long. Only when available. */
void sha256x2(const void *msg_a, const void *msg_b, size_t len, uint8_t digest_a[32],
              uint8_t digest_b[32]);

#endif
