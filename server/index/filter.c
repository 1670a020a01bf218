/* filter.c: the rocksdb back-end's in-memory filter of every key in the `hash` column
 * family, so that a look-up of a hash the store does not hold — every chunk of unique data —
 * is answered without RocksDB. RocksDB's own bloom filters need one probe per L0 file and
 * per level, each behind an index partition search and a block-cache look-up: with 10 M
 * chunks indexed that was 39% of the server's CPU while writing unique data.
 *
 * One blocked bloom filter (util/bloom.h) for the whole index. Built by a background
 * thread that scans the chunk records: at open, and again when the keys added since the
 * last build fill it (grown to twice RocksDB's estimate of the live keys, at most
 * INDEX_FILTER_MAX_BYTES) or, once at that size, after a quarter of its capacity more,
 * since keys of freed chunks stay in a bloom filter as false "maybe"s. While a build runs
 * there is no filter and every look-up goes to RocksDB, as before the filter existed; so
 * too after a build failed (logged), until the next start.
 *
 * Never a false "absent": keys enter at index_publish, after their batch committed. The
 * builder first installs the new filter as `building`, so every later publish reaches it,
 * and only then takes the scan's snapshot, which holds every key committed before: a key
 * committed after the snapshot is published after it too. A key committed but not yet
 * published is found absent for that moment, like a look-up made just before the commit;
 * the engine re-checks such misses inside its transaction (write.c, recheck_misses).
 * Threads: look-ups and publishes on any worker thread at once; one builder thread. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index/internal.h"
#include "meta/keys.h"
#include "meta/meta.h"
#include "util/bloom.h"
#include "util/log.h"
#include "util/threadname.h"

/* Chunk records scanned with one iterator (and between two looks at the stop flag). */
#define SCAN_PIECE_RECORDS 65536

struct index_filter {
    struct meta *m;         /* borrowed */
    pthread_rwlock_t lock;  /* guards the two pointers below, not the filters' bits */
    struct bloom *active;   /* NULL: not built yet or being rebuilt (RocksDB answers) */
    struct bloom *building; /* gets every publish while the builder scans */
    uint64_t scanned;       /* keys the last build found */
    uint64_t added;         /* keys published since the last build started (atomic) */
    uint64_t builds;        /* finished builds (atomic) */
    uint64_t skips;         /* look-ups answered "absent" by the filter (atomic) */

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t cv;
    bool want_build, building_now, stop;
    pthread_t thread;
    uint64_t min_keys;       /* INDEX_FILTER_MIN_KEYS, but in tests */
    uint64_t piece;          /* SCAN_PIECE_RECORDS, but in tests */
    void (*hook)(void *arg); /* tests: runs in the builder between snapshot and scan */
    void *hook_arg;
};

/* The filter's key: the algorithm and the hash's first INDEX_MEMORY_KEY_BYTES bytes, zero
 * padded — what an index_staged entry holds. The keys are digests already, but of two
 * algorithms, and the filter takes its block and its bits from different halves of one
 * 64-bit value: mixed. */
static uint64_t
key_hash(uint8_t alg, const uint8_t *hash, size_t len)
{
    uint8_t k[INDEX_MEMORY_KEY_BYTES] = {0};
    memcpy(k, hash, len < sizeof(k) ? len : sizeof(k));
    uint64_t a, b;
    memcpy(&a, k, 8);
    memcpy(&b, k + 8, 8);
    return index__mix64(a ^ index__mix64(b ^ ((uint64_t) alg << 56)));
}

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static bool
stopping(struct index_filter *f)
{
    pthread_mutex_lock(&f->mu);
    bool s = f->stop;
    pthread_mutex_unlock(&f->mu);
    return s;
}

/* Adds the hash of every chunk record to nb; *n counts them. After `building` is in place:
 * see the file comment. The keys come from the chunk records, which hold every hash a
 * look-up can use (`hash` also keeps the entries of freed chunks until the sweep drops
 * them, and look-ups take those as absent) — not from `hash` itself, whose hash-bucketed
 * memtable an iterator first copies into sorted order: ~30 MiB and a second of CPU per
 * full memtable. The scan takes a new iterator every SCAN_PIECE_RECORDS records
 * (f->piece): one holds on to every memtable it started with, flushed or not (up to 64 MiB
 * each while writes go on). A key deleted between two snapshots is gone anyway; one
 * committed after the first is published into nb. 0, -ECANCELED (stopping), -ENOMEM or
 * -EIO. */
