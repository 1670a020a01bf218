/* segment: the table of segment files, their fds and accounting; creating, sealing, syncing
 * and reading records from segments. Segment files are append-only and never rewritten:
 * compaction copies live records out and removes the whole file.
 * Knows nothing of transactions or refcounts. */
#include "store/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

void
store__seg_path(const struct store *st, uint32_t id, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/seg-%08" PRIu32 ".log", st->seg_dir, id);
}

static size_t
seg_index(struct store *st, uint32_t id, bool *found)
{
    size_t lo = 0, hi = st->nsegs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->segs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < st->nsegs && st->segs[lo]->id == id;
    return lo;
}

static int
seg_insert(struct store *st, struct store_seg *sg)
{
    pthread_mutex_lock(&st->seg_lock);
    if (st->nsegs == st->segs_cap) {
        size_t cap = st->segs_cap ? st->segs_cap * 2 : 16;
        struct store_seg **n = realloc(st->segs, cap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&st->seg_lock);
            return -ENOMEM;
        }
        st->segs = n;
        st->segs_cap = cap;
    }
    bool found;
    size_t i = seg_index(st, sg->id, &found);
    memmove(st->segs + i + 1, st->segs + i, (st->nsegs - i) * sizeof(*st->segs));
    st->segs[i] = sg;
    st->nsegs++;
    pthread_mutex_unlock(&st->seg_lock);
    return 0;
}

struct store_seg *
store__seg_find(struct store *st, uint32_t id)
{
    bool found;
    pthread_mutex_lock(&st->seg_lock);
    size_t i = seg_index(st, id, &found);
    struct store_seg *sg = found ? st->segs[i] : NULL;
    pthread_mutex_unlock(&st->seg_lock);
    return sg;
}

struct store_seg *
store__seg_get(struct store *st, uint32_t id)
{
    bool found;
    pthread_mutex_lock(&st->seg_lock);
    size_t i = seg_index(st, id, &found);
    struct store_seg *sg = found ? st->segs[i] : NULL;
    if (sg)
        sg->refs++;
    pthread_mutex_unlock(&st->seg_lock);
    return sg;
}

static void
seg_free(struct store_seg *sg)
{
    if (sg->fd >= 0)
        store__io->close(sg->fd);
    free(sg);
}

void
store__seg_put(struct store *st, struct store_seg *sg)
{
    pthread_mutex_lock(&st->seg_lock);
    bool last = --sg->refs == 0;
    pthread_mutex_unlock(&st->seg_lock);
    if (last)
        seg_free(sg);
}

/* Takes the segment out of the table; readers holding a reference finish on the open fd
 * (the file may already be unlinked), the last one closes it. */
void
store__seg_remove(struct store *st, struct store_seg *sg)
{
    bool found;
    pthread_mutex_lock(&st->seg_lock);
    size_t i = seg_index(st, sg->id, &found);
    if (found && st->segs[i] == sg) {
        memmove(st->segs + i, st->segs + i + 1, (st->nsegs - i - 1) * sizeof(*st->segs));
        st->nsegs--;
        sg->removed = true;
    }
    pthread_mutex_unlock(&st->seg_lock);
    if (found)
        store__seg_put(st, sg);
}

void
store__seg_close_all(struct store *st)
{
    while (st->nsegs)
        store__seg_remove(st, st->segs[st->nsegs - 1]);
    free(st->segs);
    st->segs = NULL;
    st->segs_cap = 0;
    st->active = NULL;
}

static int
seg_new(struct store *st, uint32_t id, int flags, struct store_seg **out)
{
    char path[4096];
    store__seg_path(st, id, path, sizeof(path));
    struct store_seg *sg = calloc(1, sizeof(*sg));
    if (!sg)
        return -ENOMEM;
    sg->id = id;
    sg->refs = 1;
    sg->fd = store__io->open(path, flags, 0644);
    if (sg->fd < 0) {
        int rc = sg->fd;
        log_err("store: seg %" PRIu32 ": open %s: %s", id, path, strerror(-rc));
        free(sg);
        return rc;
    }
    int rc = store__io->fsize(sg->fd, &sg->size);
    if (rc == 0)
        rc = seg_insert(st, sg);
    if (rc) {
        seg_free(sg);
        return rc;
    }
    sg->synced = sg->size;
    sg->prefilled = sg->size;
    *out = sg;
    return 0;
}

int
store__seg_create(struct store *st, uint32_t id, struct store_seg **out)
{
    __atomic_store_n(&st->dir_dirty, 1, __ATOMIC_SEQ_CST);
    int rc = seg_new(st, id, O_RDWR | O_CREAT | O_EXCL, out);
    if (rc == 0)
        (*out)->dirty = true;
    return rc;
}

