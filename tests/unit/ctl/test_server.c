/* ctl server: socket file handling, framing limits, malformed and version-mismatched
 * requests, idle clients, pipelining and clients that vanish mid-command — against a real
 * ctl_server on a libuv loop with the fake engine. */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dedupd/ctl_frame.h"
#include "dedupd/limits.h"
#include "dedupd/version.h"
#include "fakes/ctl_fake_engine.h"
#include "harness.h"

static Dedupd__Response *
status_call(int fd)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatusRequest st = DEDUPD__STATUS_REQUEST__INIT;
    req.version = DEDUPD_CTL_PROTO_VERSION;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    req.status = &st;
    return client_call(fd, &req, NULL);
}

static void
assert_serving(const char *path)
{
    int fd = client_connect(path);
    cr_assert_geq(fd, 0);
    Dedupd__Response *r = status_call(fd);
    cr_assert_not_null(r, "server stopped serving");
    cr_assert_eq(r->status, 0);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
}

Test(server, socket_is_private_and_answers)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    struct stat st;
    cr_assert_eq(lstat(h.path, &st), 0);
    cr_assert(S_ISSOCK(st.st_mode));
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    assert_serving(h.path);
    harness_stop(&h);
    cr_assert_neq(access(h.path, F_OK), 0, "socket file removed at stop");
}

Test(server, stale_socket_file_is_replaced)
{
    char dir[] = "/tmp/dd-ctl-stale.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%.40s/ctl.sock", dir);
    /* A bound socket nobody listens on: what a crashed server leaves behind. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
    close(fd);

    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctl_server *srv = NULL;
    struct ctl_options opt = {.socket_path = path};
    cr_assert_eq(ctl_server_start(&loop, fake_engine_new(), NULL, &opt, &srv), 0);
    ctl_server_stop(srv, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    rmdir(dir);
}

Test(server, refuses_to_start_over_a_live_server_or_a_file)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctl_server *srv = NULL;
    struct ctl_options opt = {.socket_path = h.path};
    cr_assert_eq(ctl_server_start(&loop, h.engine, NULL, &opt, &srv), -EADDRINUSE);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    assert_serving(h.path); /* the first server is untouched */

    char file[160];
    snprintf(file, sizeof(file), "%s/plain", h.dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    uv_loop_init(&loop);
    opt.socket_path = file;
    cr_assert_eq(ctl_server_start(&loop, h.engine, NULL, &opt, &srv), -EEXIST);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    cr_assert_eq(access(file, F_OK), 0, "a regular file is never removed");
    unlink(file);
    harness_stop(&h);
}

Test(server, malformed_request_gets_ebadmsg_and_connection_keeps_serving)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    const uint8_t junk[] = {0x52, 0x7f, 0x00, 0xff};
    cr_assert(client_send_frame(fd, junk, sizeof(junk)));
    Dedupd__Response *r = client_recv(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EBADMSG);
    cr_assert(strstr(r->message, "malformed"));
    cr_assert_eq(r->version, DEDUPD_CTL_PROTO_VERSION);
    dedupd__response__free_unpacked(r, NULL);
    r = status_call(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, 0);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
    harness_stop(&h);
}

Test(server, oversized_request_is_refused_and_closed)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    uint8_t hdr[DEDUPD_CTL_FRAME_HDR];
    ctl_frame_put_len(hdr, DEDUPD_CTL_MAX_MSG + 1);
    cr_assert(client_write(fd, hdr, sizeof(hdr)));
    Dedupd__Response *r = client_recv(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EMSGSIZE);
    dedupd__response__free_unpacked(r, NULL);
    cr_assert(client_wait_closed(fd, 5000));
    close(fd);
    assert_serving(h.path);
    harness_stop(&h);
}

