/* write.c: the write path — a request's chunks become map entries in ONE store transaction.
 *
 *   1. split [off, off+len) on chunk boundaries; a partial chunk is read (or taken as zeros
 *      when unmapped) and overlaid: read-modify-write, which still deduplicates;
 *   2. zero detection first (cheap, and half of a typical image): a zero chunk is unmapped,
 *      never stored;
 *   3. hash every other chunk (a large request's on several cores: hashpool.c), find
 *      duplicates within the request, read the chunks' current map entries and look the
 *      hashes up in the index, all BEFORE the transaction, which holds the store's commit
 *      lock (every writer waits for it, so it must hold no point read it can avoid);
 *   3d. append the records of the chunks expected to be new (early misses, or every chunk
 *      with dedup off) to the store, still outside the commit lock: the one copy of every
 *      unique byte into the page cache is then no writer's wait, and comes from buffers
 *      that were just hashed (store_append_early);
 *   4. in the transaction, per chunk: duplicate of an earlier chunk of the request, else
 *      the index answer (an early miss is re-asked only if a hash with the same head was
 *      staged since; an early hit only if its chunk was freed since); a hit is shared
 *      after (verify:) a byte comparison, a miss takes its early record (or is appended
 *      now) and its hash is staged for the index; an early record left unused is dead
 *      bytes; then map_set with the early map value;
 *   5. commit once (one RocksDB batch: invariant 3), then publish the staged index entries
 *      (invariant 2: never before their chunk is committed).
 * One allocation per request holds every per-chunk array and scratch buffer: no per-chunk
 * malloc or syscall beyond the store's own appends.
 * Knows nothing of NBD; the caller holds the chunks' range lock. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "store/store.h"
#include "util/crc32c.h"
#include "util/hash.h"
#include "util/log.h"

struct wchunk {
    const uint8_t *data;   /* chunk_size bytes: the caller's buffer or scratch; NULL if zero */
    uint64_t idx;          /* chunk index in the export */
    uint64_t chunk_id;     /* resolved in the transaction; 0 = unmapped */
    uint32_t client_bytes; /* bytes of the request that land in this chunk */
    int32_t dup_of;        /* earlier chunk of this request with the same hash, or -1 */
    int32_t early;         /* its record appended early: index in wreq.nc, or -1 */
    bool zero;
    int8_t pre;      /* index look-up made before the transaction: PRE_* */
    int8_t pre_same; /* PRE_HIT with verify: pre_id's bytes compared equal (1), differ (-1),
                        not compared (0) */
    uint64_t pre_id; /* PRE_HIT: the chunk found */
    uint64_t old_id; /* the chunk mapped here before this request (0: none) */
    struct store_chunk_pre old_pre; /* old_id's entry, read before the transaction */
    uint32_t crc; /* CRC32C of data, for the store's record: computed only for a chunk
                     that gets a record (pick_early, or add_new in the transaction) */
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
};

/* The settings one request runs under (settings_lock is held for reading meanwhile). */
struct wpolicy {
    struct index *ix;
    enum dedupd_hash_alg alg; /* NONE: dedup off for this request */
    size_t hlen;
    bool verify;  /* byte-compare before sharing (invariant 6) */
    bool trusted; /* an entry names its hash's chunk or a gone one (persistent back-end) */
};

/* The chunks a group's requests staged as new so far in its transaction, by hash: a
 * later request of the group shares them (the index sees them only after the commit).
 * Open addressing, at least twice as many slots as the group has chunks. */
struct wgroup {
    struct wslot {
        struct wreq *w; /* NULL: empty */
        uint32_t i;     /* chunk of w */
    } * slots;
    uint32_t mask;
};

/* Look-ups made before the transaction (outside the commit lock). */
enum { PRE_NONE, PRE_MISS, PRE_HIT };

struct wreq {
    struct engine *e;
    struct engine_xstate *xs;
    uint32_t cs;
    struct wpolicy p;
    struct wchunk *c;
    uint32_t n;
    int32_t *dup_table; /* open addressing over hashes, dup_mask + 1 slots */
    uint32_t dup_mask;
    uint8_t *verify_buf;        /* cs bytes when p.verify */
    struct store_new_chunk *nc; /* records appended early (step 3d), nnc of them */
    uint32_t nnc;
    struct index_batch ib;
    _Atomic int hash_err;          /* from any hashing thread */
    uint64_t seen;                 /* e->stage_done before the early index look-ups */
    struct engine_commitq_item qi; /* its place in the commit queue */
    struct wgroup *grp;            /* the group it commits in, NULL when alone */
    /* counted after a successful commit */
    struct wcounts {
        uint64_t hits, misses, compares, mismatches;
    } cnt;
    uint64_t zero_bytes;
    uint64_t rmw; /* partial chunks read-modify-written */
};

static bool
is_zero(const uint8_t *p, size_t n)
{
    /* Data that is not zero almost always shows it in its first bytes. Past those, compare
     * the buffer with itself shifted by 16: equal and a zero head means all zero, and
     * memcmp is vectorized where a byte loop is not. */
    static const uint8_t z[16];
    if (memcmp(p, z, sizeof(z)))
        return false;
    return memcmp(p, p + sizeof(z), n - sizeof(z)) == 0;
}

