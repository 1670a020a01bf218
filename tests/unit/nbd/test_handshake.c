/* Tests server/nbd/handshake.c (and the option parsing in conn.c): greeting, client flags,
 * every option, malformed option data, meta context negotiation. */
#include <criterion/criterion.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dedupd/limits.h"
#include "harness.h"

#define FLAGS (NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)

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

TestSuite(handshake, .init = setup, .fini = teardown);

/* Builds name-then-requests data for INFO/GO. */
static uint32_t
info_data(uint8_t *b, const char *name, const uint16_t *reqs, uint16_t n)
{
    uint32_t nl = (uint32_t) strlen(name), be = htobe32(nl);
    memcpy(b, &be, 4);
    memcpy(b + 4, name, nl);
    uint16_t bn = htobe16(n);
    memcpy(b + 4 + nl, &bn, 2);
    for (uint16_t i = 0; i < n; i++) {
        uint16_t r = htobe16(reqs[i]);
        memcpy(b + 6 + nl + 2 * i, &r, 2);
    }
    return 6 + nl + 2u * n;
}

Test(handshake, go_default_export_sends_info_and_block_size)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint16_t reqs[] = {NBD_INFO_NAME, NBD_INFO_DESCRIPTION, NBD_INFO_BLOCK_SIZE, 77};
    cl_opt(fd, NBD_OPT_GO, b, info_data(b, "", reqs, 4));
    bool got_export = false, got_name = false, got_desc = false, got_bs = false;
    uint32_t l, t;
    while ((t = cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l)) == NBD_REP_INFO) {
        uint16_t it;
        memcpy(&it, b, 2);
        switch (be16toh(it)) {
        case NBD_INFO_EXPORT: {
            struct nbd_info_export ie;
            cr_assert_eq(l, sizeof(ie));
            memcpy(&ie, b, sizeof(ie));
            cr_assert_eq(be64toh(ie.size), H_DEFAULT_SIZE);
            uint16_t f = be16toh(ie.flags);
            cr_assert(f & NBD_FLAG_HAS_FLAGS);
            cr_assert(f & NBD_FLAG_SEND_FLUSH);
            cr_assert(f & NBD_FLAG_SEND_FUA);
            cr_assert(f & NBD_FLAG_SEND_TRIM);
            cr_assert(f & NBD_FLAG_SEND_WRITE_ZEROES);
            cr_assert(f & NBD_FLAG_SEND_FAST_ZERO);
            cr_assert(f & NBD_FLAG_SEND_CACHE);
            cr_assert(f & NBD_FLAG_CAN_MULTI_CONN);
            cr_assert_not(f & NBD_FLAG_READ_ONLY);
            cr_assert_not(f & NBD_FLAG_SEND_DF, "DF without structured replies");
            got_export = true;
            break;
        }
        case NBD_INFO_NAME:
            cr_assert_eq(l, 2 + strlen("default"));
            cr_assert_eq(memcmp(b + 2, "default", 7), 0);
            got_name = true;
            break;
        case NBD_INFO_DESCRIPTION:
            cr_assert_gt(l, 2);
            got_desc = true;
            break;
        case NBD_INFO_BLOCK_SIZE: {
            struct nbd_info_block_size bs;
            cr_assert_eq(l, sizeof(bs));
            memcpy(&bs, b, sizeof(bs));
            cr_assert_eq(be32toh(bs.min), 1);
            cr_assert_eq(be32toh(bs.preferred), 4096);
            cr_assert_eq(be32toh(bs.max), DEDUPD_NBD_MAX_PAYLOAD);
            got_bs = true;
            break;
        }
        default:
            cr_assert_fail("unexpected info type %u", be16toh(it));
        }
    }
    cr_assert_eq(t, NBD_REP_ACK);
    cr_assert(got_export && got_name && got_desc && got_bs);
    /* In transmission now: a flush is answered. */
    cl_req(fd, NBD_CMD_FLUSH, 0, 7, 0, 0, NULL);
    uint64_t ck;
    cr_assert_eq(cl_simple(fd, &ck), 0);
    cr_assert_eq(ck, 7);
    close(fd);
}

