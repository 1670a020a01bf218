/* submit.c: engine_submit, the one door from a loop thread to the blocking engine calls:
 * uv_queue_work runs the operation on libuv's worker pool (shared by every loop) and calls
 * req->done back on the thread of the loop it came from. A loop thread never blocks on
 * disk or hashing.
 * Knows nothing of what the caller does with the result. */
#include <errno.h>

#include "engine/internal.h"
#include "util/threadname.h"

static void
run_op(uv_work_t *w)
{
    /* libuv's pool threads are unnamed; they run little else here than these jobs. */
    static _Thread_local bool named;
    if (!named) {
        threadname_set("worker");
        named = true;
    }
    struct engine_req *req = w->data;
    if (req->batch_next) { /* engine_submit_writes */
        struct engine_req *reqs[ENGINE_BATCH_MAX];
        size_t n = 0;
        for (struct engine_req *q = req; q && n < ENGINE_BATCH_MAX; q = q->batch_next)
            reqs[n++] = q;
        engine__write_batch(reqs, n);
        return;
    }
    switch (req->op) {
    case ENGINE_OP_READ:
        req->result = req->len > UINT32_MAX
                          ? -EINVAL
                          : engine_read(req->ex, req->off, (uint32_t) req->len, req->buf);
        break;
    case ENGINE_OP_WRITE:
        req->result = req->len > UINT32_MAX ? -EINVAL
                                            : engine_write(req->ex, req->off, (uint32_t) req->len,
                                                           req->buf, req->flags);
        break;
    case ENGINE_OP_TRIM:
        req->result = engine_trim(req->ex, req->off, req->len, req->flags);
        break;
    case ENGINE_OP_ZERO:
        req->result = engine_zero(req->ex, req->off, req->len, req->flags);
        break;
    case ENGINE_OP_FLUSH:
        req->result = engine_flush(req->engine ? req->engine : req->ex->e);
        break;
    case ENGINE_OP_EXTENTS:
        req->result =
            engine_extents_opt(req->ex, req->off, req->len, req->ext, req->ext_cap, req->flags);
        break;
    case ENGINE_OP_FN:
        req->result = req->fn(req->arg);
        break;
    default:
        req->result = -EINVAL;
    }
}

static bool
is_change(const struct engine_req *req)
{
    return req->op == ENGINE_OP_WRITE || req->op == ENGINE_OP_TRIM || req->op == ENGINE_OP_ZERO;
}

static void
after_op(uv_work_t *w, int status)
{
    struct engine_req *req = w->data;
    while (req) {
        struct engine_req *next = req->batch_next; /* done may free req */
        if (is_change(req))
            atomic_fetch_sub_explicit(&req->ex->xs->changes_queued, 1, memory_order_release);
        if (status == UV_ECANCELED)
            req->result = -ECANCELED;
        req->done(req);
        req = next;
    }
}

int
engine_submit(uv_loop_t *loop, struct engine_req *req)
{
    if (!loop || !req || !req->done)
        return -EINVAL;
    switch (req->op) {
    case ENGINE_OP_READ:
    case ENGINE_OP_WRITE:
    case ENGINE_OP_TRIM:
    case ENGINE_OP_ZERO:
    case ENGINE_OP_EXTENTS:
        if (!req->ex)
            return -EINVAL;
        break;
    case ENGINE_OP_FLUSH:
        if (!req->engine && !req->ex)
            return -EINVAL;
        break;
    case ENGINE_OP_FN:
        if (!req->fn)
            return -EINVAL;
        break;
    default:
        return -EINVAL;
    }
    req->result = 0;
    req->work.data = req;
    req->batch_next = NULL;
    if (is_change(req))
        atomic_fetch_add_explicit(&req->ex->xs->changes_queued, 1, memory_order_acq_rel);
    int rc = uv_queue_work(loop, &req->work, run_op, after_op);
    if (rc < 0 && is_change(req))
        atomic_fetch_sub_explicit(&req->ex->xs->changes_queued, 1, memory_order_release);
    return rc < 0 ? rc : 0; /* libuv errors are -errno on Unix */
}

int
engine_submit_writes(uv_loop_t *loop, struct engine_req **reqs, size_t n)
{
    if (!loop || !reqs || n == 0 || n > ENGINE_BATCH_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const struct engine_req *q = reqs[i];
        if (!q || q->op != ENGINE_OP_WRITE || !q->ex || !q->done || q->len > UINT32_MAX)
            return -EINVAL;
    }
    if (n == 1)
        return engine_submit(loop, reqs[0]);
    for (size_t i = 0; i < n; i++) {
        reqs[i]->result = 0;
        reqs[i]->batch_next = i + 1 < n ? reqs[i + 1] : NULL;
        atomic_fetch_add_explicit(&reqs[i]->ex->xs->changes_queued, 1, memory_order_acq_rel);
    }
    reqs[0]->work.data = reqs[0];
    int rc = uv_queue_work(loop, &reqs[0]->work, run_op, after_op);
    if (rc < 0)
        for (size_t i = 0; i < n; i++)
            atomic_fetch_sub_explicit(&reqs[i]->ex->xs->changes_queued, 1, memory_order_release);
    return rc < 0 ? rc : 0;
}