/* Reads chunk idx's current bytes into out (zeros when unmapped): the R of RMW. */
static int
read_current(struct engine *e, struct engine_xstate *xs, uint64_t idx, uint8_t *out, uint64_t *idp)
{
    uint32_t cs = xs->rec.chunk_size;
    uint64_t id;
    int rc = store_map_get(e->st, xs->id, idx, &id);
    *idp = 0;
    if (rc == -ENOENT) {
        memset(out, 0, cs);
        return 0;
    }
    *idp = id;
    if (rc < 0)
        return rc;
    ssize_t n = store_chunk_read(e->st, id, out, cs);
    if (n < 0)
        return (int) n; /* logged by the store with segment and offset */
    if ((uint64_t) n != cs) {
        log_err("engine: export %s chunk %" PRIu64 ": chunk id %" PRIu64 " holds %zd bytes, "
                "expected %u",
                xs->rec.name, idx, id, n, cs);
        return -EIO;
    }
    return 0;
}

/* Below this, waking a helper thread costs more than it saves. */
#ifndef HASH_PARALLEL_MIN_BYTES
#define HASH_PARALLEL_MIN_BYTES (64u << 10)
#endif

/* Step 3a for chunk i (any hashing thread). */
static void
hash_one(void *arg, uint32_t i)
{
    struct wreq *w = arg;
    struct wchunk *c = &w->c[i];
    if (c->zero)
        return;
    int rc = w->e->hash_fn(w->p.alg, c->data, w->cs, c->hash);
    if (rc < 0)
        atomic_store(&w->hash_err, rc);
}

/* Step 3a for chunks 2i and 2i + 1: both at once when both are hashed (hash_compute2 runs
 * two SHA-256 streams side by side, 1.4–1.5 times the speed of one after the other). */
static void
hash_pair(void *arg, uint32_t i)
{
    struct wreq *w = arg;
    struct wchunk *a = &w->c[2 * i], *b = 2 * i + 1 < w->n ? &w->c[2 * i + 1] : NULL;
    if (b && !a->zero && !b->zero && w->e->hash2_fn) {
        int rc = w->e->hash2_fn(w->p.alg, a->data, b->data, w->cs, a->hash, b->hash);
        if (rc < 0)
            atomic_store(&w->hash_err, rc);
        return;
    }
    hash_one(arg, 2 * i);
    if (b)
        hash_one(arg, 2 * i + 1);
}

/* Chunks of the request not covered whole (0, 1 or 2): each needs an RMW buffer. */
static uint32_t
count_partial(uint64_t off, uint64_t len, uint32_t cs, uint32_t n)
{
    uint64_t end = off + len, first_start = off / cs * cs;
    uint32_t p = (off != first_start || end - first_start < cs);
    if (n > 1 && end % cs)
        p++;
    return p;
}

static uint64_t
hash_head(const uint8_t *h)
{
    uint64_t v;
    memcpy(&v, h, sizeof(v));
    return v;
}

static uint32_t
dup_slot(const struct wreq *w, uint64_t head)
{
    return (uint32_t) (head * 0x9E3779B97F4A7C15ULL >> 32) & w->dup_mask;
}

/* Step 3b: marks each chunk whose hash an earlier chunk of the request already has. */
static void
find_request_dups(struct wreq *w)
{
    memset(w->dup_table, 0xff, (size_t) (w->dup_mask + 1) * sizeof(int32_t));
    for (uint32_t i = 0; i < w->n; i++) {
        struct wchunk *c = &w->c[i];
        if (c->zero)
            continue;
        uint32_t s = dup_slot(w, hash_head(c->hash));
        for (;; s = (s + 1) & w->dup_mask) {
            int32_t j = w->dup_table[s];
            if (j < 0) {
                w->dup_table[s] = (int32_t) i;
                break;
            }
            if (!memcmp(w->c[j].hash, c->hash, w->p.hlen)) {
                c->dup_of = j;
                break;
            }
        }
    }
}

/* invariant 6: 1 when data equals chunk id's stored bytes, 0 when not, -errno when the
 * chunk cannot be read back. From the verify cache when it holds the chunk, else read
 * (CRC-checked by the store) into verify_buf and remembered there. */
static int
same_as_stored(struct wreq *w, uint64_t id, const uint8_t *data)
{
    int r = engine__vcache_compare(w->e->vcache, id, data, w->cs);
    if (r >= 0)
        return r;
    ssize_t n = store_chunk_read(w->e->st, id, w->verify_buf, w->cs);
    if (n < 0)
        return (int) n;
    if ((uint64_t) n != w->cs)
        return 0;
    engine__vcache_put(w->e->vcache, id, w->verify_buf, w->cs);
    return memcmp(w->verify_buf, data, w->cs) == 0;
}

