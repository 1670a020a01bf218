/* fuzz_nbd_transmit: a fixed valid handshake (structured replies, both meta contexts, GO
 * on the default export), then the input as transmission-phase bytes, so that mutations
 * spend their time on request parsing, validation, payloads and replies.
 * Seeds: tests/fuzz/corpus/fuzz_nbd_transmit (make_seeds.py). */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nbd/wire.h"
#include "nbd_session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t
put_opt(uint8_t *p, uint32_t opt, const void *d, uint32_t len)
{
    struct nbd_opt_hdr h = {htobe64(NBD_IHAVEOPT), htobe32(opt), htobe32(len)};
    memcpy(p, &h, sizeof(h));
    if (len)
        memcpy(p + sizeof(h), d, len);
    return sizeof(h) + len;
}

static size_t
put32(uint8_t *p, uint32_t v)
{
    v = htobe32(v);
    memcpy(p, &v, 4);
    return 4;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t pre[256];
    static size_t pre_len;
    if (pre_len == 0) {
        size_t n = put32(pre, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
        n += put_opt(pre + n, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
        uint8_t m[128];
        size_t k = put32(m, 0); /* default export */
        k += put32(m + k, 2);
        k += put32(m + k, 15);
        memcpy(m + k, "base:allocation", 15);
        k += 15;
        k += put32(m + k, 15);
        memcpy(m + k, "x-dedupd:shared", 15);
        k += 15;
        n += put_opt(pre + n, NBD_OPT_SET_META_CONTEXT, m, (uint32_t) k);
        uint8_t g[6] = {0};
        n += put_opt(pre + n, NBD_OPT_GO, g, 6);
        pre_len = n;
    }
    if (size > (256u << 10))
        return 0;
    nbd_session_run(pre, pre_len, data, size);
    return 0;
}
