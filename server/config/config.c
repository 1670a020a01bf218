/* config: defaults, then the INI file, then the command line. The file is parsed by libinih
 * (one callback per "name = value"); values are validated here with the same setters the
 * command line uses, so both give the same errors. */
#include "config/config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include "dedupd/limits.h"
#include "util/log.h"
#include "util/size.h"

enum {
    OPT_CONTROL = 256,
    OPT_CONTROL_GROUP,
    OPT_LOG_LEVEL,
    OPT_DEFAULT_EXPORT,
    OPT_DEFAULT_EXPORT_SIZE,
    OPT_MAX_CONNECTIONS,
    OPT_LOOPS,
    OPT_SEGMENT_SIZE,
    OPT_CACHE_SIZE,
    OPT_NO_COMPACTION,
};

static const struct option long_options[] = {
    {"data-dir", required_argument, NULL, 'd'},
    {"listen", required_argument, NULL, 'l'},
    {"config", required_argument, NULL, 'c'},
    {"control", required_argument, NULL, OPT_CONTROL},
    {"control-group", required_argument, NULL, OPT_CONTROL_GROUP},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"default-export", required_argument, NULL, OPT_DEFAULT_EXPORT},
    {"default-export-size", required_argument, NULL, OPT_DEFAULT_EXPORT_SIZE},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
    {"loops", required_argument, NULL, OPT_LOOPS},
    {"segment-size", required_argument, NULL, OPT_SEGMENT_SIZE},
    {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
    {"no-compaction", no_argument, NULL, OPT_NO_COMPACTION},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

void
config_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [OPTION]...\n"
            "Serve deduplicated block devices over NBD.\n"
            "\n"
            "  -d, --data-dir DIR          store directory (default %s)\n"
            "  -l, --listen ADDR           listen on HOST:PORT, [V6]:PORT or unix:PATH;\n"
            "                              repeatable (default %s:%d)\n"
            "  -c, --config FILE           read settings from an INI file first;\n"
            "                              command-line options override it\n"
            "      --control PATH          control socket (default DATA_DIR/%s)\n"
            "      --control-group GROUP   group allowed to use the control socket\n"
            "      --log-level LEVEL       error, warn, info (default) or debug\n"
            "      --default-export NAME   export created in a fresh store (default %s;\n"
            "                              'none' creates none)\n"
            "      --default-export-size SIZE  its size, thin-provisioned (default 16G)\n"
            "      --max-connections N     NBD client connections at once (default 256)\n"
            "      --loops N               event loop threads serving NBD connections\n"
            "                              (default one per CPU, at most 4; 1 to 64)\n"
            "      --segment-size SIZE     seal segment files at this size (default 256M)\n"
            "      --cache-size SIZE       RocksDB block cache (default 64M)\n"
            "      --no-compaction         no background compaction (dedupd-ctl gc still works)\n"
            "  -h, --help                  show this help and exit\n"
            "  -V, --version               show the version and exit\n"
            "\n"
            "Sizes take K, M, G, T suffixes (powers of 1024).\n"
            "Exit status: 0 clean shutdown, 1 runtime error, 2 usage error.\n"
            "Manage the running server with dedupd-ctl; see dedupd-ctl --help.\n",
            prog, DEDUPD_DEFAULT_DATA_DIR, DEDUPD_DEFAULT_HOST, DEDUPD_DEFAULT_PORT,
            DEDUPD_CTL_SOCKET_NAME, DEDUPD_DEFAULT_EXPORT);
}

static int
set_str(char **dst, const char *v)
{
    char *s = strdup(v);
    if (!s)
        return -ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

static int
add_listen(struct config *cfg, const char *v)
{
    if (cfg->n_listen == CONFIG_MAX_LISTEN)
        return -E2BIG;
    if (!*v)
        return -EINVAL;
    cfg->listen[cfg->n_listen] = strdup(v);
    if (!cfg->listen[cfg->n_listen])
        return -ENOMEM;
    cfg->n_listen++;
    return 0;
}

static int
set_u32(uint32_t *dst, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || x == 0 || x > UINT32_MAX)
        return -EINVAL;
    *dst = (uint32_t) x;
    return 0;
}

static int
set_loops(struct config *cfg, const char *v)
{
    uint32_t n;
    if (set_u32(&n, v) < 0 || n > CONFIG_MAX_NBD_LOOPS)
        return -EINVAL;
    cfg->nbd_loops = n;
    return 0;
}

static int
set_bool(bool *dst, const char *v)
{
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
        !strcmp(v, "1")) {
        *dst = true;
        return 0;
    }
    if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
        !strcmp(v, "0")) {
        *dst = false;
        return 0;
    }
    return -EINVAL;
}

static int
set_ratio(double *dst, const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x > 0.0 && x <= 1.0))
        return -EINVAL;
    *dst = x;
    return 0;
}

static int
set_log_level(struct config *cfg, const char *v)
{
    enum log_level lv;
    if (log_level_parse(v, &lv) < 0)
        return -EINVAL;
    return set_str(&cfg->log_level, v);
}

