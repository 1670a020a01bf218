/* harness: runs the NBD server on a libuv loop in a background thread against the fake
 * engine, and gives tests a blocking client over a socketpair (or a Unix socket), with
 * receive time-outs so that a missing reply fails the test instead of hanging it. */
#ifndef DD_TESTS_NBD_HARNESS_H
#define DD_TESTS_NBD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fakes/fake_engine_io.h"
#include "nbd/nbd.h"
#include "nbd/wire.h"

#define H_DEFAULT_SIZE (64ull << 20)
#define H_RO_SIZE      (1ull << 20)

struct harness {
    struct engine *e;
    struct nbd_server *srv;
    char dir[64];   /* temp dir for a Unix listener, or "" */
    char sock[128]; /* its socket path */
};

/* Exports: "default" (64 MiB, 4 KiB chunks), "ro" (1 MiB, read-only), "big64k" (16 MiB,
 * 64 KiB chunks). lim may be NULL. with_unix: also listen on a Unix socket in a temp dir. */
void h_start(struct harness *h, const struct nbd_limits *lim, bool with_unix);
void h_stop(struct harness *h);
/* A connected client fd: a socketpair end adopted by the server, or a Unix connect. */
int h_connect(struct harness *h);
int h_connect_unix(struct harness *h);
uint32_t h_connections(struct harness *h);
/* Starts a second server on the harness loop with these listeners; stops it again on
 * success. Returns nbd_server_start's result. */
int h_try_listen(struct harness *h, const char *const *addrs, size_t n);

/* ---- blocking client ---- */
bool cl_send(int fd, const void *p, size_t n);
bool cl_recv(int fd, void *p, size_t n);
/* true when the server closes the connection (EOF or reset) within the time-out, after
 * discarding whatever it still sends. */
bool cl_closed(int fd);
/* Reads the greeting and sends client flags. */
void cl_greet(int fd, uint32_t client_flags);
void cl_opt(int fd, uint32_t opt, const void *data, uint32_t len);
/* Reads one option reply; payload (up to cap) into buf. Returns the reply type. */
uint32_t cl_rep(int fd, uint32_t want_opt, void *buf, uint32_t cap, uint32_t *len);
/* Full negotiation: greet, optional STRUCTURED_REPLY and SET_META_CONTEXT of ctx (NULL
 * terminated), then GO name. Returns the transmission flags; *size set. */
uint16_t cl_go(int fd, const char *name, bool structured, const char *const *ctx, uint64_t *size);
void cl_req(int fd, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off, uint32_t len,
            const void *payload);
/* The same request (header, then payload if not NULL) written to out instead of sent, so a
 * test can send several in one write; returns the bytes written. */
size_t cl_req_put(uint8_t *out, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off,
                  uint32_t len, const void *payload);
/* Simple reply: returns the NBD error, cookie checked when want_cookie != 0. */
uint32_t cl_simple(int fd, uint64_t *cookie);
struct cl_chunk {
    uint16_t flags, type;
    uint64_t cookie;
    uint32_t len;
    uint8_t *payload; /* malloc'd; free it */
};
/* Reads either reply kind: magic decides. Simple replies come back as type 0xffff with the
 * error in len. */
void cl_chunk(int fd, struct cl_chunk *c);

#endif