/* invariant 6 for an early index hit, outside the commit lock: compare c's bytes with those
 * of the chunk the index named. A chunk id is never reused and its bytes never change, so
 * the answer still holds in the transaction if the look-up there names the same chunk
 * (confirm_hit); a read that fails leaves it to be compared there. Reading and comparing
 * under the lock made xxh3 + verify slower than SHA-256 on duplicate data. */
static void
preverify(struct wreq *w, struct wchunk *c)
{
    int same = same_as_stored(w, c->pre_id, c->data);
    if (same < 0)
        return;
    w->cnt.compares++;
    c->pre_same = same ? 1 : -1;
    w->cnt.mismatches += !same;
}

/* The entries of the chunks this request unmaps, whose refcounts the transaction drops (a
 * random overwrite frees one per chunk): read here rather than under the commit lock. Not
 * for a chunk that will most likely stay mapped (its own hash found again). A failed read
 * leaves the transaction to read it and report. */
static void
preload_old(struct wreq *w)
{
    for (uint32_t i = 0; i < w->n; i++) {
        struct wchunk *c = &w->c[i];
        if (c->old_id != 0 && !(c->pre == PRE_HIT && c->pre_id == c->old_id))
            (void) store_chunk_preload(w->e->st, c->old_id, &c->old_pre);
    }
}

/* Step 3c, still outside the commit lock: every chunk's current map entry (stable: the
 * caller holds the range lock exclusively, and only range-locked writers change an open
 * export's map) and the index look-up of every chunk that needs one. The commit lock
 * serializes all writers, so these point reads there would cost every request's time. */
static int
prefetch(struct wreq *w)
{
    for (uint32_t i = 0; i < w->n; i++) {
        struct wchunk *c = &w->c[i];
        if (c->old_id != UINT64_MAX)
            continue; /* read for RMW */
        int rc = store_map_get(w->e->st, w->xs->id, c->idx, &c->old_id);
        if (rc == -ENOENT)
            c->old_id = 0;
        else if (rc < 0)
            return rc;
    }
    if (w->p.alg != DEDUPD_HASH_NONE) {
        /* Before the look-ups: entries staged from here on are re-checked in the
         * transaction. */
        w->seen = atomic_load_explicit(&w->e->stage_done, memory_order_acquire);
        for (uint32_t i = 0; i < w->n; i++) {
            struct wchunk *c = &w->c[i];
            if (c->zero || c->dup_of >= 0)
                continue;
            int rc = index_lookup(w->p.ix, w->p.alg, c->hash, w->p.hlen, &c->pre_id);
            c->pre = rc == 0 ? PRE_HIT : rc == -ENOENT ? PRE_MISS : PRE_NONE;
            if (c->pre == PRE_HIT && w->p.verify)
                preverify(w, c);
        }
    }
    preload_old(w); /* after the look-ups: it skips chunks found again */
    return 0;
}

/* Step 3d, first half: picks the chunks that will most likely be new (w->nc). A chunk found
 * shared in the transaction after all leaves its record as dead bytes; the usual case,
 * unique data, pays nothing for the guess. */
static void
pick_early(struct wreq *w)
{
    const bool dedup = w->p.alg != DEDUPD_HASH_NONE;
    for (uint32_t i = 0; i < w->n; i++) {
        struct wchunk *c = &w->c[i];
        if (c->zero || c->dup_of >= 0 || (dedup && c->pre != PRE_MISS && c->pre_same >= 0))
            continue;
        /* Here, outside the commit lock, and only for chunks that get a record: on
         * duplicate data computing it with every hash was 3% of the server's CPU. */
        c->crc = crc32c(0, c->data, w->cs);
        c->early = (int32_t) w->nnc;
        w->nc[w->nnc++] = (struct store_new_chunk){
            .buf = c->data,
            .len = w->cs,
            .crc = c->crc,
            .hash_alg = (uint8_t) w->p.alg,
            .hash_len = (uint8_t) w->p.hlen,
            .hash = dedup ? c->hash : NULL,
        };
    }
}

/* Step 3d, second half: appends w->nc to the store (one write). */
static int
append_early(struct wreq *w)
{
    if (w->nnc == 0)
        return 0;
    int rc = store_append_early(w->e->st, w->nc, w->nnc);
    if (rc < 0) {
        log_err_limited("engine: export %s chunks %" PRIu64 "+%u: append failed: %s",
                        w->xs->rec.name, w->c[0].idx, w->n, strerror(-rc));
        w->nnc = 0; /* the request fails: nothing of it was appended */
    }
    return rc;
}

/* In the transaction (commit lock held): an early miss stays a miss unless a transaction
 * staged an entry with the same hash head since the look-up; then look it up again. */
