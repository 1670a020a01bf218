/* ctl_frame: the control socket's framing, shared by dedupd and dedupd-ctl.
 * Each message is a 4-byte big-endian length followed by that many bytes of protobuf
 * (proto/dedupd.proto). A length above DEDUPD_CTL_MAX_MSG is a protocol error: the
 * receiver answers (or drops the connection) without reading the body. */
#ifndef DEDUPD_CTL_FRAME_H
#define DEDUPD_CTL_FRAME_H

#include <stdint.h>

#define DEDUPD_CTL_FRAME_HDR 4

static inline void
ctl_frame_put_len(uint8_t hdr[DEDUPD_CTL_FRAME_HDR], uint32_t len)
{
    hdr[0] = (uint8_t) (len >> 24);
    hdr[1] = (uint8_t) (len >> 16);
    hdr[2] = (uint8_t) (len >> 8);
    hdr[3] = (uint8_t) len;
}

static inline uint32_t
ctl_frame_get_len(const uint8_t hdr[DEDUPD_CTL_FRAME_HDR])
{
    return ((uint32_t) hdr[0] << 24) | ((uint32_t) hdr[1] << 16) | ((uint32_t) hdr[2] << 8) |
           (uint32_t) hdr[3];
}

#endif
