/* ctl_fake_nbd: nbd_server_connections() for tests that link dd_ctl without dd_nbd. */
#ifndef DD_FAKES_CTL_FAKE_NBD_H
#define DD_FAKES_CTL_FAKE_NBD_H

#include <stdint.h>

struct nbd_server;

/* A handle whose nbd_server_connections() reports `connections`. */
struct nbd_server *fake_nbd(uint32_t connections);

#endif
