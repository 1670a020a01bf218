/* Tests group commit: server/engine/commitq.c (who leads, what a group holds, each
 * request's own result) and, through the engine, that requests committed in one group
 * share the new chunks an earlier request of the group stored. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/internal.h"
#include "fixture.h"
#include "store/io.h"
#include "store/store.h"

#define CS 4096

/* Polls cond (reading q under its mutex) for up to 10 s. */
static bool
wait_for(struct engine_commitq *q, bool (*cond)(struct engine_commitq *q, size_t arg), size_t arg)
{
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&q->mu);
        bool ok = cond(q, arg);
        pthread_mutex_unlock(&q->mu);
        if (ok)
            return true;
        usleep(1000);
    }
    return false;
}

static bool
queued_is(struct engine_commitq *q, size_t n)
{
    size_t k = 0;
    for (struct engine_commitq_item *it = q->head; it; it = it->next)
        k++;
    return q->leading && k == n;
}

/* ---- the queue on its own ---- */

struct job {
    struct engine_commitq_item it;
    int id;
    struct engine_commitq *q;
    int rc;
};

struct recorder {
    pthread_mutex_t mu;
    atomic_int gate; /* the first group waits until it is set */
    int groups;
    int sizes[64];
    int ids[64][ENGINE_GROUP_MAX_ITEMS];
};

static void
record_group(void *arg, struct engine_commitq_item **items, size_t n)
{
    struct recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    int g = r->groups++;
    r->sizes[g] = (int) n;
    for (size_t i = 0; i < n; i++) {
        struct job *j = (struct job *) items[i];
        r->ids[g][i] = j->id;
        items[i]->rc = -j->id; /* each item's own result */
    }
    pthread_mutex_unlock(&r->mu);
    while (g == 0 && !atomic_load(&r->gate))
        usleep(1000);
}

static void *
job_main(void *arg)
{
    struct job *j = arg;
    j->rc = engine__commitq_run(j->q, &j->it);
    return NULL;
}

/* Starts job k and waits until it is queued behind the running first group. */
static void
start_queued(struct job *jobs, pthread_t *t, int k, uint32_t weight, size_t queued_after)
{
    jobs[k].it.weight = weight;
    cr_assert_eq(pthread_create(&t[k], NULL, job_main, &jobs[k]), 0);
    cr_assert(wait_for(jobs[k].q, queued_is, queued_after), "job %d never queued", k);
}

Test(commitq, a_lone_request_runs_at_once_alone)
{
    struct recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER, .gate = 1};
    struct engine_commitq q;
    engine__commitq_init(&q, record_group, &r);
    struct job j = {.id = 7, .q = &q, .it.weight = 1};
    cr_assert_eq(engine__commitq_run(&q, &j.it), -7);
    cr_assert_eq(r.groups, 1);
    cr_assert_eq(r.sizes[0], 1);
    cr_assert(!q.leading && !q.head && !q.tail);
    engine__commitq_destroy(&q);
}

Test(commitq, requests_queued_meanwhile_commit_together_in_arrival_order)
{
    struct recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct engine_commitq q;
    engine__commitq_init(&q, record_group, &r);
    enum { N = 20 }; /* more than one group may hold */
    struct job jobs[N];
    pthread_t t[N];
    for (int k = 0; k < N; k++)
        jobs[k] = (struct job){.id = k + 1, .q = &q};
    start_queued(jobs, t, 0, 1, 0); /* leads, and holds its group open */
    for (int k = 1; k < N; k++)
        start_queued(jobs, t, k, 1, (size_t) k);
    atomic_store(&r.gate, 1);
    for (int k = 0; k < N; k++) {
        pthread_join(t[k], NULL);
        cr_assert_eq(jobs[k].rc, -(k + 1), "job %d got another's result", k);
    }
    /* {1}, then the 19 that queued meanwhile: 16 (the most one group takes), then 3. */
    cr_assert_eq(r.groups, 3);
    cr_assert_eq(r.sizes[0], 1);
    cr_assert_eq(r.sizes[1], ENGINE_GROUP_MAX_ITEMS);
    cr_assert_eq(r.sizes[2], N - 1 - ENGINE_GROUP_MAX_ITEMS);
    int next = 1;
    for (int g = 0; g < r.groups; g++)
        for (int i = 0; i < r.sizes[g]; i++)
            cr_assert_eq(r.ids[g][i], next++, "arrival order kept");
    engine__commitq_destroy(&q);
}