static int
scan_chunks(struct index_filter *f, struct bloom *nb, uint64_t *n)
{
    uint8_t last[META_CHUNK_KEY_LEN];
    bool first = true;
    pthread_mutex_lock(&f->mu);
    uint64_t piece_max = f->piece;
    pthread_mutex_unlock(&f->mu);
    for (;;) {
        struct meta_iter *it = meta_iter_new(f->m, META_CF_CHUNK);
        if (!it)
            return -ENOMEM;
        if (first) {
            pthread_mutex_lock(&f->mu);
            void (*hook)(void *) = f->hook;
            void *hook_arg = f->hook_arg;
            pthread_mutex_unlock(&f->mu);
            if (hook)
                hook(hook_arg);
            meta_iter_seek_first(it);
        } else {
            meta_iter_seek(it, last, sizeof(last));
            size_t klen;
            const void *k = meta_iter_valid(it) ? meta_iter_key(it, &klen) : NULL;
            if (k && klen == sizeof(last) && !memcmp(k, last, sizeof(last)))
                meta_iter_next(it); /* the previous piece's last record */
        }
        first = false;
        uint64_t piece = 0;
        for (; meta_iter_valid(it) && piece < piece_max; meta_iter_next(it), piece++) {
            size_t klen, vlen;
            const void *k = meta_iter_key(it, &klen);
            const void *v = meta_iter_value(it, &vlen);
            struct meta_chunk_rec rec;
            if (meta_chunk_rec_decode(v, vlen, &rec) == 0 && rec.hash_alg && rec.hash_len) {
                bloom_add(nb, key_hash(rec.hash_alg, rec.hash, rec.hash_len));
                (*n)++;
            } /* else: `check` reports a malformed record; it names no hash here */
            if (klen == sizeof(last))
                memcpy(last, k, sizeof(last));
        }
        bool more = meta_iter_valid(it);
        int rc = meta_iter_status(it);
        meta_iter_free(it);
        if (rc < 0)
            return rc;
        if (!more)
            return 0;
        if (stopping(f))
            return -ECANCELED;
    }
}

