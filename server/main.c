/* dedupd: options + config -> open the engine -> start NBD and control servers -> run the
 * loop until SIGINT/SIGTERM -> stop servers, close the engine. No logic of its own. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "config/config.h"
#include "ctl/ctl.h"
#include "dedupd/errors.h"
#include "dedupd/version.h"
#include "engine/engine.h"
#include "nbd/nbd.h"
#include "util/log.h"

struct app {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    struct config cfg;
    struct engine *engine;
    struct nbd_server *nbd;
    struct ctl_server *ctl;
    uv_work_t pool_start;
    int pending_stops;
};

static void
pool_start_noop(uv_work_t *w)
{
    (void) w;
}

static void
close_signals(struct app *app)
{
    uv_close((uv_handle_t *) &app->sigint, NULL);
    uv_close((uv_handle_t *) &app->sigterm, NULL);
}

static void
server_stopped(void *arg)
{
    struct app *app = arg;
    if (--app->pending_stops == 0)
        close_signals(app);
}

static void
stop_servers(struct app *app)
{
    uv_signal_stop(&app->sigint);
    uv_signal_stop(&app->sigterm);
    app->pending_stops = 1; /* held by us until both stops are issued */
    if (app->ctl) {
        app->pending_stops++;
        ctl_server_stop(app->ctl, server_stopped, app);
        app->ctl = NULL;
    }
    if (app->nbd) {
        app->pending_stops++;
        nbd_server_stop(app->nbd, server_stopped, app);
        app->nbd = NULL;
    }
    server_stopped(app);
}

static void
on_signal(uv_signal_t *h, int signum)
{
    struct app *app = h->data;
    log_info("dedupd: %s received, shutting down", strsignal(signum));
    stop_servers(app);
}

static void
print_attach_hints(const struct config *cfg)
{
    for (size_t i = 0; i < cfg->n_listen; i++) {
        const char *a = cfg->listen[i];
        if (strncmp(a, "unix:", 5) == 0) {
            log_info("dedupd: attach: nbdinfo 'nbd+unix:///%s?socket=%s'", cfg->default_export,
                     a + 5);
            continue;
        }
        const char *colon = strrchr(a, ':');
        int host_len = colon ? (int) (colon - a) : (int) strlen(a);
        const char *port = colon ? colon + 1 : "10809";
        log_info("dedupd: attach: nbdinfo nbd://%s/%s", a, cfg->default_export);
        log_info("dedupd: attach: nbdfuse DIR/disk nbd://%s/%s &", a, cfg->default_export);
        log_info("dedupd: attach: nbd-client %.*s %s /dev/nbd0 -N %s", host_len, a, port,
                 cfg->default_export);
    }
    log_info("dedupd: control: dedupd-ctl -s %s status", cfg->control_path);
}

