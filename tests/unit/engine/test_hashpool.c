/* Tests server/engine/hashpool.c: every item runs exactly once, from several threads at
 * once, including with concurrent callers and with no pool at all. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/internal.h"

#define N 20000

struct count {
    _Atomic uint32_t hits[N];
};

static void
mark(void *arg, uint32_t i)
{
    struct count *c = arg;
    atomic_fetch_add(&c->hits[i], 1);
}

static void
assert_once(struct count *c)
{
    for (uint32_t i = 0; i < N; i++)
        cr_assert_eq(atomic_load(&c->hits[i]), 1, "item %u ran %u times", i,
                     atomic_load(&c->hits[i]));
}

Test(hashpool, every_item_runs_exactly_once)
{
    struct engine_hashpool *hp;
    cr_assert_eq(engine__hashpool_start(&hp), 0);
    struct count *c = calloc(1, sizeof(*c));
    engine__hashpool_run(hp, N, mark, c);
    assert_once(c);
    free(c);
    c = calloc(1, sizeof(*c));
    engine__hashpool_run(NULL, N, mark, c); /* no pool: inline */
    assert_once(c);
    free(c);
    engine__hashpool_stop(hp);
}

struct caller {
    struct engine_hashpool *hp;
    struct count *c;
};

static void *
caller_main(void *arg)
{
    struct caller *k = arg;
    for (int r = 0; r < 5; r++)
        engine__hashpool_run(k->hp, N / 5, mark, k->c);
    return NULL;
}

Test(hashpool, concurrent_callers_share_the_helpers)
{
    struct engine_hashpool *hp;
    cr_assert_eq(engine__hashpool_start(&hp), 0);
    struct count *c[3];
    pthread_t t[3];
    struct caller k[3];
    for (int i = 0; i < 3; i++) {
        c[i] = calloc(1, sizeof(*c[i]));
        k[i] = (struct caller){hp, c[i]};
        cr_assert_eq(pthread_create(&t[i], NULL, caller_main, &k[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        for (uint32_t j = 0; j < N / 5; j++)
            cr_assert_eq(atomic_load(&c[i]->hits[j]), 5);
        free(c[i]);
    }
    engine__hashpool_stop(hp);
}