static int
open_one(void *arg, const char *name)
{
    struct store *st = arg;
    unsigned id;
    char tail[8];
    if (strlen(name) != 16 || sscanf(name, "seg-%8u%4s", &id, tail) != 2 || strcmp(tail, ".log") ||
        id == 0) {
        log_warn("store: %s/%s: not a segment file name; ignored", st->seg_dir, name);
        return 0;
    }
    struct store_seg *sg;
    return seg_new(st, id, st->opt.read_only ? O_RDONLY : O_RDWR, &sg);
}

int
store__seg_open_all(struct store *st)
{
    return store__io->list(st->seg_dir, open_one, st);
}

/* Segment meta value v1: version u8 | size | synced | live | dead (be64 each) | sealed u8 */
#define SEG_VAL_LEN (1 + 4 * 8 + 1)

static void
be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t) v;
}

void
store__seg_put_meta(struct store *st, struct meta_batch *b, struct store_seg *sg)
{
    (void) st;
    store__seg_put_meta_delta(b, sg, 0, 0);
}

static void
seg_put(struct meta_batch *b, const struct store_seg *sg, uint64_t size, int64_t d_live,
        int64_t d_dead)
{
    uint8_t key[sizeof(STORE_META_SEG) - 1 + 4], val[SEG_VAL_LEN];
    memcpy(key, STORE_META_SEG, sizeof(STORE_META_SEG) - 1);
    key[sizeof(key) - 4] = sg->id >> 24;
    key[sizeof(key) - 3] = sg->id >> 16;
    key[sizeof(key) - 2] = sg->id >> 8;
    key[sizeof(key) - 1] = sg->id;
    val[0] = 1;
    be64(val + 1, size);
    be64(val + 9, sg->synced);
    be64(val + 17, (uint64_t) ((int64_t) sg->live + d_live));
    be64(val + 25, (uint64_t) ((int64_t) sg->dead + d_dead));
    val[33] = sg->sealed;
    meta_batch_put(b, META_CF_META, key, sizeof(key), val, sizeof(val));
}

void
store__seg_put_meta_delta(struct meta_batch *b, const struct store_seg *sg, int64_t d_live,
                          int64_t d_dead)
{
    seg_put(b, sg, store__seg_size(sg), d_live, d_dead);
}

void
store__seg_put_meta_synced(struct meta_batch *b, const struct store_seg *sg)
{
    seg_put(b, sg, sg->synced, 0, 0);
}

/* Linux reports a failed write-back to one fdatasync only: a later one on the same file
 * succeeds although the bytes are lost. So the first failure is kept and every later sync
 * of the store fails with it, rather than let a WAL flush promise those bytes. */
