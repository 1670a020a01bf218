/* check: proves invariants 1-3 from the metadata alone, and repairs what is safe.
 *
 * Passes, all over iterators opened together under the commit lock (one consistent
 * snapshot, matching the in-memory counters copied at the same moment):
 *   1. chunk: every entry decodes and its record lies inside an existing segment;
 *      refcounts and counters are collected.
 *   2. map:   every entry names a live chunk (invariant 1); entries per chunk and per
 *      export are counted.
 *   3. refcounts compared with the counts of pass 2 (invariant 1).
 *   4. hash:  every entry names a live chunk with that hash (invariant 2).
 *   5. counters (global, per segment live bytes, per export) match what was recomputed.
 * (Whether each record really holds its chunk is scrub's question: it reads the segments.)
 * Repair (under the commit lock for its whole run, so no transaction interleaves) fixes
 * refcounts (freeing chunks no map entry names), deletes dangling hash entries and map
 * entries naming missing chunks, and rewrites counters. It never deletes a chunk that a map
 * entry names, and never touches segment files.
 * Memory: 16 bytes per chunk (the table below) for at most CK_WINDOW chunks at a time: a
 * larger store is checked in windows of consecutive chunk ids, passes 1-4 once per window
 * (pass 1 over the window's ids only; passes 2 and 4 over everything, counting only the
 * entries that name an id in the window), so memory stays at ~64 MiB whatever the store's
 * size, and time grows with one more map and hash scan per 4 M chunks. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Pass 1's view of one chunk, in id order: the chunk family iterates its big-endian keys in
 * byte order, so the table is filled sorted and searched by bisection. 16 bytes a chunk,
 * where a hash table of whole entries took 64-96 (half empty, and old and new side by side
 * while it grew: ~1 GiB for a store of 10 M chunks). refcount - counted references is all
 * the passes need; the few chunks where it is not 0 have their entry read again. */
struct ck_chunk {
    uint64_t id;
    int64_t delta; /* refcount minus the map entries counted so far, or CK_FREED */
};
#define CK_FREED INT64_MIN /* freed by this repair */

/* Chunks per window (64 MiB of table). store_test_check_window makes it small. */
#define CK_WINDOW (4u << 20)
static uint64_t ck_window = CK_WINDOW;

void
store_test_check_window(uint64_t chunks)
{
    ck_window = chunks ? chunks : CK_WINDOW;
}

struct ck {
    struct store *st;
    bool repair;
    store_progress_fn progress;
    store_finding_fn finding;
    void *arg;
    struct store_check_result *res;
    struct ck_chunk *tab; /* ascending ids: the window's chunks */
    size_t cap, n;
    uint64_t lo, hi; /* the window: chunk ids in [lo, hi) */
    bool first;      /* the first window: entries that name no id are reported in it */
    size_t hint;     /* tab_find's last hit */
    struct meta_batch *b;
    struct store_progress prog;
    struct store_counters cnt, want;
    struct seg_sum {
        uint32_t id;
        uint64_t live;
        uint64_t size; /* bytes appended, at the snapshot */
    } * segsum;
    size_t nsegsum;
    struct ck_export {
        uint32_t export_id;
        uint64_t mapped;   /* counted in map */
        uint64_t recorded; /* 1 + the recorded count, 0 if none */
    } * exp;
    size_t nexp, expcap;
    struct meta_iter *meta_it;
};

static void __attribute__((format(printf, 2, 3))) finding(struct ck *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    c->res->problems++;
    log_warn("store: check: %s", line);
    if (c->finding)
        c->finding(c->arg, line);
}

static int
tick(struct ck *c)
{
    c->prog.done++;
    if (c->progress && (c->prog.done & 4095) == 0 && c->progress(c->arg, &c->prog))
        return -ECANCELED;
    return 0;
}

static struct ck_chunk *
tab_find(struct ck *c, uint64_t id)
{
    /* Map entries of data written in order name ascending ids: try next to the last hit
     * before bisecting. */
    size_t h = c->hint;
    if (h < c->n && c->tab[h].id == id)
        return &c->tab[h];
    if (h + 1 < c->n && c->tab[h + 1].id == id)
        return &c->tab[c->hint = h + 1];
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->tab[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->n && c->tab[lo].id == id) {
        c->hint = lo;
        return &c->tab[lo];
    }
    return NULL;
}