static void
recheck_misses(struct wreq *w, uint64_t seq)
{
    const struct engine *e = w->e;
    if (w->p.alg == DEDUPD_HASH_NONE || seq == w->seen)
        return;
    if (seq - w->seen > ENGINE_STAGE_RING) { /* the ring lost some: trust none */
        for (uint32_t i = 0; i < w->n; i++)
            if (w->c[i].pre == PRE_MISS)
                w->c[i].pre = PRE_NONE;
        return;
    }
    for (uint64_t j = w->seen; j != seq; j++) {
        uint64_t head = e->stage_ring[j & (ENGINE_STAGE_RING - 1)];
        for (uint32_t s = dup_slot(w, head); w->dup_table[s] >= 0; s = (s + 1) & w->dup_mask) {
            struct wchunk *c = &w->c[w->dup_table[s]];
            if (hash_head(c->hash) == head && c->pre == PRE_MISS)
                c->pre = PRE_NONE;
        }
    }
}

static int
group_init(struct wgroup *g, uint64_t chunks)
{
    uint64_t size = 2;
    while (size < 2 * chunks)
        size <<= 1;
    g->slots = calloc(size, sizeof(*g->slots));
    g->mask = (uint32_t) (size - 1);
    return g->slots ? 0 : -ENOMEM;
}

/* A chunk an earlier request of w's group staged with c's hash (same algorithm and chunk
 * size), or NULL. */
static const struct wchunk *
group_find(const struct wreq *w, const struct wchunk *c)
{
    const struct wgroup *g = w->grp;
    for (uint32_t s = (uint32_t) hash_head(c->hash) & g->mask; g->slots[s].w;
         s = (s + 1) & g->mask) {
        const struct wreq *o = g->slots[s].w;
        const struct wchunk *oc = &o->c[g->slots[s].i];
        if (o->p.alg == w->p.alg && o->cs == w->cs && !memcmp(oc->hash, c->hash, w->p.hlen))
            return oc;
    }
    return NULL;
}

static void
group_add(struct wreq *w, const struct wchunk *c)
{
    struct wgroup *g = w->grp;
    uint32_t s = (uint32_t) hash_head(c->hash) & g->mask;
    while (g->slots[s].w)
        s = (s + 1) & g->mask;
    g->slots[s].w = w;
    g->slots[s].i = (uint32_t) (c - w->c);
}

/* c has the bytes (verify: compared) of d, an earlier chunk in this transaction: share it. */
static bool
share_earlier(struct wreq *w, struct wchunk *c, const struct wchunk *d)
{
    if (w->p.verify) {
        w->cnt.compares++;
        if (memcmp(d->data, c->data, w->cs)) {
            w->cnt.mismatches++;
            return false;
        }
    }
    c->chunk_id = d->chunk_id;
    w->cnt.hits++;
    return true;
}

/* The index look-up for c in the transaction, using the early one where it still holds. */
static int
lookup_in_txn(struct wreq *w, struct store_txn *tx, const struct wchunk *c, uint64_t *cand)
{
    const struct wpolicy *p = &w->p;
    if (c->pre == PRE_MISS)
        return -ENOENT;
    if (c->pre == PRE_HIT) {
        /* Chunk ids are never reused: if it still exists it is the chunk the entry named,
         * with this hash. Gone (freed meanwhile): ask the index again. */
        int rc = store_txn_chunk_hold(tx, c->pre_id);
        if (rc == 0)
            *cand = c->pre_id;
        if (rc != -ENOENT)
            return rc;
    }
    int rc = index_lookup(p->ix, p->alg, c->hash, p->hlen, cand);
    if (rc == 0 && p->trusted) {
        /* The entry of a freed chunk stays until the sweep (invariant 2): no chunk under
         * its id, so the hash is absent, and the new chunk's entry will replace it. Held
         * here, the chunk is read once: sharing it needs its entry anyway. The early id,
         * found gone just above, is not read a second time. */
        rc = c->pre == PRE_HIT && *cand == c->pre_id ? -ENOENT : store_txn_chunk_hold(tx, *cand);
    }
    return rc;
}

/* An index hit on cand for chunk c: may it be shared? Stale memory entries are dropped. */
static int
confirm_hit(struct wreq *w, struct store_txn *tx, const struct wchunk *c, uint64_t cand,
            bool *share)
{
    *share = false;
    if (!w->p.trusted) {
        /* The memory back-end may name a chunk freed behind its back, and keys on a 16-byte
         * prefix: the chunk record's full hash settles both. */
        struct store_chunk_info info;
        int rc = store_txn_chunk_get(tx, cand, &info);
        if (rc < 0 && rc != -ENOENT)
            return rc;
        if (rc == -ENOENT || info.hash_alg != w->p.alg || info.hash_len != w->p.hlen ||
            info.raw_len != w->cs || memcmp(info.hash, c->hash, w->p.hlen)) {
            index_remove(w->p.ix, &w->ib, w->p.alg, c->hash, w->p.hlen, cand);
            return -ENOENT;
        }
    }
    if (!w->p.verify) {
        *share = true;
        return 0;
    }
    /* invariant 6: equal hashes are not proof of equal bytes for this hash/setting. */
    if (c->pre_same != 0 && cand == c->pre_id) { /* compared before the transaction */
        *share = c->pre_same > 0;
        return 0;
    }
    int same = same_as_stored(w, cand, c->data);
    if (same < 0) {
        /* Never share with a chunk we cannot read back; store this one apart. */
        log_warn("engine: export %s: verify read of chunk id %" PRIu64 " failed: %s",
                 w->xs->rec.name, cand, strerror(-same));
        return 0;
    }
    w->cnt.compares++;
    *share = same;
    w->cnt.mismatches += !same;
    return 0;
}

