/* compact: reclaiming dead bytes by rewriting sealed segments.
 *
 * States of one segment's compaction, and transitions:
 *   chosen    a sealed segment whose live fraction is below compact_live_ratio (or, when
 *             forced, with any dead byte): pick_segments()
 *   copying   its live records are read without the commit lock (CRC-checked), then in
 *             groups of up to GROUP_BYTES re-appended to the active segment and their
 *             chunk/rev entries updated in one batch per group under the commit lock
 *             (store__move_records; chunks freed or moved meanwhile are skipped):
 *             copy_live()
 *   syncing   when no live byte is left: segment fdatasync then WAL sync, so the new
 *             locations are durable before the old copy goes (finish_segment())
 *   removed   the file is unlinked, the directory synced, its `seg:` entry deleted; readers
 *             that still hold the segment finish on their open fd.
 * A record that fails its CRC cannot be moved; its segment stays (scrub reports it).
 * A crash at any point is safe: before the sync the old copies are still the indexed
 * ones; after it, a leftover file or entry with no live bytes is cleaned up by recovery.
 *
 * The background thread wakes every POLL_SEC (or when stopped), runs a pass, and keeps
 * its copying under compact_bytes_per_sec by sleeping between groups. store_compact()
 * runs a pass at once in the caller's thread, unthrottled. One pass at a time. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

#define GROUP_BYTES (4u << 20)
#define POLL_SEC    5

struct pass {
    struct store *st;
    bool background;
    store_progress_fn progress;
    void *arg;
    struct store_progress prog;
    struct store_compact_result res;
    uint8_t *buf;
    struct store_move *mv;
    size_t mv_cap;
};

static bool
stopping(struct store *st)
{
    pthread_mutex_lock(&st->compact_mu);
    bool s = st->compact_stop;
    pthread_mutex_unlock(&st->compact_mu);
    return s;
}

/* Sleeps long enough that `bytes` took bytes/rate seconds; false if asked to stop. */
static bool
throttle(struct pass *p, uint64_t bytes)
{
    struct store *st = p->st;
    if (!p->background || bytes == 0)
        return !stopping(st);
    uint64_t ns = bytes * 1000000000ull / st->opt.compact_bytes_per_sec;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t) (ns / 1000000000ull);
    until.tv_nsec += (long) (ns % 1000000000ull);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&st->compact_mu);
    while (!st->compact_stop &&
           pthread_cond_timedwait(&st->compact_cv, &st->compact_mu, &until) == 0)
        ;
    bool go = !st->compact_stop;
    pthread_mutex_unlock(&st->compact_mu);
    return go;
}

static int
report(struct pass *p)
{
    if (p->progress && p->progress(p->arg, &p->prog))
        return -ECANCELED;
    return 0;
}

static int
commit_group(struct pass *p, struct store_seg *sg, size_t n)
{
    struct store *st = p->st;
    uint64_t moved = 0;
    pthread_mutex_lock(&st->commit_lock);
    int rc = store__move_records(st, sg, p->mv, n, p->buf, &moved);
    pthread_mutex_unlock(&st->commit_lock);
    if (rc)
        return rc;
    p->res.bytes_moved += moved;
    p->prog.done += moved;
    rc = report(p);
    if (rc == 0 && !throttle(p, moved))
        rc = -ECANCELED;
    return rc;
}