/* Appends the next chunk (ids come in ascending order). */
static int
tab_append(struct ck *c, uint64_t id, uint64_t refs)
{
    if (c->n == c->cap) {
        /* Sized from the chunk counter at the snapshot (at most a window); grown only if
         * the store disagrees. */
        size_t ncap = c->cap ? c->cap + c->cap / 2 : (size_t) c->cnt.chunks + 1024;
        if (ncap > ck_window)
            ncap = ck_window;
        struct ck_chunk *t = realloc(c->tab, ncap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        c->tab = t;
        c->cap = ncap;
    }
    c->tab[c->n++] = (struct ck_chunk){.id = id, .delta = (int64_t) refs};
    return 0;
}

static struct seg_sum *
segsum(struct ck *c, uint32_t id)
{
    for (size_t i = 0; i < c->nsegsum; i++)
        if (c->segsum[i].id == id)
            return &c->segsum[i];
    return NULL;
}

static struct ck_export *
exp_slot(struct ck *c, uint32_t id)
{
    for (size_t i = 0; i < c->nexp; i++)
        if (c->exp[i].export_id == id)
            return &c->exp[i];
    if (c->nexp == c->expcap) {
        size_t cap = c->expcap ? c->expcap * 2 : 8;
        struct ck_export *n = realloc(c->exp, cap * sizeof(*n));
        if (!n)
            return NULL;
        c->exp = n;
        c->expcap = cap;
    }
    c->exp[c->nexp].export_id = id;
    c->exp[c->nexp].mapped = 0;
    c->exp[c->nexp].recorded = 0;
    return &c->exp[c->nexp++];
}

/* Seeks it to key; true, with the value, when exactly that key exists. */
static bool
iter_at(struct meta_iter *it, const void *key, size_t klen, const void **val, size_t *vlen)
{
    size_t kl;
    meta_iter_seek(it, key, klen);
    if (!meta_iter_valid(it))
        return false;
    const void *k = meta_iter_key(it, &kl);
    if (kl != klen || memcmp(k, key, klen) != 0)
        return false;
    *val = meta_iter_value(it, vlen);
    return true;
}

/* Does id fall in the current window? */
static bool
in_window(const struct ck *c, uint64_t id)
{
    return id >= c->lo && id < c->hi;
}

/* Pass 1 for the window starting at c->lo: fills the table with up to ck_window chunks
 * from the iterator's position and sets c->hi (UINT64_MAX when the entries ran out). */
static int
pass_chunks(struct ck *c, struct meta_iter *it)
{
    int rc = 0;
    c->n = 0;
    c->hint = 0;
    c->hi = UINT64_MAX;
    for (; meta_iter_valid(it) && rc == 0; meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint64_t id;
        struct meta_chunk_rec r;
        bool key_ok = meta_key_chunk_decode(k, kl, &id) == 0;
        if (key_ok && c->n == ck_window) {
            c->hi = id; /* the next window starts here, at the iterator's position */
            break;
        }
        c->res->chunks++;
        if (!key_ok || meta_chunk_rec_decode(v, vl, &r)) {
            finding(c, "malformed chunk entry (key %zu bytes, value %zu bytes)", kl, vl);
            continue;
        }
        uint64_t refs = r.refs;
        uint32_t reclen = (uint32_t) store_record_len(r.stored_len);
        if (c->st->opt.read_only) /* nothing folded the journal (nor changes it meanwhile) */
            store__refs_get(c->st, id, &refs);
        rc = tab_append(c, id, refs);
        c->want.shared += refs > 1; /* check_refs corrects it where the counts differ */
        c->want.chunks++;
        c->want.raw_bytes += r.raw_len;
        c->want.stored_bytes += r.stored_len;
        if (id >= c->want.next_id)
            c->want.next_id = id + 1;
        struct seg_sum *ss = segsum(c, r.seg);
        if (!ss) {
            finding(c, "chunk %" PRIu64 ": segment %" PRIu32 " does not exist", id, r.seg);
        } else {
            ss->live += reclen;
            if (r.off > ss->size || reclen > ss->size - r.off)
                finding(c,
                        "chunk %" PRIu64 ": record at seg %" PRIu32 " off %" PRIu64
                        " ends past the segment's %" PRIu64 " bytes",
                        id, r.seg, r.off, ss->size);
        }
        if (rc == 0)
            rc = tick(c);
    }
    return rc ? rc : meta_iter_status(it);
}

static int
pass_map(struct ck *c, struct meta_iter *it)
{
    int rc = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it) && rc == 0; meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint32_t e;
        uint64_t idx, id;
        if (meta_key_map_decode(k, kl, &e, &idx) || meta_val_id_decode(v, vl, &id)) {
            if (c->first) {
                c->res->map_entries++;
                finding(c, "malformed map entry");
            }
            continue;
        }
        if (c->first)
            c->res->map_entries++;
        if (!in_window(c, id))
            continue; /* counted in its own window (id 0 in the first: lo is 0 there) */
        struct ck_chunk *ch = id ? tab_find(c, id) : NULL;
        if (!ch) {
            finding(c,
                    "export %" PRIu32 " chunk %" PRIu64 ": names chunk %" PRIu64
                    " which does not exist",
                    e, idx, id);
            if (c->repair) {
                meta_batch_delete(c->b, META_CF_MAP, k, kl);
                c->res->repaired++;
            }
            continue;
        }
        ch->delta--;
        struct ck_export *x = exp_slot(c, e);
        if (!x)
            return -ENOMEM;
        x->mapped++;
        rc = tick(c);
    }
    return rc ? rc : meta_iter_status(it);
}

