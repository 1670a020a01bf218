/* dedupd-ctl export list|create|delete|info|set|clone: the export catalogue. Created and
 * deleted exports are seen by the next NBD connection; no restart. */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "client.h"
#include "dedupd/errors.h"
#include "dedupd/limits.h"

static void
help(FILE *out)
{
    fprintf(out,
            "Usage: %s export list\n"
            "       %s export create NAME SIZE [--chunk-size SIZE] [--no-dedup] [--read-only]\n"
            "       %s export delete NAME\n"
            "       %s export info [NAME]\n"
            "       %s export set NAME dedup=on|off\n"
            "       %s export clone SOURCE NAME\n"
            "Manage the exports (block devices) clients attach over NBD.\n"
            "\n"
            "  list     every export with its size, chunk size, dedup and connections\n"
            "  create   a new thin export of SIZE bytes (e.g. 16G); --chunk-size defaults to\n"
            "           the dedup default (see 'status'); --no-dedup stores its chunks\n"
            "           unshared; --read-only refuses writes\n"
            "  delete   remove an export and free its chunks (refused while connected)\n"
            "  info     one export (the default export without NAME)\n"
            "  set      turn deduplication on or off for one export's later writes\n"
            "  clone    a new export sharing every chunk of SOURCE (instant, no copy)\n"
            "\n"
            "Each subcommand accepts --json and --help.\n",
            PROG, PROG, PROG, PROG, PROG, PROG);
}

static void
json_export(struct json *j, const char *key, const Dedupd__ExportInfo *x)
{
    json_obj_begin(j, key);
    json_u64(j, "id", x->id);
    json_str(j, "name", x->name);
    json_u64(j, "size", x->size);
    json_u64(j, "chunk_size", x->chunk_size);
    json_bool(j, "dedup", x->dedup);
    json_bool(j, "read_only", x->read_only);
    json_u64(j, "parent_id", x->parent_id);
    json_u64(j, "connections", x->connections);
    json_bool(j, "default", x->is_default);
    json_obj_end(j);
}

static void
print_info(struct client *c, const Dedupd__ExportInfo *x)
{
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_export(&j, NULL, x);
        return;
    }
    printf("name:         %s%s\n", x->name, x->is_default ? " (default)" : "");
    printf("id:           %u\n", x->id);
    printf("size:         %s (%" PRIu64 " bytes)\n", hsize(x->size), x->size);
    printf("chunk size:   %s\n", hsize(x->chunk_size));
    printf("dedup:        %s\n", x->dedup ? "on" : "off");
    printf("read-only:    %s\n", x->read_only ? "yes" : "no");
    if (x->parent_id)
        printf("clone of:     export id %u\n", x->parent_id);
    printf("connections:  %u\n", x->connections);
}

/* Parses the subcommand's options (only --json and --help); returns -1 to go on, else an
 * exit code. Positional arguments are left at argv[optind..]. */
static int
sub_opts(struct client *c, const char *name, int argc, char **argv)
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
            help(stdout);
            return DEDUPD_EXIT_OK;
        }
        return usage_error(name, "bad option '%s'", argv[optind - 1]);
    }
    return -1;
}

static int
want_args(const char *name, int argc, int n_min, int n_max)
{
    int n = argc - optind;
    if (n < n_min)
        return usage_error(name, "missing argument");
    if (n > n_max)
        return usage_error(name, "too many arguments");
    return -1;
}

static int
run_export_result(struct client *c, Dedupd__Request *req)
{
    int rc;
    Dedupd__Response *r = client_request(c, req, 60, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT, &rc);
    if (!r)
        return rc;
    print_info(c, r->export_result->export);
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}

static int
do_list(struct client *c, int argc, char **argv)
{
    int rc = sub_opts(c, "export list", argc, argv);
    if (rc < 0)
        rc = want_args("export list", argc, 0, 0);
    if (rc >= 0)
        return rc;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__ExportListRequest q = DEDUPD__EXPORT_LIST_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_LIST;
    req.export_list = &q;
    Dedupd__Response *r =
        client_request(c, &req, 60, DEDUPD__RESPONSE__RESULT_EXPORT_LIST_RESULT, &rc);
    if (!r)
        return rc;
    const Dedupd__ExportListResult *l = r->export_list_result;
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_arr_begin(&j, "exports");
        for (size_t i = 0; i < l->n_exports; i++)
            json_export(&j, NULL, l->exports[i]);
        json_arr_end(&j);
        json_obj_end(&j);
    } else {
        printf("%-20s %10s %8s %5s %3s %5s\n", "NAME", "SIZE", "CHUNK", "DEDUP", "RO", "CONNS");
        for (size_t i = 0; i < l->n_exports; i++) {
            const Dedupd__ExportInfo *x = l->exports[i];
            printf("%-20s %10s %8s %5s %3s %5u%s\n", x->name, hsize(x->size), hsize(x->chunk_size),
                   x->dedup ? "on" : "off", x->read_only ? "yes" : "no", x->connections,
                   x->is_default ? "  (default)" : "");
        }
    }
    dedupd__response__free_unpacked(r, NULL);
    return DEDUPD_EXIT_OK;
}

