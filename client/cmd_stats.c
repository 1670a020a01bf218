/* dedupd-ctl stats [EXPORT] [--watch N]: how much space dedup saves, per export and in
 * total, and what the store holds (chunks, segments, live and dead bytes). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "dedupd/errors.h"

static void
help(FILE *out)
{
    fprintf(out,
            "Usage: %s stats [EXPORT] [--watch SECONDS [--count N]] [--json]\n"
            "Show how much space deduplication saves, per export and in total.\n"
            "\n"
            "  logical      bytes clients have written and can read back (zeros excluded)\n"
            "  zero         bytes written as zeros: never stored\n"
            "  unique       bytes actually stored once (per export: only by that export)\n"
            "  dedup ratio  logical / unique (2.00 = half the space)\n"
            "  hits/misses  writes that found / did not find an identical chunk\n"
            "  dead         bytes of freed chunks still in segments: 'gc' reclaims them\n"
            "\n"
            "  -w, --watch SECONDS   refresh every SECONDS until interrupted\n"
            "  -n, --count N         with --watch: stop after N refreshes\n",
            PROG);
}

static void
json_counters(struct json *j, const char *key, const Dedupd__Counters *x)
{
    json_obj_begin(j, key);
    if (x->name && *x->name)
        json_str(j, "name", x->name);
    json_u64(j, "logical_bytes", x->logical_bytes);
    json_u64(j, "zero_bytes", x->zero_bytes);
    json_u64(j, "unique_bytes", x->unique_bytes);
    json_u64(j, "disk_bytes", x->disk_bytes);
    json_double(j, "dedup_ratio", x->dedup_ratio);
    json_u64(j, "dedup_hits", x->dedup_hits);
    json_u64(j, "dedup_misses", x->dedup_misses);
    json_u64(j, "verify_compares", x->verify_compares);
    json_u64(j, "verify_mismatches", x->verify_mismatches);
    json_u64(j, "rmw_count", x->rmw_count);
    json_u64(j, "bytes_written", x->bytes_written);
    json_u64(j, "bytes_read", x->bytes_read);
    json_obj_end(j);
}

static void
print_json(const Dedupd__StatsResult *s)
{
    struct json j;
    json_init(&j, stdout);
    json_obj_begin(&j, NULL);
    json_arr_begin(&j, "exports");
    for (size_t i = 0; i < s->n_exports; i++)
        json_counters(&j, NULL, s->exports[i]);
    json_arr_end(&j);
    if (s->total)
        json_counters(&j, "total", s->total);
    json_u64(&j, "chunks", s->chunks);
    json_u64(&j, "chunks_shared", s->chunks_shared);
    json_u64(&j, "segments", s->segments);
    json_u64(&j, "live_bytes", s->live_bytes);
    json_u64(&j, "dead_bytes", s->dead_bytes);
    json_u64(&j, "disk_bytes", s->disk_bytes);
    json_u64(&j, "meta_bytes", s->meta_bytes);
    json_u64(&j, "compactions", s->compactions);
    json_double(&j, "compression_ratio", s->compression_ratio);
    json_obj_end(&j);
    fflush(stdout);
}

static const char *
ratio(double r)
{
    static char b[2][16];
    static int n;
    char *p = b[n++ % 2];
    if (r <= 0)
        return "-";
    snprintf(p, 16, "%.2f", r);
    return p;
}

static void
row(const Dedupd__Counters *x, const char *name)
{
    printf("%-16s %10s %10s %10s %6s %10" PRIu64 " %10" PRIu64 " %8" PRIu64 "\n", name,
           hsize(x->logical_bytes), hsize(x->zero_bytes), hsize(x->unique_bytes),
           ratio(x->dedup_ratio), x->dedup_hits, x->dedup_misses, x->verify_mismatches);
}

static void
print_table(const Dedupd__StatsResult *s)
{
    printf("%-16s %10s %10s %10s %6s %10s %10s %8s\n", "EXPORT", "LOGICAL", "ZERO", "UNIQUE",
           "RATIO", "HITS", "MISSES", "VERIFY!");
    for (size_t i = 0; i < s->n_exports; i++)
        row(s->exports[i], s->exports[i]->name);
    if (s->total)
        row(s->total, "total");
    if (s->n_exports)
        printf("(per export: UNIQUE = bytes only this export references, freed if it is deleted; "
               "RATIO = LOGICAL/UNIQUE)\n");
    printf("\n");
    uint64_t saved = 0;
    if (s->total && s->total->logical_bytes > s->total->unique_bytes)
        saved = s->total->logical_bytes - s->total->unique_bytes;
    printf("dedup ratio %s, compression ratio %.2f: %s saved (plus %s of zeros)\n",
           s->total ? ratio(s->total->dedup_ratio) : "-", s->compression_ratio, hsize(saved),
           s->total ? hsize(s->total->zero_bytes) : "0 B");
    printf("chunks %" PRIu64 " (%" PRIu64 " shared), segments %" PRIu64 ", live %s, dead %s\n",
           s->chunks, s->chunks_shared, s->segments, hsize(s->live_bytes), hsize(s->dead_bytes));
    printf("on disk: segments %s, metadata %s; compactions %" PRIu64 "\n", hsize(s->disk_bytes),
           hsize(s->meta_bytes), s->compactions);
}

int
cmd_stats(struct client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"watch", required_argument, NULL, 'w'},
        {"count", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long watch = 0, count = 0;
    char *end;
    int o;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":w:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'w':
        case 'n': {
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v <= 0 || v > 86400)
                return usage_error("stats", "bad number '%s' for --%s", optarg,
                                   o == 'w' ? "watch" : "count");
            *(o == 'w' ? &watch : &count) = v;
            break;
        }
        case 'j':
            c->json = true;
            break;
        case 'h':
            help(stdout);
            return DEDUPD_EXIT_OK;
        case ':':
            return usage_error("stats", "option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("stats", "bad option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind > 1)
        return usage_error("stats", "too many arguments");
    if (count && !watch)
        return usage_error("stats", "--count needs --watch");
    Dedupd__StatsRequest q = DEDUPD__STATS_REQUEST__INIT;
    q.export = optind < argc ? argv[optind] : "";
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATS;
    req.stats = &q;
    bool clear = watch && !c->json && isatty(STDOUT_FILENO);
    for (long i = 0;; i++) {
        int rc;
        Dedupd__Response *r =
            client_request(c, &req, 60, DEDUPD__RESPONSE__RESULT_STATS_RESULT, &rc);
        if (!r)
            return rc;
        if (clear)
            printf("\033[H\033[2J");
        else if (watch && !c->json && i > 0)
            printf("\n");
        if (c->json)
            print_json(r->stats_result);
        else
            print_table(r->stats_result);
        fflush(stdout);
        dedupd__response__free_unpacked(r, NULL);
        if (!watch || (count && i + 1 >= count))
            return DEDUPD_EXIT_OK;
        sleep((unsigned) watch);
    }
}
