/* sha256x2: SHA-256 of two messages of the same length at once, with the x86 SHA
 * extensions (SHA-NI).
 *
 * Why: one SHA-256 stream is bound by the latency of sha256rnds2 — each pair of rounds
 * waits for the one before — so a core runs it at ~1.6 GB/s here (OpenSSL's SHA-NI code,
 * `openssl speed`), with the SHA unit mostly idle. Two independent messages interleaved
 * round group by round group keep it busy with the other's rounds meanwhile. Chunk writes
 * hash many 4 KiB chunks of equal size, so pairs are the common case. OpenSSL has no
 * multi-buffer SHA-256 for callers (its multi-block code serves only its TLS ciphers), and
 * Debian ships no ISA-L crypto; this file is the only hand-written hash code in dedupd,
 * and tests/unit/util/test_hash.c holds it to OpenSSL's output for every length up to
 * several blocks and for random messages.
 *
 * Layout: the SHA extensions keep the state as two vectors, ABEF and CDGH; the message
 * schedule runs four words per vector (sha256msg1/msg2), and each sha256rnds2 does two
 * rounds, so a 64-byte block is 16 groups of 4 rounds. */
#include "sha256x2.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

static const uint32_t K[64] __attribute__((aligned(16))) = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

#define SHA_TARGET __attribute__((target("sha,ssse3,sse4.1")))

/* pshufb mask that turns each 32-bit word around: SHA-256 words are big-endian. */
SHA_TARGET static inline __m128i
bswap_words(void)
{
    return _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
}

/* One lane's state between blocks, in the extensions' ABEF / CDGH form. */
struct lane {
    __m128i abef, cdgh;
};

SHA_TARGET static inline struct lane
lane_init(void)
{
    __m128i dcba = _mm_loadu_si128((const __m128i *) &H0[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *) &H0[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    struct lane l = {
        .abef = _mm_alignr_epi8(cdab, efgh, 8),
        .cdgh = _mm_blend_epi16(efgh, cdab, 0xF0),
    };
    return l;
}

SHA_TARGET static inline void
lane_digest(struct lane l, uint8_t out[32])
{
    __m128i feba = _mm_shuffle_epi32(l.abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(l.cdgh, 0xB1);
    __m128i dcba = _mm_blend_epi16(feba, dchg, 0xF0);
    __m128i hgfe = _mm_alignr_epi8(dchg, feba, 8);
    const __m128i bswap = bswap_words();
    _mm_storeu_si128((__m128i *) out, _mm_shuffle_epi8(dcba, bswap));
    _mm_storeu_si128((__m128i *) (out + 16), _mm_shuffle_epi8(hgfe, bswap));
}

/* Four rounds of one lane with message words w (already scheduled). */
#define ROUNDS4(l, w, g)                                                                           \
    do {                                                                                           \
        __m128i wk_ = _mm_add_epi32((w), _mm_load_si128((const __m128i *) &K[4 * (g)]));           \
        (l).cdgh = _mm_sha256rnds2_epu32((l).cdgh, (l).abef, wk_);                                 \
        (l).abef = _mm_sha256rnds2_epu32((l).abef, (l).cdgh, _mm_shuffle_epi32(wk_, 0x0E));        \
    } while (0)

/* The next four schedule words from the last sixteen (w0 oldest). */
#define SCHEDULE(w0, w1, w2, w3)                                                                   \
    _mm_sha256msg2_epu32(                                                                          \
        _mm_add_epi32(_mm_sha256msg1_epu32((w0), (w1)), _mm_alignr_epi8((w3), (w2), 4)), (w3))

/* One 64-byte block of each lane, the two lanes' round groups interleaved. */
SHA_TARGET static inline void
blocks_x2(struct lane *a, struct lane *b, const uint8_t *pa, const uint8_t *pb)
{
    const __m128i bswap = bswap_words();
    struct lane sa = *a, sb = *b;
    __m128i wa[4], wb[4];
    for (int i = 0; i < 4; i++) {
        wa[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (pa + 16 * i)), bswap);
        wb[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (pb + 16 * i)), bswap);
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; g++) {
        if (g >= 4) { /* wa[g % 4] still holds the group g - 4 */
            wa[g % 4] = SCHEDULE(wa[g % 4], wa[(g + 1) % 4], wa[(g + 2) % 4], wa[(g + 3) % 4]);
            wb[g % 4] = SCHEDULE(wb[g % 4], wb[(g + 1) % 4], wb[(g + 2) % 4], wb[(g + 3) % 4]);
        }
        ROUNDS4(sa, wa[g % 4], g);
        ROUNDS4(sb, wb[g % 4], g);
    }
    a->abef = _mm_add_epi32(a->abef, sa.abef);
    a->cdgh = _mm_add_epi32(a->cdgh, sa.cdgh);
    b->abef = _mm_add_epi32(b->abef, sb.abef);
    b->cdgh = _mm_add_epi32(b->cdgh, sb.cdgh);
}

/* The padded tail of a len-byte message: its last len % 64 bytes, 0x80, zeros and the bit
 * length, one or two blocks. Returns the number of blocks. */
static size_t
pad_tail(const uint8_t *msg, size_t len, uint8_t tail[128])
{
    size_t rest = len % 64;
    size_t nb = rest < 56 ? 1 : 2;
    memset(tail, 0, 64 * nb);
    memcpy(tail, msg + (len - rest), rest);
    tail[rest] = 0x80;
    uint64_t bits = (uint64_t) len * 8;
    for (int i = 0; i < 8; i++)
        tail[64 * nb - 1 - i] = (uint8_t) (bits >> (8 * i));
    return nb;
}

SHA_TARGET void
sha256x2(const void *msg_a, const void *msg_b, size_t len, uint8_t digest_a[32],
         uint8_t digest_b[32])
{
    const uint8_t *pa = msg_a, *pb = msg_b;
    struct lane a = lane_init(), b = lane_init();
    for (size_t off = 0; off + 64 <= len; off += 64)
        blocks_x2(&a, &b, pa + off, pb + off);
    uint8_t ta[128], tb[128];
    size_t nb = pad_tail(pa, len, ta);
    pad_tail(pb, len, tb);
    for (size_t i = 0; i < nb; i++)
        blocks_x2(&a, &b, ta + 64 * i, tb + 64 * i);
    lane_digest(a, digest_a);
    lane_digest(b, digest_b);
}

bool
sha256x2_available(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return false;
    bool ssse3 = ecx & bit_SSSE3, sse41 = ecx & bit_SSE4_1;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
        return false;
    return ssse3 && sse41 && (ebx & bit_SHA);
}

#else

bool
sha256x2_available(void)
{
    return false;
}

void
sha256x2(const void *msg_a, const void *msg_b, size_t len, uint8_t digest_a[32],
         uint8_t digest_b[32])
{
    (void) msg_a, (void) msg_b, (void) len, (void) digest_a, (void) digest_b;
}

#endif