Test(server, request_at_the_limit_is_read_whole)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    /* A status request padded with an unknown bytes field up to exactly the limit. */
    size_t len = DEDUPD_CTL_MAX_MSG;
    uint8_t *msg = calloc(1, len);
    size_t pad = len - 2 - 2 - 5; /* version, status, field 50 tag (2) + 3-byte length */
    uint8_t *p = msg;
    *p++ = 0x08, *p++ = DEDUPD_CTL_PROTO_VERSION;
    *p++ = 0x52, *p++ = 0x00;
    *p++ = 0x92, *p++ = 0x03; /* field 50, wire type 2 */
    *p++ = (uint8_t) (0x80 | (pad & 0x7f));
    *p++ = (uint8_t) (0x80 | ((pad >> 7) & 0x7f));
    *p++ = (uint8_t) (pad >> 14);
    cr_assert_eq((size_t) (p - msg) + pad, len);
    cr_assert(client_send_frame(fd, msg, len));
    free(msg);
    Dedupd__Response *r = client_recv(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, 0, "status %d: %s", r->status, r->message);
    cr_assert_eq(r->result_case, DEDUPD__RESPONSE__RESULT_STATUS_RESULT);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
    harness_stop(&h);
}

Test(server, other_protocol_version_is_unsupported)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatusRequest st = DEDUPD__STATUS_REQUEST__INIT;
    req.version = DEDUPD_CTL_PROTO_VERSION + 1;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    req.status = &st;
    Dedupd__Response *r = client_call(fd, &req, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EPROTONOSUPPORT);
    cr_assert(strstr(r->message, "unsupported protocol version"), "%s", r->message);
    cr_assert_eq(r->version, DEDUPD_CTL_PROTO_VERSION);
    dedupd__response__free_unpacked(r, NULL);
    /* An empty frame is a Request with version 0: also unsupported, not a crash. */
    cr_assert(client_send_frame(fd, "", 0));
    r = client_recv(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EPROTONOSUPPORT);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
    harness_stop(&h);
}

Test(server, unknown_command_is_eopnotsupp)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    const uint8_t newer[] = {0x08, DEDUPD_CTL_PROTO_VERSION, 0x9a, 0x06, 0x00};
    cr_assert(client_send_frame(fd, newer, sizeof(newer)));
    Dedupd__Response *r = client_recv(fd);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EOPNOTSUPP);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
    harness_stop(&h);
}

Test(server, silent_and_half_sent_clients_time_out)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 200), 0);
    int silent = client_connect(h.path);
    int half = client_connect(h.path);
    const uint8_t part[] = {0x00, 0x00, 0x00, 0x10, 0x08};
    cr_assert(client_write(half, part, sizeof(part)));
    cr_assert(client_wait_closed(silent, 5000), "silent client still connected");
    cr_assert(client_wait_closed(half, 5000), "half-sent client still connected");
    close(silent);
    close(half);
    assert_serving(h.path);
    harness_stop(&h);
}

Test(server, pipelined_requests_are_answered_in_order)
{
    struct harness h;
    cr_assert_eq(harness_start(&h, fake_engine_new(), NULL, 0), 0);
    int fd = client_connect(h.path);
    /* Three frames in one write: status, junk, status. */
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatusRequest st = DEDUPD__STATUS_REQUEST__INIT;
    req.version = DEDUPD_CTL_PROTO_VERSION;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    req.status = &st;
    uint8_t buf[256];
    size_t n = dedupd__request__get_packed_size(&req), off = 0;
    for (int i = 0; i < 3; i++) {
        if (i == 1) {
            ctl_frame_put_len(buf + off, 1);
            buf[off + 4] = 0xff;
            off += 5;
            continue;
        }
        ctl_frame_put_len(buf + off, (uint32_t) n);
        dedupd__request__pack(&req, buf + off + 4);
        off += 4 + n;
    }
    cr_assert(client_write(fd, buf, off));
    int want[] = {0, EBADMSG, 0};
    for (int i = 0; i < 3; i++) {
        Dedupd__Response *r = client_recv(fd);
        cr_assert_not_null(r, "response %d", i);
        cr_assert_eq(r->status, want[i], "response %d: %d", i, r->status);
        dedupd__response__free_unpacked(r, NULL);
    }
    close(fd);
    harness_stop(&h);
}

