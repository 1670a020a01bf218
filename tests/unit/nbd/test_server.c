/* Tests server/nbd/server.c and the limits in conn.c/transmit.c: listener addresses, stale
 * Unix sockets, max_connections, max_inflight and max_inflight_bytes backpressure, the
 * bound on read data held for the socket, and
 * stopping the server with requests in flight. */
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

static struct harness h;

TestSuite(server);

static void
unix_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", h.dir, name);
}

Test(server, listeners_parse_and_bind)
{
    h_start(&h, NULL, true);
    char p[160], a1[200];
    unix_path(p, sizeof(p), "x.sock");
    snprintf(a1, sizeof(a1), "unix:%s", p);
    const char *ok[] = {a1, "127.0.0.1:0", "localhost:0"};
    cr_assert_eq(h_try_listen(&h, ok, 3), 0);
    /* IPv6 in brackets, where the machine has it. */
    int s6 = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool have_v6 = s6 >= 0 && bind(s6, (struct sockaddr *) &sa6, sizeof(sa6)) == 0;
    if (s6 >= 0)
        close(s6);
    if (have_v6) {
        const char *v6[] = {"[::1]:0"};
        cr_assert_eq(h_try_listen(&h, v6, 1), 0);
    }
    struct stat st;
    cr_assert_neq(stat(p, &st), 0, "socket file removed at stop");
    const char *bad[][1] = {
        {"127.0.0.1:99999"}, {"127.0.0.1:http"}, {"unix:"}, {"[::1"}, {"no.such.host.invalid:1"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_lt(h_try_listen(&h, bad[i], 1), 0, "%s accepted", bad[i][0]);
    /* A port in use is an error, and the good listener before it is cleaned up. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    cr_assert_eq(bind(s, (struct sockaddr *) &sa, sizeof(sa)), 0);
    cr_assert_eq(listen(s, 1), 0);
    socklen_t sl = sizeof(sa);
    getsockname(s, (struct sockaddr *) &sa, &sl);
    char busy[64];
    snprintf(busy, sizeof(busy), "127.0.0.1:%d", ntohs(sa.sin_port));
    const char *two[] = {a1, busy};
    cr_assert_eq(h_try_listen(&h, two, 2), -EADDRINUSE);
    close(s);
    h_stop(&h);
}

Test(server, stale_unix_socket_is_replaced_live_one_refused)
{
    h_start(&h, NULL, true);
    char p[160], a[200];
    unix_path(p, sizeof(p), "stale.sock");
    snprintf(a, sizeof(a), "unix:%s", p);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(p), sizeof(sa.sun_path));
    memcpy(sa.sun_path, p, strlen(p) + 1);
    cr_assert_eq(bind(s, (struct sockaddr *) &sa, sizeof(sa)), 0);
    cr_assert_eq(listen(s, 1), 0);
    const char *one[] = {a};
    cr_assert_eq(h_try_listen(&h, one, 1), -EADDRINUSE, "a live server's socket was taken");
    close(s); /* the file stays: now stale */
    cr_assert_eq(h_try_listen(&h, one, 1), 0);
    /* A regular file of that name is not ours to remove. */
    int fd = open(p, O_CREAT | O_WRONLY, 0600);
    close(fd);
    cr_assert_eq(h_try_listen(&h, one, 1), -EEXIST);
    unlink(p);
    h_stop(&h);
}

/* On the main loop alone and on connection loop threads (counted across loops). */
Test(server, max_connections_refuses_then_recovers)
{
    const uint32_t loops[] = {1, 3};
    for (size_t k = 0; k < sizeof(loops) / sizeof(loops[0]); k++) {
        struct nbd_limits lim = {.max_connections = 3, .loops = loops[k]};
        h_start(&h, &lim, true);
        int fds[3];
        for (int i = 0; i < 3; i++) {
            fds[i] = h_connect_unix(&h);
            struct nbd_greeting g;
            cr_assert(cl_recv(fds[i], &g, sizeof(g)), "loops %u: connection %d has no greeting",
                      loops[k], i);
        }
        int extra = h_connect_unix(&h);
        cr_assert(cl_closed(extra), "loops %u: a fourth connection was served", loops[k]);
        close(extra);
        close(fds[0]);
        for (int i = 0; i < 200 && h_connections(&h) > 2; i++)
            usleep(10000);
        int again = h_connect_unix(&h);
        struct nbd_greeting g;
        cr_assert(cl_recv(again, &g, sizeof(g)), "loops %u: no greeting after a slot was freed",
                  loops[k]);
        close(again);
        close(fds[1]);
        close(fds[2]);
        h_stop(&h);
    }
}

static void
delayed_reads(int n, uint32_t len)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    fake_io_delay(h.e, 1 << 20, 100);
    for (int i = 0; i < n; i++)
        cl_req(fd, NBD_CMD_READ, 0, i, 1 << 20, len, NULL);
    uint8_t *b = malloc(len);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(cl_simple(fd, NULL), 0);
        cr_assert(cl_recv(fd, b, len));
    }
    free(b);
    close(fd);
}

