/* Tests server/nbd/transmit.c and reply.c: every command with simple and structured
 * replies, holes in reads, block status of both contexts, errors and their mapping,
 * out-of-order completion, limits and bad input. */
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedupd/limits.h"
#include "harness.h"
#include "nbd/internal.h"

static struct harness h;

static void
setup(void)
{
    h_start(&h, NULL, false);
}

static void
teardown(void)
{
    h_stop(&h);
}

TestSuite(transmit, .init = setup, .fini = teardown);

static const char *const both_ctx[] = {"base:allocation", "x-dedupd:shared", NULL};

static void
fill(uint8_t *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t) (seed + i * 7 + (i >> 9));
}

static void
write_ok(int fd, uint64_t off, const void *p, uint32_t len)
{
    cl_req(fd, NBD_CMD_WRITE, 0, off + 1, off, len, p);
    struct cl_chunk c;
    cl_chunk(fd, &c);
    cr_assert_eq(c.cookie, off + 1);
    cr_assert(c.type == 0xffff || c.type == NBD_REPLY_TYPE_NONE, "write reply type %u", c.type);
    if (c.type == 0xffff)
        cr_assert_eq(c.len, 0, "write error %u", c.len);
    free(c.payload);
}

/* Structured read: reassembles chunks into out; returns the number of hole chunks. */
static int
sread(int fd, uint16_t flags, uint64_t off, uint32_t len, uint8_t *out, uint32_t *err)
{
    memset(out, 0xEE, len);
    cl_req(fd, NBD_CMD_READ, flags, 42, off, len, NULL);
    int holes = 0;
    uint64_t covered = 0;
    *err = 0;
    for (;;) {
        struct cl_chunk c;
        cl_chunk(fd, &c);
        cr_assert_eq(c.cookie, 42);
        if (c.type == NBD_REPLY_TYPE_OFFSET_DATA) {
            uint64_t o;
            memcpy(&o, c.payload, 8);
            o = be64toh(o);
            cr_assert(o >= off && o + c.len - 8 <= off + len);
            memcpy(out + (o - off), c.payload + 8, c.len - 8);
            covered += c.len - 8;
        } else if (c.type == NBD_REPLY_TYPE_OFFSET_HOLE) {
            struct nbd_chunk_offset_hole hh;
            cr_assert_eq(c.len, sizeof(hh));
            memcpy(&hh, c.payload, sizeof(hh));
            uint64_t o = be64toh(hh.offset);
            uint32_t hl = be32toh(hh.len);
            cr_assert(hl > 0 && o >= off && o + hl <= off + len);
            memset(out + (o - off), 0, hl);
            covered += hl;
            holes++;
        } else if (c.type == NBD_REPLY_TYPE_ERROR) {
            uint32_t e;
            memcpy(&e, c.payload, 4);
            *err = be32toh(e);
        } else if (c.type != NBD_REPLY_TYPE_NONE) {
            cr_assert_fail("unexpected chunk type %u", c.type);
        }
        uint16_t fl = c.flags;
        free(c.payload);
        if (fl & NBD_REPLY_FLAG_DONE)
            break;
    }
    if (*err == 0)
        cr_assert_eq(covered, len, "read reply covers %lu of %u bytes", (unsigned long) covered,
                     len);
    return holes;
}

Test(transmit, simple_write_then_read_back)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    uint32_t len = 3 * 4096 + 100;
    uint8_t *w = malloc(len), *r = malloc(len);
    fill(w, len, 3);
    cl_req(fd, NBD_CMD_WRITE, 0, 11, 1000, len, w);
    uint64_t ck;
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 11);
    cl_req(fd, NBD_CMD_READ, 0, 12, 1000, len, NULL);
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 12);
    cr_assert(cl_recv(fd, r, len));
    cr_assert_eq(memcmp(w, r, len), 0);
    cl_req(fd, NBD_CMD_DISC, 0, 13, 0, 0, NULL);
    cr_assert(cl_closed(fd));
    free(w);
    free(r);
    close(fd);
}

