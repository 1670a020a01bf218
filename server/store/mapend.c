/* mapend: per region of an export's block map, the end of what has ever been mapped in it.
 *
 * A write looks up the current map entry of every chunk it covers (to release the old
 * chunk); into fresh space — a new export filled, an image copied in — every one of those
 * look-ups is a RocksDB point read that finds nothing (~3% of a unique write's CPU). The
 * map is cut into regions of STORE_MAPEND_REGION chunks, and each region remembers one past
 * the highest chunk in it that any committed entry has mapped: a look-up at or past that
 * end answers "unmapped" without asking. The first look-up in a region reads its end (one
 * iterator seek to its last entry); every commit that maps a chunk past a region's end
 * raises it; unmapping never lowers it, so an end can only be too high (a wasted look-up),
 * never too low. Per region rather than per export, since clients write with several
 * connections, each sequentially from its own offset. Only transactions put map entries
 * (check and recovery only delete them). */
#include "store/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define REGION_UNKNOWN UINT16_MAX /* end not read yet (ends are 0..STORE_MAPEND_REGION) */

/* Regions tracked per export: 64 TiB of 4 KiB chunks. Past them look-ups ask RocksDB. */
#define MAPEND_MAX_REGIONS (4ULL << 20)

/* Region r of export_id: one past its last map entry now, relative to the region's first
 * chunk (0: no entry). */
static int
load_region(struct store *st, uint32_t export_id, uint64_t r, uint16_t *end)
{
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_MAP);
    if (!it)
        return -ENOMEM;
    uint8_t key[META_MAP_KEY_LEN];
    meta_key_map_encode(key, export_id, (r + 1) * STORE_MAPEND_REGION - 1);
    meta_iter_seek_last(it, key, sizeof(key));
    *end = 0;
    if (meta_iter_valid(it)) {
        size_t kl;
        const void *k = meta_iter_key(it, &kl);
        uint32_t e;
        uint64_t idx;
        if (meta_key_map_decode(k, kl, &e, &idx) == 0 && e == export_id &&
            idx / STORE_MAPEND_REGION == r)
            *end = (uint16_t) (idx % STORE_MAPEND_REGION + 1);
    }
    int rc = meta_iter_status(it);
    meta_iter_free(it);
    return rc;
}

/* mapend_lock held. The export's entry (added if there is room), or NULL. */
static struct store_mapend *
find(struct store *st, uint32_t export_id, bool add)
{
    for (size_t i = 0; i < st->nmapend; i++)
        if (st->mapend[i].export_id == export_id)
            return &st->mapend[i];
    if (!add || st->nmapend == STORE_MAPEND_EXPORTS)
        return NULL;
    struct store_mapend *m = &st->mapend[st->nmapend++];
    memset(m, 0, sizeof(*m));
    m->export_id = export_id;
    return m;
}

/* mapend_lock held. Region r's end, the table grown to hold it; NULL past
 * MAPEND_MAX_REGIONS, or when it cannot grow (then the export is no longer tracked: every
 * look-up asks RocksDB). */
static uint16_t *
region(struct store_mapend *m, uint64_t r)
{
    if (m->untracked || r >= MAPEND_MAX_REGIONS) /* at most 4 MiB of table per export */
        return NULL;
    if (r >= m->nregions) {
        uint64_t n = m->nregions ? m->nregions : 64;
        while (n <= r)
            n *= 2;
        uint16_t *g = realloc(m->regions, (size_t) n * sizeof(*g));
        if (!g) {
            free(m->regions);
            m->regions = NULL;
            m->nregions = 0;
            m->untracked = true;
            return NULL;
        }
        for (uint64_t i = m->nregions; i < n; i++)
            g[i] = REGION_UNKNOWN;
        m->regions = g;
        m->nregions = n;
    }
    return &m->regions[r];
}

bool
store__map_unwritten(struct store *st, uint32_t export_id, uint64_t chunk_idx)
{
    const uint64_t r = chunk_idx / STORE_MAPEND_REGION;
    pthread_mutex_lock(&st->mapend_lock);
    struct store_mapend *m = find(st, export_id, true);
    uint16_t *end = m ? region(m, r) : NULL;
    if (end && *end == REGION_UNKNOWN) {
        /* Under the lock: a commit's raise waits for the load, or the load sees its batch. */
        uint16_t v;
        if (load_region(st, export_id, r, &v) == 0)
            *end = v;
    }
    bool unwritten = end && *end != REGION_UNKNOWN && chunk_idx % STORE_MAPEND_REGION >= *end;
    pthread_mutex_unlock(&st->mapend_lock);
    return unwritten;
}

void
store__mapend_commit(struct store *st, const struct store_txn *tx)
{
    pthread_mutex_lock(&st->mapend_lock);
    struct store_mapend *m = NULL;
    for (size_t i = 0; i < tx->nmaps; i++) {
        const struct txn_map *t = &tx->maps[tx->map_used[i]];
        if (!t->chunk_id)
            continue;
        if (!m || m->export_id != t->export_id)
            m = find(st, t->export_id, false);
        if (!m || m->untracked)
            continue; /* not looked up yet: its first look-ups will read the entry */
        /* A region past the table, or unknown, has its end read at its first look-up, which
         * sees this batch. */
        const uint64_t r = t->chunk_idx / STORE_MAPEND_REGION;
        const uint16_t end = (uint16_t) (t->chunk_idx % STORE_MAPEND_REGION + 1);
        if (r < m->nregions && m->regions[r] != REGION_UNKNOWN && m->regions[r] < end)
            m->regions[r] = end;
    }
    pthread_mutex_unlock(&st->mapend_lock);
}

int
store__mapend_init(struct store *st)
{
    st->mapend = calloc(STORE_MAPEND_EXPORTS, sizeof(*st->mapend));
    return st->mapend ? 0 : -ENOMEM;
}

void
store__mapend_fini(struct store *st)
{
    for (size_t i = 0; st->mapend && i < st->nmapend; i++)
        free(st->mapend[i].regions);
    free(st->mapend);
    st->mapend = NULL;
    pthread_mutex_destroy(&st->mapend_lock);
}
