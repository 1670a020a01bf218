/* refs: the refcount journal — new refcounts of existing chunks, written as one `meta` entry
 * per commit and folded into their `chunk` entries later.
 *
 * Why: a duplicate write references the same hot chunks over and over. Writing each new
 * refcount into its `chunk` entry added one more version of that key to the `chunk`
 * memtable per commit: a skip-list insert at a random position, inside the commit lock,
 * for every hot chunk of every commit (~45% of the server's CPU in a 2 GiB duplicate
 * write). Instead a commit that changes the refcount of chunks that already existed (and
 * still exist after it) writes their new refcounts into ONE `meta` entry, "refs:" + be64
 * sequence number — consecutive keys, so the insert is an append — and this table keeps
 * them in memory. Every so often (STORE_REFS_FOLD_IDS chunks remembered,
 * STORE_REFS_FOLD_KEYS journal entries or STORE_REFS_FOLD_BYTES of them) a commit folds instead: it
 * writes the current refcount of every remembered chunk into its `chunk` entry and deletes the
 * journal entries, in its own batch, and the table empties.
 *
 * The rule that keeps refcounts exact: a chunk's refcount is the last journal value that
 * names it, else its entry's. Every writer of a `chunk` entry writes the current refcount
 * (a move by compaction reads it through store__chunk_load, which applies this table; check
 * folds before it reads; a folding commit writes them all), so the rule holds in every
 * committed state. Recovery loads the journal back into the table in sequence order; an id
 * whose entry is gone was freed later (ids are never reused) and is ignored — everyone asks
 * the entry first.
 *
 * Locking: the table changes only under the commit lock, and also under `lock`, which
 * readers outside the commit lock (store__chunk_load) take. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define JOURNAL_VERSION 1
#define PAIR_BYTES      16 /* be64 chunk id, be64 refcount */

static size_t
journal_key(uint8_t out[STORE_REFS_KEY_LEN], uint64_t seq)
{
    size_t plen = strlen(STORE_META_REFS);
    memcpy(out, STORE_META_REFS, plen);
    store__put_be64(out + plen, seq);
    return plen + 8;
}

/* ---- the table: open addressing with linear probing, id 0 = empty ---- */

static size_t
slot_of(const struct store_refs *r, uint64_t id)
{
    size_t mask = r->cap - 1;
    size_t i = store__mix64(id) & mask;
    while (r->tab[i].id != 0 && r->tab[i].id != id)
        i = (i + 1) & mask;
    return i;
}

static int
tab_grow(struct store_refs *r)
{
    size_t cap = r->cap ? r->cap * 2 : 1024;
    struct store_refs_slot *old = r->tab, *n = calloc(cap, sizeof(*n));
    if (!n)
        return -ENOMEM;
    size_t oldcap = r->cap;
    r->tab = n;
    r->cap = cap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].id)
            r->tab[slot_of(r, old[i].id)] = old[i];
    free(old);
    return 0;
}

static int
tab_set(struct store_refs *r, uint64_t id, uint64_t refs)
{
    if ((r->n + 1) * 2 > r->cap) {
        int rc = tab_grow(r);
        if (rc)
            return rc;
    }
    struct store_refs_slot *s = &r->tab[slot_of(r, id)];
    if (s->id == 0)
        r->n++;
    s->id = id;
    s->refs = refs;
    return 0;
}

/* Backward-shift deletion: later members of the probe run move up, so look-ups never need
 * tombstones. */
static void
tab_del(struct store_refs *r, uint64_t id)
{
    if (!r->cap)
        return;
    size_t mask = r->cap - 1, i = slot_of(r, id);
    if (r->tab[i].id != id)
        return;
    r->tab[i].id = 0;
    r->n--;
    for (size_t j = (i + 1) & mask; r->tab[j].id; j = (j + 1) & mask) {
        size_t home = store__mix64(r->tab[j].id) & mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            r->tab[i] = r->tab[j];
            r->tab[j].id = 0;
            i = j;
        }
    }
}