Test(handshake, block_size_preferred_is_the_chunk_size)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    cl_opt(fd, NBD_OPT_INFO, b, info_data(b, "big64k", NULL, 0));
    uint32_t l, t, pref = 0;
    while ((t = cl_rep(fd, NBD_OPT_INFO, b, sizeof(b), &l)) == NBD_REP_INFO) {
        uint16_t it;
        memcpy(&it, b, 2);
        if (be16toh(it) == NBD_INFO_BLOCK_SIZE) {
            struct nbd_info_block_size bs;
            memcpy(&bs, b, sizeof(bs));
            pref = be32toh(bs.preferred);
        }
    }
    cr_assert_eq(t, NBD_REP_ACK);
    cr_assert_eq(pref, 65536);
    /* INFO does not end the handshake: another option is answered. */
    cl_opt(fd, NBD_OPT_LIST, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_LIST, b, sizeof(b), &l), NBD_REP_SERVER);
    close(fd);
}

Test(handshake, export_name_with_and_without_zeroes)
{
    for (int nz = 0; nz < 2; nz++) {
        int fd = h_connect(&h);
        cl_greet(fd, NBD_FLAG_C_FIXED_NEWSTYLE | (nz ? NBD_FLAG_C_NO_ZEROES : 0));
        cl_opt(fd, NBD_OPT_EXPORT_NAME, "ro", 2);
        uint8_t b[134];
        size_t want = nz ? 10 : 134;
        cr_assert(cl_recv(fd, b, want));
        uint64_t size;
        uint16_t f;
        memcpy(&size, b, 8);
        memcpy(&f, b + 8, 2);
        cr_assert_eq(be64toh(size), H_RO_SIZE);
        cr_assert(be16toh(f) & NBD_FLAG_READ_ONLY);
        cr_assert_not(be16toh(f) & NBD_FLAG_SEND_TRIM, "trim offered on a read-only export");
        for (size_t i = 10; i < want; i++)
            cr_assert_eq(b[i], 0);
        /* Nothing else before the first reply. */
        cl_req(fd, NBD_CMD_READ, 0, 1, 0, 8, NULL);
        uint8_t data[8];
        cr_assert_eq(cl_simple(fd, NULL), 0);
        cr_assert(cl_recv(fd, data, 8));
        close(fd);
    }
}

Test(handshake, export_name_unknown_disconnects)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    cl_opt(fd, NBD_OPT_EXPORT_NAME, "nope", 4);
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(handshake, unknown_client_flags_disconnect)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS | (1u << 7));
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(handshake, client_without_fixed_newstyle_is_refused)
{
    int fd = h_connect(&h);
    cl_greet(fd, 0);
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(handshake, bad_option_magic_disconnects)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t junk[16];
    memset(junk, 0x41, sizeof(junk));
    cr_assert(cl_send(fd, junk, sizeof(junk)));
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(handshake, unknown_options_are_unsupported_and_the_session_goes_on)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint32_t l;
    cl_opt(fd, 99, "xyz", 3);
    cr_assert_eq(cl_rep(fd, 99, b, sizeof(b), &l), NBD_REP_ERR_UNSUP);
    cl_opt(fd, NBD_OPT_STARTTLS, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_STARTTLS, b, sizeof(b), &l), NBD_REP_ERR_UNSUP);
    cl_opt(fd, NBD_OPT_EXTENDED_HEADERS, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_EXTENDED_HEADERS, b, sizeof(b), &l), NBD_REP_ERR_UNSUP);
    cl_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_STRUCTURED_REPLY, b, sizeof(b), &l), NBD_REP_ACK);
    close(fd);
}

