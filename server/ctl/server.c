/* ctl server: the control socket's listener, connections and framing, on the loop thread.
 * Owns the socket file (created 0600, or 0660 and chowned to a configured group; a stale
 * file left by a dead server is removed, a live server on it makes start fail), each
 * connection's receive buffer and idle timer, and stop sequencing.
 * Knows nothing of commands: complete frames go to ctl__dispatch().
 *
 * Connection states: READING (timer armed; bytes accumulate until a whole frame is in) ->
 * SERVING (a call runs on a worker; reading and timer paused) -> WRITING (final response
 * queued; the next frame is served once it is written, so a client that never reads holds
 * one response at most) -> READING ... Any state -> CLOSING on EOF, error, idle timeout,
 * an oversized frame, or stop. A silent client is dropped after idle_timeout_ms. */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl/internal.h"
#include "dedupd/ctl_frame.h"
#include "dedupd/limits.h"
#include "util/log.h"
#include "util/unixsock.h"

/* Bytes asked of the kernel per read: small requests arrive in one read. */
#define READ_CHUNK (64U << 10)

struct write_req {
    uv_write_t req;
    struct ctl_conn *conn;
    uint8_t data[];
};

static void conn_close(struct ctl_conn *conn);
static void serve_buffered(struct ctl_conn *conn);
static void start_reading(struct ctl_conn *conn);

static void
maybe_finish_stop(struct ctl_server *srv)
{
    if (!srv->stopping || srv->listening || srv->conns || srv->n_calls)
        return;
    unlink(srv->path);
    log_info("ctl: control socket %s closed", srv->path);
    void (*done)(void *) = srv->stop_done;
    void *arg = srv->stop_arg;
    free(srv->path);
    free(srv);
    if (done)
        done(arg);
}

void
ctl__call_freed(struct ctl_server *srv)
{
    srv->n_calls--;
    maybe_finish_stop(srv);
}

/* ---- writing ---- */

static void
on_write(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *) req;
    struct ctl_conn *conn = w->conn;
    free(w);
    conn->writes--;
    if (conn->closing)
        return;
    if (status < 0) {
        log_debug("ctl: write failed: %s", uv_strerror(status));
        conn_close(conn);
        return;
    }
    if (conn->writes == 0 && conn->close_after_write) {
        conn_close(conn);
        return;
    }
    /* WRITING -> READING: the previous response is out, serve what the client sent next. */
    if (conn->writes == 0 && !conn->call)
        serve_buffered(conn);
}

void
ctl__send(struct ctl_conn *conn, const Dedupd__Response *resp, bool close_after)
{
    if (conn->closing)
        return;
    Dedupd__Response too_big;
    size_t len = dedupd__response__get_packed_size(resp);
    if (len > DEDUPD_CTL_MAX_MSG) {
        log_warn("ctl: response of %zu bytes exceeds the %u-byte limit", len, DEDUPD_CTL_MAX_MSG);
        ctl__error_response(&too_big, -EMSGSIZE, "response exceeds the control message limit");
        resp = &too_big;
        len = dedupd__response__get_packed_size(resp);
    }
    struct write_req *w = malloc(sizeof(*w) + DEDUPD_CTL_FRAME_HDR + len);
    if (!w) {
        log_err("ctl: out of memory for a %zu-byte response", len);
        conn_close(conn);
        return;
    }
    w->conn = conn;
    ctl_frame_put_len(w->data, (uint32_t) len);
    dedupd__response__pack(resp, w->data + DEDUPD_CTL_FRAME_HDR);
    uv_buf_t b = uv_buf_init((char *) w->data, (unsigned) (DEDUPD_CTL_FRAME_HDR + len));
    int rc = uv_write(&w->req, (uv_stream_t *) &conn->pipe, &b, 1, on_write);
    if (rc < 0) {
        free(w);
        log_debug("ctl: write failed: %s", uv_strerror(rc));
        conn_close(conn);
        return;
    }
    conn->writes++;
    if (close_after)
        conn->close_after_write = true;
}

size_t
ctl__backlog(struct ctl_conn *conn)
{
    return uv_stream_get_write_queue_size((uv_stream_t *) &conn->pipe);
}

/* ---- closing ---- */

static void
conn_maybe_free(struct ctl_conn *conn)
{
    if (conn->open_handles || conn->call)
        return;
    struct ctl_server *srv = conn->srv;
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        srv->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    srv->n_conns--;
    free(conn->buf);
    free(conn);
    maybe_finish_stop(srv);
}

static void
on_conn_handle_closed(uv_handle_t *h)
{
    struct ctl_conn *conn = h->data;
    conn->open_handles--;
    conn_maybe_free(conn);
}

