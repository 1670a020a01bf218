/* version: what server and client report with --version and over the control socket. */
#ifndef DEDUPD_VERSION_H
#define DEDUPD_VERSION_H

#define DEDUPD_VERSION "0.1.0"
/* Bumped when the control protocol changes incompatibly; a mismatch is refused. */
#define DEDUPD_CTL_PROTO_VERSION 1
/* On-disk format of DATA_DIR (segments + RocksDB); a newer one is refused at open. */
#define DEDUPD_FORMAT_VERSION 3

#endif
