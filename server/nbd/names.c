/* nbd/names.c: the spec's names of options, commands, option replies and errors, for log
 * lines. Knows nothing of connections. */
#include "nbd/internal.h"

const char *
nbd__opt_name(uint32_t opt)
{
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        return "NBD_OPT_EXPORT_NAME";
    case NBD_OPT_ABORT:
        return "NBD_OPT_ABORT";
    case NBD_OPT_LIST:
        return "NBD_OPT_LIST";
    case NBD_OPT_PEEK_EXPORT:
        return "NBD_OPT_PEEK_EXPORT";
    case NBD_OPT_STARTTLS:
        return "NBD_OPT_STARTTLS";
    case NBD_OPT_INFO:
        return "NBD_OPT_INFO";
    case NBD_OPT_GO:
        return "NBD_OPT_GO";
    case NBD_OPT_STRUCTURED_REPLY:
        return "NBD_OPT_STRUCTURED_REPLY";
    case NBD_OPT_LIST_META_CONTEXT:
        return "NBD_OPT_LIST_META_CONTEXT";
    case NBD_OPT_SET_META_CONTEXT:
        return "NBD_OPT_SET_META_CONTEXT";
    case NBD_OPT_EXTENDED_HEADERS:
        return "NBD_OPT_EXTENDED_HEADERS";
    default:
        return "unknown option";
    }
}

const char *
nbd__cmd_name(uint16_t type)
{
    switch (type) {
    case NBD_CMD_READ:
        return "NBD_CMD_READ";
    case NBD_CMD_WRITE:
        return "NBD_CMD_WRITE";
    case NBD_CMD_DISC:
        return "NBD_CMD_DISC";
    case NBD_CMD_FLUSH:
        return "NBD_CMD_FLUSH";
    case NBD_CMD_TRIM:
        return "NBD_CMD_TRIM";
    case NBD_CMD_CACHE:
        return "NBD_CMD_CACHE";
    case NBD_CMD_WRITE_ZEROES:
        return "NBD_CMD_WRITE_ZEROES";
    case NBD_CMD_BLOCK_STATUS:
        return "NBD_CMD_BLOCK_STATUS";
    case NBD_CMD_RESIZE:
        return "NBD_CMD_RESIZE";
    default:
        return "unknown command";
    }
}

const char *
nbd__rep_name(uint32_t rep)
{
    switch (rep) {
    case NBD_REP_ACK:
        return "NBD_REP_ACK";
    case NBD_REP_SERVER:
        return "NBD_REP_SERVER";
    case NBD_REP_INFO:
        return "NBD_REP_INFO";
    case NBD_REP_META_CONTEXT:
        return "NBD_REP_META_CONTEXT";
    case NBD_REP_ERR_UNSUP:
        return "NBD_REP_ERR_UNSUP";
    case NBD_REP_ERR_POLICY:
        return "NBD_REP_ERR_POLICY";
    case NBD_REP_ERR_INVALID:
        return "NBD_REP_ERR_INVALID";
    case NBD_REP_ERR_PLATFORM:
        return "NBD_REP_ERR_PLATFORM";
    case NBD_REP_ERR_TLS_REQD:
        return "NBD_REP_ERR_TLS_REQD";
    case NBD_REP_ERR_UNKNOWN:
        return "NBD_REP_ERR_UNKNOWN";
    case NBD_REP_ERR_SHUTDOWN:
        return "NBD_REP_ERR_SHUTDOWN";
    case NBD_REP_ERR_BLOCK_SIZE_REQD:
        return "NBD_REP_ERR_BLOCK_SIZE_REQD";
    case NBD_REP_ERR_TOO_BIG:
        return "NBD_REP_ERR_TOO_BIG";
    case NBD_REP_ERR_EXT_HEADER_REQD:
        return "NBD_REP_ERR_EXT_HEADER_REQD";
    default:
        return "unknown reply";
    }
}

const char *
nbd__err_name(uint32_t err)
{
    switch (err) {
    case NBD_SUCCESS:
        return "success";
    case NBD_EPERM:
        return "EPERM";
    case NBD_EIO:
        return "EIO";
    case NBD_ENOMEM:
        return "ENOMEM";
    case NBD_EINVAL:
        return "EINVAL";
    case NBD_ENOSPC:
        return "ENOSPC";
    case NBD_EOVERFLOW:
        return "EOVERFLOW";
    case NBD_ENOTSUP:
        return "ENOTSUP";
    case NBD_ESHUTDOWN:
        return "ESHUTDOWN";
    default:
        return "unknown error";
    }
}
