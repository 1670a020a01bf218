/* ctl_fake_nbd: see fake_nbd.h. Process-global, like every fake. */
#include "fakes/ctl_fake_nbd.h"

#include "nbd/nbd.h"

static uint32_t conns;
static char token;

struct nbd_server *
fake_nbd(uint32_t connections)
{
    conns = connections;
    return (struct nbd_server *) &token;
}

uint32_t
nbd_server_connections(const struct nbd_server *srv)
{
    (void) srv;
    return conns;
}

uint32_t
nbd_server_loops(const struct nbd_server *srv)
{
    (void) srv;
    return FAKE_NBD_LOOPS;
}
