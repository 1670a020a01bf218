/* commitq.c: group commit. Write requests that are ready for their store transaction queue
 * here; the first to find no group running becomes the leader, takes the queued requests
 * (in arrival order, up to ENGINE_GROUP_MAX_ITEMS and ENGINE_GROUP_MAX_WEIGHT chunks) and
 * runs them through q->fn — one transaction for the lot — while the others sleep. Under
 * a queue depth of small writes the commit lock, the RocksDB write, the counters and the
 * segment append are then paid once per group instead of once per request, and the
 * hand-overs of the commit lock between worker threads (a futex wake and a context switch
 * each) mostly disappear. A request alone runs at once: grouping never waits for company.
 * Knows nothing of what a request is. */
#include "engine/internal.h"

void
engine__commitq_init(struct engine_commitq *q, engine_commit_fn fn, void *arg)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->head = q->tail = NULL;
    q->leading = false;
    q->fn = fn;
    q->arg = arg;
}

void
engine__commitq_destroy(struct engine_commitq *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

/* Takes the next group off the queue (q->mu held): at least one item, then more while the
 * budgets allow. */
static size_t
take_group(struct engine_commitq *q, struct engine_commitq_item **g)
{
    size_t n = 0;
    uint64_t weight = 0;
    while (q->head && n < ENGINE_GROUP_MAX_ITEMS &&
           (n == 0 || weight + q->head->weight <= ENGINE_GROUP_MAX_WEIGHT)) {
        struct engine_commitq_item *it = q->head;
        q->head = it->next;
        it->next = NULL;
        weight += it->weight;
        g[n++] = it;
    }
    if (!q->head)
        q->tail = NULL;
    return n;
}

static bool
all_done(struct engine_commitq_item *const *its, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!its[i]->done)
            return false;
    return true;
}

int
engine__commitq_run_many(struct engine_commitq *q, struct engine_commitq_item *const *its, size_t n)
{
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < n; i++) {
        struct engine_commitq_item *it = its[i];
        it->next = NULL;
        it->done = false;
        it->rc = 0;
        if (q->tail)
            q->tail->next = it;
        else
            q->head = it;
        q->tail = it;
    }
    for (;;) {
        bool mine_done;
        while (!(mine_done = all_done(its, n)) && q->leading)
            pthread_cond_wait(&q->cv, &q->mu);
        if (mine_done)
            break;
        /* Lead: one of ours is still queued, so the queue is not empty. Earlier arrivals go
         * first; if they fill the group, lead again for the rest. */
        struct engine_commitq_item *g[ENGINE_GROUP_MAX_ITEMS];
        q->leading = true;
        size_t k = take_group(q, g);
        pthread_mutex_unlock(&q->mu);
        q->fn(q->arg, g, k);
        pthread_mutex_lock(&q->mu);
        for (size_t i = 0; i < k; i++)
            g[i]->done = true;
        q->leading = false;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return n ? its[0]->rc : 0;
}

int
engine__commitq_run(struct engine_commitq *q, struct engine_commitq_item *it)
{
    return engine__commitq_run_many(q, &it, 1);
}
