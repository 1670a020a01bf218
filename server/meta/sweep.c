/* sweep.c: the sweep of `hash` entries. A freed chunk keeps its `hash` entry (invariant 2:
 * an entry names its hash's chunk or an id that no chunk has any more, which look-ups take
 * as absent); RocksDB's compactions of the `hash` family drop those entries as they rewrite
 * them, asking whoever installed a keep function — the index's rocksdb back-end, which
 * knows the live hashes from its in-memory filter. Flushes are not filtered (RocksDB only
 * runs a plain compaction filter in compactions), so an entry is looked at once it has
 * been in an SST file for a while, long after its batch was published.
 * meta_compact lives here too: it is how a caller makes the sweep run over everything.
 * Threads: the filter runs on RocksDB's compaction threads; install and removal on any
 * thread, and removal waits for the calls in flight. */
#include "meta/internal.h"

#include <errno.h>

static const char *
sweep_name(void *state)
{
    (void) state;
    return "dedupd-hash-sweep";
}

static void
sweep_state_free(void *state)
{
    (void) state; /* the meta owns it */
}

/* RocksDB's filter: 1 drops the entry. Without a keep function everything stays. */
static unsigned char
sweep_filter(void *state, int level, const char *key, size_t klen, const char *val, size_t vlen,
             char **new_val, size_t *new_vlen, unsigned char *changed)
{
    (void) level, (void) new_val, (void) new_vlen;
    struct meta *m = state;
    *changed = 0;
    bool drop = false;
    pthread_rwlock_rdlock(&m->sweep_lock);
    if (m->sweep_keep) {
        drop = !m->sweep_keep(m->sweep_arg, key, klen, val, vlen);
        if (drop)
            __atomic_fetch_add(&m->sweep_dropped, 1, __ATOMIC_RELAXED);
    }
    pthread_rwlock_unlock(&m->sweep_lock);
    return drop;
}

int
meta__sweep_init(struct meta *m)
{
    if (pthread_rwlock_init(&m->sweep_lock, NULL))
        return -ENOMEM;
    m->sweep_filter =
        rocksdb_compactionfilter_create(m, sweep_state_free, sweep_filter, sweep_name);
    if (!m->sweep_filter) {
        pthread_rwlock_destroy(&m->sweep_lock);
        return -ENOMEM;
    }
    rocksdb_options_set_compaction_filter(m->hash_opts, m->sweep_filter);
    return 0;
}

void
meta__sweep_fini(struct meta *m)
{
    if (!m->sweep_filter)
        return;
    rocksdb_compactionfilter_destroy(m->sweep_filter);
    m->sweep_filter = NULL;
    pthread_rwlock_destroy(&m->sweep_lock);
}

void
meta_set_hash_sweep(struct meta *m, meta_keep_fn keep, void *arg)
{
    if (!m || !m->sweep_filter)
        return;
    pthread_rwlock_wrlock(&m->sweep_lock);
    if (keep) {
        m->sweep_keep = keep;
        m->sweep_arg = arg;
    } else if (m->sweep_arg == arg) { /* a back-end opened since keeps its own */
        m->sweep_keep = NULL;
        m->sweep_arg = NULL;
    }
    pthread_rwlock_unlock(&m->sweep_lock);
}

int
meta_compact(struct meta *m, enum meta_cf cf)
{
    if (!m || (int) cf < 0 || cf >= META_CF__COUNT)
        return -EINVAL;
    if (m->read_only)
        return -EROFS;
    /* The whole range, memtable included; with a compaction filter set RocksDB rewrites
     * the bottom level too, so the sweep sees every entry. */
    rocksdb_compact_range_cf(m->db, meta__cf(m, cf), NULL, 0, NULL, 0);
    return 0;
}

uint64_t
meta_hash_swept(struct meta *m)
{
    return m ? __atomic_load_n(&m->sweep_dropped, __ATOMIC_RELAXED) : 0;
}
