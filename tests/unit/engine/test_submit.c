/* Tests engine_submit: operations run on libuv's worker pool and complete on the loop
 * thread exactly once; bad requests are refused without a callback. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "fixture.h"

#define CS 4096

struct ctx {
    int done;
    pthread_t loop_thread;
    bool on_loop;
};

static void
on_done(struct engine_req *req)
{
    struct ctx *c = req->user;
    c->done++;
    c->on_loop = pthread_equal(pthread_self(), c->loop_thread);
}

static int
fn_double(void *arg)
{
    int *v = arg;
    *v *= 2;
    return 7;
}

static int
run(uv_loop_t *loop, struct engine_req *req, struct ctx *c)
{
    c->done = 0;
    req->done = on_done;
    req->user = c;
    cr_assert_eq(engine_submit(loop, req), 0);
    cr_assert_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(c->done, 1);
    cr_assert(c->on_loop);
    return req->result;
}

Test(submit, operations_complete_once_on_the_loop_thread)
{
    struct fx f;
    fx_open(&f);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctx c = {.loop_thread = pthread_self()};
    uint8_t data[2 * CS], got[2 * CS];
    fx_fill(data, sizeof(data), 1);

    struct engine_req w = {.op = ENGINE_OP_WRITE,
                           .ex = f.ex,
                           .off = CS,
                           .len = sizeof(data),
                           .buf = data,
                           .flags = ENGINE_FUA};
    cr_assert_eq(run(&loop, &w, &c), 0);
    struct engine_req r = {
        .op = ENGINE_OP_READ, .ex = f.ex, .off = CS, .len = sizeof(got), .buf = got};
    cr_assert_eq(run(&loop, &r, &c), 0);
    cr_assert(!memcmp(data, got, sizeof(got)));
    struct engine_req fl = {.op = ENGINE_OP_FLUSH, .engine = f.e};
    cr_assert_eq(run(&loop, &fl, &c), 0);
    struct engine_extent ext[4];
    struct engine_req x = {
        .op = ENGINE_OP_EXTENTS, .ex = f.ex, .off = 0, .len = 4 * CS, .ext = ext, .ext_cap = 4};
    cr_assert_eq(run(&loop, &x, &c), 3);
    cr_assert_eq(ext[1].len, 2 * CS);
    struct engine_req t = {.op = ENGINE_OP_TRIM, .ex = f.ex, .off = CS, .len = 2 * CS};
    cr_assert_eq(run(&loop, &t, &c), 0);
    struct engine_req z = {.op = ENGINE_OP_ZERO, .ex = f.ex, .off = 0, .len = FX_SIZE + 1};
    cr_assert_eq(run(&loop, &z, &c), -EINVAL);
    int v = 21;
    struct engine_req fn = {.op = ENGINE_OP_FN, .fn = fn_double, .arg = &v};
    cr_assert_eq(run(&loop, &fn, &c), 7);
    cr_assert_eq(v, 42);

    struct engine_req bad = {.op = ENGINE_OP_READ, .done = on_done, .user = &c};
    c.done = 0;
    cr_assert_eq(engine_submit(&loop, &bad), -EINVAL);
    struct engine_req nodone = {.op = ENGINE_OP_FLUSH, .engine = f.e};
    cr_assert_eq(engine_submit(&loop, &nodone), -EINVAL);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(c.done, 0, "a refused request never calls done");
    cr_assert_eq(uv_loop_close(&loop), 0);
    fx_close(&f);
}

/* engine_read_nowait: answers small reads of cached data with the right bytes, and declines
 * (-EAGAIN, nothing done) what it must leave to a worker. */