/* c becomes a new chunk: its early record, else one appended in the transaction. */
static int
add_new(struct wreq *w, struct store_txn *tx, struct wchunk *c)
{
    if (c->early >= 0) {
        const struct store_new_chunk *nc = &w->nc[c->early];
        c->chunk_id = nc->id;
        return store_txn_add_early(tx, nc);
    }
    if (w->p.alg == DEDUPD_HASH_NONE)
        return store_txn_add_chunk(tx, 0, NULL, 0, c->data, w->cs, &c->chunk_id);
    /* Rare (an early hit that no longer holds, a failed look-up): the CRC was not needed
     * before. c->data lives until the request ends, so the store may write it from there. */
    c->crc = crc32c(0, c->data, w->cs);
    return store_txn_add_chunk_ref(tx, (uint8_t) w->p.alg, c->hash, w->p.hlen, c->data, w->cs,
                                   c->crc, &c->chunk_id);
}

/* Step 4 for one non-zero chunk: sets c->chunk_id to a shared or a new chunk. */
static int
resolve_chunk(struct wreq *w, struct store_txn *tx, struct wchunk *c)
{
    const struct wpolicy *p = &w->p;
    if (p->alg == DEDUPD_HASH_NONE) /* dedup off: unique, unhashed, never shared */
        return add_new(w, tx, c);

    bool claimed = false; /* an index entry (or an earlier chunk here) owns this hash */
    if (c->dup_of >= 0) {
        claimed = true;
        if (share_earlier(w, c, &w->c[c->dup_of]))
            return 0;
    }
    /* Staged by an earlier request of the group: the re-check above flagged the hash. */
    const struct wchunk *d = !claimed && c->pre == PRE_NONE && w->grp ? group_find(w, c) : NULL;
    if (d) {
        claimed = true;
        if (share_earlier(w, c, d))
            return 0;
    }
    uint64_t cand;
    int rc = lookup_in_txn(w, tx, c, &cand);
    if (rc == 0) {
        bool share;
        rc = confirm_hit(w, tx, c, cand, &share);
        if (rc == 0 && share) {
            c->chunk_id = cand;
            w->cnt.hits++;
            return 0;
        }
        if (rc == 0)
            claimed = true; /* a verified collision: the entry keeps naming the first chunk */
    }
    if (rc < 0 && rc != -ENOENT)
        return rc;
    w->cnt.misses++;
    rc = add_new(w, tx, c);
    if (rc == 0 && !claimed) {
        rc = index_stage(p->ix, &w->ib, (uint8_t) p->alg, c->hash, p->hlen, c->chunk_id);
        struct engine *e = w->e;
        e->stage_ring[e->stage_seq++ & (ENGINE_STAGE_RING - 1)] = hash_head(c->hash);
        if (w->grp)
            group_add(w, c);
    }
    return rc;
}

/* Step 4 for one request, inside the (group's) transaction. */
static int
resolve_request(struct wreq *w, struct store_txn *tx)
{
    index_batch_reset(&w->ib, store_txn_batch(tx));
    /* Earlier requests of a group staged too: their hashes are re-checked like any other. */
    recheck_misses(w, w->e->stage_seq);
    int rc = 0;
    for (uint32_t i = 0; i < w->n && rc == 0; i++) {
        struct wchunk *c = &w->c[i];
        if (!c->zero)
            rc = resolve_chunk(w, tx, c);
        if (rc == 0)
            rc = store_txn_map_set_known(tx, w->xs->id, c->idx, c->old_id, &c->old_pre,
                                         c->zero ? 0 : c->chunk_id);
    }
    for (uint32_t i = 0; i < w->n && rc == 0; i++) { /* shared after all: dead bytes */
        const struct wchunk *c = &w->c[i];
        if (c->early >= 0 && c->chunk_id != w->nc[c->early].id)
            rc = store_txn_drop_early(tx, &w->nc[c->early]);
    }
    return rc;
}

/* Steps 4 and 5 for the n requests of g (one, or a group whose w->grp is set) in ONE store
 * transaction. Logs failures of a lone request only: a failed group is retried alone. */
