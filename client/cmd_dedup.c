/* dedupd-ctl enable / disable: turn deduplication on (optionally changing its settings) or
 * off. The server persists the settings and applies them to later writes at once. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "dedupd/errors.h"
#include "dedupd/limits.h"

static void
enable_help(FILE *out)
{
    fprintf(out,
            "Usage: %s enable [-s memory|rocksdb] [-b CHUNK] [-a sha256|xxh3] [-l LIMIT_NR]\n"
            "                         [-m LIMIT_MEM] [--verify|--no-verify] [--json]\n"
            "Turn deduplication on; options change its settings, the rest are kept.\n"
            "Settings are persisted and apply to writes from now on (no restart).\n"
            "\n"
            "  -s, --storage-backend NAME  hash index: rocksdb (persistent, default) or memory\n"
            "                              (bounded LRU, lost on restart)\n"
            "  -b, --blocksize SIZE        default chunk size of new exports: a power of two,\n"
            "                              4K..8M (existing exports keep theirs)\n"
            "  -a, --hash-algorithm NAME   sha256 (default) or xxh3 (faster; forces --verify)\n"
            "  -l, --limit-hash N          memory back-end: at most N entries (0 = default)\n"
            "  -m, --limit-memory SIZE     memory back-end: at most SIZE bytes (0 = no limit)\n"
            "      --verify                compare bytes before sharing a chunk\n"
            "      --no-verify             trust the hash (sha256 only)\n"
            "\n"
            "See 'status' for the memory the memory back-end would need at its limit.\n",
            PROG);
}

static void
print_config(struct client *c, const Dedupd__DedupResult *d)
{
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_bool(&j, "enabled", d->enabled);
        json_str(&j, "backend", d->backend);
        json_str(&j, "hash", d->hash);
        json_bool(&j, "verify", d->verify);
        json_u64(&j, "default_chunk_size", d->default_chunk_size);
        json_u64(&j, "limit_nr", d->limit_nr);
        json_u64(&j, "limit_mem", d->limit_mem);
        json_obj_end(&j);
        return;
    }
    if (!d->enabled) {
        printf("dedup disabled (settings kept: %s, %s)\n", d->backend, d->hash);
        return;
    }
    printf("dedup enabled: back-end %s, hash %s, verify %s, chunk size %s", d->backend, d->hash,
           d->verify ? "on" : "off", hsize(d->default_chunk_size));
    if (strcmp(d->backend, "memory") == 0) {
        printf(", limit %" PRIu64 " entries", d->limit_nr);
        if (d->limit_mem)
            printf(" / %s", hsize(d->limit_mem));
    }
    printf("\n");
}

int
cmd_enable(struct client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"storage-backend", required_argument, NULL, 's'},
        {"blocksize", required_argument, NULL, 'b'},
        {"chunk-size", required_argument, NULL, 'b'},
        {"hash-algorithm", required_argument, NULL, 'a'},
        {"limit-hash", required_argument, NULL, 'l'},
        {"limit-memory", required_argument, NULL, 'm'},
        {"verify", no_argument, NULL, 'v'},
        {"no-verify", no_argument, NULL, 'V'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    Dedupd__EnableRequest q = DEDUPD__ENABLE_REQUEST__INIT;
    Dedupd__U64 limit_nr = DEDUPD__U64__INIT, limit_mem = DEDUPD__U64__INIT;
    uint64_t v;
    int o;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":s:b:a:l:m:h", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            if (strcmp(optarg, "memory") && strcmp(optarg, "rocksdb"))
                return usage_error("enable", "unknown back-end '%s' (memory or rocksdb)", optarg);
            q.backend = optarg;
            break;
        case 'b':
            if (!parse_size_arg("enable", "chunk size", optarg, &v))
                return DEDUPD_EXIT_USAGE;
            if (v < DEDUPD_CHUNK_MIN || v > DEDUPD_CHUNK_MAX || (v & (v - 1)))
                return usage_error("enable", "chunk size must be a power of two, 4K..8M");
            q.chunk_size = (uint32_t) v;
            break;
        case 'a':
            if (strcmp(optarg, "sha256") && strcmp(optarg, "xxh3") && strcmp(optarg, "xxh3-128"))
                return usage_error("enable", "unknown hash '%s' (sha256 or xxh3)", optarg);
            q.hash = optarg;
            break;
        case 'l': {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return usage_error("enable", "bad entry limit '%s' (a count)", optarg);
            limit_nr.value = n;
            q.limit_nr = &limit_nr;
            break;
        }
        case 'm':
            if (!parse_size_arg("enable", "memory limit", optarg, &limit_mem.value))
                return DEDUPD_EXIT_USAGE;
            q.limit_mem = &limit_mem;
            break;
        case 'v':
            q.verify = DEDUPD__TOGGLE__ON;
            break;
        case 'V':
            q.verify = DEDUPD__TOGGLE__OFF;
            break;
        case 'j':
            c->json = true;
            break;
        case 'h':
            enable_help(stdout);
            return DEDUPD_EXIT_OK;
        case ':':
            return usage_error("enable", "option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("enable", "bad option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("enable", "unexpected argument '%s'", argv[optind]);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_ENABLE;
    req.enable = &q;
    int rc;
    Dedupd__Response *r = client_request(c, &req, 60, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT, &rc);
    if (!r)
        return rc;
    print_config(c, r->dedup_result);
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}

int
cmd_disable(struct client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int o;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        if (o == 'j') {
            c->json = true;
            continue;
        }
        if (o == 'h') {
            printf("Usage: %s disable [--json]\n"
                   "Turn deduplication off: later writes are stored without hashing and never\n"
                   "shared; data already shared stays shared. Persisted; 'enable' turns it back\n"
                   "on with the same settings.\n",
                   PROG);
            return DEDUPD_EXIT_OK;
        }
        return usage_error("disable", "bad option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return usage_error("disable", "unexpected argument '%s'", argv[optind]);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__DisableRequest q = DEDUPD__DISABLE_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_DISABLE;
    req.disable = &q;
    int rc;
    Dedupd__Response *r = client_request(c, &req, 60, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT, &rc);
    if (!r)
        return rc;
    print_config(c, r->dedup_result);
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}
