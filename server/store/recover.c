/* recover: bringing a data directory back to invariants 1-3 at open.
 *
 * What can be wrong after a crash, and what is done:
 * - A segment file longer than its persisted size: records appended by a transaction whose
 *   batch never committed (or a torn write). Unindexed by construction: truncated.
 * - Live and dead bytes that do not add up to the persisted size: records appended early
 *   (before their transaction) whose transaction never committed. Below a size another
 *   commit persisted they are unindexed, counted dead for compaction to reclaim; past a
 *   size a sync persisted (it promises only what it synced) they were truncated above.
 * - A segment file with no `seg:` entry: created at a seal whose transaction never
 *   committed; it holds no indexed record: truncated to zero (it stays, as the active one
 *   if it is the newest).
 * - A `seg:` entry whose file is missing: fine if it has no live bytes (compaction removed
 *   the file, then crashed before deleting the entry); if it was never synced, its name
 *   may simply not have reached the disk: recreated empty, its chunks then found lost
 *   (below); otherwise the directory is corrupt: -EIO with the segment named, nothing
 *   changed.
 * - Indexed records beyond a segment's synced watermark that are short or fail their CRC
 *   (possible only after a power cut, since RocksDB is not allowed to persist a batch
 *   before its segment bytes were fdatasync'ed; this is the safety net): the records past
 *   the watermark are walked; if one is broken, the chunk table is scanned for the chunks
 *   stored from there on and each one's record checked; each broken one is lost: its map
 *   entries are removed (those blocks read as zeros), its chunk/hash entries deleted, and
 *   every loss is logged.
 * Read-only opens report what they find and change nothing. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct lost {
    uint64_t *ids;
    size_t n, cap;
};

static int
lost_add(struct lost *l, uint64_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        uint64_t *n = realloc(l->ids, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        l->ids = n;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

static bool
lost_has(const struct lost *l, uint64_t id)
{
    return bsearch(&id, l->ids, l->n, sizeof(id), cmp_u64) != NULL;
}

/* Loads `seg:` entries into the open segments; entries without a file are checked. */
static int
load_seg_entries(struct store *st, struct meta_batch *b)
{
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_META);
    if (!it)
        return -ENOMEM;
    size_t plen = strlen(STORE_META_SEG);
    int rc = 0;
    for (size_t i = 0; i < st->nsegs; i++)
        st->segs[i]->has_entry = false;
    for (meta_iter_seek(it, STORE_META_SEG, plen); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = meta_iter_key(it, &kl);
        const uint8_t *v = meta_iter_value(it, &vl);
        if (kl < plen || memcmp(k, STORE_META_SEG, plen))
            break;
        if (kl != plen + 4 || vl != 34 || v[0] != 1) {
            log_err("store: %s: malformed segment entry in the database", st->dir);
            rc = -EPROTO;
            break;
        }
        uint32_t id = (uint32_t) k[plen] << 24 | (uint32_t) k[plen + 1] << 16 |
                      (uint32_t) k[plen + 2] << 8 | k[plen + 3];
        uint64_t size = store__get_be64(v + 1), synced = store__get_be64(v + 9),
                 live = store__get_be64(v + 17), dead = store__get_be64(v + 25);
        struct store_seg *sg = store__seg_find(st, id);
        if (!sg && live && synced == 0 && !st->opt.read_only) {
            /* Never synced: its name may not have reached the disk. Nothing in it was
             * promised durable, so its chunks are checked (and found lost) below. */
            log_warn("store: seg %" PRIu32 ": file missing but never synced; its chunks "
                     "will be dropped",
                     id);
            rc = store__seg_create(st, id, &sg);
            if (rc)
                break;
        }
        if (!sg) {
            if (live) {
                log_err("store: seg %" PRIu32 ": file missing from %s but %" PRIu64
                        " bytes of live chunks are indexed in it; refusing to open",
                        id, st->seg_dir, live);
                rc = -EIO;
                break;
            }
            meta_batch_delete(b, META_CF_META, k, kl); /* compaction's leftover */
            continue;
        }
        if (sg->size < synced) {
            /* Synced bytes cannot vanish in a crash: someone cut or replaced the file. */
            log_err("store: seg %" PRIu32 ": file is %" PRIu64 " bytes but %" PRIu64
                    " bytes of it were synced: truncated or replaced; %s",
                    id, sg->size, synced,
                    st->opt.read_only ? "reads past its end will fail"
                                      : "refusing to open read-write (open it "
                                        "read-only to check and scrub)");
            if (!st->opt.read_only) {
                rc = -EUCLEAN;
                break;
            }
        }
        sg->live = live;
        sg->dead = dead;
        sg->sealed = v[33] != 0;
        sg->has_entry = true;
        if (sg->size > size) {
            log_info("store: seg %" PRIu32 ": %" PRIu64 " bytes of unindexed tail after %" PRIu64
                     "; truncating",
                     id, sg->size - size, size);
            sg->dirty = true;
        } else if (sg->size < size) {
            log_warn("store: seg %" PRIu32 ": file is %" PRIu64 " bytes but %" PRIu64
                     " were written; checking the indexed records past it",
                     id, sg->size, size);
            sg->dirty = true;
        }
        /* From here on size is the logical end; the file is fixed below. */
        uint64_t fsz = sg->size;
        sg->size = size;
        sg->synced = synced < fsz ? synced : fsz;
        if (sg->synced > size)
            sg->synced = size;
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    if (rc)
        return rc;
    /* A file without an entry is the leftover of a seal that never committed, which can
     * only be newer than every segment the database knows. Anything else is not ours. */
    uint32_t max_known = 0;
    for (size_t i = 0; i < st->nsegs; i++)
        if (st->segs[i]->has_entry && st->segs[i]->id > max_known)
            max_known = st->segs[i]->id;
    for (size_t i = 0; i < st->nsegs; i++) {
        if (!st->segs[i]->has_entry && st->segs[i]->id < max_known) {
            log_err("store: seg %" PRIu32 ": file %s/seg-%08" PRIu32 ".log is not known to "
                    "the database but older than segments it knows; refusing to open",
                    st->segs[i]->id, st->seg_dir, st->segs[i]->id);
            return -EUCLEAN;
        }
    }
    return 0;
}

