/* log: formats one line (UTC timestamp with milliseconds, level, message) into a local
 * buffer and writes it with a single fwrite under the stream lock, so that concurrent
 * threads never interleave. Knows nothing of the modules that call it. */
#include "log.h"

#include <errno.h>
#include <inttypes.h>
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

/* One line: the message, then suffix (may be ""). */
static void
vwrite(enum log_level level, const char *suffix, const char *fmt, va_list ap)
{
    /* 1 KiB holds every line we write; a longer one is cut, never split. */
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, log_level_name(level));
    int m = vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
    size_t len = (size_t) n + (m < 0 ? 0 : (size_t) m);
    if (len < sizeof(line) - 2 && *suffix) {
        int k = snprintf(line + len, sizeof(line) - len - 1, "%s", suffix);
        len += k < 0 ? 0 : (size_t) k;
    }
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';

    FILE *f = log_file ? log_file : stderr;
    flockfile(f);
    fwrite(line, 1, len, f);
    fflush(f);
    funlockfile(f);
}

void
log_write(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vwrite(level, "", fmt, ap);
    va_end(ap);
}

bool
log_limit_pass(struct log_limit *l, uint64_t now_ms, uint32_t *dropped)
{
    uint64_t w = atomic_load(&l->window);
    /* A new window: whoever moves it resets the count (racing callers may let a line or
     * two more through; the budget is a bound on floods, not an exact quota). */
    if ((w == 0 || now_ms + 1 - w >= LOG_LIMIT_WINDOW_MS) &&
        atomic_compare_exchange_strong(&l->window, &w, now_ms + 1))
        atomic_store(&l->lines, 0);
    if (atomic_fetch_add(&l->lines, 1) < LOG_LIMIT_BURST) {
        *dropped = atomic_exchange(&l->dropped, 0);
        return true;
    }
    atomic_fetch_add(&l->dropped, 1);
    return false;
}

void
log_write_limited(struct log_limit *l, enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint32_t dropped;
    if (!log_limit_pass(l, (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000, &dropped))
        return;
    char suffix[96] = "";
    if (dropped)
        snprintf(suffix, sizeof(suffix), " [%" PRIu32 " more like this not logged before it]",
                 dropped);
    va_list ap;
    va_start(ap, fmt);
    vwrite(level, suffix, fmt, ap);
    va_end(ap);
}
