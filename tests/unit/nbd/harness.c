/* harness: see harness.h. The loop thread owns the server; tests talk to it only through
 * sockets and run_on_loop(). */
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "harness.h"
#include "nbd/internal.h"

static uv_loop_t loop;
static uv_async_t wake;
static pthread_t loop_thread;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void (*pending_fn)(void *);
static void *pending_arg;
static bool pending_done;

static void
on_wake(uv_async_t *a)
{
    (void) a;
    pthread_mutex_lock(&mu);
    void (*fn)(void *) = pending_fn;
    void *arg = pending_arg;
    pending_fn = NULL;
    pthread_mutex_unlock(&mu);
    if (!fn)
        return;
    fn(arg); /* without the lock: fn may complete things that take it */
    pthread_mutex_lock(&mu);
    pending_done = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void
run_on_loop(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&mu);
    pending_fn = fn;
    pending_arg = arg;
    pending_done = false;
    uv_async_send(&wake);
    while (!pending_done)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void *
loop_main(void *arg)
{
    (void) arg;
    uv_run(&loop, UV_RUN_DEFAULT);
    return NULL;
}

struct start_args {
    struct harness *h;
    const struct nbd_limits *lim;
    int rc;
};

static void
do_start(void *arg)
{
    struct start_args *a = arg;
    const char *l[1] = {a->h->sock};
    char buf[160];
    if (a->h->sock[0]) {
        snprintf(buf, sizeof(buf), "unix:%s", a->h->sock);
        l[0] = buf;
    }
    a->rc = nbd_server_start(&loop, a->h->e, l, a->h->sock[0] ? 1 : 0, a->lim, &a->h->srv);
}

void
h_start(struct harness *h, const struct nbd_limits *lim, bool with_unix)
{
    memset(h, 0, sizeof(*h));
    signal(SIGPIPE, SIG_IGN); /* as dedupd does: a vanished client is an EPIPE */
    h->e = fake_io_new();
    cr_assert_eq(fake_io_add_export(h->e, "default", H_DEFAULT_SIZE, 4096, false), 0);
    cr_assert_eq(fake_io_add_export(h->e, "ro", H_RO_SIZE, 4096, true), 0);
    cr_assert_eq(fake_io_add_export(h->e, "big64k", 16ull << 20, 65536, false), 0);
    if (with_unix) {
        strcpy(h->dir, "/tmp/dd-nbd-test.XXXXXX");
        cr_assert_not_null(mkdtemp(h->dir));
        snprintf(h->sock, sizeof(h->sock), "%s/nbd.sock", h->dir);
    }
    uv_loop_init(&loop);
    uv_async_init(&loop, &wake, on_wake);
    pthread_create(&loop_thread, NULL, loop_main, NULL);
    struct start_args a = {h, lim, 0};
    run_on_loop(do_start, &a);
    cr_assert_eq(a.rc, 0, "nbd_server_start: %s", strerror(-a.rc));
}

static void
stopped(void *arg)
{
    (void) arg;
    uv_close((uv_handle_t *) &wake, NULL);
}

static void
do_stop(void *arg)
{
    struct harness *h = arg;
    nbd_server_stop(h->srv, stopped, NULL);
    h->srv = NULL;
}

void
h_stop(struct harness *h)
{
    run_on_loop(do_stop, h);
    pthread_join(loop_thread, NULL);
    cr_assert_eq(uv_loop_close(&loop), 0, "handles left open on the loop");
    struct fake_io_counters cnt;
    fake_io_counters(h->e, &cnt);
    cr_assert_eq(cnt.open_handles, 0, "export handles left open");
    fake_io_free(h->e);
    if (h->sock[0]) {
        unlink(h->sock);
        rmdir(h->dir);
    }
}

struct adopt_args {
    struct harness *h;
    int fd;
    int rc;
};

static void
do_adopt(void *arg)
{
    struct adopt_args *a = arg;
    a->rc = nbd__conn_adopt(a->h->srv, a->fd);
}

static void
set_timeout(int fd)
{
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int
h_connect(struct harness *h)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct adopt_args a = {h, sv[1], 0};
    run_on_loop(do_adopt, &a);
    cr_assert_eq(a.rc, 0);
    set_timeout(sv[0]);
    return sv[0];
}

int
h_connect_unix(struct harness *h)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(h->sock), sizeof(sa.sun_path), "socket path too long: %s", h->sock);
    memcpy(sa.sun_path, h->sock, strlen(h->sock) + 1);
    cr_assert_eq(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0, "connect: %s",
                 strerror(errno));
    set_timeout(fd);
    return fd;
}