Test(submit, read_nowait_answers_cached_reads_and_declines_the_rest)
{
    struct fx f;
    fx_open(&f);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctx c = {.loop_thread = pthread_self()};
    uint8_t data[4 * CS], got[4 * CS];
    fx_fill(data, sizeof(data), 3);

    /* Never written: zeros, from the map alone. */
    memset(got, 0xAA, sizeof(got));
    cr_assert_eq(engine_read_nowait(f.ex, 8 * CS, 2 * CS, got), 0);
    for (size_t i = 0; i < 2 * CS; i++)
        cr_assert_eq(got[i], 0, "byte %zu of a hole", i);

    struct engine_req w = {
        .op = ENGINE_OP_WRITE, .ex = f.ex, .off = 0, .len = sizeof(data), .buf = data};
    cr_assert_eq(run(&loop, &w, &c), 0);
    /* Just written, so in the page cache: whole chunks and a range across chunk edges. */
    memset(got, 0, sizeof(got));
    cr_assert_eq(engine_read_nowait(f.ex, 0, sizeof(got), got), 0);
    cr_assert(!memcmp(got, data, sizeof(data)));
    memset(got, 0, sizeof(got));
    cr_assert_eq(engine_read_nowait(f.ex, CS - 100, CS + 200, got), 0);
    cr_assert(!memcmp(got, data + CS - 100, CS + 200));
    /* Many chunks: a partial first and last chunk, whole ones, and holes between (chunks 4
     * and 5), as engine_read answers it. */
    struct engine_req w6 = {
        .op = ENGINE_OP_WRITE, .ex = f.ex, .off = 6 * CS, .len = CS, .buf = data + CS};
    cr_assert_eq(run(&loop, &w6, &c), 0);
    static uint8_t many[7 * CS], want[7 * CS];
    memset(many, 0xAA, sizeof(many));
    cr_assert_eq(engine_read_nowait(f.ex, CS / 2, 6 * CS, many), 0);
    cr_assert_eq(engine_read(f.ex, CS / 2, 6 * CS, want), 0);
    cr_assert(!memcmp(many, want, 6 * CS));
    cr_assert(!memcmp(many, data + CS / 2, 3 * CS + CS / 2), "chunks 0-3");
    for (size_t i = 3 * CS + CS / 2; i < 5 * CS + CS / 2; i++)
        cr_assert_eq(many[i], 0, "byte %zu of the hole", i);

    /* Declined: out of range, empty, larger than the limit. */
    cr_assert_eq(engine_read_nowait(f.ex, FX_SIZE - CS, 2 * CS, got), -EAGAIN);
    cr_assert_eq(engine_read_nowait(f.ex, 0, 0, got), -EAGAIN);
    static uint8_t big[ENGINE_NOWAIT_MAX_BYTES + CS];
    cr_assert_eq(engine_read_nowait(f.ex, 0, sizeof(big), big), -EAGAIN);

    /* A change submitted but not yet run: a read must not overtake it, even elsewhere. */
    uint8_t data2[CS];
    fx_fill(data2, sizeof(data2), 4);
    struct engine_req w2 = {.op = ENGINE_OP_WRITE,
                            .ex = f.ex,
                            .off = 0,
                            .len = sizeof(data2),
                            .buf = data2,
                            .done = on_done,
                            .user = &c};
    c.done = 0;
    cr_assert_eq(engine_submit(&loop, &w2), 0);
    cr_assert_eq(engine_read_nowait(f.ex, 0, CS, got), -EAGAIN);
    cr_assert_eq(engine_read_nowait(f.ex, 3 * CS, CS, got), -EAGAIN);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(c.done, 1);
    cr_assert_eq(w2.result, 0);
    /* Done: the read is answered again, with the new bytes. */
    cr_assert_eq(engine_read_nowait(f.ex, 0, CS, got), 0);
    cr_assert(!memcmp(got, data2, CS));

    cr_assert_eq(uv_loop_close(&loop), 0);
    fx_close(&f);
}

/* engine_read_nowait_spread: the same bytes as engine_read, chunk i at i * stride + skip
 * with holes as zeros; the bytes between chunks are not the export's business. Reads it
 * does not take have size 0 and are declined. */
Test(submit, read_nowait_spread_puts_each_chunk_where_it_says)
{
    struct fx f;
    fx_open(&f);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct ctx c = {.loop_thread = pthread_self()};
    static uint8_t data[6 * CS], want[8 * CS], spread[8 * (CS + 256)];
    fx_fill(data, sizeof(data), 5);
    struct engine_req w = {
        .op = ENGINE_OP_WRITE, .ex = f.ex, .off = CS, .len = sizeof(data), .buf = data};
    cr_assert_eq(run(&loop, &w, &c), 0);
    struct engine_req t = {.op = ENGINE_OP_TRIM, .ex = f.ex, .off = 3 * CS, .len = CS};
    cr_assert_eq(run(&loop, &t, &c), 0);

    /* Chunks 0-7: a hole never written, data, a trimmed hole, data, a hole past the end of
     * what was written. */
    size_t size = engine_read_spread_size(f.ex, 0, 8 * CS);
    cr_assert_geq(size, 8 * CS);
    cr_assert_leq(size, sizeof(spread));
    memset(spread, 0xAA, sizeof(spread));
    struct engine_spread sp;
    cr_assert_eq(engine_read_nowait_spread(f.ex, 0, 8 * CS, spread, &sp), 0);
    cr_assert_eq(sp.stride - sp.skip, CS);
    cr_assert_eq((size_t) sp.stride * 8, size);
    cr_assert_eq(engine_read(f.ex, 0, 8 * CS, want), 0);
    for (size_t i = 0; i < 8; i++)
        cr_assert(!memcmp(spread + i * sp.stride + sp.skip, want + i * CS, CS), "chunk %zu", i);
    cr_assert(!memcmp(want + CS, data, 2 * CS));

    /* Not taken: one chunk, not chunk-aligned, past the end, too large. */
    cr_assert_eq(engine_read_spread_size(f.ex, 0, CS), 0);
    cr_assert_eq(engine_read_spread_size(f.ex, CS / 2, 2 * CS), 0);
    cr_assert_eq(engine_read_spread_size(f.ex, 0, 2 * CS + 1), 0);
    cr_assert_eq(engine_read_spread_size(f.ex, FX_SIZE - CS, 2 * CS), 0);
    cr_assert_eq(engine_read_spread_size(f.ex, 0, ENGINE_NOWAIT_MAX_BYTES + CS), 0);
    cr_assert_eq(engine_read_nowait_spread(f.ex, CS / 2, 2 * CS, spread, &sp), -EAGAIN);
    cr_assert_eq(engine_read_nowait_spread(f.ex, 0, CS, spread, &sp), -EAGAIN);

    cr_assert_eq(uv_loop_close(&loop), 0);
    fx_close(&f);
}

