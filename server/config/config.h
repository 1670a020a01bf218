/* config: dedupd's settings from defaults, an INI config file (read by libinih) and the
 * command line, in that order of precedence (the command line wins).
 * Owns: the strings in struct config (free with config_free). Knows no other module.
 * Threads: main thread at startup only. */
#ifndef DD_CONFIG_CONFIG_H
#define DD_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_LISTEN    16
#define CONFIG_MAX_NBD_LOOPS 64 /* [nbd] loops: more threads than this is a typo */

struct config {
    char *data_dir;
    char *listen[CONFIG_MAX_LISTEN]; /* "HOST:PORT" or "unix:PATH" */
    size_t n_listen;
    char *control_path;  /* default: DATA_DIR/ctl.sock */
    char *control_group; /* NULL: socket owned by our group, mode 0600 */
    char *log_level;
    char *config_file; /* the file read, if any */
    /* [export]: created on a fresh data directory */
    char *default_export;
    uint64_t default_export_size;
    /* [nbd] limits */
    uint32_t max_connections;
    uint32_t max_inflight;
    uint64_t max_inflight_bytes;
    uint32_t nbd_loops; /* event loops serving connections; 0 = one per CPU (nbd_limits) */
    /* [store] */
    uint64_t seg_bytes;
    uint64_t block_cache_bytes;
    double compact_live_ratio;
    uint64_t compact_bytes_per_sec;
    uint64_t reserve_bytes; /* free space new data leaves on the file system; 0 = default */
    bool background_compaction;
    bool show_help, show_version;
};

/* Fills cfg from defaults, then the file named by -c/--config (if any), then the other
 * options of argv. Returns 0, or -EINVAL after printing "PROG: reason" to err (usage error:
 * exit 2), or -EIO when the config file cannot be read (also printed). On error cfg is
 * freed. Prints nothing on success; show_help / show_version tell main what was asked. */
int config_load(struct config *cfg, int argc, char **argv, FILE *err);
void config_free(struct config *cfg);
/* The --help text. */
void config_usage(FILE *out, const char *prog);

#endif