struct count_args {
    struct harness *h;
    uint32_t n;
};

static void
do_count(void *arg)
{
    struct count_args *a = arg;
    a->n = nbd_server_connections(a->h->srv);
}

uint32_t
h_connections(struct harness *h)
{
    struct count_args a = {h, 0};
    run_on_loop(do_count, &a);
    return a.n;
}

bool
cl_send(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t) w;
    }
    return true;
}

bool
cl_recv(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t) r;
    }
    return true;
}

bool
cl_closed(int fd)
{
    uint8_t b[4096];
    for (int i = 0; i < 100000; i++) {
        ssize_t r = recv(fd, b, sizeof(b), 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return true;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false; /* time-out: still open */
    }
    return false;
}

void
cl_greet(int fd, uint32_t client_flags)
{
    struct nbd_greeting g;
    cr_assert(cl_recv(fd, &g, sizeof(g)), "no greeting");
    cr_assert_eq(be64toh(g.magic), NBD_MAGIC);
    cr_assert_eq(be64toh(g.opt_magic), NBD_IHAVEOPT);
    cr_assert_eq(be16toh(g.flags), NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    uint32_t f = htobe32(client_flags);
    cr_assert(cl_send(fd, &f, 4));
}

void
cl_opt(int fd, uint32_t opt, const void *data, uint32_t len)
{
    struct nbd_opt_hdr h = {htobe64(NBD_IHAVEOPT), htobe32(opt), htobe32(len)};
    cr_assert(cl_send(fd, &h, sizeof(h)));
    if (len)
        cr_assert(cl_send(fd, data, len));
}

uint32_t
cl_rep(int fd, uint32_t want_opt, void *buf, uint32_t cap, uint32_t *len)
{
    struct nbd_rep_hdr h;
    cr_assert(cl_recv(fd, &h, sizeof(h)), "no option reply");
    cr_assert_eq(be64toh(h.magic), NBD_REP_MAGIC);
    cr_assert_eq(be32toh(h.option), want_opt);
    uint32_t l = be32toh(h.len);
    cr_assert_leq(l, cap, "option reply of %u bytes", l);
    if (l)
        cr_assert(cl_recv(fd, buf, l));
    if (len)
        *len = l;
    return be32toh(h.type);
}

uint16_t
cl_go(int fd, const char *name, bool structured, const char *const *ctx, uint64_t *size)
{
    uint8_t b[4096];
    uint32_t l;
    cl_greet(fd, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    if (structured) {
        cl_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
        cr_assert_eq(cl_rep(fd, NBD_OPT_STRUCTURED_REPLY, b, sizeof(b), &l), NBD_REP_ACK);
    }
    uint32_t nl = (uint32_t) strlen(name);
    if (ctx) {
        size_t p = 0;
        uint32_t be = htobe32(nl), nq = 0;
        memcpy(b, &be, 4);
        memcpy(b + 4, name, nl);
        p = 8 + nl;
        for (; ctx[nq]; nq++) {
            uint32_t ql = (uint32_t) strlen(ctx[nq]);
            be = htobe32(ql);
            memcpy(b + p, &be, 4);
            memcpy(b + p + 4, ctx[nq], ql);
            p += 4 + ql;
        }
        be = htobe32(nq);
        memcpy(b + 4 + nl, &be, 4);
        cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, (uint32_t) p);
        uint32_t t;
        while ((t = cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l)) == NBD_REP_META_CONTEXT)
            ;
        cr_assert_eq(t, NBD_REP_ACK);
    }
    uint32_t be = htobe32(nl);
    memcpy(b, &be, 4);
    memcpy(b + 4, name, nl);
    memset(b + 4 + nl, 0, 2);
    cl_opt(fd, NBD_OPT_GO, b, 6 + nl);
    uint16_t flags = 0;
    for (;;) {
        uint32_t t = cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l);
        if (t == NBD_REP_ACK)
            break;
        cr_assert_eq(t, NBD_REP_INFO, "GO %s: reply %s", name, nbd__rep_name(t));
        uint16_t it;
        memcpy(&it, b, 2);
        if (be16toh(it) == NBD_INFO_EXPORT) {
            struct nbd_info_export ie;
            memcpy(&ie, b, sizeof(ie));
            flags = be16toh(ie.flags);
            if (size)
                *size = be64toh(ie.size);
        }
    }
    return flags;
}

