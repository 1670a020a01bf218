/* nbd/transmit.c: the transmission phase — decode each request header, validate it
 * (command, flags, range, read-only, negotiated features), read a WRITE's payload, and
 * turn the request into one engine_submit() call. Replies go out (reply.c) in the order
 * the engine completes them, so many requests are in flight and answered out of order.
 * Limits: a new request is read only while the connection holds fewer than max_inflight
 * requests and less than max_inflight_bytes of buffers (conn.c stops reading otherwise).
 * Knows nothing of the wire layout of replies or of the socket. */
#include <endian.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dedupd/limits.h"
#include "nbd/internal.h"
#include "util/log.h"

/* Runs per BLOCK_STATUS reply: the spec lets a server describe less than asked; the
 * client asks again from where the reply stopped. */
#define NBD_BS_MAX_EXTENTS 1024

bool
nbd__tx_can_accept(const struct nbd_conn *c)
{
    const struct nbd_limits *lim = &c->srv->limits;
    if (c->inflight >= lim->max_inflight)
        return false;
    /* One request may overshoot the byte limit (by at most DEDUPD_NBD_MAX_PAYLOAD), so
     * memory stays bounded and a request larger than the limit still gets through. */
    if (c->inflight > 0 && c->inflight_bytes >= lim->max_inflight_bytes)
        return false;
    return true;
}

static void
on_engine_done(struct engine_req *er)
{
    struct nbd_req *req = er->user;
    struct nbd_conn *c = req->conn;
    c->engine_pending--;
    if (c->closing) {
        nbd__req_free(req);
        return;
    }
    /* Even when stopping (server shutdown, socket error) the reply is attempted: the spec
     * asks a server to service in-flight requests before it disconnects. A forced stop
     * then closes without waiting for the reply to drain. */
    nbd__reply(req, er->result);
    nbd__conn_kick(c);
}

static bool
reads_full(const struct nbd_conn *c)
{
    return c->reads_held >= NBD_READS_HELD_MIN && c->read_held_bytes >= NBD_READ_HELD_MAX;
}

void
nbd__tx_flush_writes(struct nbd_conn *c)
{
    unsigned n = c->wbatch_n;
    if (n == 0)
        return;
    c->wbatch_n = 0;
    struct engine_req *ers[NBD_WBATCH_MAX];
    for (unsigned i = 0; i < n; i++)
        ers[i] = &c->wbatch[i]->er;
    int rc = engine_submit_writes(c->lp->loop, ers, n);
    if (rc == 0)
        return;
    log_warn("nbd: conn %" PRIu64 " (%s): cannot submit %u writes: %s", c->id, c->peer, n,
             strerror(-rc));
    for (unsigned i = 0; i < n; i++) {
        c->engine_pending--;
        nbd__reply(c->wbatch[i], rc);
    }
}

