/* crc32c: CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum
 * of segment records. Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at
 * run time) and a table-driven software loop otherwise; both give identical results.
 * Any thread; no state beyond a one-time table. */
#ifndef DD_UTIL_CRC32C_H
#define DD_UTIL_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Continues crc over buf: crc32c(crc32c(0, a), b) == crc32c of a followed by b.
 * Start with 0. crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* The software path alone, for tests that compare both paths. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* True when crc32c() uses the hardware instruction. */
bool crc32c_hw_available(void);

#endif
