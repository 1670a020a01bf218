/* ctl_fake_nbd: nbd_server_connections() and nbd_server_loops() for tests that link dd_ctl
 * without dd_nbd. */
#ifndef DD_FAKES_CTL_FAKE_NBD_H
#define DD_FAKES_CTL_FAKE_NBD_H

#include <stdint.h>

struct nbd_server;

/* What the fake's nbd_server_loops() reports. */
#define FAKE_NBD_LOOPS 2

/* A handle whose nbd_server_connections() reports `connections`. */
struct nbd_server *fake_nbd(uint32_t connections);

#endif