static int
copy_live(struct pass *p, struct store_seg *sg, uint64_t *bad)
{
    struct meta_iter *it = meta_iter_new(p->st->meta, META_CF_REV);
    if (!it)
        return -ENOMEM;
    uint8_t key[META_REV_KEY_LEN];
    meta_key_rev_encode(key, sg->id, 0);
    size_t used = 0, n = 0;
    int rc = 0;
    for (meta_iter_seek(it, key, sizeof(key)); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint32_t seg;
        uint64_t off, id;
        if (meta_key_rev_decode(k, kl, &seg, &off) || seg != sg->id)
            break;
        if (meta_val_id_decode(v, vl, &id))
            continue;
        if (GROUP_BYTES - used < store_record_len(DEDUPD_CHUNK_MAX) || n == p->mv_cap) {
            rc = commit_group(p, sg, n);
            if (rc)
                break;
            used = n = 0;
        }
        struct store_record_hdr h;
        uint64_t len;
        int r = store__read_raw(sg, off, p->buf + used, GROUP_BYTES - used, &h, &len);
        if (r == 0 && h.chunk_id != id)
            r = -EUCLEAN;
        if (r) {
            log_err("store: compaction: seg %" PRIu32 " off %" PRIu64 " (chunk %" PRIu64
                    "): %s; record left in place", sg->id, off, id,
                    r == -EUCLEAN ? "corrupt record" : strerror(-r));
            (*bad)++;
            continue;
        }
        p->mv[n].off = off;
        p->mv[n].id = id;
        p->mv[n].len = len;
        p->mv[n].buf_off = used;
        n++;
        used += len;
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    if (rc == 0 && n)
        rc = commit_group(p, sg, n);
    meta_iter_free(it);
    return rc;
}

static int
finish_segment(struct pass *p, struct store_seg *sg)
{
    struct store *st = p->st;
    pthread_mutex_lock(&st->commit_lock);
    if (sg->live != 0) {
        pthread_mutex_unlock(&st->commit_lock);
        log_warn("store: compaction: seg %" PRIu32 " still has %" PRIu64
                 " live bytes; kept", sg->id, sg->live);
        return 0;
    }
    /* Belt and braces: the accounting says nothing lives here; the rev CF must agree
     * before a file is deleted. */
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_REV);
    if (!it) {
        pthread_mutex_unlock(&st->commit_lock);
        return -ENOMEM;
    }
    uint8_t rk[META_REV_KEY_LEN];
    meta_key_rev_encode(rk, sg->id, 0);
    meta_iter_seek(it, rk, sizeof(rk));
    bool occupied = false;
    if (meta_iter_valid(it)) {
        size_t kl;
        uint32_t seg;
        uint64_t off;
        const void *k = meta_iter_key(it, &kl);
        occupied = meta_key_rev_decode(k, kl, &seg, &off) == 0 && seg == sg->id;
    }
    meta_iter_free(it);
    if (occupied) {
        pthread_mutex_unlock(&st->commit_lock);
        log_err("store: compaction: seg %" PRIu32 " has no live bytes by its accounting but "
                "still holds indexed records; kept (run check)", sg->id);
        return 0;
    }
    /* The new copies and their index entries must be durable before the old copy goes. */
    int rc = store__sync_locked(st);
    char path[4096];
    store__seg_path(st, sg->id, path, sizeof(path));
    uint64_t size = sg->size;
    if (rc == 0) {
        rc = store__io->unlink(path);
        if (rc)
            log_err("store: compaction: unlink %s: %s", path, strerror(-rc));
    }
    if (rc == 0) {
        /* The unlink is made durable before the entry goes: a file left behind without
         * its entry would look like a stranger at the next open. */
        __atomic_store_n(&st->dir_dirty, 1, __ATOMIC_SEQ_CST);
        rc = store__seg_sync_dir(st);
    }
    if (rc == 0) {
        uint8_t key[sizeof(STORE_META_SEG) - 1 + 4];
        memcpy(key, STORE_META_SEG, sizeof(STORE_META_SEG) - 1);
        key[sizeof(key) - 4] = (uint8_t) (sg->id >> 24);
        key[sizeof(key) - 3] = (uint8_t) (sg->id >> 16);
        key[sizeof(key) - 2] = (uint8_t) (sg->id >> 8);
        key[sizeof(key) - 1] = (uint8_t) sg->id;
        struct meta_batch *b = st->txn.batch;
        meta_batch_clear(b);
        meta_batch_delete(b, META_CF_META, key, sizeof(key));
        rc = meta_batch_commit(st->meta, b, false);
        meta_batch_clear(b);
        log_info("store: compaction: seg %" PRIu32 " removed (%" PRIu64 " bytes)", sg->id,
                 size);
        store__seg_remove(st, sg);
        pthread_mutex_lock(&st->stat_lock);
        st->compactions++;
        pthread_mutex_unlock(&st->stat_lock);
        p->res.segments_compacted++;
        p->res.bytes_reclaimed += size;
    }
    pthread_mutex_unlock(&st->commit_lock);
    return rc;
}

