/* nbd: the NBD server — listeners (TCP, Unix), fixed-newstyle handshake, transmission
 * phase with structured replies and meta contexts. Parses every byte from the network and
 * turns requests into engine_submit() calls; replies go out as they complete.
 * Owns: listening sockets, connections and their buffers.
 * Threads: the functions below are for the caller's loop thread; connections may be served
 * by loop threads of the server's own (nbd_limits.loops). */
#ifndef DD_NBD_NBD_H
#define DD_NBD_NBD_H

#include <stdint.h>

#include <uv.h>

struct engine;
struct nbd_server; /* opaque */

struct nbd_limits {
    uint32_t max_connections;      /* 0 = 256 */
    uint32_t max_inflight;         /* requests in flight per connection; 0 = 64 */
    uint64_t max_inflight_bytes;   /* payload bytes in flight per connection; 0 = 128 MiB */
    uint32_t handshake_timeout_ms; /* a client still negotiating after this is dropped, and
                                      so is one that stopped sending but does not read its
                                      last replies; 0 = 30 s */
    uint32_t loops;                /* event loops serving connections: 1 = the caller's loop;
                                      n >= 2 = n threads, each with its own loop, so that
                                      cached reads are answered on several cores without a
                                      hand-off to the workers; 0 = one per CPU, at most 4 */
};

/* Starts listening on each address ("HOST:PORT", "[V6]:PORT" or "unix:PATH"); limits may
 * be NULL (all defaults). 0 or -errno (an address that fails to bind is logged with its
 * name); on failure nothing listens and the partial server frees itself as the loop runs.
 * engine is borrowed until nbd_server_stop's callback. */
int nbd_server_start(uv_loop_t *loop, struct engine *engine, const char *const *listen,
                     size_t n_listen, const struct nbd_limits *limits, struct nbd_server **out);
/* Stops accepting, disconnects clients after their in-flight requests complete (and are
 * answered where the client still reads), then calls done (loop thread) and frees the
 * server. srv NULL: done is called at once. */
void nbd_server_stop(struct nbd_server *srv, void (*done)(void *arg), void *arg);
/* Number of open client connections (for status). */
uint32_t nbd_server_connections(const struct nbd_server *srv);
/* Event loops serving connections (for status): the loop threads, or 1 (the caller's). */
uint32_t nbd_server_loops(const struct nbd_server *srv);

#endif