/* ---- lifetime ---- */

void
store__refs_init(struct store *st)
{
    pthread_mutex_init(&st->refs.lock, NULL);
}

void
store__refs_fini(struct store *st)
{
    free(st->refs.tab);
    free(st->refs.jbuf);
    pthread_mutex_destroy(&st->refs.lock);
    memset(&st->refs, 0, sizeof(st->refs));
}

static int
load_entry(struct store *st, bool first, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
    size_t plen = strlen(STORE_META_REFS);
    if (kl != plen + 8 || vl < 1 || v[0] != JOURNAL_VERSION || (vl - 1) % PAIR_BYTES != 0) {
        log_err("store: %s: malformed refcount journal entry (key %zu, value %zu bytes)", st->dir,
                kl, vl);
        return -EPROTO;
    }
    uint64_t seq = store__get_be64(k + plen);
    if (first)
        st->refs.seq_lo = seq;
    st->refs.seq_hi = seq + 1;
    st->refs.jbytes += vl;
    for (size_t off = 1; off < vl; off += PAIR_BYTES) {
        uint64_t id = store__get_be64(v + off), refs = store__get_be64(v + off + 8);
        if (id == 0 || refs == 0) {
            log_err("store: %s: refcount journal entry %" PRIu64 " names chunk %" PRIu64
                    " with refcount %" PRIu64,
                    st->dir, seq, id, refs);
            return -EPROTO;
        }
        int rc = tab_set(&st->refs, id, refs);
        if (rc)
            return rc;
    }
    return 0;
}

int
store__refs_load(struct store *st)
{
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_META);
    if (!it)
        return -ENOMEM;
    size_t plen = strlen(STORE_META_REFS), entries = 0;
    int rc = 0;
    for (meta_iter_seek(it, STORE_META_REFS, plen); meta_iter_valid(it) && rc == 0;
         meta_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = meta_iter_key(it, &kl);
        const uint8_t *v = meta_iter_value(it, &vl);
        if (kl < plen || memcmp(k, STORE_META_REFS, plen) != 0)
            break;
        rc = load_entry(st, entries == 0, k, kl, v, vl);
        entries++;
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    if (rc == 0 && entries)
        log_info("store: %s: %zu refcount journal entries name %zu chunks; folded later", st->dir,
                 entries, st->refs.n);
    return rc;
}

/* ---- readers ---- */

bool
store__refs_get(struct store *st, uint64_t id, uint64_t *refs)
{
    bool found = false;
    pthread_mutex_lock(&st->refs.lock);
    if (st->refs.n) {
        const struct store_refs_slot *s = &st->refs.tab[slot_of(&st->refs, id)];
        if (s->id == id) {
            *refs = s->refs;
            found = true;
        }
    }
    pthread_mutex_unlock(&st->refs.lock);
    return found;
}

/* ---- a commit's journal entry (commit_lock) ---- */

bool
store__refs_fold_due(const struct store *st, size_t more)
{
    return st->refs.n + more > STORE_REFS_FOLD_IDS ||
           st->refs.seq_hi - st->refs.seq_lo >= STORE_REFS_FOLD_KEYS ||
           st->refs.jbytes + more * PAIR_BYTES > STORE_REFS_FOLD_BYTES;
}

void
store__refs_journal_begin(struct store *st)
{
    st->refs.jlen = 0;
}

int
store__refs_journal_add(struct store *st, uint64_t id, uint64_t refs)
{
    struct store_refs *r = &st->refs;
    if (r->jlen == 0)
        r->jlen = 1; /* the version byte, written at put */
    if (r->jlen + PAIR_BYTES > r->jcap) {
        size_t cap = r->jcap ? r->jcap * 2 : 4096;
        uint8_t *n = realloc(r->jbuf, cap);
        if (!n)
            return -ENOMEM;
        r->jbuf = n;
        r->jcap = cap;
    }
    store__put_be64(r->jbuf + r->jlen, id);
    store__put_be64(r->jbuf + r->jlen + 8, refs);
    r->jlen += PAIR_BYTES;
    return 0;
}

