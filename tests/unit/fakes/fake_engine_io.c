/* fake_engine_io: see fake_engine_io.h. One mutex guards all state; delays sleep outside
 * it so that slow operations really overlap with others. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakes/fake_engine_io.h"

#define MAX_EXPORTS 16
#define BUCKETS     4096

struct fchunk {
    unsigned refs;
    uint64_t hash;
    struct fchunk *hnext; /* hash bucket */
    uint8_t data[];
};

struct engine_export {
    struct engine *e;
    struct engine_export_info info;
    struct fchunk **map; /* size / chunk_size entries, NULL = hole */
    uint64_t n_chunks;
    uint32_t handles;
};

struct engine {
    pthread_mutex_t mu;
    struct engine_export exports[MAX_EXPORTS];
    size_t n_exports;
    struct fchunk *buckets[BUCKETS];
    struct fake_io_counters cnt;
    uint32_t running;
    enum engine_op fail_op;
    int fail_err;
    unsigned fail_n;
    uint64_t delay_off;
    unsigned delay_ms;
    uint32_t spread_gap; /* fake_io_spread */
};

struct engine *
fake_io_new(void)
{
    struct engine *e = calloc(1, sizeof(*e));
    if (e)
        pthread_mutex_init(&e->mu, NULL);
    return e;
}

static void
chunk_put(struct engine *e, struct fchunk *c)
{
    if (!c || --c->refs > 0)
        return;
    struct fchunk **pp = &e->buckets[c->hash % BUCKETS];
    while (*pp != c)
        pp = &(*pp)->hnext;
    *pp = c->hnext;
    e->cnt.live_chunks--;
    free(c);
}

void
fake_io_free(struct engine *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n_exports; i++) {
        struct engine_export *x = &e->exports[i];
        for (uint64_t j = 0; j < x->n_chunks; j++)
            chunk_put(e, x->map[j]);
        free(x->map);
    }
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int
fake_io_add_export(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size,
                   bool read_only)
{
    if (e->n_exports == MAX_EXPORTS || strlen(name) == 0 || strlen(name) > DEDUPD_EXPORT_NAME_MAX ||
        chunk_size == 0 || size % chunk_size)
        return -EINVAL;
    for (size_t i = 0; i < e->n_exports; i++)
        if (strcmp(e->exports[i].info.name, name) == 0)
            return -EEXIST;
    struct engine_export *x = &e->exports[e->n_exports];
    memset(x, 0, sizeof(*x));
    x->n_chunks = size / chunk_size;
    x->map = calloc(x->n_chunks ? x->n_chunks : 1, sizeof(*x->map));
    if (!x->map)
        return -ENOMEM;
    x->e = e;
    x->info.id = (uint32_t) e->n_exports + 1;
    strcpy(x->info.name, name);
    x->info.size = size;
    x->info.chunk_size = chunk_size;
    x->info.dedup = true;
    x->info.read_only = read_only;
    e->n_exports++;
    return 0;
}

void
fake_io_fail(struct engine *e, enum engine_op op, int err, unsigned n)
{
    pthread_mutex_lock(&e->mu);
    e->fail_op = op;
    e->fail_err = err;
    e->fail_n = n;
    pthread_mutex_unlock(&e->mu);
}

void
fake_io_delay(struct engine *e, uint64_t off, unsigned ms)
{
    pthread_mutex_lock(&e->mu);
    e->delay_off = off;
    e->delay_ms = ms;
    pthread_mutex_unlock(&e->mu);
}

void
fake_io_spread(struct engine *e, uint32_t gap)
{
    pthread_mutex_lock(&e->mu);
    e->spread_gap = gap;
    pthread_mutex_unlock(&e->mu);
}

void
fake_io_counters(struct engine *e, struct fake_io_counters *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->cnt;
    out->open_handles = 0;
    for (size_t i = 0; i < e->n_exports; i++)
        out->open_handles += e->exports[i].handles;
    pthread_mutex_unlock(&e->mu);
}

/* ---- catalogue ---- */

