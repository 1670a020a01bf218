/* harness: see harness.h. */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "dedupd/ctl_frame.h"
#include "dedupd/limits.h"

static void
on_stopped(void *arg)
{
    struct harness *h = arg;
    h->srv = NULL;
    uv_close((uv_handle_t *) &h->stop_async, NULL);
}

static void
on_stop_async(uv_async_t *a)
{
    struct harness *h = a->data;
    ctl_server_stop(h->srv, on_stopped, h);
}

static void *
loop_thread(void *arg)
{
    struct harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
    return NULL;
}

int
harness_start(struct harness *h, struct engine *engine, struct nbd_server *nbd, uint32_t idle_ms)
{
    memset(h, 0, sizeof(*h));
    strcpy(h->dir, "/tmp/dd-ctl-test.XXXXXX");
    if (!mkdtemp(h->dir))
        return -errno;
    snprintf(h->path, sizeof(h->path), "%s/ctl.sock", h->dir);
    h->engine = engine;
    uv_loop_init(&h->loop);
    struct ctl_options opt = {.socket_path = h->path, .idle_timeout_ms = idle_ms};
    int rc = ctl_server_start(&h->loop, engine, nbd, &opt, &h->srv);
    if (rc < 0) {
        uv_run(&h->loop, UV_RUN_DEFAULT); /* lets the failed listener close */
        uv_loop_close(&h->loop);
        rmdir(h->dir);
        return rc;
    }
    uv_async_init(&h->loop, &h->stop_async, on_stop_async);
    h->stop_async.data = h;
    pthread_create(&h->thread, NULL, loop_thread, h);
    h->running = true;
    return 0;
}

void
harness_stop(struct harness *h)
{
    if (!h->running)
        return;
    uv_async_send(&h->stop_async);
    pthread_join(h->thread, NULL);
    h->running = false;
    uv_loop_close(&h->loop);
    unlink(h->path);
    rmdir(h->dir);
}

int
client_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

bool
client_write(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t) n;
    }
    return true;
}

bool
client_send_frame(int fd, const void *msg, size_t len)
{
    uint8_t hdr[DEDUPD_CTL_FRAME_HDR];
    ctl_frame_put_len(hdr, (uint32_t) len);
    return client_write(fd, hdr, sizeof(hdr)) && client_write(fd, msg, len);
}

bool
client_send(int fd, const Dedupd__Request *req)
{
    size_t len = dedupd__request__get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    dedupd__request__pack(req, buf);
    bool ok = client_send_frame(fd, buf, len);
    free(buf);
    return ok;
}

static bool
read_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t) n;
    }
    return true;
}

Dedupd__Response *
client_recv(int fd)
{
    uint8_t hdr[DEDUPD_CTL_FRAME_HDR];
    if (!read_all(fd, hdr, sizeof(hdr)))
        return NULL;
    uint32_t len = ctl_frame_get_len(hdr);
    if (len > DEDUPD_CTL_MAX_MSG)
        return NULL;
    uint8_t *buf = malloc(len ? len : 1);
    Dedupd__Response *resp = NULL;
    if (read_all(fd, buf, len))
        resp = dedupd__response__unpack(NULL, len, buf);
    free(buf);
    return resp;
}

Dedupd__Response *
client_call(int fd, const Dedupd__Request *req, int *progress)
{
    if (progress)
        *progress = 0;
    if (!client_send(fd, req))
        return NULL;
    for (int i = 0; i < 100000; i++) {
        Dedupd__Response *r = client_recv(fd);
        if (!r || !r->more)
            return r;
        if (progress)
            (*progress)++;
        dedupd__response__free_unpacked(r, NULL);
    }
    return NULL;
}

bool
client_wait_closed(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n <= 0)
            return false;
        char c[256];
        ssize_t r = recv(fd, c, sizeof(c), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return true;
        /* Data (an error response) before the close: keep waiting for EOF. */
    }
}
