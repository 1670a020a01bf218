/* compact: reclaiming dead bytes by rewriting sealed segments.
 *
 * States of one segment's compaction, and transitions:
 *   chosen    a sealed segment whose live fraction is below compact_live_ratio (or, when
 *             forced, with any dead byte): pick_segments()
 *   copying   its records are walked without the commit lock (each header names its
 *             chunk; the chunk entry says whether that record is the live copy); live
 *             ones are CRC-checked, then in groups of up to GROUP_BYTES re-appended to
 *             the active segment and their chunk entries updated in one batch per group
 *             under the commit lock (store__move_records; chunks freed or moved meanwhile
 *             are skipped): copy_live()
 *   syncing   when no live byte is left: segment fdatasync then WAL sync, so the new
 *             locations are durable before the old copy goes (finish_segment())
 *   removed   the file is unlinked, the directory synced, its `seg:` entry deleted; readers
 *             that still hold the segment finish on their open fd.
 * A record that fails its CRC cannot be moved; its segment stays (scrub reports it).
 * A crash at any point is safe: before the sync the old copies are still the indexed
 * ones; after it, a leftover file or entry with no live bytes is cleaned up by recovery.
 *
 * The background thread wakes every second for the idle flush (store__idle_tick), runs a
 * pass every POLL_SEC (or stops when asked), and keeps a pass's copying under
 * compact_bytes_per_sec by sleeping between groups. store_compact()
 * runs a pass at once in the caller's thread, unthrottled. One pass at a time. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/threadname.h"

#define GROUP_BYTES (4u << 20)
/* A group is committed before a record would take it past GROUP_BYTES, so the buffer
 * needs room for GROUP_BYTES or for one record of the largest chunk size. */
#define BUF_BYTES                                                                                  \
    (GROUP_BYTES > STORE_RECORD_HDR_LEN + DEDUPD_CHUNK_MAX                                         \
         ? GROUP_BYTES                                                                             \
         : STORE_RECORD_HDR_LEN + DEDUPD_CHUNK_MAX)
#define POLL_SEC 5