static void
start(struct nbd_conn *c, struct nbd_req *req)
{
    struct engine_req *er = &req->er;
    bool batch = req->type == NBD_CMD_WRITE && req->len <= NBD_WBATCH_MAX_BYTES;
    if (!batch) /* nothing overtakes a write received before it */
        nbd__tx_flush_writes(c);
    er->engine = c->srv->engine;
    er->ex = c->ex;
    er->off = req->off;
    er->len = req->len;
    er->done = on_engine_done;
    er->user = req;
    bool fua = (req->flags & NBD_CMD_FLAG_FUA) != 0;
    switch (req->type) {
    case NBD_CMD_READ:
    case NBD_CMD_CACHE:
        /* CACHE is advisory: warming the first DEDUPD_NBD_MAX_PAYLOAD bytes through the
         * engine's read path (and its block cache) is all it promises. */
        if (req->type == NBD_CMD_CACHE && req->len > DEDUPD_NBD_MAX_PAYLOAD)
            er->len = DEDUPD_NBD_MAX_PAYLOAD;
        /* A READ the loop may answer itself takes a buffer that fits it spread too
         * (engine_read_nowait_spread); the worker uses the same one as it is. */
        size_t spread = req->type == NBD_CMD_READ && er->len <= c->lp->nowait_max
                            ? engine_read_spread_size(c->ex, req->off, (uint32_t) er->len)
                            : 0;
        req->buf_len = spread > er->len ? spread : er->len;
        req->buf = bufpool_get(c->lp->bufs, req->buf_len);
        if (!req->buf) {
            nbd__reply(req, -ENOMEM);
            return;
        }
        req->bytes = er->len;
        c->inflight_bytes += er->len;
        req->read_held = true;
        c->reads_held++;
        c->read_held_bytes += er->len;
        er->op = ENGINE_OP_READ;
        er->buf = req->buf;
        /* A small read of cached data is answered here: handing it to a worker and back
         * costs more than the read. -EAGAIN: the worker does it (and reports any error). */
        if (req->type == NBD_CMD_READ && er->len <= c->lp->nowait_max &&
            (spread ? engine_read_nowait_spread(c->ex, req->off, (uint32_t) er->len, req->buf,
                                                &req->spread)
                    : engine_read_nowait(c->ex, req->off, (uint32_t) er->len, req->buf)) == 0) {
            nbd__reply(req, 0);
            return;
        }
        req->spread = (struct engine_spread){0}; /* the worker's answer is contiguous */
        break;
    case NBD_CMD_WRITE:
        er->op = ENGINE_OP_WRITE;
        er->buf = req->buf;
        er->flags = fua ? ENGINE_FUA : 0;
        break;
    case NBD_CMD_FLUSH:
        er->op = ENGINE_OP_FLUSH;
        break;
    case NBD_CMD_TRIM:
        er->op = ENGINE_OP_TRIM;
        er->flags = fua ? ENGINE_FUA : 0;
        break;
    case NBD_CMD_WRITE_ZEROES:
        /* FAST_ZERO needs nothing: zeroing never writes data (the engine unmaps or stores
         * nothing), so it is always at least as fast as writing zeros. */
        er->op = ENGINE_OP_ZERO;
        er->flags =
            (fua ? ENGINE_FUA : 0) | ((req->flags & NBD_CMD_FLAG_NO_HOLE) ? ENGINE_NO_HOLE : 0);
        break;
    case NBD_CMD_BLOCK_STATUS: {
        size_t cap = (req->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_BS_MAX_EXTENTS;
        req->ext = calloc(cap, sizeof(*req->ext));
        if (!req->ext) {
            nbd__reply(req, -ENOMEM);
            return;
        }
        er->op = ENGINE_OP_EXTENTS;
        /* Chunk refcounts cost a point read per mapped chunk: only for dedupd:shared. */
        er->flags = (c->meta_ctx & (1u << NBD_CTX_DEDUPD_SHARED)) ? 0 : ENGINE_EXTENTS_ALLOC_ONLY;
        er->ext = req->ext;
        er->ext_cap = cap;
        break;
    }
    default:
        nbd__reply(req, -EINVAL);
        return;
    }
    c->engine_pending++;
    if (batch) {
        c->wbatch[c->wbatch_n++] = req;
        if (c->wbatch_n == NBD_WBATCH_MAX)
            nbd__tx_flush_writes(c);
        return;
    }
    int rc = engine_submit(c->lp->loop, er);
    if (rc < 0) {
        c->engine_pending--;
        log_warn("nbd: conn %" PRIu64 " (%s): %s: cannot submit: %s", c->id, c->peer,
                 nbd__cmd_name(req->type), strerror(-rc));
        nbd__reply(req, rc);
    }
}

/* Starts req now, or parks a READ while the connection holds enough read data. */
static void
submit(struct nbd_conn *c, struct nbd_req *req)
{
    if ((req->type == NBD_CMD_READ || req->type == NBD_CMD_CACHE) && (reads_full(c) || c->parked)) {
        /* In arrival order, started again by nbd__tx_resume_reads. */
        req->park_next = NULL;
        if (c->parked_tail)
            c->parked_tail->park_next = req;
        else
            c->parked = req;
        c->parked_tail = req;
        return;
    }
    start(c, req);
}

void
nbd__tx_resume_reads(struct nbd_conn *c)
{
    while (c->parked && !c->closing && !reads_full(c)) {
        struct nbd_req *req = c->parked;
        c->parked = req->park_next;
        if (!c->parked)
            c->parked_tail = NULL;
        start(c, req);
    }
}

/* Decides the error of a request the engine must not see: -errno and a message, or 0. */
static int
validate(struct nbd_conn *c, struct nbd_req *req)
{
    uint16_t allowed;
    bool writes = false;
    switch (req->type) {
    case NBD_CMD_READ:
        allowed = NBD_CMD_FLAG_FUA | (c->structured ? NBD_CMD_FLAG_DF : 0);
        break;
    case NBD_CMD_WRITE:
        allowed = NBD_CMD_FLAG_FUA;
        writes = true;
        break;
    case NBD_CMD_FLUSH:
    case NBD_CMD_CACHE:
        allowed = NBD_CMD_FLAG_FUA;
        break;
    case NBD_CMD_TRIM:
        allowed = NBD_CMD_FLAG_FUA;
        writes = true;
        break;
    case NBD_CMD_WRITE_ZEROES:
        allowed = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        writes = true;
        break;
    case NBD_CMD_BLOCK_STATUS:
        allowed = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_REQ_ONE;
        break;
    default:
        req->msg = "unknown command";
        return -EINVAL;
    }
    if (req->flags & ~allowed) {
        req->msg = "command flag not supported for this command";
        return -EINVAL;
    }
    if (writes && c->info.read_only) {
        req->msg = "export is read-only";
        return -EPERM;
    }
    if (req->type == NBD_CMD_FLUSH)
        return 0; /* offset and length are reserved */
    uint64_t size = c->info.size;
    if (req->off > size || req->len > size - req->off) {
        req->msg = "request past the end of the export";
        /* The spec asks ENOSPC for writes beyond the end, EINVAL for the rest. */
        return (req->type == NBD_CMD_WRITE || req->type == NBD_CMD_WRITE_ZEROES) ? -ENOSPC
                                                                                 : -EINVAL;
    }
    if (req->type == NBD_CMD_READ && req->len > DEDUPD_NBD_MAX_PAYLOAD) {
        req->msg = "read longer than the maximum payload";
        return -EINVAL;
    }
    if (req->type == NBD_CMD_BLOCK_STATUS) {
        if (!c->structured || c->meta_ctx == 0) {
            req->msg = "no meta context negotiated";
            return -EINVAL;
        }
        if (req->len == 0) {
            req->msg = "zero-length block status";
            return -EINVAL;
        }
    }
    return 0;
}

/* A zero-length I/O request changes nothing and needs no engine call. */
static bool
is_noop(const struct nbd_req *req)
{
    return req->len == 0 && req->type != NBD_CMD_FLUSH && req->type != NBD_CMD_BLOCK_STATUS;
}

void
nbd__tx_req_hdr(struct nbd_conn *c)
{
    struct nbd_request h;
    memcpy(&h, c->hdr, sizeof(h));
    if (be32toh(h.magic) != NBD_REQUEST_MAGIC) {
        nbd__conn_stop(c, "bad request magic", true);
        return;
    }
    uint16_t type = be16toh(h.type);
    uint16_t flags = be16toh(h.flags);
    uint64_t off = be64toh(h.offset);
    uint32_t len = be32toh(h.len);
    if (type == NBD_CMD_DISC) {
        log_debug("nbd: conn %" PRIu64 " (%s): NBD_CMD_DISC", c->id, c->peer);
        nbd__conn_stop(c, NULL, false);
        return;
    }
    if (type == NBD_CMD_WRITE && len > DEDUPD_NBD_MAX_PAYLOAD) {
        /* Skipping an unbounded payload would only waste bandwidth on a client that
         * ignored the advertised maximum: the spec allows disconnecting. */
        log_warn("nbd: conn %" PRIu64 " (%s): NBD_CMD_WRITE of %" PRIu32
                 " bytes is over the %u-byte maximum; disconnecting",
                 c->id, c->peer, len, DEDUPD_NBD_MAX_PAYLOAD);
        nbd__conn_stop(c, NULL, true);
        return;
    }
    struct nbd_req *req = nbd__req_new(c);
    if (!req) {
        nbd__conn_stop(c, "out of memory for a request", true);
        return;
    }
    req->cookie = h.cookie; /* opaque: echoed back in wire order */
    req->type = type;
    req->flags = flags;
    req->off = off;
    req->len = len;
    req->err = validate(c, req);
    if (type != NBD_CMD_WRITE) {
        if (req->err || is_noop(req))
            nbd__reply(req, 0);
        else
            submit(c, req);
        return;
    }
    c->cur = req;
    if (req->err == 0 && len > 0) {
        req->buf = bufpool_get(c->lp->bufs, len);
        req->buf_len = len;
        if (!req->buf) {
            req->err = -ENOMEM;
            req->msg = "out of memory for the payload";
        }
    }
    if (req->err) {
        c->skip_left = len;
        c->state = NBD_CONN_REQ_SKIP;
        if (len == 0)
            nbd__tx_skip_done(c);
        return;
    }
    req->bytes = len;
    c->inflight_bytes += len;
    c->pay_have = 0;
    c->state = NBD_CONN_REQ_PAYLOAD;
    if (len == 0)
        nbd__tx_payload_done(c);
}

void
nbd__tx_payload_done(struct nbd_conn *c)
{
    struct nbd_req *req = c->cur;
    c->cur = NULL;
    c->state = NBD_CONN_REQ_HDR;
    if (is_noop(req))
        nbd__reply(req, 0);
    else
        submit(c, req);
}

void
nbd__tx_skip_done(struct nbd_conn *c)
{
    struct nbd_req *req = c->cur;
    c->cur = NULL;
    c->state = NBD_CONN_REQ_HDR;
    nbd__reply(req, 0);
}
