/* Tests server/store/record.c, the record reads of segment.c, and server/util/crc32c.c. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/internal.h"
#include "store/record.h"
#include "store/store.h"
#include "util/crc32c.h"

/* The reference: CRC-32C one bit at a time, straight from the definition. */
static uint32_t
crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

Test(crc32c, known_vector_and_continuation)
{
    cr_assert_eq(crc32c(0, "123456789", 9), 0xE3069283u);
    cr_assert_eq(crc_bitwise(0, (const uint8_t *) "123456789", 9), 0xE3069283u);
    cr_assert_eq(crc32c(0x12345678u, NULL, 0), 0x12345678u, "nothing to add: crc unchanged");
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t) (i * 7 + 3);
    for (size_t start = 0; start < 9; start++) {
        uint32_t a = crc32c(0, buf + start, sizeof(buf) - start);
        cr_assert_eq(a, crc_bitwise(0, buf + start, sizeof(buf) - start));
        /* Continuation: crc of a||b from crc of a. */
        cr_assert_eq(
            crc32c(crc32c(0, buf + start, 100), buf + start + 100, sizeof(buf) - start - 100), a);
    }
}

/* ISA-L's vector loops take the data in blocks (64 and 256 bytes, and more) with a tail
 * and a head before the first aligned block: every length up to a few records' worth, at
 * several start alignments, must give the bitwise answer. The reference advances one byte
 * per length, so the whole sweep stays linear. */
Test(crc32c, every_length_and_alignment_matches_the_bitwise_reference)
{
    enum { MAX = 3 * 4160 + 300 };
    static uint8_t buf[MAX + 64];
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t) x;
    }
    for (size_t start = 0; start < 64; start += 7) {
        uint32_t ref = 0x12345678u;
        for (size_t len = 0; len <= MAX; len++) {
            cr_assert_eq(crc32c(0x12345678u, buf + start, len), ref, "start %zu len %zu", start,
                         len);
            ref = crc_bitwise(ref, buf + start + len, 1);
        }
    }
}

static void
sample(struct store_record_hdr *h)
{
    memset(h, 0, sizeof(*h));
    h->codec = STORE_CODEC_RAW;
    h->hash_alg = 1;
    h->hash_len = 32;
    h->raw_len = h->stored_len = 4096;
    h->chunk_id = 0x0102030405060708ULL;
    h->data_crc = 0xabcdef01;
    for (int i = 0; i < 32; i++)
        h->hash[i] = (uint8_t) (0xa0 + i);
}

Test(record, round_trip)
{
    struct store_record_hdr h, d;
    uint8_t b[STORE_RECORD_HDR_LEN];
    sample(&h);
    store_record_encode(b, &h);
    cr_assert_eq(store_record_decode(b, sizeof(b), &d), 0);
    cr_assert(d.chunk_id == h.chunk_id && d.raw_len == 4096 && d.stored_len == 4096 &&
              d.data_crc == h.data_crc && d.hash_alg == 1 && d.hash_len == 32 &&
              d.version == STORE_RECORD_VERSION);
    cr_assert_eq(memcmp(d.hash, h.hash, 32), 0);
}

Test(record, data_ok_checks_the_stored_bytes_against_data_crc)
{
    uint8_t data[4096];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t) (i * 7 + 1);
    struct store_record_hdr h = {.stored_len = sizeof(data), .data_crc = crc32c(0, data, 4096)};
    cr_assert(store_record_data_ok(&h, data));
    data[4095] ^= 1;
    cr_assert(!store_record_data_ok(&h, data));
    data[4095] ^= 1;
    h.stored_len = 4095; /* the length is part of what is checked */
    cr_assert(!store_record_data_ok(&h, data));
}

Test(record, every_truncation_point_is_enodata)
{
    struct store_record_hdr h, d;
    uint8_t b[STORE_RECORD_HDR_LEN];
    sample(&h);
    store_record_encode(b, &h);
    for (size_t cut = 0; cut < sizeof(b); cut++)
        cr_assert_eq(store_record_decode(b, cut, &d), -ENODATA, "cut %zu", cut);
}

Test(record, every_single_bit_flip_is_rejected)
{
    struct store_record_hdr h, d;
    uint8_t b[STORE_RECORD_HDR_LEN];
    sample(&h);
    store_record_encode(b, &h);
    for (size_t bit = 0; bit < sizeof(b) * 8; bit++) {
        b[bit / 8] ^= (uint8_t) (1u << (bit % 8));
        cr_assert_eq(store_record_decode(b, sizeof(b), &d), -EBADMSG, "bit %zu", bit);
        b[bit / 8] ^= (uint8_t) (1u << (bit % 8));
    }
}