void
cl_req(int fd, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off, uint32_t len,
       const void *payload)
{
    uint8_t hdr[sizeof(struct nbd_request)];
    cr_assert(cl_send(fd, hdr, cl_req_put(hdr, type, flags, cookie, off, len, NULL)));
    if (payload && len)
        cr_assert(cl_send(fd, payload, len));
}

size_t
cl_req_put(uint8_t *out, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off, uint32_t len,
           const void *payload)
{
    struct nbd_request r = {htobe32(NBD_REQUEST_MAGIC),
                            htobe16(flags),
                            htobe16(type),
                            htobe64(cookie),
                            htobe64(off),
                            htobe32(len)};
    memcpy(out, &r, sizeof(r));
    if (!payload)
        return sizeof(r);
    memcpy(out + sizeof(r), payload, len);
    return sizeof(r) + len;
}

uint32_t
cl_simple(int fd, uint64_t *cookie)
{
    struct nbd_simple_reply r;
    cr_assert(cl_recv(fd, &r, sizeof(r)), "no reply");
    cr_assert_eq(be32toh(r.magic), NBD_SIMPLE_REPLY_MAGIC);
    if (cookie)
        *cookie = be64toh(r.cookie);
    return be32toh(r.error);
}

void
cl_chunk(int fd, struct cl_chunk *c)
{
    uint32_t magic;
    memset(c, 0, sizeof(*c));
    cr_assert(cl_recv(fd, &magic, 4), "no reply");
    if (be32toh(magic) == NBD_SIMPLE_REPLY_MAGIC) {
        uint8_t rest[12];
        cr_assert(cl_recv(fd, rest, 12));
        uint32_t err;
        uint64_t ck;
        memcpy(&err, rest, 4);
        memcpy(&ck, rest + 4, 8);
        c->type = 0xffff;
        c->flags = NBD_REPLY_FLAG_DONE;
        c->len = be32toh(err);
        c->cookie = be64toh(ck);
        return;
    }
    cr_assert_eq(be32toh(magic), NBD_STRUCTURED_REPLY_MAGIC);
    struct nbd_chunk_hdr h;
    cr_assert(cl_recv(fd, (uint8_t *) &h + 4, sizeof(h) - 4));
    c->flags = be16toh(h.flags);
    c->type = be16toh(h.type);
    c->cookie = be64toh(h.cookie);
    c->len = be32toh(h.len);
    c->payload = malloc(c->len ? c->len : 1);
    if (c->len)
        cr_assert(cl_recv(fd, c->payload, c->len));
}

struct listen_args {
    struct harness *h;
    const char *const *addrs;
    size_t n;
    int rc;
    bool stopped;
};

static void
second_stopped(void *arg)
{
    struct listen_args *a = arg;
    pthread_mutex_lock(&mu);
    a->stopped = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void
do_listen(void *arg)
{
    struct listen_args *a = arg;
    struct nbd_server *srv = NULL;
    a->rc = nbd_server_start(&loop, a->h->e, a->addrs, a->n, NULL, &srv);
    if (a->rc == 0)
        nbd_server_stop(srv, second_stopped, a);
    else
        a->stopped = true; /* a failed start frees itself when its handles close */
}

int
h_try_listen(struct harness *h, const char *const *addrs, size_t n)
{
    struct listen_args a = {h, addrs, n, 0, false};
    run_on_loop(do_listen, &a);
    pthread_mutex_lock(&mu);
    while (!a.stopped)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return a.rc;
}
