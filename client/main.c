/* dedupd-ctl: global options, then one command from the table below. Each command parses
 * its own options (and --help) in cmd_<group>.c, sends one request over the control socket
 * and prints a table, or JSON with --json. Exit codes: 0 ok, 1 runtime or server error,
 * 2 usage (include/dedupd/errors.h). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "dedupd/errors.h"
#include "dedupd/limits.h"
#include "dedupd/version.h"

static const struct command {
    const char *name;
    int (*fn)(struct client *c, int argc, char **argv);
    const char *summary;
} commands[] = {
    {"status", cmd_status, "is dedup on, settings, index size and what it would need"},
    {"stats", cmd_stats, "space saved: logical vs unique bytes, dedup ratio, per export"},
    {"enable", cmd_enable, "turn dedup on, or change back-end, hash, chunk size, limits"},
    {"disable", cmd_disable, "turn dedup off (persisted, applies at once)"},
    {"export", cmd_export, "list | create | delete | info | set | clone exports"},
    {"gc", cmd_gc, "reclaim the space of freed chunks now (compaction)"},
    {"scrub", cmd_scrub, "read every chunk and verify checksums and hashes"},
    {"check", cmd_check, "verify metadata invariants (--repair)"},
};

static void
usage(FILE *out)
{
    fprintf(out,
            "Usage: %s [-s SOCKET] [--json] COMMAND [ARG]...\n"
            "Inspect and control a running dedupd (deduplicating NBD block server).\n"
            "\n"
            "Commands:\n",
            PROG);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n"
            "Options:\n"
            "  -s, --socket PATH   control socket (default %s/%s)\n"
            "      --json          machine-readable output on stdout\n"
            "  -h, --help          show this help and exit\n"
            "  -V, --version       show the version and exit\n"
            "\n"
            "Examples:\n"
            "  %s stats                      how much space dedup is saving\n"
            "  %s disable / enable           turn dedup off and on again\n"
            "  %s export create vm1 20G      add an export; 'export delete vm1' removes it\n"
            "  %s gc                         reclaim space now\n"
            "Run '%s COMMAND --help' for a command's options.\n"
            "Exit status: 0 ok, 1 error reported by the server or the connection, 2 bad usage.\n",
            DEDUPD_DEFAULT_DATA_DIR, DEDUPD_CTL_SOCKET_NAME, PROG, PROG, PROG, PROG, PROG);
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct client c = {
        .socket_path = DEDUPD_DEFAULT_DATA_DIR "/" DEDUPD_CTL_SOCKET_NAME,
        .tty = isatty(STDERR_FILENO),
        .fd = -1,
    };
    int o;
    opterr = 0;
    /* "+": stop at the command word; its options are its own. */
    while ((o = getopt_long(argc, argv, "+:s:hV", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            c.socket_path = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            usage(stdout);
            return DEDUPD_EXIT_OK;
        case 'V':
            printf("%s %s (control protocol %d)\n", PROG, DEDUPD_VERSION, DEDUPD_CTL_PROTO_VERSION);
            return DEDUPD_EXIT_OK;
        case ':':
            fprintf(stderr, "%s: option '%s' needs a value\nTry '%s --help'.\n", PROG,
                    argv[optind - 1], PROG);
            return DEDUPD_EXIT_USAGE;
        default:
            fprintf(stderr, "%s: bad option '%s'\nTry '%s --help'.\n", PROG, argv[optind - 1],
                    PROG);
            return DEDUPD_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return DEDUPD_EXIT_USAGE;
    }
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        if (optind + 1 >= argc) {
            usage(stdout);
            return DEDUPD_EXIT_OK;
        }
        /* "help CMD" = "CMD --help" */
        name = argv[optind + 1];
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
            if (strcmp(name, commands[i].name) == 0) {
                char *av[] = {(char *) name, "--help", NULL};
                return commands[i].fn(&c, 2, av);
            }
        }
        fprintf(stderr, "%s: unknown command '%s'\nTry '%s --help'.\n", PROG, name, PROG);
        return DEDUPD_EXIT_USAGE;
    }
    signal(SIGPIPE, SIG_IGN); /* a server that goes away is an EPIPE, reported */
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(name, commands[i].name) == 0) {
            int rc = commands[i].fn(&c, argc - optind, argv + optind);
            client_close(&c);
            return rc;
        }
    }
    fprintf(stderr, "%s: unknown command '%s'\nTry '%s --help'.\n", PROG, name, PROG);
    return DEDUPD_EXIT_USAGE;
}