static void
free_in_repair(struct ck *c, uint64_t id, const uint8_t key[META_CHUNK_KEY_LEN],
               const struct meta_chunk_rec *rec)
{
    meta_batch_delete(c->b, META_CF_CHUNK, key, META_CHUNK_KEY_LEN);
    if (rec->hash_alg) {
        uint8_t hk[META_HASH_KEY_MAX], val[8];
        size_t hl = meta_key_hash_encode(hk, rec->hash_alg, rec->hash, rec->hash_len);
        uint64_t owner;
        ssize_t n = meta_get(c->st->meta, META_CF_HASH, hk, hl, val, sizeof(val));
        if (n == 8 && meta_val_id_decode(val, 8, &owner) == 0 && owner == id)
            meta_batch_delete(c->b, META_CF_HASH, hk, hl);
    }
    c->want.chunks--;
    c->want.raw_bytes -= rec->raw_len;
    c->want.stored_bytes -= rec->stored_len;
    struct seg_sum *ss = segsum(c, rec->seg);
    if (ss)
        ss->live -= store_record_len(rec->stored_len);
}

/* A chunk whose references do not match its refcount: its entry read again. */
static void
check_refs(struct ck *c, struct ck_chunk *e, struct meta_iter *chunks)
{
    uint8_t key[META_CHUNK_KEY_LEN];
    meta_key_chunk_encode(key, e->id);
    size_t vl;
    const void *v;
    struct meta_chunk_rec r;
    if (!iter_at(chunks, key, sizeof(key), &v, &vl) || meta_chunk_rec_decode(v, vl, &r)) {
        /* Pass 1 decoded it from the same snapshot: not expected, but still a finding. */
        finding(c, "chunk %" PRIu64 ": refcount differs from its map entries by %" PRId64, e->id,
                e->delta);
        return;
    }
    uint64_t refs = r.refs;
    if (c->st->opt.read_only)
        store__refs_get(c->st, e->id, &refs);
    uint64_t counted = refs - (uint64_t) e->delta;
    finding(c, "chunk %" PRIu64 ": refcount %" PRIu64 " but %" PRIu64 " map entries name it", e->id,
            refs, counted);
    if (refs > 1) /* pass 1 counted it as shared by its refcount */
        c->want.shared--;
    if (counted > 1)
        c->want.shared++;
    if (!c->repair)
        return;
    if (counted == 0) {
        free_in_repair(c, e->id, key, &r);
        e->delta = CK_FREED;
    } else {
        uint8_t val[META_CHUNK_VAL_MAX];
        r.refs = counted;
        meta_batch_put(c->b, META_CF_CHUNK, key, sizeof(key), val, meta_chunk_rec_encode(val, &r));
        e->delta = 0;
    }
    c->res->repaired++;
}

static int
pass_refs(struct ck *c, struct meta_iter *chunks)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->tab[i].delta != 0)
            check_refs(c, &c->tab[i], chunks);
    return 0;
}

