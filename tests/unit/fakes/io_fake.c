/* io_fake: see io_fake.h. */
#include "fakes/io_fake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

struct wop {
    bool trunc;
    uint64_t off; /* trunc: new length */
    size_t len;
    uint8_t *data;
};

struct ffile {
    char *path;
    uint8_t *cur, *dur;
    size_t cur_len, cur_cap, dur_len;
    struct wop *ops;
    size_t nops, ops_cap;
    bool name_durable;
    bool unlinked;
    int opens;
};

#define MAX_FILES 4096
#define FD_BASE   100000

static struct ffile *files[MAX_FILES];
static struct ffile *fds[MAX_FILES];
static bool failing;
static uint64_t bytes_read; /* by preadv, since install */
static unsigned syncs_to_fail;
static uint64_t rng;

static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static struct ffile *
lookup(const char *path)
{
    for (int i = 0; i < MAX_FILES; i++)
        if (files[i] && !files[i]->unlinked && strcmp(files[i]->path, path) == 0)
            return files[i];
    return NULL;
}

static void
file_free(struct ffile *f)
{
    for (size_t i = 0; i < f->nops; i++)
        free(f->ops[i].data);
    free(f->ops);
    free(f->cur);
    free(f->dur);
    free(f->path);
    free(f);
}

static void
drop_file(struct ffile *f)
{
    for (int i = 0; i < MAX_FILES; i++)
        if (files[i] == f)
            files[i] = NULL;
    f->unlinked = true;
    if (f->opens == 0)
        file_free(f);
}

static int
reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    uint8_t *n = realloc(*buf, c);
    if (!n)
        return -ENOMEM;
    *buf = n;
    *cap = c;
    return 0;
}

static int
record(struct ffile *f, bool trunc, uint64_t off, const void *data, size_t len)
{
    if (f->nops == f->ops_cap) {
        size_t c = f->ops_cap ? f->ops_cap * 2 : 64;
        struct wop *n = realloc(f->ops, c * sizeof(*n));
        if (!n)
            return -ENOMEM;
        f->ops = n;
        f->ops_cap = c;
    }
    struct wop *o = &f->ops[f->nops];
    o->trunc = trunc;
    o->off = off;
    o->len = len;
    o->data = NULL;
    if (len) {
        o->data = malloc(len);
        if (!o->data)
            return -ENOMEM;
        memcpy(o->data, data, len);
    }
    f->nops++;
    return 0;
}

static int
f_open(const char *path, int flags, mode_t mode)
{
    (void) mode;
    if (failing)
        return -EIO;
    struct ffile *f = lookup(path);
    if (f && (flags & O_CREAT) && (flags & O_EXCL))
        return -EEXIST;
    if (!f) {
        if (!(flags & O_CREAT))
            return -ENOENT;
        int slot = -1;
        for (int i = 0; i < MAX_FILES && slot < 0; i++)
            if (!files[i])
                slot = i;
        if (slot < 0)
            return -ENFILE;
        f = calloc(1, sizeof(*f));
        if (!f)
            return -ENOMEM;
        f->path = strdup(path);
        files[slot] = f;
    }
    for (int i = 0; i < MAX_FILES; i++) {
        if (!fds[i]) {
            fds[i] = f;
            f->opens++;
            return FD_BASE + i;
        }
    }
    return -EMFILE;
}

static struct ffile *
by_fd(int fd)
{
    if (fd < FD_BASE || fd >= FD_BASE + MAX_FILES)
        return NULL;
    return fds[fd - FD_BASE];
}

static int
f_close(int fd)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    fds[fd - FD_BASE] = NULL;
    if (--f->opens == 0 && f->unlinked)
        file_free(f);
    return failing ? -EIO : 0;
}

static ssize_t
f_preadv(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    if (failing)
        return -EIO;
    ssize_t done = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (off >= f->cur_len)
            break;
        size_t n = iov[i].iov_len;
        if (n > f->cur_len - off)
            n = f->cur_len - off;
        memcpy(iov[i].iov_base, f->cur + off, n);
        off += n;
        done += (ssize_t) n;
        bytes_read += n;
        if (n < iov[i].iov_len)
            break;
    }
    return done;
}

static void
apply_write(uint8_t **buf, size_t *len, size_t *cap, uint64_t off, const void *data, size_t n)
{
    if (reserve(buf, cap, off + n))
        abort(); /* test double out of memory: nothing sensible to do */
    if (off > *len)
        memset(*buf + *len, 0, off - *len);
    memcpy(*buf + off, data, n);
    if (off + n > *len)
        *len = off + n;
}

static void
apply_trunc(uint8_t **buf, size_t *len, size_t *cap, uint64_t n)
{
    if (reserve(buf, cap, n))
        abort();
    if (n > *len)
        memset(*buf + *len, 0, n - *len);
    *len = n;
}

static ssize_t
f_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    if (failing)
        return -EIO;
    if (record(f, false, off, buf, len))
        return -ENOMEM;
    apply_write(&f->cur, &f->cur_len, &f->cur_cap, off, buf, len);
    return (ssize_t) len;
}

static void
forget_ops(struct ffile *f)
{
    for (size_t i = 0; i < f->nops; i++)
        free(f->ops[i].data);
    f->nops = 0;
}

/* The durable image gets the writes recorded since the last sync, not the current contents:
 * writes forgotten by a failed sync (below) stay in the current contents only, as Linux
 * keeps them in the page cache, clean, after their write-back failed. */
