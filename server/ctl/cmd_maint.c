/* ctl gc / scrub / check: the store's maintenance passes, run now on a worker thread with
 * progress streamed to the client and a summary at the end. The store does the work; this
 * file only passes arguments, relays progress and findings, and shapes the result. */
#include <errno.h>
#include <string.h>

#include "ctl/internal.h"
#include "store/store.h"

struct relay {
    struct ctl_call *call;
    const char *op;
};

static int
relay_progress(void *arg, const struct store_progress *p)
{
    struct relay *r = arg;
    return ctl__progress(r->call, r->op, p->done, p->total);
}

static void
relay_finding(void *arg, const char *finding)
{
    struct relay *r = arg;
    ctl__finding(r->call, finding);
}

int
ctl__cmd_gc(struct ctl_call *call)
{
    struct store *st = engine_store(call->srv->engine);
    struct store_stats before, after;
    int rc = store_stats(st, &before);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read store statistics: %s", strerror(-rc));
    struct relay relay = {call, "gc"};
    struct store_compact_result res;
    memset(&res, 0, sizeof(res));
    rc = store_compact(st, call->req->gc->force, relay_progress, &relay, &res);
    if (rc < 0)
        return ctl__fail(call, rc, "compaction stopped: %s", strerror(-rc));
    rc = store_stats(st, &after);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read store statistics: %s", strerror(-rc));
    Dedupd__GcResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__gc_result__init(r);
    r->segments_compacted = res.segments_compacted;
    r->bytes_moved = res.bytes_moved;
    r->bytes_reclaimed = res.bytes_reclaimed;
    r->disk_bytes_before = before.disk_bytes;
    r->disk_bytes_after = after.disk_bytes;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_GC_RESULT;
    call->resp.gc_result = r;
    return 0;
}

int
ctl__cmd_scrub(struct ctl_call *call)
{
    struct relay relay = {call, "scrub"};
    struct store_scrub_result res;
    memset(&res, 0, sizeof(res));
    int rc =
        store_scrub(engine_store(call->srv->engine), relay_progress, relay_finding, &relay, &res);
    if (rc < 0)
        return ctl__fail(call, rc, "scrub stopped: %s", strerror(-rc));
    Dedupd__ScrubResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__scrub_result__init(r);
    r->chunks = res.chunks;
    r->bytes = res.bytes;
    r->crc_errors = res.crc_errors;
    r->hash_errors = res.hash_errors;
    r->io_errors = res.io_errors;
    r->findings = ctl__findings(call, &r->n_findings);
    r->findings_dropped = call->n_findings - r->n_findings;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_SCRUB_RESULT;
    call->resp.scrub_result = r;
    return 0;
}

int
ctl__cmd_check(struct ctl_call *call)
{
    struct relay relay = {call, "check"};
    struct store_check_result res;
    memset(&res, 0, sizeof(res));
    int rc = store_check(engine_store(call->srv->engine), call->req->check->repair, relay_progress,
                         relay_finding, &relay, &res);
    if (rc < 0)
        return ctl__fail(call, rc, "check stopped: %s", strerror(-rc));
    Dedupd__CheckResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__check_result__init(r);
    r->map_entries = res.map_entries;
    r->chunks = res.chunks;
    r->hash_entries = res.hash_entries;
    r->hash_stale = res.hash_stale;
    r->problems = res.problems;
    r->repaired = res.repaired;
    r->findings = ctl__findings(call, &r->n_findings);
    r->findings_dropped = call->n_findings - r->n_findings;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_CHECK_RESULT;
    call->resp.check_result = r;
    return 0;
}
