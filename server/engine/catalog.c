/* catalog.c: the export catalogue — the `export` column family (id -> record), id
 * allocation (monotonic, persisted, never reused so a half-deleted export's leftovers can
 * never surface in a new one), name look-up, the default export, handles, clone and delete.
 * Every export in the catalogue has an in-memory struct engine_xstate for the engine's
 * life: its range locks and counters are shared by all handles on it.
 * Knows nothing of NBD; the data of clone/delete goes through store transactions. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/internal.h"
#include "meta/meta.h"
#include "store/store.h"
#include "util/log.h"

#define NEXT_ID_KEY "engine.next_export_id"
#define DEFAULT_KEY "engine.default_export"
/* Map entries changed per transaction by clone: bounds the batch (and the commit lock hold)
 * to a few MiB. */
#define CLONE_BATCH 4096

static bool
name_ok(const char *name)
{
    size_t n = name ? strnlen(name, DEDUPD_EXPORT_NAME_MAX + 1) : 0;
    if (n == 0 || n > DEDUPD_EXPORT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char) name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return true;
}

static bool
chunk_size_ok(uint64_t cs)
{
    return cs >= DEDUPD_CHUNK_MIN && cs <= DEDUPD_CHUNK_MAX && (cs & (cs - 1)) == 0;
}

static int sweep_orphans(struct engine *e);

/* cat_mu held. Hidden exports (being created by clone, or deleted) are found only when
 * any is set: their names stay taken. */
static struct engine_xstate *
find(struct engine *e, const char *name, bool any)
{
    if (!name)
        return NULL;
    if (!name[0])
        name = e->default_name;
    for (struct engine_xstate *x = e->exports; x; x = x->next)
        if (!strcmp(x->rec.name, name) && (any || !x->deleting))
            return x;
    return NULL;
}

static void
info_of(const struct engine_xstate *x, struct engine_export_info *out)
{
    memset(out, 0, sizeof(*out));
    out->id = x->id;
    snprintf(out->name, sizeof(out->name), "%s", x->rec.name);
    out->size = x->rec.size;
    out->chunk_size = x->rec.chunk_size;
    out->dedup = x->rec.dedup;
    out->read_only = x->rec.read_only;
    out->parent_id = x->rec.parent_id;
    out->open_handles = x->open_handles;
}

static struct engine_xstate *
xstate_new(uint32_t id, const struct meta_export_rec *rec)
{
    struct engine_xstate *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->id = id;
    x->rec = *rec;
    atomic_store(&x->dedup, rec->dedup);
    engine__chunklock_init(&x->lock);
    return x;
}

static void
xstate_free(struct engine_xstate *x)
{
    engine__chunklock_destroy(&x->lock);
    free(x);
}

/* cat_mu held: keeps the list sorted by id. */
static void
link_xstate(struct engine *e, struct engine_xstate *x)
{
    struct engine_xstate **pp = &e->exports;
    while (*pp && (*pp)->id < x->id)
        pp = &(*pp)->next;
    x->next = *pp;
    *pp = x;
}

static void
unlink_xstate(struct engine *e, struct engine_xstate *x)
{
    for (struct engine_xstate **pp = &e->exports; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            return;
        }
}

static void
put_record(struct meta_batch *b, uint32_t id, const struct meta_export_rec *rec)
{
    uint8_t key[META_EXPORT_KEY_LEN], val[META_EXPORT_VAL_MAX];
    meta_key_export_encode(key, id);
    size_t n = meta_export_rec_encode(val, rec);
    meta_batch_put(b, META_CF_EXPORT, key, sizeof(key), val, n);
}

static void
put_next_id(struct meta_batch *b, uint32_t next_id)
{
    uint8_t val[META_ID_VAL_LEN];
    meta_val_id_encode(val, next_id);
    meta_batch_put(b, META_CF_META, NEXT_ID_KEY, strlen(NEXT_ID_KEY), val, sizeof(val));
}

/* Commits b synchronously (catalogue changes are rare and must survive a crash). */
static int
commit_sync(struct engine *e, struct meta_batch *b)
{
    int rc = meta_batch_commit(e->m, b, true);
    meta_batch_free(b);
    return rc;
}

/* cat_mu held: validates and allocates an id; the record is the caller's to write. */
static int
check_new(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size)
{
    if (!name_ok(name) || size == 0 || size > DEDUPD_EXPORT_SIZE_MAX || !chunk_size_ok(chunk_size))
        return -EINVAL;
    if (find(e, name, true))
        return -EEXIST;
    if (e->next_id == UINT32_MAX)
        return -ENOSPC;
    return 0;
}