/* store_walk_fn: stops (1) at the first record whose stored bytes fail their CRC. */
static int
record_broken(void *arg, uint64_t off, const struct store_record_hdr *h, const uint8_t *rec)
{
    (void) arg;
    (void) off;
    return !store_record_data_ok(h, rec + STORE_RECORD_HDR_LEN);
}

/* Every chunk whose entry puts it in sg at or past `from`: its record is read on its own;
 * one that does not decode, fails its CRC or names another chunk is lost. A scan of the
 * whole chunk table, made only after a crash that really lost records. */
static int
scan_lost(struct store *st, struct store_seg *sg, uint64_t from, uint8_t *buf, struct lost *lost)
{
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_CHUNK);
    if (!it)
        return -ENOMEM;
    int rc = 0;
    uint64_t seen = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it) && rc == 0; meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint64_t id;
        struct meta_chunk_rec r;
        if (++seen % (1u << 20) == 0)
            log_info("store: seg %" PRIu32 ": looking for lost chunks: %" PRIu64 " entries read",
                     sg->id, seen);
        if (meta_key_chunk_decode(k, kl, &id) || meta_chunk_rec_decode(v, vl, &r) ||
            r.seg != sg->id || r.off < from)
            continue; /* a malformed entry is check's to report */
        struct store_record_hdr h;
        int x = store__read_record(st, sg, r.off, &h, buf, DEDUPD_CHUNK_MAX, 0);
        if (x == 0 && h.chunk_id != id)
            x = -EUCLEAN;
        if (x == -EUCLEAN) {
            log_err("store: seg %" PRIu32 " off %" PRIu64 ": chunk %" PRIu64
                    " was indexed but its record did not reach the disk; it is lost",
                    sg->id, r.off, id);
            rc = lost_add(lost, id);
        } else if (x) {
            rc = x;
        }
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    return rc;
}

/* Collects the indexed chunks whose records at offsets >= from in sg are gone. The records
 * written since the last sync are walked first: when every one is whole — a killed process
 * loses nothing the kernel already had — nothing is lost and no chunk entry is read. */
static int
verify_tail(struct store *st, struct store_seg *sg, uint64_t from, struct lost *lost)
{
    uint8_t *win = malloc(STORE_WALK_BYTES);
    if (!win)
        return -ENOMEM;
    uint64_t end;
    int rc = store__seg_walk(sg, from, sg->size, win, STORE_WALK_BYTES, record_broken, NULL, &end);
    if (rc == 1 || rc == -EUCLEAN) {
        log_warn("store: seg %" PRIu32 ": the records from off %" PRIu64 " to %" PRIu64
                 " did not all reach the disk; looking for chunks stored there",
                 sg->id, end, sg->size);
        rc = scan_lost(st, sg, end, win, lost);
    }
    free(win);
    return rc;
}