/* Large payloads are read from the socket straight into the request's buffer once nothing
 * of them is buffered (NBD_DIRECT_MIN): whatever way the bytes are split, every WRITE lands
 * whole and the request after it is parsed from the right byte. */
Test(transmit, large_writes_land_whole_however_the_payload_is_split)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    const uint32_t len = 3 * NBD_DIRECT_MIN + 4096 + 7;
    uint8_t *w1 = malloc(len), *w2 = malloc(len), *r = malloc(len);
    fill(w1, len, 5);
    fill(w2, len, 9);
    /* 1: header and a few payload bytes, a pause (the server buffers them), the rest in
     * two sends with a pause between (the server reads directly, then through inbuf). */
    cl_req(fd, NBD_CMD_WRITE, 0, 1, 0, len, NULL); /* the header only */
    cr_assert(cl_send(fd, w1, 10));
    usleep(20000);
    cr_assert(cl_send(fd, w1 + 10, NBD_DIRECT_MIN + 5));
    usleep(20000);
    cr_assert(cl_send(fd, w1 + 10 + NBD_DIRECT_MIN + 5, len - 10 - NBD_DIRECT_MIN - 5));
    uint64_t ck;
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 1);
    /* 2: two writes back to back in one buffer: the first payload's end and the second
     * header arrive in the same read. */
    struct nbd_request q = {
        .magic = htobe32(NBD_REQUEST_MAGIC), .type = htobe16(NBD_CMD_WRITE), .len = htobe32(len)};
    size_t one = sizeof(q) + len, all = 2 * one;
    uint8_t *burst = malloc(all);
    q.cookie = htobe64(2);
    q.offset = htobe64(len);
    memcpy(burst, &q, sizeof(q));
    memcpy(burst + sizeof(q), w2, len);
    q.cookie = htobe64(3);
    q.offset = htobe64(2 * (uint64_t) len);
    memcpy(burst + one, &q, sizeof(q));
    memcpy(burst + one + sizeof(q), w1, len);
    cr_assert(cl_send(fd, burst, all));
    bool got[4] = {false};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(cl_simple(fd, &ck), 0);
        cr_assert(ck >= 2 && ck <= 3 && !got[ck]);
        got[ck] = true;
    }
    /* Everything where it belongs. */
    const uint8_t *want[3] = {w1, w2, w1};
    for (uint64_t k = 0; k < 3; k++) {
        cl_req(fd, NBD_CMD_READ, 0, 10 + k, k * len, len, NULL);
        cr_assert_eq(cl_simple(fd, &ck), 0);
        cr_assert_eq(ck, 10 + k);
        cr_assert(cl_recv(fd, r, len));
        cr_assert_eq(memcmp(r, want[k], len), 0, "write %lu read back wrong", (unsigned long) k);
    }
    free(burst);
    free(w1);
    free(w2);
    free(r);
    close(fd);
}

