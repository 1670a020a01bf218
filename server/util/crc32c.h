/* crc32c: CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum
 * of segment records, computed by ISA-L with the fastest instructions the CPU has.
 * Any thread; no state. */
#ifndef DD_UTIL_CRC32C_H
#define DD_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues crc over buf: crc32c(crc32c(0, a), b) == crc32c of a followed by b.
 * Start with 0. crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
