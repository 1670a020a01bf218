/* ctl status: dedup settings, index usage and what the index would cost at its limit (the
 * btrfs TODO "method to query in-memory hash size"), uptime, version, connections.
 * Reads the engine and store; changes nothing. Worker thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/internal.h"
#include "dedupd/version.h"
#include "store/store.h"
#include "util/hash.h"

/* RocksDB `hash` entry on disk: key (the hash) + value (chunk id, 8) + ~12 bytes of SST
 * per-entry overhead (varint lengths, sequence number, index share) before compression. */
static uint64_t
disk_entry_estimate(enum dedupd_hash_alg alg)
{
    return hash_len(alg) + 8 + 12;
}

int
ctl__cmd_status(struct ctl_call *call)
{
    struct engine *e = call->srv->engine;
    struct engine_dedup_config cfg;
    struct engine_index_usage use;
    engine_dedup_get(e, &cfg);
    engine_index_usage(e, &use);
    struct store_stats ss;
    int rc = store_stats(engine_store(e), &ss);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot read store statistics: %s", strerror(-rc));
    struct engine_export_info *exports = NULL;
    size_t n_exports = 0;
    rc = engine_export_list(e, &exports, &n_exports);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot list exports: %s", strerror(-rc));
    free(exports);

    Dedupd__StatusResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__status_result__init(r);
    r->version = (char *) DEDUPD_VERSION;
    r->protocol = DEDUPD_CTL_PROTO_VERSION;
    r->uptime_sec = (uv_hrtime() - call->srv->start_ns) / 1000000000ULL;
    r->enabled = cfg.enabled;
    r->backend = ctl__strdup(call, cfg.backend);
    const char *hn = hash_name(cfg.hash_alg);
    r->hash = ctl__strdup(call, hn ? hn : "none");
    if (!r->backend || !r->hash)
        return -ENOMEM;
    r->verify = cfg.verify;
    r->default_chunk_size = cfg.default_chunk_size;
    /* The limit in force when the memory back-end runs; otherwise the one it would get. */
    r->limit_nr = use.limit_nr   ? use.limit_nr
                  : cfg.limit_nr ? cfg.limit_nr
                                 : use.mem_default_limit_nr;
    r->limit_mem = use.limit_mem ? use.limit_mem : cfg.limit_mem;
    r->index_entries = use.entries;
    r->index_bytes = use.bytes;
    r->index_evictions = use.evictions;
    r->filter_bytes = use.filter_bytes;
    r->filter_building_bytes = use.filter_building_bytes;
    r->filter_builds = use.filter_builds;
    r->filter_skips = use.filter_skips;
    r->nbd_connections = call->nbd_connections;
    r->nbd_loops = call->nbd_loops;
    r->exports = (uint32_t) n_exports;
    r->unique_chunks = ss.chunks;
    r->sync_error = -ss.sync_error;
    r->free_bytes = ss.free_bytes;
    r->reserve_bytes = ss.reserve_bytes;
    r->new_data_refused = ss.new_data_refused;

    /* Measured per-entry cost when the running back-end has entries, else the estimate. */
    bool is_memory = strcmp(cfg.backend, "memory") == 0;
    /* (engine's figure when none exists to measure: entry plus its bucket share) */
    uint64_t mem_entry = use.mem_entry_bytes;
    uint64_t disk_entry = disk_entry_estimate(cfg.hash_alg);
    if (use.entries && is_memory)
        mem_entry = (use.bytes + use.entries - 1) / use.entries;
    if (use.entries && !is_memory && use.bytes)
        disk_entry = (use.bytes + use.entries - 1) / use.entries;
    r->memory_at_limit = r->limit_nr * mem_entry;
    if (r->limit_mem && r->memory_at_limit > r->limit_mem)
        r->memory_at_limit = r->limit_mem;
    r->rocksdb_index_estimate = ss.chunks * disk_entry;

    call->resp.result_case = DEDUPD__RESPONSE__RESULT_STATUS_RESULT;
    call->resp.status_result = r;
    return 0;
}
