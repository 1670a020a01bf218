/* size: human sizes ("4K", "16G", "512MiB", "1048576") to bytes and back. Any thread. */
#ifndef DD_UTIL_SIZE_H
#define DD_UTIL_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* 0 and *out set; -EINVAL for anything but digits with an optional K/M/G/T/P suffix
 * (binary multiples; "KiB"/"KB"/"k" accepted alike); -ERANGE when it overflows 64 bits. */
int size_parse(const char *s, uint64_t *out);
/* Writes e.g. "16.0 GiB" or "512 B" into buf (cap >= 16 recommended); returns buf. */
char *size_format(uint64_t bytes, char *buf, size_t cap);

#endif
