/* space: keeping free space on the file system for the metadata.
 *
 * Segments and RocksDB share the data directory's file system. When new data took the
 * last free byte, RocksDB could no longer append to its write-ahead log: the commits
 * already acknowledged to clients had their index entries only in memory, and a restart
 * found their records unindexed and truncated them (a full-disk test lost every write
 * acknowledged without a flush). So new data stops at a reserve of free space
 * (store_options.reserve_bytes, 64 MiB by default) with -ENOSPC, which the NBD edge
 * reports as NBD_ENOSPC; RocksDB's log, flushes and compactions and segment compaction
 * (which frees space by moving records) keep the reserve.
 *
 * The free space comes from statvfs, asked again after every SPACE_RECHECK bytes
 * appended, and at every claim once the room left is under that: near the edge each
 * append costs one statvfs (about a microsecond), far from it nothing. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/statvfs.h>

#include "util/log.h"

#define SPACE_RECHECK (16u << 20)

/* Free bytes of the segments' file system, or UINT64_MAX when statvfs cannot say. */
static uint64_t
free_bytes(const struct store *st)
{
    struct statvfs sv;
    if (statvfs(st->seg_dir, &sv) < 0) {
        log_debug("store: statvfs %s: %s", st->seg_dir, strerror(errno));
        return UINT64_MAX;
    }
    return (uint64_t) sv.f_bavail * (uint64_t) sv.f_frsize;
}

static void
refresh(struct store *st)
{
    st->space_spent = 0;
    uint64_t f = free_bytes(st); /* unknown: UINT64_MAX, no writes stopped on a guess */
    st->space_room = f > st->opt.reserve_bytes ? f - st->opt.reserve_bytes : 0;
}

void
store__space_report(struct store *st, struct store_stats *out)
{
    out->free_bytes = free_bytes(st);
    out->reserve_bytes = st->opt.reserve_bytes;
    out->new_data_refused = __atomic_load_n(&st->space_low, __ATOMIC_RELAXED);
}

int
store__space_claim(struct store *st, uint64_t bytes)
{
    /* spent <= room always: only claims that fit are added */
    if (st->space_spent >= SPACE_RECHECK ||
        st->space_room - st->space_spent < SPACE_RECHECK + bytes)
        refresh(st);
    /* space_low is read by store_stats from other threads; it changes only here */
    bool low = __atomic_load_n(&st->space_low, __ATOMIC_RELAXED);
    if (bytes > st->space_room - st->space_spent) {
        if (!low) {
            log_warn("store: %s: free space is down to the reserve of %" PRIu64
                     " MiB kept for the index; new data is refused (ENOSPC) until space is "
                     "freed (trim or delete, then gc)",
                     st->seg_dir, st->opt.reserve_bytes >> 20);
            __atomic_store_n(&st->space_low, true, __ATOMIC_RELAXED);
        }
        return -ENOSPC;
    }
    if (low) {
        log_info("store: %s: free space above the reserve again; new data accepted", st->seg_dir);
        __atomic_store_n(&st->space_low, false, __ATOMIC_RELAXED);
    }
    st->space_spent += bytes;
    return 0;
}