static int
create_locked(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size, bool dedup,
              bool read_only, struct engine_xstate **out)
{
    int rc = check_new(e, name, size, chunk_size);
    if (rc < 0)
        return rc;
    struct meta_export_rec rec = {
        .size = size,
        .chunk_size = chunk_size,
        .dedup = dedup,
        .read_only = read_only,
        .created_sec = (uint64_t) time(NULL),
    };
    snprintf(rec.name, sizeof(rec.name), "%s", name);
    uint32_t id = e->next_id;
    struct engine_xstate *x = xstate_new(id, &rec);
    struct meta_batch *b = meta_batch_new();
    if (!x || !b) {
        free(x);
        meta_batch_free(b);
        return -ENOMEM;
    }
    put_record(b, id, &rec);
    put_next_id(b, id + 1);
    rc = commit_sync(e, b);
    if (rc < 0) {
        xstate_free(x);
        return rc;
    }
    e->next_id = id + 1;
    link_xstate(e, x);
    *out = x;
    return 0;
}

int
engine__catalog_load(struct engine *e, const struct engine_options *opt)
{
    uint32_t max_id = 0;
    struct meta_iter *it = meta_iter_new(e->m, META_CF_EXPORT);
    if (!it)
        return -ENOMEM;
    int rc = 0;
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint32_t id;
        struct meta_export_rec rec;
        if (meta_key_export_decode(k, kl, &id) < 0 || meta_export_rec_decode(v, vl, &rec) < 0 ||
            !chunk_size_ok(rec.chunk_size) || !name_ok(rec.name)) {
            log_err("engine: export catalogue: malformed record (key length %zu)", kl);
            rc = -EBADMSG;
            break;
        }
        struct engine_xstate *x = xstate_new(id, &rec);
        if (!x) {
            rc = -ENOMEM;
            break;
        }
        link_xstate(e, x);
        if (id > max_id)
            max_id = id;
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    meta_iter_free(it);
    if (rc < 0)
        return rc;

    uint8_t val[META_ID_VAL_LEN];
    uint64_t next = 0;
    ssize_t n = meta_get(e->m, META_CF_META, NEXT_ID_KEY, strlen(NEXT_ID_KEY), val, sizeof(val));
    if (n >= 0 && meta_val_id_decode(val, (size_t) n, &next) < 0)
        return -EBADMSG;
    if (n < 0 && n != -ENOENT)
        return (int) n;
    /* Id 0 means "no parent": the first export is 1. */
    e->next_id = (uint32_t) (next > max_id ? next : max_id + 1);
    if (e->next_id == 0)
        e->next_id = 1;

    char persisted[DEDUPD_EXPORT_NAME_MAX + 1] = "";
    n = meta_get(e->m, META_CF_META, DEFAULT_KEY, strlen(DEFAULT_KEY), persisted,
                 sizeof(persisted) - 1);
    if (n >= 0 && (size_t) n < sizeof(persisted))
        persisted[n] = 0;
    else
        persisted[0] = 0;

    if (!e->exports && opt->default_export && opt->default_export[0]) {
        struct engine_dedup_config c;
        engine_dedup_get(e, &c);
        uint64_t size =
            opt->default_export_size ? opt->default_export_size : DEDUPD_DEFAULT_EXPORT_SIZE;
        struct engine_xstate *x;
        pthread_mutex_lock(&e->cat_mu);
        rc = create_locked(e, opt->default_export, size, c.default_chunk_size, true, false, &x);
        pthread_mutex_unlock(&e->cat_mu);
        if (rc < 0) {
            log_err("engine: cannot create default export %s: %s", opt->default_export,
                    strerror(-rc));
            return rc;
        }
        struct meta_batch *b = meta_batch_new();
        if (!b)
            return -ENOMEM;
        meta_batch_put(b, META_CF_META, DEFAULT_KEY, strlen(DEFAULT_KEY), opt->default_export,
                       strlen(opt->default_export));
        rc = commit_sync(e, b);
        if (rc < 0)
            return rc;
        snprintf(persisted, sizeof(persisted), "%s", opt->default_export);
        log_info("engine: created default export %s (%" PRIu64 " bytes, chunk %u)",
                 opt->default_export, size, c.default_chunk_size);
    }
    /* The configured name when it exists, else the one created first, else the lowest id. */
    const char *def = "";
    if (opt->default_export && find(e, opt->default_export, false))
        def = opt->default_export;
    else if (persisted[0] && find(e, persisted, false))
        def = persisted;
    else if (e->exports)
        def = e->exports->rec.name;
    snprintf(e->default_name, sizeof(e->default_name), "%s", def);
    return sweep_orphans(e);
}

