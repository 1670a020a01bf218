/* nbd/server.c: the NBD server object — listeners on TCP ("HOST:PORT", "[V6]:PORT") and
 * Unix sockets ("unix:PATH"), several at once; accepting into conn.c; limits defaults;
 * and the stop sequence (listeners closed, connections drained, then the callback).
 * Owns: the listening handles and the Unix socket files it created.
 * Knows nothing of the protocol. */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dedupd/limits.h"
#include "nbd/internal.h"
#include "util/log.h"
#include "util/unixsock.h"

void
nbd__server_check_done(struct nbd_server *srv)
{
    if (!srv->stopping || srv->open_listeners > 0 || srv->pending_accepts > 0 ||
        srv->main.pending_closes > 0 || !nbd__loops_done(srv))
        return;
    void (*done)(void *) = srv->stop_done;
    void *arg = srv->stop_arg;
    bufpool_destroy(srv->main.bufs);
    free(srv);
    log_debug("nbd: server stopped");
    if (done)
        done(arg);
}

static void
on_connection(uv_stream_t *s, int status)
{
    struct nbd_listener *l = s->data;
    if (status < 0) {
        log_warn("nbd: %s: accept: %s", l->addr, uv_strerror(status));
        return;
    }
    int rc = nbd__conn_accept(l->srv, s, l->unix_path == NULL);
    if (rc < 0 && rc != UV_EAGAIN)
        log_warn("nbd: %s: accept: %s", l->addr, uv_strerror(rc));
}

static void
free_listener(struct nbd_listener *l)
{
    free(l->addr);
    free(l->unix_path);
    free(l);
}

static void
on_listener_closed(uv_handle_t *h)
{
    struct nbd_listener *l = h->data;
    struct nbd_server *srv = l->srv;
    free_listener(l);
    srv->open_listeners--;
    nbd__server_check_done(srv);
}

static int
listen_unix(struct nbd_server *srv, struct nbd_listener *l, const char *path)
{
    struct sockaddr_un sa;
    if (path[0] == '\0' || strlen(path) >= sizeof(sa.sun_path)) {
        log_err("nbd: %s: bad Unix socket path", l->addr);
        return -EINVAL;
    }
    int rc = unixsock_clear_stale(path, "nbd");
    if (rc < 0)
        return rc;
    l->unix_path = strdup(path);
    if (!l->unix_path)
        return -ENOMEM;
    rc = uv_pipe_init(srv->loop, &l->h.pipe, 0);
    if (rc < 0)
        return rc;
    l->h.pipe.data = l;
    srv->open_listeners++;
    rc = uv_pipe_bind(&l->h.pipe, path);
    if (rc < 0) {
        free(l->unix_path);
        l->unix_path = NULL; /* not ours: do not unlink at stop */
        return rc;
    }
    return uv_listen((uv_stream_t *) &l->h.pipe, 128, on_connection);
}

/* "HOST:PORT", "[V6]:PORT", or "HOST" (default port). */
static int
parse_tcp(const char *a, struct sockaddr_storage *ss)
{
    char host[256];
    const char *port = NULL;
    if (a[0] == '[') {
        const char *close = strchr(a, ']');
        if (!close || (size_t) (close - a - 1) >= sizeof(host))
            return -EINVAL;
        memcpy(host, a + 1, (size_t) (close - a - 1));
        host[close - a - 1] = '\0';
        if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            return -EINVAL;
    } else {
        const char *colon = strrchr(a, ':');
        size_t hl = colon ? (size_t) (colon - a) : strlen(a);
        if (hl >= sizeof(host))
            return -EINVAL;
        memcpy(host, a, hl);
        host[hl] = '\0';
        port = colon ? colon + 1 : NULL;
    }
    char portbuf[8];
    if (!port || !*port) {
        snprintf(portbuf, sizeof(portbuf), "%d", DEDUPD_DEFAULT_PORT);
        port = portbuf;
    }
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9')
            return -EINVAL;
    if (strtol(port, NULL, 10) > 65535)
        return -EINVAL;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    /* Startup only: a name lookup here blocks before the loop runs. */
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0 || !res)
        return -EINVAL;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int
