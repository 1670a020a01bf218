/* ctl stats: engine counters per export and in total, plus the store's accounting (chunks,
 * segments, live and dead bytes). Ratios are computed here once so that the table and the
 * JSON agree. Reads only. Worker thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/internal.h"
#include "store/store.h"

static Dedupd__Counters *
counters_msg(struct ctl_call *call, const char *name, const struct engine_stats *s)
{
    Dedupd__Counters *c = ctl__alloc(call, sizeof(*c));
    if (!c)
        return NULL;
    dedupd__counters__init(c);
    c->name = ctl__strdup(call, name);
    if (!c->name)
        return NULL;
    c->logical_bytes = s->logical_bytes;
    c->zero_bytes = s->zero_bytes;
    c->unique_bytes = s->unique_bytes;
    c->disk_bytes = s->disk_bytes;
    c->dedup_hits = s->dedup_hits;
    c->dedup_misses = s->dedup_misses;
    c->verify_compares = s->verify_compares;
    c->verify_mismatches = s->verify_mismatches;
    c->rmw_count = s->rmw_count;
    c->bytes_written = s->bytes_written;
    c->bytes_read = s->bytes_read;
    /* Zeros are not stored at all, so they count neither side of the dedup ratio. */
    c->dedup_ratio = s->unique_bytes ? (double) s->logical_bytes / (double) s->unique_bytes : 0;
    return c;
}

static int
export_counters(struct ctl_call *call, const char *name, Dedupd__Counters **out)
{
    struct engine_stats s;
    int rc = engine_stats(call->srv->engine, name, &s);
    if (rc == -ENOENT)
        return ctl__fail(call, rc, "no export named '%s'", name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read counters of '%s': %s", name, strerror(-rc));
    *out = counters_msg(call, name, &s);
    return *out ? 0 : -ENOMEM;
}

int
ctl__cmd_stats(struct ctl_call *call)
{
    struct engine *e = call->srv->engine;
    const char *only = call->req->stats->export;
    Dedupd__StatsResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__stats_result__init(r);
    int rc;
    if (only && *only) {
        r->exports = ctl__alloc(call, sizeof(*r->exports));
        if (!r->exports)
            return -ENOMEM;
        rc = export_counters(call, only, &r->exports[0]);
        if (rc < 0)
            return rc;
        r->n_exports = 1;
    } else {
        struct engine_export_info *list = NULL;
        size_t n = 0;
        rc = engine_export_list(e, &list, &n);
        if (rc < 0)
            return ctl__fail(call, rc, "cannot list exports: %s", strerror(-rc));
        r->exports = ctl__alloc(call, n * sizeof(*r->exports));
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (!r->exports) {
                rc = -ENOMEM;
                break;
            }
            rc = export_counters(call, list[i].name, &r->exports[i]);
            /* An export deleted since the list was taken is simply not shown. */
            if (rc == -ENOENT) {
                call->message[0] = '\0';
                rc = 0;
                continue;
            }
            if (rc == 0)
                r->n_exports++;
        }
        free(list);
        if (rc < 0)
            return rc;
    }

    struct engine_stats total;
    rc = engine_stats(e, NULL, &total);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read total counters: %s", strerror(-rc));
    r->total = counters_msg(call, "", &total);
    if (!r->total)
        return -ENOMEM;

    struct store_stats ss;
    rc = store_stats(engine_store(e), &ss);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read store statistics: %s", strerror(-rc));
    r->chunks = ss.chunks;
    r->chunks_shared = ss.chunks_shared;
    r->segments = ss.segments;
    r->live_bytes = ss.stored_bytes;
    r->dead_bytes = ss.dead_bytes;
    r->disk_bytes = ss.disk_bytes;
    r->meta_bytes = ss.meta_bytes;
    r->compactions = ss.compactions;
    /* 1.0 until a codec stores fewer bytes than it was given. */
    r->compression_ratio = ss.stored_bytes ? (double) ss.raw_bytes / (double) ss.stored_bytes : 1.0;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_STATS_RESULT;
    call->resp.stats_result = r;
    return 0;
}