Test(commitq, a_group_stops_at_its_chunk_budget)
{
    struct recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct engine_commitq q;
    engine__commitq_init(&q, record_group, &r);
    struct job jobs[4];
    pthread_t t[4];
    for (int k = 0; k < 4; k++)
        jobs[k] = (struct job){.id = k + 1, .q = &q};
    start_queued(jobs, t, 0, 1, 0);
    /* 600 + 400 fit one budget; the next 600 does not; a request over the budget alone
     * still runs (by itself). */
    start_queued(jobs, t, 1, 600, 1);
    start_queued(jobs, t, 2, 400, 2);
    start_queued(jobs, t, 3, 2 * ENGINE_GROUP_MAX_WEIGHT, 3);
    atomic_store(&r.gate, 1);
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        cr_assert_eq(jobs[k].rc, -(k + 1));
    }
    cr_assert_eq(r.groups, 3);
    cr_assert_eq(r.sizes[1], 2);
    cr_assert_eq(r.sizes[2], 1);
    engine__commitq_destroy(&q);
}

/* ---- through the engine ---- */

struct writer {
    struct engine_export *ex;
    uint64_t off;
    uint32_t seed; /* 0: zeros */
    int rc;
};

static void *
writer_main(void *arg)
{
    struct writer *w = arg;
    uint8_t buf[CS];
    if (w->seed)
        fx_fill(buf, CS, w->seed);
    else
        memset(buf, 0, CS);
    w->rc = engine_write(w->ex, w->off, CS, buf, 0);
    return NULL;
}

/* Holds the commit lock while a first write (of zeros: it stores nothing) leads and waits
 * for it, queues one write per seed behind it in order, then lets them go: the queued
 * writes commit as one group. Each write must return want_rc[k] (NULL: all 0); a failed
 * one must read back as zeros. Returns the engine's stats afterwards. */
/* Writes among the first k that fail before they queue. */
static size_t
queued_not(const int *want_rc, int k)
{
    size_t n = 0;
    for (int i = 0; want_rc && i < k; i++)
        n += want_rc[i] != 0;
    return n;
}

static struct engine_stats
group_of_rc(struct fx *f, const uint32_t *seeds, int n, const int *want_rc)
{
    struct engine_commitq *q = &((struct engine *) f->e)->commitq;
    struct store_txn *hold;
    cr_assert_eq(store_txn_begin(engine_store(f->e), &hold), 0);
    struct writer w[8];
    pthread_t t[8];
    cr_assert_leq(n + 1, 8);
    w[0] = (struct writer){.ex = f->ex, .off = 0, .seed = 0};
    cr_assert_eq(pthread_create(&t[0], NULL, writer_main, &w[0]), 0);
    cr_assert(wait_for(q, queued_is, 0), "the first write never led");
    for (int k = 1; k <= n; k++) {
        w[k] = (struct writer){.ex = f->ex, .off = (uint64_t) k * CS, .seed = seeds[k - 1]};
        cr_assert_eq(pthread_create(&t[k], NULL, writer_main, &w[k]), 0);
        if (want_rc && want_rc[k - 1]) { /* fails before it queues */
            pthread_join(t[k], NULL);
            continue;
        }
        cr_assert(wait_for(q, queued_is, (size_t) k - queued_not(want_rc, k)),
                  "write %d never queued", k);
    }
    store_txn_abort(hold);
    for (int k = 0; k <= n; k++) {
        if (k == 0 || !want_rc || !want_rc[k - 1])
            pthread_join(t[k], NULL);
        cr_assert_eq(w[k].rc, k && want_rc ? want_rc[k - 1] : 0, "write %d", k);
    }
    uint8_t want[CS], got[CS];
    for (int k = 1; k <= n; k++) {
        if (want_rc && want_rc[k - 1])
            memset(want, 0, CS);
        else
            fx_fill(want, CS, seeds[k - 1]);
        cr_assert_eq(engine_read(f->ex, (uint64_t) k * CS, CS, got), 0);
        cr_assert(!memcmp(want, got, CS), "write %d reads back wrong", k);
    }
    struct engine_stats s;
    cr_assert_eq(engine_stats(f->e, NULL, &s), 0);
    return s;
}

