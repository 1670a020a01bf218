/* Tests server/nbd/loops.c: connection loops with a thread each — as many threads as
 * nbd_limits.loops asks (none for 1), all joined at stop; clients spread over the loops
 * each get their own bytes back; a stop answers the requests in flight on every loop.
 * (max_connections across loops: test_server.c.) */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct harness h;

TestSuite(loops);

/* Threads of this process. */
static unsigned
threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    unsigned n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(loops, that_many_threads_start_and_are_joined_at_stop)
{
    const uint32_t cases[] = {1, 2, 3};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned before = threads_now();
        struct nbd_limits lim = {.loops = cases[i]};
        h_start(&h, &lim, true);
        /* The harness's own loop thread, plus one per connection loop (none for 1). */
        unsigned want = 1 + (cases[i] >= 2 ? cases[i] : 0);
        cr_assert_eq(threads_now() - before, want, "loops = %u", cases[i]);
        h_stop(&h);
        cr_assert_eq(threads_now(), before, "loops = %u: threads left after the stop", cases[i]);
    }
}

/* Each client writes its own pattern, all writes in flight at once, then reads it back. */
Test(loops, clients_on_several_loops_read_back_their_own_writes)
{
    enum { N = 6, LEN = 64 << 10 };
    struct nbd_limits lim = {.loops = 3};
    h_start(&h, &lim, true);
    int fd[N];
    static uint8_t data[N][LEN], got[LEN];
    for (int i = 0; i < N; i++) {
        fd[i] = h_connect_unix(&h);
        cl_go(fd[i], "", false, NULL, NULL);
        for (size_t j = 0; j < LEN; j++)
            data[i][j] = (uint8_t) (i * 31 + j * 7 + (j >> 12));
    }
    cr_assert_eq(h_connections(&h), N);
    for (int i = 0; i < N; i++)
        cl_req(fd[i], NBD_CMD_WRITE, 0, 100 + i, (uint64_t) i << 20, LEN, data[i]);
    for (int i = 0; i < N; i++) {
        uint64_t cookie = 0;
        cr_assert_eq(cl_simple(fd[i], &cookie), 0, "write of client %d", i);
        cr_assert_eq(cookie, 100 + (uint64_t) i);
    }
    for (int i = 0; i < N; i++)
        cl_req(fd[i], NBD_CMD_READ, 0, 200 + i, (uint64_t) i << 20, LEN, NULL);
    for (int i = 0; i < N; i++) {
        uint64_t cookie = 0;
        cr_assert_eq(cl_simple(fd[i], &cookie), 0, "read of client %d", i);
        cr_assert_eq(cookie, 200 + (uint64_t) i);
        cr_assert(cl_recv(fd[i], got, LEN));
        cr_assert(!memcmp(got, data[i], LEN), "client %d read other bytes", i);
    }
    for (int i = 0; i < N; i++)
        close(fd[i]);
    for (int i = 0; i < 200 && h_connections(&h) > 0; i++)
        usleep(10000);
    cr_assert_eq(h_connections(&h), 0, "closed clients still counted");
    h_stop(&h);
}

Test(loops, stop_answers_the_requests_in_flight_on_every_loop)
{
    enum { N = 4 };
    struct nbd_limits lim = {.loops = 2};
    h_start(&h, &lim, true);
    int fd[N];
    for (int i = 0; i < N; i++) {
        fd[i] = h_connect_unix(&h);
        cl_go(fd[i], "", false, NULL, NULL);
    }
    int idle = h_connect_unix(&h); /* still in the handshake */
    fake_io_delay(h.e, 0, 300);
    uint8_t w[4096];
    memset(w, 9, sizeof(w));
    for (int i = 0; i < N; i++)
        cl_req(fd[i], NBD_CMD_WRITE, 0, 1 + i, 0, sizeof(w), w);
    usleep(50000);
    h_stop(&h); /* returns once every connection is closed and every thread joined */
    for (int i = 0; i < N; i++) {
        uint64_t cookie = 0;
        cr_assert_eq(cl_simple(fd[i], &cookie), 0, "client %d: the write in flight completed", i);
        cr_assert_eq(cookie, 1 + (uint64_t) i);
        cr_assert(cl_closed(fd[i]));
        close(fd[i]);
    }
    cr_assert(cl_closed(idle));
    close(idle);
}
