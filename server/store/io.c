/* io: the real file operations behind store/io.h, and the short-read/short-write loops
 * every caller needs. Knows nothing of records or segments. */
#include "store/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int
r_open(const char *path, int flags, mode_t mode)
{
    int fd = open(path, flags | O_CLOEXEC, mode);
    return fd < 0 ? -errno : fd;
}

static int
r_close(int fd)
{
    return close(fd) < 0 ? -errno : 0;
}

static ssize_t
r_preadv(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    ssize_t n = preadv(fd, iov, iovcnt, (off_t) off);
    return n < 0 ? -errno : n;
}

static ssize_t
r_preadv_nowait(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    ssize_t n = preadv2(fd, iov, iovcnt, (off_t) off, RWF_NOWAIT);
    /* EOPNOTSUPP on kernels or file systems without it: the caller's blocking path reads. */
    return n < 0 ? -errno : n;
}

static ssize_t
r_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
    ssize_t n = pwrite(fd, buf, len, (off_t) off);
    return n < 0 ? -errno : n;
}

static ssize_t
r_pwritev(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    ssize_t n = pwritev(fd, iov, iovcnt, (off_t) off);
    return n < 0 ? -errno : n;
}

static int
r_writeback(int fd, uint64_t off, uint64_t len)
{
    return sync_file_range(fd, (off_t) off, (off_t) len, SYNC_FILE_RANGE_WRITE) < 0 ? -errno : 0;
}

static int
r_fdatasync(int fd)
{
    return fdatasync(fd) < 0 ? -errno : 0;
}

static int
r_ftruncate(int fd, uint64_t len)
{
    return ftruncate(fd, (off_t) len) < 0 ? -errno : 0;
}

static int
r_fsize(int fd, uint64_t *size)
{
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return -errno;
    *size = (uint64_t) sb.st_size;
    return 0;
}

static int
r_unlink(const char *path)
{
    return unlink(path) < 0 ? -errno : 0;
}

static int
r_mkdir(const char *path, mode_t mode)
{
    return mkdir(path, mode) < 0 ? -errno : 0;
}

static int
r_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

static int
r_list(const char *dir, int (*fn)(void *arg, const char *name), void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        rc = fn(arg, e->d_name);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

static int
r_lock(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno == EWOULDBLOCK ? EBUSY : errno;
        close(fd);
        return -e;
    }
    return fd;
}

static const struct store_io_ops real_ops = {
    .name = "posix",
    .open = r_open,
    .close = r_close,
    .preadv = r_preadv,
    .preadv_nowait = r_preadv_nowait,
    .pwritev = r_pwritev,
    .writeback = r_writeback,
    .pwrite = r_pwrite,
    .fdatasync = r_fdatasync,
    .ftruncate = r_ftruncate,
    .fsize = r_fsize,
    .unlink = r_unlink,
    .mkdir = r_mkdir,
    .fsync_dir = r_fsync_dir,
    .list = r_list,
    .lock = r_lock,
};

const struct store_io_ops *store__io = &real_ops;

void
store_io_set(const struct store_io_ops *ops)
{
    store__io = ops ? ops : &real_ops;
}

const struct store_io_ops *
store_io_real(void)
{
    return &real_ops;
}

ssize_t
store__io_read_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        struct iovec iov = {(char *) buf + done, len - done};
        ssize_t n = store__io->preadv(fd, &iov, 1, off + done);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return n;
        if (n == 0)
            break;
        done += (size_t) n;
    }
    return (ssize_t) done;
}

int
store__io_write_full(int fd, const void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = store__io->pwrite(fd, (const char *) buf + done, len - done, off + done);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return (int) n;
        if (n == 0)
            return -EIO;
        done += (size_t) n;
    }
    return 0;
}

/* Linux's IOV_MAX: the most iovecs one pwritev takes. */
#define WRITEV_MAX 1024

int
store__io_writev_full(int fd, struct iovec *iov, size_t cnt, uint64_t off)
{
    if (!store__io->pwritev) {
        for (size_t i = 0; i < cnt; i++) {
            int rc = store__io_write_full(fd, iov[i].iov_base, iov[i].iov_len, off);
            if (rc)
                return rc;
            off += iov[i].iov_len;
        }
        return 0;
    }
    while (cnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            cnt--;
            continue;
        }
        ssize_t n = store__io->pwritev(fd, iov, (int) (cnt < WRITEV_MAX ? cnt : WRITEV_MAX), off);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return (int) n;
        if (n == 0)
            return -EIO;
        off += (uint64_t) n;
        for (size_t done = (size_t) n; done > 0;) { /* skip what was written */
            size_t step = done < iov->iov_len ? done : iov->iov_len;
            iov->iov_base = (uint8_t *) iov->iov_base + step;
            iov->iov_len -= step;
            done -= step;
            if (iov->iov_len == 0) {
                iov++;
                cnt--;
            }
        }
    }
    return 0;
}

int
store__io_mkdir_p(const char *path)
{
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char c = buf[i];
        buf[i] = 0;
        int rc = store__io->mkdir(buf, 0755);
        if (rc && rc != -EEXIST)
            return rc;
        buf[i] = c;
    }
    return 0;
}
