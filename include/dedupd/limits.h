/* limits: sizes and defaults shared by server and client. */
#ifndef DEDUPD_LIMITS_H
#define DEDUPD_LIMITS_H

#define DEDUPD_DEFAULT_PORT        10809
#define DEDUPD_DEFAULT_HOST        "127.0.0.1"
#define DEDUPD_DEFAULT_DATA_DIR    "./var/dedupd"
#define DEDUPD_CTL_SOCKET_NAME     "ctl.sock"
#define DEDUPD_LOCK_NAME           "dedupd.lock"
#define DEDUPD_DEFAULT_EXPORT      "default"
#define DEDUPD_DEFAULT_EXPORT_SIZE (16ULL << 30) /* thin: costs nothing until written */

/* Chunk size: a power of two; 4 KiB dedupes file-system images best (DESIGN.md). */
#define DEDUPD_CHUNK_MIN     (4U << 10)
#define DEDUPD_CHUNK_MAX     (8U << 20)
#define DEDUPD_CHUNK_DEFAULT (4U << 10)

#define DEDUPD_EXPORT_NAME_MAX 255 /* NBD allows 4096; names are also keys and CLI words */
#define DEDUPD_EXPORT_SIZE_MAX (1ULL << 60)
#define DEDUPD_HASH_MAX_LEN    32 /* SHA-256; xxh3-128 uses 16 */

/* Largest NBD payload we accept (READ/WRITE length); advertised in INFO_BLOCK_SIZE. */
#define DEDUPD_NBD_MAX_PAYLOAD (32U << 20)
/* Largest control message (either direction); bigger ones are refused. */
#define DEDUPD_CTL_MAX_MSG (1U << 20)

#endif
