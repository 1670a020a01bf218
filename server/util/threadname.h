/* threadname: names the calling thread, so that `top -H`, `ps -L`, perf and gdb tell
 * dedupd's threads apart (the RocksDB ones name themselves). Any thread. */
#ifndef DD_UTIL_THREADNAME_H
#define DD_UTIL_THREADNAME_H

/* Names the calling thread "dedupd-" followed by the printf-style suffix, cut to the
 * kernel's 15 bytes. Best effort: a name is for people, so a failure is ignored. */
void threadname_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