struct order {
    int n;
    struct engine_req *seen[8];
    pthread_t loop_thread;
    bool all_on_loop;
};

static void
on_done_ordered(struct engine_req *req)
{
    struct order *o = req->user;
    o->all_on_loop &= pthread_equal(pthread_self(), o->loop_thread) != 0;
    if (o->n < 8)
        o->seen[o->n] = req;
    o->n++;
}

/* engine_submit_writes: one job for several writes; each done runs once, on the loop
 * thread, in batch order, with its own result; a write queued in a batch holds off the
 * loop's own reads like any other; bad calls are refused with nothing run. */
Test(submit, writes_submitted_together_complete_each_once_in_order)
{
    struct fx f;
    fx_open(&f);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct order o = {.loop_thread = pthread_self(), .all_on_loop = true};
    static uint8_t data[3][CS], got[CS];
    struct engine_req w[4];
    struct engine_req *p[4];
    for (int i = 0; i < 4; i++) {
        if (i < 3)
            fx_fill(data[i], CS, 20 + (uint32_t) i);
        w[i] = (struct engine_req){.op = ENGINE_OP_WRITE,
                                   .ex = f.ex,
                                   .off = (uint64_t) i * CS,
                                   .len = CS,
                                   .buf = data[i < 3 ? i : 0],
                                   .done = on_done_ordered,
                                   .user = &o};
        p[i] = &w[i];
    }
    w[3].off = FX_SIZE; /* past the end: its own error */

    struct engine_req rd = {.op = ENGINE_OP_READ, .ex = f.ex, .len = CS, .done = on_done};
    struct engine_req *bad[] = {&w[0], &rd};
    cr_assert_eq(engine_submit_writes(&loop, bad, 2), -EINVAL, "only writes");
    cr_assert_eq(engine_submit_writes(&loop, p, 0), -EINVAL);
    cr_assert_eq(engine_submit_writes(&loop, NULL, 1), -EINVAL);
    struct engine_req *many[ENGINE_BATCH_MAX + 1];
    for (size_t i = 0; i <= ENGINE_BATCH_MAX; i++)
        many[i] = &w[0];
    cr_assert_eq(engine_submit_writes(&loop, many, ENGINE_BATCH_MAX + 1), -EINVAL);
    cr_assert_eq(uv_run(&loop, UV_RUN_NOWAIT), 0, "nothing was queued");
    cr_assert_eq(o.n, 0);

    cr_assert_eq(engine_submit_writes(&loop, p, 4), 0);
    cr_assert_eq(engine_read_nowait(f.ex, 8 * CS, CS, got), -EAGAIN,
                 "a read never overtakes a queued batch");
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(o.n, 4);
    cr_assert(o.all_on_loop);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(o.seen[i], &w[i], "done %d out of order", i);
    cr_assert_eq(w[0].result, 0);
    cr_assert_eq(w[1].result, 0);
    cr_assert_eq(w[2].result, 0);
    cr_assert_eq(w[3].result, -EINVAL);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(engine_read(f.ex, (uint64_t) i * CS, CS, got), 0);
        cr_assert(!memcmp(got, data[i], CS), "write %d reads back wrong", i);
    }
    cr_assert_eq(uv_loop_close(&loop), 0);
    fx_close(&f);
}