static int
run_txn(struct wreq **g, size_t n)
{
    struct engine *e = g[0]->e;
    struct store_txn *tx;
    int rc = store_txn_begin(e->st, &tx);
    if (rc < 0)
        return rc;
    /* Every transaction that staged before this one has committed or failed. */
    atomic_store_explicit(&e->stage_done, e->stage_seq, memory_order_release);
    size_t i = 0;
    for (; i < n && rc == 0; i++)
        rc = resolve_request(g[i], tx);
    if (rc < 0) {
        store_txn_abort(tx);
        if (n == 1)
            log_err("engine: export %s chunks %" PRIu64 "+%u: write failed: %s", g[0]->xs->rec.name,
                    g[0]->c[0].idx, g[0]->n, strerror(-rc));
        return rc;
    }
    struct engine_freed_ctx fc = {.ix = g[0]->p.ix, .ib = &g[0]->ib};
    rc = store_txn_commit(tx, engine__on_freed, &fc);
    if (rc < 0) {
        if (n == 1)
            log_err_limited("engine: export %s chunks %" PRIu64 "+%u: commit failed: %s",
                            g[0]->xs->rec.name, g[0]->c[0].idx, g[0]->n, strerror(-rc));
        return rc;
    }
    for (i = 0; i < n; i++) /* invariant 2: only now that the chunks are committed */
        index_publish(g[i]->p.ix, &g[i]->ib);
    return 0;
}

void
engine__commit_writes(void *arg, struct engine_commitq_item **items, size_t n)
{
    (void) arg;
    struct wreq *g[ENGINE_GROUP_MAX_ITEMS];
    uint64_t chunks = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = (struct wreq *) ((char *) items[i] - offsetof(struct wreq, qi));
        g[i]->grp = NULL;
        chunks += g[i]->n;
    }
    struct wgroup grp;
    if (n > 1 && group_init(&grp, chunks) == 0) {
        struct wcounts before[ENGINE_GROUP_MAX_ITEMS]; /* restored for a retry */
        for (size_t i = 0; i < n; i++) {
            g[i]->grp = &grp;
            before[i] = g[i]->cnt;
        }
        int rc = run_txn(g, n);
        free(grp.slots);
        for (size_t i = 0; i < n; i++) {
            g[i]->grp = NULL;
            items[i]->rc = rc;
        }
        if (rc == 0)
            return;
        for (size_t i = 0; i < n; i++)
            g[i]->cnt = before[i];
        log_debug("engine: a group of %zu write requests failed (%s); retrying one at a time", n,
                  strerror(-rc));
        /* Nothing of the group committed: one at a time, so that an error fails only the
         * request it belongs to. */
    }
    for (size_t i = 0; i < n; i++)
        items[i]->rc = run_txn(&g[i], 1);
}

static void
take_policy(struct engine *e, struct engine_xstate *xs, struct wpolicy *p)
{
    memset(p, 0, sizeof(*p));
    p->ix = e->ix;
    if (e->cfg.enabled && atomic_load(&xs->dedup)) {
        p->alg = e->cfg.hash_alg;
        p->hlen = hash_len(p->alg);
        p->verify = e->cfg.verify || hash_needs_verify(p->alg);
        p->trusted = index_persistent(e->ix);
    }
}

/* Steps 1 to 3 of one request: *out is ready for its transaction (engine__commitq_run on
 * (*out)->qi), then write_finish. Caller holds the chunks' range lock exclusively and
 * settings_lock for reading (until write_finish). The records of step 3d are picked, not
 * appended: the caller appends them (append_early, or together with other requests'
 * records in a batch). On failure nothing is left to undo. */
