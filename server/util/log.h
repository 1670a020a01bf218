/* log: leveled, timestamped log lines on stderr (or a file), safe from any thread.
 * Context goes in the message as "module: key value" fields, e.g.
 *     log_err("store: seg %u off %" PRIu64 ": bad crc", seg, off);
 * One line per call; lines from different threads never interleave. */
#ifndef DD_UTIL_LOG_H
#define DD_UTIL_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum log_level {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN = 1,
    LOG_LEVEL_INFO = 2,
    LOG_LEVEL_DEBUG = 3,
};

/* Any thread. Lines above this level are dropped. Default: LOG_LEVEL_INFO. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Borrows f until the next call; NULL means stderr. Not thread-safe against log_write(). */
void log_set_file(FILE *f);
/* 0 and *out set, or -EINVAL for a name other than error|warn|info|debug. */
int log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);
static inline bool
log_enabled(enum log_level level)
{
    return level <= log_get_level();
}

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Lines that may repeat once per request when something stays broken (a full file
 * system fails every write) are limited per call site: at most LOG_LIMIT_BURST lines per
 * LOG_LIMIT_WINDOW_MS; the others are counted, and the next line let through ends with
 * how many were dropped before it. Otherwise thousands of lines a second bury the first,
 * telling one — and may fill the very disk that is full. */
#define LOG_LIMIT_BURST     10
#define LOG_LIMIT_WINDOW_MS 10000
struct log_limit {
    _Atomic uint64_t window;  /* start of the current window, ms, +1 (0: none yet) */
    _Atomic uint32_t lines;   /* lines let through in it */
    _Atomic uint32_t dropped; /* since the last line let through */
};
/* Whether a line of l's call site may go out at now_ms (any monotonic clock in ms); if so,
 * *dropped is how many were held back since the last one. Any thread. */
bool log_limit_pass(struct log_limit *l, uint64_t now_ms, uint32_t *dropped);
void log_write_limited(struct log_limit *l, enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_err(...)  log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_err_limited(...)                                                                       \
    do {                                                                                           \
        static struct log_limit log_limit_;                                                        \
        log_write_limited(&log_limit_, LOG_LEVEL_ERROR, __VA_ARGS__);                              \
    } while (0)
#define log_warn_limited(...)                                                                      \
    do {                                                                                           \
        static struct log_limit log_limit_;                                                        \
        log_write_limited(&log_limit_, LOG_LEVEL_WARN, __VA_ARGS__);                               \
    } while (0)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_enabled(LOG_LEVEL_DEBUG))                                                          \
            log_write(LOG_LEVEL_DEBUG, __VA_ARGS__);                                               \
    } while (0)

#endif
