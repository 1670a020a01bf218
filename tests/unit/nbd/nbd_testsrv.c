/* nbd_testsrv: the NBD server (dd_nbd) on the in-memory fake engine, so that real clients
 * (nbdinfo, nbdsh, nbdcopy, qemu-io, nbdfuse) can be pointed at the protocol code without
 * the storage modules. Built a second time as nbd_enginesrv (TESTSRV_REAL_ENGINE) on the
 * real engine in DIR, to run the same scripts on real storage without the control plane.
 * Used by tests/integration/nbd-*.sh when NBD_TESTSRV names it.
 *   nbd_testsrv -l ADDR [-l ADDR...] [-d DIR] [-e NAME:SIZE[:CHUNK[:ro]]...]
 *               [--max-connections N] [--max-inflight N] [--max-inflight-bytes N]
 *               [--log-level LEVEL]
 * Without -e: one export "default" of 1 GiB with 4 KiB chunks. The first -e is the default
 * export. Stops on SIGINT/SIGTERM. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#ifndef TESTSRV_REAL_ENGINE
#include "fakes/fake_engine_io.h"
#endif
#include "engine/engine.h"
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

struct export_spec {
    char *name;
    uint64_t size, chunk;
    bool ro;
};

static int
parse_export(char *spec, struct export_spec *x)
{
    x->name = strtok(spec, ":");
    char *size_s = strtok(NULL, ":");
    char *chunk_s = strtok(NULL, ":");
    char *ro = strtok(NULL, ":");
    x->size = 1ull << 30;
    x->chunk = 4096;
    x->ro = ro && strcmp(ro, "ro") == 0;
    if (!x->name || (size_s && size_parse(size_s, &x->size) < 0) ||
        (chunk_s && size_parse(chunk_s, &x->chunk) < 0) || x->chunk > UINT32_MAX)
        return -EINVAL;
    return 0;
}

#ifdef TESTSRV_REAL_ENGINE
static int
open_engine(const char *dir, struct export_spec *xs, int n, struct engine **out)
{
    struct engine_options o = {
        .data_dir = dir,
        .background_compaction = true,
        .default_export = xs[0].name,
        .default_export_size = xs[0].size,
    };
    int rc = engine_open(&o, out);
    for (int i = 1; i < n && rc == 0; i++) {
        rc = engine_export_create(*out, xs[i].name, xs[i].size, (uint32_t) xs[i].chunk,
                                  xs[i].ro ? ENGINE_EXPORT_READ_ONLY : 0, NULL);
        if (rc == -EEXIST)
            rc = 0;
    }
    return rc;
}

static void
close_engine(struct engine *e)
{
    /* The engine's counters, for scripts that check the dedup without dedupd-ctl. */
    struct engine_stats st;
    if (engine_stats(e, NULL, &st) == 0)
        log_info("nbd_enginesrv: stats logical_bytes=%" PRIu64 " unique_bytes=%" PRIu64
                 " dedup_hits=%" PRIu64 " dedup_misses=%" PRIu64,
                 st.logical_bytes, st.unique_bytes, st.dedup_hits, st.dedup_misses);
    engine_close(e);
}
#else
static int
open_engine(const char *dir, struct export_spec *xs, int n, struct engine **out)
{
    (void) dir;
    struct engine *e = fake_io_new();
    if (!e)
        return -ENOMEM;
    for (int i = 0; i < n; i++) {
        int rc = fake_io_add_export(e, xs[i].name, xs[i].size, (uint32_t) xs[i].chunk, xs[i].ro);
        if (rc < 0) {
            fake_io_free(e);
            return rc;
        }
    }
    *out = e;
    return 0;
}

static void
close_engine(struct engine *e)
{
    fake_io_free(e);
}
#endif

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"export", required_argument, NULL, 'e'},
        {"data-dir", required_argument, NULL, 'd'},
        {"max-connections", required_argument, NULL, 'C'},
        {"max-inflight", required_argument, NULL, 'I'},
        {"max-inflight-bytes", required_argument, NULL, 'B'},
        {"log-level", required_argument, NULL, 'L'},
        {NULL, 0, NULL, 0},
    };
    const char *listen[16];
    size_t n_listen = 0;
    struct nbd_limits lim = {0};
    struct engine *e = NULL;
    struct export_spec xs[16];
    const char *dir = NULL;
    int n_exports = 0, opt;
    while ((opt = getopt_long(argc, argv, "l:e:d:", opts, NULL)) != -1) {
        uint64_t v = 0;
        switch (opt) {
        case 'l':
            if (n_listen < 16)
                listen[n_listen++] = optarg;
            break;
        case 'e':
            if (n_exports == 16 || parse_export(optarg, &xs[n_exports]) < 0) {
                fprintf(stderr, "nbd_testsrv: bad export %s\n", optarg);
                return 2;
            }
            n_exports++;
            break;
        case 'd':
            dir = optarg;
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
    if (n_exports == 0) {
        static char def[] = "default";
        xs[0] = (struct export_spec){def, 1ull << 30, 4096, false};
        n_exports = 1;
    }
#ifdef TESTSRV_REAL_ENGINE
    if (!dir) {
        fprintf(stderr, "nbd_enginesrv: need -d DIR\n");
        return 2;
    }
#endif
    int rc = open_engine(dir, xs, n_exports, &e);
    if (rc < 0) {
        fprintf(stderr, "nbd_testsrv: cannot open the engine: %s\n", strerror(-rc));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    uv_loop_t loop;
    uv_loop_init(&loop);
    rc = nbd_server_start(&loop, e, listen, n_listen, &lim, &srv);
    if (rc < 0) {
        fprintf(stderr, "nbd_testsrv: cannot listen: %s\n", strerror(-rc));
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        close_engine(e);
        return 1;
    }
    uv_signal_init(&loop, &sigint_h);
    uv_signal_init(&loop, &sigterm_h);
    uv_signal_start(&sigint_h, on_signal, SIGINT);
    uv_signal_start(&sigterm_h, on_signal, SIGTERM);
    log_info("nbd_testsrv: listening");
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    close_engine(e);
    return 0;
}