static int
f_fdatasync(int fd)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    if (failing)
        return -EIO;
    if (syncs_to_fail) {
        syncs_to_fail--;
        forget_ops(f);
        return -EIO;
    }
    size_t cap = f->dur_len;
    for (size_t i = 0; i < f->nops; i++) {
        const struct wop *o = &f->ops[i];
        if (o->trunc)
            apply_trunc(&f->dur, &f->dur_len, &cap, o->off);
        else
            apply_write(&f->dur, &f->dur_len, &cap, o->off, o->data, o->len);
    }
    forget_ops(f);
    return 0;
}

static int
f_ftruncate(int fd, uint64_t len)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    if (failing)
        return -EIO;
    if (record(f, true, len, NULL, 0))
        return -ENOMEM;
    apply_trunc(&f->cur, &f->cur_len, &f->cur_cap, len);
    return 0;
}

static int
f_fsize(int fd, uint64_t *size)
{
    struct ffile *f = by_fd(fd);
    if (!f)
        return -EBADF;
    if (failing)
        return -EIO;
    *size = f->cur_len;
    return 0;
}

static int
f_unlink(const char *path)
{
    if (failing)
        return -EIO;
    struct ffile *f = lookup(path);
    if (!f)
        return -ENOENT;
    drop_file(f);
    return 0;
}

static int
f_mkdir(const char *path, mode_t mode)
{
    if (failing)
        return -EIO;
    return store_io_real()->mkdir(path, mode);
}

static int
f_fsync_dir(const char *path)
{
    if (failing)
        return -EIO;
    size_t n = strlen(path);
    for (int i = 0; i < MAX_FILES; i++)
        if (files[i] && strncmp(files[i]->path, path, n) == 0 && files[i]->path[n] == '/')
            files[i]->name_durable = true;
    return 0;
}

static int
f_list(const char *dir, int (*fn)(void *arg, const char *name), void *arg)
{
    if (failing)
        return -EIO;
    size_t n = strlen(dir);
    for (int i = 0; i < MAX_FILES; i++) {
        struct ffile *f = files[i];
        if (f && strncmp(f->path, dir, n) == 0 && f->path[n] == '/' &&
            !strchr(f->path + n + 1, '/')) {
            int rc = fn(arg, f->path + n + 1);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int
f_lock(const char *path)
{
    if (failing)
        return -EIO;
    /* The lock file is real (a real fd, below FD_BASE): close goes to the real close. */
    return store_io_real()->lock(path);
}

static int
f_close_any(int fd)
{
    if (fd < FD_BASE)
        return store_io_real()->close(fd);
    return f_close(fd);
}

static const struct store_io_ops fake_ops = {
    .name = "fake",
    .open = f_open,
    .close = f_close_any,
    .preadv = f_preadv,
    .pwrite = f_pwrite,
    .fdatasync = f_fdatasync,
    .ftruncate = f_ftruncate,
    .fsize = f_fsize,
    .unlink = f_unlink,
    .mkdir = f_mkdir,
    .fsync_dir = f_fsync_dir,
    .list = f_list,
    .lock = f_lock,
};

void
io_fake_install(void)
{
    failing = false;
    syncs_to_fail = 0;
    store_io_set(&fake_ops);
}

void
io_fake_uninstall(void)
{
    store_io_set(NULL);
    for (int i = 0; i < MAX_FILES; i++) {
        if (fds[i]) {
            fds[i]->opens--;
            fds[i] = NULL;
        }
    }
    for (int i = 0; i < MAX_FILES; i++) {
        if (files[i]) {
            struct ffile *f = files[i];
            files[i] = NULL;
            file_free(f);
        }
    }
    failing = false;
}

void
io_fake_fail_all(bool on)
{
    failing = on;
}

void
io_fake_fail_syncs(unsigned n)
{
    syncs_to_fail = n;
}

uint64_t
io_fake_unsynced_bytes(void)
{
    uint64_t n = 0;
    for (int i = 0; i < MAX_FILES; i++)
        if (files[i])
            for (size_t j = 0; j < files[i]->nops; j++)
                n += files[i]->ops[j].len;
    return n;
}

unsigned
io_fake_power_cut(uint64_t seed)
{
    rng = seed * 0x9E3779B97F4A7C15ULL | 1;
    unsigned lost = 0;
    for (int i = 0; i < MAX_FILES; i++) {
        struct ffile *f = files[i];
        if (!f)
            continue;
        if (!f->name_durable && (rnd() & 1)) {
            lost += (unsigned) f->nops;
            drop_file(f);
            continue;
        }
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        apply_trunc(&buf, &len, &cap, f->dur_len);
        if (f->dur_len)
            memcpy(buf, f->dur, f->dur_len);
        for (size_t j = 0; j < f->nops; j++) {
            struct wop *o = &f->ops[j];
            unsigned r = (unsigned) (rnd() % 3);
            if (r == 1) {
                lost++;
                continue;
            }
            if (o->trunc) {
                apply_trunc(&buf, &len, &cap, o->off);
                continue;
            }
            size_t n = o->len;
            if (r == 2) {
                n = (size_t) (rnd() % (o->len + 1));
                lost++;
            }
            apply_write(&buf, &len, &cap, o->off, o->data, n);
        }
        for (size_t j = 0; j < f->nops; j++)
            free(f->ops[j].data);
        f->nops = 0;
        free(f->cur);
        free(f->dur);
        f->cur = buf;
        f->cur_len = len;
        f->cur_cap = cap;
        f->dur = malloc(len ? len : 1);
        if (len)
            memcpy(f->dur, buf, len);
        f->dur_len = len;
        f->name_durable = true;
    }
    return lost;
}

uint64_t
io_fake_bytes_read(void)
{
    return bytes_read;
}
