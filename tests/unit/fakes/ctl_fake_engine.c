/* ctl_fake_engine: an in-memory stand-in for the engine and store calls the control plane
 * makes (settings, export catalogue, counters, maintenance with progress), so that ctl's
 * protocol and dispatch can be tested without the real modules. engine_submit() runs the
 * function on libuv's thread pool like the real one. State is process-global: each
 * criterion test runs in its own process. Not a model of storage: maintenance results are
 * fixed numbers the tests compare against. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fakes/ctl_fake_engine.h"
#include "store/store.h"

#define MAX_EXPORTS 32

static struct fake {
    struct engine_dedup_config cfg;
    struct engine_export_info exports[MAX_EXPORTS];
    size_t n;
    uint32_t next_id;
    int fail_dedup_set;
    int dedup_set_calls;
    unsigned maint_steps;
    int maint_sleep_ms;
    int sync_error;
} fk;

/* Opaque handles: any distinct non-NULL addresses do. */
static char engine_token, store_token;

struct engine *
fake_engine_new(void)
{
    memset(&fk, 0, sizeof(fk));
    fk.cfg.enabled = true;
    strcpy(fk.cfg.backend, "rocksdb");
    fk.cfg.hash_alg = DEDUPD_HASH_SHA256;
    fk.cfg.default_chunk_size = DEDUPD_CHUNK_DEFAULT;
    fk.cfg.limit_nr = 32768;
    fk.next_id = 1;
    fk.maint_steps = 5;
    struct engine_export_info *d = &fk.exports[fk.n++];
    d->id = fk.next_id++;
    strcpy(d->name, "default");
    d->size = 1ULL << 30;
    d->chunk_size = DEDUPD_CHUNK_DEFAULT;
    d->dedup = true;
    return (struct engine *) &engine_token;
}

void
fake_engine_set_open_handles(const char *name, uint32_t n)
{
    for (size_t i = 0; i < fk.n; i++)
        if (strcmp(fk.exports[i].name, name) == 0)
            fk.exports[i].open_handles = n;
}

void
fake_engine_fail_dedup_set(int err)
{
    fk.fail_dedup_set = err;
}

void
fake_engine_set_sync_error(int err)
{
    fk.sync_error = err;
}

int
fake_engine_dedup_set_calls(void)
{
    return fk.dedup_set_calls;
}

void
fake_engine_maint(unsigned steps, int sleep_ms)
{
    fk.maint_steps = steps;
    fk.maint_sleep_ms = sleep_ms;
}

struct store *
engine_store(struct engine *e)
{
    (void) e;
    return (struct store *) &store_token;
}

void
engine_dedup_get(struct engine *e, struct engine_dedup_config *out)
{
    (void) e;
    *out = fk.cfg;
}

int
engine_dedup_set(struct engine *e, const struct engine_dedup_config *cfg)
{
    (void) e;
    fk.dedup_set_calls++;
    if (fk.fail_dedup_set)
        return fk.fail_dedup_set;
    if (strcmp(cfg->backend, "memory") && strcmp(cfg->backend, "rocksdb"))
        return -EINVAL;
    fk.cfg = *cfg;
    return 0;
}

void
engine_index_usage(struct engine *e, struct engine_index_usage *out)
{
    (void) e;
    memset(out, 0, sizeof(*out));
    out->entries = 10;
    out->bytes = strcmp(fk.cfg.backend, "memory") == 0 ? 800 : 600;
    out->limit_nr = fk.cfg.limit_nr;
    out->limit_mem = fk.cfg.limit_mem;
    out->mem_entry_bytes = 44;
    out->mem_default_limit_nr = 1u << 20;
}

static struct engine_export_info *
find(const char *name)
{
    if (!*name)
        name = "default";
    for (size_t i = 0; i < fk.n; i++)
        if (strcmp(fk.exports[i].name, name) == 0)
            return &fk.exports[i];
    return NULL;
}

int
engine_export_create(struct engine *e, const char *name, uint64_t size, uint32_t chunk_size,
                     unsigned flags, struct engine_export_info *out)
{
    (void) e;
    if (find(name))
        return -EEXIST;
    if (fk.n == MAX_EXPORTS || strlen(name) > DEDUPD_EXPORT_NAME_MAX)
        return -ENOSPC;
    struct engine_export_info *x = &fk.exports[fk.n++];
    memset(x, 0, sizeof(*x));
    x->id = fk.next_id++;
    strcpy(x->name, name);
    x->size = size;
    x->chunk_size = chunk_size ? chunk_size : fk.cfg.default_chunk_size;
    x->dedup = !(flags & ENGINE_EXPORT_NO_DEDUP);
    x->read_only = flags & ENGINE_EXPORT_READ_ONLY;
    *out = *x;
    return 0;
}