Test(server, max_inflight_limits_requests_at_the_engine)
{
    struct nbd_limits lim = {.max_inflight = 2};
    h_start(&h, &lim, false);
    delayed_reads(8, 4096);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.reads, 8);
    cr_assert_eq(cnt.max_concurrent, 2, "max concurrent %u", cnt.max_concurrent);
    h_stop(&h);
}

Test(server, max_inflight_bytes_limits_buffers)
{
    struct nbd_limits lim = {.max_inflight_bytes = 1 << 20};
    h_start(&h, &lim, false);
    delayed_reads(6, 1 << 20);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.reads, 6);
    cr_assert_eq(cnt.max_concurrent, 1, "max concurrent %u", cnt.max_concurrent);
    h_stop(&h);
}

Test(server, read_data_waiting_for_the_socket_is_bounded)
{
    /* Default limits: 1 MiB of read buffers held per connection, so two 512 KiB reads
     * at a time although four workers are free (and 128 MiB of max_inflight_bytes). */
    h_start(&h, NULL, false);
    delayed_reads(6, 512 << 10);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.reads, 6);
    cr_assert_eq(cnt.max_concurrent, 2, "max concurrent %u", cnt.max_concurrent);
    h_stop(&h);
}

Test(server, reads_larger_than_the_held_bound_still_overlap)
{
    /* Two at a time, so one fills while the other is sent. */
    h_start(&h, NULL, false);
    delayed_reads(4, 4 << 20);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.reads, 4);
    cr_assert_eq(cnt.max_concurrent, 2, "max concurrent %u", cnt.max_concurrent);
    h_stop(&h);
}

Test(server, parked_reads_are_answered_after_a_half_close)
{
    h_start(&h, NULL, false);
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    fake_io_delay(h.e, 1 << 20, 50);
    const uint32_t len = 512 << 10;
    for (int i = 0; i < 8; i++)
        cl_req(fd, NBD_CMD_READ, 0, 100 + i, 1 << 20, len, NULL);
    shutdown(fd, SHUT_WR); /* six of them are still parked */
    uint8_t *b = malloc(len);
    bool seen[8] = {false};
    for (int i = 0; i < 8; i++) {
        uint64_t cookie = 0;
        cr_assert_eq(cl_simple(fd, &cookie), 0, "reply %d", i);
        cr_assert(cookie >= 100 && cookie < 108 && !seen[cookie - 100]);
        seen[cookie - 100] = true;
        cr_assert(cl_recv(fd, b, len));
    }
    free(b);
    cr_assert(cl_closed(fd), "the connection closes once every reply is out");
    close(fd);
    h_stop(&h);
}

Test(server, writes_are_not_held_up_by_parked_reads)
{
    h_start(&h, NULL, false);
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    fake_io_delay(h.e, 1 << 20, 200);
    const uint32_t len = 512 << 10;
    for (int i = 0; i < 6; i++)
        cl_req(fd, NBD_CMD_READ, 0, 100 + i, 1 << 20, len, NULL);
    uint8_t w[4096];
    memset(w, 3, sizeof(w));
    cl_req(fd, NBD_CMD_WRITE, 0, 7, 0, sizeof(w), w);
    uint64_t cookie = 0;
    cr_assert_eq(cl_simple(fd, &cookie), 0);
    cr_assert_eq(cookie, 7, "the write waited for parked reads (first reply: %" PRIu64 ")", cookie);
    uint8_t *b = malloc(len);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(cl_simple(fd, &cookie), 0);
        cr_assert(cl_recv(fd, b, len));
    }
    free(b);
    close(fd);
    h_stop(&h);
}

Test(server, without_limits_requests_overlap)
{
    h_start(&h, NULL, false);
    delayed_reads(4, 4096);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_geq(cnt.max_concurrent, 2, "requests never overlapped");
    h_stop(&h);
}

