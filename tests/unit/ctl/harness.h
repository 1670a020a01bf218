/* harness: a ctl_server on a libuv loop in a background thread, and a blocking test client
 * speaking the framed protocol, for the ctl unit tests. Every wait is bounded. */
#ifndef DD_TEST_CTL_HARNESS_H
#define DD_TEST_CTL_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ctl/ctl.h"
#include "dedupd.pb-c.h"

struct harness {
    uv_loop_t loop;
    uv_async_t stop_async;
    pthread_t thread;
    struct ctl_server *srv;
    struct engine *engine;
    char dir[64];
    char path[128];
    bool running;
};

/* Makes a temp dir and starts the server on DIR/ctl.sock with `engine` (idle_ms 0 = default).
 * Returns ctl_server_start's result; on failure nothing is left running. */
int harness_start(struct harness *h, struct engine *engine, struct nbd_server *nbd,
                  uint32_t idle_ms);
/* Stops the server (waiting for its callback), the loop and the thread; removes the dir. */
void harness_stop(struct harness *h);

/* Connected fd with a 10 s receive timeout, or -1. */
int client_connect(const char *path);
/* Writes all of buf; false on error. */
bool client_write(int fd, const void *buf, size_t len);
bool client_send_frame(int fd, const void *msg, size_t len);
bool client_send(int fd, const Dedupd__Request *req);
/* Next Response (free with dedupd__response__free_unpacked), or NULL on EOF/timeout/garbage. */
Dedupd__Response *client_recv(int fd);
/* Sends req and returns the final Response; *progress counts the `more` ones (may be NULL). */
Dedupd__Response *client_call(int fd, const Dedupd__Request *req, int *progress);
/* true when the peer closed the connection within timeout_ms. */
bool client_wait_closed(int fd, int timeout_ms);

#endif
