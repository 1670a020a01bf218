/* batch: write batches (one per logical operation: invariant 3) and iterators, each reading
 * as of its creation. Owns the buffers, rocksdb_writebatch_t and iterator handles it creates. */
#include "meta/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define OP_PUT    1
#define OP_DELETE 2
#define ENTRY_HDR (1 + 1 + 4 + 4)

struct meta_batch *
meta_batch_new(void)
{
    return calloc(1, sizeof(struct meta_batch));
}

void
meta_batch_free(struct meta_batch *b)
{
    if (!b)
        return;
    free(b->buf);
    free(b);
}

void
meta_batch_clear(struct meta_batch *b)
{
    b->len = 0;
    b->count = 0;
    b->oom = false;
}

size_t
meta_batch_count(const struct meta_batch *b)
{
    return b->count;
}

size_t
meta_batch_bytes(const struct meta_batch *b)
{
    return b->len;
}

static void
append(struct meta_batch *b, int op, enum meta_cf cf, const void *key, size_t klen, const void *val,
       size_t vlen)
{
    size_t need = ENTRY_HDR + klen + vlen;
    if (b->oom)
        return;
    if (b->len + need > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + need)
            cap *= 2;
        unsigned char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    unsigned char *p = b->buf + b->len;
    uint32_t k32 = (uint32_t) klen, v32 = (uint32_t) vlen;
    p[0] = (unsigned char) op;
    p[1] = (unsigned char) cf;
    memcpy(p + 2, &k32, 4);
    memcpy(p + 6, &v32, 4);
    memcpy(p + ENTRY_HDR, key, klen);
    if (vlen)
        memcpy(p + ENTRY_HDR + klen, val, vlen);
    b->len += need;
    b->count++;
}

void
meta_batch_put(struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen, const void *val,
               size_t vlen)
{
    append(b, OP_PUT, cf, key, klen, val, vlen);
}

void
meta_batch_delete(struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen)
{
    append(b, OP_DELETE, cf, key, klen, NULL, 0);
}

int
meta_batch_find(const struct meta_batch *b, enum meta_cf cf, const void *key, size_t klen,
                void *val, size_t cap, size_t *vlen)
{
    int found = -ENOENT;
    for (size_t off = 0; off < b->len;) {
        const unsigned char *p = b->buf + off;
        uint32_t kl, vl;
        memcpy(&kl, p + 2, 4);
        memcpy(&vl, p + 6, 4);
        if (p[1] == (unsigned char) cf && kl == klen && memcmp(p + ENTRY_HDR, key, klen) == 0) {
            found = p[0] == OP_PUT;
            if (found) {
                memcpy(val, p + ENTRY_HDR + kl, vl < cap ? vl : cap);
                *vlen = vl;
            }
        }
        off += ENTRY_HDR + kl + vl;
    }
    return found;
}

int
meta_batch_commit(struct meta *m, struct meta_batch *b, bool sync)
{
    if (m->read_only)
        return -EROFS;
    if (b->oom)
        return -ENOMEM;
    if (b->count == 0 && !sync)
        return 0;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    if (!wb)
        return -ENOMEM;
    for (size_t off = 0; off < b->len;) {
        const unsigned char *p = b->buf + off;
        uint32_t klen, vlen;
        memcpy(&klen, p + 2, 4);
        memcpy(&vlen, p + 6, 4);
        const char *key = (const char *) p + ENTRY_HDR;
        rocksdb_column_family_handle_t *cf = meta__cf(m, (enum meta_cf) p[1]);
        if (p[0] == OP_PUT)
            rocksdb_writebatch_put_cf(wb, cf, key, klen, key + klen, vlen);
        else
            rocksdb_writebatch_delete_cf(wb, cf, key, klen);
        off += ENTRY_HDR + klen + vlen;
    }
    char *err = NULL;
    rocksdb_write(m->db, m->wopts, wb, &err);
    rocksdb_writebatch_destroy(wb);
    if (err) {
        log_err_limited("meta: write batch of %zu entries: %s", b->count, err);
        int rc = meta__errno(err);
        free(err);
        return rc;
    }
    /* With manual WAL flushing a sync write is a write followed by a WAL flush + fsync. */
    return sync ? meta_sync(m) : 0;
}

struct meta_iter {
    struct meta *m;
    rocksdb_readoptions_t *ropts;
    rocksdb_iterator_t *it;
};

struct meta_iter *
meta_iter_new(struct meta *m, enum meta_cf cf)
{
    struct meta_iter *it = calloc(1, sizeof(*it));
    if (!it)
        return NULL;
    it->m = m;
    it->ropts = rocksdb_readoptions_create();
    if (!it->ropts) {
        free(it);
        return NULL;
    }
    /* No explicit snapshot: an iterator reads as of its creation anyway (RocksDB pins the
     * sequence number and the memtables and files it reads). A registered snapshot added
     * nothing to that, and releasing one made RocksDB re-check its bottommost files: every
     * SST file flushed since the last release got marked and rewritten whole, only to zero
     * its sequence numbers ("BottommostFiles" compactions) — after an idle flush, 0.7 s of
     * CPU in the middle of the next sequential read (docs/benchmarks.md, item 48). */
    /* Scans (check, scrub, compaction) should not evict the hot set from the cache. */
    rocksdb_readoptions_set_fill_cache(it->ropts, 0);
    /* Every key in order, also in `hash`, whose prefix extractor would otherwise let a
     * seek skip keys of other prefixes (meta/db.c). */
    rocksdb_readoptions_set_total_order_seek(it->ropts, 1);
    it->it = rocksdb_create_iterator_cf(m->db, it->ropts, meta__cf(m, cf));
    if (!it->it) {
        meta_iter_free(it);
        return NULL;
    }
    return it;
}

void
meta_iter_free(struct meta_iter *it)
{
    if (!it)
        return;
    if (it->it)
        rocksdb_iter_destroy(it->it);
    rocksdb_readoptions_destroy(it->ropts);
    free(it);
}

void
meta_iter_seek(struct meta_iter *it, const void *key, size_t klen)
{
    rocksdb_iter_seek(it->it, key, klen);
}

void
meta_iter_seek_last(struct meta_iter *it, const void *key, size_t klen)
{
    rocksdb_iter_seek_for_prev(it->it, key, klen);
}

void
meta_iter_seek_first(struct meta_iter *it)
{
    rocksdb_iter_seek_to_first(it->it);
}

bool
meta_iter_valid(const struct meta_iter *it)
{
    return rocksdb_iter_valid(it->it);
}

void
meta_iter_next(struct meta_iter *it)
{
    rocksdb_iter_next(it->it);
}

const void *
meta_iter_key(const struct meta_iter *it, size_t *klen)
{
    return rocksdb_iter_key(it->it, klen);
}

const void *
meta_iter_value(const struct meta_iter *it, size_t *vlen)
{
    return rocksdb_iter_value(it->it, vlen);
}

int
meta_iter_status(const struct meta_iter *it)
{
    char *err = NULL;
    rocksdb_iter_get_error(it->it, &err);
    if (err) {
        log_err("meta: iterator: %s", err);
        free(err);
        return -EIO;
    }
    return 0;
}
