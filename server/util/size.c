/* size: parsing and printing of byte counts for options, config files and reports. */
#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int
size_parse(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char) *s))
        return -EINVAL;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char) *p); p++) {
        unsigned d = (unsigned) (*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    if (*p) {
        static const char units[] = "KMGTP";
        const char *u = strchr(units, toupper((unsigned char) *p));
        if (!u)
            return -EINVAL;
        shift = 10 * (unsigned) (u - units + 1);
        p++;
        if (strcasecmp(p, "ib") == 0 || strcasecmp(p, "b") == 0)
            p += strlen(p);
        if (*p)
            return -EINVAL;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = v << shift;
    return 0;
}

char *
size_format(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long) bytes);
        return buf;
    }
    double v = (double) bytes;
    unsigned i = 0;
    while (v >= 1024.0 && i + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        i++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[i]);
    return buf;
}
