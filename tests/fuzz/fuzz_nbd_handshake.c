/* fuzz_nbd_handshake: the input is everything a client sends from connect on — client
 * flags, options, and (after a successful GO/EXPORT_NAME) requests. Finds crashes, leaks,
 * hangs and sanitizer reports in handshake.c, conn.c, transmit.c and reply.c.
 * Seeds: tests/fuzz/corpus/fuzz_nbd_handshake (make_seeds.py). */
#include <stddef.h>
#include <stdint.h>

#include "nbd_session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (256u << 10))
        return 0; /* the socketpair must take it all without a reader on our side */
    nbd_session_run(NULL, 0, data, size);
    return 0;
}
