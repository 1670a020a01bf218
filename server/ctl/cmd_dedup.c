/* ctl enable / disable: change the persisted dedup settings, applied live by the engine.
 * Checks the arguments it can (names, sizes) so the operator gets a precise message; the
 * engine validates the combination. Worker thread. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl/internal.h"
#include "dedupd/limits.h"
#include "util/hash.h"

static int
reply_config(struct ctl_call *call)
{
    struct engine_dedup_config cfg;
    engine_dedup_get(call->srv->engine, &cfg);
    Dedupd__DedupResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__dedup_result__init(r);
    r->enabled = cfg.enabled;
    r->backend = ctl__strdup(call, cfg.backend);
    const char *hn = hash_name(cfg.hash_alg);
    r->hash = ctl__strdup(call, hn ? hn : "none");
    if (!r->backend || !r->hash)
        return -ENOMEM;
    r->verify = cfg.verify;
    r->default_chunk_size = cfg.default_chunk_size;
    r->limit_nr = cfg.limit_nr;
    r->limit_mem = cfg.limit_mem;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_DEDUP_RESULT;
    call->resp.dedup_result = r;
    return 0;
}

static bool
chunk_size_ok(uint32_t cs)
{
    return cs >= DEDUPD_CHUNK_MIN && cs <= DEDUPD_CHUNK_MAX && (cs & (cs - 1)) == 0;
}

int
ctl__cmd_enable(struct ctl_call *call)
{
    const Dedupd__EnableRequest *q = call->req->enable;
    struct engine_dedup_config cfg;
    engine_dedup_get(call->srv->engine, &cfg);
    cfg.enabled = true;
    if (q->backend && *q->backend) {
        if (strcmp(q->backend, "memory") != 0 && strcmp(q->backend, "rocksdb") != 0)
            return ctl__fail(call, -EINVAL, "unknown back-end '%s' (memory or rocksdb)",
                             q->backend);
        snprintf(cfg.backend, sizeof(cfg.backend), "%s", q->backend);
    }
    if (q->hash && *q->hash) {
        if (hash_parse(q->hash, &cfg.hash_alg) < 0)
            return ctl__fail(call, -EINVAL, "unknown hash '%s' (sha256 or xxh3)", q->hash);
    }
    if (q->chunk_size) {
        if (!chunk_size_ok(q->chunk_size))
            return ctl__fail(call, -EINVAL, "chunk size %u is not a power of two between %u and %u",
                             q->chunk_size, DEDUPD_CHUNK_MIN, DEDUPD_CHUNK_MAX);
        cfg.default_chunk_size = q->chunk_size;
    }
    if (q->limit_nr)
        cfg.limit_nr = q->limit_nr->value;
    if (q->limit_mem)
        cfg.limit_mem = q->limit_mem->value;
    if (q->verify == DEDUPD__TOGGLE__ON)
        cfg.verify = true;
    else if (q->verify == DEDUPD__TOGGLE__OFF)
        cfg.verify = false;
    /* invariant 6: a non-cryptographic hash never shares without comparing bytes. */
    if (hash_needs_verify(cfg.hash_alg)) {
        if (q->verify == DEDUPD__TOGGLE__OFF)
            return ctl__fail(call, -EINVAL, "hash %s is not cryptographic: verify is mandatory",
                             hash_name(cfg.hash_alg));
        cfg.verify = true;
    }
    int rc = engine_dedup_set(call->srv->engine, &cfg);
    if (rc < 0)
        return ctl__fail(call, rc, "engine refused the settings: %s", strerror(-rc));
    return reply_config(call);
}

int
ctl__cmd_disable(struct ctl_call *call)
{
    struct engine_dedup_config cfg;
    engine_dedup_get(call->srv->engine, &cfg);
    cfg.enabled = false;
    int rc = engine_dedup_set(call->srv->engine, &cfg);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot disable dedup: %s", strerror(-rc));
    return reply_config(call);
}