Test(handshake, list_names_every_export)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint32_t l, t;
    cl_opt(fd, NBD_OPT_LIST, NULL, 0);
    int n = 0;
    bool seen_ro = false;
    while ((t = cl_rep(fd, NBD_OPT_LIST, b, sizeof(b), &l)) == NBD_REP_SERVER) {
        uint32_t nl;
        memcpy(&nl, b, 4);
        nl = be32toh(nl);
        cr_assert_leq(nl, l - 4);
        if (nl == 2 && memcmp(b + 4, "ro", 2) == 0)
            seen_ro = true;
        n++;
    }
    cr_assert_eq(t, NBD_REP_ACK);
    cr_assert_eq(n, 3);
    cr_assert(seen_ro);
    cl_opt(fd, NBD_OPT_LIST, "x", 1);
    cr_assert_eq(cl_rep(fd, NBD_OPT_LIST, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    close(fd);
}

Test(handshake, info_errors_unknown_and_invalid)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint32_t l;
    cl_opt(fd, NBD_OPT_INFO, b, info_data(b, "missing", NULL, 0));
    cr_assert_eq(cl_rep(fd, NBD_OPT_INFO, b, sizeof(b), &l), NBD_REP_ERR_UNKNOWN);
    cl_opt(fd, NBD_OPT_GO, b, info_data(b, "missing", NULL, 0));
    cr_assert_eq(cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l), NBD_REP_ERR_UNKNOWN);
    /* Name length past the option. */
    uint32_t len = info_data(b, "default", NULL, 0);
    uint32_t huge = htobe32(1000);
    memcpy(b, &huge, 4);
    cl_opt(fd, NBD_OPT_GO, b, len);
    cr_assert_eq(cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    /* Request count that does not match the length. */
    len = info_data(b, "default", NULL, 0);
    uint16_t three = htobe16(3);
    memcpy(b + 4 + 7, &three, 2);
    cl_opt(fd, NBD_OPT_INFO, b, len);
    cr_assert_eq(cl_rep(fd, NBD_OPT_INFO, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    /* Too short. */
    cl_opt(fd, NBD_OPT_GO, "ab", 2);
    cr_assert_eq(cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    cl_opt(fd, NBD_OPT_STRUCTURED_REPLY, "a", 1);
    cr_assert_eq(cl_rep(fd, NBD_OPT_STRUCTURED_REPLY, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    /* Still negotiating: GO on the right name works. */
    cl_opt(fd, NBD_OPT_GO, b, info_data(b, "default", NULL, 0));
    uint32_t t;
    while ((t = cl_rep(fd, NBD_OPT_GO, b, sizeof(b), &l)) == NBD_REP_INFO)
        ;
    cr_assert_eq(t, NBD_REP_ACK);
    close(fd);
}

Test(handshake, abort_is_acked_then_closed)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[64];
    uint32_t l;
    cl_opt(fd, NBD_OPT_ABORT, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_ABORT, b, sizeof(b), &l), NBD_REP_ACK);
    cr_assert(cl_closed(fd));
    close(fd);
}

Test(handshake, oversized_option_is_skipped_with_too_big)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint32_t len = 200000;
    uint8_t *junk = calloc(1, len);
    cl_opt(fd, NBD_OPT_INFO, junk, len);
    free(junk);
    uint8_t b[512];
    uint32_t l;
    cr_assert_eq(cl_rep(fd, NBD_OPT_INFO, b, sizeof(b), &l), NBD_REP_ERR_TOO_BIG);
    cl_opt(fd, NBD_OPT_LIST, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_LIST, b, sizeof(b), &l), NBD_REP_SERVER);
    close(fd);
}

/* LIST/SET_META_CONTEXT data: export name and queries. */
static uint32_t
meta_data(uint8_t *b, const char *name, const char *const *q, uint32_t nq)
{
    uint32_t nl = (uint32_t) strlen(name), be = htobe32(nl), p;
    memcpy(b, &be, 4);
    memcpy(b + 4, name, nl);
    be = htobe32(nq);
    memcpy(b + 4 + nl, &be, 4);
    p = 8 + nl;
    for (uint32_t i = 0; i < nq; i++) {
        uint32_t ql = (uint32_t) strlen(q[i]);
        be = htobe32(ql);
        memcpy(b + p, &be, 4);
        memcpy(b + p + 4, q[i], ql);
        p += 4 + ql;
    }
    return p;
}

/* Collects META_CONTEXT replies until ACK: returns a mask of names seen (1 base, 2 ours). */
static unsigned
read_contexts(int fd, uint32_t opt, uint32_t *ids, uint32_t *final)
{
    uint8_t b[512];
    uint32_t l, t;
    unsigned m = 0;
    while ((t = cl_rep(fd, opt, b, sizeof(b), &l)) == NBD_REP_META_CONTEXT) {
        uint32_t id;
        memcpy(&id, b, 4);
        id = be32toh(id);
        if (l - 4 == strlen(NBD_CTX_NAME_BASE_ALLOCATION) &&
            memcmp(b + 4, NBD_CTX_NAME_BASE_ALLOCATION, l - 4) == 0) {
            m |= 1;
            ids[0] = id;
        } else if (l - 4 == strlen(NBD_CTX_NAME_DEDUPD_SHARED) &&
                   memcmp(b + 4, NBD_CTX_NAME_DEDUPD_SHARED, l - 4) == 0) {
            m |= 2;
            ids[1] = id;
        } else {
            cr_assert_fail("unexpected context");
        }
    }
    *final = t;
    return m;
}

Test(handshake, meta_contexts_need_structured_replies)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint32_t l;
    const char *q[] = {"base:allocation"};
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, meta_data(b, "", q, 1));
    cr_assert_eq(cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    cl_opt(fd, NBD_OPT_LIST_META_CONTEXT, b, meta_data(b, "", q, 1));
    cr_assert_eq(cl_rep(fd, NBD_OPT_LIST_META_CONTEXT, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    close(fd);
}

Test(handshake, list_and_set_meta_contexts)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    uint8_t b[512];
    uint32_t l, t, ids[2] = {99, 99};
    cl_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    cr_assert_eq(cl_rep(fd, NBD_OPT_STRUCTURED_REPLY, b, sizeof(b), &l), NBD_REP_ACK);

    cl_opt(fd, NBD_OPT_LIST_META_CONTEXT, b, meta_data(b, "default", NULL, 0));
    cr_assert_eq(read_contexts(fd, NBD_OPT_LIST_META_CONTEXT, ids, &t), 3);
    cr_assert_eq(t, NBD_REP_ACK);
    cr_assert_eq(ids[0], 0, "LIST replies carry id 0");

    const char *ns[] = {"x-dedupd:"};
    cl_opt(fd, NBD_OPT_LIST_META_CONTEXT, b, meta_data(b, "", ns, 1));
    cr_assert_eq(read_contexts(fd, NBD_OPT_LIST_META_CONTEXT, ids, &t), 2);
    cr_assert_eq(t, NBD_REP_ACK);

    const char *other[] = {"qemu:dirty-bitmap:x", "base:nothing"};
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, meta_data(b, "", other, 2));
    cr_assert_eq(read_contexts(fd, NBD_OPT_SET_META_CONTEXT, ids, &t), 0);
    cr_assert_eq(t, NBD_REP_ACK);

    const char *both[] = {"x-dedupd:shared", "base:allocation"};
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, meta_data(b, "default", both, 2));
    cr_assert_eq(read_contexts(fd, NBD_OPT_SET_META_CONTEXT, ids, &t), 3);
    cr_assert_eq(t, NBD_REP_ACK);
    cr_assert_eq(ids[0], NBD_CTX_BASE_ALLOCATION);
    cr_assert_eq(ids[1], NBD_CTX_DEDUPD_SHARED);

    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, meta_data(b, "missing", both, 2));
    cr_assert_eq(cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l), NBD_REP_ERR_UNKNOWN);

    /* Trailing bytes and a query running past the end. */
    uint32_t len = meta_data(b, "", both, 2);
    b[len] = 0;
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, len + 1);
    cr_assert_eq(cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    len = meta_data(b, "", both, 2);
    cl_opt(fd, NBD_OPT_SET_META_CONTEXT, b, len - 3);
    cr_assert_eq(cl_rep(fd, NBD_OPT_SET_META_CONTEXT, b, sizeof(b), &l), NBD_REP_ERR_INVALID);
    close(fd);
}