void
engine__catalog_fini(struct engine *e)
{
    struct engine_xstate *x = e->exports;
    while (x) {
        struct engine_xstate *nx = x->next;
        if (x->open_handles)
            log_warn("engine: export %s closed with %u open handles", x->rec.name, x->open_handles);
        xstate_free(x);
        x = nx;
    }
    e->exports = NULL;
}

const char *
engine_default_export(struct engine *e)
{
    return e->default_name; /* fixed at open */
}

int
engine_export_create(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size,
                     unsigned flags, struct engine_export_info *out)
{
    if (chunk_size == 0) {
        struct engine_dedup_config c;
        engine_dedup_get(e, &c);
        chunk_size = c.default_chunk_size;
    }
    struct engine_xstate *x;
    pthread_mutex_lock(&e->cat_mu);
    int rc = create_locked(e, name, size, chunk_size, !(flags & ENGINE_EXPORT_NO_DEDUP),
                           (flags & ENGINE_EXPORT_READ_ONLY) != 0, &x);
    if (rc == 0 && out)
        info_of(x, out);
    pthread_mutex_unlock(&e->cat_mu);
    if (rc == 0)
        log_info("engine: export %s created: id %u, %" PRIu64 " bytes, chunk %u%s", name, x->id,
                 size, chunk_size, (flags & ENGINE_EXPORT_NO_DEDUP) ? ", dedup off" : "");
    return rc;
}

int
engine_export_lookup(struct engine *e, const char *name, struct engine_export_info *out)
{
    pthread_mutex_lock(&e->cat_mu);
    struct engine_xstate *x = find(e, name, false);
    if (x && out)
        info_of(x, out);
    pthread_mutex_unlock(&e->cat_mu);
    return x ? 0 : -ENOENT;
}

int
engine_export_list(struct engine *e, struct engine_export_info **out, size_t *n)
{
    pthread_mutex_lock(&e->cat_mu);
    size_t cnt = 0;
    for (struct engine_xstate *x = e->exports; x; x = x->next)
        cnt += !x->deleting;
    struct engine_export_info *a = calloc(cnt ? cnt : 1, sizeof(*a));
    if (!a) {
        pthread_mutex_unlock(&e->cat_mu);
        return -ENOMEM;
    }
    size_t i = 0;
    for (struct engine_xstate *x = e->exports; x; x = x->next)
        if (!x->deleting)
            info_of(x, &a[i++]);
    pthread_mutex_unlock(&e->cat_mu);
    *out = a;
    *n = cnt;
    return 0;
}

int
engine_export_set_dedup(struct engine *e, const char *name, bool dedup)
{
    pthread_mutex_lock(&e->cat_mu);
    struct engine_xstate *x = find(e, name, false);
    int rc = -ENOENT;
    if (x) {
        struct meta_export_rec rec = x->rec;
        rec.dedup = dedup;
        struct meta_batch *b = meta_batch_new();
        rc = -ENOMEM;
        if (b) {
            put_record(b, x->id, &rec);
            rc = commit_sync(e, b);
        }
        if (rc == 0) {
            x->rec = rec;
            /* Writes already past their hashing step finish under the old property. */
            atomic_store(&x->dedup, dedup);
        }
    }
    pthread_mutex_unlock(&e->cat_mu);
    return rc;
}

int
engine_export_open(struct engine *e, const char *name, struct engine_export **out)
{
    struct engine_export *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return -ENOMEM;
    pthread_mutex_lock(&e->cat_mu);
    struct engine_xstate *x = find(e, name, false);
    if (x)
        x->open_handles++;
    pthread_mutex_unlock(&e->cat_mu);
    if (!x) {
        free(ex);
        return -ENOENT;
    }
    ex->e = e;
    ex->xs = x;
    *out = ex;
    return 0;
}

void
engine_export_close(struct engine_export *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->e->cat_mu);
    ex->xs->open_handles--;
    pthread_mutex_unlock(&ex->e->cat_mu);
    free(ex);
}

void
engine_export_get_info(const struct engine_export *ex, struct engine_export_info *out)
{
    pthread_mutex_lock(&ex->e->cat_mu);
    info_of(ex->xs, out);
    pthread_mutex_unlock(&ex->e->cat_mu);
}