static struct engine_stats
group_of(struct fx *f, const uint32_t *seeds, int n)
{
    return group_of_rc(f, seeds, n, NULL);
}

/* Every byte on disk is a live record or counted dead; returns the dead bytes. */
static uint64_t
dead_bytes_balanced(struct fx *f)
{
    struct store_stats ss;
    cr_assert_eq(store_stats(engine_store(f->e), &ss), 0);
    cr_assert_eq(ss.disk_bytes - ss.dead_bytes, ss.chunks * (CS + 64ull));
    return ss.dead_bytes;
}

Test(group, a_request_shares_a_chunk_an_earlier_request_of_its_group_stored)
{
    struct fx f;
    fx_open(&f);
    static const uint32_t seeds[] = {11, 12, 11, 11};
    struct engine_stats s = group_of(&f, seeds, 4);
    cr_assert_eq(fx_chunks(&f), 2, "seed 11 stored once, though the index had not seen it");
    cr_assert_eq(s.dedup_misses, 2);
    cr_assert_eq(s.dedup_hits, 2);
    /* Both later 11s looked like misses before the group and were appended early; their
     * records are dead bytes now. */
    cr_assert_eq(dead_bytes_balanced(&f), 2 * (CS + 64ull));
    fx_close(&f); /* refcounts = map entries, hash entries name live chunks */
}

Test(group, verify_keeps_colliding_chunks_of_one_group_apart)
{
    struct fx f;
    fx_open(&f);
    struct engine_dedup_config c;
    engine_dedup_get(f.e, &c);
    c.verify = true;
    cr_assert_eq(engine_dedup_set(f.e, &c), 0);
    engine_test_set_hash_fn(f.e, fx_colliding_hash);
    /* 21 is staged first; 22 collides with it (kept apart, not indexed); 21 again shares. */
    static const uint32_t seeds[] = {21, 22, 21};
    struct engine_stats s = group_of(&f, seeds, 3);
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(s.dedup_hits, 1);
    cr_assert_eq(s.dedup_misses, 2);
    cr_assert_eq(s.verify_mismatches, 1);
    engine_test_set_hash_fn(f.e, NULL);
    fx_close(&f);
}

/* The real file ops, but the next fail_left segment writes fail with EIO. */
static atomic_int fail_left;
static struct store_io_ops failing_ops;

static ssize_t
pwritev_failing(int fd, const struct iovec *iov, int iovcnt, uint64_t off)
{
    if (atomic_load(&fail_left) > 0 && atomic_fetch_sub(&fail_left, 1) > 0)
        return -EIO;
    return store_io_real()->pwritev(fd, iov, iovcnt, off);
}

static void
use_failing_io(void)
{
    failing_ops = *store_io_real();
    failing_ops.pwritev = pwritev_failing;
    store_io_set(&failing_ops);
}

Test(group, a_failed_early_append_fails_only_its_request)
{
    use_failing_io();
    struct fx f;
    fx_open(&f);
    /* The first request's records are the first segment write after the zeros. */
    atomic_store(&fail_left, 1);
    static const uint32_t seeds[] = {31, 32, 33};
    static const int want_rc[] = {-EIO, 0, 0};
    struct engine_stats s = group_of_rc(&f, seeds, 3, want_rc);
    cr_assert_eq(atomic_load(&fail_left), 0);
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(s.dedup_misses, 2);
    cr_assert_eq(dead_bytes_balanced(&f), 0, "the failed write left nothing behind");
    fx_close(&f);
    store_io_set(NULL);
}

