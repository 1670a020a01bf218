/* Tests server/engine/chunklock.c: disjoint ranges run together, overlapping writers
 * serialize in arrival order, readers share, a waiting writer holds back later readers. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "engine/internal.h"

struct waiter {
    struct engine_chunklock *cl;
    uint64_t first, last;
    bool excl;
    atomic_int acquired;
    atomic_int *order; /* shared sequence counter */
    int seq;           /* this waiter's place when it got the lock */
    atomic_int release;
};

static void *
waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct engine_chunkrange r;
    engine__chunklock_acquire(w->cl, &r, w->first, w->last, w->excl);
    w->seq = atomic_fetch_add(w->order, 1);
    atomic_store(&w->acquired, 1);
    while (!atomic_load(&w->release))
        usleep(1000);
    engine__chunklock_release(w->cl, &r);
    return NULL;
}

static void
start(struct waiter *w, pthread_t *t, struct engine_chunklock *cl, atomic_int *order,
      uint64_t first, uint64_t last, bool excl)
{
    *w = (struct waiter){.cl = cl, .first = first, .last = last, .excl = excl, .order = order};
    cr_assert_eq(pthread_create(t, NULL, waiter_main, w), 0);
}

/* Waits up to 2 s for w to hold its range. */
static bool
got_it(struct waiter *w)
{
    for (int i = 0; i < 2000; i++) {
        if (atomic_load(&w->acquired))
            return true;
        usleep(1000);
    }
    return false;
}

/* True if w is still waiting after 100 ms. */
static bool
still_waiting(struct waiter *w)
{
    usleep(100 * 1000);
    return !atomic_load(&w->acquired);
}

Test(chunklock, disjoint_ranges_run_in_parallel)
{
    struct engine_chunklock cl;
    engine__chunklock_init(&cl);
    atomic_int order = 0;
    struct waiter a, b;
    pthread_t ta, tb;
    start(&a, &ta, &cl, &order, 0, 9, true);
    cr_assert(got_it(&a));
    start(&b, &tb, &cl, &order, 10, 19, true);
    cr_assert(got_it(&b), "a disjoint writer must not wait");
    a.release = b.release = 1;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    engine__chunklock_destroy(&cl);
}

Test(chunklock, overlapping_writers_serialize)
{
    struct engine_chunklock cl;
    engine__chunklock_init(&cl);
    atomic_int order = 0;
    struct waiter a, b;
    pthread_t ta, tb;
    start(&a, &ta, &cl, &order, 0, 9, true);
    cr_assert(got_it(&a));
    start(&b, &tb, &cl, &order, 9, 12, true);
    cr_assert(still_waiting(&b), "one shared chunk is enough to conflict");
    a.release = 1;
    cr_assert(got_it(&b));
    cr_assert_eq(a.seq, 0);
    cr_assert_eq(b.seq, 1);
    b.release = 1;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    engine__chunklock_destroy(&cl);
}

Test(chunklock, readers_share_and_a_waiting_writer_blocks_later_readers)
{
    struct engine_chunklock cl;
    engine__chunklock_init(&cl);
    atomic_int order = 0;
    struct waiter r1, r2, w, r3;
    pthread_t t1, t2, tw, t3;
    start(&r1, &t1, &cl, &order, 0, 5, false);
    cr_assert(got_it(&r1));
    start(&r2, &t2, &cl, &order, 3, 8, false);
    cr_assert(got_it(&r2), "readers share");
    start(&w, &tw, &cl, &order, 4, 4, true);
    cr_assert(still_waiting(&w));
    start(&r3, &t3, &cl, &order, 0, 1, false);
    cr_assert(got_it(&r3), "a reader not overlapping the waiting writer proceeds");
    r3.release = 1;
    pthread_join(t3, NULL);
    struct waiter r4;
    pthread_t t4;
    start(&r4, &t4, &cl, &order, 4, 4, false);
    cr_assert(still_waiting(&r4), "a later overlapping reader queues behind the writer");
    r1.release = r2.release = 1;
    cr_assert(got_it(&w));
    cr_assert(still_waiting(&r4));
    w.release = 1;
    cr_assert(got_it(&r4));
    cr_assert_lt(w.seq, r4.seq);
    r4.release = 1;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(tw, NULL);
    pthread_join(t4, NULL);
    engine__chunklock_destroy(&cl);
}

/* engine__chunklock_try never waits: it takes a range only when acquire would not block,
 * and a refused try leaves nothing queued. */
Test(chunklock, try_takes_free_ranges_and_never_queues)
{
    struct engine_chunklock cl;
    engine__chunklock_init(&cl);
    struct engine_chunkrange w, r1, r2, r3;
    engine__chunklock_acquire(&cl, &w, 10, 19, true);
    cr_assert(!engine__chunklock_try(&cl, &r1, 15, 25, false), "overlaps a writer");
    cr_assert(engine__chunklock_try(&cl, &r1, 20, 29, false), "disjoint");
    cr_assert(engine__chunklock_try(&cl, &r2, 25, 26, false), "readers share");
    cr_assert(!engine__chunklock_try(&cl, &r3, 0, 29, true), "a writer over readers");
    engine__chunklock_release(&cl, &w);
    engine__chunklock_release(&cl, &r1);
    engine__chunklock_release(&cl, &r2);
    cr_assert_null(cl.head, "a refused try must not stay queued");
    cr_assert(engine__chunklock_try(&cl, &r3, 0, 29, true));
    engine__chunklock_release(&cl, &r3);
    cr_assert_null(cl.head);
    engine__chunklock_destroy(&cl);
}