static int
do_create(struct client *c, int argc, char **argv)
{
    static const struct option opts[] = {
        {"chunk-size", required_argument, NULL, 'b'},
        {"no-dedup", no_argument, NULL, 'n'},
        {"read-only", no_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = "export create";
    Dedupd__ExportCreateRequest q = DEDUPD__EXPORT_CREATE_REQUEST__INIT;
    uint64_t v;
    int o;
    optind = 0;
    while ((o = getopt_long(argc, argv, ":b:h", opts, NULL)) != -1) {
        switch (o) {
        case 'b':
            if (!parse_size_arg(cmd, "chunk size", optarg, &v))
                return DEDUPD_EXIT_USAGE;
            if (v < DEDUPD_CHUNK_MIN || v > DEDUPD_CHUNK_MAX || (v & (v - 1)))
                return usage_error(cmd, "chunk size must be a power of two, 4K..8M");
            q.chunk_size = (uint32_t) v;
            break;
        case 'n':
            q.no_dedup = true;
            break;
        case 'r':
            q.read_only = true;
            break;
        case 'j':
            c->json = true;
            break;
        case 'h':
            help(stdout);
            return DEDUPD_EXIT_OK;
        case ':':
            return usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error(cmd, "bad option '%s'", argv[optind - 1]);
        }
    }
    int rc = want_args(cmd, argc, 2, 2);
    if (rc >= 0)
        return rc;
    q.name = argv[optind];
    if (strlen(q.name) > DEDUPD_EXPORT_NAME_MAX)
        return usage_error(cmd, "export name longer than %d bytes", DEDUPD_EXPORT_NAME_MAX);
    if (!parse_size_arg(cmd, "size", argv[optind + 1], &q.size))
        return DEDUPD_EXIT_USAGE;
    if (q.size == 0)
        return usage_error(cmd, "size must not be 0");
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_CREATE;
    req.export_create = &q;
    return run_export_result(c, &req);
}

static int
do_delete(struct client *c, int argc, char **argv)
{
    int rc = sub_opts(c, "export delete", argc, argv);
    if (rc < 0)
        rc = want_args("export delete", argc, 1, 1);
    if (rc >= 0)
        return rc;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__ExportDeleteRequest q = DEDUPD__EXPORT_DELETE_REQUEST__INIT;
    q.name = argv[optind];
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_DELETE;
    req.export_delete = &q;
    Dedupd__Response *r = client_request(c, &req, 300, DEDUPD__RESPONSE__RESULT__NOT_SET, &rc);
    if (!r)
        return rc;
    dedupd__response__free_unpacked(r, NULL);
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_str(&j, "deleted", q.name);
        json_obj_end(&j);
    } else {
        printf("export '%s' deleted\n", q.name);
    }
    return DEDUPD_EXIT_OK;
}

static int
do_info(struct client *c, int argc, char **argv)
{
    int rc = sub_opts(c, "export info", argc, argv);
    if (rc < 0)
        rc = want_args("export info", argc, 0, 1);
    if (rc >= 0)
        return rc;
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__ExportInfoRequest q = DEDUPD__EXPORT_INFO_REQUEST__INIT;
    q.name = optind < argc ? argv[optind] : "";
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_INFO;
    req.export_info = &q;
    return run_export_result(c, &req);
}

static int
do_set(struct client *c, int argc, char **argv)
{
    const char *cmd = "export set";
    int rc = sub_opts(c, cmd, argc, argv);
    if (rc < 0)
        rc = want_args(cmd, argc, 2, 2);
    if (rc >= 0)
        return rc;
    Dedupd__ExportSetRequest q = DEDUPD__EXPORT_SET_REQUEST__INIT;
    q.name = argv[optind];
    const char *prop = argv[optind + 1];
    if (strcmp(prop, "dedup=on") == 0)
        q.dedup = DEDUPD__TOGGLE__ON;
    else if (strcmp(prop, "dedup=off") == 0)
        q.dedup = DEDUPD__TOGGLE__OFF;
    else
        return usage_error(cmd, "unknown property '%s' (dedup=on or dedup=off)", prop);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_SET;
    req.export_set = &q;
    return run_export_result(c, &req);
}

static int
do_clone(struct client *c, int argc, char **argv)
{
    int rc = sub_opts(c, "export clone", argc, argv);
    if (rc < 0)
        rc = want_args("export clone", argc, 2, 2);
    if (rc >= 0)
        return rc;
    Dedupd__ExportCloneRequest q = DEDUPD__EXPORT_CLONE_REQUEST__INIT;
    q.source = argv[optind];
    q.name = argv[optind + 1];
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_CLONE;
    req.export_clone = &q;
    return run_export_result(c, &req);
}

int
cmd_export(struct client *c, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct client *c, int argc, char **argv);
    } subs[] = {
        {"list", do_list}, {"ls", do_list},   {"create", do_create}, {"delete", do_delete},
        {"rm", do_delete}, {"info", do_info}, {"set", do_set},       {"clone", do_clone},
    };
    if (argc < 2)
        return usage_error("export", "missing subcommand (list, create, delete, info, set, clone)");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        help(stdout);
        return DEDUPD_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        if (strcmp(sub, subs[i].name) == 0)
            return subs[i].fn(c, argc - 1, argv + 1);
    return usage_error("export", "unknown subcommand '%s'", sub);
}