static void
conn_close(struct ctl_conn *conn)
{
    if (conn->closing)
        return;
    conn->closing = true;
    if (conn->call) {
        /* The handler keeps running on its worker; its result has nowhere to go. */
        atomic_store(&conn->call->cancelled, true);
        conn->call->conn = NULL;
        conn->call = NULL;
    }
    uv_close((uv_handle_t *) &conn->pipe, on_conn_handle_closed);
    uv_close((uv_handle_t *) &conn->timer, on_conn_handle_closed);
}

void
ctl__call_ended(struct ctl_conn *conn)
{
    conn->call = NULL;
    if (conn->closing) {
        conn_maybe_free(conn);
        return;
    }
    if (conn->writes == 0)
        serve_buffered(conn);
}

/* ---- reading ---- */

static void
on_idle(uv_timer_t *t)
{
    struct ctl_conn *conn = t->data;
    log_info("ctl: client silent for %u ms, closing", conn->srv->idle_timeout_ms);
    conn_close(conn);
}

static void
arm_timer(struct ctl_conn *conn)
{
    uv_timer_start(&conn->timer, on_idle, conn->srv->idle_timeout_ms, 0);
}

/* Serves every complete frame in the buffer, one at a time: stops when a call starts (the
 * rest waits for ctl__call_ended) or a response is being written. */
static void
serve_buffered(struct ctl_conn *conn)
{
    while (!conn->closing && !conn->call && conn->writes == 0) {
        if (conn->len < DEDUPD_CTL_FRAME_HDR)
            break;
        uint32_t msg_len = ctl_frame_get_len(conn->buf);
        if (msg_len > DEDUPD_CTL_MAX_MSG) {
            /* We cannot skip a frame we refuse to buffer: answer, then close. */
            char m[128];
            snprintf(m, sizeof(m), "request of %" PRIu32 " bytes exceeds the %u-byte limit",
                     msg_len, DEDUPD_CTL_MAX_MSG);
            log_warn("ctl: %s; closing the connection", m);
            Dedupd__Response resp;
            ctl__error_response(&resp, -EMSGSIZE, m);
            uv_read_stop((uv_stream_t *) &conn->pipe);
            arm_timer(conn); /* a client that does not read the answer is still dropped */
            ctl__send(conn, &resp, true);
            return;
        }
        if (conn->len < DEDUPD_CTL_FRAME_HDR + (size_t) msg_len)
            break;
        bool started = ctl__dispatch(conn, conn->buf + DEDUPD_CTL_FRAME_HDR, msg_len);
        size_t used = DEDUPD_CTL_FRAME_HDR + (size_t) msg_len;
        memmove(conn->buf, conn->buf + used, conn->len - used);
        conn->len -= used;
        if (started) {
            /* SERVING: the worker may take minutes (gc); the client is not idle. */
            uv_read_stop((uv_stream_t *) &conn->pipe);
            uv_timer_stop(&conn->timer);
            return;
        }
    }
    if (conn->closing)
        return;
    if (conn->call || conn->writes) {
        uv_read_stop((uv_stream_t *) &conn->pipe);
        /* WRITING still times out: a client that never reads must not pin us. */
        if (!conn->call)
            arm_timer(conn);
        return;
    }
    start_reading(conn);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *out)
{
    (void) suggested;
    struct ctl_conn *conn = h->data;
    size_t want = conn->len + READ_CHUNK;
    if (want > conn->cap) {
        uint8_t *nb = realloc(conn->buf, want);
        if (!nb) {
            *out = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
            return;
        }
        conn->buf = nb;
        conn->cap = want;
    }
    *out = uv_buf_init((char *) conn->buf + conn->len, READ_CHUNK);
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    (void) b;
    struct ctl_conn *conn = s->data;
    if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("ctl: read failed: %s", uv_strerror((int) nread));
        conn_close(conn);
        return;
    }
    if (nread == 0)
        return;
    conn->len += (size_t) nread;
    arm_timer(conn);
    serve_buffered(conn);
}

static void
start_reading(struct ctl_conn *conn)
{
    arm_timer(conn);
    int rc = uv_read_start((uv_stream_t *) &conn->pipe, on_alloc, on_read);
    if (rc < 0 && rc != UV_EALREADY) {
        log_warn("ctl: cannot read from a client: %s", uv_strerror(rc));
        conn_close(conn);
    }
}

/* ---- accepting ---- */

