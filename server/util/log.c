/* log: formats one line (UTC timestamp with milliseconds, level, message) into a local
 * buffer and writes it with a single fwrite under the stream lock, so that concurrent
 * threads never interleave. Knows nothing of the modules that call it. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static _Atomic int current_level = LOG_LEVEL_INFO;
static FILE *log_file;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void
log_set_level(enum log_level level)
{
    atomic_store(&current_level, (int) level);
}

enum log_level
log_get_level(void)
{
    return (enum log_level) atomic_load(&current_level);
}

void
log_set_file(FILE *f)
{
    log_file = f;
}

int
log_level_parse(const char *name, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (name && strcmp(name, level_names[i]) == 0) {
            *out = (enum log_level) i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *
log_level_name(enum log_level level)
{
    if ((unsigned) level >= sizeof(level_names) / sizeof(level_names[0]))
        return "?";
    return level_names[level];
}

void
log_write(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;

    /* 1 KiB holds every line we write; a longer one is cut, never split. */
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, log_level_name(level));
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t) n + (m < 0 ? 0 : (size_t) m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';

    FILE *f = log_file ? log_file : stderr;
    flockfile(f);
    fwrite(line, 1, len, f);
    fflush(f);
    funlockfile(f);
}
