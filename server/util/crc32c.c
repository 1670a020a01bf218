/* crc32c: CRC-32C through ISA-L's crc32_iscsi (Intel's storage acceleration library,
 * Debian's libisal). ISA-L picks at run time the fastest code the CPU has — a carry-less
 * multiplication folding loop on AVX-512 CPUs, the crc32 instruction on older x86, a
 * portable loop elsewhere — and on this project's machines checks a 4 KiB record 2.5x as
 * fast as the three-stream crc32-instruction loop dedupd had (docs/benchmarks.md, item 40).
 * ISA-L's function neither inverts the register before nor after, and takes an int length;
 * the wrapper does both for the standard CRC-32C. */
#include "crc32c.h"

#include <isa-l/crc.h>
#include <limits.h>

uint32_t
crc32c(uint32_t crc, const void *buf, size_t len)
{
    unsigned char *p = (unsigned char *) buf; /* ISA-L's prototype lacks the const */
    crc = ~crc;
    while (len > 0) {
        int n = len > (size_t) INT_MAX ? INT_MAX : (int) len;
        crc = crc32_iscsi(p, n, crc);
        p += n;
        len -= (size_t) n;
    }
    return ~crc;
}
