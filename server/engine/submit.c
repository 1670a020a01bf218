/* submit.c: engine_submit, the one door from the loop thread to the blocking engine calls:
 * uv_queue_work runs the operation on libuv's worker pool and calls req->done back on the
 * loop thread. The loop thread never blocks on disk or hashing.
 * Knows nothing of what the caller does with the result. */
#include <errno.h>

#include "engine/internal.h"

static void
run_op(uv_work_t *w)
{
    struct engine_req *req = w->data;
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
    if (is_change(req))
        atomic_fetch_sub_explicit(&req->ex->xs->changes_queued, 1, memory_order_release);
    if (status == UV_ECANCELED)
        req->result = -ECANCELED;
    req->done(req);
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
    if (is_change(req))
        atomic_fetch_add_explicit(&req->ex->xs->changes_queued, 1, memory_order_acq_rel);
    int rc = uv_queue_work(loop, &req->work, run_op, after_op);
    if (rc < 0 && is_change(req))
        atomic_fetch_sub_explicit(&req->ex->xs->changes_queued, 1, memory_order_release);
    return rc < 0 ? rc : 0; /* libuv errors are -errno on Unix */
}