Test(transmit, structured_read_sends_holes_for_zero_chunks)
{
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    uint8_t *w = malloc(4096), *r = malloc(8 * 4096);
    fill(w, 4096, 9);
    write_ok(fd, 2 * 4096, w, 4096);
    /* Data written as zeros in chunk 5 also reads as a hole. */
    uint8_t *z = calloc(1, 4096);
    write_ok(fd, 5 * 4096, z, 4096);
    uint32_t err;
    int holes = sread(fd, 0, 0, 8 * 4096, r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(holes, 2, "holes: [0,2) and [3,8), got %d", holes);
    cr_assert_eq(memcmp(r + 2 * 4096, w, 4096), 0);
    for (size_t i = 0; i < 8 * 4096; i++)
        if (i < 2 * 4096 || i >= 3 * 4096)
            cr_assert_eq(r[i], 0);
    /* Unaligned read across data and hole: edges are data, contents right. */
    holes = sread(fd, 0, 2 * 4096 + 10, 3 * 4096, r, &err);
    cr_assert_eq(err, 0);
    cr_assert_eq(memcmp(r, w + 10, 4096 - 10), 0);
    /* DF: one data chunk, zeros included. */
    holes = sread(fd, NBD_CMD_FLAG_DF, 0, 8 * 4096, r, &err);
    cr_assert_eq(holes, 0);
    cr_assert_eq(memcmp(r + 2 * 4096, w, 4096), 0);
    free(w);
    free(z);
    free(r);
    close(fd);
}

/* READs the loop answers spread (engine_read_nowait_spread: junk between the chunks): the
 * client gets each chunk's bytes and none of the junk, in simple replies, in structured
 * ones with holes between data, with DF, and in reads that are not spread (unaligned). */
Test(transmit, reads_answered_spread_send_only_the_chunks)
{
    fake_io_spread(h.e, 64);
    enum { N = 12, CSZ = 4096 };
    static uint8_t w[N * CSZ], r[N * CSZ];
    fill(w, sizeof(w), 21);
    memset(w + 4 * CSZ, 0, 3 * CSZ); /* chunks 4-6 zeros: a hole in structured replies */
    for (int k = 0; k < 2; k++) {
        int fd = h_connect(&h);
        cl_go(fd, "", k == 1, NULL, NULL);
        if (k == 0) {
            cl_req(fd, NBD_CMD_WRITE, 0, 1, 0, sizeof(w), w);
            uint64_t ck;
            cr_assert_eq(cl_simple(fd, &ck), 0);
            cl_req(fd, NBD_CMD_READ, 0, 2, 0, sizeof(r), NULL);
            cr_assert_eq(cl_simple(fd, &ck), 0);
            cr_assert(cl_recv(fd, r, sizeof(r)));
            cr_assert_eq(memcmp(r, w, sizeof(w)), 0, "simple reply");
        } else {
            uint32_t err;
            cr_assert_eq(sread(fd, 0, 0, sizeof(r), r, &err), 1, "one hole: chunks 4-6");
            cr_assert_eq(err, 0);
            cr_assert_eq(memcmp(r, w, sizeof(w)), 0, "structured reply");
            cr_assert_eq(sread(fd, NBD_CMD_FLAG_DF, CSZ, 9 * CSZ, r, &err), 0);
            cr_assert_eq(memcmp(r, w + CSZ, 9 * CSZ), 0, "one data chunk (DF)");
            sread(fd, 0, 100, 5 * CSZ, r, &err);
            cr_assert_eq(memcmp(r, w + 100, 5 * CSZ), 0, "unaligned: not spread");
        }
        close(fd);
    }
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.spread_reads, 3, "the aligned reads were answered spread");
}

Test(transmit, read_of_nothing_written_is_one_hole)
{
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    uint8_t *r = malloc(1 << 20);
    uint32_t err;
    cr_assert_eq(sread(fd, 0, 1 << 20, 1 << 20, r, &err), 1);
    cr_assert_eq(err, 0);
    free(r);
    close(fd);
}

static uint32_t
simple_status(int fd, uint16_t type, uint16_t flags, uint64_t off, uint32_t len,
              const void *payload)
{
    cl_req(fd, type, flags, 77, off, len, payload);
    struct cl_chunk c;
    cl_chunk(fd, &c);
    cr_assert_eq(c.cookie, 77);
    uint32_t err = 0;
    if (c.type == 0xffff) {
        err = c.len;
    } else if (c.type == NBD_REPLY_TYPE_ERROR) {
        uint32_t e;
        uint16_t ml;
        cr_assert_geq(c.len, 6);
        memcpy(&e, c.payload, 4);
        memcpy(&ml, c.payload + 4, 2);
        cr_assert_eq(be16toh(ml), c.len - 6, "message length");
        err = be32toh(e);
        cr_assert_neq(err, 0);
        cr_assert(c.flags & NBD_REPLY_FLAG_DONE);
    } else {
        cr_assert_eq(c.type, NBD_REPLY_TYPE_NONE);
    }
    free(c.payload);
    return err;
}