static struct engine_export *
find(struct engine *e, const char *name)
{
    if (name[0] == '\0')
        return e->n_exports ? &e->exports[0] : NULL;
    for (size_t i = 0; i < e->n_exports; i++)
        if (strcmp(e->exports[i].info.name, name) == 0)
            return &e->exports[i];
    return NULL;
}

const char *
engine_default_export(struct engine *e)
{
    return e->n_exports ? e->exports[0].info.name : "";
}

int
engine_export_lookup(struct engine *e, const char *name, struct engine_export_info *out)
{
    pthread_mutex_lock(&e->mu);
    struct engine_export *x = find(e, name);
    if (x) {
        *out = x->info;
        out->open_handles = x->handles;
    }
    pthread_mutex_unlock(&e->mu);
    return x ? 0 : -ENOENT;
}

int
engine_export_list(struct engine *e, struct engine_export_info **out, size_t *n)
{
    pthread_mutex_lock(&e->mu);
    struct engine_export_info *a = calloc(e->n_exports ? e->n_exports : 1, sizeof(*a));
    if (a) {
        for (size_t i = 0; i < e->n_exports; i++) {
            a[i] = e->exports[i].info;
            a[i].open_handles = e->exports[i].handles;
        }
        *n = e->n_exports;
    }
    pthread_mutex_unlock(&e->mu);
    if (!a)
        return -ENOMEM;
    *out = a;
    return 0;
}

int
engine_export_open(struct engine *e, const char *name, struct engine_export **out)
{
    pthread_mutex_lock(&e->mu);
    struct engine_export *x = find(e, name);
    if (x)
        x->handles++;
    pthread_mutex_unlock(&e->mu);
    if (!x)
        return -ENOENT;
    *out = x;
    return 0;
}

void
engine_export_close(struct engine_export *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->e->mu);
    ex->handles--;
    pthread_mutex_unlock(&ex->e->mu);
}

void
engine_export_get_info(const struct engine_export *ex, struct engine_export_info *out)
{
    *out = ex->info;
}

/* ---- block I/O (mutex held by the callers below) ---- */

