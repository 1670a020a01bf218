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
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = ~crc;
    while (len && ((uintptr_t) p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t) c, *p++);
        len--;
    }
    /* One 8-byte crc32 per cycle-ish; three interleaved streams would be faster still, but
     * this already runs at several GB/s, far above the disk. */
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
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
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("sse4.2") ? 1 : 0; /* idempotent: a race is harmless */
    return have == 1;
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
