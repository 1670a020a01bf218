/* stats.c: the counters of engine_stats — cumulative ones kept by the I/O paths since
 * open (hits, misses, verify, RMW, zero bytes, bytes read/written; in memory, not
 * persisted), and state ones computed from the store when asked (logical bytes from the
 * per-export mapped chunk counts, unique and disk bytes from the store's accounting).
 * Knows nothing of how they are shown. */
#include <errno.h>
#include <string.h>

#include "engine/internal.h"
#include "store/store.h"

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

struct owned_scan {
    struct store *st;
    uint64_t bytes;
    int err;
};

static int
count_owned(void *arg, uint64_t chunk_idx, uint64_t chunk_id)
{
    struct owned_scan *s = arg;
    struct store_chunk_info info;
    (void) chunk_idx;
    int rc = store_chunk_get(s->st, chunk_id, &info);
    if (rc < 0) {
        s->err = rc;
        return 1;
    }
    if (info.refs == 1)
        s->bytes += info.raw_len;
    return 0;
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
        /* Owned: chunks no other map entry or clone holds. XXX: a scan of the export's map,
         * fine for a status command, not for a hot path. */
        struct owned_scan s = {.st = e->st};
        uint64_t nchunks = (xs->rec.size + xs->rec.chunk_size - 1) / xs->rec.chunk_size;
        rc = store_map_scan(e->st, xs->id, 0, nchunks, count_owned, &s);
        rc = s.err < 0 ? s.err : rc < 0 ? rc : 0;
        out->unique_bytes = s.bytes;
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
