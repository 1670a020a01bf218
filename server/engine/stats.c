/* stats.c: the counters of engine_stats — cumulative ones kept by the I/O paths (hits,
 * misses, verify, RMW, zero bytes, bytes read/written; atomics in memory, saved in the
 * `meta` column family at every FLUSH and at close, loaded at open: a crash loses only the
 * counts since the last flush), and state ones computed from the store when asked
 * (logical bytes from the per-export mapped chunk counts, unique and disk bytes from the
 * store's accounting).
 * Knows nothing of how they are shown. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "meta/meta.h"
#include "store/store.h"
#include "util/log.h"

#define COUNTERS_VERSION 1
#define N_COUNTERS       (sizeof(struct engine_counters) / sizeof(_Atomic uint64_t))
#define COUNTERS_VAL_LEN (1 + 8 * N_COUNTERS)
_Static_assert(sizeof(struct engine_counters) == 8 * sizeof(_Atomic uint64_t),
               "engine_counters is a plain array of 64-bit counters");

/* The counters as an array, in declaration order (the on-disk order). */
static _Atomic uint64_t *
counter_at(struct engine_counters *c, size_t i)
{
    return (_Atomic uint64_t *) c + i;
}

size_t
engine__counters_key(uint8_t out[ENGINE_COUNTERS_KEY_MAX], const struct engine_xstate *xs)
{
    size_t n = sizeof(ENGINE_COUNTERS_KEY) - 1;
    memcpy(out, ENGINE_COUNTERS_KEY, n);
    if (!xs)
        return n; /* the totals */
    out[n] = '.';
    out[n + 1] = (uint8_t) (xs->id >> 24);
    out[n + 2] = (uint8_t) (xs->id >> 16);
    out[n + 3] = (uint8_t) (xs->id >> 8);
    out[n + 4] = (uint8_t) xs->id;
    return n + 5;
}

static void
put_counters(struct meta_batch *b, const struct engine_xstate *xs, struct engine_counters *c)
{
    uint8_t key[ENGINE_COUNTERS_KEY_MAX], val[COUNTERS_VAL_LEN];
    size_t kl = engine__counters_key(key, xs);
    val[0] = COUNTERS_VERSION;
    for (size_t i = 0; i < N_COUNTERS; i++) {
        uint64_t v = atomic_load_explicit(counter_at(c, i), memory_order_relaxed);
        for (int k = 0; k < 8; k++)
            val[1 + 8 * i + (size_t) k] = (uint8_t) (v >> (56 - 8 * k));
    }
    meta_batch_put(b, META_CF_META, key, kl, val, sizeof(val));
}

static void
get_counters(struct engine *e, const struct engine_xstate *xs, struct engine_counters *c)
{
    uint8_t key[ENGINE_COUNTERS_KEY_MAX], val[COUNTERS_VAL_LEN];
    size_t kl = engine__counters_key(key, xs);
    ssize_t n = meta_get(e->m, META_CF_META, key, kl, val, sizeof(val));
    if (n == -ENOENT)
        return;
    if (n != (ssize_t) sizeof(val) || val[0] != COUNTERS_VERSION) {
        /* Counters are statistics, not data: start them again rather than refuse to open. */
        log_warn("engine: saved counters of %s unreadable; starting from zero",
                 xs ? xs->rec.name : "the total");
        return;
    }
    for (size_t i = 0; i < N_COUNTERS; i++) {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v = v << 8 | val[1 + 8 * i + (size_t) k];
        atomic_store(counter_at(c, i), v);
    }
}

void
engine__counters_load(struct engine *e)
{
    get_counters(e, NULL, &e->total);
    pthread_mutex_lock(&e->cat_mu);
    for (struct engine_xstate *x = e->exports; x; x = x->next)
        get_counters(e, x, &x->c);
    pthread_mutex_unlock(&e->cat_mu);
}

int
engine__counters_save(struct engine *e)
{
    struct meta_batch *b = meta_batch_new();
    if (!b)
        return -ENOMEM;
    put_counters(b, NULL, &e->total);
    pthread_mutex_lock(&e->cat_mu);
    for (struct engine_xstate *x = e->exports; x; x = x->next)
        if (!x->deleting)
            put_counters(b, x, &x->c);
    pthread_mutex_unlock(&e->cat_mu);
    int rc = meta_batch_commit(e->m, b, false); /* made durable by the store_sync after */
    meta_batch_free(b);
    return rc;
}

