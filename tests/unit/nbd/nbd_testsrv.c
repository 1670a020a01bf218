/* nbd_testsrv: the NBD server (dd_nbd) on the in-memory fake engine, so that real clients
 * (nbdinfo, nbdsh, nbdcopy, qemu-io, nbdfuse) can be pointed at the protocol code without
 * the storage modules. Used by tests/integration/nbd-*.sh when DEDUPD_NBD_TESTSRV is set.
 *   nbd_testsrv -l ADDR [-l ADDR...] [-e NAME:SIZE[:CHUNK[:ro]]...] [--max-connections N]
 *               [--max-inflight N] [--max-inflight-bytes N] [--log-level LEVEL]
 * Without -e: one export "default" of 1 GiB with 4 KiB chunks. Stops on SIGINT/SIGTERM. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fakes/fake_engine_io.h"
#include "nbd/nbd.h"
#include "util/log.h"
#include "util/size.h"

static uv_signal_t sigint_h, sigterm_h;
static struct nbd_server *srv;

static void
stopped(void *arg)
{
    (void) arg;
    uv_close((uv_handle_t *) &sigint_h, NULL);
    uv_close((uv_handle_t *) &sigterm_h, NULL);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    (void) h;
    log_info("nbd_testsrv: signal %d, stopping", signum);
    uv_signal_stop(&sigint_h);
    uv_signal_stop(&sigterm_h);
    nbd_server_stop(srv, stopped, NULL);
    srv = NULL;
}

static int
add_export(struct engine *e, char *spec)
{
    char *name = strtok(spec, ":");
    char *size_s = strtok(NULL, ":");
    char *chunk_s = strtok(NULL, ":");
    char *ro = strtok(NULL, ":");
    uint64_t size = 1ull << 30, chunk = 4096;
    if (!name || (size_s && size_parse(size_s, &size) < 0) ||
        (chunk_s && size_parse(chunk_s, &chunk) < 0) || chunk > UINT32_MAX)
        return -EINVAL;
    return fake_io_add_export(e, name, size, (uint32_t) chunk, ro && strcmp(ro, "ro") == 0);
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"export", required_argument, NULL, 'e'},
        {"max-connections", required_argument, NULL, 'C'},
        {"max-inflight", required_argument, NULL, 'I'},
        {"max-inflight-bytes", required_argument, NULL, 'B'},
        {"log-level", required_argument, NULL, 'L'},
        {NULL, 0, NULL, 0},
    };
    const char *listen[16];
    size_t n_listen = 0;
    struct nbd_limits lim = {0};
    struct engine *e = fake_io_new();
    int n_exports = 0, opt;
    while ((opt = getopt_long(argc, argv, "l:e:", opts, NULL)) != -1) {
        uint64_t v = 0;
        switch (opt) {
        case 'l':
            if (n_listen < 16)
                listen[n_listen++] = optarg;
            break;
        case 'e':
            if (add_export(e, optarg) < 0) {
                fprintf(stderr, "nbd_testsrv: bad export %s\n", optarg);
                return 2;
            }
            n_exports++;
            break;
        case 'C':
        case 'I':
        case 'B':
            if (size_parse(optarg, &v) < 0) {
                fprintf(stderr, "nbd_testsrv: bad number %s\n", optarg);
                return 2;
            }
            if (opt == 'C')
                lim.max_connections = (uint32_t) v;
            else if (opt == 'I')
                lim.max_inflight = (uint32_t) v;
            else
                lim.max_inflight_bytes = v;
            break;
        case 'L': {
            enum log_level lv;
            if (log_level_parse(optarg, &lv) == 0)
                log_set_level(lv);
            break;
        }
        default:
            return 2;
        }
    }
    if (n_listen == 0) {
        fprintf(stderr, "nbd_testsrv: need -l ADDR\n");
        return 2;
    }
    if (n_exports == 0)
        fake_io_add_export(e, "default", 1ull << 30, 4096, false);
    signal(SIGPIPE, SIG_IGN);

    uv_loop_t loop;
    uv_loop_init(&loop);
    int rc = nbd_server_start(&loop, e, listen, n_listen, &lim, &srv);
    if (rc < 0) {
        fprintf(stderr, "nbd_testsrv: cannot listen: %s\n", strerror(-rc));
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        fake_io_free(e);
        return 1;
    }
    uv_signal_init(&loop, &sigint_h);
    uv_signal_init(&loop, &sigterm_h);
    uv_signal_start(&sigint_h, on_signal, SIGINT);
    uv_signal_start(&sigterm_h, on_signal, SIGTERM);
    log_info("nbd_testsrv: listening");
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    fake_io_free(e);
    return 0;
}
