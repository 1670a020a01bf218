/* nbd_session: runs one NBD client session, given as raw bytes, through the real
 * connection code (server/nbd) on the in-memory fake engine, over a socketpair, until the
 * server closes the connection. Shared by the NBD fuzz targets. */
#ifndef DD_FUZZ_NBD_SESSION_H
#define DD_FUZZ_NBD_SESSION_H

#include <stddef.h>
#include <stdint.h>

/* Sends prefix then data as the client's bytes, then end-of-input; discards what the
 * server sends. Returns when the connection is gone. */
void nbd_session_run(const uint8_t *prefix, size_t prefix_len, const uint8_t *data, size_t len);

#endif
