/* nbd/reply.c: replies of the transmission phase — simple replies, and structured replies
 * when negotiated: READ data as OFFSET_DATA chunks with chunk-aligned zero runs sent as
 * OFFSET_HOLE, BLOCK_STATUS descriptors per selected meta context, ERROR chunks with a
 * message. Also the one errno -> NBD error mapping of the server.
 * Builds req->out/req->bufs and hands them to conn.c; knows nothing of sockets or the
 * engine beyond its extent flags. */
#include <endian.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/internal.h"
#include "util/log.h"

uint32_t
nbd__errno_to_nbd(int neg_errno)
{
    switch (-neg_errno) {
    case 0:
        return NBD_SUCCESS;
    case EPERM:
    case EROFS:
    case EACCES:
        return NBD_EPERM;
    case EIO:
    case EUCLEAN: /* corrupt on disk: an I/O error to the client (invariant 5) */
        return NBD_EIO;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
    case ERANGE:
        return NBD_EINVAL;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

static void
put_chunk_hdr(uint8_t *p, const struct nbd_req *req, uint16_t flags, uint16_t type, uint32_t len)
{
    struct nbd_chunk_hdr h = {
        .magic = htobe32(NBD_STRUCTURED_REPLY_MAGIC),
        .flags = htobe16(flags),
        .type = htobe16(type),
        .cookie = req->cookie,
        .len = htobe32(len),
    };
    memcpy(p, &h, sizeof(h));
}

/* Allocates the reply's header area and buffer list. false on out of memory. */
static bool
alloc_out(struct nbd_req *req, size_t out_bytes, unsigned nbufs)
{
    req->out = malloc(out_bytes);
    req->bufs = malloc(nbufs * sizeof(uv_buf_t));
    if (!req->out || !req->bufs) {
        free(req->out);
        free(req->bufs);
        req->out = NULL;
        req->bufs = NULL;
        return false;
    }
    req->nbufs = 0;
    return true;
}

static void
add_buf(struct nbd_req *req, void *p, size_t len)
{
    req->bufs[req->nbufs++] = uv_buf_init(p, (unsigned) len);
}

/* READ data: bytes [rel, rel + n) of the read (rel counted from req->off) are at
 * piece(req, rel, n, &len) for len of them — all n when the data is contiguous in
 * req->buf, else up to the end of the chunk they start in (req->spread: the engine left
 * each chunk where the store's read put it). */
static uint8_t *
piece(const struct nbd_req *req, uint64_t rel, uint64_t n, uint64_t *len)
{
    const struct engine_spread *sp = &req->spread;
    if (!sp->stride) {
        *len = n;
        return req->buf + rel;
    }
    uint32_t cs = sp->stride - sp->skip;
    uint64_t in = rel % cs;
    *len = cs - in < n ? cs - in : n;
    return req->buf + (rel / cs) * sp->stride + sp->skip + in;
}

/* Buffers add_data takes for all of the READ data in one call: one when contiguous, else
 * one per chunk touched. Split into runs, the data takes at most one more per run. */
static unsigned
data_bufs(const struct nbd_req *req)
{
    const struct engine_spread *sp = &req->spread;
    return sp->stride ? req->len / (sp->stride - sp->skip) + 2 : 1;
}

static void
add_data(struct nbd_req *req, uint64_t rel, uint64_t n)
{
    while (n > 0) {
        uint64_t len;
        uint8_t *p = piece(req, rel, n, &len);
        add_buf(req, p, len);
        rel += len;
        n -= len;
    }
}

static bool
all_zero(const uint8_t *p, size_t n)
{
    /* p[0] == 0 and every byte equals its predecessor: memcmp runs at memory speed. */
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

static bool
data_zero(const struct nbd_req *req, uint64_t rel, uint64_t n)
{
    while (n > 0) {
        uint64_t len;
        const uint8_t *p = piece(req, rel, n, &len);
        if (!all_zero(p, len))
            return false;
        rel += len;
        n -= len;
    }
    return true;
}

static bool
simple_reply(struct nbd_req *req, uint32_t err)
{
    bool data = err == 0 && req->type == NBD_CMD_READ && req->len > 0;
    if (!alloc_out(req, sizeof(struct nbd_simple_reply), 1 + data_bufs(req)))
        return false;
    struct nbd_simple_reply r = {
        .magic = htobe32(NBD_SIMPLE_REPLY_MAGIC),
        .error = htobe32(err),
        .cookie = req->cookie,
    };
    memcpy(req->out, &r, sizeof(r));
    add_buf(req, req->out, sizeof(r));
    if (data)
        add_data(req, 0, req->len);
    return true;
}

static bool
error_chunk(struct nbd_req *req, uint32_t err, const char *msg)
{
    size_t ml = strlen(msg);
    if (ml > 200)
        ml = 200;
    size_t plen = sizeof(struct nbd_chunk_error) + ml;
    if (!alloc_out(req, sizeof(struct nbd_chunk_hdr) + plen, 1))
        return false;
    put_chunk_hdr(req->out, req, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, (uint32_t) plen);
    struct nbd_chunk_error e = {.error = htobe32(err), .msg_len = htobe16((uint16_t) ml)};
    memcpy(req->out + sizeof(struct nbd_chunk_hdr), &e, sizeof(e));
    memcpy(req->out + sizeof(struct nbd_chunk_hdr) + sizeof(e), msg, ml);
    add_buf(req, req->out, sizeof(struct nbd_chunk_hdr) + plen);
    return true;
}

static bool
none_chunk(struct nbd_req *req)
{
    if (!alloc_out(req, sizeof(struct nbd_chunk_hdr), 1))
        return false;
    put_chunk_hdr(req->out, req, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 0);
    add_buf(req, req->out, sizeof(struct nbd_chunk_hdr));
    return true;
}

/* READ data as content chunks: whole export chunks that are all zeros become holes (so
 * the client need not receive or store them), the rest OFFSET_DATA. Partial chunks at
 * the edges of an unaligned read are always data. */
static bool
read_chunks(struct nbd_req *req, uint32_t chunk)
{
    const uint64_t start = req->off, end = req->off + req->len;
    if (chunk == 0 || (req->flags & NBD_CMD_FLAG_DF))
        chunk = 0; /* one data chunk */
    /* Upper bound of runs: one per export chunk touched, plus the edges. */
    size_t max_runs = chunk ? (size_t) (req->len / chunk) + 2 : 1;
    const size_t hdr_data = sizeof(struct nbd_chunk_hdr) + 8;
    const size_t hdr_hole = sizeof(struct nbd_chunk_hdr) + sizeof(struct nbd_chunk_offset_hole);
    if (!alloc_out(req, max_runs * hdr_hole, (unsigned) (2 * max_runs) + data_bufs(req)))
        return false;

    uint8_t *o = req->out;
    uint64_t pos = start;
    while (pos < end) {
        /* Extend a run of one kind as far as it goes. */
        uint64_t run_end = end;
        bool hole = false;
        if (chunk) {
            uint64_t next = (pos / chunk + 1) * chunk;
            bool aligned = pos % chunk == 0;
            hole = aligned && next <= end && data_zero(req, pos - start, chunk);
            run_end = next < end ? next : end;
            while (run_end < end) {
                uint64_t n2 = run_end + chunk;
                bool full = n2 <= end;
                bool z = full && data_zero(req, run_end - start, chunk);
                if (z != hole)
                    break;
                run_end = n2 < end ? n2 : end;
            }
        }
        bool last = run_end == end;
        uint16_t fl = last ? NBD_REPLY_FLAG_DONE : 0;
        if (hole) {
            put_chunk_hdr(o, req, fl, NBD_REPLY_TYPE_OFFSET_HOLE,
                          sizeof(struct nbd_chunk_offset_hole));
            struct nbd_chunk_offset_hole hh = {
                .offset = htobe64(pos),
                .len = htobe32((uint32_t) (run_end - pos)),
            };
            memcpy(o + sizeof(struct nbd_chunk_hdr), &hh, sizeof(hh));
            add_buf(req, o, hdr_hole);
        } else {
            put_chunk_hdr(o, req, fl, NBD_REPLY_TYPE_OFFSET_DATA, (uint32_t) (8 + run_end - pos));
            uint64_t be = htobe64(pos);
            memcpy(o + sizeof(struct nbd_chunk_hdr), &be, 8);
            add_buf(req, o, hdr_data);
            add_data(req, pos - start, run_end - pos);
        }
        o += hdr_hole;
        pos = run_end;
    }
    return true;
}

/* One BLOCK_STATUS chunk per selected context, descriptors merged by status. */
static bool
block_status_chunks(struct nbd_req *req, unsigned ctx_mask, int n_ext)
{
    bool one = (req->flags & NBD_CMD_FLAG_REQ_ONE) != 0;
    unsigned n_ctx = (unsigned) __builtin_popcount(ctx_mask);
    size_t per = sizeof(struct nbd_chunk_hdr) + 4 +
                 (size_t) (n_ext > 0 ? n_ext : 1) * sizeof(struct nbd_block_descriptor);
    if (!alloc_out(req, n_ctx * per, n_ctx))
        return false;
    uint8_t *o = req->out;
    unsigned done = 0;
    for (uint32_t id = 0; id < 32; id++) {
        if (!(ctx_mask & (1u << id)))
            continue;
        uint8_t *d = o + sizeof(struct nbd_chunk_hdr) + 4;
        size_t nd = 0;
        uint64_t total = 0;
        for (int i = 0; i < n_ext; i++) {
            uint64_t l = req->ext[i].len;
            if (l == 0 || total + l > req->len)
                break; /* never describe past the request */
            uint32_t st = nbd__ctx_status(id, req->ext[i].flags);
            struct nbd_block_descriptor *prev =
                nd ? (struct nbd_block_descriptor *) (d + (nd - 1) * 8) : NULL;
            if (prev && be32toh(prev->flags) == st) {
                prev->len = htobe32(be32toh(prev->len) + (uint32_t) l);
            } else {
                if (one && nd == 1)
                    break;
                struct nbd_block_descriptor bd = {.len = htobe32((uint32_t) l),
                                                  .flags = htobe32(st)};
                memcpy(d + nd * 8, &bd, 8);
                nd++;
            }
            total += l;
        }
        if (nd == 0) {
            /* The engine described nothing usable: status 0 ("no information") over the
             * whole request is always a correct answer. */
            struct nbd_block_descriptor bd = {.len = htobe32(req->len), .flags = 0};
            memcpy(d, &bd, 8);
            nd = 1;
        }
        done++;
        uint32_t plen = (uint32_t) (4 + nd * 8);
        put_chunk_hdr(o, req, done == n_ctx ? NBD_REPLY_FLAG_DONE : 0, NBD_REPLY_TYPE_BLOCK_STATUS,
                      plen);
        uint32_t be = htobe32(id);
        memcpy(o + sizeof(struct nbd_chunk_hdr), &be, 4);
        add_buf(req, o, sizeof(struct nbd_chunk_hdr) + plen);
        o += per;
    }
    return true;
}

void
nbd__reply(struct nbd_req *req, int result)
{
    struct nbd_conn *c = req->conn;
    int err = req->err ? req->err : (result < 0 ? result : 0);
    uint32_t nerr = nbd__errno_to_nbd(err);
    if (err && !req->err) {
        /* The engine logged the details; this line ties them to the client. */
        log_warn_limited(
            "nbd: conn %" PRIu64 " (%s): export %s: %s off %" PRIu64 " len %" PRIu32 ": %s", c->id,
            c->peer, c->info.name, nbd__cmd_name(req->type), req->off, req->len, strerror(-err));
    } else if (err) {
        log_debug("nbd: conn %" PRIu64 " (%s): %s off %" PRIu64 " len %" PRIu32 ": %s (%s)", c->id,
                  c->peer, nbd__cmd_name(req->type), req->off, req->len, nbd__err_name(nerr),
                  req->msg ? req->msg : "");
    }
    bool ok;
    if (!c->structured) {
        ok = simple_reply(req, nerr);
    } else if (err) {
        ok = error_chunk(req, nerr, req->msg ? req->msg : strerror(-err));
    } else if (req->type == NBD_CMD_READ) {
        ok = req->len ? read_chunks(req, c->info.chunk_size) : none_chunk(req);
    } else if (req->type == NBD_CMD_BLOCK_STATUS) {
        ok = block_status_chunks(req, c->meta_ctx, result);
    } else {
        ok = simple_reply(req, 0); /* allowed for everything but READ and BLOCK_STATUS */
    }
    if (!ok) {
        nbd__req_free(req);
        nbd__conn_stop(c, "out of memory for a reply", true);
        return;
    }
    req->replying = true;
    nbd__conn_send_req(c, req);
}