Test(group, a_failed_group_is_retried_one_request_at_a_time)
{
    struct fx f;
    fx_open(&f);
    /* The group's commit (after the leading write's) fails; alone, each request commits
     * its early records again. */
    store_test_fail_commits(engine_store(f.e), -EIO, 1, 1);
    static const uint32_t seeds[] = {41, 42, 41};
    struct engine_stats s = group_of(&f, seeds, 3);
    cr_assert_eq(fx_chunks(&f), 2);
    cr_assert_eq(s.dedup_misses, 2, "counted once, for the commits that held");
    cr_assert_eq(s.dedup_hits, 1);
    /* Alone, the second 41 finds the first in the index: its early record is dead. */
    cr_assert_eq(dead_bytes_balanced(&f), CS + 64ull);
    fx_close(&f);
}

/* ---- a batch of one thread's requests (engine__commitq_run_many) ---- */

struct many {
    struct job jobs[3];
    struct engine_commitq *q;
    int rc;
};

static void *
many_main(void *arg)
{
    struct many *m = arg;
    struct engine_commitq_item *its[3] = {&m->jobs[0].it, &m->jobs[1].it, &m->jobs[2].it};
    m->rc = engine__commitq_run_many(m->q, its, 3);
    return NULL;
}

Test(commitq, one_threads_items_queue_together_and_keep_their_own_results)
{
    struct recorder r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct engine_commitq q;
    engine__commitq_init(&q, record_group, &r);
    struct job lead = {.id = 1, .q = &q};
    pthread_t t[2];
    start_queued(&lead, t, 0, 1, 0); /* leads, and holds its group open */
    struct many m = {.q = &q};
    for (int k = 0; k < 3; k++)
        m.jobs[k] = (struct job){.id = k + 2, .q = &q, .it.weight = 1};
    cr_assert_eq(pthread_create(&t[1], NULL, many_main, &m), 0);
    cr_assert(wait_for(&q, queued_is, 3), "the three items never queued");
    atomic_store(&r.gate, 1);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    cr_assert_eq(lead.rc, -1);
    cr_assert_eq(m.rc, -2, "run_many returns its first item's result");
    for (int k = 0; k < 3; k++)
        cr_assert_eq(m.jobs[k].it.rc, -(k + 2), "item %d got another's result", k);
    cr_assert_eq(r.groups, 2);
    cr_assert_eq(r.sizes[1], 3, "the batch commits as one group");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(r.ids[1][i], i + 2, "in the order given");
    engine__commitq_destroy(&q);
}

/* ---- batches of small writes (engine_submit_writes' worker side) ---- */

static struct engine_req
wr(struct fx *f, uint64_t off, uint32_t len, const void *buf, unsigned flags)
{
    return (struct engine_req){.op = ENGINE_OP_WRITE,
                               .ex = f->ex,
                               .off = off,
                               .len = len,
                               .buf = (void *) buf,
                               .flags = flags};
}

static void
run_batch(struct engine_req *r, size_t n)
{
    struct engine_req *p[ENGINE_BATCH_MAX];
    for (size_t i = 0; i < n; i++) {
        r[i].result = 12345; /* every request must get a result */
        p[i] = &r[i];
    }
    engine__write_batch(p, n);
}

static void
assert_reads(struct fx *f, uint64_t off, const void *want, size_t len, const char *what)
{
    uint8_t got[CS];
    cr_assert_leq(len, sizeof(got));
    cr_assert_eq(engine_read(f->ex, off, (uint32_t) len, got), 0);
    cr_assert(!memcmp(got, want, len), "%s reads back wrong", what);
}

