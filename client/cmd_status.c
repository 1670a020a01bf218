/* dedupd-ctl status: is dedup on, with which settings, how big is the index and how big
 * would it be at its limit; uptime, version, connections. */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "client.h"
#include "dedupd/errors.h"

static void
help(FILE *out)
{
    fprintf(out,
            "Usage: %s status [--json]\n"
            "Show whether deduplication is on and how: back-end, hash, verify, default chunk\n"
            "size, index limits and usage, the memory the memory back-end would need at its\n"
            "limit, the estimated on-disk size of the rocksdb index, exports, NBD connections,\n"
            "uptime and version.\n",
            PROG);
}

static const char *
duration(uint64_t s)
{
    static char b[48];
    if (s >= 86400)
        snprintf(b, sizeof(b), "%" PRIu64 "d %02" PRIu64 "h %02" PRIu64 "m", s / 86400,
                 s / 3600 % 24, s / 60 % 60);
    else
        snprintf(b, sizeof(b), "%" PRIu64 "h %02" PRIu64 "m %02" PRIu64 "s", s / 3600, s / 60 % 60,
                 s % 60);
    return b;
}

static void
print_json(const Dedupd__StatusResult *s)
{
    struct json j;
    json_init(&j, stdout);
    json_obj_begin(&j, NULL);
    json_bool(&j, "enabled", s->enabled);
    json_str(&j, "backend", s->backend);
    json_str(&j, "hash", s->hash);
    json_bool(&j, "verify", s->verify);
    json_u64(&j, "default_chunk_size", s->default_chunk_size);
    json_u64(&j, "limit_nr", s->limit_nr);
    json_u64(&j, "limit_mem", s->limit_mem);
    json_u64(&j, "index_entries", s->index_entries);
    json_u64(&j, "index_bytes", s->index_bytes);
    json_u64(&j, "index_evictions", s->index_evictions);
    json_u64(&j, "filter_bytes", s->filter_bytes);
    json_u64(&j, "filter_building_bytes", s->filter_building_bytes);
    json_u64(&j, "filter_builds", s->filter_builds);
    json_u64(&j, "filter_skips", s->filter_skips);
    json_u64(&j, "memory_at_limit", s->memory_at_limit);
    json_u64(&j, "rocksdb_index_estimate", s->rocksdb_index_estimate);
    json_u64(&j, "unique_chunks", s->unique_chunks);
    json_u64(&j, "exports", s->exports);
    json_u64(&j, "nbd_connections", s->nbd_connections);
    json_u64(&j, "nbd_loops", s->nbd_loops);
    json_u64(&j, "uptime_sec", s->uptime_sec);
    json_str(&j, "version", s->version);
    json_u64(&j, "protocol", s->protocol);
    json_i64(&j, "sync_error", s->sync_error);
    json_u64(&j, "free_bytes", s->free_bytes);
    json_u64(&j, "reserve_bytes", s->reserve_bytes);
    json_bool(&j, "new_data_refused", s->new_data_refused);
    json_obj_end(&j);
}

static void
print_table(const Dedupd__StatusResult *s)
{
    bool mem = strcmp(s->backend, "memory") == 0;
    if (s->sync_error)
        printf("DURABILITY LOST:     a segment fdatasync failed (%s): every flush fails and\n"
               "                     nothing written since is durable; check the disk and\n"
               "                     restart dedupd (its recovery checks the unsynced tail)\n",
               strerror(s->sync_error));
    if (s->new_data_refused)
        printf("NEW DATA REFUSED:    free space is down to the reserve kept for the index;\n"
               "                     writes of new data fail with ENOSPC until space is freed\n"
               "                     (trim or delete, then gc)\n");
    printf("dedup:               %s\n", s->enabled ? "enabled" : "disabled");
    printf("back-end:            %s\n", s->backend);
    printf("hash:                %s\n", s->hash);
    printf("verify:              %s\n", s->verify ? "on" : "off");
    printf("default chunk size:  %s\n", hsize(s->default_chunk_size));
    printf("memory limit:        %" PRIu64 " entries, %s (memory back-end)\n", s->limit_nr,
           s->limit_mem ? hsize(s->limit_mem) : "no byte limit");
    printf("index:               %" PRIu64 " entries%s, %s %s", s->index_entries,
           mem ? "" : " (RocksDB's estimate)", hsize(s->index_bytes),
           mem ? "in memory" : "on disk");
    if (mem)
        printf(", %" PRIu64 " evictions", s->index_evictions);
    printf("\n");
    if (!mem && s->filter_building_bytes)
        printf("  in-memory filter:               building, %s (look-ups go to RocksDB "
               "meanwhile)\n",
               hsize(s->filter_building_bytes));
    else if (!mem && s->filter_bytes)
        printf("  in-memory filter:               %s, built %" PRIu64 " time%s, %" PRIu64
               " look-ups answered without RocksDB\n",
               hsize(s->filter_bytes), s->filter_builds, s->filter_builds == 1 ? "" : "s",
               s->filter_skips);
    printf("  memory back-end at its limit:   %s (%" PRIu64 " entries)\n",
           hsize(s->memory_at_limit), s->limit_nr);
    printf("  rocksdb index on disk (est.):   %s (%" PRIu64 " unique chunks)\n",
           hsize(s->rocksdb_index_estimate), s->unique_chunks);
    if (s->free_bytes || s->reserve_bytes) { /* both 0: a server from before the fields */
        printf("free space:          ");
        if (s->free_bytes == UINT64_MAX)
            printf("unknown");
        else
            printf("%s", hsize(s->free_bytes));
        printf(" (new data stops with %s left, kept for the index)\n", hsize(s->reserve_bytes));
    }
    printf("exports:             %u\n", s->exports);
    printf("NBD connections:     %u", s->nbd_connections);
    if (s->nbd_loops) /* 0: a server from before the field */
        printf(" (on %u event loop%s)", s->nbd_loops, s->nbd_loops == 1 ? "" : "s");
    printf("\n");
    printf("uptime:              %s\n", duration(s->uptime_sec));
    printf("version:             %s (control protocol %u)\n", s->version, s->protocol);
}

int
cmd_status(struct client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    int o;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (o == 'h') {
            help(stdout);
            return DEDUPD_EXIT_OK;
        }
        if (o == 'j') {
            c->json = true;
            continue;
        }
        return usage_error("status", "bad option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return usage_error("status", "unexpected argument '%s'", argv[optind]);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatusRequest q = DEDUPD__STATUS_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    req.status = &q;
    int rc;
    Dedupd__Response *r = client_request(c, &req, 30, DEDUPD__RESPONSE__RESULT_STATUS_RESULT, &rc);
    if (!r)
        return rc;
    if (c->json)
        print_json(r->status_result);
    else
        print_table(r->status_result);
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}
