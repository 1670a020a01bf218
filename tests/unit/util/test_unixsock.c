/* Tests server/util/unixsock.c: stale sockets are removed, live ones and non-sockets kept. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/unixsock.h"

static char dir[] = "/tmp/dedupd-unixsock-XXXXXX";
static char path[64];

static void
setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.sock", dir);
}
static void
teardown(void)
{
    unlink(path);
    rmdir(dir);
}
TestSuite(unixsock, .init = setup, .fini = teardown);

static int
bound_socket(bool listening)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
    if (listening)
        cr_assert_eq(listen(fd, 1), 0);
    return fd;
}

Test(unixsock, absent_path_is_free)
{
    cr_assert_eq(unixsock_clear_stale(path, "test"), 0);
}

Test(unixsock, stale_socket_is_removed)
{
    close(bound_socket(false)); /* the file stays, nobody listens: a crashed server */
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert_eq(unixsock_clear_stale(path, "test"), 0);
    cr_assert_eq(lstat(path, &st), -1, "stale socket file must be gone");
}

Test(unixsock, live_socket_is_kept)
{
    int fd = bound_socket(true);
    cr_assert_eq(unixsock_clear_stale(path, "test"), -EADDRINUSE);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    close(fd);
}

Test(unixsock, regular_file_is_never_removed)
{
    FILE *f = fopen(path, "w");
    fputs("precious", f);
    fclose(f);
    cr_assert_eq(unixsock_clear_stale(path, "test"), -EEXIST);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert(S_ISREG(st.st_mode));
}
