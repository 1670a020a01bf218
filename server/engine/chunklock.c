/* chunklock.c: per-export range locks on chunk indices. Requests queue in arrival order;
 * one may run when no earlier queued or running request overlaps it in a conflicting mode
 * (two readers never conflict). So overlapping requests on the same chunks serialize in
 * the order they arrived — a later write never overtakes an earlier one — while requests on
 * disjoint chunks run in parallel, and no request starves.
 * The caller supplies the queue node (on its stack): no allocation.
 * Knows nothing of what the chunks hold. */
#include "engine/internal.h"

void
engine__chunklock_init(struct engine_chunklock *cl)
{
    pthread_mutex_init(&cl->mu, NULL);
    pthread_cond_init(&cl->cv, NULL);
    cl->head = cl->tail = NULL;
}

void
engine__chunklock_destroy(struct engine_chunklock *cl)
{
    pthread_cond_destroy(&cl->cv);
    pthread_mutex_destroy(&cl->mu);
}

static bool
conflicts(const struct engine_chunkrange *a, const struct engine_chunkrange *b)
{
    return a->first <= b->last && b->first <= a->last && (a->excl || b->excl);
}

static bool
blocked(const struct engine_chunkrange *r)
{
    for (const struct engine_chunkrange *o = r->prev; o; o = o->prev)
        if (conflicts(o, r))
            return true;
    return false;
}

/* Appends r to the queue (cl->mu held). */
static void
enqueue(struct engine_chunklock *cl, struct engine_chunkrange *r)
{
    r->next = NULL;
    r->prev = cl->tail;
    if (cl->tail)
        cl->tail->next = r;
    else
        cl->head = r;
    cl->tail = r;
}

void
engine__chunklock_acquire(struct engine_chunklock *cl, struct engine_chunkrange *r, uint64_t first,
                          uint64_t last, bool excl)
{
    *r = (struct engine_chunkrange){.first = first, .last = last, .excl = excl};
    pthread_mutex_lock(&cl->mu);
    enqueue(cl, r);
    while (blocked(r))
        pthread_cond_wait(&cl->cv, &cl->mu);
    pthread_mutex_unlock(&cl->mu);
}

bool
engine__chunklock_try(struct engine_chunklock *cl, struct engine_chunkrange *r, uint64_t first,
                      uint64_t last, bool excl)
{
    *r = (struct engine_chunkrange){.first = first, .last = last, .excl = excl};
    pthread_mutex_lock(&cl->mu);
    enqueue(cl, r);
    bool ok = !blocked(r); /* blocked() looks only at earlier requests */
    if (!ok) {
        cl->tail = r->prev;
        if (cl->tail)
            cl->tail->next = NULL;
        else
            cl->head = NULL;
    }
    pthread_mutex_unlock(&cl->mu);
    return ok;
}

void
engine__chunklock_release(struct engine_chunklock *cl, struct engine_chunkrange *r)
{
    pthread_mutex_lock(&cl->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        cl->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        cl->tail = r->prev;
    /* XXX: wakes every waiter of this export; fine at NBD queue depths (tens). */
    pthread_cond_broadcast(&cl->cv);
    pthread_mutex_unlock(&cl->mu);
}