static int
pass_hash(struct ck *c, struct meta_iter *it, struct meta_iter *chunks)
{
    int rc = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it) && rc == 0; meta_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint64_t id = 0;
        bool named = kl >= 2 && kl <= META_HASH_KEY_MAX && meta_val_id_decode(v, vl, &id) == 0;
        if (c->first)
            c->res->hash_entries++;
        if (named ? !in_window(c, id) : !c->first)
            continue; /* checked in its own window; a malformed one in the first */
        bool ok = false, stale = false;
        if (named) {
            /* A freed chunk's entry (invariant 2): no chunk has its id any more, and ids
             * are never reused, so look-ups take it as absent; the sweep drops it. The
             * window's table knows every live chunk: asking it first keeps the iterator
             * from seeking into runs of deleted chunk entries, which it would step
             * through one by one (a check after a 2 GiB overwrite took minutes). */
            struct ck_chunk *ch = tab_find(c, id);
            stale = !ch || ch->delta == CK_FREED;
            uint8_t ck[META_CHUNK_KEY_LEN];
            meta_key_chunk_encode(ck, id);
            size_t cvl;
            const void *cv;
            struct meta_chunk_rec r;
            ok = !stale && iter_at(chunks, ck, sizeof(ck), &cv, &cvl) &&
                 meta_chunk_rec_decode(cv, cvl, &r) == 0 && r.hash_alg == k[0] &&
                 r.hash_len == kl - 1 && memcmp(r.hash, k + 1, kl - 1) == 0;
        }
        if (stale) {
            c->res->hash_stale++;
            if (c->repair)
                meta_batch_delete(c->b, META_CF_HASH, k, kl);
        } else if (!ok) {
            finding(c,
                    "hash entry (alg %u) names chunk %" PRIu64 ", which is not live with that hash",
                    kl ? k[0] : 0, id);
            if (c->repair) {
                meta_batch_delete(c->b, META_CF_HASH, k, kl);
                c->res->repaired++;
            }
        }
        rc = tick(c);
    }
    return rc ? rc : meta_iter_status(it);
}

static void
pass_counters(struct ck *c, struct store_seg **segs, size_t nsegs, const struct store_seg *copies)
{
    struct store *st = c->st;
    struct store_counters *h = &c->cnt, *w = &c->want;
    if (h->chunks != w->chunks || h->shared != w->shared || h->raw_bytes != w->raw_bytes ||
        h->stored_bytes != w->stored_bytes || h->next_id < w->next_id) {
        finding(c,
                "counters: chunks %" PRIu64 "/%" PRIu64 " shared %" PRIu64 "/%" PRIu64
                " raw %" PRIu64 "/%" PRIu64 " stored %" PRIu64 "/%" PRIu64 " next id %" PRIu64
                "/%" PRIu64 " (recorded/recomputed)",
                h->chunks, w->chunks, h->shared, w->shared, h->raw_bytes, w->raw_bytes,
                h->stored_bytes, w->stored_bytes, h->next_id, w->next_id);
        if (c->repair) {
            w->next_id = h->next_id > w->next_id ? h->next_id : w->next_id;
            pthread_mutex_lock(&st->append_lock); /* ids handed out early stay taken */
            if (w->next_id < st->id_next)
                w->next_id = st->id_next;
            __atomic_store_n(&st->id_next, w->next_id, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&st->append_lock);
            store__counters_put(st, c->b, w);
            st->cnt = *w;
            c->res->repaired++;
        }
    }
    for (size_t i = 0; i < nsegs; i++) {
        struct seg_sum *ss = segsum(c, copies[i].id);
        if (ss && ss->live != copies[i].live) {
            finding(c, "seg %" PRIu32 ": %" PRIu64 " live bytes recorded, %" PRIu64 " recomputed",
                    copies[i].id, copies[i].live, ss->live);
            if (c->repair && segs) {
                uint64_t total = segs[i]->live + segs[i]->dead;
                segs[i]->live = ss->live;
                store__seg_set_dead(segs[i], total > ss->live ? total - ss->live : 0);
                store__seg_put_meta(st, c->b, segs[i]);
                c->res->repaired++;
            }
        }
    }
    /* Recorded per-export counts from the same snapshot; an export with a count but no map
     * entry left is counted as 0 (exp_slot adds it). */
    size_t plen = strlen(STORE_META_EXPORT);
    for (meta_iter_seek(c->meta_it, STORE_META_EXPORT, plen); meta_iter_valid(c->meta_it);
         meta_iter_next(c->meta_it)) {
        size_t kl, vl;
        const uint8_t *k = meta_iter_key(c->meta_it, &kl);
        const uint8_t *v = meta_iter_value(c->meta_it, &vl);
        uint32_t id;
        if (kl < plen || memcmp(k, STORE_META_EXPORT, plen))
            break;
        if (meta_key_export_decode(k + plen, kl - plen, &id) || vl != 8)
            continue;
        uint64_t rec = 0;
        for (int i = 0; i < 8; i++)
            rec = rec << 8 | v[i];
        struct ck_export *x = exp_slot(c, id);
        if (x)
            x->recorded = rec + 1; /* +1: "seen"; 0 means no recorded count */
    }
    for (size_t i = 0; i < c->nexp; i++) {
        uint64_t have = c->exp[i].recorded ? c->exp[i].recorded - 1 : 0;
        if (have != c->exp[i].mapped) {
            finding(c,
                    "export %" PRIu32 ": %" PRIu64 " mapped chunks recorded, %" PRIu64 " counted",
                    c->exp[i].export_id, have, c->exp[i].mapped);
            if (c->repair) {
                store__export_put(c->b, c->exp[i].export_id, c->exp[i].mapped);
                store__export_count_set(st, c->exp[i].export_id, c->exp[i].mapped);
                c->res->repaired++;
            }
        }
    }
}