Test(transmit, range_and_permission_errors_keep_the_stream_in_sync)
{
    for (int structured = 0; structured < 2; structured++) {
        int fd = h_connect(&h);
        cl_go(fd, "ro", structured, NULL, NULL);
        uint8_t b[8192];
        memset(b, 1, sizeof(b));
        cr_assert_eq(simple_status(fd, NBD_CMD_WRITE, 0, 0, 8192, b), NBD_EPERM);
        cr_assert_eq(simple_status(fd, NBD_CMD_TRIM, 0, 0, 4096, NULL), NBD_EPERM);
        cr_assert_eq(simple_status(fd, NBD_CMD_WRITE_ZEROES, 0, 0, 4096, NULL), NBD_EPERM);
        cr_assert_eq(simple_status(fd, NBD_CMD_CACHE, 0, H_RO_SIZE - 10, 20, NULL), NBD_EINVAL);
        cr_assert_eq(simple_status(fd, NBD_CMD_FLUSH, 0, 0, 0, NULL), 0);
        close(fd);

        fd = h_connect(&h);
        cl_go(fd, "", structured, NULL, NULL);
        cr_assert_eq(simple_status(fd, NBD_CMD_WRITE, 0, H_DEFAULT_SIZE - 100, 8192, b),
                     NBD_ENOSPC);
        cr_assert_eq(simple_status(fd, NBD_CMD_WRITE_ZEROES, 0, UINT64_MAX - 5, 100, NULL),
                     NBD_ENOSPC);
        cr_assert_eq(simple_status(fd, NBD_CMD_TRIM, 0, H_DEFAULT_SIZE, 1, NULL), NBD_EINVAL);
        cr_assert_eq(simple_status(fd, 42, 0, 0, 0, NULL), NBD_EINVAL);
        cr_assert_eq(simple_status(fd, NBD_CMD_WRITE, NBD_CMD_FLAG_REQ_ONE, 0, 4, "abcd"),
                     NBD_EINVAL);
        cr_assert_eq(simple_status(fd, NBD_CMD_TRIM, 1u << 14, 0, 4096, NULL), NBD_EINVAL);
        cr_assert_eq(simple_status(fd, NBD_CMD_BLOCK_STATUS, 0, 0, 4096, NULL), NBD_EINVAL,
                     "block status without contexts");
        if (!structured) {
            cl_req(fd, NBD_CMD_READ, 0, 5, H_DEFAULT_SIZE - 1, 2, NULL);
            cr_assert_eq(cl_simple(fd, NULL), NBD_EINVAL);
            cl_req(fd, NBD_CMD_READ, 0, 5, 0, DEDUPD_NBD_MAX_PAYLOAD + 1, NULL);
            cr_assert_eq(cl_simple(fd, NULL), NBD_EINVAL);
        } else {
            uint8_t r[16];
            uint32_t err;
            sread(fd, 0, H_DEFAULT_SIZE - 1, 2, r, &err);
            cr_assert_eq(err, NBD_EINVAL);
        }
        /* After all that the stream is still in sync. */
        write_ok(fd, 0, b, 4096);
        close(fd);
    }
}

