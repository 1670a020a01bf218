/* nbd/conn.c: one client connection's lifecycle — accept (with the connection limit),
 * the input buffer and the byte-level parser that feeds handshake.c and transmit.c,
 * backpressure (reading stops while limits are reached and resumes as replies drain),
 * the write queue, and closing only after in-flight requests have completed.
 * Owns: the connection, its socket handle, buffers and requests.
 * Knows nothing of option or command semantics (handshake.c, transmit.c) or reply
 * formats (reply.c).
 *
 * Closing: nbd__conn_stop() moves the connection to NBD_CONN_STOPPED (nothing more is
 * read). The handle is closed when no request waits on the engine and — unless the stop
 * is forced (server stop, socket error) — every queued reply has been written. The memory
 * goes in the close callback, so an engine completion never finds a freed connection. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedupd/limits.h"
#include "nbd/internal.h"
#include "util/log.h"

struct wbuf {
    uv_write_t w;
    struct nbd_conn *conn;
    uint8_t data[];
};

static void process(struct nbd_conn *c);

static uv_stream_t *
stream(struct nbd_conn *c)
{
    return (uv_stream_t *) &c->h;
}

static void
on_closed(uv_handle_t *h)
{
    struct nbd_conn *c = h->data;
    struct nbd_loop *lp = c->lp;
    if (--c->open_handles > 0)
        return;
    if (c->listed) {
        if (c->prev)
            c->prev->next = c->next;
        else
            lp->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        log_debug("nbd: conn %" PRIu64 " (%s): closed", c->id, c->peer);
    }
    /* Only a WRITE whose payload was still arriving can be left: it never reached the
     * engine, and every reply write has completed or been cancelled by uv_close. */
    while (c->reqs)
        nbd__req_free(c->reqs);
    if (c->listed)
        nbd__loop_count(lp, -1);
    if (!lp->conns)
        bufpool_trim(lp->bufs); /* nobody to reuse them soon: give the memory back */
    engine_export_close(c->ex);
    free(c->inbuf);
    free(c->opt_buf);
    free(c);
    nbd__loop_conn_gone(lp);
}

/* Closes the handle if nothing needs the connection any more. */
static void
maybe_close(struct nbd_conn *c)
{
    if (c->closing || c->state != NBD_CONN_STOPPED || c->in_process)
        return;
    if (c->engine_pending > 0)
        return;
    if (!c->force && (c->writes_pending > 0 || c->parked))
        return;
    c->closing = true;
    if (c->reading)
        uv_read_stop(stream(c));
    c->reading = false;
    uv_close((uv_handle_t *) &c->hs_timer, on_closed);
    uv_close((uv_handle_t *) &c->h, on_closed);
}

static void on_timer(uv_timer_t *t);

void
nbd__conn_stop(struct nbd_conn *c, const char *reason, bool force)
{
    if (reason)
        log_info("nbd: conn %" PRIu64 " (%s): %s; disconnecting", c->id, c->peer, reason);
    bool was_stopped = c->state == NBD_CONN_STOPPED;
    c->state = NBD_CONN_STOPPED;
    c->force = c->force || force;
    if (c->reading && !c->closing) {
        uv_read_stop(stream(c));
        c->reading = false;
    }
    /* A graceful stop waits for replies to be written; a client that never reads them
     * gets the same time as a handshake, then a hard disconnect. */
    if (!was_stopped && !c->force && !c->closing)
        uv_timer_start(&c->hs_timer, on_timer, c->srv->limits.handshake_timeout_ms, 0);
    maybe_close(c);
}

