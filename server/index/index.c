/* index.c: the list of hash-index back-ends, dispatch through their ops tables, and the
 * staging batch shared by all of them. Knows no back-end's internals. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index/internal.h"

/* The first is the default (DESIGN.md: rocksdb, persistent). */
static const struct index_ops *const backends[] = {
    &index__rocksdb_ops,
    &index__memory_ops,
};
#define N_BACKENDS (sizeof(backends) / sizeof(backends[0]))

static const char *const backend_names[N_BACKENDS + 1] = {"rocksdb", "memory", NULL};

const char *const *
index_backend_names(void)
{
    return backend_names;
}

static const struct index_ops *
find_backend(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (!strcmp(backends[i]->name, name))
            return backends[i];
    return NULL;
}

bool
index_backend_exists(const char *name)
{
    return find_backend(name) != NULL;
}

int
index_open(const char *name, struct meta *m, const struct index_limits *lim, struct index **out)
{
    const struct index_ops *ops = find_backend(name);
    if (!ops)
        return -ENOENT;
    struct index_limits none = {0};
    return ops->open(m, lim ? lim : &none, out);
}

void
index_close(struct index *ix)
{
    if (ix)
        ix->ops->close(ix);
}

const char *
index_name(const struct index *ix)
{
    return ix->ops->name;
}

bool
index_persistent(const struct index *ix)
{
    return ix->ops->persistent;
}

int
index_lookup(struct index *ix, uint8_t alg, const uint8_t *hash, size_t len, uint64_t *chunk_id)
{
    return ix->ops->lookup(ix, alg, hash, len, chunk_id);
}

int
index_stage(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
            uint64_t chunk_id)
{
    return ix->ops->stage(ix, b, alg, hash, len, chunk_id);
}

void
index_publish(struct index *ix, struct index_batch *b)
{
    ix->ops->publish(ix, b);
    b->n = 0;
}

void
index_remove(struct index *ix, struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
             uint64_t chunk_id)
{
    ix->ops->remove(ix, b, alg, hash, len, chunk_id);
}

void
index_usage(struct index *ix, struct index_usage *out)
{
    memset(out, 0, sizeof(*out));
    ix->ops->usage(ix, out);
}

/* ---- staging batch ---- */

void
index_batch_init(struct index_batch *b)
{
    memset(b, 0, sizeof(*b));
}

void
index_batch_reset(struct index_batch *b, struct meta_batch *mb)
{
    b->mb = mb;
    b->n = 0;
}

int
index_batch_reserve(struct index_batch *b, size_t n)
{
    if (n <= b->cap)
        return 0;
    struct index_staged *s = realloc(b->staged, n * sizeof(*s));
    if (!s)
        return -ENOMEM;
    b->staged = s;
    b->cap = n;
    return 0;
}

void
index_batch_fini(struct index_batch *b)
{
    free(b->staged);
    memset(b, 0, sizeof(*b));
}

int
index__batch_push(struct index_batch *b, uint8_t alg, const uint8_t *hash, size_t len,
                  uint64_t chunk_id)
{
    if (b->n == b->cap) {
        int rc = index_batch_reserve(b, b->cap ? 2 * b->cap : 16);
        if (rc < 0)
            return rc;
    }
    struct index_staged *s = &b->staged[b->n++];
    memset(s->key, 0, sizeof(s->key));
    memcpy(s->key, hash, len < sizeof(s->key) ? len : sizeof(s->key));
    s->chunk_id = chunk_id;
    s->alg = alg;
    return 0;
}
