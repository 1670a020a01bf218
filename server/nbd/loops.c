/* nbd/loops.c: connection loops with a thread each. One event loop answers a cached read
 * itself (engine_read_nowait) but copies and checks every byte on its one core; handing
 * larger reads to the workers instead costs two thread hand-offs per request (futex
 * wakes, context switches: ~15% of a sequential read). With a loop per CPU, each
 * connection is served start to finish by one thread, as the peers' servers do, and
 * cached reads of any size stay on it (docs/benchmarks.md, item 33).
 *
 * The caller's loop keeps the listeners: an accepted socket's fd is duplicated into the
 * inbox of the loop thread with the fewest connections, which wraps it in its own handle
 * (nbd__conn_open). Stop: each thread is told (inbox flag + wake), stops its connections
 * as the server does (in-flight requests finish), closes its wake handle when the last
 * connection is gone so that its loop runs dry, and exits; the reaper, on the caller's
 * loop, joins it. The server is freed once every thread is joined.
 * Owns: the threads, their loops and buffer pools. */
#include <stdlib.h>
#include <unistd.h>

#include "nbd/internal.h"
#include "util/log.h"
#include "util/threadname.h"

void
nbd__loop_count(struct nbd_loop *lp, int delta)
{
    atomic_fetch_add(&lp->n_conns, (uint32_t) delta);
    atomic_fetch_add(&lp->srv->n_conns, (uint32_t) delta);
}

/* Loop thread: closes the wake handle once stopping and empty, so the loop runs dry. */
static void
maybe_exit(struct nbd_loop *lp)
{
    if (lp->stopping && lp->pending_closes == 0 && !uv_is_closing((uv_handle_t *) &lp->wake))
        uv_close((uv_handle_t *) &lp->wake, NULL);
}

void
nbd__loop_conn_gone(struct nbd_loop *lp)
{
    lp->pending_closes--;
    if (lp == &lp->srv->main)
        nbd__server_check_done(lp->srv);
    else
        maybe_exit(lp);
}

void
nbd__loop_stop_conns(struct nbd_loop *lp)
{
    lp->pending_closes++; /* none of the stops below may finish the loop mid-list */
    for (struct nbd_conn *c = lp->conns, *next; c; c = next) {
        next = c->next;
        nbd__conn_stop(c, NULL, true);
    }
    nbd__loop_conn_gone(lp);
}

/* Sockets that will never be served: closed and uncounted. */
static void
drop_handoffs(struct nbd_loop *lp, struct nbd_handoff *h)
{
    while (h) {
        struct nbd_handoff *next = h->next;
        close(h->fd);
        nbd__loop_count(lp, -1);
        free(h);
        h = next;
    }
}

/* What loop_init made besides the loop itself (closed by its thread, or by the caller). */
static void
loop_free(struct nbd_loop *lp)
{
    bufpool_destroy(lp->bufs);
    uv_mutex_destroy(&lp->mu);
}

static void
on_wake(uv_async_t *a)
{
    struct nbd_loop *lp = a->data;
    uv_mutex_lock(&lp->mu);
    struct nbd_handoff *list = lp->inbox;
    lp->inbox = NULL;
    bool stop = lp->stop;
    uv_mutex_unlock(&lp->mu);
    if (stop) {
        drop_handoffs(lp, list);
        list = NULL;
    }
    /* All opened in this one callback, so their order does not matter. */
    while (list) {
        struct nbd_handoff *next = list->next;
        int rc = nbd__conn_open(lp, list->fd, list->is_tcp);
        if (rc < 0)
            log_warn("nbd: cannot serve an accepted connection: %s", uv_strerror(rc));
        free(list);
        list = next;
    }
    if (stop && !lp->stopping) {
        lp->stopping = true;
        nbd__loop_stop_conns(lp);
    }
}

static void
run(void *arg)
{
    struct nbd_loop *lp = arg;
    threadname_set("loop%u", (unsigned) (lp - lp->srv->threads));
    uv_run(&lp->own, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&lp->own);
    if (rc < 0)
        log_warn("nbd: connection loop %u closed with handles open: %s",
                 (unsigned) (lp - lp->srv->threads), uv_strerror(rc));
    atomic_store(&lp->exited, true);
    /* The reaper stays open until this thread is joined, which is after this call. */
    uv_async_send(&lp->srv->reaper);
}

static void
on_reaper_closed(uv_handle_t *h)
{
    struct nbd_server *srv = h->data;
    srv->reaper_open = false;
    free(srv->threads);
    srv->threads = NULL;
    nbd__server_check_done(srv);
}