int
engine_export_delete(struct engine *e, const char *name)
{
    pthread_mutex_lock(&e->cat_mu);
    struct engine_xstate *x = find(e, name, false);
    int rc = 0;
    if (!x)
        rc = -ENOENT;
    else if (x->open_handles)
        rc = -EBUSY; /* also while a clone reads it: clone holds a handle count */
    else
        x->deleting = true; /* unreachable from now on: no handle can appear */
    pthread_mutex_unlock(&e->cat_mu);
    if (rc < 0)
        return rc;

    /* The record goes first: from then on the export's map entries are orphans, which
     * sweep_orphans() finishes freeing at the next open if we crash (or fail) half-way. */
    uint8_t key[META_EXPORT_KEY_LEN];
    meta_key_export_encode(key, x->id);
    struct meta_batch *b = meta_batch_new();
    rc = -ENOMEM;
    if (b) {
        meta_batch_delete(b, META_CF_EXPORT, key, sizeof(key));
        uint8_t ckey[ENGINE_COUNTERS_KEY_MAX];
        size_t ckl = engine__counters_key(ckey, x);
        meta_batch_delete(b, META_CF_META, ckey, ckl);
        rc = commit_sync(e, b);
    }
    if (rc < 0) {
        pthread_mutex_lock(&e->cat_mu);
        x->deleting = false;
        pthread_mutex_unlock(&e->cat_mu);
        log_err("engine: export %s: delete failed: %s", x->rec.name, strerror(-rc));
        return rc;
    }
    uint64_t nchunks = (x->rec.size + x->rec.chunk_size - 1) / x->rec.chunk_size;
    int rc2 = engine__unmap_range(e, x, 0, nchunks);
    if (rc2 < 0)
        log_err("engine: export %s (id %u) deleted, but freeing its chunks failed (%s): the "
                "next start finishes it",
                x->rec.name, x->id, strerror(-rc2));
    pthread_mutex_lock(&e->cat_mu);
    unlink_xstate(e, x);
    pthread_mutex_unlock(&e->cat_mu);
    log_info("engine: export %s (id %u) deleted", x->rec.name, x->id);
    xstate_free(x);
    return 0;
}

/* Frees the map entries of export ids missing from the catalogue: what a crash left of a
 * delete (record gone first) or of a clone (record written last). One seek per distinct
 * export id in the map, so cheap when there is nothing to do. Called at open, before any
 * request. */
static int
sweep_orphans(struct engine *e)
{
    uint32_t id = 0;
    int rc = 0;
    for (;;) {
        struct meta_iter *it = meta_iter_new(e->m, META_CF_MAP);
        if (!it)
            return -ENOMEM;
        uint8_t seek[META_MAP_KEY_LEN];
        meta_key_map_encode(seek, id, 0);
        meta_iter_seek(it, seek, sizeof(seek));
        bool found = false;
        if (meta_iter_valid(it)) {
            size_t kl;
            const void *k = meta_iter_key(it, &kl);
            uint64_t idx;
            found = meta_key_map_decode(k, kl, &id, &idx) == 0;
        }
        rc = meta_iter_status(it);
        meta_iter_free(it);
        if (rc < 0 || !found)
            break;
        struct engine_xstate *x;
        for (x = e->exports; x && x->id != id; x = x->next)
            ;
        if (!x) {
            struct meta_export_rec rec = {.chunk_size = DEDUPD_CHUNK_MIN};
            snprintf(rec.name, sizeof(rec.name), "(orphaned id %u)", id);
            struct engine_xstate *o = xstate_new(id, &rec);
            if (!o)
                return -ENOMEM;
            log_warn("engine: freeing the chunks of export id %u, gone from the catalogue "
                     "(an interrupted delete or clone)",
                     id);
            rc = engine__unmap_range(e, o, 0, UINT64_MAX);
            xstate_free(o);
            if (rc < 0)
                break;
        }
        if (id == UINT32_MAX)
            break;
        id++;
    }
    return rc;
}

/* ---- clone ---- */

struct clone_scan {
    uint64_t idx[CLONE_BATCH];
    uint64_t id[CLONE_BATCH];
    size_t n;
};

static int
clone_collect(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct clone_scan *s = arg;
    s->idx[s->n] = chunk_idx;
    s->id[s->n] = chunk_id;
    return ++s->n == CLONE_BATCH ? 1 : 0;
}

/* Maps every chunk of src into dst, CLONE_BATCH per transaction. src's whole range is
 * locked for reading, so the copy is one point in src's history. */