/* The ids of the segments to compact now, under the commit lock. */
static uint32_t *
pick_segments(struct store *st, bool force, size_t *n, uint64_t *live_total)
{
    pthread_mutex_lock(&st->commit_lock);
    uint32_t *ids = malloc((st->nsegs + 1) * sizeof(*ids));
    *n = 0;
    *live_total = 0;
    for (size_t i = 0; ids && i < st->nsegs; i++) {
        struct store_seg *sg = st->segs[i];
        if (sg == st->active || !sg->sealed || sg->size == 0)
            continue;
        bool pick = force ? sg->dead > 0
                          : (double) sg->live < st->opt.compact_live_ratio * (double) sg->size;
        if (pick) {
            ids[(*n)++] = sg->id;
            *live_total += sg->live;
        }
    }
    pthread_mutex_unlock(&st->commit_lock);
    return ids;
}

static int
run_pass(struct pass *p, bool force)
{
    struct store *st = p->st;
    size_t n;
    uint64_t live;
    uint32_t *ids = pick_segments(st, force, &n, &live);
    if (!ids)
        return -ENOMEM;
    p->prog.total = live;
    p->mv_cap = GROUP_BYTES / store_record_len(DEDUPD_CHUNK_MIN) + 1;
    p->buf = malloc(GROUP_BYTES);
    p->mv = malloc(p->mv_cap * sizeof(*p->mv));
    int rc = (p->buf && p->mv) ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct store_seg *sg = store__seg_get(st, ids[i]);
        if (!sg)
            continue;
        uint64_t bad = 0;
        rc = copy_live(p, sg, &bad);
        if (rc == 0 && bad == 0)
            rc = finish_segment(p, sg);
        store__seg_put(st, sg);
        if (rc == 0 && stopping(st))
            rc = -ECANCELED;
    }
    if (n)
        log_info("store: compaction pass: %" PRIu64 " segments removed, %" PRIu64
                 " bytes moved, %" PRIu64 " bytes reclaimed", p->res.segments_compacted,
                 p->res.bytes_moved, p->res.bytes_reclaimed);
    free(p->buf);
    free(p->mv);
    free(ids);
    return rc;
}

int
store_compact(struct store *st, bool force, store_progress_fn progress, void *arg,
              struct store_compact_result *out)
{
    if (st->opt.read_only)
        return -EROFS;
    struct pass p = {.st = st, .progress = progress, .arg = arg};
    pthread_mutex_lock(&st->compact_run);
    int rc = run_pass(&p, force);
    pthread_mutex_unlock(&st->compact_run);
    if (out)
        *out = p.res;
    return rc;
}

static void *
compact_main(void *arg)
{
    struct store *st = arg;
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += POLL_SEC;
        pthread_mutex_lock(&st->compact_mu);
        while (!st->compact_stop &&
               pthread_cond_timedwait(&st->compact_cv, &st->compact_mu, &until) == 0)
            ;
        bool stop = st->compact_stop;
        pthread_mutex_unlock(&st->compact_mu);
        if (stop)
            break;
        struct pass p = {.st = st, .background = true};
        pthread_mutex_lock(&st->compact_run);
        int rc = run_pass(&p, false);
        pthread_mutex_unlock(&st->compact_run);
        if (rc && rc != -ECANCELED)
            log_err("store: background compaction: %s", strerror(-rc));
    }
    return NULL;
}

int
store__compact_start(struct store *st)
{
    st->compact_stop = false;
    int rc = pthread_create(&st->compact_thread, NULL, compact_main, st);
    if (rc) {
        log_err("store: cannot start the compaction thread: %s", strerror(rc));
        return -rc;
    }
    st->compact_running = true;
    return 0;
}

void
store__compact_stop(struct store *st)
{
    if (!st->compact_running)
        return;
    pthread_mutex_lock(&st->compact_mu);
    st->compact_stop = true;
    pthread_cond_broadcast(&st->compact_cv);
    pthread_mutex_unlock(&st->compact_mu);
    pthread_join(st->compact_thread, NULL);
    st->compact_running = false;
}