listen_tcp(struct nbd_server *srv, struct nbd_listener *l)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    int rc = parse_tcp(l->addr, &ss);
    if (rc < 0) {
        log_err("nbd: %s: not HOST:PORT, [V6]:PORT or unix:PATH", l->addr);
        return rc;
    }
    rc = uv_tcp_init(srv->loop, &l->h.tcp);
    if (rc < 0)
        return rc;
    l->h.tcp.data = l;
    srv->open_listeners++;
    rc = uv_tcp_bind(&l->h.tcp, (struct sockaddr *) &ss,
                     ss.ss_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0);
    if (rc < 0)
        return rc;
    return uv_listen((uv_stream_t *) &l->h.tcp, 128, on_connection);
}

static void
close_listeners(struct nbd_server *srv)
{
    struct nbd_listener *l = srv->listeners;
    srv->listeners = NULL;
    while (l) {
        struct nbd_listener *next = l->next;
        if (l->unix_path)
            unlink(l->unix_path);
        uv_close((uv_handle_t *) &l->h, on_listener_closed);
        l = next;
    }
}

int
nbd_server_start(uv_loop_t *loop, struct engine *engine, const char *const *listen, size_t n_listen,
                 const struct nbd_limits *limits, struct nbd_server **out)
{
    struct nbd_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->loop = loop;
    srv->engine = engine;
    srv->main.srv = srv;
    srv->main.loop = loop;
    srv->main.nowait_max = NBD_NOWAIT_MAX_MAIN;
    srv->main.bufs = bufpool_new(NBD_BUFPOOL_IDLE_MAX);
    if (!srv->main.bufs) {
        free(srv);
        return -ENOMEM;
    }
    if (limits)
        srv->limits = *limits;
    if (srv->limits.max_connections == 0)
        srv->limits.max_connections = 256;
    if (srv->limits.max_inflight == 0)
        srv->limits.max_inflight = 64;
    if (srv->limits.max_inflight_bytes == 0)
        srv->limits.max_inflight_bytes = 128ull << 20;
    if (srv->limits.handshake_timeout_ms == 0)
        srv->limits.handshake_timeout_ms = 30000;
    if (srv->limits.loops == 0) {
        unsigned cpus = uv_available_parallelism();
        srv->limits.loops = cpus < NBD_LOOPS_DEFAULT_MAX ? cpus : NBD_LOOPS_DEFAULT_MAX;
    }

    int rc = 0;
    /* Loop threads serve accepted sockets only: a server without listeners (tests,
     * fuzzing) serves what it adopts on the caller's loop. */
    if (n_listen > 0 && srv->limits.loops >= 2) {
        rc = nbd__loops_start(srv, srv->limits.loops);
        if (rc < 0)
            log_err("nbd: cannot start %u connection loops: %s", srv->limits.loops,
                    uv_strerror(rc));
    }
    for (size_t i = 0; i < n_listen && rc == 0; i++) {
        struct nbd_listener *l = calloc(1, sizeof(*l));
        if (!l || !(l->addr = strdup(listen[i]))) {
            free(l);
            rc = -ENOMEM;
            break;
        }
        l->srv = srv;
        bool is_unix = strncmp(listen[i], "unix:", 5) == 0;
        rc = is_unix ? listen_unix(srv, l, listen[i] + 5) : listen_tcp(srv, l);
        if (l->h.tcp.type == UV_UNKNOWN_HANDLE) {
            free_listener(l); /* never initialised: nothing to close */
        } else {
            l->next = srv->listeners;
            srv->listeners = l;
        }
        if (rc < 0)
            log_err("nbd: cannot listen on %s: %s", listen[i], uv_strerror(rc));
    }
    if (rc < 0) {
        nbd_server_stop(srv, NULL, NULL);
        return rc;
    }
    *out = srv;
    return 0;
}

void
nbd_server_stop(struct nbd_server *srv, void (*done)(void *arg), void *arg)
{
    if (!srv) {
        if (done)
            done(arg);
        return;
    }
    srv->stopping = true;
    srv->stop_done = done;
    srv->stop_arg = arg;
    close_listeners(srv);
    /* Connections finish their in-flight requests, then close; the server is freed when
     * the last handle is gone and every loop thread has been joined. */
    nbd__loops_stop(srv);
    nbd__loop_stop_conns(&srv->main);
}

uint32_t
nbd_server_connections(const struct nbd_server *srv)
{
    return srv ? atomic_load(&srv->n_conns) : 0;
}

uint32_t
nbd_server_loops(const struct nbd_server *srv)
{
    return !srv ? 0 : srv->n_threads ? srv->n_threads : 1;
}
