/* nbd/handshake.c: the fixed-newstyle handshake — greeting, client flags, and option
 * haggling (EXPORT_NAME, ABORT, LIST, INFO, GO, STRUCTURED_REPLY, LIST/SET_META_CONTEXT)
 * up to the transmission phase. Every option's data is validated here; malformed options
 * get NBD_REP_ERR_INVALID, unknown ones NBD_REP_ERR_UNSUP, a missing export
 * NBD_REP_ERR_UNKNOWN; only violations the protocol cannot answer (bad magic, unknown
 * client flags, EXPORT_NAME failures) end the connection.
 * Knows the engine only through the export catalogue calls; owns no memory beyond the
 * option buffer (conn.c frees it). */
#include <endian.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dedupd/limits.h"
#include "nbd/internal.h"
#include "util/log.h"

static uint32_t
get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}

static uint16_t
get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return be16toh(v);
}

/* Sends one option reply: header + len bytes of data (copied). */
static int
rep(struct nbd_conn *c, uint32_t type, const void *data, uint32_t len)
{
    uint8_t stackbuf[256];
    size_t total = sizeof(struct nbd_rep_hdr) + len;
    uint8_t *b = total <= sizeof(stackbuf) ? stackbuf : malloc(total);
    if (!b) {
        nbd__conn_stop(c, "out of memory for an option reply", true);
        return -ENOMEM;
    }
    struct nbd_rep_hdr h = {
        .magic = htobe64(NBD_REP_MAGIC),
        .option = htobe32(c->opt),
        .type = htobe32(type),
        .len = htobe32(len),
    };
    memcpy(b, &h, sizeof(h));
    if (len)
        memcpy(b + sizeof(h), data, len);
    int rc = nbd__conn_send(c, b, total);
    if (b != stackbuf)
        free(b);
    return rc;
}

/* An error reply with a human-readable message (the spec allows one on every error). */
static int
rep_err(struct nbd_conn *c, uint32_t type, const char *fmt, ...)
{
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t) n >= sizeof(msg))
        n = sizeof(msg) - 1;
    log_debug("nbd: conn %" PRIu64 " (%s): %s: %s (%s)", c->id, c->peer, nbd__opt_name(c->opt),
              nbd__rep_name(type), msg);
    return rep(c, type, msg, (uint32_t) n);
}

static int
rep_ack(struct nbd_conn *c)
{
    return rep(c, NBD_REP_ACK, NULL, 0);
}

int
nbd__hs_start(struct nbd_conn *c)
{
    struct nbd_greeting g = {
        .magic = htobe64(NBD_MAGIC),
        .opt_magic = htobe64(NBD_IHAVEOPT),
        .flags = htobe16(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES),
    };
    c->state = NBD_CONN_CLIENT_FLAGS;
    return nbd__conn_send(c, &g, sizeof(g));
}

