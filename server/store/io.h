/* store/io.h: the one narrow layer through which the store touches files (segments, the
 * lock file, the segments directory). The default ops are the real system calls; a test
 * double (tests/unit/fakes/io_fake.c) installs its own table to keep unsynced writes in
 * memory and drop or tear them on a simulated power cut. RocksDB's files do not pass here.
 * All ops return 0 / a count, or -errno. Any thread (the table is set once, before open). */
#ifndef DD_STORE_IO_H
#define DD_STORE_IO_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct store_io_ops {
    const char *name;
    int (*open)(const char *path, int flags, mode_t mode); /* fd */
    int (*close)(int fd);
    ssize_t (*preadv)(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t len, uint64_t off);
    int (*fdatasync)(int fd);
    int (*ftruncate)(int fd, uint64_t len);
    int (*fsize)(int fd, uint64_t *size);
    int (*unlink)(const char *path);
    int (*mkdir)(const char *path, mode_t mode); /* -EEXIST when present */
    int (*fsync_dir)(const char *path);
    /* Calls fn for each entry name in dir (not . and ..); stops at fn's non-zero value. */
    int (*list)(const char *dir, int (*fn)(void *arg, const char *name), void *arg);
    /* Exclusive, non-blocking lock on path (created if absent): fd, or -EBUSY if held. */
    int (*lock)(const char *path);
    /* Gathered write; NULL (a test double without it): one pwrite per iovec. */
    ssize_t (*pwritev)(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
    /* Starts write-back of [off, off+len) without waiting for it (a hint: durability
     * still comes from fdatasync only); NULL: nothing. */
    int (*writeback)(int fd, uint64_t off, uint64_t len);
    /* preadv that never waits for the disk: the bytes in the page cache, or -EAGAIN (a short
     * count when only some are). NULL (a test double without it): always -EAGAIN. */
    ssize_t (*preadv_nowait)(int fd, const struct iovec *iov, int iovcnt, uint64_t off);
};

/* Installs ops (NULL restores the real ones). Call only while no store is open. */
void store_io_set(const struct store_io_ops *ops);
const struct store_io_ops *store_io_real(void);

#endif
