/* nbd_session: see nbd_session.h. One loop, one server and one fake engine for the life of
 * the process (fuzzers run millions of inputs); each input gets a fresh connection. The
 * client end of the socketpair lives on the same loop as a pipe that writes the input,
 * half-closes, and reads until the server hangs up — so nothing blocks and the loop returns
 * exactly when the session is over. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "fakes/fake_engine_io.h"
#include "nbd/internal.h"
#include "nbd_session.h"
#include "util/log.h"

static uv_loop_t loop;
static struct engine *eng;
static struct nbd_server *srv;
static char sink[65536];

static void
on_client_closed(uv_handle_t *h)
{
    free(h);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void) h;
    (void) suggested;
    *b = uv_buf_init(sink, sizeof(sink));
}

static void
on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void) b;
    if (n < 0)
        uv_close((uv_handle_t *) s, on_client_closed);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
    (void) status;
    free(req);
}

static void
on_written(uv_write_t *w, int status)
{
    (void) status;
    free(w);
}

static void
init_once(void)
{
    if (srv)
        return;
    log_set_level(LOG_LEVEL_ERROR);
    uv_loop_init(&loop);
    eng = fake_io_new();
    /* Small exports keep the fake's memory bounded whatever the input writes. */
    fake_io_add_export(eng, "default", 1 << 20, 4096, false);
    fake_io_add_export(eng, "ro", 64 << 10, 4096, true);
    fake_io_add_export(eng, "big", 4 << 20, 65536, false);
    struct nbd_limits lim = {.max_inflight = 8, .max_inflight_bytes = 4 << 20};
    if (nbd_server_start(&loop, eng, NULL, 0, &lim, &srv) < 0)
        abort();
}

void
nbd_session_run(const uint8_t *prefix, size_t prefix_len, const uint8_t *data, size_t len)
{
    init_once();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    uv_pipe_t *cl = malloc(sizeof(*cl));
    uv_write_t *w = malloc(sizeof(*w));
    uv_shutdown_t *sh = malloc(sizeof(*sh));
    if (!cl || !w || !sh)
        abort();
    uv_pipe_init(&loop, cl, 0);
    uv_pipe_open(cl, sv[0]);
    if (nbd__conn_adopt(srv, sv[1]) < 0)
        abort();
    uv_buf_t bufs[2] = {uv_buf_init((char *) prefix, (unsigned) prefix_len),
                        uv_buf_init((char *) data, (unsigned) len)};
    uv_write(w, (uv_stream_t *) cl, bufs, 2, on_written);
    uv_shutdown(sh, (uv_stream_t *) cl, on_shutdown);
    uv_read_start((uv_stream_t *) cl, on_alloc, on_read);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (nbd_server_connections(srv) != 0)
        abort(); /* the session must be over when the loop runs dry */
}
