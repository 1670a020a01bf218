/* nbd/wire.h: the NBD wire format — magics, option/command/reply numbers, flags and the
 * packed structs of every fixed-size message, as in the NBD project's doc/proto.md.
 * All multi-byte fields are big-endian on the wire; the structs hold them in wire order
 * (fill them with htobe16/32/64, read them with be16/32/64toh).
 * Owns nothing; knows nothing of connections or the engine.
 * Sizes are spelled from field sizes and checked with static asserts below. */
#ifndef DD_NBD_WIRE_H
#define DD_NBD_WIRE_H

#include <stdint.h>

/* ---- handshake (fixed newstyle only; oldstyle is never offered) ---- */

#define NBD_MAGIC     0x4e42444d41474943ULL /* "NBDMAGIC" */
#define NBD_IHAVEOPT  0x49484156454f5054ULL /* "IHAVEOPT": newstyle, option requests */
#define NBD_REP_MAGIC 0x0003e889045565a9ULL /* option replies */

/* Handshake flags (server, 16 bits). */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES      (1u << 1)
/* Client flags (32 bits); any other bit set is a protocol violation: hard disconnect. */
#define NBD_FLAG_C_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_C_NO_ZEROES      (1u << 1)

/* Options. */
#define NBD_OPT_EXPORT_NAME       1
#define NBD_OPT_ABORT             2
#define NBD_OPT_LIST              3
#define NBD_OPT_PEEK_EXPORT       4 /* withdrawn */
#define NBD_OPT_STARTTLS          5
#define NBD_OPT_INFO              6
#define NBD_OPT_GO                7
#define NBD_OPT_STRUCTURED_REPLY  8
#define NBD_OPT_LIST_META_CONTEXT 9
#define NBD_OPT_SET_META_CONTEXT  10
#define NBD_OPT_EXTENDED_HEADERS  11 /* not offered: answered NBD_REP_ERR_UNSUP */

/* Option reply types; errors have bit 31 set. */
#define NBD_REP_ACK                 1
#define NBD_REP_SERVER              2
#define NBD_REP_INFO                3
#define NBD_REP_META_CONTEXT        4
#define NBD_REP_ERR(v)              ((uint32_t) ((1u << 31) | (v)))
#define NBD_REP_ERR_UNSUP           NBD_REP_ERR(1)
#define NBD_REP_ERR_POLICY          NBD_REP_ERR(2)
#define NBD_REP_ERR_INVALID         NBD_REP_ERR(3)
#define NBD_REP_ERR_PLATFORM        NBD_REP_ERR(4)
#define NBD_REP_ERR_TLS_REQD        NBD_REP_ERR(5)
#define NBD_REP_ERR_UNKNOWN         NBD_REP_ERR(6)
#define NBD_REP_ERR_SHUTDOWN        NBD_REP_ERR(7)
#define NBD_REP_ERR_BLOCK_SIZE_REQD NBD_REP_ERR(8)
#define NBD_REP_ERR_TOO_BIG         NBD_REP_ERR(9)
#define NBD_REP_ERR_EXT_HEADER_REQD NBD_REP_ERR(10)

/* NBD_REP_INFO types (16 bits). */
#define NBD_INFO_EXPORT      0
#define NBD_INFO_NAME        1
#define NBD_INFO_DESCRIPTION 2
#define NBD_INFO_BLOCK_SIZE  3

/* Transmission flags (16 bits), sent with the export size. */
#define NBD_FLAG_HAS_FLAGS         (1u << 0)
#define NBD_FLAG_READ_ONLY         (1u << 1)
#define NBD_FLAG_SEND_FLUSH        (1u << 2)
#define NBD_FLAG_SEND_FUA          (1u << 3)
#define NBD_FLAG_ROTATIONAL        (1u << 4)
#define NBD_FLAG_SEND_TRIM         (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF           (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN    (1u << 8)
#define NBD_FLAG_SEND_RESIZE       (1u << 9)
#define NBD_FLAG_SEND_CACHE        (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO    (1u << 11)

/* Strings (export names, queries, messages) MUST be no longer than this. */
#define NBD_MAX_STRING 4096

/* ---- transmission ---- */

#define NBD_REQUEST_MAGIC          0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC     0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

#define NBD_CMD_READ         0
#define NBD_CMD_WRITE        1
#define NBD_CMD_DISC         2
#define NBD_CMD_FLUSH        3
#define NBD_CMD_TRIM         4
#define NBD_CMD_CACHE        5
#define NBD_CMD_WRITE_ZEROES 6
#define NBD_CMD_BLOCK_STATUS 7
#define NBD_CMD_RESIZE       8 /* not offered */

/* Command flags (16 bits). */
#define NBD_CMD_FLAG_FUA         (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE     (1u << 1)
#define NBD_CMD_FLAG_DF          (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE     (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO   (1u << 4)
#define NBD_CMD_FLAG_PAYLOAD_LEN (1u << 5) /* extended headers only: refused */

/* Structured reply flags and chunk types; error chunk types have bit 15 set. */
#define NBD_REPLY_FLAG_DONE         (1u << 0)
#define NBD_REPLY_TYPE_NONE         0
#define NBD_REPLY_TYPE_OFFSET_DATA  1
#define NBD_REPLY_TYPE_OFFSET_HOLE  2
#define NBD_REPLY_TYPE_BLOCK_STATUS 5
#define NBD_REPLY_TYPE_ERROR        ((1u << 15) | 1)
#define NBD_REPLY_TYPE_ERROR_OFFSET ((1u << 15) | 2)