Test(transmit, engine_errors_map_to_nbd_errors)
{
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    fake_io_fail(h.e, ENGINE_OP_READ, -EUCLEAN, 1);
    uint8_t r[4096];
    uint32_t err;
    sread(fd, 0, 0, 4096, r, &err);
    cr_assert_eq(err, NBD_EIO);
    fake_io_fail(h.e, ENGINE_OP_WRITE, -ENOSPC, 1);
    cr_assert_eq(simple_status(fd, NBD_CMD_WRITE, 0, 0, 4096, r), NBD_ENOSPC);
    fake_io_fail(h.e, ENGINE_OP_FLUSH, -EIO, 1);
    cr_assert_eq(simple_status(fd, NBD_CMD_FLUSH, 0, 0, 0, NULL), NBD_EIO);
    fake_io_fail(h.e, ENGINE_OP_TRIM, -EROFS, 1);
    cr_assert_eq(simple_status(fd, NBD_CMD_TRIM, 0, 0, 4096, NULL), NBD_EPERM);
    close(fd);
}

Test(transmit, errno_mapping_is_one_table)
{
    cr_assert_eq(nbd__errno_to_nbd(0), NBD_SUCCESS);
    cr_assert_eq(nbd__errno_to_nbd(-EUCLEAN), NBD_EIO);
    cr_assert_eq(nbd__errno_to_nbd(-EIO), NBD_EIO);
    cr_assert_eq(nbd__errno_to_nbd(-ENOSPC), NBD_ENOSPC);
    cr_assert_eq(nbd__errno_to_nbd(-EDQUOT), NBD_ENOSPC);
    cr_assert_eq(nbd__errno_to_nbd(-EFBIG), NBD_ENOSPC);
    cr_assert_eq(nbd__errno_to_nbd(-EROFS), NBD_EPERM);
    cr_assert_eq(nbd__errno_to_nbd(-EPERM), NBD_EPERM);
    cr_assert_eq(nbd__errno_to_nbd(-EINVAL), NBD_EINVAL);
    cr_assert_eq(nbd__errno_to_nbd(-ENOMEM), NBD_ENOMEM);
    cr_assert_eq(nbd__errno_to_nbd(-ENOTSUP), NBD_ENOTSUP);
    cr_assert_eq(nbd__errno_to_nbd(-ESHUTDOWN), NBD_ESHUTDOWN);
    cr_assert_eq(nbd__errno_to_nbd(-EOVERFLOW), NBD_EOVERFLOW);
    cr_assert_eq(nbd__errno_to_nbd(-EBADF), NBD_EIO, "unknown errors are I/O errors");
}

Test(transmit, flush_fua_trim_and_zeroes_reach_the_engine)
{
    int fd = h_connect(&h);
    cl_go(fd, "", true, NULL, NULL);
    uint8_t w[8192], r[8192];
    fill(w, sizeof(w), 1);
    cr_assert_eq(simple_status(fd, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 0, 8192, w), 0);
    cr_assert_eq(simple_status(fd, NBD_CMD_FLUSH, 0, 0, 0, NULL), 0);
    cr_assert_eq(simple_status(fd, NBD_CMD_WRITE_ZEROES,
                               NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO, 100, 200, NULL),
                 0);
    uint32_t err;
    sread(fd, 0, 0, 8192, r, &err);
    cr_assert_eq(err, 0);
    memset(w + 100, 0, 200);
    cr_assert_eq(memcmp(r, w, 8192), 0);
    cr_assert_eq(simple_status(fd, NBD_CMD_TRIM, NBD_CMD_FLAG_FUA, 4096, 4096, NULL), 0);
    sread(fd, 0, 4096, 4096, r, &err);
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(r[i], 0);
    cr_assert_eq(simple_status(fd, NBD_CMD_CACHE, 0, 0, 8192, NULL), 0);
    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.flushes, 1);
    cr_assert_eq(cnt.fua, 2);
    cr_assert_eq(cnt.no_hole, 1);
    cr_assert_eq(cnt.trims, 1);
    cr_assert_eq(cnt.zeros, 1);
    close(fd);
}