struct pass {
    struct store *st;
    bool background;
    store_progress_fn progress;
    void *arg;
    struct store_progress prog;
    struct store_compact_result res;
    uint8_t *buf; /* records to move: GROUP_BYTES, or one record of any size (BUF_BYTES) */
    uint8_t *win; /* the segment walk's window, STORE_WALK_BYTES */
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

/* The chunk entry says record (off, h) of sg is the one it lives in. */
static int
lives_here(struct store *st, const struct store_seg *sg, uint64_t off,
           const struct store_record_hdr *h, bool *live)
{
    struct meta_chunk_rec r;
    int rc = store__chunk_load(st, h->chunk_id, &r);
    *live = rc == 0 && r.seg == sg->id && r.off == off;
    return rc == -ENOENT ? 0 : rc;
}

struct live_walk {
    struct pass *p;
    struct store_seg *sg;
    size_t used, n; /* in p->buf and p->mv */
    uint64_t *bad;
    uint64_t found_id; /* find_live: the chunk that still lives here */
};

/* store_walk_fn: a live record joins the group to move (the group is committed when full). */
static int
take_live(void *arg, uint64_t off, const struct store_record_hdr *h, const uint8_t *rec)
{
    struct live_walk *w = arg;
    struct pass *p = w->p;
    bool live;
    int rc = lives_here(p->st, w->sg, off, h, &live);
    if (rc || !live)
        return rc;
    if (!store_record_data_ok(h, rec + STORE_RECORD_HDR_LEN)) {
        log_err("store: compaction: seg %" PRIu32 " off %" PRIu64 " (chunk %" PRIu64
                "): corrupt record; left in place",
                w->sg->id, off, h->chunk_id);
        (*w->bad)++;
        return 0;
    }
    uint64_t len = store_record_len(h->stored_len);
    if (w->n && (w->used + len > GROUP_BYTES || w->n == p->mv_cap)) {
        rc = commit_group(p, w->sg, w->n);
        if (rc)
            return rc;
        w->used = w->n = 0;
    }
    memcpy(p->buf + w->used, rec, len);
    p->mv[w->n] =
        (struct store_move){.off = off, .id = h->chunk_id, .len = len, .buf_off = w->used};
    w->n++;
    w->used += len;
    return 0;
}

/* Moves every live record of sg: walks its records (each header names its chunk; the chunk
 * entry says whether that record is the live copy) and re-appends the live ones in groups. */
static int
copy_live(struct pass *p, struct store_seg *sg, uint64_t *bad)
{
    struct live_walk w = {.p = p, .sg = sg, .bad = bad};
    uint64_t end;
    int rc = store__seg_walk(sg, 0, sg->size, p->win, STORE_WALK_BYTES, take_live, &w, &end);
    if (rc == -EUCLEAN) {
        log_err("store: compaction: seg %" PRIu32 " off %" PRIu64 ": unreadable record header; "
                "the records after it cannot be found, so the segment is kept (run scrub)",
                sg->id, end);
        (*bad)++;
        rc = 0;
    }
    if (rc == 0 && w.n)
        rc = commit_group(p, sg, w.n);
    return rc;
}

/* store_walk_fn: stops (1) at the first record a chunk entry still names. */
static int
find_live(void *arg, uint64_t off, const struct store_record_hdr *h, const uint8_t *rec)
{
    (void) rec;
    struct live_walk *w = arg;
    bool live;
    int rc = lives_here(w->p->st, w->sg, off, h, &live);
    if (live)
        w->found_id = h->chunk_id;
    return rc ? rc : live;
}

static int
finish_segment(struct pass *p, struct store_seg *sg)
{
    struct store *st = p->st;
    /* Belt and braces: the chunk entries of its records must say nothing lives here before
     * a file is deleted. Walked before the commit lock (writers would wait for the whole
     * walk): a sealed segment only ever loses live records, and only this pass moves them. */
    struct live_walk w = {.p = p, .sg = sg};
    uint64_t end;
    int found = store__seg_walk(sg, 0, sg->size, p->win, STORE_WALK_BYTES, find_live, &w, &end);
    if (found == 1) {
        log_err("store: compaction: seg %" PRIu32 ": chunk %" PRIu64 " still lives at off %" PRIu64
                " after its records were moved; kept (run check)",
                sg->id, w.found_id, end);
        return 0;
    }
    if (found) {
        log_err("store: compaction: seg %" PRIu32 ": walking its records before removal stopped at "
                "off %" PRIu64 ": %s; kept",
                sg->id, end, strerror(-found));
        return found == -EUCLEAN ? 0 : found;
    }
    pthread_mutex_lock(&st->commit_lock);
    if (sg->live != 0) {
        pthread_mutex_unlock(&st->commit_lock);
        log_warn("store: compaction: seg %" PRIu32 " still has %" PRIu64 " live bytes; kept",
                 sg->id, sg->live);
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
        log_info("store: compaction: seg %" PRIu32 " removed (%" PRIu64 " bytes)", sg->id, size);
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
        if (sg == st->active || !sg->sealed || sg->size == 0 ||
            __atomic_load_n(&sg->early_pending, __ATOMIC_SEQ_CST) > 0)
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
    p->buf = malloc(BUF_BYTES);
    p->win = malloc(STORE_WALK_BYTES);
    p->mv = malloc(p->mv_cap * sizeof(*p->mv));
    int rc = (p->buf && p->win && p->mv) ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct store_seg *sg = store__seg_get(st, ids[i]);
        if (!sg)
            continue;
        uint64_t bad = 0;
        /* Nothing live by the accounting (a sealed segment only loses live records, and
         * only this pass moves them): no walk to find records to move — finish_segment
         * still walks it once to make sure before the file goes. A sequential overwrite
         * leaves whole segments dead, and each was read twice (docs/benchmarks.md, 41). */
        pthread_mutex_lock(&st->commit_lock);
        bool nothing_live = sg->live == 0;
        pthread_mutex_unlock(&st->commit_lock);
        if (!nothing_live)
            rc = copy_live(p, sg, &bad);
        if (rc == 0 && bad == 0)
            rc = finish_segment(p, sg);
        store__seg_put(st, sg);
        if (rc == 0 && stopping(st))
            rc = -ECANCELED;
    }
    if (n)
        log_info("store: compaction pass: %" PRIu64 " segments removed, %" PRIu64
                 " bytes moved, %" PRIu64 " bytes reclaimed",
                 p->res.segments_compacted, p->res.bytes_moved, p->res.bytes_reclaimed);
    free(p->buf);
    free(p->win);
    free(p->mv);
    free(ids);
    return rc;
}

/* A forced pass reclaims the active segment's dead bytes too: it is sealed first (a new,
 * empty segment takes the appends) so that the pass can move its live records out. On a
 * full disk the active segment may hold most of what a trim freed (disk-full.sh). */
static void
seal_active_if_dead(struct store *st)
{
    pthread_mutex_lock(&st->commit_lock);
    pthread_mutex_lock(&st->append_lock);
    struct store_seg *a = st->active;
    if (a && store__seg_size(a) > 0 && a->dead > 0) {
        int rc = store__seal_active(st);
        if (rc)
            log_warn("store: sealing seg %" PRIu32 " for a forced compaction: %s", a->id,
                     strerror(-rc));
    }
    pthread_mutex_unlock(&st->append_lock);
    pthread_mutex_unlock(&st->commit_lock);
}

int
store_compact(struct store *st, bool force, store_progress_fn progress, void *arg,
              struct store_compact_result *out)
{
    if (st->opt.read_only)
        return -EROFS;
    struct pass p = {.st = st, .progress = progress, .arg = arg};
    pthread_mutex_lock(&st->compact_run);
    if (force)
        seal_active_if_dead(st);
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
    threadname_set("compact");
    for (unsigned tick = 1;; tick++) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_mutex_lock(&st->compact_mu);
        while (!st->compact_stop &&
               pthread_cond_timedwait(&st->compact_cv, &st->compact_mu, &until) == 0)
            ;
        bool stop = st->compact_stop;
        pthread_mutex_unlock(&st->compact_mu);
        if (stop)
            break;
        store__idle_tick(st);
        if (tick % POLL_SEC)
            continue;
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