int
engine_export_clone(struct engine *e, const char *src, const char *name,
                    struct engine_export_info *out)
{
    struct engine_export_info *s = find(src);
    if (!s)
        return -ENOENT;
    int rc = engine_export_create(e, name, s->size, s->chunk_size,
                                  s->dedup ? 0 : ENGINE_EXPORT_NO_DEDUP, out);
    if (rc == 0) {
        fk.exports[fk.n - 1].parent_id = s->id;
        out->parent_id = s->id;
    }
    return rc;
}

int
engine_export_delete(struct engine *e, const char *name)
{
    (void) e;
    struct engine_export_info *x = find(name);
    if (!x)
        return -ENOENT;
    if (x->open_handles)
        return -EBUSY;
    size_t i = (size_t) (x - fk.exports);
    memmove(&fk.exports[i], &fk.exports[i + 1], (fk.n - i - 1) * sizeof(*x));
    fk.n--;
    return 0;
}

int
engine_export_lookup(struct engine *e, const char *name, struct engine_export_info *out)
{
    (void) e;
    struct engine_export_info *x = find(name);
    if (!x)
        return -ENOENT;
    *out = *x;
    return 0;
}

int
engine_export_list(struct engine *e, struct engine_export_info **out, size_t *n)
{
    (void) e;
    *out = malloc((fk.n ? fk.n : 1) * sizeof(**out));
    if (!*out)
        return -ENOMEM;
    memcpy(*out, fk.exports, fk.n * sizeof(**out));
    *n = fk.n;
    return 0;
}

int
engine_export_set_dedup(struct engine *e, const char *name, bool dedup)
{
    (void) e;
    struct engine_export_info *x = find(name);
    if (!x)
        return -ENOENT;
    x->dedup = dedup;
    return 0;
}

const char *
engine_default_export(struct engine *e)
{
    (void) e;
    return "default";
}

int
engine_stats(struct engine *e, const char *export_name, struct engine_stats *out)
{
    (void) e;
    memset(out, 0, sizeof(*out));
    if (export_name && !find(export_name))
        return -ENOENT;
    /* Fixed, distinct numbers so tests can see each field arrive where it belongs. */
    out->logical_bytes = export_name ? 8192 : 12288;
    out->zero_bytes = 4096;
    out->unique_bytes = 4096;
    out->disk_bytes = export_name ? 0 : 1 << 20;
    out->dedup_hits = 2;
    out->dedup_misses = 1;
    out->verify_mismatches = 0;
    return 0;
}

static void
work(uv_work_t *w)
{
    struct engine_req *req = w->data;
    req->result = req->op == ENGINE_OP_FN ? req->fn(req->arg) : -EOPNOTSUPP;
}

static void
after(uv_work_t *w, int status)
{
    struct engine_req *req = w->data;
    if (status < 0)
        req->result = status;
    req->done(req);
}

int
engine_submit(uv_loop_t *loop, struct engine_req *req)
{
    req->work.data = req;
    return uv_queue_work(loop, &req->work, work, after);
}

int
store_stats(struct store *st, struct store_stats *out)
{
    (void) st;
    memset(out, 0, sizeof(*out));
    out->chunks = 3;
    out->chunks_shared = 1;
    out->raw_bytes = 3 * 4096;
    out->stored_bytes = 3 * 4096;
    out->disk_bytes = 1 << 20;
    out->dead_bytes = 4096;
    out->segments = 1;
    out->sync_error = fk.sync_error;
    return 0;
}

static int
steps(store_progress_fn progress, void *arg)
{
    for (unsigned i = 1; i <= fk.maint_steps; i++) {
        if (fk.maint_sleep_ms)
            uv_sleep((unsigned) fk.maint_sleep_ms);
        if (progress) {
            struct store_progress p = {i, fk.maint_steps};
            if (progress(arg, &p))
                return -ECANCELED;
        }
    }
    return 0;
}

int
store_compact(struct store *st, bool force, store_progress_fn progress, void *arg,
              struct store_compact_result *out)
{
    (void) st;
    int rc = steps(progress, arg);
    if (rc < 0)
        return rc;
    out->segments_compacted = force ? 2 : 1;
    out->bytes_moved = 8192;
    out->bytes_reclaimed = 4096;
    return 0;
}

int
store_check(struct store *st, bool repair, store_progress_fn progress, store_finding_fn finding,
            void *arg, struct store_check_result *out)
{
    (void) st;
    int rc = steps(progress, arg);
    if (rc < 0)
        return rc;
    out->map_entries = 4;
    out->chunks = 3;
    out->problems = 1;
    out->repaired = repair ? 1 : 0;
    finding(arg, "chunk 7: refcount 2, map entries 1");
    return 0;
}

int
store_scrub(struct store *st, store_progress_fn progress, store_finding_fn finding, void *arg,
            struct store_scrub_result *out)
{
    (void) st;
    int rc = steps(progress, arg);
    if (rc < 0)
        return rc;
    out->chunks = 3;
    out->bytes = 3 * 4096;
    /* More findings than a Response keeps, to test the cap. */
    for (int i = 0; i < 105; i++)
        finding(arg, "seg 1 off 0: crc mismatch");
    out->crc_errors = 105;
    return 0;
}