static bool
throttled(const struct nbd_conn *c)
{
    switch (c->state) {
    case NBD_CONN_CLIENT_FLAGS:
    case NBD_CONN_OPT_HDR:
    case NBD_CONN_OPT_DATA:
    case NBD_CONN_OPT_SKIP:
        return uv_stream_get_write_queue_size((const uv_stream_t *) &c->h) > NBD_HANDSHAKE_WQ_MAX;
    case NBD_CONN_REQ_HDR:
        return !nbd__tx_can_accept(c);
    default:
        return false;
    }
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void) suggested;
    struct nbd_conn *c = h->data;
    if (c->state == NBD_CONN_REQ_PAYLOAD && c->in_pos == c->in_len &&
        c->cur->len - c->pay_have >= NBD_DIRECT_MIN) {
        c->in_direct = true;
        c->in_pos = c->in_len = 0;
        b->base = (char *) c->cur->buf + c->pay_have;
        b->len = c->cur->len - c->pay_have;
        return;
    }
    c->in_direct = false;
    if (c->in_pos > 0) {
        memmove(c->inbuf, c->inbuf + c->in_pos, c->in_len - c->in_pos);
        c->in_len -= c->in_pos;
        c->in_pos = 0;
    }
    b->base = (char *) c->inbuf + c->in_len;
    b->len = NBD_INBUF_SIZE - c->in_len;
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    (void) b;
    struct nbd_conn *c = s->data;
    bool direct = c->in_direct;
    c->in_direct = false;
    if (nread == 0 || nread == UV_ENOBUFS)
        return;
    if (nread < 0) {
        if (nread == UV_EOF) {
            log_debug("nbd: conn %" PRIu64 " (%s): end of input", c->id, c->peer);
            /* A client may half-close and still read its replies; abrupt disconnects show
             * up as write errors, which force the close. */
            nbd__conn_stop(c, NULL, false);
        } else {
            log_info("nbd: conn %" PRIu64 " (%s): read error: %s", c->id, c->peer,
                     uv_strerror((int) nread));
            nbd__conn_stop(c, NULL, true);
        }
        return;
    }
    if (direct) {
        /* Straight into the payload (on_alloc): nothing to parse until it is complete. */
        c->pay_have += (uint32_t) nread;
        if (c->pay_have == c->cur->len)
            nbd__tx_payload_done(c);
    } else {
        c->in_len += (size_t) nread;
    }
    process(c);
}

/* Copies up to need bytes of header into c->hdr; true when it is complete. */
static bool
fill_hdr(struct nbd_conn *c, size_t need)
{
    size_t avail = c->in_len - c->in_pos;
    size_t n = need - c->hdr_have;
    if (n > avail)
        n = avail;
    memcpy(c->hdr + c->hdr_have, c->inbuf + c->in_pos, n);
    c->hdr_have += n;
    c->in_pos += n;
    if (c->hdr_have < need)
        return false;
    c->hdr_have = 0;
    return true;
}

static size_t
take(struct nbd_conn *c, uint64_t want)
{
    size_t avail = c->in_len - c->in_pos;
    return want < avail ? (size_t) want : avail;
}

/* One parsing step on buffered input. false: blocked until requests drain. */
static bool
step(struct nbd_conn *c)
{
    size_t n;
    switch (c->state) {
    case NBD_CONN_CLIENT_FLAGS:
        if (fill_hdr(c, 4))
            nbd__hs_client_flags(c);
        return true;
    case NBD_CONN_OPT_HDR:
        if (throttled(c))
            return false;
        if (fill_hdr(c, sizeof(struct nbd_opt_hdr)))
            nbd__hs_opt_hdr(c);
        return true;
    case NBD_CONN_OPT_DATA:
        n = take(c, c->opt_len - c->opt_have);
        memcpy(c->opt_buf + c->opt_have, c->inbuf + c->in_pos, n);
        c->opt_have += (uint32_t) n;
        c->in_pos += n;
        if (c->opt_have == c->opt_len)
            nbd__hs_opt_data(c);
        return true;
    case NBD_CONN_OPT_SKIP:
    case NBD_CONN_REQ_SKIP:
        n = take(c, c->skip_left);
        c->skip_left -= n;
        c->in_pos += n;
        if (c->skip_left == 0) {
            if (c->state == NBD_CONN_OPT_SKIP)
                nbd__hs_opt_skipped(c);
            else
                nbd__tx_skip_done(c);
        }
        return true;
    case NBD_CONN_REQ_HDR:
        if (throttled(c))
            return false;
        if (fill_hdr(c, sizeof(struct nbd_request)))
            nbd__tx_req_hdr(c);
        return true;
    case NBD_CONN_REQ_PAYLOAD:
        n = take(c, c->cur->len - c->pay_have);
        memcpy(c->cur->buf + c->pay_have, c->inbuf + c->in_pos, n);
        c->pay_have += (uint32_t) n;
        c->in_pos += n;
        if (c->pay_have == c->cur->len)
            nbd__tx_payload_done(c);
        return true;
    case NBD_CONN_STOPPED:
        return false;
    }
    return false;
}

/* Parses what is buffered, then reads more unless blocked. Never re-entered: handlers
 * that free requests or close call back here through nbd__conn_kick(), which defers to this loop.
 */