/* Error values: the spec fixes these numbers, independent of the host's errno. */
#define NBD_SUCCESS   0
#define NBD_EPERM     1
#define NBD_EIO       5
#define NBD_ENOMEM    12
#define NBD_EINVAL    22
#define NBD_ENOSPC    28
#define NBD_EOVERFLOW 75
#define NBD_ENOTSUP   95
#define NBD_ESHUTDOWN 108

/* base:allocation status flags. */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* x-dedupd:shared status flags (our own context; docs/nbd.md). Unique data is 0, which
 * is also the spec's "safe default" status. */
#define NBD_DEDUPD_STATE_SHARED (1u << 0) /* chunk(s) referenced more than once */
#define NBD_DEDUPD_STATE_ZERO   (1u << 1) /* reads as zeros, nothing stored */

/* Meta context ids, fixed so that they mean the same thing on every connection. */
#define NBD_CTX_BASE_ALLOCATION      1
#define NBD_CTX_DEDUPD_SHARED        2
#define NBD_CTX_NAME_BASE_ALLOCATION "base:allocation"
#define NBD_CTX_NAME_DEDUPD_SHARED   "x-dedupd:shared"

/* ---- packed structs (fields big-endian) ---- */

#define NBD_PACKED __attribute__((packed))

struct nbd_greeting {   /* S: after connect */
    uint64_t magic;     /* NBD_MAGIC */
    uint64_t opt_magic; /* NBD_IHAVEOPT */
    uint16_t flags;
} NBD_PACKED;

struct nbd_opt_hdr { /* C: each option */
    uint64_t magic;  /* NBD_IHAVEOPT */
    uint32_t option;
    uint32_t len; /* data bytes that follow */
} NBD_PACKED;

struct nbd_rep_hdr { /* S: each option reply */
    uint64_t magic;  /* NBD_REP_MAGIC */
    uint32_t option;
    uint32_t type;
    uint32_t len;
} NBD_PACKED;

struct nbd_export_name_reply { /* S: after NBD_OPT_EXPORT_NAME (+124 zeros without NO_ZEROES) */
    uint64_t size;
    uint16_t flags;
} NBD_PACKED;
#define NBD_EXPORT_NAME_ZEROES 124

struct nbd_info_export { /* NBD_REP_INFO payload, NBD_INFO_EXPORT */
    uint16_t type;
    uint64_t size;
    uint16_t flags;
} NBD_PACKED;

struct nbd_info_block_size {
    uint16_t type;
    uint32_t min;
    uint32_t preferred;
    uint32_t max;
} NBD_PACKED;

struct nbd_request {
    uint32_t magic; /* NBD_REQUEST_MAGIC */
    uint16_t flags;
    uint16_t type;
    uint64_t cookie; /* "handle" in older texts: opaque, echoed back */
    uint64_t offset;
    uint32_t len;
} NBD_PACKED;

struct nbd_simple_reply {
    uint32_t magic; /* NBD_SIMPLE_REPLY_MAGIC */
    uint32_t error;
    uint64_t cookie;
} NBD_PACKED;

struct nbd_chunk_hdr { /* structured reply chunk */
    uint32_t magic;    /* NBD_STRUCTURED_REPLY_MAGIC */
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint32_t len; /* payload bytes that follow */
} NBD_PACKED;

struct nbd_chunk_offset_hole {
    uint64_t offset;
    uint32_t len;
} NBD_PACKED;

struct nbd_chunk_error { /* followed by msg_len bytes of message */
    uint32_t error;
    uint16_t msg_len;
} NBD_PACKED;

struct nbd_block_descriptor {
    uint32_t len;
    uint32_t flags;
} NBD_PACKED;

_Static_assert(sizeof(struct nbd_greeting) == 8 + 8 + 2, "greeting");
_Static_assert(sizeof(struct nbd_opt_hdr) == 8 + 4 + 4, "option header");
_Static_assert(sizeof(struct nbd_rep_hdr) == 8 + 4 + 4 + 4, "option reply header");
_Static_assert(sizeof(struct nbd_export_name_reply) == 8 + 2, "export name reply");
_Static_assert(sizeof(struct nbd_info_export) == 2 + 8 + 2, "info export");
_Static_assert(sizeof(struct nbd_info_block_size) == 2 + 4 + 4 + 4, "info block size");
_Static_assert(sizeof(struct nbd_request) == 4 + 2 + 2 + 8 + 8 + 4, "request");
_Static_assert(sizeof(struct nbd_simple_reply) == 4 + 4 + 8, "simple reply");
_Static_assert(sizeof(struct nbd_chunk_hdr) == 4 + 2 + 2 + 8 + 4, "chunk header");
_Static_assert(sizeof(struct nbd_chunk_offset_hole) == 8 + 4, "offset hole");
_Static_assert(sizeof(struct nbd_chunk_error) == 4 + 2, "error chunk");
_Static_assert(sizeof(struct nbd_block_descriptor) == 4 + 4, "block descriptor");

#endif
