/* crc32c: CRC-32C with a run-time choice between the SSE4.2 instruction and a slicing-by-8
 * table loop. No Debian package ships a maintained CRC32C library (libcrc32c-dev is not in
 * the archive), so the two short loops live here. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u /* 0x1EDC6F41 bit-reflected */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void
table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
}

uint32_t
crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    pthread_once(&table_once, table_init);
    crc = ~crc;
    while (len && ((uintptr_t) p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* little-endian host assumed below (x86-64, arm64) */
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__)
/* The crc32 instruction takes 3 cycles but can start one every cycle, so one stream of
 * 8-byte steps runs at a third of what the core can do. Three streams over three adjacent
 * blocks of a fixed length run in parallel; the block CRCs are then joined with a "shift by
 * the block length" operator. That operator (the CRC register after the block's length of
 * zero bytes) is linear in the register, so it is a table lookup per register byte, built
 * once from the instruction itself. CRC of 4 KiB chunks: ~2.5x faster than one stream. */
#define BLOCK_LONG  1360 /* 3 x 1360 = 4080: a 4 KiB chunk in one round plus 16 bytes */
#define BLOCK_SHORT 168

static uint32_t shift_long[4][256], shift_short[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint64_t
crc_zeros(uint64_t c, size_t len)
{
    for (size_t i = 0; i < len; i += 8)
        c = __builtin_ia32_crc32di(c, 0);
    return c;
}

__attribute__((target("sse4.2"))) static void
shift_table(uint32_t t[4][256], size_t len)
{
    uint32_t bit[32];
    for (int k = 0; k < 32; k++)
        bit[k] = (uint32_t) crc_zeros(1u << k, len);
    for (int byte = 0; byte < 4; byte++) {
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int k = 0; k < 8; k++)
                if (v & (1u << k))
                    r ^= bit[byte * 8 + k];
            t[byte][v] = r;
        }
    }
}

static void
shift_init(void)
{
    shift_table(shift_long, BLOCK_LONG);
    shift_table(shift_short, BLOCK_SHORT);
}

static inline uint64_t
shift(uint32_t t[4][256], uint64_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][(c >> 24) & 0xff];
}

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Three streams over p[0, 3 * block): the register after all of it, starting from c. */
__attribute__((target("sse4.2"))) static uint64_t
crc_3way(uint64_t c, const uint8_t *p, size_t block, uint32_t t[4][256])
{
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < block; i += 8) {
        c = __builtin_ia32_crc32di(c, load64(p + i));
        c1 = __builtin_ia32_crc32di(c1, load64(p + block + i));
        c2 = __builtin_ia32_crc32di(c2, load64(p + 2 * block + i));
    }
    c = shift(t, c) ^ c1;
    return shift(t, c) ^ c2;
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = ~crc;
    while (len && ((uintptr_t) p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t) c, *p++);
        len--;
    }
    if (len >= 3 * BLOCK_SHORT)
        pthread_once(&shift_once, shift_init);
    for (; len >= 3 * BLOCK_LONG; p += 3 * BLOCK_LONG, len -= 3 * BLOCK_LONG)
        c = crc_3way(c, p, BLOCK_LONG, shift_long);
    for (; len >= 3 * BLOCK_SHORT; p += 3 * BLOCK_SHORT, len -= 3 * BLOCK_SHORT)
        c = crc_3way(c, p, BLOCK_SHORT, shift_short);
    while (len >= 8) {
        c = __builtin_ia32_crc32di(c, load64(p));
        p += 8;
        len -= 8;
    }
    while (len--)
        c = __builtin_ia32_crc32qi((uint32_t) c, *p++);
    return ~(uint32_t) c;
}

bool
crc32c_hw_available(void)
{
    /* Worker threads ask at once: relaxed atomics (plain loads on x86) make the idempotent
     * first store a defined race, one ThreadSanitizer does not report. */
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h == 1;
}

uint32_t
crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (crc32c_hw_available())
        return crc32c_hw(crc, buf, len);
    return crc32c_sw(crc, buf, len);
}
#else
bool
crc32c_hw_available(void)
{
    return false;
}

uint32_t
crc32c(uint32_t crc, const void *buf, size_t len)
{
    return crc32c_sw(crc, buf, len);
}
#endif