static void
on_connection(uv_stream_t *listener, int status)
{
    struct ctl_server *srv = listener->data;
    if (status < 0) {
        log_warn("ctl: accept failed: %s", uv_strerror(status));
        return;
    }
    struct ctl_conn *conn = calloc(1, sizeof(*conn));
    if (!conn) {
        log_err("ctl: out of memory for a control connection");
        return; /* the pending connection is refused when the listener closes */
    }
    conn->srv = srv;
    uv_pipe_init(srv->loop, &conn->pipe, 0);
    uv_timer_init(srv->loop, &conn->timer);
    conn->pipe.data = conn->timer.data = conn;
    conn->open_handles = 2;
    conn->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = conn;
    srv->conns = conn;
    srv->n_conns++;
    int rc = uv_accept(listener, (uv_stream_t *) &conn->pipe);
    if (rc < 0) {
        log_warn("ctl: accept failed: %s", uv_strerror(rc));
        conn_close(conn);
        return;
    }
    if (srv->n_conns > CTL_MAX_CONNS) {
        log_warn("ctl: more than %d control clients; refusing one", CTL_MAX_CONNS);
        Dedupd__Response resp;
        ctl__error_response(&resp, -EAGAIN, "too many control clients; try again");
        ctl__send(conn, &resp, true);
        return;
    }
    start_reading(conn);
}

static int
bind_socket(struct ctl_server *srv, const char *group)
{
    gid_t gid = (gid_t) -1;
    if (group && *group) {
        struct group *g = getgrnam(group);
        if (!g) {
            log_err("ctl: control group '%s' does not exist", group);
            return -EINVAL;
        }
        gid = g->gr_gid;
    }
    int rc = unixsock_clear_stale(srv->path, "ctl");
    if (rc < 0)
        return rc;
    /* The umask makes the socket private from its first instant: a chmod after bind would
     * leave a window where anyone may connect. umask is process-wide: a file another thread
     * creates meanwhile is at worst created 0600 too. */
    mode_t old = umask(0177);
    rc = uv_pipe_bind(&srv->listener, srv->path);
    umask(old);
    if (rc < 0) {
        log_err("ctl: cannot bind %s: %s", srv->path, uv_strerror(rc));
        return rc;
    }
    if (gid != (gid_t) -1) {
        if (chown(srv->path, (uid_t) -1, gid) < 0 || chmod(srv->path, 0660) < 0) {
            rc = -errno;
            log_err("ctl: cannot give %s to group %s: %s", srv->path, group, strerror(-rc));
            unlink(srv->path);
            return rc;
        }
    }
    rc = uv_listen((uv_stream_t *) &srv->listener, 16, on_connection);
    if (rc < 0) {
        log_err("ctl: cannot listen on %s: %s", srv->path, uv_strerror(rc));
        unlink(srv->path);
        return rc;
    }
    return 0;
}

static void
on_listener_closed(uv_handle_t *h)
{
    struct ctl_server *srv = h->data;
    srv->listening = false;
    maybe_finish_stop(srv);
}

static void
on_listener_closed_at_start(uv_handle_t *h)
{
    struct ctl_server *srv = h->data;
    free(srv->path);
    free(srv);
}

int
ctl_server_start(uv_loop_t *loop, struct engine *engine, struct nbd_server *nbd,
                 const struct ctl_options *opt, struct ctl_server **out)
{
    if (!loop || !engine || !opt || !opt->socket_path || !*opt->socket_path)
        return -EINVAL;
    struct sockaddr_un sa;
    if (strlen(opt->socket_path) >= sizeof(sa.sun_path)) {
        log_err("ctl: control socket path %s is longer than %zu bytes", opt->socket_path,
                sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    struct ctl_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->path = strdup(opt->socket_path);
    if (!srv->path) {
        free(srv);
        return -ENOMEM;
    }
    srv->loop = loop;
    srv->engine = engine;
    srv->nbd = nbd;
    srv->idle_timeout_ms = opt->idle_timeout_ms ? opt->idle_timeout_ms : CTL_DEFAULT_IDLE_MS;
    srv->start_ns = uv_hrtime();
    int rc = uv_pipe_init(loop, &srv->listener, 0);
    if (rc < 0) {
        free(srv->path);
        free(srv);
        return rc;
    }
    srv->listener.data = srv;
    rc = bind_socket(srv, opt->group);
    if (rc < 0) {
        /* The handle is registered with the loop: free once the loop has closed it. */
        uv_close((uv_handle_t *) &srv->listener, on_listener_closed_at_start);
        return rc;
    }
    srv->listening = true;
    log_info("ctl: control socket on %s", srv->path);
    *out = srv;
    return 0;
}

void
ctl_server_stop(struct ctl_server *srv, void (*done)(void *arg), void *arg)
{
    if (!srv) {
        if (done)
            done(arg);
        return;
    }
    srv->stopping = true;
    srv->stop_done = done;
    srv->stop_arg = arg;
    uv_close((uv_handle_t *) &srv->listener, on_listener_closed);
    for (struct ctl_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        conn_close(c);
    }
}