static int
write_prepare(struct engine *e, struct engine_xstate *xs, uint64_t off, uint64_t len,
              const uint8_t *buf, struct wreq **out)
{
    const uint32_t cs = xs->rec.chunk_size;
    *out = NULL;
    if (len == 0 || (off + len - 1) / cs - off / cs >= ENGINE_MAX_REQ_CHUNKS)
        return -EINVAL;
    const uint64_t first = off / cs, last = (off + len - 1) / cs;
    const uint32_t n = (uint32_t) (last - first + 1);

    struct wpolicy p;
    take_policy(e, xs, &p);
    uint32_t partial = count_partial(off, len, cs, n);
    uint32_t tsize = 1;
    while (tsize < 2 * n)
        tsize <<= 1;

    /* One block: the request, its chunks, staged index entries, duplicate table, RMW and
     * verify scratch. */
    size_t sz_w = (sizeof(struct wreq) + 63) & ~(size_t) 63;
    size_t sz_c = (size_t) n * sizeof(struct wchunk);
    size_t sz_s = (size_t) n * sizeof(struct index_staged);
    size_t sz_t = (size_t) tsize * sizeof(int32_t);
    size_t sz_n = (size_t) n * sizeof(struct store_new_chunk);
    size_t sz_b = (size_t) (partial + p.verify) * cs;
    uint8_t *blk = malloc(sz_w + sz_c + sz_s + sz_t + sz_n + sz_b);
    if (!blk)
        return -ENOMEM;
    struct wreq *w = (struct wreq *) blk;
    *w = (struct wreq){.e = e, .xs = xs, .cs = cs, .n = n, .p = p};
    uint8_t *mem = blk + sz_w;
    int rc;
    w->c = (struct wchunk *) mem;
    index_batch_init(&w->ib);
    /* Borrowed array sized for one entry per chunk: staging never grows it. */
    w->ib.staged = (struct index_staged *) (mem + sz_c);
    w->ib.cap = n;
    w->dup_table = (int32_t *) (mem + sz_c + sz_s);
    w->dup_mask = tsize - 1;
    w->nc = (struct store_new_chunk *) (mem + sz_c + sz_s + sz_t);
    uint8_t *scratch = mem + sz_c + sz_s + sz_t + sz_n;
    w->verify_buf = w->p.verify ? scratch + (size_t) partial * cs : NULL;

    /* Steps 1 and 2: split, RMW, zero detection. */
    for (uint32_t i = 0; i < n; i++) {
        struct wchunk *c = &w->c[i];
        uint64_t cstart = (first + i) * cs;
        uint64_t lo = off > cstart ? off : cstart;
        uint64_t hi = off + len < cstart + cs ? off + len : cstart + cs;
        c->idx = first + i;
        c->chunk_id = 0;
        c->client_bytes = (uint32_t) (hi - lo);
        c->dup_of = -1;
        c->early = -1;
        c->pre = PRE_NONE;
        c->pre_same = 0;
        c->old_id = UINT64_MAX; /* not read yet */
        c->old_pre.id = 0;
        if (hi - lo == cs) {
            c->data = buf ? buf + (lo - off) : NULL;
        } else {
            uint8_t *s = scratch;
            scratch += cs;
            rc = read_current(e, xs, c->idx, s, &c->old_id);
            if (rc < 0)
                goto out;
            if (buf)
                memcpy(s + (lo - cstart), buf + (lo - off), hi - lo);
            else
                memset(s + (lo - cstart), 0, hi - lo);
            c->data = s;
            w->rmw++;
        }
        c->zero = !c->data || is_zero(c->data, cs);
        if (c->zero)
            w->zero_bytes += c->client_bytes;
    }

    /* Step 3: hash outside the commit lock, on several cores for a large request. */
    if (w->p.alg != DEDUPD_HASH_NONE) {
        atomic_init(&w->hash_err, 0);
        /* Only when no other request is hashing: with several in flight the cores are
         * already busy, and splitting one request would only add hand-over costs. */
        bool alone = atomic_fetch_add(&e->hashing, 1) == 0;
        bool wide = alone && n > 1 && (uint64_t) n * cs >= HASH_PARALLEL_MIN_BYTES;
        engine__hashpool_run(wide ? e->hp : NULL, (n + 1) / 2, hash_pair, w);
        atomic_fetch_sub(&e->hashing, 1);
        rc = atomic_load(&w->hash_err);
        if (rc < 0)
            goto out;
        find_request_dups(w);
    }
    rc = prefetch(w);
    if (rc < 0)
        goto out;
    pick_early(w);

    w->qi.weight = w->n;
    *out = w;
    return 0;
out:
    free(blk);
    return rc;
}

/* After w's transaction ran with result rc (the commit queue's): counts a success, turns a
 * failure's early records into dead bytes, frees w. */
static void
write_finish(struct wreq *w, int rc, bool count_zero)
{
    struct engine *e = w->e;
    struct engine_xstate *xs = w->xs;
    if (rc == 0) {
        ENGINE_COUNT(e, xs, rmw_count, w->rmw);
        ENGINE_COUNT(e, xs, dedup_hits, w->cnt.hits);
        ENGINE_COUNT(e, xs, dedup_misses, w->cnt.misses);
        ENGINE_COUNT(e, xs, verify_compares, w->cnt.compares);
        ENGINE_COUNT(e, xs, verify_mismatches, w->cnt.mismatches);
        if (count_zero)
            ENGINE_COUNT(e, xs, zero_bytes, w->zero_bytes);
    } else if (w->nnc) { /* nothing of the request committed */
        store_early_discard(e->st, w->nc, w->nnc);
    }
    free(w);
}

int
engine__write_locked(struct engine *e, struct engine_xstate *xs, uint64_t off, uint64_t len,
                     const uint8_t *buf, bool count_zero)
{
    pthread_rwlock_rdlock(&e->settings_lock); /* in flight: finish under these settings */
    struct wreq *w;
    int rc = write_prepare(e, xs, off, len, buf, &w);
    if (rc == 0) {
        rc = append_early(w);
        if (rc == 0) /* steps 4 and 5, in a group with the requests ready at the same time */
            rc = engine__commitq_run(&e->commitq, &w->qi);
        write_finish(w, rc, count_zero);
    }
    pthread_rwlock_unlock(&e->settings_lock);
    return rc;
}