/* Reads one BLOCK_STATUS reply: descriptors per context id into d[id][], counts in n[id]. */
static void
block_status(int fd, uint16_t flags, uint64_t off, uint32_t len, uint32_t d[3][64][2], int n[3])
{
    memset(n, 0, 3 * sizeof(int));
    cl_req(fd, NBD_CMD_BLOCK_STATUS, flags, 5, off, len, NULL);
    for (;;) {
        struct cl_chunk c;
        cl_chunk(fd, &c);
        cr_assert_eq(c.type, NBD_REPLY_TYPE_BLOCK_STATUS, "type %u", c.type);
        cr_assert_eq((c.len - 4) % 8, 0);
        uint32_t id;
        memcpy(&id, c.payload, 4);
        id = be32toh(id);
        cr_assert(id == 1 || id == 2);
        uint64_t total = 0;
        for (uint32_t i = 0; i < (c.len - 4) / 8 && i < 64; i++) {
            uint32_t dl, df;
            memcpy(&dl, c.payload + 4 + 8 * i, 4);
            memcpy(&df, c.payload + 8 + 8 * i, 4);
            d[id][i][0] = be32toh(dl);
            d[id][i][1] = be32toh(df);
            cr_assert_gt(d[id][i][0], 0);
            total += d[id][i][0];
            n[id]++;
        }
        cr_assert_leq(total, len);
        uint16_t fl = c.flags;
        free(c.payload);
        if (fl & NBD_REPLY_FLAG_DONE)
            break;
    }
}

Test(transmit, block_status_reports_holes_and_shared_chunks)
{
    int fd = h_connect(&h);
    cl_go(fd, "", true, both_ctx, NULL);
    uint8_t a[4096], b[4096];
    fill(a, 4096, 1);
    fill(b, 4096, 2);
    write_ok(fd, 0, a, 4096);    /* chunk 0: a (shared with chunk 3) */
    write_ok(fd, 4096, b, 4096); /* chunk 1: b (unique) */
    write_ok(fd, 3 * 4096, a, 4096);
    uint32_t d[3][64][2];
    int n[3];
    block_status(fd, 0, 0, 6 * 4096, d, n);
    /* base:allocation: data [0,2), hole [2,3), data [3,4), hole [4,6). */
    cr_assert_eq(n[1], 4);
    cr_assert_eq(d[1][0][0], 2 * 4096);
    cr_assert_eq(d[1][0][1], 0);
    cr_assert_eq(d[1][1][1], NBD_STATE_HOLE | NBD_STATE_ZERO);
    cr_assert_eq(d[1][3][0], 2 * 4096);
    /* x-dedupd:shared: shared, unique, zero, shared, zero. */
    cr_assert_eq(n[2], 5);
    cr_assert_eq(d[2][0][1], NBD_DEDUPD_STATE_SHARED);
    cr_assert_eq(d[2][1][1], 0);
    cr_assert_eq(d[2][2][1], NBD_DEDUPD_STATE_ZERO);
    cr_assert_eq(d[2][3][1], NBD_DEDUPD_STATE_SHARED);
    cr_assert_eq(d[2][4][1], NBD_DEDUPD_STATE_ZERO);

    block_status(fd, NBD_CMD_FLAG_REQ_ONE, 0, 6 * 4096, d, n);
    cr_assert_eq(n[1], 1);
    cr_assert_eq(n[2], 1);
    cr_assert_leq(d[1][0][0], 6 * 4096);
    cr_assert_eq(d[2][0][1], NBD_DEDUPD_STATE_SHARED);

    /* Past the end: EINVAL. */
    cr_assert_eq(simple_status(fd, NBD_CMD_BLOCK_STATUS, 0, H_DEFAULT_SIZE - 10, 4096, NULL),
                 NBD_EINVAL);
    close(fd);
}

Test(transmit, replies_come_back_in_completion_order)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    fake_io_delay(h.e, 4096, 400);
    uint8_t r[512];
    cl_req(fd, NBD_CMD_READ, 0, 1, 4096, 512, NULL); /* slow */
    cl_req(fd, NBD_CMD_READ, 0, 2, 0, 512, NULL);
    uint64_t ck;
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 2, "the fast read is answered first");
    cr_assert(cl_recv(fd, r, 512));
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 1);
    cr_assert(cl_recv(fd, r, 512));
    close(fd);
}

