/* store/record.h: the on-disk segment record, version 1. Little-endian, 64-byte header
 * followed by stored_len bytes:
 *
 *   off size field
 *     0   4  magic        STORE_RECORD_MAGIC ("DDRC" read as bytes 'C','R','D','D')
 *     4   1  version      STORE_RECORD_VERSION
 *     5   1  codec        enum store_codec
 *     6   1  hash_alg     enum dedupd_hash_alg (0: stored without a hash)
 *     7   1  hash_len     0..32
 *     8   4  raw_len      chunk bytes before the codec, <= DEDUPD_CHUNK_MAX
 *    12   4  stored_len   bytes after this header, <= DEDUPD_CHUNK_MAX
 *    16   8  chunk_id     the id the record was written for (lets recovery and scrub
 *                         match a record to its `chunk` entry without trusting offsets)
 *    24   4  data_crc     CRC32C of the stored bytes
 *    28   4  hdr_crc      CRC32C of bytes 0..27 and 32..63 of this header
 *    32  32  hash         the chunk hash, zero-padded after hash_len
 *
 * Recovery rule: records are only appended. Walking a segment from a known record
 * boundary, the first header that is short, has a bad magic/version/hdr_crc, or whose
 * stored bytes are short or fail data_crc, ends the valid part of the segment: everything
 * from there on is a torn or unindexed tail (truncated in the active segment, counted dead
 * elsewhere). A record the `chunk` CF points to must decode and match its chunk id and
 * data_crc; if it does not, reads return -EUCLEAN and scrub reports it. */
#ifndef DD_STORE_RECORD_H
#define DD_STORE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dedupd/limits.h"

#define STORE_RECORD_MAGIC   0x44445243u
#define STORE_RECORD_VERSION 1
#define STORE_RECORD_HDR_LEN 64

struct store_record_hdr {
    uint8_t version;
    uint8_t codec;
    uint8_t hash_alg;
    uint8_t hash_len;
    uint32_t raw_len;
    uint32_t stored_len;
    uint64_t chunk_id;
    uint32_t data_crc;
    uint8_t hash[DEDUPD_HASH_MAX_LEN];
};

/* Fills in version and hdr_crc; the caller sets everything else (data_crc included). */
void store_record_encode(uint8_t out[STORE_RECORD_HDR_LEN], const struct store_record_hdr *h);
/* 0, -ENODATA when len < STORE_RECORD_HDR_LEN, -EBADMSG for a bad magic, version,
 * header CRC, or field out of range. Never trusts a byte before hdr_crc matches. */
int store_record_decode(const void *buf, size_t len, struct store_record_hdr *h);
/* Whether the stored bytes that follow header h (h->stored_len of them) match its data_crc. */
bool store_record_data_ok(const struct store_record_hdr *h, const void *data);
/* The read paths' check of a record read with its chunk's bytes: whether hdr
 * (STORE_RECORD_HDR_LEN bytes) is a raw record of chunk id holding len stored bytes, and
 * data (those bytes) matches its data_crc. The header's own CRC is not recomputed: every
 * field a read relies on is compared with what the chunk entry says, and the data CRC must
 * match the bytes, so damage to the header fails this check (or touches only the hash,
 * which a read does not use) — it cannot make wrong bytes pass (invariant 5). Callers read
 * a record that fails again through store_record_decode, which says what is wrong. */
bool store_record_holds(const void *hdr, uint64_t id, uint32_t len, const void *data);
/* Header + stored bytes. */
static inline uint64_t
store_record_len(uint32_t stored_len)
{
    return STORE_RECORD_HDR_LEN + (uint64_t) stored_len;
}

#endif