static int
clone_maps(struct engine *e, struct engine_xstate *src, struct engine_xstate *dst)
{
    struct clone_scan *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    uint64_t nchunks = (src->rec.size + src->rec.chunk_size - 1) / src->rec.chunk_size;
    uint64_t next = 0;
    int rc = 0;
    while (rc == 0 && next < nchunks) {
        s->n = 0;
        rc = store_map_scan(e->st, src->id, next, nchunks - next, clone_collect, s);
        if (rc < 0)
            break;
        rc = 0;
        if (s->n == 0)
            break;
        pthread_rwlock_rdlock(&e->settings_lock);
        struct store_txn *tx = NULL;
        rc = store_txn_begin(e->st, &tx);
        for (size_t i = 0; rc == 0 && i < s->n; i++)
            rc = store_txn_map_set(tx, dst->id, s->idx[i], s->id[i]);
        if (rc == 0) {
            struct index_batch ib;
            index_batch_init(&ib);
            index_batch_reset(&ib, store_txn_batch(tx));
            struct engine_freed_ctx fc = {.ix = e->ix, .ib = &ib};
            rc = store_txn_commit(tx, engine__on_freed, &fc); /* adds refs only: frees none */
            index_batch_fini(&ib);
        } else if (tx) {
            store_txn_abort(tx);
        }
        pthread_rwlock_unlock(&e->settings_lock);
        next = s->idx[s->n - 1] + 1;
        if (s->n < CLONE_BATCH)
            break;
    }
    free(s);
    return rc;
}

int
engine_export_clone(struct engine *e, const char *src_name, const char *name,
                    struct engine_export_info *out)
{
    pthread_mutex_lock(&e->cat_mu);
    struct engine_xstate *src = find(e, src_name, false);
    int rc = src ? 0 : -ENOENT;
    if (rc == 0)
        rc = check_new(e, name, src->rec.size, src->rec.chunk_size);
    struct meta_batch *b = NULL;
    struct engine_xstate *dst = NULL;
    struct meta_export_rec rec;
    if (rc == 0) {
        /* Inherits size, chunk size and the dedup property, like btrfs's `dedup`. */
        rec = src->rec;
        snprintf(rec.name, sizeof(rec.name), "%s", name);
        rec.parent_id = src->id;
        rec.created_sec = (uint64_t) time(NULL);
        dst = xstate_new(e->next_id, &rec);
        b = meta_batch_new();
        rc = dst && b ? 0 : -ENOMEM;
    }
    if (rc == 0) {
        put_next_id(b, dst->id + 1);
        rc = commit_sync(e, b); /* the id is spent even if the clone fails */
        b = NULL;
    }
    if (rc == 0) {
        e->next_id = dst->id + 1;
        dst->deleting = true; /* hidden until its maps are complete; its name is taken */
        link_xstate(e, dst);
        src->open_handles++; /* pins src against delete */
    }
    pthread_mutex_unlock(&e->cat_mu);
    meta_batch_free(b);
    if (rc < 0) {
        if (dst)
            xstate_free(dst);
        return rc;
    }

    struct engine_chunkrange r;
    engine__chunklock_acquire(&src->lock, &r, 0, UINT64_MAX, false);
    rc = clone_maps(e, src, dst);
    engine__chunklock_release(&src->lock, &r);
    if (rc == 0) {
        b = meta_batch_new();
        rc = b ? 0 : -ENOMEM;
        if (b) {
            put_record(b, dst->id, &rec);
            rc = commit_sync(e, b);
        }
    }
    if (rc < 0) {
        /* Drop what was mapped so no reference leaks; the name becomes free again. */
        uint64_t nchunks = (rec.size + rec.chunk_size - 1) / rec.chunk_size;
        int rc2 = engine__unmap_range(e, dst, 0, nchunks);
        if (rc2 < 0)
            log_err("engine: clone %s: cannot undo partial clone (export id %u): %s", name, dst->id,
                    strerror(-rc2));
        log_err("engine: clone %s -> %s failed: %s", src->rec.name, name, strerror(-rc));
    }
    pthread_mutex_lock(&e->cat_mu);
    src->open_handles--;
    if (rc == 0) {
        dst->deleting = false;
        if (out)
            info_of(dst, out);
    } else {
        unlink_xstate(e, dst);
    }
    pthread_mutex_unlock(&e->cat_mu);
    if (rc < 0)
        xstate_free(dst);
    else
        log_info("engine: export %s cloned from %s (id %u)", name, src->rec.name, dst->id);
    return rc;
}