Test(transmit, many_requests_in_flight_all_answered)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    enum { N = 300 };
    uint8_t w[4096];
    for (int i = 0; i < N; i++) {
        fill(w, sizeof(w), (uint8_t) i);
        cl_req(fd, NBD_CMD_WRITE, 0, 1000 + i, (uint64_t) i * 4096, 4096, w);
    }
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) {
        uint64_t ck;
        cr_assert_eq(cl_simple(fd, &ck), 0);
        cr_assert(ck >= 1000 && ck < 1000 + N && !seen[ck - 1000]);
        seen[ck - 1000] = true;
    }
    cl_req(fd, NBD_CMD_READ, 0, 9, 123 * 4096, 4096, NULL);
    cr_assert_eq(cl_simple(fd, NULL), 0);
    uint8_t r[4096];
    cr_assert(cl_recv(fd, r, 4096));
    fill(w, sizeof(w), 123);
    cr_assert_eq(memcmp(r, w, 4096), 0);
    close(fd);
}

Test(transmit, bad_request_magic_disconnects_only_that_client)
{
    int good = h_connect(&h);
    cl_go(good, "", false, NULL, NULL);
    int bad = h_connect(&h);
    cl_go(bad, "", false, NULL, NULL);
    uint8_t junk[28];
    memset(junk, 0x5a, sizeof(junk));
    cr_assert(cl_send(bad, junk, sizeof(junk)));
    cr_assert(cl_closed(bad));
    close(bad);
    cr_assert_eq(simple_status(good, NBD_CMD_FLUSH, 0, 0, 0, NULL), 0);
    close(good);
}

Test(transmit, oversized_write_disconnects)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    cl_req(fd, NBD_CMD_WRITE, 0, 1, 0, DEDUPD_NBD_MAX_PAYLOAD + 1, NULL);
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(transmit, disc_waits_for_requests_in_flight)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    fake_io_delay(h.e, 8192, 200);
    uint8_t w[4096];
    fill(w, sizeof(w), 5);
    cl_req(fd, NBD_CMD_WRITE, 0, 1, 8192, 4096, w);
    cl_req(fd, NBD_CMD_DISC, 0, 2, 0, 0, NULL);
    uint64_t ck;
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 1);
    cr_assert(cl_closed(fd));
    close(fd);
    /* The write landed. */
    fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    cl_req(fd, NBD_CMD_READ, 0, 3, 8192, 4096, NULL);
    cr_assert_eq(cl_simple(fd, NULL), 0);
    uint8_t r[4096];
    cr_assert(cl_recv(fd, r, 4096));
    cr_assert_eq(memcmp(r, w, 4096), 0);
    close(fd);
}

Test(transmit, abrupt_disconnect_with_requests_in_flight)
{
    for (int i = 0; i < 20; i++) {
        int fd = h_connect(&h);
        cl_go(fd, "", true, NULL, NULL);
        uint8_t w[65536];
        fill(w, sizeof(w), (uint8_t) i);
        for (int j = 0; j < 8; j++)
            cl_req(fd, NBD_CMD_WRITE, 0, j, (uint64_t) j * 65536, sizeof(w), w);
        cl_req(fd, NBD_CMD_READ, 0, 99, 0, 1 << 20, NULL);
        /* Half a request, then gone. */
        cl_send(fd, "\x25\x60\x95", 3);
        close(fd);
    }
    for (int i = 0; i < 300 && h_connections(&h) > 0; i++)
        usleep(10000);
    cr_assert_eq(h_connections(&h), 0);
}

