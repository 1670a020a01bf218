/* dedupd-ctl: global options, then one command. Commands arrive with the control plane;
 * until then only --help and --version work. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "dedupd/errors.h"
#include "dedupd/limits.h"
#include "dedupd/version.h"

static void
usage(FILE *out)
{
    fprintf(out,
            "Usage: dedupd-ctl [-s SOCKET] [--json] COMMAND [ARG]...\n"
            "Inspect and control a running dedupd.\n"
            "\n"
            "  -s, --socket PATH   control socket (default %s/%s)\n"
            "      --json          machine-readable output\n"
            "  -h, --help          show this help and exit\n"
            "  -V, --version       show the version and exit\n",
            DEDUPD_DEFAULT_DATA_DIR, DEDUPD_CTL_SOCKET_NAME);
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},         {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:s:hV", opts, NULL)) != -1) {
        switch (c) {
        case 's':
        case 'j':
            break;
        case 'h':
            usage(stdout);
            return DEDUPD_EXIT_OK;
        case 'V':
            printf("dedupd-ctl %s (control protocol %d)\n", DEDUPD_VERSION,
                   DEDUPD_CTL_PROTO_VERSION);
            return DEDUPD_EXIT_OK;
        default:
            fprintf(stderr, "dedupd-ctl: bad option '%s'\nTry 'dedupd-ctl --help'.\n",
                    argv[optind - 1]);
            return DEDUPD_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return DEDUPD_EXIT_USAGE;
    }
    fprintf(stderr, "dedupd-ctl: unknown command '%s'\n", argv[optind]);
    return DEDUPD_EXIT_USAGE;
}
