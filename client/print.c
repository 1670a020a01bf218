/* dedupd-ctl output helpers shared by the commands: sizes, usage errors. Tables are
 * printed by each command; JSON goes through json.c. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "client.h"
#include "dedupd/errors.h"
#include "util/size.h"

int
usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", PROG);
    if (cmd)
        fprintf(stderr, "%s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "\nTry '%s %s --help'.\n", PROG, cmd);
    else
        fprintf(stderr, "\nTry '%s --help'.\n", PROG);
    return DEDUPD_EXIT_USAGE;
}

const char *
hsize(uint64_t bytes)
{
    static char bufs[8][32];
    static unsigned next;
    char *b = bufs[next++ % 8];
    return size_format(bytes, b, sizeof(bufs[0]));
}

bool
parse_size_arg(const char *cmd, const char *what, const char *arg, uint64_t *out)
{
    int rc = size_parse(arg, out);
    if (rc < 0) {
        usage_error(cmd, "bad %s '%s' (%s; e.g. 4096, 64K, 16G)", what, arg,
                    rc == -ERANGE ? "too large" : "a number with an optional K/M/G/T suffix");
        return false;
    }
    return true;
}