static void
process(struct nbd_conn *c)
{
    if (c->in_process)
        return;
    if (c->closing) {
        nbd__tx_flush_writes(c);
        return;
    }
    c->in_process = true;
    while (c->in_pos < c->in_len && c->state != NBD_CONN_STOPPED) {
        if (!step(c))
            break;
    }
    nbd__tx_flush_writes(c); /* the input ran out (or blocked): what arrived together goes */
    /* States that complete without input (a zero-length option or payload) are handled
     * by their handlers directly, so nothing is pending here once input runs out. */
    c->in_process = false;
    if (c->state == NBD_CONN_STOPPED) {
        maybe_close(c);
        return;
    }
    bool want = c->in_pos == c->in_len && !throttled(c);
    if (want && !c->reading) {
        int rc = uv_read_start(stream(c), on_alloc, on_read);
        if (rc < 0) {
            log_warn("nbd: conn %" PRIu64 " (%s): cannot read: %s", c->id, c->peer,
                     uv_strerror(rc));
            nbd__conn_stop(c, NULL, true);
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop(stream(c));
        c->reading = false;
    }
}

/* Something drained (a reply written, a request freed): resume parsing or close. */
void
nbd__conn_kick(struct nbd_conn *c)
{
    if (c->state == NBD_CONN_STOPPED)
        maybe_close(c);
    else if (!c->reading)
        process(c);
}

static void
on_sent(uv_write_t *w, int status)
{
    struct wbuf *wb = (struct wbuf *) w;
    struct nbd_conn *c = wb->conn;
    free(wb);
    c->writes_pending--;
    if (status < 0 && status != UV_ECANCELED && c->state != NBD_CONN_STOPPED)
        log_info("nbd: conn %" PRIu64 " (%s): write error: %s", c->id, c->peer,
                 uv_strerror(status));
    if (status < 0)
        nbd__conn_stop(c, NULL, true);
    else
        nbd__conn_kick(c);
}

int
nbd__conn_send(struct nbd_conn *c, const void *data, size_t len)
{
    if (c->closing)
        return -EPIPE;
    struct wbuf *wb = malloc(sizeof(*wb) + len);
    if (!wb) {
        log_err("nbd: conn %" PRIu64 " (%s): out of memory for a reply", c->id, c->peer);
        nbd__conn_stop(c, NULL, true);
        return -ENOMEM;
    }
    wb->conn = c;
    memcpy(wb->data, data, len);
    uv_buf_t b = uv_buf_init((char *) wb->data, (unsigned) len);
    int rc = uv_write(&wb->w, stream(c), &b, 1, on_sent);
    if (rc < 0) {
        free(wb);
        nbd__conn_stop(c, NULL, true);
        return rc;
    }
    c->writes_pending++;
    return 0;
}

static void
on_req_sent(uv_write_t *w, int status)
{
    struct nbd_req *req = w->data;
    struct nbd_conn *c = req->conn;
    c->writes_pending--;
    nbd__req_free(req);
    if (status < 0 && status != UV_ECANCELED && c->state != NBD_CONN_STOPPED)
        log_info("nbd: conn %" PRIu64 " (%s): write error: %s", c->id, c->peer,
                 uv_strerror(status));
    if (status < 0)
        nbd__conn_stop(c, NULL, true);
    else
        nbd__conn_kick(c);
}

void
nbd__conn_send_req(struct nbd_conn *c, struct nbd_req *req)
{
    if (c->closing) {
        nbd__req_free(req);
        return;
    }
    req->w.data = req;
    int rc = uv_write(&req->w, stream(c), req->bufs, req->nbufs, on_req_sent);
    if (rc < 0) {
        nbd__req_free(req);
        nbd__conn_stop(c, NULL, true);
        return;
    }
    c->writes_pending++;
}

struct nbd_req *
nbd__req_new(struct nbd_conn *c)
{
    struct nbd_req *req = calloc(1, sizeof(*req));
    if (!req)
        return NULL;
    req->conn = c;
    req->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = req;
    c->reqs = req;
    c->inflight++;
    return req;
}

void
nbd__req_free(struct nbd_req *req)
{
    struct nbd_conn *c = req->conn;
    if (req->prev)
        req->prev->next = req->next;
    else
        c->reqs = req->next;
    if (req->next)
        req->next->prev = req->prev;
    c->inflight--;
    c->inflight_bytes -= req->bytes;
    if (req->read_held) {
        c->reads_held--;
        c->read_held_bytes -= req->bytes;
    }
    bufpool_put(c->lp->bufs, req->buf, req->buf_len);
    free(req->out);
    free(req->bufs);
    free(req->ext);
    free(req);
    nbd__tx_resume_reads(c); /* before the kick: a stopping connection waits for them */
    nbd__conn_kick(c);
}

/* One timer, two deadlines: the handshake, and the drain of a graceful stop. */
static void
on_timer(uv_timer_t *t)
{
    struct nbd_conn *c = t->data;
    if (c->state != NBD_CONN_STOPPED) {
        nbd__conn_stop(c, "handshake not finished in time", true);
        return;
    }
    log_info("nbd: conn %" PRIu64 " (%s): replies not read in time; disconnecting", c->id, c->peer);
    c->force = true;
    maybe_close(c);
}

void
nbd__conn_handshake_done(struct nbd_conn *c)
{
    uv_timer_stop(&c->hs_timer);
}

static int
conn_start(struct nbd_conn *c)
{
    struct nbd_loop *lp = c->lp;
    /* A connection that never finishes negotiating would hold a max_connections slot
     * forever. */
    uv_timer_init(lp->loop, &c->hs_timer);
    c->hs_timer.data = c;
    c->open_handles = 2;
    uv_timer_start(&c->hs_timer, on_timer, c->srv->limits.handshake_timeout_ms, 0);
    c->id = atomic_fetch_add(&c->srv->next_conn_id, 1) + 1;
    c->next = lp->conns;
    if (lp->conns)
        lp->conns->prev = c;
    lp->conns = c;
    c->listed = true; /* counted by whoever accepted it */
    log_debug("nbd: conn %" PRIu64 " (%s): connected", c->id, c->peer);
    int rc = nbd__hs_start(c);
    if (rc == 0)
        process(c);
    return 0;
}

static struct nbd_conn *
conn_new(struct nbd_loop *lp)
{
    struct nbd_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->srv = lp->srv;
    c->lp = lp;
    c->inbuf = malloc(NBD_INBUF_SIZE);
    if (!c->inbuf) {
        free(c);
        return NULL;
    }
    c->h.tcp.data = c;
    return c;
}

static void
on_refused_closed(uv_handle_t *h)
{
    struct nbd_conn *c = h->data;
    struct nbd_loop *lp = c->lp;
    free(c->inbuf);
    free(c);
    nbd__loop_conn_gone(lp);
}

static void
peer_name_of(const uv_tcp_t *h, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(h, (struct sockaddr *) &ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *) &ss;
            uv_ip6_name(a, host, sizeof(host));
            port = ntohs(a->sin6_port);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *) &ss;
            uv_ip4_name(a, host, sizeof(host));
            port = ntohs(a->sin_port);
        }
    }
    snprintf(out, cap, "%s:%d", host, port);
}

