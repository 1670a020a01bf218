/* unixsock: stale-socket detection before bind. A socket file left by a crashed server
 * refuses connections; one of a live server accepts them — so a connect tells them apart
 * without guessing from pids or lock files. */
#include "util/unixsock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"

int
unixsock_clear_stale(const char *path, const char *who)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        log_err("%s: %s exists and is not a socket; not removing it", who, path);
        return -EEXIST;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, (struct sockaddr *) &sa, sizeof(sa));
    int err = errno;
    close(fd);
    if (rc == 0) {
        log_err("%s: another server is answering on %s", who, path);
        return -EADDRINUSE;
    }
    if (err != ECONNREFUSED && err != ENOENT) {
        log_err("%s: cannot probe %s: %s", who, path, strerror(err));
        return -err;
    }
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    log_info("%s: removed stale socket %s", who, path);
    return 0;
}