Test(server, stop_waits_for_requests_in_flight)
{
    h_start(&h, NULL, true);
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    int idle = h_connect_unix(&h); /* still in the handshake */
    fake_io_delay(h.e, 0, 300);
    uint8_t w[4096];
    memset(w, 7, sizeof(w));
    cl_req(fd, NBD_CMD_WRITE, 0, 1, 0, sizeof(w), w);
    usleep(50000);
    h_stop(&h); /* returns only once every connection is closed and the server freed */
    struct cl_chunk c;
    cl_chunk(fd, &c);
    cr_assert_eq(c.cookie, 1);
    cr_assert_eq(c.len, 0, "the write in flight completed before the stop");
    cr_assert(cl_closed(fd));
    cr_assert(cl_closed(idle));
    close(fd);
    close(idle);
}

Test(server, contexts_set_for_another_export_are_dropped_at_go)
{
    h_start(&h, NULL, false);
    int fd = h_connect(&h);
    cl_greet(fd, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    uint8_t b[256];
    uint32_t l, t;
    cl_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_STRUCTURED_REPLY, b, sizeof(b), &l), NBD_REP_ACK);
    /* SET_META_CONTEXT on "ro": name, one query. */
    uint32_t be = htobe32(2);
    memcpy(b, &be, 4);
    memcpy(b + 4, "ro", 2);
    be = htobe32(1);
    memcpy(b + 6, &be, 4);
    be = htobe32(15);
    memcpy(b + 10, &be, 4);
    memcpy(b + 14, "base:allocation", 15);
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, 29);
    while ((t = cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l)) == NBD_REP_META_CONTEXT)
        ;
    cr_assert_eq(t, NBD_REP_ACK);
    /* GO on the default export. */
    be = htobe32(0);
    memcpy(b, &be, 4);
    memset(b + 4, 0, 2);
    cl_opt(fd, NBD_OPT_GO, b, 6);
    while ((t = cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l)) == NBD_REP_INFO)
        ;
    cr_assert_eq(t, NBD_REP_ACK);
    cl_req(fd, NBD_CMD_BLOCK_STATUS, 0, 3, 0, 4096, NULL);
    struct cl_chunk c;
    cl_chunk(fd, &c);
    cr_assert_eq(c.type, NBD_REPLY_TYPE_ERROR);
    free(c.payload);
    close(fd);
    h_stop(&h);
}

Test(server, stop_does_not_wait_for_a_client_that_never_reads)
{
    h_start(&h, NULL, false);
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    uint8_t w[4096];
    memset(w, 1, sizeof(w));
    cl_req(fd, NBD_CMD_WRITE, 0, 1, 0, sizeof(w), w);
    /* 32 MiB of replies that are never read: far more than the socket buffers. */
    for (int i = 0; i < 32; i++)
        cl_req(fd, NBD_CMD_READ, NBD_CMD_FLAG_DF, 10 + i, 0, 1 << 20, NULL);
    usleep(300000);
    h_stop(&h); /* must return: the stop is forced once the engine work is done */
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(server, handshake_timeout_drops_idle_clients_only)
{
    struct nbd_limits lim = {.handshake_timeout_ms = 200};
    h_start(&h, &lim, false);
    int idle = h_connect(&h);
    int good = h_connect(&h);
    cl_go(good, "", false, NULL, NULL);
    cr_assert(cl_closed(idle), "an idle client was kept");
    close(idle);
    usleep(300000);
    cl_req(good, NBD_CMD_FLUSH, 0, 1, 0, 0, NULL);
    cr_assert_eq(cl_simple(good, NULL), 0, "a client in transmission was dropped");
    close(good);
    h_stop(&h);
}

Test(server, half_closed_client_that_never_reads_is_dropped_in_time)
{
    struct nbd_limits lim = {.handshake_timeout_ms = 300};
    h_start(&h, &lim, false);
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    for (int i = 0; i < 16; i++)
        cl_req(fd, NBD_CMD_READ, NBD_CMD_FLAG_DF, i, 0, 1 << 20, NULL);
    shutdown(fd, SHUT_WR); /* end of input, but the replies are never read */
    for (int i = 0; i < 300 && h_connections(&h) > 0; i++)
        usleep(10000);
    cr_assert_eq(h_connections(&h), 0, "a client that never reads kept its connection");
    close(fd);
    h_stop(&h);
}
