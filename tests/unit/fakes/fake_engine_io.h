/* fake_engine_io: an in-memory engine for the NBD server's tests — the export catalogue
 * calls and block I/O of engine.h (read, write, trim, zero, flush, extents) through
 * engine_submit() on libuv's thread pool, like the real engine. Exports are sparse maps of
 * chunks; identical chunks are shared (refcounted) so that ENGINE_EXT_SHARED is real.
 * Tests can inject errors and delays. Not the real engine: no durability. */
#ifndef DD_FAKES_FAKE_ENGINE_IO_H
#define DD_FAKES_FAKE_ENGINE_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

struct engine *fake_io_new(void);
/* Every handle must be closed. NULL is fine. */
void fake_io_free(struct engine *e);
/* The first export added is the default one (""). 0, -EEXIST, -EINVAL, -ENOMEM. */
int fake_io_add_export(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size,
                       bool read_only);
/* The next n operations of type op fail with err (negative errno). */
void fake_io_fail(struct engine *e, enum engine_op op, int err, unsigned n);
/* Operations starting at offset off sleep ms first (on the worker thread). */
void fake_io_delay(struct engine *e, uint64_t off, unsigned ms);
/* With gap > 0, READs of whole chunks (at least two) are answered at once on the loop,
 * spread (engine_read_nowait_spread) with gap junk bytes before each chunk; 0 (the
 * default): every read goes through engine_submit. */
void fake_io_spread(struct engine *e, uint32_t gap);

struct fake_io_counters {
    uint64_t reads, writes, trims, zeros, flushes, extents;
    uint64_t fua;         /* operations that carried ENGINE_FUA */
    uint64_t no_hole;     /* zero operations that carried ENGINE_NO_HOLE */
    uint64_t live_chunks; /* distinct stored chunks */
    uint32_t open_handles;
    uint32_t max_concurrent; /* most operations running at once */
    uint64_t batches;        /* engine_submit_writes calls with more than one write */
    uint32_t max_batch;      /* most writes in one engine_submit_writes call */
    uint64_t spread_reads;   /* of the reads, those answered spread on the loop */
};
void fake_io_counters(struct engine *e, struct fake_io_counters *out);

#endif