static void
load_counters(const struct engine_counters *c, struct engine_stats *out)
{
    out->zero_bytes = atomic_load_explicit(&c->zero_bytes, memory_order_relaxed);
    out->dedup_hits = atomic_load_explicit(&c->dedup_hits, memory_order_relaxed);
    out->dedup_misses = atomic_load_explicit(&c->dedup_misses, memory_order_relaxed);
    out->verify_compares = atomic_load_explicit(&c->verify_compares, memory_order_relaxed);
    out->verify_mismatches = atomic_load_explicit(&c->verify_mismatches, memory_order_relaxed);
    out->rmw_count = atomic_load_explicit(&c->rmw_count, memory_order_relaxed);
    out->bytes_written = atomic_load_explicit(&c->bytes_written, memory_order_relaxed);
    out->bytes_read = atomic_load_explicit(&c->bytes_read, memory_order_relaxed);
}

/* Bytes an export alone holds: the chunks all of whose references are its own map entries
 * (what deleting it would free), each counted once however often the export repeats it.
 * The map scan collects chunk ids; sorted, a run of n equal ids is exclusive when the
 * chunk's refcount is n. The id list costs 8 bytes per mapped chunk, so it is capped at
 * OWNED_MAX_IDS (256 MiB); a bigger export counts, past the cap, only chunks with one
 * reference — an under-estimate, logged. */
#define OWNED_MAX_IDS (32u << 20)

struct owned_scan {
    uint64_t *ids;
    size_t n, cap;
    bool truncated;
};

static int
collect_id(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct owned_scan *s = arg;
    (void) chunk_idx;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        if (cap > OWNED_MAX_IDS)
            cap = OWNED_MAX_IDS;
        if (cap == s->cap) {
            s->truncated = true;
            return 1;
        }
        uint64_t *ids = realloc(s->ids, cap * sizeof(*ids));
        if (!ids)
            return -ENOMEM;
        s->ids = ids;
        s->cap = cap;
    }
    s->ids[s->n++] = chunk_id;
    return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return (x > y) - (x < y);
}

static int
owned_bytes(struct engine *e, const struct engine_xstate *xs, uint64_t *out)
{
    struct owned_scan s = {0};
    uint64_t nchunks = (xs->rec.size + xs->rec.chunk_size - 1) / xs->rec.chunk_size;
    int rc = store_map_scan(e->st, xs->id, 0, nchunks, collect_id, &s);
    if (rc < 0) {
        free(s.ids);
        return rc;
    }
    rc = 0; /* 1: the scan stopped at the cap */
    if (s.truncated)
        log_warn(
            "engine: export %s has over %u mapped chunks; its exclusive bytes count only chunks "
            "with a single reference",
            xs->rec.name, OWNED_MAX_IDS);
    if (s.n)
        qsort(s.ids, s.n, sizeof(*s.ids), cmp_u64);
    uint64_t bytes = 0;
    for (size_t i = 0; i < s.n && rc == 0;) {
        size_t j = i + 1;
        while (j < s.n && s.ids[j] == s.ids[i])
            j++;
        struct store_chunk_info info;
        rc = store_chunk_get(e->st, s.ids[i], &info);
        if (rc == 0 && (info.refs == j - i || (s.truncated && info.refs == 1)))
            bytes += info.raw_len;
        i = j;
    }
    free(s.ids);
    *out = bytes;
    return rc;
}

static int
export_stats(struct engine *e, const char *name, struct engine_stats *out)
{
    struct engine_export *ex;
    int rc = engine_export_open(e, name, &ex); /* pins the export against delete */
    if (rc < 0)
        return rc;
    struct engine_xstate *xs = ex->xs;
    load_counters(&xs->c, out);
    uint64_t mapped = 0;
    rc = store_export_mapped(e->st, xs->id, &mapped);
    if (rc == 0) {
        out->logical_bytes = mapped * xs->rec.chunk_size;
        /* A scan of the export's map: fine for a status command, not for a hot path. */
        rc = owned_bytes(e, xs, &out->unique_bytes);
    }
    engine_export_close(ex);
    return rc;
}

int
engine_stats(struct engine *e, const char *export_name, struct engine_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (export_name)
        return export_stats(e, export_name, out);
    load_counters(&e->total, out);
    struct store_stats ss;
    int rc = store_stats(e->st, &ss);
    if (rc < 0)
        return rc;
    out->unique_bytes = ss.raw_bytes;
    out->disk_bytes = ss.disk_bytes;
    pthread_mutex_lock(&e->cat_mu);
    for (struct engine_xstate *x = e->exports; x && rc == 0; x = x->next) {
        uint64_t mapped = 0;
        rc = store_export_mapped(e->st, x->id, &mapped);
        out->logical_bytes += mapped * x->rec.chunk_size;
    }
    pthread_mutex_unlock(&e->cat_mu);
    return rc;
}