/* A simple READ of len bytes at off returns want. */
static void
expect_read(int fd, uint64_t off, const uint8_t *want, uint32_t len)
{
    static uint8_t got[65536];
    cr_assert_leq(len, sizeof(got));
    cl_req(fd, NBD_CMD_READ, 0, 7, off, len, NULL);
    cr_assert_eq(cl_simple(fd, NULL), 0);
    cr_assert(cl_recv(fd, got, len));
    cr_assert(!memcmp(got, want, len), "%u bytes at %lu read back wrong", len, (unsigned long) off);
}

/* Small WRITEs that arrive together reach the engine in batches (engine_submit_writes, at
 * most NBD_WBATCH_MAX each); a request of another kind, or a larger write, sends the batch
 * before it. Every request still gets its own reply, and every byte lands. */
Test(transmit, small_writes_arriving_together_are_batched_and_each_answered)
{
    int fd = h_connect(&h);
    cl_go(fd, "", false, NULL, NULL);
    enum { SMALL = 12, BIG = 40000 };
    static uint8_t data[SMALL][4096], part[100], big[BIG], last[4096];
    static uint8_t buf[SMALL * (28 + 4096) + 5 * 28 + 100 + BIG + 2 * 4096];
    size_t n = 0;
    for (int i = 0; i < SMALL; i++) {
        fill(data[i], 4096, (uint8_t) (i + 1));
        n += cl_req_put(buf + n, NBD_CMD_WRITE, 0, 100 + i, (uint64_t) i * 4096, 4096, data[i]);
    }
    fill(part, sizeof(part), 77);
    fill(big, sizeof(big), 78);
    fill(last, sizeof(last), 79);
    n += cl_req_put(buf + n, NBD_CMD_WRITE, 0, 200, 12 * 4096 + 7, sizeof(part), part);
    n += cl_req_put(buf + n, NBD_CMD_WRITE, 0, 201, 16 * 4096, BIG, big);        /* not batched */
    n += cl_req_put(buf + n, NBD_CMD_WRITE, 0, 202, H_DEFAULT_SIZE, 4096, last); /* past the end */
    n += cl_req_put(buf + n, NBD_CMD_FLUSH, 0, 203, 0, 0, NULL);
    n += cl_req_put(buf + n, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 204, 13 * 4096, 4096, last);
    cr_assert_leq(n, sizeof(buf));
    cr_assert(cl_send(fd, buf, n));

    bool seen[SMALL + 5] = {false};
    for (int i = 0; i < SMALL + 5; i++) {
        uint64_t ck;
        uint32_t err = cl_simple(fd, &ck);
        int k = ck >= 200 ? SMALL + (int) (ck - 200) : (int) ck - 100;
        cr_assert(k >= 0 && k < SMALL + 5 && !seen[k], "unexpected cookie %lu", (unsigned long) ck);
        seen[k] = true;
        cr_assert_eq(err, ck == 202 ? (uint32_t) NBD_ENOSPC : 0u, "cookie %lu: error %u",
                     (unsigned long) ck, err);
    }
    for (int i = 0; i < SMALL; i++)
        expect_read(fd, (uint64_t) i * 4096, data[i], 4096);
    expect_read(fd, 12 * 4096 + 7, part, sizeof(part));
    expect_read(fd, 16 * 4096, big, 4096);
    expect_read(fd, 16 * 4096 + BIG - 4096, big + BIG - 4096, 4096);
    expect_read(fd, 13 * 4096, last, 4096);

    struct fake_io_counters cnt;
    fake_io_counters(h.e, &cnt);
    cr_assert_eq(cnt.writes, SMALL + 3, "the write past the end never reaches the engine");
    cr_assert_eq(cnt.fua, 1);
    /* One send of ~60 KiB: the server reads it in few reads, so small writes come together. */
    cr_assert_geq(cnt.max_batch, 2, "no two small writes were ever batched");
    cr_assert_leq(cnt.max_batch, NBD_WBATCH_MAX);
    close(fd);
}