int
store__refs_journal_put(struct store *st, struct meta_batch *b)
{
    struct store_refs *r = &st->refs;
    if (r->jlen == 0)
        return 0;
    /* Room in the table for every chunk of the entry now: remembering them after the batch
     * committed must not fail. */
    size_t more = (r->jlen - 1) / PAIR_BYTES;
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    while (rc == 0 && (r->n + more + 1) * 2 > r->cap)
        rc = tab_grow(r);
    pthread_mutex_unlock(&r->lock);
    if (rc)
        return rc;
    r->jbuf[0] = JOURNAL_VERSION;
    uint8_t key[STORE_REFS_KEY_LEN];
    meta_batch_put(b, META_CF_META, key, journal_key(key, r->seq_hi), r->jbuf, r->jlen);
    return 0;
}

void
store__refs_journal_apply(struct store *st)
{
    struct store_refs *r = &st->refs;
    if (r->jlen == 0)
        return;
    pthread_mutex_lock(&r->lock);
    r->seq_hi++;
    r->jbytes += r->jlen;
    for (size_t off = 1; off < r->jlen; off += PAIR_BYTES)
        (void) tab_set(r, store__get_be64(r->jbuf + off),
                       store__get_be64(r->jbuf + off + 8)); /* room made */
    pthread_mutex_unlock(&r->lock);
    r->jlen = 0;
}

void
store__refs_forget(struct store *st, uint64_t id)
{
    if (st->refs.n == 0)
        return;
    pthread_mutex_lock(&st->refs.lock);
    tab_del(&st->refs, id);
    pthread_mutex_unlock(&st->refs.lock);
}

/* ---- folding (commit_lock) ---- */

int
store__refs_fold_put(struct store *st, struct meta_batch *b)
{
    struct store_refs *r = &st->refs;
    for (size_t i = 0; i < r->cap && r->n; i++) {
        if (!r->tab[i].id)
            continue;
        struct meta_chunk_rec rec;
        int rc = store__chunk_load(st, r->tab[i].id, &rec); /* refs from this table */
        if (rc == -ENOENT)
            continue; /* freed since it was journaled */
        if (rc)
            return rc;
        uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
        meta_key_chunk_encode(key, r->tab[i].id);
        meta_batch_put(b, META_CF_CHUNK, key, sizeof(key), val, meta_chunk_rec_encode(val, &rec));
    }
    for (uint64_t seq = r->seq_lo; seq < r->seq_hi; seq++) {
        uint8_t key[STORE_REFS_KEY_LEN];
        meta_batch_delete(b, META_CF_META, key, journal_key(key, seq));
    }
    return 0;
}

void
store__refs_folded(struct store *st)
{
    struct store_refs *r = &st->refs;
    pthread_mutex_lock(&r->lock);
    if (r->tab)
        memset(r->tab, 0, r->cap * sizeof(*r->tab));
    r->n = 0;
    r->seq_lo = r->seq_hi;
    r->jbytes = 0;
    pthread_mutex_unlock(&r->lock);
    store__entries_rewritten(st); /* the entries now hold what the table did */
}

int
store__refs_fold(struct store *st)
{
    if (st->refs.n == 0 && st->refs.seq_lo == st->refs.seq_hi)
        return 0;
    struct meta_batch *b = meta_batch_new();
    if (!b)
        return -ENOMEM;
    int rc = store__refs_fold_put(st, b);
    if (rc == 0)
        rc = meta_batch_commit(st->meta, b, false);
    meta_batch_free(b);
    if (rc == 0)
        store__refs_folded(st);
    else
        log_err("store: %s: folding the refcount journal failed: %s", st->dir, strerror(-rc));
    return rc;
}
