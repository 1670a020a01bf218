/* dedupd-ctl connection: connect to the control socket, send one framed Request, read
 * Progress updates (shown on stderr) until the final Response. Blocking I/O with a receive
 * time-out; every failure is printed once, naming the socket. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "dedupd/ctl_frame.h"
#include "dedupd/errors.h"
#include "dedupd/limits.h"
#include "dedupd/version.h"

static int
connect_socket(struct client *c)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(c->socket_path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "%s: socket path too long: %s\n", PROG, c->socket_path);
        return -1;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", c->socket_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
        int err = errno;
        fprintf(stderr, "%s: cannot connect to %s: %s%s\n", PROG, c->socket_path, strerror(err),
                err == ENOENT || err == ECONNREFUSED ? " (is dedupd running? see -s)" : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static bool
write_all(int fd, const uint8_t *p, size_t len)
{
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

/* 1 read, 0 EOF, -errno. */
static int
read_all(int fd, uint8_t *p, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, p + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return 0;
        got += (size_t) n;
    }
    return 1;
}

static double
now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

struct progress_state {
    double last;
    bool shown;
};

/* TTY: one line rewritten in place (at most 10 times a second). Otherwise plain lines, at
 * most one a second, so a log stays readable. --json: nothing. */
static void
show_progress(struct client *c, struct progress_state *ps, const Dedupd__Progress *p)
{
    if (c->json)
        return;
    double t = now_sec();
    bool last = p->total && p->done >= p->total;
    if (ps->shown && !last && t - ps->last < (c->tty ? 0.1 : 1.0))
        return;
    ps->last = t;
    ps->shown = true;
    char line[160];
    if (p->total)
        snprintf(line, sizeof(line), "%s: %3u%% (%" PRIu64 "/%" PRIu64 ")", p->operation,
                 (unsigned) (p->done * 100 / p->total), p->done, p->total);
    else
        snprintf(line, sizeof(line), "%s: %" PRIu64 " done", p->operation, p->done);
    if (c->tty)
        fprintf(stderr, "\r\033[K%s", line);
    else
        fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

Dedupd__Response *
client_call(struct client *c, Dedupd__Request *req, int timeout_sec)
{
    if (c->fd < 0) {
        c->fd = connect_socket(c);
        if (c->fd < 0)
            return NULL;
    }
    struct timeval tv = {.tv_sec = timeout_sec};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    req->version = DEDUPD_CTL_PROTO_VERSION;
    size_t len = dedupd__request__get_packed_size(req);
    uint8_t *buf = malloc(DEDUPD_CTL_FRAME_HDR + len);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return NULL;
    }
    ctl_frame_put_len(buf, (uint32_t) len);
    dedupd__request__pack(req, buf + DEDUPD_CTL_FRAME_HDR);
    bool ok = write_all(c->fd, buf, DEDUPD_CTL_FRAME_HDR + len);
    free(buf);
    if (!ok) {
        fprintf(stderr, "%s: cannot send to %s: %s\n", PROG, c->socket_path, strerror(errno));
        return NULL;
    }
    struct progress_state ps = {0};
    for (;;) {
        uint8_t hdr[DEDUPD_CTL_FRAME_HDR];
        int rc = read_all(c->fd, hdr, sizeof(hdr));
        if (rc <= 0) {
            if (ps.shown && c->tty)
                fputc('\n', stderr);
            if (rc == -EAGAIN || rc == -EWOULDBLOCK)
                fprintf(stderr, "%s: no answer from %s within %d s\n", PROG, c->socket_path,
                        timeout_sec);
            else
                fprintf(stderr, "%s: connection to %s lost: %s\n", PROG, c->socket_path,
                        rc == 0 ? "closed by the server" : strerror(-rc));
            return NULL;
        }
        uint32_t mlen = ctl_frame_get_len(hdr);
        if (mlen > DEDUPD_CTL_MAX_MSG) {
            fprintf(stderr, "%s: server sent a %" PRIu32 "-byte message (limit %u)\n", PROG, mlen,
                    DEDUPD_CTL_MAX_MSG);
            return NULL;
        }
        uint8_t *mbuf = malloc(mlen ? mlen : 1);
        if (!mbuf || read_all(c->fd, mbuf, mlen) <= 0) {
            free(mbuf);
            fprintf(stderr, "%s: connection to %s lost mid-message\n", PROG, c->socket_path);
            return NULL;
        }
        Dedupd__Response *r = dedupd__response__unpack(NULL, mlen, mbuf);
        free(mbuf);
        if (!r) {
            fprintf(stderr, "%s: malformed response from %s\n", PROG, c->socket_path);
            return NULL;
        }
        if (r->more) {
            if (r->result_case == DEDUPD__RESPONSE__RESULT_PROGRESS)
                show_progress(c, &ps, r->progress);
            dedupd__response__free_unpacked(r, NULL);
            continue;
        }
        if (ps.shown && c->tty)
            fputc('\n', stderr);
        return r;
    }
}

void
client_close(struct client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int
client_status(struct client *c, const Dedupd__Response *r)
{
    if (r->status == 0)
        return DEDUPD_EXIT_OK;
    const char *msg = r->message && *r->message ? r->message : strerror(r->status);
    fprintf(stderr, "%s: %s\n", PROG, msg);
    if (r->status == EPROTONOSUPPORT)
        fprintf(stderr, "%s: this dedupd-ctl speaks control protocol %d, the server %u\n", PROG,
                DEDUPD_CTL_PROTO_VERSION, r->version);
    if (c->json) {
        struct json j;
        json_init(&j, stdout);
        json_obj_begin(&j, NULL);
        json_i64(&j, "status", r->status);
        json_str(&j, "error", msg);
        json_obj_end(&j);
    }
    return DEDUPD_EXIT_RUNTIME;
}

Dedupd__Response *
client_request(struct client *c, Dedupd__Request *req, int timeout_sec,
               Dedupd__Response__ResultCase want, int *exit_code)
{
    Dedupd__Response *r = client_call(c, req, timeout_sec);
    if (!r) {
        *exit_code = DEDUPD_EXIT_RUNTIME;
        return NULL;
    }
    *exit_code = client_status(c, r);
    if (*exit_code == DEDUPD_EXIT_OK && want != DEDUPD__RESPONSE__RESULT__NOT_SET &&
        r->result_case != want) {
        fprintf(stderr, "%s: unexpected response from the server (result %d)\n", PROG,
                (int) r->result_case);
        *exit_code = DEDUPD_EXIT_RUNTIME;
    }
    if (*exit_code != DEDUPD_EXIT_OK) {
        dedupd__response__free_unpacked(r, NULL);
        return NULL;
    }
    return r;
}