static int
run(struct app *app)
{
    struct config *cfg = &app->cfg;
    struct engine_options eo = {
        .data_dir = cfg->data_dir,
        .seg_bytes = cfg->seg_bytes,
        .block_cache_bytes = cfg->block_cache_bytes,
        .compact_live_ratio = cfg->compact_live_ratio,
        .compact_bytes_per_sec = cfg->compact_bytes_per_sec,
        .reserve_bytes = cfg->reserve_bytes,
        .background_compaction = cfg->background_compaction,
        .default_export = strcmp(cfg->default_export, "none") ? cfg->default_export : NULL,
        .default_export_size = cfg->default_export_size,
    };
    int rc = engine_open(&eo, &app->engine);
    if (rc < 0) {
        fprintf(stderr, "dedupd: cannot open data directory %s: %s\n", cfg->data_dir,
                strerror(-rc));
        return rc;
    }

    uv_loop_init(&app->loop);
    uv_signal_init(&app->loop, &app->sigint);
    uv_signal_init(&app->loop, &app->sigterm);
    app->sigint.data = app->sigterm.data = app;
    uv_signal_start(&app->sigint, on_signal, SIGINT);
    uv_signal_start(&app->sigterm, on_signal, SIGTERM);
    /* libuv starts its worker pool at the first queued job, and a new thread inherits its
     * creator's name: start it from here rather than from a connection loop, so that an
     * idle pool thread reads "dedupd", not "dedupd-loop0" (the engine names each one
     * "dedupd-worker" when it runs its first job). */
    uv_queue_work(&app->loop, &app->pool_start, pool_start_noop, NULL);

    struct nbd_limits limits = {
        .max_connections = cfg->max_connections,
        .max_inflight = cfg->max_inflight,
        .max_inflight_bytes = cfg->max_inflight_bytes,
        .loops = cfg->nbd_loops,
    };
    rc = nbd_server_start(&app->loop, app->engine, (const char *const *) cfg->listen, cfg->n_listen,
                          &limits, &app->nbd);
    if (rc == 0) {
        struct ctl_options co = {.socket_path = cfg->control_path, .group = cfg->control_group};
        rc = ctl_server_start(&app->loop, app->engine, app->nbd, &co, &app->ctl);
        if (rc < 0)
            fprintf(stderr, "dedupd: cannot start control socket %s: %s\n", cfg->control_path,
                    strerror(-rc));
    } else {
        fprintf(stderr, "dedupd: cannot listen: %s\n", strerror(-rc));
    }
    if (rc == 0) {
        for (size_t i = 0; i < cfg->n_listen; i++)
            log_info("dedupd: listening on %s", cfg->listen[i]);
        print_attach_hints(cfg);
    } else {
        stop_servers(app);
    }

    uv_run(&app->loop, UV_RUN_DEFAULT);
    uv_loop_close(&app->loop);
    engine_close(app->engine);
    app->engine = NULL;
    if (rc == 0)
        log_info("dedupd: stopped cleanly");
    return rc;
}

/* glibc malloc, tuned for RocksDB's allocation pattern. Its memtable arenas come in
 * multi-MiB blocks from many threads; with glibc's defaults (an arena per thread and an
 * mmap threshold that rises to the largest block freed) the freed blocks stayed in the
 * heaps, fragmented: resident memory grew with the data written, 100 -> 540 MiB over 20
 * GiB of unique writes (bench/scale.sh --only mem), past the 512 MiB budget. Two arenas
 * and a fixed 1 MiB mmap threshold (big blocks go back to the kernel when freed) kept it
 * at 175-230 MiB (peak 404 MiB) over 20 GiB. The MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_
 * environment variables still win, for experiments. */
static void
tune_malloc(void)
{
    if (!getenv("MALLOC_ARENA_MAX"))
        mallopt(M_ARENA_MAX, 2);
    if (!getenv("MALLOC_MMAP_THRESHOLD_"))
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

int
main(int argc, char **argv)
{
    tune_malloc();
    struct app app;
    memset(&app, 0, sizeof(app));
    int rc = config_load(&app.cfg, argc, argv, stderr);
    if (rc < 0)
        return rc == -EINVAL ? DEDUPD_EXIT_USAGE : DEDUPD_EXIT_RUNTIME;
    if (app.cfg.show_help) {
        config_usage(stdout, "dedupd");
        config_free(&app.cfg);
        return DEDUPD_EXIT_OK;
    }
    if (app.cfg.show_version) {
        printf("dedupd %s (data format %d, control protocol %d)\n", DEDUPD_VERSION,
               DEDUPD_FORMAT_VERSION, DEDUPD_CTL_PROTO_VERSION);
        config_free(&app.cfg);
        return DEDUPD_EXIT_OK;
    }
    enum log_level lv;
    if (log_level_parse(app.cfg.log_level, &lv) == 0)
        log_set_level(lv);
    signal(SIGPIPE, SIG_IGN); /* a vanished client is an EPIPE on its socket, not our death */

    rc = run(&app);
    config_free(&app.cfg);
    return rc < 0 ? DEDUPD_EXIT_RUNTIME : DEDUPD_EXIT_OK;
}