Test(server, client_leaving_mid_command_cancels_it_and_stop_waits)
{
    struct harness h;
    struct engine *e = fake_engine_new();
    fake_engine_maint(50, 20); /* about a second of "work" */
    cr_assert_eq(harness_start(&h, e, NULL, 0), 0);
    int fd = client_connect(h.path);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__GcRequest gc = DEDUPD__GC_REQUEST__INIT;
    req.version = DEDUPD_CTL_PROTO_VERSION;
    req.cmd_case = DEDUPD__REQUEST__CMD_GC;
    req.gc = &gc;
    cr_assert(client_send(fd, &req));
    Dedupd__Response *r = client_recv(fd); /* first progress update */
    cr_assert_not_null(r);
    cr_assert(r->more);
    dedupd__response__free_unpacked(r, NULL);
    close(fd);
    assert_serving(h.path); /* other clients are served meanwhile */
    harness_stop(&h);       /* returns only after the worker finished */
}

Test(server, socket_with_a_group_is_0660_and_owned_by_it)
{
    struct group *g = getgrgid(getgid());
    cr_assert_not_null(g);
    char dir[] = "/tmp/dd-ctl-grp.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%.40s/ctl.sock", dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctl_server *srv = NULL;
    struct ctl_options opt = {.socket_path = path, .group = g->gr_name};
    cr_assert_eq(ctl_server_start(&loop, fake_engine_new(), NULL, &opt, &srv), 0);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0660, "mode %o", st.st_mode & 0777);
    cr_assert_eq(st.st_gid, g->gr_gid);
    ctl_server_stop(srv, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);

    opt.group = "no-such-group-dedupd";
    cr_assert_eq(ctl_server_start(&loop, fake_engine_new(), NULL, &opt, &srv), -EINVAL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&loop), 0);
    rmdir(dir);
}

Test(server, one_maintenance_command_at_a_time)
{
    struct harness h;
    struct engine *e = fake_engine_new();
    fake_engine_maint(20, 20); /* ~0.4 s */
    cr_assert_eq(harness_start(&h, e, NULL, 0), 0);
    int a = client_connect(h.path), b = client_connect(h.path);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__GcRequest gc = DEDUPD__GC_REQUEST__INIT;
    req.version = DEDUPD_CTL_PROTO_VERSION;
    req.cmd_case = DEDUPD__REQUEST__CMD_GC;
    req.gc = &gc;
    cr_assert(client_send(a, &req));
    Dedupd__Response *r = client_recv(a); /* progress: gc is running */
    cr_assert_not_null(r);
    cr_assert(r->more);
    dedupd__response__free_unpacked(r, NULL);
    Dedupd__ScrubRequest sc = DEDUPD__SCRUB_REQUEST__INIT;
    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    sreq.version = DEDUPD_CTL_PROTO_VERSION;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_SCRUB;
    sreq.scrub = &sc;
    r = client_call(b, &sreq, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, EBUSY);
    cr_assert(strstr(r->message, "gc is already running"), "%s", r->message);
    dedupd__response__free_unpacked(r, NULL);
    r = status_call(b); /* other commands go on */
    cr_assert_eq(r->status, 0);
    dedupd__response__free_unpacked(r, NULL);
    for (int i = 0; i < 1000; i++) { /* read gc's progress up to its final answer */
        r = client_recv(a);
        cr_assert_not_null(r);
        bool more = r->more;
        dedupd__response__free_unpacked(r, NULL);
        if (!more)
            break;
    }
    /* The first gc has ended by now: the second, sent after, ran. */
    r = client_call(b, &sreq, NULL);
    cr_assert_eq(r->status, 0, "%s", r->message);
    dedupd__response__free_unpacked(r, NULL);
    close(a);
    close(b);
    harness_stop(&h);
}