void
nbd__hs_client_flags(struct nbd_conn *c)
{
    uint32_t f = get32(c->hdr);
    if (f & ~(uint32_t) (NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        nbd__conn_stop(c, "unknown client flags", true);
        return;
    }
    if (!(f & NBD_FLAG_C_FIXED_NEWSTYLE)) {
        nbd__conn_stop(c, "client does not speak fixed newstyle", true);
        return;
    }
    c->fixed_newstyle = true;
    c->no_zeroes = (f & NBD_FLAG_C_NO_ZEROES) != 0;
    c->state = NBD_CONN_OPT_HDR;
}

/* Copies a wire string into a C string when it can name an export: not too long, no NUL.
 * false otherwise (such a name cannot exist). */
static bool
export_name(const uint8_t *p, uint32_t len, char *out)
{
    if (len == 0) { /* p may be NULL: a zero-length option has no buffer */
        out[0] = '\0';
        return true;
    }
    if (len > DEDUPD_EXPORT_NAME_MAX || memchr(p, 0, len))
        return false;
    memcpy(out, p, len);
    out[len] = '\0';
    return true;
}

uint16_t
nbd__tx_flags(const struct nbd_conn *c, const struct engine_export_info *info)
{
    /* CAN_MULTI_CONN: engine_flush() makes every completed write durable on every export,
     * whichever connection wrote it, and there is no per-connection cache. */
    uint16_t f = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                 NBD_FLAG_SEND_CACHE | NBD_FLAG_CAN_MULTI_CONN;
    if (info->read_only)
        f |= NBD_FLAG_READ_ONLY;
    else
        f |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    if (c->structured)
        f |= NBD_FLAG_SEND_DF;
    return f;
}

static void
enter_transmission(struct nbd_conn *c, struct engine_export *ex)
{
    c->ex = ex;
    engine_export_get_info(ex, &c->info);
    c->tx_flags = nbd__tx_flags(c, &c->info);
    /* Contexts belong to the export they were selected for. */
    if (c->meta_ctx && c->meta_export_id != c->info.id)
        c->meta_ctx = 0;
    c->state = NBD_CONN_REQ_HDR;
    nbd__conn_handshake_done(c);
    log_info("nbd: conn %" PRIu64 " (%s): export %s, size %" PRIu64 ", chunk %" PRIu32 "%s%s%s",
             c->id, c->peer, c->info.name, c->info.size, c->info.chunk_size,
             c->info.read_only ? ", read-only" : "", c->structured ? ", structured" : "",
             c->meta_ctx ? ", meta contexts" : "");
}

static void
opt_export_name(struct nbd_conn *c)
{
    char name[DEDUPD_EXPORT_NAME_MAX + 1];
    if (!export_name(c->opt_buf, c->opt_len, name)) {
        nbd__conn_stop(c, "NBD_OPT_EXPORT_NAME: no such export", true);
        return;
    }
    struct engine_export *ex;
    int rc = engine_export_open(c->srv->engine, name, &ex);
    if (rc < 0) {
        log_info("nbd: conn %" PRIu64 " (%s): NBD_OPT_EXPORT_NAME '%s': %s; disconnecting", c->id,
                 c->peer, name, strerror(-rc));
        nbd__conn_stop(c, NULL, true);
        return;
    }
    struct engine_export_info info;
    engine_export_get_info(ex, &info);
    uint8_t b[sizeof(struct nbd_export_name_reply) + NBD_EXPORT_NAME_ZEROES];
    memset(b, 0, sizeof(b));
    struct nbd_export_name_reply r = {
        .size = htobe64(info.size),
        .flags = htobe16(nbd__tx_flags(c, &info)),
    };
    memcpy(b, &r, sizeof(r));
    size_t len = c->no_zeroes ? sizeof(r) : sizeof(b);
    if (nbd__conn_send(c, b, len) < 0) {
        engine_export_close(ex);
        return;
    }
    enter_transmission(c, ex);
}

static void
opt_list(struct nbd_conn *c)
{
    if (c->opt_len != 0) {
        rep_err(c, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
        return;
    }
    struct engine_export_info *list = NULL;
    size_t n = 0;
    int rc = engine_export_list(c->srv->engine, &list, &n);
    if (rc < 0) {
        rep_err(c, NBD_REP_ERR_PLATFORM, "cannot list exports: %s", strerror(-rc));
        return;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint8_t b[4 + DEDUPD_EXPORT_NAME_MAX];
        uint32_t nl = (uint32_t) strnlen(list[i].name, DEDUPD_EXPORT_NAME_MAX);
        uint32_t be = htobe32(nl);
        memcpy(b, &be, 4);
        memcpy(b + 4, list[i].name, nl);
        rc = rep(c, NBD_REP_SERVER, b, 4 + nl);
    }
    free(list);
    if (rc == 0)
        rep_ack(c);
}

static int
rep_info(struct nbd_conn *c, uint16_t type, const void *data, size_t len)
{
    uint8_t b[2 + 512];
    if (len > sizeof(b) - 2)
        len = sizeof(b) - 2;
    uint16_t be = htobe16(type);
    memcpy(b, &be, 2);
    memcpy(b + 2, data, len);
    return rep(c, NBD_REP_INFO, b, (uint32_t) (2 + len));
}

/* NBD_OPT_INFO and NBD_OPT_GO: name, then the information requests. */
static void
opt_info_go(struct nbd_conn *c, bool go)
{
    const uint8_t *p = c->opt_buf;
    uint32_t len = c->opt_len;
    if (len < 4 + 2) {
        rep_err(c, NBD_REP_ERR_INVALID, "option too short");
        return;
    }
    uint32_t nl = get32(p);
    if (nl > len - 6) {
        rep_err(c, NBD_REP_ERR_INVALID, "export name longer than the option");
        return;
    }
    uint16_t nreq = get16(p + 4 + nl);
    if ((uint64_t) len != 4ull + nl + 2 + 2ull * nreq) {
        rep_err(c, NBD_REP_ERR_INVALID, "option length does not match its %u requests",
                (unsigned) nreq);
        return;
    }
    if (nl > NBD_MAX_STRING) {
        rep_err(c, NBD_REP_ERR_INVALID, "export name longer than %d bytes", NBD_MAX_STRING);
        return;
    }
    char name[DEDUPD_EXPORT_NAME_MAX + 1];
    if (!export_name(p + 4, nl, name)) {
        rep_err(c, NBD_REP_ERR_UNKNOWN, "no such export");
        return;
    }
    struct engine_export *ex = NULL;
    struct engine_export_info info;
    int rc = go ? engine_export_open(c->srv->engine, name, &ex)
                : engine_export_lookup(c->srv->engine, name, &info);
    if (rc == -ENOENT) {
        rep_err(c, NBD_REP_ERR_UNKNOWN, "no export named '%s'", name);
        return;
    }
    if (rc < 0) {
        rep_err(c, NBD_REP_ERR_PLATFORM, "export '%s': %s", name, strerror(-rc));
        return;
    }
    if (go)
        engine_export_get_info(ex, &info);

    struct nbd_info_export ie = {
        .type = htobe16(NBD_INFO_EXPORT),
        .size = htobe64(info.size),
        .flags = htobe16(nbd__tx_flags(c, &info)),
    };
    rc = rep(c, NBD_REP_INFO, &ie, sizeof(ie));
    for (uint16_t i = 0; i < nreq && rc == 0; i++) {
        uint16_t t = get16(p + 4 + nl + 2 + 2 * i);
        if (t == NBD_INFO_NAME) {
            rc = rep_info(c, NBD_INFO_NAME, info.name, strlen(info.name));
        } else if (t == NBD_INFO_DESCRIPTION) {
            char d[128];
            int n = snprintf(d, sizeof(d), "dedupd export, %" PRIu32 "-byte chunks, dedup %s%s",
                             info.chunk_size, info.dedup ? "on" : "off",
                             info.read_only ? ", read-only" : "");
            if (n < 0)
                n = 0;
            if ((size_t) n >= sizeof(d))
                n = sizeof(d) - 1;
            rc = rep_info(c, NBD_INFO_DESCRIPTION, d, (size_t) n);
        }
        /* INFO_EXPORT and INFO_BLOCK_SIZE are always sent; unknown types are ignored,
         * as the spec asks. */
    }
    if (rc == 0) {
        /* Any alignment works (partial chunks are read-modify-written); whole chunks
         * avoid that; one request carries at most DEDUPD_NBD_MAX_PAYLOAD. */
        struct nbd_info_block_size bs = {
            .type = htobe16(NBD_INFO_BLOCK_SIZE),
            .min = htobe32(1),
            .preferred = htobe32(info.chunk_size),
            .max = htobe32(DEDUPD_NBD_MAX_PAYLOAD),
        };
        rc = rep(c, NBD_REP_INFO, &bs, sizeof(bs));
    }
    if (rc == 0)
        rc = rep_ack(c);
    if (rc < 0 || !go) {
        engine_export_close(ex);
        return;
    }
    enter_transmission(c, ex);
}

static void
opt_structured_reply(struct nbd_conn *c)
{
    if (c->opt_len != 0) {
        rep_err(c, NBD_REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
        return;
    }
    c->structured = true;
    rep_ack(c);
}

/* NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: export name, then queries. */
static void
opt_meta_context(struct nbd_conn *c, bool set)
{
    const uint8_t *p = c->opt_buf;
    uint32_t len = c->opt_len;
    if (!c->structured) {
        rep_err(c, NBD_REP_ERR_INVALID, "negotiate NBD_OPT_STRUCTURED_REPLY first");
        return;
    }
    if (set)
        c->meta_ctx = 0; /* replaced, even if this option fails */
    if (len < 8) {
        rep_err(c, NBD_REP_ERR_INVALID, "option too short");
        return;
    }
    uint32_t nl = get32(p);
    if (nl > len - 8) {
        rep_err(c, NBD_REP_ERR_INVALID, "export name longer than the option");
        return;
    }
    uint32_t nq = get32(p + 4 + nl);
    uint32_t pos = 8 + nl;
    unsigned mask = 0;
    for (uint32_t i = 0; i < nq; i++) {
        if (len - pos < 4) {
            rep_err(c, NBD_REP_ERR_INVALID, "query %u past the end of the option", i);
            return;
        }
        uint32_t ql = get32(p + pos);
        pos += 4;
        if (ql > len - pos || ql > NBD_MAX_STRING) {
            rep_err(c, NBD_REP_ERR_INVALID, "query %u longer than the option", i);
            return;
        }
        mask |= nbd__ctx_match((const char *) p + pos, ql, !set);
        pos += ql;
    }
    if (pos != len) {
        rep_err(c, NBD_REP_ERR_INVALID, "%u trailing bytes after the queries", len - pos);
        return;
    }
    char name[DEDUPD_EXPORT_NAME_MAX + 1];
    struct engine_export_info info;
    if (!export_name(p + 4, nl, name) || engine_export_lookup(c->srv->engine, name, &info) < 0) {
        rep_err(c, NBD_REP_ERR_UNKNOWN, "no such export");
        return;
    }
    if (!set && nq == 0)
        mask = nbd__ctx_all();
    int rc = 0;
    for (uint32_t id = 0; id < 32 && rc == 0; id++) {
        if (!(mask & (1u << id)))
            continue;
        const char *cn = nbd__ctx_name(id);
        uint8_t b[4 + 64];
        size_t cl = strlen(cn);
        /* LIST replies carry id 0: the ids are only meaningful after SET. */
        uint32_t be = htobe32(set ? id : 0);
        memcpy(b, &be, 4);
        memcpy(b + 4, cn, cl);
        rc = rep(c, NBD_REP_META_CONTEXT, b, (uint32_t) (4 + cl));
    }
    if (rc < 0)
        return;
    if (set) {
        c->meta_ctx = mask;
        c->meta_export_id = info.id;
    }
    rep_ack(c);
}

static void
handle_opt(struct nbd_conn *c)
{
    c->state = NBD_CONN_OPT_HDR;
    log_debug("nbd: conn %" PRIu64 " (%s): %s, %" PRIu32 " bytes", c->id, c->peer,
              nbd__opt_name(c->opt), c->opt_len);
    switch (c->opt) {
    case NBD_OPT_EXPORT_NAME:
        opt_export_name(c);
        break;
    case NBD_OPT_ABORT:
        /* The spec asks for an ACK; the connection closes once it is written. */
        if (rep_ack(c) == 0)
            nbd__conn_stop(c, NULL, false);
        break;
    case NBD_OPT_LIST:
        opt_list(c);
        break;
    case NBD_OPT_INFO:
        opt_info_go(c, false);
        break;
    case NBD_OPT_GO:
        opt_info_go(c, true);
        break;
    case NBD_OPT_STRUCTURED_REPLY:
        opt_structured_reply(c);
        break;
    case NBD_OPT_LIST_META_CONTEXT:
        opt_meta_context(c, false);
        break;
    case NBD_OPT_SET_META_CONTEXT:
        opt_meta_context(c, true);
        break;
    case NBD_OPT_STARTTLS:
        rep_err(c, NBD_REP_ERR_UNSUP, "TLS is not supported by this server");
        break;
    default:
        rep_err(c, NBD_REP_ERR_UNSUP, "option %" PRIu32 " not supported", c->opt);
        break;
    }
}

void
nbd__hs_opt_hdr(struct nbd_conn *c)
{
    struct nbd_opt_hdr h;
    memcpy(&h, c->hdr, sizeof(h));
    if (be64toh(h.magic) != NBD_IHAVEOPT) {
        nbd__conn_stop(c, "bad option magic", true);
        return;
    }
    c->opt = be32toh(h.option);
    c->opt_len = be32toh(h.len);
    c->opt_have = 0;
    if (c->opt_len > NBD_OPT_MAX_LEN) {
        if (c->opt == NBD_OPT_EXPORT_NAME) {
            nbd__conn_stop(c, "NBD_OPT_EXPORT_NAME too long", true);
            return;
        }
        c->skip_left = c->opt_len;
        c->state = NBD_CONN_OPT_SKIP;
        return;
    }
    if (c->opt_len == 0) {
        handle_opt(c);
        return;
    }
    c->opt_buf = malloc(c->opt_len);
    if (!c->opt_buf) {
        nbd__conn_stop(c, "out of memory for an option", true);
        return;
    }
    c->state = NBD_CONN_OPT_DATA;
}

void
nbd__hs_opt_data(struct nbd_conn *c)
{
    handle_opt(c);
    free(c->opt_buf);
    c->opt_buf = NULL;
}

void
nbd__hs_opt_skipped(struct nbd_conn *c)
{
    c->state = NBD_CONN_OPT_HDR;
    rep_err(c, NBD_REP_ERR_TOO_BIG, "option of %" PRIu32 " bytes is over the %u-byte limit",
            c->opt_len, NBD_OPT_MAX_LEN);
}
