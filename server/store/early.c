/* early: appending chunk records before the transaction that will reference them.
 *
 * A transaction holds the commit lock, which every writer waits for; writing its new
 * chunks' bytes there (a copy of every unique byte into the page cache) made that copy
 * part of every writer's wait. An early append writes them first, holding only the append
 * lock (the append position and the chunk ids), and from the writer's own, still cached
 * buffer. The transaction then takes the records over (store_txn_add_early).
 *
 * Invariant 3 still holds: the bytes are written before the batch that indexes them. What
 * changes is that a commit may persist a segment size past records of other writers not
 * committed yet; after a crash those are unindexed bytes below the size, which recovery
 * counts dead. A failed append leaves the append position where it was, so a segment never
 * has a hole below its size. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Records per write: the iovec array (two pieces each) stays on the stack. */
#define EARLY_BATCH 64

/* Seals the active segment if `bytes` more would not fit in it. Called and returns with
 * append_lock held; the commit lock comes first in the lock order, so it is dropped and
 * retaken around the seal (someone else may have sealed meanwhile). */
static int
make_room(struct store *st, uint64_t bytes)
{
    const struct store_seg *a = st->active;
    if (a->size == 0 || a->size + bytes <= st->opt.seg_bytes)
        return 0;
    pthread_mutex_unlock(&st->append_lock);
    pthread_mutex_lock(&st->commit_lock);
    pthread_mutex_lock(&st->append_lock);
    int rc = 0;
    a = st->active;
    if (a->size > 0 && a->size + bytes > st->opt.seg_bytes) {
        /* The sealed segment's entry says so at the next sync or commit that touches it;
         * a crash before that leaves it unsealed and older than the active one, which
         * recovery seals. The new one gets its entry with the first commit of its records. */
        rc = store__seal_active(st);
        if (rc)
            log_err("store: sealing seg %" PRIu32 " for an append: %s", a->id, strerror(-rc));
    }
    pthread_mutex_unlock(&st->commit_lock);
    return rc;
}

/* Writes c[0..n) (n <= EARLY_BATCH) at the append position (append_lock held). */
static int
append_some(struct store *st, struct store_new_chunk *c, size_t n)
{
    uint8_t hdr[EARLY_BATCH][STORE_RECORD_HDR_LEN];
    struct iovec iov[2 * EARLY_BATCH];
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += store_record_len(c[i].len);
    int rc = store__space_claim(st, bytes);
    if (rc == 0)
        rc = make_room(st, bytes);
    if (rc)
        return rc;
    struct store_seg *sg = st->active;
    const uint64_t off = sg->size, id = st->id_next;
    uint64_t at = off;
    for (size_t i = 0; i < n; i++) {
        store__encode_new_record(hdr[i], id + i, c[i].hash_alg, c[i].hash, c[i].hash_len, c[i].len,
                                 c[i].crc);
        iov[2 * i] = (struct iovec){hdr[i], STORE_RECORD_HDR_LEN};
        iov[2 * i + 1] = (struct iovec){(void *) c[i].buf, c[i].len};
        c[i].id = id + i;
        c[i].seg = sg->id;
        c[i].off = at;
        at += store_record_len(c[i].len);
    }
    store__seg_prefill(sg, off, at);
    rc = store__io_writev_full(sg->fd, iov, 2 * n, off);
    /* After the write: a WAL hook that clears the flag then syncs covers these bytes. */
    __atomic_store_n(&sg->unsynced, 1, __ATOMIC_SEQ_CST);
    if (rc) {
        /* The position stays: the next append overwrites what got written, and recovery
         * truncates it if nothing does. */
        log_err("store: seg %" PRIu32 " off %" PRIu64 ": write of %zu records (%" PRIu64
                " bytes): %s",
                sg->id, off, n, bytes, strerror(-rc));
        return rc;
    }
    __atomic_store_n(&st->id_next, id + n, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sg->early_pending, (int) n, __ATOMIC_SEQ_CST);
    store__seg_set_size(sg, at);
    return 0;
}

int
store_append_early(struct store *st, struct store_new_chunk *c, size_t n)
{
    if (st->opt.read_only)
        return -EROFS;
    for (size_t i = 0; i < n; i++)
        if (!store__new_chunk_ok(c[i].hash_alg, c[i].hash, c[i].hash_len, c[i].len))
            return -EINVAL;
    int rc = 0;
    size_t done = 0;
    pthread_mutex_lock(&st->append_lock);
    while (rc == 0 && done < n) {
        size_t k = n - done < EARLY_BATCH ? n - done : EARLY_BATCH;
        rc = append_some(st, c + done, k);
        if (rc == 0)
            done += k;
    }
    pthread_mutex_unlock(&st->append_lock);
    if (rc && done) /* the batches written before the failure are dead */
        store_early_discard(st, c, done);
    return rc;
}

void
store_early_discard(struct store *st, const struct store_new_chunk *c, size_t n)
{
    pthread_mutex_lock(&st->commit_lock);
    for (size_t i = 0; i < n; i++) {
        struct store_seg *sg = store__seg_find(st, c[i].seg);
        if (!sg)
            continue;
        store__seg_set_dead(sg, sg->dead + store_record_len(c[i].len));
        sg->dirty = true;
        __atomic_sub_fetch(&sg->early_pending, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&st->commit_lock);
}
