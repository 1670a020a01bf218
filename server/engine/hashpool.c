/* hashpool.c: runs the hashing of one large request on several cores at once. The
 * request's own worker thread and the pool's helper threads take item numbers from one
 * atomic counter until none is left, so the split balances itself; the request thread then
 * waits only for helpers still finishing an item. Job descriptors live on the requester's
 * stack: no allocation per request or chunk. Callers skip the pool for small requests
 * (waking a helper costs more than hashing a few chunks).
 * Knows nothing of what is hashed or why. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/internal.h"
#include "util/log.h"
#include "util/threadname.h"

/* Helpers besides the request's own thread: one fewer than the cores, at most this many. */
#define HASHPOOL_MAX_HELPERS 7

struct hashjob {
    uint32_t n;
    void (*fn)(void *arg, uint32_t i);
    void *arg;
    _Atomic uint32_t next; /* next item to take */
    uint32_t active;       /* helpers inside (pool mu) */
    struct hashjob *qnext; /* pool queue (pool mu) */
};

struct engine_hashpool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* a job was queued, or stop */
    pthread_cond_t done_cv; /* a helper left a job */
    struct hashjob *queue;  /* jobs helpers may still join */
    bool stop;
    size_t nthreads;
    pthread_t threads[HASHPOOL_MAX_HELPERS];
};

static void
take_items(struct hashjob *job)
{
    for (;;) {
        uint32_t i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (i >= job->n)
            return;
        job->fn(job->arg, i);
    }
}

/* pool mu held: takes job off the queue if it is still there. */
static void
dequeue(struct engine_hashpool *hp, struct hashjob *job)
{
    for (struct hashjob **pp = &hp->queue; *pp; pp = &(*pp)->qnext)
        if (*pp == job) {
            *pp = job->qnext;
            return;
        }
}

static void *
helper_main(void *arg)
{
    struct engine_hashpool *hp = arg;
    threadname_set("hash");
    pthread_mutex_lock(&hp->mu);
    for (;;) {
        while (!hp->stop && !hp->queue)
            pthread_cond_wait(&hp->work_cv, &hp->mu);
        if (hp->stop)
            break;
        struct hashjob *job = hp->queue;
        job->active++;
        pthread_mutex_unlock(&hp->mu);
        take_items(job);
        pthread_mutex_lock(&hp->mu);
        dequeue(hp, job); /* exhausted: nobody else should join */
        if (--job->active == 0)
            pthread_cond_broadcast(&hp->done_cv);
    }
    pthread_mutex_unlock(&hp->mu);
    return NULL;
}

int
engine__hashpool_start(struct engine_hashpool **out)
{
    *out = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t want = cpus > 1 ? (size_t) cpus - 1 : 0;
    if (want > HASHPOOL_MAX_HELPERS)
        want = HASHPOOL_MAX_HELPERS;
    if (want == 0)
        return 0; /* one core: hash inline */
    struct engine_hashpool *hp = calloc(1, sizeof(*hp));
    if (!hp)
        return -ENOMEM;
    pthread_mutex_init(&hp->mu, NULL);
    pthread_cond_init(&hp->work_cv, NULL);
    pthread_cond_init(&hp->done_cv, NULL);
    for (size_t i = 0; i < want; i++) {
        if (pthread_create(&hp->threads[i], NULL, helper_main, hp) != 0) {
            log_warn("engine: hash pool: started %zu of %zu helper threads", i, want);
            break;
        }
        hp->nthreads++;
    }
    *out = hp;
    return 0;
}

void
engine__hashpool_stop(struct engine_hashpool *hp)
{
    if (!hp)
        return;
    pthread_mutex_lock(&hp->mu);
    hp->stop = true;
    pthread_cond_broadcast(&hp->work_cv);
    pthread_mutex_unlock(&hp->mu);
    for (size_t i = 0; i < hp->nthreads; i++)
        pthread_join(hp->threads[i], NULL);
    pthread_cond_destroy(&hp->done_cv);
    pthread_cond_destroy(&hp->work_cv);
    pthread_mutex_destroy(&hp->mu);
    free(hp);
}

void
engine__hashpool_run(struct engine_hashpool *hp, uint32_t n, void (*fn)(void *arg, uint32_t i),
                     void *arg)
{
    struct hashjob job = {.n = n, .fn = fn, .arg = arg};
    atomic_init(&job.next, 0);
    if (!hp || hp->nthreads == 0 || n < 2) {
        take_items(&job);
        return;
    }
    pthread_mutex_lock(&hp->mu);
    job.qnext = hp->queue;
    hp->queue = &job;
    if (n > 2 && hp->nthreads > 1)
        pthread_cond_broadcast(&hp->work_cv);
    else
        pthread_cond_signal(&hp->work_cv);
    pthread_mutex_unlock(&hp->mu);
    take_items(&job);
    pthread_mutex_lock(&hp->mu);
    dequeue(hp, &job);
    while (job.active)
        pthread_cond_wait(&hp->done_cv, &hp->mu);
    pthread_mutex_unlock(&hp->mu);
}