Test(batch, each_write_gets_its_own_result_and_overlaps_keep_their_order)
{
    struct fx f;
    fx_open(&f);
    static uint8_t a[CS], c[CS], d[CS], e[100], zeros[CS];
    fx_fill(a, CS, 51);
    fx_fill(c, CS, 52);
    fx_fill(d, CS, 53);
    fx_fill(e, sizeof(e), 54);
    struct engine_req r[] = {
        wr(&f, 0, CS, a, 0),
        wr(&f, CS, CS, a, 0),                /* the same bytes: shares the first's chunk */
        wr(&f, 0, CS, c, 0),                 /* overlaps the first: runs after it */
        wr(&f, FX_SIZE - CS / 2, CS, d, 0),  /* past the end */
        wr(&f, 2 * CS, CS, d, ENGINE_FUA),   /* synced before its result */
        wr(&f, 3 * CS + 50, sizeof(e), e, 0) /* part of a chunk: read-modify-write */
    };
    run_batch(r, 6);
    static const int want[] = {0, 0, 0, -EINVAL, 0, 0};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(r[i].result, want[i], "request %d: %d", i, r[i].result);
    assert_reads(&f, 0, c, CS, "the later overlapping write");
    assert_reads(&f, CS, a, CS, "the shared chunk");
    assert_reads(&f, 2 * CS, d, CS, "the FUA write");
    assert_reads(&f, 3 * CS + 50, e, sizeof(e), "the partial write");
    assert_reads(&f, 3 * CS, zeros, 50, "the bytes before the partial write");
    struct engine_stats s;
    cr_assert_eq(engine_stats(f.e, NULL, &s), 0);
    cr_assert_eq(s.bytes_written, 4 * CS + sizeof(e), "only what landed is counted");
    cr_assert_eq(s.dedup_hits, 1);
    cr_assert_eq(s.rmw_count, 1);
    cr_assert_eq(fx_chunks(&f), 4, "a (shared), c, d and the partial chunk");
    fx_close(&f); /* refcounts = map entries, hash entries name live chunks */
}

Test(batch, a_failed_append_fails_only_the_request_that_cannot_append_alone)
{
    use_failing_io();
    struct fx f;
    fx_open(&f);
    static uint8_t b[3][CS];
    struct engine_req r[3];
    for (int i = 0; i < 3; i++) {
        fx_fill(b[i], CS, 61 + (uint32_t) i);
        r[i] = wr(&f, (uint64_t) (i + 1) * CS, CS, b[i], 0);
    }
    /* The batch's one write of all records fails, then the first request's own. */
    atomic_store(&fail_left, 2);
    run_batch(r, 3);
    cr_assert_eq(atomic_load(&fail_left), 0);
    cr_assert_eq(r[0].result, -EIO);
    cr_assert_eq(r[1].result, 0);
    cr_assert_eq(r[2].result, 0);
    static uint8_t zeros[CS];
    assert_reads(&f, CS, zeros, CS, "the failed write");
    assert_reads(&f, 2 * CS, b[1], CS, "the second write");
    assert_reads(&f, 3 * CS, b[2], CS, "the third write");
    cr_assert_eq(dead_bytes_balanced(&f), 0, "the failed appends left nothing behind");
    fx_close(&f);
    store_io_set(NULL);
}

Test(batch, a_failed_commit_is_retried_one_request_at_a_time)
{
    struct fx f;
    fx_open(&f);
    store_test_fail_commits(engine_store(f.e), -EIO, 0, 1);
    static uint8_t b[3][CS];
    struct engine_req r[3];
    for (int i = 0; i < 3; i++) {
        fx_fill(b[i], CS, 71 + (uint32_t) i);
        r[i] = wr(&f, (uint64_t) i * CS, CS, b[i], 0);
    }
    run_batch(r, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].result, 0, "request %d", i);
        assert_reads(&f, (uint64_t) i * CS, b[i], CS, "a retried write");
    }
    cr_assert_eq(fx_chunks(&f), 3);
    cr_assert_eq(dead_bytes_balanced(&f), 0, "each retry committed its early record");
    fx_close(&f);
}