/* Removes lost chunks from the index (invariant 1: no map entry may name them). */
static int
drop_lost(struct store *st, struct lost *lost, struct meta_batch *b)
{
    qsort(lost->ids, lost->n, sizeof(uint64_t), cmp_u64);
    for (size_t i = 0; i < lost->n; i++) {
        struct meta_chunk_rec r;
        if (store__chunk_load(st, lost->ids[i], &r))
            continue;
        uint8_t key[META_CHUNK_KEY_LEN];
        meta_key_chunk_encode(key, lost->ids[i]);
        meta_batch_delete(b, META_CF_CHUNK, key, sizeof(key));
        if (r.hash_alg) {
            uint8_t hkey[META_HASH_KEY_MAX], val[META_ID_VAL_LEN];
            size_t hl = meta_key_hash_encode(hkey, r.hash_alg, r.hash, r.hash_len);
            uint64_t owner;
            ssize_t n = meta_get(st->meta, META_CF_HASH, hkey, hl, val, sizeof(val));
            if (n >= 0 && meta_val_id_decode(val, (size_t) n, &owner) == 0 && owner == lost->ids[i])
                meta_batch_delete(b, META_CF_HASH, hkey, hl);
        }
        st->cnt.chunks--;
        st->cnt.raw_bytes -= r.raw_len;
        st->cnt.stored_bytes -= r.stored_len;
        if (r.refs > 1)
            st->cnt.shared--;
        struct store_seg *sg = store__seg_find(st, r.seg);
        if (sg) {
            uint64_t len = store_record_len(r.stored_len);
            sg->live -= len < sg->live ? len : sg->live;
            sg->dead += len;
            sg->dirty = true;
        }
    }
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_MAP);
    if (!it)
        return -ENOMEM;
    int rc = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint64_t id, idx, mapped;
        uint32_t e;
        if (meta_val_id_decode(v, vl, &id) || !lost_has(lost, id) ||
            meta_key_map_decode(k, kl, &e, &idx))
            continue;
        log_err("store: export %" PRIu32 " chunk %" PRIu64 ": its data (chunk %" PRIu64
                ") was lost in a crash before a sync; it now reads as zeros",
                e, idx, id);
        meta_batch_delete(b, META_CF_MAP, k, kl);
        rc = store__export_count_get(st, e, &mapped);
        if (rc)
            break;
        store__export_count_set(st, e, mapped ? mapped - 1 : 0);
        store__export_put(b, e, mapped ? mapped - 1 : 0);
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    return rc;
}

int
store__recover(struct store *st)
{
    struct meta_batch *b = meta_batch_new();
    struct lost lost = {0};
    if (!b)
        return -ENOMEM;
    int rc = load_seg_entries(st, b);
    if (rc)
        goto out;
    for (size_t i = 0; i < st->nsegs && rc == 0; i++) {
        struct store_seg *sg = st->segs[i];
        uint64_t fsz;
        rc = store__io->fsize(sg->fd, &fsz);
        if (rc)
            break;
        if (!sg->has_entry) {
            /* No entry: nothing indexed; its content is an uncommitted tail. */
            if (fsz)
                log_info("store: seg %" PRIu32 ": %" PRIu64 " bytes never indexed; truncating",
                         sg->id, fsz);
            sg->size = 0;
            sg->synced = 0;
            sg->dirty = true;
        }
        if (sg->size < fsz || (sg->synced < sg->size))
            rc = verify_tail(st, sg, sg->synced, &lost);
        if (rc)
            break;
        if (!st->opt.read_only && fsz != sg->size) {
            /* Shorter: extend so appends continue at the logical end (the gap holds only
             * lost records, which are now dead). Longer: drop the unindexed tail. */
            rc = store__io->ftruncate(sg->fd, sg->size);
            if (rc == 0)
                rc = store__io->fdatasync(sg->fd);
            if (rc)
                log_err("store: seg %" PRIu32 ": truncate to %" PRIu64 ": %s", sg->id, sg->size,
                        strerror(-rc));
        }
        sg->synced = sg->size;
        if (!st->opt.read_only && sg->live <= sg->size && sg->live + sg->dead != sg->size) {
            /* Records appended early whose transaction never committed: below a size that
             * a later commit persisted they were never indexed, so dead; past the size a
             * sync persisted, they are gone, dead or not. */
            log_info("store: seg %" PRIu32 ": %" PRIu64 " dead bytes recorded, %" PRIu64
                     " now (records appended early and never indexed)",
                     sg->id, sg->dead, sg->size - sg->live);
            store__seg_set_dead(sg, sg->size - sg->live);
            sg->dirty = true;
        }
    }
    if (rc)
        goto out;
    if (lost.n) {
        log_err("store: %s: %zu chunks indexed past the last sync were lost (power loss?)", st->dir,
                lost.n);
        rc = drop_lost(st, &lost, b);
        if (rc)
            goto out;
    }
    if (st->opt.read_only) {
        st->active = st->nsegs ? st->segs[st->nsegs - 1] : NULL;
        goto out;
    }
    /* The newest segment is the active one unless it is sealed. Older unsealed ones (a
     * seal whose commit was lost) are sealed now. */
    for (size_t i = 0; i + 1 < st->nsegs; i++) {
        if (!st->segs[i]->sealed) {
            st->segs[i]->sealed = true;
            st->segs[i]->dirty = true;
        }
    }
    st->active = st->nsegs ? st->segs[st->nsegs - 1] : NULL;
    if (!st->active || st->active->sealed || st->active->size >= st->opt.seg_bytes) {
        rc = store__seal_active(st);
        if (rc)
            goto out;
    }
    bool any = lost.n > 0;
    for (size_t i = 0; i < st->nsegs; i++) {
        if (st->segs[i]->dirty) {
            store__seg_put_meta(st, b, st->segs[i]);
            st->segs[i]->dirty = false;
            any = true;
        }
    }
    if (lost.n)
        store__counters_put(st, b, &st->cnt);
    if (any || meta_batch_count(b)) {
        rc = store__seg_sync_all(st);
        if (rc == 0)
            rc = meta_batch_commit(st->meta, b, true);
    }
out:
    free(lost.ids);
    meta_batch_free(b);
    return rc;
}