static uint64_t
fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static bool
zeros(const uint8_t *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Stores data as chunk idx of x: unmapped if zero, shared if identical to a live chunk. */
static int
put_chunk(struct engine_export *x, uint64_t idx, const uint8_t *data)
{
    struct engine *e = x->e;
    uint32_t cs = x->info.chunk_size;
    struct fchunk *old = x->map[idx];
    if (zeros(data, cs)) {
        x->map[idx] = NULL;
        chunk_put(e, old);
        return 0;
    }
    uint64_t h = fnv(data, cs);
    struct fchunk *c = e->buckets[h % BUCKETS];
    while (c && !(c->hash == h && memcmp(c->data, data, cs) == 0))
        c = c->hnext;
    if (!c) {
        c = malloc(sizeof(*c) + cs);
        if (!c)
            return -ENOMEM;
        c->refs = 0;
        c->hash = h;
        memcpy(c->data, data, cs);
        c->hnext = e->buckets[h % BUCKETS];
        e->buckets[h % BUCKETS] = c;
        e->cnt.live_chunks++;
    }
    c->refs++;
    x->map[idx] = c;
    chunk_put(e, old);
    return 0;
}

static int
range_ok(const struct engine_export *x, uint64_t off, uint64_t len)
{
    return off <= x->info.size && len <= x->info.size - off ? 0 : -EINVAL;
}

static int
do_read(struct engine_export *x, uint64_t off, uint64_t len, uint8_t *buf)
{
    uint32_t cs = x->info.chunk_size;
    while (len > 0) {
        uint64_t idx = off / cs, in = off % cs;
        uint64_t n = cs - in < len ? cs - in : len;
        struct fchunk *c = x->map[idx];
        if (c)
            memcpy(buf, c->data + in, n);
        else
            memset(buf, 0, n);
        buf += n;
        off += n;
        len -= n;
    }
    return 0;
}

/* src NULL writes zeros. */
static int
do_write(struct engine_export *x, uint64_t off, uint64_t len, const uint8_t *src)
{
    uint32_t cs = x->info.chunk_size;
    uint8_t *tmp = malloc(cs);
    if (!tmp)
        return -ENOMEM;
    int rc = 0;
    while (len > 0 && rc == 0) {
        uint64_t idx = off / cs, in = off % cs;
        uint64_t n = cs - in < len ? cs - in : len;
        do_read(x, idx * cs, cs, tmp);
        if (src)
            memcpy(tmp + in, src, n);
        else
            memset(tmp + in, 0, n);
        rc = put_chunk(x, idx, tmp);
        if (src)
            src += n;
        off += n;
        len -= n;
    }
    free(tmp);
    return rc;
}

static uint32_t
chunk_flags(const struct fchunk *c)
{
    if (!c)
        return ENGINE_EXT_HOLE;
    return c->refs > 1 ? ENGINE_EXT_SHARED : 0;
}

static int
do_extents(struct engine_export *x, uint64_t off, uint64_t len, struct engine_extent *ext,
           size_t cap)
{
    uint32_t cs = x->info.chunk_size;
    size_t n = 0;
    while (len > 0) {
        uint64_t idx = off / cs, in = off % cs;
        uint64_t l = cs - in < len ? cs - in : len;
        uint32_t f = chunk_flags(x->map[idx]);
        if (n > 0 && ext[n - 1].flags == f) {
            ext[n - 1].len += l;
        } else {
            if (n == cap)
                break;
            ext[n].len = l;
            ext[n].flags = f;
            n++;
        }
        off += l;
        len -= l;
    }
    return (int) n;
}

static int
run_op(struct engine_req *r)
{
    struct engine *e = r->engine;
    pthread_mutex_lock(&e->mu);
    if (e->fail_n > 0 && e->fail_op == r->op) {
        e->fail_n--;
        int err = e->fail_err;
        pthread_mutex_unlock(&e->mu);
        return err;
    }
    unsigned delay =
        (e->delay_ms && r->off == e->delay_off && r->op != ENGINE_OP_FLUSH) ? e->delay_ms : 0;
    e->running++;
    if (e->running > e->cnt.max_concurrent)
        e->cnt.max_concurrent = e->running;
    pthread_mutex_unlock(&e->mu);
    if (delay)
        usleep(delay * 1000u);

    pthread_mutex_lock(&e->mu);
    struct engine_export *x = r->ex;
    int rc = 0;
    if (r->flags & ENGINE_FUA)
        e->cnt.fua++;
    switch (r->op) {
    case ENGINE_OP_READ:
        e->cnt.reads++;
        rc = range_ok(x, r->off, r->len);
        if (rc == 0)
            rc = do_read(x, r->off, r->len, r->buf);
        break;
    case ENGINE_OP_WRITE:
        e->cnt.writes++;
        rc = x->info.read_only ? -EROFS : range_ok(x, r->off, r->len);
        if (rc == 0)
            rc = do_write(x, r->off, r->len, r->buf);
        break;
    case ENGINE_OP_TRIM:
    case ENGINE_OP_ZERO:
        if (r->op == ENGINE_OP_TRIM)
            e->cnt.trims++;
        else
            e->cnt.zeros++;
        if (r->flags & ENGINE_NO_HOLE)
            e->cnt.no_hole++;
        rc = x->info.read_only ? -EROFS : range_ok(x, r->off, r->len);
        if (rc == 0)
            rc = do_write(x, r->off, r->len, NULL);
        break;
    case ENGINE_OP_FLUSH:
        e->cnt.flushes++;
        break;
    case ENGINE_OP_EXTENTS:
        e->cnt.extents++;
        rc = range_ok(x, r->off, r->len);
        if (rc == 0)
            rc = do_extents(x, r->off, r->len, r->ext, r->ext_cap);
        break;
    case ENGINE_OP_FN:
        pthread_mutex_unlock(&e->mu);
        rc = r->fn(r->arg);
        pthread_mutex_lock(&e->mu);
        break;
    }
    e->running--;
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static void
work_cb(uv_work_t *w)
{
    struct engine_req *r = (struct engine_req *) ((char *) w - offsetof(struct engine_req, work));
    r->result = run_op(r);
}

static void
after_cb(uv_work_t *w, int status)
{
    struct engine_req *r = (struct engine_req *) ((char *) w - offsetof(struct engine_req, work));
    if (status < 0)
        r->result = status;
    r->done(r);
}

int
engine_submit(uv_loop_t *loop, struct engine_req *req)
{
    return uv_queue_work(loop, &req->work, work_cb, after_cb);
}

/* A batch is one job: its writes run one after the other on one worker, like the real
 * engine's; done runs for each, in order. */
static void
batch_work_cb(uv_work_t *w)
{
    struct engine_req *r = (struct engine_req *) ((char *) w - offsetof(struct engine_req, work));
    for (; r; r = r->batch_next)
        r->result = run_op(r);
}

static void
batch_after_cb(uv_work_t *w, int status)
{
    struct engine_req *r = (struct engine_req *) ((char *) w - offsetof(struct engine_req, work));
    while (r) {
        struct engine_req *next = r->batch_next; /* done may free r */
        if (status < 0)
            r->result = status;
        r->done(r);
        r = next;
    }
}

int
engine_submit_writes(uv_loop_t *loop, struct engine_req **reqs, size_t n)
{
    if (n == 0 || n > ENGINE_BATCH_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (reqs[i]->op != ENGINE_OP_WRITE)
            return -EINVAL;
        reqs[i]->batch_next = i + 1 < n ? reqs[i + 1] : NULL;
    }
    struct engine *e = reqs[0]->ex->e;
    pthread_mutex_lock(&e->mu);
    e->cnt.batches += n > 1;
    if (n > e->cnt.max_batch)
        e->cnt.max_batch = (uint32_t) n;
    pthread_mutex_unlock(&e->mu);
    return uv_queue_work(loop, &reqs[0]->work, batch_work_cb, batch_after_cb);
}

int
engine_read_nowait(struct engine_export *ex, uint64_t off, uint32_t len, void *buf)
{
    (void) ex, (void) off, (void) len, (void) buf;
    return -EAGAIN; /* every read goes through engine_submit, with its delays */
}

size_t
engine_read_spread_size(const struct engine_export *ex, uint64_t off, uint32_t len)
{
    struct engine *e = ex->e;
    uint32_t cs = ex->info.chunk_size;
    pthread_mutex_lock(&e->mu);
    uint32_t gap = e->spread_gap;
    pthread_mutex_unlock(&e->mu);
    if (!gap || len < 2 * cs || off % cs || len % cs || range_ok(ex, off, len))
        return 0;
    return (size_t) (len / cs) * (cs + gap);
}

/* Chunk i at buf + i * (cs + gap) + gap, the gaps filled with 0xEE: a reply that sends a
 * gap, or misses a chunk, shows in the bytes the client gets. */
int
engine_read_nowait_spread(struct engine_export *ex, uint64_t off, uint32_t len, void *buf,
                          struct engine_spread *sp)
{
    struct engine *e = ex->e;
    size_t size = engine_read_spread_size(ex, off, len);
    if (size == 0)
        return -EAGAIN;
    uint32_t cs = ex->info.chunk_size, gap = (uint32_t) (size / (len / cs)) - cs;
    *sp = (struct engine_spread){.stride = cs + gap, .skip = gap};
    uint8_t *p = buf;
    pthread_mutex_lock(&e->mu);
    e->cnt.reads++;
    e->cnt.spread_reads++;
    for (uint64_t i = 0; i < len / cs; i++) {
        memset(p + i * sp->stride, 0xEE, gap);
        do_read(ex, off + i * cs, cs, p + i * sp->stride + gap);
    }
    pthread_mutex_unlock(&e->mu);
    return 0;
}