static int
sync_failed(struct store *st, struct store_seg *sg, int rc)
{
    int none = 0;
    __atomic_compare_exchange_n(&st->seg_sync_err, &none, rc, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    log_err("store: seg %" PRIu32 ": fdatasync: %s; the store accepts no further sync", sg->id,
            strerror(-rc));
    return rc;
}

int
store__seg_sync_all(struct store *st)
{
    int err = __atomic_load_n(&st->seg_sync_err, __ATOMIC_SEQ_CST);
    if (err)
        return err;
    for (size_t i = 0; i < st->nsegs; i++) {
        struct store_seg *sg = st->segs[i];
        /* Taken before the fdatasync: early appends may grow the segment meanwhile. */
        uint64_t size = store__seg_size(sg);
        if (sg->synced == size)
            continue;
        __atomic_store_n(&sg->unsynced, 0, __ATOMIC_SEQ_CST);
        int rc = store__io->fdatasync(sg->fd);
        if (rc) {
            __atomic_store_n(&sg->unsynced, 1, __ATOMIC_SEQ_CST);
            return sync_failed(st, sg, rc);
        }
        sg->synced = size;
        sg->dirty = true; /* the watermark goes to meta in the sync's own batch */
    }
    return store__seg_sync_dir(st);
}

int
store__seg_sync_dir(struct store *st)
{
    if (!__atomic_exchange_n(&st->dir_dirty, 0, __ATOMIC_SEQ_CST))
        return 0;
    int rc = store__io->fsync_dir(st->seg_dir);
    if (rc) {
        __atomic_store_n(&st->dir_dirty, 1, __ATOMIC_SEQ_CST);
        log_err("store: %s: fsync: %s", st->seg_dir, strerror(-rc));
    }
    return rc;
}

/* The WAL hook (meta_set_wal_hook): someone is about to make the WAL durable, maybe while
 * holding a transaction (the commit lock), so only seg_lock is taken here. Every segment
 * written since its last fdatasync began is synced, and the directory if it changed. */
int
store__wal_hook(void *arg, bool before)
{
    struct store *st = arg;
    if (!before) {
        pthread_rwlock_unlock(&st->wal_lock);
        return 0;
    }
    pthread_rwlock_wrlock(&st->wal_lock);
    struct store_seg *todo[64];
    int rc = __atomic_load_n(&st->seg_sync_err, __ATOMIC_SEQ_CST);
    for (bool more = true; more && rc == 0;) {
        size_t n = 0;
        more = false;
        pthread_mutex_lock(&st->seg_lock);
        for (size_t i = 0; i < st->nsegs; i++) {
            struct store_seg *sg = st->segs[i];
            if (!__atomic_load_n(&sg->unsynced, __ATOMIC_SEQ_CST))
                continue;
            if (n == sizeof(todo) / sizeof(todo[0])) {
                more = true;
                break;
            }
            __atomic_store_n(&sg->unsynced, 0, __ATOMIC_SEQ_CST);
            sg->refs++;
            todo[n++] = sg;
        }
        pthread_mutex_unlock(&st->seg_lock);
        for (size_t i = 0; i < n; i++) {
            int r = rc ? rc : store__io->fdatasync(todo[i]->fd);
            if (r) {
                __atomic_store_n(&todo[i]->unsynced, 1, __ATOMIC_SEQ_CST);
                if (!rc)
                    sync_failed(st, todo[i], r);
                rc = r;
            }
            store__seg_put(st, todo[i]);
        }
    }
    if (rc == 0)
        rc = store__seg_sync_dir(st);
    if (rc)
        pthread_rwlock_unlock(&st->wal_lock);
    return rc;
}

int
store__seal_active(struct store *st)
{
    struct store_seg *old = st->active, *sg;
    uint32_t id = 1;
    if (st->nsegs)
        id = st->segs[st->nsegs - 1]->id + 1;
    int rc = store__seg_create(st, id, &sg);
    if (rc)
        return rc;
    if (old) {
        store__seg_trim(old);
        old->sealed = true;
        old->dirty = true;
    }
    st->active = sg;
    log_debug("store: seg %" PRIu32 " active", id);
    return 0;
}

/* Appends and the page cache. The kernel (6.18, ext4 with large folios) sizes a file's
 * page-cache folios by the write that creates them and aligns each folio to its size in
 * the file. Records are 4 KiB plus a 64-byte header, so appends start anywhere in a page:
 * a 4 KiB append makes 4 KiB folios, and a 260 KiB one makes folios that grow from 4 KiB
 * at its start to its alignment and shrink again towards its end. Reads from small
 * folios cost more page-cache look-ups and copy time: a random 4 KiB read 2.2 against 1.2
 * µs (docs/benchmarks.md, item 44), a sequential read of 2 GiB 9% more server CPU (item
 * 45). So before an append, the window-aligned stretch of file it will write is filled
 * with zeros, one whole PREFILL_WINDOW at a time, and the append overwrites pages that
 * sit in window-sized folios. Every byte is written twice into the page cache, yet a
 * sequential write measured as fast as without: the zeros pay for the folio allocations
 * the data write then skips. The zeros lie past the segment's size, where nothing reads:
 * recovery truncates them like any unindexed tail, a seal or a close cuts them off
 * (store__seg_trim), and an fdatasync may write up to one window of them once. */
#define PREFILL_WINDOW (256u << 10)

void
store__seg_prefill(struct store_seg *sg, uint64_t off, uint64_t end)
{
    static const uint8_t zeros[PREFILL_WINDOW];
    uint64_t at = sg->prefilled > off ? sg->prefilled : off;
    const uint64_t to = (end + PREFILL_WINDOW - 1) / PREFILL_WINDOW * PREFILL_WINDOW;
    while (at < to) {
        uint64_t n = PREFILL_WINDOW - at % PREFILL_WINDOW; /* whole windows after the first */
        int rc = store__io_write_full(sg->fd, zeros, n, at);
        if (rc) { /* e.g. a full disk: the append itself still gets its chance */
            log_debug("store: seg %" PRIu32 " off %" PRIu64 ": zeros before an append: %s", sg->id,
                      at, strerror(-rc));
            return;
        }
        at += n;
        sg->prefilled = at;
    }
}

void
store__seg_trim(struct store_seg *sg)
{
    uint64_t size = store__seg_size(sg);
    if (sg->prefilled <= size)
        return;
    int rc = store__io->ftruncate(sg->fd, size);
    if (rc) { /* the zeros stay; recovery cuts them off at the next open */
        log_warn("store: seg %" PRIu32 ": truncate to %" PRIu64 ": %s", sg->id, size,
                 strerror(-rc));
        return;
    }
    sg->prefilled = size;
}

/* Reads and verifies the record at off: header decodes, stored bytes match data_crc.
 * Stored bytes go to buf (cap >= stored_len). With expect_len (the stored length the
 * chunk entry records; 0 = unknown) header and bytes come in one preadv, which is the
 * read path's common case. 0, -EUCLEAN (corrupt or torn: logged by the caller who knows
 * the chunk), -EIO. */
int
store__read_record(struct store *st, struct store_seg *sg, uint64_t off, struct store_record_hdr *h,
                   void *buf, size_t cap, uint32_t expect_len)
{
    (void) st;
    uint8_t hb[STORE_RECORD_HDR_LEN];
    size_t want = expect_len && expect_len <= cap ? expect_len : 0;
    struct iovec iov[2] = {{hb, sizeof(hb)}, {buf, want}};
    ssize_t got;
    do
        got = store__io->preadv(sg->fd, iov, want ? 2 : 1, off);
    while (got == -EINTR);
    if (got < 0)
        return (int) got;
    /* Short reads are rare (a torn tail, a signal); the plain loops finish the rest. */
    size_t done = (size_t) got;
    if (done < sizeof(hb)) {
        ssize_t n = store__io_read_full(sg->fd, hb, sizeof(hb), off);
        if (n < 0)
            return (int) n;
        if (store_record_decode(hb, (size_t) n, h) != 0)
            return -EUCLEAN;
        done = sizeof(hb);
    } else if (store_record_decode(hb, sizeof(hb), h) != 0) {
        return -EUCLEAN;
    }
    if (h->stored_len > cap)
        return -EUCLEAN;
    size_t have = done - sizeof(hb);
    if (want != h->stored_len)
        have = 0; /* the chunk entry and the header disagree: read what the header says */
    if (have < h->stored_len) {
        ssize_t n = store__io_read_full(sg->fd, (uint8_t *) buf + have, h->stored_len - have,
                                        off + STORE_RECORD_HDR_LEN + have);
        if (n < 0)
            return (int) n;
        if ((size_t) n != h->stored_len - have)
            return -EUCLEAN;
    }
    return store_record_data_ok(h, buf) ? 0 : -EUCLEAN;
}

int
store__read_raw(struct store_seg *sg, uint64_t off, uint8_t *buf, size_t cap,
                struct store_record_hdr *h, uint64_t *len)
{
    if (cap < STORE_RECORD_HDR_LEN)
        return -ENOSPC;
    ssize_t n = store__io_read_full(sg->fd, buf, STORE_RECORD_HDR_LEN, off);
    if (n < 0)
        return (int) n;
    if (store_record_decode(buf, (size_t) n, h) != 0)
        return -EUCLEAN;
    uint64_t total = store_record_len(h->stored_len);
    if (total > cap)
        return -ENOSPC;
    n = store__io_read_full(sg->fd, buf + STORE_RECORD_HDR_LEN, h->stored_len,
                            off + STORE_RECORD_HDR_LEN);
    if (n < 0)
        return (int) n;
    if ((size_t) n != h->stored_len || !store_record_data_ok(h, buf + STORE_RECORD_HDR_LEN))
        return -EUCLEAN;
    *len = total;
    return 0;
}

/* Reads up to wcap bytes of [off, to) into win: the window now starts at off. */
static int
walk_fill(struct store_seg *sg, uint8_t *win, size_t wcap, uint64_t off, uint64_t to,
          uint64_t *wstart, size_t *wlen)
{
    size_t want = to - off < wcap ? (size_t) (to - off) : wcap;
    ssize_t n = store__io_read_full(sg->fd, win, want, off);
    if (n < 0)
        return (int) n;
    *wstart = off;
    *wlen = (size_t) n;
    return 0;
}

int
store__seg_walk(struct store_seg *sg, uint64_t from, uint64_t to, uint8_t *win, size_t wcap,
                store_walk_fn fn, void *arg, uint64_t *end)
{
    uint64_t off = from, wstart = from;
    size_t wlen = 0;
    int rc = 0;
    while (off < to) {
        if (off + STORE_RECORD_HDR_LEN > wstart + wlen &&
            (rc = walk_fill(sg, win, wcap, off, to, &wstart, &wlen)))
            break;
        struct store_record_hdr h;
        size_t have = (size_t) (wstart + wlen - off);
        if (store_record_decode(win + (off - wstart), have, &h) != 0) {
            rc = -EUCLEAN;
            break;
        }
        uint64_t total = store_record_len(h.stored_len);
        if (off + total > wstart + wlen && (rc = walk_fill(sg, win, wcap, off, to, &wstart, &wlen)))
            break;
        if (off + total > wstart + wlen) { /* short: the file or the range ends inside it */
            rc = -EUCLEAN;
            break;
        }
        rc = fn(arg, off, &h, win + (off - wstart));
        if (rc)
            break;
        off += total;
    }
    *end = off;
    return rc;
}