int
store_check(struct store *st, bool repair, store_progress_fn progress, store_finding_fn finding_fn,
            void *arg, struct store_check_result *out)
{
    struct store_check_result res = {0};
    struct ck c = {.st = st,
                   .repair = repair && !st->opt.read_only,
                   .progress = progress,
                   .finding = finding_fn,
                   .arg = arg,
                   .res = &res};
    if (repair && st->opt.read_only)
        return -EROFS;
    struct meta_iter *it[5] = {0};
    struct store_seg *copies = NULL;
    int rc = -ENOMEM;
    c.b = meta_batch_new();
    pthread_mutex_lock(&st->commit_lock);
    /* Journaled refcounts into the chunk entries first (refs.c): the passes read entries. */
    if (c.b && !st->opt.read_only && (rc = store__refs_fold(st)) != 0) {
        if (!c.repair)
            pthread_mutex_unlock(&st->commit_lock);
        goto out;
    }
    /* One consistent view: iterators and in-memory counters taken under the same lock. */
    it[0] = meta_iter_new(st->meta, META_CF_CHUNK);
    it[1] = meta_iter_new(st->meta, META_CF_MAP);
    it[2] = meta_iter_new(st->meta, META_CF_HASH);
    it[3] = meta_iter_new(st->meta, META_CF_CHUNK);
    it[4] = meta_iter_new(st->meta, META_CF_META);
    c.meta_it = it[4];
    c.cnt = st->cnt;
    size_t nsegs = st->nsegs;
    copies = calloc(nsegs + 1, sizeof(*copies));
    c.segsum = calloc(nsegs + 1, sizeof(*c.segsum));
    if (copies && c.segsum) {
        for (size_t i = 0; i < nsegs; i++) {
            copies[i].id = st->segs[i]->id; /* only the fields commit_lock guards */
            copies[i].live = st->segs[i]->live;
            c.segsum[i].id = st->segs[i]->id;
            c.segsum[i].size = store__seg_size(st->segs[i]);
        }
        c.nsegsum = nsegs;
    }
    if (!c.repair)
        pthread_mutex_unlock(&st->commit_lock);
    if (!c.b || !copies || !c.segsum || !it[0] || !it[1] || !it[2] || !it[3] || !it[4])
        goto out;
    /* One window of chunk ids after another; the chunk iterator goes on from where the
     * last window stopped. */
    meta_iter_seek_first(it[0]);
    rc = 0;
    for (c.lo = 0, c.first = true; rc == 0; c.lo = c.hi, c.first = false) {
        rc = pass_chunks(&c, it[0]);
        if (rc == 0)
            rc = pass_map(&c, it[1]);
        if (rc == 0)
            rc = pass_refs(&c, it[3]);
        if (rc == 0)
            rc = pass_hash(&c, it[2], it[3]);
        if (c.hi == UINT64_MAX)
            break;
    }
    if (rc == 0)
        pass_counters(&c, c.repair ? st->segs : NULL, nsegs, copies);
    if (rc == 0 && c.repair && meta_batch_count(c.b)) {
        store__ccache_drop_all(st); /* repairs rewrite chunk entries behind the transactions */
        rc = meta_batch_commit(st->meta, c.b, false);
        store__entries_rewritten(st);
        store__loc_clear(st); /* after the batch: fills that read the old entries are refused */
        if (rc == 0)
            rc = meta_sync(st->meta);
    }
    log_info("store: check: %" PRIu64 " chunks, %" PRIu64 " map, %" PRIu64 " hash entries: %" PRIu64
             " problems, %" PRIu64 " repaired",
             res.chunks, res.map_entries, res.hash_entries, res.problems, res.repaired);
out:
    if (c.repair)
        pthread_mutex_unlock(&st->commit_lock);
    for (int i = 0; i < 5; i++)
        meta_iter_free(it[i]);
    meta_batch_free(c.b);
    free(copies);
    free(c.segsum);
    free(c.tab);
    free(c.exp);
    if (out)
        *out = res;
    return rc;
}