static int
set_export_size(struct config *cfg, const char *v)
{
    uint64_t sz;
    if (size_parse(v, &sz) < 0 || sz == 0 || sz > DEDUPD_EXPORT_SIZE_MAX)
        return -EINVAL;
    cfg->default_export_size = sz;
    return 0;
}

static int
set_size_min(uint64_t *dst, const char *v, uint64_t min)
{
    uint64_t sz;
    if (size_parse(v, &sz) < 0 || sz < min)
        return -EINVAL;
    *dst = sz;
    return 0;
}

/* One "section.name = value" from the file. Returns 0 or -errno; *known false if the key
 * is not one we know. */
static int
apply_key(struct config *cfg, const char *section, const char *name, const char *v, bool *known)
{
    *known = true;
    if (!strcmp(section, "server")) {
        if (!strcmp(name, "data_dir"))
            return set_str(&cfg->data_dir, v);
        if (!strcmp(name, "listen"))
            return add_listen(cfg, v);
        if (!strcmp(name, "control"))
            return set_str(&cfg->control_path, v);
        if (!strcmp(name, "control_group"))
            return set_str(&cfg->control_group, v);
        if (!strcmp(name, "log_level"))
            return set_log_level(cfg, v);
    } else if (!strcmp(section, "export")) {
        if (!strcmp(name, "default_name"))
            return set_str(&cfg->default_export, v);
        if (!strcmp(name, "default_size"))
            return set_export_size(cfg, v);
    } else if (!strcmp(section, "nbd")) {
        if (!strcmp(name, "max_connections"))
            return set_u32(&cfg->max_connections, v);
        if (!strcmp(name, "max_inflight"))
            return set_u32(&cfg->max_inflight, v);
        if (!strcmp(name, "max_inflight_bytes"))
            return set_size_min(&cfg->max_inflight_bytes, v, DEDUPD_NBD_MAX_PAYLOAD);
        if (!strcmp(name, "loops"))
            return set_loops(cfg, v);
    } else if (!strcmp(section, "store")) {
        if (!strcmp(name, "segment_size"))
            return set_size_min(&cfg->seg_bytes, v, 1u << 20);
        if (!strcmp(name, "block_cache"))
            return set_size_min(&cfg->block_cache_bytes, v, 1u << 20);
        if (!strcmp(name, "compact_live_ratio"))
            return set_ratio(&cfg->compact_live_ratio, v);
        if (!strcmp(name, "compact_rate"))
            return set_size_min(&cfg->compact_bytes_per_sec, v, 1u << 20);
        if (!strcmp(name, "background_compaction"))
            return set_bool(&cfg->background_compaction, v);
        if (!strcmp(name, "reserve_space"))
            return set_size_min(&cfg->reserve_bytes, v, 1u << 20);
    }
    *known = false;
    return -EINVAL;
}

struct ini_ctx {
    struct config *cfg;
    FILE *err;
    const char *prog;
    const char *path;
    int rc;
};

static int
on_ini_line(void *user, const char *section, const char *name, const char *value)
{
    struct ini_ctx *c = user;
    bool known;
    int rc = apply_key(c->cfg, section, name, value, &known);
    if (rc < 0) {
        if (!known)
            fprintf(c->err, "%s: %s: unknown setting [%s] %s\n", c->prog, c->path, section, name);
        else
            fprintf(c->err, "%s: %s: bad value for [%s] %s: '%s'\n", c->prog, c->path, section,
                    name, value);
        c->rc = -EINVAL;
        return 0; /* inih: stop at the first error */
    }
    return 1;
}

static void
set_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->default_export_size = DEDUPD_DEFAULT_EXPORT_SIZE;
    cfg->background_compaction = true;
}

/* Fills the defaults that depend on other settings, after file and command line. */
static int
finish_defaults(struct config *cfg)
{
    if (!cfg->data_dir && set_str(&cfg->data_dir, DEDUPD_DEFAULT_DATA_DIR) < 0)
        return -ENOMEM;
    if (cfg->n_listen == 0) {
        char addr[64];
        snprintf(addr, sizeof(addr), "%s:%d", DEDUPD_DEFAULT_HOST, DEDUPD_DEFAULT_PORT);
        if (add_listen(cfg, addr) < 0)
            return -ENOMEM;
    }
    if (!cfg->control_path) {
        size_t n = strlen(cfg->data_dir) + sizeof(DEDUPD_CTL_SOCKET_NAME) + 2;
        cfg->control_path = malloc(n);
        if (!cfg->control_path)
            return -ENOMEM;
        snprintf(cfg->control_path, n, "%s/%s", cfg->data_dir, DEDUPD_CTL_SOCKET_NAME);
    }
    if (!cfg->log_level && set_str(&cfg->log_level, "info") < 0)
        return -ENOMEM;
    if (!cfg->default_export && set_str(&cfg->default_export, DEDUPD_DEFAULT_EXPORT) < 0)
        return -ENOMEM;
    return 0;
}

