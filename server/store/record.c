/* record: encode/decode of the segment record header (format in record.h). Pure. */
#include "store/record.h"

#include <errno.h>
#include <string.h>

#include "store/store.h"
#include "util/crc32c.h"

static void
le32(uint8_t *p, uint32_t v)
{
    p[0] = v;
    p[1] = v >> 8;
    p[2] = v >> 16;
    p[3] = v >> 24;
}

static uint32_t
rd32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t
rd64(const uint8_t *p)
{
    return (uint64_t) rd32(p) | (uint64_t) rd32(p + 4) << 32;
}

static uint32_t
hdr_crc(const uint8_t *p)
{
    return crc32c(crc32c(0, p, 28), p + 32, 32);
}

void
store_record_encode(uint8_t out[STORE_RECORD_HDR_LEN], const struct store_record_hdr *h)
{
    uint8_t hl = h->hash_len > DEDUPD_HASH_MAX_LEN ? DEDUPD_HASH_MAX_LEN : h->hash_len;
    le32(out, STORE_RECORD_MAGIC);
    out[4] = STORE_RECORD_VERSION;
    out[5] = h->codec;
    out[6] = h->hash_alg;
    out[7] = hl;
    le32(out + 8, h->raw_len);
    le32(out + 12, h->stored_len);
    le32(out + 16, (uint32_t) h->chunk_id);
    le32(out + 20, (uint32_t) (h->chunk_id >> 32));
    le32(out + 24, h->data_crc);
    memset(out + 32, 0, 32);
    memcpy(out + 32, h->hash, hl);
    le32(out + 28, hdr_crc(out));
}

int
store_record_decode(const void *buf, size_t len, struct store_record_hdr *h)
{
    const uint8_t *p = buf;
    if (len < STORE_RECORD_HDR_LEN)
        return -ENODATA;
    if (rd32(p) != STORE_RECORD_MAGIC || rd32(p + 28) != hdr_crc(p))
        return -EBADMSG;
    if (p[4] != STORE_RECORD_VERSION || p[7] > DEDUPD_HASH_MAX_LEN)
        return -EBADMSG;
    memset(h, 0, sizeof(*h));
    h->version = p[4];
    h->codec = p[5];
    h->hash_alg = p[6];
    h->hash_len = p[7];
    h->raw_len = rd32(p + 8);
    h->stored_len = rd32(p + 12);
    h->chunk_id = rd64(p + 16);
    h->data_crc = rd32(p + 24);
    memcpy(h->hash, p + 32, h->hash_len);
    if (h->raw_len > DEDUPD_CHUNK_MAX || h->stored_len > DEDUPD_CHUNK_MAX)
        return -EBADMSG;
    if (h->codec == STORE_CODEC_RAW && h->raw_len != h->stored_len)
        return -EBADMSG;
    if (h->codec > STORE_CODEC_LZ4)
        return -EBADMSG;
    return 0;
}

bool
store_record_holds(const void *hdr, uint64_t id, uint32_t len, const void *data)
{
    const uint8_t *p = hdr;
    return rd32(p) == STORE_RECORD_MAGIC && p[4] == STORE_RECORD_VERSION &&
           p[5] == STORE_CODEC_RAW && rd32(p + 8) == len && rd32(p + 12) == len &&
           rd64(p + 16) == id && crc32c(0, data, len) == rd32(p + 24);
}

bool
store_record_data_ok(const struct store_record_hdr *h, const void *data)
{
    return crc32c(0, data, h->stored_len) == h->data_crc;
}