static void
build(struct index_filter *f)
{
    uint64_t t0 = now_ms();
    pthread_mutex_lock(&f->mu);
    uint64_t min_keys = f->min_keys;
    pthread_mutex_unlock(&f->mu);
    uint64_t live = meta_cf_keys_estimate(f->m, META_CF_HASH);
    uint64_t want = live > min_keys / 2 ? 2 * live : min_keys;
    struct bloom *nb = bloom_new(want, INDEX_FILTER_MAX_BYTES);
    if (!nb) {
        log_warn("index: no memory for a hash filter of %" PRIu64 " keys; look-ups go to "
                 "RocksDB",
                 want);
        return;
    }
    pthread_rwlock_wrlock(&f->lock);
    struct bloom *old = f->active;
    f->active = NULL;
    f->building = nb;
    __atomic_store_n(&f->added, 0, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(&f->lock);
    bloom_free(old);

    uint64_t n = 0;
    int rc = scan_chunks(f, nb, &n);
    pthread_rwlock_wrlock(&f->lock);
    f->building = NULL;
    if (rc == 0) {
        f->active = nb;
        f->scanned = n;
    }
    pthread_rwlock_unlock(&f->lock);
    if (rc < 0) {
        bloom_free(nb);
        if (rc != -ECANCELED)
            log_err("index: building the hash filter failed after %" PRIu64 " keys: %s; "
                    "look-ups go to RocksDB",
                    n, strerror(-rc));
        return;
    }
    __atomic_add_fetch(&f->builds, 1, __ATOMIC_RELAXED);
    log_info("index: hash filter built: %" PRIu64 " keys, %" PRIu64 " KiB for %" PRIu64
             " keys, %" PRIu64 " ms",
             n, bloom_bytes(nb) >> 10, bloom_capacity(nb), now_ms() - t0);
}

static void *
builder_main(void *arg)
{
    struct index_filter *f = arg;
    threadname_set("filter");
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->want_build && !f->stop)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop)
            break;
        f->want_build = false;
        f->building_now = true;
        pthread_mutex_unlock(&f->mu);
        build(f);
        pthread_mutex_lock(&f->mu);
        f->building_now = false;
        pthread_cond_broadcast(&f->cv); /* index__filter_wait */
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void
request_build(struct index_filter *f)
{
    pthread_mutex_lock(&f->mu);
    if (!f->building_now && !f->want_build) {
        f->want_build = true;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
}

int
index__filter_start(struct meta *m, struct index_filter **out)
{
    struct index_filter *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->m = m;
    /* Writer-preferring: glibc's default lets a steady stream of look-ups keep the builder
     * waiting to swap filters. No reader here takes the lock twice, as this kind requires. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&f->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->min_keys = INDEX_FILTER_MIN_KEYS;
    f->piece = SCAN_PIECE_RECORDS;
    f->want_build = true; /* the first build, at once */
    int rc = pthread_create(&f->thread, NULL, builder_main, f);
    if (rc != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        pthread_rwlock_destroy(&f->lock);
        free(f);
        return -rc;
    }
    *out = f;
    return 0;
}

void
index__filter_stop(struct index_filter *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    bloom_free(f->active);
    bloom_free(f->building);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    pthread_rwlock_destroy(&f->lock);
    free(f);
}

bool
index__filter_holds(struct index_filter *f, uint8_t alg, const uint8_t *hash, size_t len)
{
    uint64_t h = key_hash(alg, hash, len);
    pthread_rwlock_rdlock(&f->lock);
    bool maybe = !f->active || bloom_may_contain(f->active, h);
    pthread_rwlock_unlock(&f->lock);
    return maybe;
}

bool
index__filter_may_contain(struct index_filter *f, uint8_t alg, const uint8_t *hash, size_t len)
{
    bool maybe = index__filter_holds(f, alg, hash, len);
    if (!maybe)
        __atomic_add_fetch(&f->skips, 1, __ATOMIC_RELAXED);
    return maybe;
}

void
index__filter_add(struct index_filter *f, const struct index_staged *s, size_t n)
{
    if (n == 0)
        return;
    bool full = false;
    pthread_rwlock_rdlock(&f->lock);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = key_hash(s[i].alg, s[i].key, sizeof(s[i].key));
        if (f->active)
            bloom_add(f->active, h);
        if (f->building)
            bloom_add(f->building, h);
    }
    uint64_t added = __atomic_add_fetch(&f->added, n, __ATOMIC_RELAXED);
    if (f->active) {
        uint64_t cap = bloom_capacity(f->active);
        /* Full; or, when the scan alone (nearly) filled it (at INDEX_FILTER_MAX_BYTES), a
         * quarter more — mostly keys of chunks freed since, to be swept by a new scan. */
        uint64_t room = cap > f->scanned ? cap - f->scanned : 0;
        full = added >= (room > cap / 4 ? room : cap / 4);
    }
    pthread_rwlock_unlock(&f->lock);
    if (full)
        request_build(f);
}

void
index__filter_usage(struct index_filter *f, struct index_usage *out)
{
    pthread_rwlock_rdlock(&f->lock);
    out->filter_bytes = f->active ? bloom_bytes(f->active) : 0;
    out->filter_building_bytes = f->building ? bloom_bytes(f->building) : 0;
    pthread_rwlock_unlock(&f->lock);
    out->filter_builds = __atomic_load_n(&f->builds, __ATOMIC_RELAXED);
    out->filter_skips = __atomic_load_n(&f->skips, __ATOMIC_RELAXED);
}

void
index__filter_wait(struct index_filter *f)
{
    pthread_mutex_lock(&f->mu);
    while ((f->want_build || f->building_now) && !f->stop)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
}

void
index__filter_set_hook(struct index_filter *f, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&f->mu);
    f->hook = fn;
    f->hook_arg = arg;
    pthread_mutex_unlock(&f->mu);
}

void
index__filter_rebuild(struct index_filter *f)
{
    request_build(f);
}

void
index__filter_set_sizes(struct index_filter *f, uint64_t min_keys, uint64_t piece_records)
{
    pthread_mutex_lock(&f->mu);
    f->min_keys = min_keys;
    f->piece = piece_records ? piece_records : 1;
    pthread_mutex_unlock(&f->mu);
}