/* Options of the command line, kept apart so that they can be applied after the file. */
struct cli_opt {
    int code;
    const char *arg;
};

int
config_load(struct config *cfg, int argc, char **argv, FILE *err)
{
    const char *prog = argc > 0 ? argv[0] : "dedupd";
    const char *slash = strrchr(prog, '/');
    if (slash)
        prog = slash + 1;
    set_defaults(cfg);

    struct cli_opt *cli = calloc((size_t) argc + 1, sizeof(*cli));
    if (!cli)
        return -ENOMEM;
    size_t n_cli = 0;
    const char *config_path = NULL;
    int rc = 0;

    optind = 0; /* glibc: full re-initialisation, so config_load can run twice (tests) */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":d:l:c:hV", long_options, NULL)) != -1) {
        if (c == '?') {
            if (optopt)
                fprintf(err, "%s: unknown option '-%c'\n", prog, optopt);
            else
                fprintf(err, "%s: unknown option '%s'\n", prog, argv[optind - 1]);
            fprintf(err, "Try '%s --help' for more information.\n", prog);
            rc = -EINVAL;
            goto out;
        }
        if (c == ':') {
            fprintf(err, "%s: option '%s' needs an argument\n", prog, argv[optind - 1]);
            rc = -EINVAL;
            goto out;
        }
        if (c == 'h')
            cfg->show_help = true;
        else if (c == 'V')
            cfg->show_version = true;
        else if (c == 'c')
            config_path = optarg;
        else
            cli[n_cli++] = (struct cli_opt){c, optarg};
    }
    if (optind < argc) {
        fprintf(err, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        rc = -EINVAL;
        goto out;
    }
    if (cfg->show_help || cfg->show_version)
        goto out;

    if (config_path) {
        if (set_str(&cfg->config_file, config_path) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        struct ini_ctx ctx = {cfg, err, prog, config_path, 0};
        int line = ini_parse(config_path, on_ini_line, &ctx);
        if (line == -1) {
            fprintf(err, "%s: cannot read config file %s: %s\n", prog, config_path,
                    strerror(errno));
            rc = -EIO;
            goto out;
        }
        if (ctx.rc < 0) {
            rc = ctx.rc;
            goto out;
        }
        if (line > 0) {
            fprintf(err, "%s: %s:%d: syntax error\n", prog, config_path, line);
            rc = -EINVAL;
            goto out;
        }
    }

    /* -l on the command line replaces the file's listen list rather than adding to it. */
    bool cli_listen = false;
    for (size_t i = 0; i < n_cli; i++) {
        const char *v = cli[i].arg;
        const char *what = NULL;
        switch (cli[i].code) {
        case 'd':
            rc = set_str(&cfg->data_dir, v);
            what = "--data-dir";
            break;
        case 'l':
            if (!cli_listen) {
                for (size_t j = 0; j < cfg->n_listen; j++)
                    free(cfg->listen[j]);
                cfg->n_listen = 0;
                cli_listen = true;
            }
            rc = add_listen(cfg, v);
            what = "--listen";
            break;
        case OPT_CONTROL:
            rc = set_str(&cfg->control_path, v);
            what = "--control";
            break;
        case OPT_CONTROL_GROUP:
            rc = set_str(&cfg->control_group, v);
            what = "--control-group";
            break;
        case OPT_LOG_LEVEL:
            rc = set_log_level(cfg, v);
            what = "--log-level";
            break;
        case OPT_DEFAULT_EXPORT:
            rc = set_str(&cfg->default_export, v);
            what = "--default-export";
            break;
        case OPT_DEFAULT_EXPORT_SIZE:
            rc = set_export_size(cfg, v);
            what = "--default-export-size";
            break;
        case OPT_MAX_CONNECTIONS:
            rc = set_u32(&cfg->max_connections, v);
            what = "--max-connections";
            break;
        case OPT_LOOPS:
            rc = set_loops(cfg, v);
            what = "--loops";
            break;
        case OPT_SEGMENT_SIZE:
            rc = set_size_min(&cfg->seg_bytes, v, 1u << 20);
            what = "--segment-size";
            break;
        case OPT_CACHE_SIZE:
            rc = set_size_min(&cfg->block_cache_bytes, v, 1u << 20);
            what = "--cache-size";
            break;
        case OPT_NO_COMPACTION:
            cfg->background_compaction = false;
            break;
        }
        if (rc < 0) {
            fprintf(err, "%s: bad value for %s: '%s'\n", prog, what ? what : "option", v);
            rc = -EINVAL;
            goto out;
        }
    }
    rc = finish_defaults(cfg);

out:
    free(cli);
    if (rc < 0)
        config_free(cfg);
    return rc;
}

void
config_free(struct config *cfg)
{
    free(cfg->data_dir);
    for (size_t i = 0; i < cfg->n_listen; i++)
        free(cfg->listen[i]);
    free(cfg->control_path);
    free(cfg->control_group);
    free(cfg->log_level);
    free(cfg->config_file);
    free(cfg->default_export);
    memset(cfg, 0, sizeof(*cfg));
}