Test(handshake, structured_go_offers_df)
{
    int fd = h_connect(&h);
    uint64_t size = 0;
    uint16_t f = cl_go(fd, "big64k", true, NULL, &size);
    cr_assert(f & NBD_FLAG_SEND_DF);
    cr_assert_eq(size, 16ull << 20);
    close(fd);
}

Test(handshake, eof_in_the_middle_of_an_option_is_clean)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    struct nbd_opt_hdr oh = {htobe64(NBD_IHAVEOPT), htobe32(NBD_OPT_GO), htobe32(100)};
    cr_assert(cl_send(fd, &oh, sizeof(oh)));
    cr_assert(cl_send(fd, "abc", 3));
    close(fd);
    for (int i = 0; i < 200 && h_connections(&h) > 0; i++)
        usleep(10000);
    cr_assert_eq(h_connections(&h), 0);
}

Test(handshake, empty_export_name_selects_the_default_export)
{
    int fd = h_connect(&h);
    cl_greet(fd, FLAGS);
    cl_opt(fd, NBD_OPT_EXPORT_NAME, NULL, 0);
    uint8_t b[10];
    cr_assert(cl_recv(fd, b, sizeof(b)));
    uint64_t size;
    memcpy(&size, b, 8);
    cr_assert_eq(be64toh(size), H_DEFAULT_SIZE);
    close(fd);
}