int
engine_write(struct engine_export *ex, uint64_t off, uint32_t len, const void *buf, unsigned flags)
{
    struct engine *e = ex->e;
    struct engine_xstate *xs = ex->xs;
    if (xs->rec.read_only)
        return -EROFS;
    if (!engine__range_ok(xs, off, len) || (len && !buf))
        return -EINVAL;
    if (len) {
        const uint32_t cs = xs->rec.chunk_size;
        struct engine_chunkrange r;
        engine__chunklock_acquire(&xs->lock, &r, off / cs, (off + len - 1) / cs, true);
        /* NBD payloads fit one transaction; a longer call is cut on chunk boundaries into
         * several (each atomic; together atomic to readers, who wait for the range). */
        const uint64_t slice = (uint64_t) (ENGINE_MAX_REQ_CHUNKS - 1) * cs;
        int rc = 0;
        for (uint64_t done = 0; rc == 0 && done < len;) {
            uint64_t pos = off + done;
            uint64_t n = slice - pos % cs;
            if (n > len - done)
                n = len - done;
            rc = engine__write_locked(e, xs, pos, n, (const uint8_t *) buf + done, true);
            done += n;
        }
        engine__chunklock_release(&xs->lock, &r);
        if (rc < 0)
            return rc;
        ENGINE_COUNT(e, xs, bytes_written, len);
    }
    /* invariant 4 through the store: segments, then the WAL. */
    return (flags & ENGINE_FUA) ? store_sync(e->st) : 0;
}

/* Step 3d for the prepared requests w[0..n) of a batch: their records in one write, not one
 * per request. If that fails, each request's own, so that a failure stays its own; a
 * request whose append fails is done (its result set, w[i] freed and NULL). */
static void
append_batch(struct engine *e, struct engine_req **reqs, struct wreq **w, size_t n)
{
    struct store_new_chunk all[ENGINE_BATCH_MAX * (ENGINE_BATCH_MAX_BYTES / DEDUPD_CHUNK_MIN + 1)];
    size_t tot = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i]) {
            memcpy(all + tot, w[i]->nc, w[i]->nnc * sizeof(*all));
            tot += w[i]->nnc;
        }
    if (tot && store_append_early(e->st, all, tot) == 0) {
        tot = 0;
        for (size_t i = 0; i < n; i++)
            if (w[i]) {
                memcpy(w[i]->nc, all + tot, w[i]->nnc * sizeof(*all));
                tot += w[i]->nnc;
            }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!w[i] || w[i]->nnc == 0)
            continue;
        int rc = append_early(w[i]);
        if (rc < 0) {
            reqs[i]->result = rc;
            write_finish(w[i], rc, true);
            w[i] = NULL;
        }
    }
}

void
engine__write_batch(struct engine_req **reqs, size_t n)
{
    struct engine_chunkrange r[ENGINE_BATCH_MAX];
    struct wreq *w[ENGINE_BATCH_MAX];
    struct engine_commitq_item *items[ENGINE_BATCH_MAX];
    bool locked[ENGINE_BATCH_MAX];
    struct engine *e = reqs[0]->ex->e;
    if (n > ENGINE_BATCH_MAX)
        n = ENGINE_BATCH_MAX; /* engine_submit_writes refuses more */

    /* Lock order: chunk ranges, then settings_lock. A range that anyone holds or waits for
     * (an earlier request of this batch included) is not waited for with others held: that
     * request runs after the batch, through engine_write, as do requests the batch path
     * does not take (engine_write reports their errors). */
    for (size_t i = 0; i < n; i++) {
        const struct engine_req *q = reqs[i];
        const struct engine_xstate *xs = q->ex->xs;
        const uint32_t cs = xs->rec.chunk_size;
        w[i] = NULL;
        locked[i] = q->ex->e == e && !xs->rec.read_only && q->len > 0 &&
                    q->len <= ENGINE_BATCH_MAX_BYTES && q->buf &&
                    engine__range_ok(xs, q->off, q->len) &&
                    engine__chunklock_try(&q->ex->xs->lock, &r[i], q->off / cs,
                                          (q->off + q->len - 1) / cs, true);
    }
    pthread_rwlock_rdlock(&e->settings_lock); /* in flight: finish under these settings */
    for (size_t i = 0; i < n; i++) {
        struct engine_req *q = reqs[i];
        if (locked[i])
            q->result = write_prepare(e, q->ex->xs, q->off, q->len, q->buf, &w[i]);
    }
    append_batch(e, reqs, w, n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i])
            items[k++] = &w[i]->qi;
    if (k)
        engine__commitq_run_many(&e->commitq, items, k);
    bool sync = false;
    for (size_t i = 0; i < n; i++) {
        struct engine_req *q = reqs[i];
        if (!w[i])
            continue;
        q->result = w[i]->qi.rc;
        write_finish(w[i], q->result, true);
        if (q->result == 0) {
            ENGINE_COUNT(e, q->ex->xs, bytes_written, q->len);
            sync |= (q->flags & ENGINE_FUA) != 0;
        }
    }
    pthread_rwlock_unlock(&e->settings_lock);
    for (size_t i = 0; i < n; i++)
        if (locked[i])
            engine__chunklock_release(&reqs[i]->ex->xs->lock, &r[i]);
    /* invariant 4 through the store, once for the FUA requests of the batch. */
    int src = sync ? store_sync(e->st) : 0;
    for (size_t i = 0; i < n; i++) {
        struct engine_req *q = reqs[i];
        if (!locked[i])
            q->result = engine_write(q->ex, q->off, (uint32_t) q->len, q->buf, q->flags);
        else if (q->result == 0 && (q->flags & ENGINE_FUA))
            q->result = src;
    }
}