static void
peer_name(struct nbd_conn *c, bool is_tcp)
{
    if (is_tcp)
        peer_name_of(&c->h.tcp, c->peer, sizeof(c->peer));
    else
        snprintf(c->peer, sizeof(c->peer), "unix");
}

/* A flood of refused connections must not flood the log: one line a second at most. */
static void
log_refusal(struct nbd_server *srv, const char *peer)
{
    uint64_t now = uv_now(srv->loop);
    srv->refused++;
    if (srv->refused_logged_at_ms && now - srv->refused_logged_at_ms < 1000) {
        srv->refused_unlogged++;
        return;
    }
    log_warn("nbd: connection from %s refused: %" PRIu32 " connections open (max_connections)"
             "; %" PRIu64 " more refused since the last message",
             peer, atomic_load(&srv->n_conns), srv->refused_unlogged);
    srv->refused_logged_at_ms = now ? now : 1;
    srv->refused_unlogged = 0;
}

static void
tune(struct nbd_conn *c, bool is_tcp)
{
    if (is_tcp) {
        uv_tcp_nodelay(&c->h.tcp, 1);
        /* A client that vanished without a FIN (power loss, cable) would otherwise keep
         * its connection, export handle and buffers until the server stops. */
        uv_tcp_keepalive(&c->h.tcp, 1, 60);
    }
}

static void
on_accept_closed(uv_handle_t *h)
{
    struct nbd_server *srv = h->data;
    free(h);
    srv->pending_accepts--;
    nbd__server_check_done(srv);
}

/* Loop threads serve the connections: the socket is accepted here into a handle of the
 * caller's loop, and a duplicate of its fd goes to the least busy loop thread (a handle
 * belongs to the loop it was made on). */
