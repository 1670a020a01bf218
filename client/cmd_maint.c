/* dedupd-ctl gc / scrub / check: maintenance run now by the server, with progress on stderr
 * and a summary at the end. scrub and check exit 1 when they find problems. */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "client.h"
#include "dedupd/errors.h"

/* Parses --json, --help and one optional flag (NULL = none); -1 to go on, else an exit code. */
static int
opts(struct client *c, const char *cmd, const char *flag, bool *flag_set, void (*help)(void),
     int argc, char **argv)
{
    struct option o[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {flag ? flag : "help", no_argument, NULL, flag ? 'f' : 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, ":h", o, NULL)) != -1) {
        switch (ch) {
        case 'j':
            c->json = true;
            break;
        case 'h':
            help();
            return DEDUPD_EXIT_OK;
        case 'f':
            *flag_set = true;
            break;
        default:
            return usage_error(cmd, "bad option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    return -1;
}

static void
findings(struct json *j, char **f, size_t n, uint64_t dropped)
{
    if (j) {
        json_arr_begin(j, "findings");
        for (size_t i = 0; i < n; i++)
            json_str(j, NULL, f[i]);
        json_arr_end(j);
        json_u64(j, "findings_dropped", dropped);
        return;
    }
    for (size_t i = 0; i < n; i++)
        printf("  %s\n", f[i]);
    if (dropped)
        printf("  ... and %" PRIu64 " more (see the server log)\n", dropped);
}

static void
gc_help(void)
{
    printf("Usage: %s gc [--force] [--json]\n"
           "Reclaim the space of freed chunks now: compact every sealed segment whose live\n"
           "fraction is below the threshold (--force: every segment with dead bytes, the\n"
           "active one included).\n"
           "Progress on stderr; a summary at the end.\n",
           PROG);
}

int
cmd_gc(struct client *c, int argc, char **argv)
{
    bool force = false;
    int rc = opts(c, "gc", "force", &force, gc_help, argc, argv);
    if (rc >= 0)
        return rc;
    Dedupd__GcRequest q = DEDUPD__GC_REQUEST__INIT;
    q.force = force;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_GC;
    req.gc = &q;
    Dedupd__Response *r = client_request(c, &req, 0, DEDUPD__RESPONSE__RESULT_GC_RESULT, &rc);
    if (!r)
        return rc;
    const Dedupd__GcResult *g = r->gc_result;
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "segments_compacted", g->segments_compacted);
        json_u64(&j, "bytes_moved", g->bytes_moved);
        json_u64(&j, "bytes_reclaimed", g->bytes_reclaimed);
        json_u64(&j, "disk_bytes_before", g->disk_bytes_before);
        json_u64(&j, "disk_bytes_after", g->disk_bytes_after);
        json_obj_end(&j);
    } else {
        printf("gc: %" PRIu64 " segments compacted, %s moved, %s reclaimed\n",
               g->segments_compacted, hsize(g->bytes_moved), hsize(g->bytes_reclaimed));
        printf("segments on disk: %s -> %s\n", hsize(g->disk_bytes_before),
               hsize(g->disk_bytes_after));
    }
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}

static void
scrub_help(void)
{
    printf("Usage: %s scrub [--json]\n"
           "Read every stored chunk and verify its checksum and hash. Progress on stderr;\n"
           "findings and a summary at the end. Exit 1 if any chunk is bad.\n",
           PROG);
}

int
cmd_scrub(struct client *c, int argc, char **argv)
{
    int rc = opts(c, "scrub", NULL, NULL, scrub_help, argc, argv);
    if (rc >= 0)
        return rc;
    Dedupd__ScrubRequest q = DEDUPD__SCRUB_REQUEST__INIT;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_SCRUB;
    req.scrub = &q;
    Dedupd__Response *r = client_request(c, &req, 0, DEDUPD__RESPONSE__RESULT_SCRUB_RESULT, &rc);
    if (!r)
        return rc;
    const Dedupd__ScrubResult *s = r->scrub_result;
    uint64_t bad = s->crc_errors + s->hash_errors + s->io_errors;
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "chunks", s->chunks);
        json_u64(&j, "bytes", s->bytes);
        json_u64(&j, "crc_errors", s->crc_errors);
        json_u64(&j, "hash_errors", s->hash_errors);
        json_u64(&j, "io_errors", s->io_errors);
        findings(&j, s->findings, s->n_findings, s->findings_dropped);
        json_obj_end(&j);
    } else {
        printf("scrub: %" PRIu64 " chunks, %s read: %" PRIu64 " checksum errors, %" PRIu64
               " hash errors, %" PRIu64 " I/O errors\n",
               s->chunks, hsize(s->bytes), s->crc_errors, s->hash_errors, s->io_errors);
        findings(NULL, s->findings, s->n_findings, s->findings_dropped);
        printf("%s\n", bad ? "scrub: PROBLEMS FOUND" : "scrub: ok");
    }
    dedupd__response__free_unpacked(r, NULL);
    return bad ? DEDUPD_EXIT_RUNTIME : DEDUPD_EXIT_OK;
}

static void
check_help(void)
{
    printf("Usage: %s check [--repair] [--json]\n"
           "Verify the metadata invariants: refcounts match the block maps, every chunk's\n"
           "record lies inside its segment, every hash entry names a live chunk with that\n"
           "hash. Entries of freed chunks are counted apart, not as problems: look-ups take\n"
           "them as absent and the index drops them over time.\n"
           "--repair fixes what is safely fixable and drops those entries now.\n"
           "Exit 1 if problems remain.\n",
           PROG);
}

int
cmd_check(struct client *c, int argc, char **argv)
{
    bool repair = false;
    int rc = opts(c, "check", "repair", &repair, check_help, argc, argv);
    if (rc >= 0)
        return rc;
    Dedupd__CheckRequest q = DEDUPD__CHECK_REQUEST__INIT;
    q.repair = repair;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_CHECK;
    req.check = &q;
    Dedupd__Response *r = client_request(c, &req, 0, DEDUPD__RESPONSE__RESULT_CHECK_RESULT, &rc);
    if (!r)
        return rc;
    const Dedupd__CheckResult *k = r->check_result;
    uint64_t left = k->problems > k->repaired ? k->problems - k->repaired : 0;
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_u64(&j, "map_entries", k->map_entries);
        json_u64(&j, "chunks", k->chunks);
        json_u64(&j, "hash_entries", k->hash_entries);
        json_u64(&j, "hash_stale", k->hash_stale);
        json_u64(&j, "problems", k->problems);
        json_u64(&j, "repaired", k->repaired);
        findings(&j, k->findings, k->n_findings, k->findings_dropped);
        json_obj_end(&j);
    } else {
        printf("check: %" PRIu64 " map entries, %" PRIu64 " chunks, %" PRIu64
               " hash entries (%" PRIu64 " of freed chunks, %s)\n",
               k->map_entries, k->chunks, k->hash_entries, k->hash_stale,
               repair ? "dropped" : "left for the sweep");
        findings(NULL, k->findings, k->n_findings, k->findings_dropped);
        printf("check: %" PRIu64 " problems, %" PRIu64 " repaired%s\n", k->problems, k->repaired,
               left ? "" : " - ok");
    }
    dedupd__response__free_unpacked(r, NULL);
    return left ? DEDUPD_EXIT_RUNTIME : DEDUPD_EXIT_OK;
}