/* The read paths' check: the record holds chunk id's len bytes and they match data_crc.
 * Any flipped bit in a field a read relies on (magic, version, codec, lengths, id, data
 * CRC), or in the data, fails it; a flip in the hash or the header CRC, which a read does
 * not use, does not — that is what the check leaves out, and why it is still safe. */
Test(record, holds_checks_every_field_a_read_relies_on)
{
    uint8_t data[4096];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t) (i * 11 + 5);
    struct store_record_hdr h;
    sample(&h);
    h.data_crc = crc32c(0, data, sizeof(data));
    uint8_t b[STORE_RECORD_HDR_LEN];
    store_record_encode(b, &h);
    cr_assert(store_record_holds(b, h.chunk_id, 4096, data));
    cr_assert(!store_record_holds(b, h.chunk_id + 1, 4096, data), "another chunk's record");
    cr_assert(!store_record_holds(b, h.chunk_id ^ (1ULL << 40), 4096, data), "id's high word");
    cr_assert(!store_record_holds(b, h.chunk_id, 4095, data), "another length");
    data[100] ^= 4;
    cr_assert(!store_record_holds(b, h.chunk_id, 4096, data), "damaged data");
    data[100] ^= 4;
    for (size_t bit = 0; bit < sizeof(b) * 8; bit++) {
        size_t byte = bit / 8;
        bool unused = byte == 6 || byte == 7 || byte >= 28; /* hash_alg/len, hdr_crc, hash */
        b[byte] ^= (uint8_t) (1u << (bit % 8));
        cr_assert_eq(store_record_holds(b, h.chunk_id, 4096, data), unused, "bit %zu", bit);
        b[byte] ^= (uint8_t) (1u << (bit % 8));
    }
    sample(&h);
    h.codec = STORE_CODEC_LZ4; /* compressed records go through the full decode */
    h.data_crc = crc32c(0, data, sizeof(data));
    store_record_encode(b, &h);
    cr_assert(!store_record_holds(b, h.chunk_id, 4096, data));
}

Test(record, out_of_range_fields_rejected_even_with_valid_crc)
{
    struct store_record_hdr h, d;
    uint8_t b[STORE_RECORD_HDR_LEN];
    sample(&h);
    h.stored_len = h.raw_len = DEDUPD_CHUNK_MAX + 1;
    store_record_encode(b, &h);
    cr_assert_eq(store_record_decode(b, sizeof(b), &d), -EBADMSG);
    sample(&h);
    h.stored_len = 100; /* raw codec must store exactly raw_len bytes */
    store_record_encode(b, &h);
    cr_assert_eq(store_record_decode(b, sizeof(b), &d), -EBADMSG);
}

/* Every truncation point of a whole record on disk (header and body) reads as -EUCLEAN
 * through both read paths, never as success and never past the end. */
Test(record, every_truncation_point_of_a_record_on_disk_is_euclean)
{
    char path[] = "/tmp/dedupd-record-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    enum { LEN = 1000 };
    uint8_t rec[STORE_RECORD_HDR_LEN + LEN], out[STORE_RECORD_HDR_LEN + LEN];
    for (int i = 0; i < LEN; i++)
        rec[STORE_RECORD_HDR_LEN + i] = (uint8_t) (i * 13);
    struct store_record_hdr h;
    memset(&h, 0, sizeof(h));
    h.codec = STORE_CODEC_RAW;
    h.raw_len = h.stored_len = LEN;
    h.chunk_id = 5;
    h.data_crc = crc32c(0, rec + STORE_RECORD_HDR_LEN, LEN);
    store_record_encode(rec, &h);
    cr_assert_eq(pwrite(fd, rec, sizeof(rec), 0), (ssize_t) sizeof(rec));
    struct store_seg sg = {.id = 1, .fd = fd, .refs = 1};
    struct store_record_hdr got;
    uint64_t len = 0;
    cr_assert_eq(store__read_raw(&sg, 0, out, sizeof(out), &got, &len), 0);
    cr_assert_eq(len, sizeof(rec));
    cr_assert_eq(store__read_record(NULL, &sg, 0, &got, out, LEN, LEN), 0);
    cr_assert_eq(memcmp(out, rec + STORE_RECORD_HDR_LEN, LEN), 0);
    for (size_t cut = 0; cut < sizeof(rec); cut++) {
        cr_assert_eq(ftruncate(fd, (off_t) cut), 0);
        cr_assert_eq(store__read_raw(&sg, 0, out, sizeof(out), &got, &len), -EUCLEAN,
                     "raw, cut %zu", cut);
        cr_assert_eq(store__read_record(NULL, &sg, 0, &got, out, LEN, LEN), -EUCLEAN,
                     "record, cut %zu", cut);
        cr_assert_eq(store__read_record(NULL, &sg, 0, &got, out, LEN, 0), -EUCLEAN,
                     "record without length hint, cut %zu", cut);
    }
    close(fd);
    unlink(path);
}