static void
close_reaper_if_done(struct nbd_server *srv)
{
    if (srv->stopping && srv->threads_running == 0 && srv->reaper_open &&
        !uv_is_closing((uv_handle_t *) &srv->reaper))
        uv_close((uv_handle_t *) &srv->reaper, on_reaper_closed);
}

static void
on_reaper(uv_async_t *a)
{
    struct nbd_server *srv = a->data;
    for (unsigned i = 0; i < srv->n_threads; i++) {
        struct nbd_loop *lp = &srv->threads[i];
        if (lp->joined || !atomic_load(&lp->exited))
            continue;
        uv_thread_join(&lp->thread);
        lp->joined = true;
        srv->threads_running--;
        drop_handoffs(lp, lp->inbox); /* none expected: hand-offs stop before the stop */
        lp->inbox = NULL;
        loop_free(lp);
    }
    close_reaper_if_done(srv);
}

/* Everything but the thread; on failure nothing is left to undo. */
static int
loop_init(struct nbd_server *srv, struct nbd_loop *lp, size_t idle_max)
{
    lp->srv = srv;
    lp->loop = &lp->own;
    lp->nowait_max = ENGINE_NOWAIT_MAX_BYTES;
    lp->bufs = bufpool_new(idle_max);
    if (!lp->bufs)
        return -ENOMEM;
    int rc = uv_mutex_init(&lp->mu);
    if (rc < 0) {
        bufpool_destroy(lp->bufs);
        return rc;
    }
    rc = uv_loop_init(&lp->own);
    if (rc == 0) {
        rc = uv_async_init(&lp->own, &lp->wake, on_wake);
        if (rc < 0)
            uv_loop_close(&lp->own);
    }
    if (rc < 0) {
        loop_free(lp);
        return rc;
    }
    lp->wake.data = lp;
    return 0;
}

int
nbd__loops_start(struct nbd_server *srv, unsigned n)
{
    srv->threads = calloc(n, sizeof(*srv->threads));
    if (!srv->threads)
        return -ENOMEM;
    int rc = uv_async_init(srv->loop, &srv->reaper, on_reaper);
    if (rc < 0) {
        free(srv->threads);
        srv->threads = NULL;
        return rc;
    }
    srv->reaper.data = srv;
    srv->reaper_open = true;
    /* The idle buffers of all loops together stay within what one loop keeps. */
    size_t idle = NBD_BUFPOOL_IDLE_MAX / n;
    for (unsigned i = 0; i < n; i++) {
        struct nbd_loop *lp = &srv->threads[i];
        rc = loop_init(srv, lp, idle < BUFPOOL_MAX ? BUFPOOL_MAX : idle);
        if (rc < 0)
            return rc;
        rc = uv_thread_create(&lp->thread, run, lp);
        if (rc < 0) {
            uv_close((uv_handle_t *) &lp->wake, NULL);
            uv_run(&lp->own, UV_RUN_NOWAIT);
            uv_loop_close(&lp->own);
            loop_free(lp);
            return rc;
        }
        srv->n_threads++;
        srv->threads_running++;
    }
    log_info("nbd: serving connections on %u event loops, one thread each", n);
    return 0;
}

void
nbd__loops_hand(struct nbd_server *srv, int fd, bool is_tcp)
{
    struct nbd_loop *lp = &srv->threads[0];
    for (unsigned i = 1; i < srv->n_threads; i++)
        if (atomic_load(&srv->threads[i].n_conns) < atomic_load(&lp->n_conns))
            lp = &srv->threads[i];
    struct nbd_handoff *h = malloc(sizeof(*h));
    if (!h) {
        log_err("nbd: out of memory handing over a connection");
        close(fd);
        return;
    }
    nbd__loop_count(lp, 1);
    *h = (struct nbd_handoff){.fd = fd, .is_tcp = is_tcp};
    uv_mutex_lock(&lp->mu);
    h->next = lp->inbox;
    lp->inbox = h;
    uv_mutex_unlock(&lp->mu);
    uv_async_send(&lp->wake);
}

void
nbd__loops_stop(struct nbd_server *srv)
{
    for (unsigned i = 0; i < srv->n_threads; i++) {
        struct nbd_loop *lp = &srv->threads[i];
        uv_mutex_lock(&lp->mu);
        lp->stop = true;
        uv_mutex_unlock(&lp->mu);
        uv_async_send(&lp->wake);
    }
    close_reaper_if_done(srv);
}

bool
nbd__loops_done(struct nbd_server *srv)
{
    return srv->threads_running == 0 && !srv->reaper_open;
}
