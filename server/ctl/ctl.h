/* ctl: the control socket — length-prefixed protobuf Requests in, Responses out, one handler
 * per command group calling engine/store/meta. Nothing below ctl/ sees protobuf.
 * Owns: the listening Unix socket and control client connections.
 * Threads: loop thread; handlers that touch disk run through engine_submit(). */
#ifndef DD_CTL_CTL_H
#define DD_CTL_CTL_H

#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

struct engine;
struct nbd_server;
struct ctl_server; /* opaque */

struct ctl_options {
    const char *socket_path;  /* created with mode 0600 (0660 with group) */
    const char *group;        /* optional group owning the socket; NULL = none */
    uint32_t idle_timeout_ms; /* silent clients are dropped; 0 = 10000 */
};

/* 0 or -errno. engine (and nbd, may be NULL) borrowed until the stop callback. */
int ctl_server_start(uv_loop_t *loop, struct engine *engine, struct nbd_server *nbd,
                     const struct ctl_options *opt, struct ctl_server **out);
void ctl_server_stop(struct ctl_server *srv, void (*done)(void *arg), void *arg);

#endif
