/* index/internal.h: the back-end ops table and what the files of index/ share, only them.
 * A back-end is one file with static functions and one const struct index_ops whose first
 * field is its name; index.c lists them and dispatches. */
#ifndef DD_INDEX_INTERNAL_H
#define DD_INDEX_INTERNAL_H

#include "index/index.h"

/* splitmix64's finalizer: spreads keys that are close (sequential ids) or share a prefix
 * over every bit. */
static inline uint64_t
index__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct index_ops {
    const char *name;
    bool persistent;
    int (*open)(struct meta *m, const struct index_limits *lim, struct index **out);
    void (*close)(struct index *ix);
    int (*lookup)(struct index *ix, uint8_t alg, const uint8_t *hash, size_t len,
                  uint64_t *chunk_id);
    int (*stage)(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash,
                 size_t len, uint64_t chunk_id);
    void (*publish)(struct index *ix, struct index_batch *b);
    void (*remove)(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash,
                   size_t len, uint64_t chunk_id);
    void (*usage)(struct index *ix, struct index_usage *out);
};

/* Every back-end's state starts with this, so index.c can dispatch. */
struct index {
    const struct index_ops *ops;
};

extern const struct index_ops index__memory_ops;
extern const struct index_ops index__rocksdb_ops;

/* Stages one memory-style entry (key prefix, alg, id) in b. 0 or -ENOMEM. */
int index__batch_push(struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
                      uint64_t chunk_id);

/* ---- filter.c: the rocksdb back-end's in-memory filter of the `hash` keys ---- */

/* Filter size: room for at least this many keys (1.25 MiB), at most this many bytes (room
 * for ~27 M keys at 10 bits each, 107 GiB of unique 4 KiB chunks; past that the filter
 * answers "maybe" more often, never "absent" wrongly). */
#define INDEX_FILTER_MIN_KEYS  (1ULL << 20)
#define INDEX_FILTER_MAX_BYTES (32ULL << 20)

struct index_filter;

/* Starts the builder thread, which builds the first filter at once; until it is done every
 * look-up is "maybe". 0, -ENOMEM or -errno of pthread_create. m is borrowed until stop. */
int index__filter_start(struct meta *m, struct index_filter **out);
void index__filter_stop(struct index_filter *f); /* joins the builder; NULL is fine */
/* False only if no live chunk had hash (alg, hash) when the filter's build started and
 * none was published since — a `hash` entry it answers false for names a chunk that is
 * gone (the sweep's question). Any thread. */
bool index__filter_holds(struct index_filter *f, uint8_t alg, const uint8_t *hash, size_t len);
/* index__filter_holds for a look-up: counts the look-ups it spares RocksDB. */
bool index__filter_may_contain(struct index_filter *f, uint8_t alg, const uint8_t *hash,
                               size_t len);
/* Adds the staged keys of a committed batch (index_publish). Any thread. */
void index__filter_add(struct index_filter *f, const struct index_staged *s, size_t n);
void index__filter_usage(struct index_filter *f, struct index_usage *out);
/* Tests: start a new build; wait until no build is wanted or running; a function the
 * builder calls after it took the scan's first snapshot and before it scans; the smallest
 * size of the next builds and the records each scan reads with one iterator. */
void index__filter_rebuild(struct index_filter *f);
void index__filter_wait(struct index_filter *f);
void index__filter_set_hook(struct index_filter *f, void (*fn)(void *arg), void *arg);
void index__filter_set_sizes(struct index_filter *f, uint64_t min_keys, uint64_t piece_records);
/* The filter of an open rocksdb back-end (NULL for other back-ends). */
struct index_filter *index__rocksdb_filter(struct index *ix);

#endif