static int
accept_for_thread(struct nbd_server *srv, uv_stream_t *listener, bool is_tcp)
{
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } *h = malloc(sizeof(*h));
    if (!h) {
        log_err("nbd: out of memory accepting a connection");
        return -ENOMEM;
    }
    int rc = is_tcp ? uv_tcp_init(srv->loop, &h->tcp) : uv_pipe_init(srv->loop, &h->pipe, 0);
    if (rc < 0) {
        free(h);
        return rc;
    }
    h->tcp.data = srv;
    srv->pending_accepts++;
    rc = uv_accept(listener, (uv_stream_t *) h);
    int fd = -1;
    uv_os_fd_t ufd;
    if (rc == 0 && !srv->stopping && atomic_load(&srv->n_conns) < srv->limits.max_connections) {
        rc = uv_fileno((uv_handle_t *) h, &ufd);
        if (rc == 0 && (fd = fcntl(ufd, F_DUPFD_CLOEXEC, 0)) < 0)
            rc = -errno;
    } else if (rc == 0 && !srv->stopping) {
        char peer[64] = "unix";
        if (is_tcp)
            peer_name_of(&h->tcp, peer, sizeof(peer));
        log_refusal(srv, peer);
    }
    uv_close((uv_handle_t *) h, on_accept_closed);
    if (fd >= 0)
        nbd__loops_hand(srv, fd, is_tcp);
    return rc;
}

int
nbd__conn_accept(struct nbd_server *srv, uv_stream_t *listener, bool is_tcp)
{
    if (srv->n_threads > 0)
        return accept_for_thread(srv, listener, is_tcp);
    struct nbd_loop *lp = &srv->main;
    struct nbd_conn *c = conn_new(lp);
    if (!c) {
        log_err("nbd: out of memory accepting a connection");
        return -ENOMEM;
    }
    int rc = is_tcp ? uv_tcp_init(lp->loop, &c->h.tcp) : uv_pipe_init(lp->loop, &c->h.pipe, 0);
    if (rc < 0) {
        free(c->inbuf);
        free(c);
        return rc;
    }
    c->h.tcp.data = c;
    lp->pending_closes++;
    rc = uv_accept(listener, stream(c));
    if (rc == 0)
        peer_name(c, is_tcp);
    if (rc < 0 || srv->stopping || atomic_load(&srv->n_conns) >= srv->limits.max_connections) {
        if (rc == 0 && !srv->stopping)
            log_refusal(srv, c->peer);
        uv_close((uv_handle_t *) &c->h, on_refused_closed);
        return rc;
    }
    tune(c, is_tcp);
    nbd__loop_count(lp, 1);
    return conn_start(c);
}

/* A new connection of lp around a connected socket fd, not yet started. On failure the fd
 * is left open (uv_close never closes an fd it failed to open) and nothing is counted. */
static int
wrap_fd(struct nbd_loop *lp, int fd, bool is_tcp, struct nbd_conn **out)
{
    struct nbd_conn *c = conn_new(lp);
    if (!c)
        return -ENOMEM;
    int rc = is_tcp ? uv_tcp_init(lp->loop, &c->h.tcp) : uv_pipe_init(lp->loop, &c->h.pipe, 0);
    if (rc < 0) {
        free(c->inbuf);
        free(c);
        return rc;
    }
    c->h.tcp.data = c;
    lp->pending_closes++;
    rc = is_tcp ? uv_tcp_open(&c->h.tcp, fd) : uv_pipe_open(&c->h.pipe, fd);
    if (rc < 0) {
        uv_close((uv_handle_t *) &c->h, on_refused_closed);
        return rc;
    }
    *out = c;
    return 0;
}

int
nbd__conn_open(struct nbd_loop *lp, int fd, bool is_tcp)
{
    struct nbd_conn *c;
    int rc = wrap_fd(lp, fd, is_tcp, &c);
    if (rc < 0) {
        close(fd);
        nbd__loop_count(lp, -1);
        return rc;
    }
    peer_name(c, is_tcp);
    tune(c, is_tcp);
    return conn_start(c);
}

int
nbd__conn_adopt(struct nbd_server *srv, int fd)
{
    struct nbd_conn *c;
    int rc = wrap_fd(&srv->main, fd, false, &c);
    if (rc < 0)
        return rc;
    snprintf(c->peer, sizeof(c->peer), "fd %d", fd);
    nbd__loop_count(&srv->main, 1);
    return conn_start(c);
}
