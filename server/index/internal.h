/* index/internal.h: the back-end ops table, shared only by the files of index/.
 * A back-end is one file with static functions and one const struct index_ops whose first
 * field is its name; index.c lists them and dispatches. */
#ifndef DD_INDEX_INTERNAL_H
#define DD_INDEX_INTERNAL_H

#include "index/index.h"

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

#endif
