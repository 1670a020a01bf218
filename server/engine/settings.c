/* settings.c: the dedup settings — enabled, back-end, hash, verify, default chunk size,
 * memory limits — persisted under one key in meta's `meta` column family, applied at open
 * and switched live.
 * The switch follows the btrfs v6/v7 care over enable/disable races: every write request
 * holds settings_lock for reading from choosing its hash to publishing its index entries,
 * and engine_dedup_set takes it for writing, so writes in flight finish under the old
 * settings (and the old back-end) and later ones see only the new. The old back-end is
 * closed after the switch, when nothing can use it any more.
 * Knows nothing of exports beyond the default chunk size. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/internal.h"
#include "meta/meta.h"
#include "store/store.h"
#include "util/hash.h"
#include "util/log.h"

#define SETTINGS_KEY     "engine.dedup"
#define SETTINGS_VERSION 1
/* version, enabled, hash alg, verify (1 each), chunk size (4), limit_nr (8), limit_mem (8),
 * back-end name length (1) and name. */
#define SETTINGS_FIXED 25
#define SETTINGS_MAX   (SETTINGS_FIXED + sizeof(((struct engine_dedup_config *) 0)->backend))

static void
put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t) v;
}

static uint64_t
get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

static size_t
encode(uint8_t out[SETTINGS_MAX], const struct engine_dedup_config *c)
{
    size_t bl = strnlen(c->backend, sizeof(c->backend) - 1);
    out[0] = SETTINGS_VERSION;
    out[1] = c->enabled;
    out[2] = (uint8_t) c->hash_alg;
    out[3] = c->verify;
    put_be(out + 4, c->default_chunk_size, 4);
    put_be(out + 8, c->limit_nr, 8);
    put_be(out + 16, c->limit_mem, 8);
    out[24] = (uint8_t) bl;
    memcpy(out + SETTINGS_FIXED, c->backend, bl);
    return SETTINGS_FIXED + bl;
}

static int
decode(const uint8_t *v, size_t n, struct engine_dedup_config *c)
{
    if (n < 1)
        return -EBADMSG;
    if (v[0] > SETTINGS_VERSION)
        return -EPROTO;
    if (n < SETTINGS_FIXED || v[24] >= sizeof(c->backend) || n != SETTINGS_FIXED + (size_t) v[24])
        return -EBADMSG;
    memset(c, 0, sizeof(*c));
    c->enabled = v[1] != 0;
    c->hash_alg = (enum dedupd_hash_alg) v[2];
    c->verify = v[3] != 0;
    c->default_chunk_size = (uint32_t) get_be(v + 4, 4);
    c->limit_nr = get_be(v + 8, 8);
    c->limit_mem = get_be(v + 16, 8);
    memcpy(c->backend, v + SETTINGS_FIXED, v[24]);
    return 0;
}

static bool
chunk_size_ok(uint64_t cs)
{
    return cs >= DEDUPD_CHUNK_MIN && cs <= DEDUPD_CHUNK_MAX && (cs & (cs - 1)) == 0;
}

/* Fills defaults for zero fields and checks the rest: 0 or -EINVAL. */
static int
normalize(struct engine_dedup_config *c)
{
    if (!c->backend[0])
        snprintf(c->backend, sizeof(c->backend), "%s", index_backend_names()[0]);
    if (memchr(c->backend, 0, sizeof(c->backend)) == NULL || !index_backend_exists(c->backend))
        return -EINVAL;
    if (c->hash_alg == DEDUPD_HASH_NONE)
        c->hash_alg = DEDUPD_HASH_SHA256;
    if (hash_len(c->hash_alg) == 0)
        return -EINVAL;
    if (c->default_chunk_size == 0)
        c->default_chunk_size = DEDUPD_CHUNK_DEFAULT;
    if (!chunk_size_ok(c->default_chunk_size))
        return -EINVAL;
    /* invariant 6: a non-cryptographic hash never shares without comparing bytes. */
    if (hash_needs_verify(c->hash_alg))
        c->verify = true;
    return 0;
}

static int
persist(struct engine *e, const struct engine_dedup_config *c)
{
    uint8_t val[SETTINGS_MAX];
    size_t n = encode(val, c);
    struct meta_batch *b = meta_batch_new();
    if (!b)
        return -ENOMEM;
    meta_batch_put(b, META_CF_META, SETTINGS_KEY, strlen(SETTINGS_KEY), val, n);
    int rc = meta_batch_commit(e->m, b, true);
    meta_batch_free(b);
    return rc;
}

static int
open_index(struct engine *e, const struct engine_dedup_config *c, struct index **out)
{
    struct index_limits lim = {.limit_nr = c->limit_nr, .limit_mem = c->limit_mem};
    int rc = index_open(c->backend, e->m, &lim, out);
    if (rc < 0)
        log_err("engine: cannot open hash index back-end %s: %s", c->backend, strerror(-rc));
    return rc;
}

int
engine__settings_load(struct engine *e)
{
    struct engine_dedup_config c = {.enabled = true};
    uint8_t val[SETTINGS_MAX];
    ssize_t n = meta_get(e->m, META_CF_META, SETTINGS_KEY, strlen(SETTINGS_KEY), val, sizeof(val));
    int rc;
    if (n == -ENOENT) {
        normalize(&c);
        rc = persist(e, &c); /* explicit from the first open on */
        if (rc < 0)
            return rc;
    } else if (n < 0) {
        return (int) n;
    } else {
        rc = (size_t) n > sizeof(val) ? -EBADMSG : decode(val, (size_t) n, &c);
        if (rc == 0)
            rc = normalize(&c);
        if (rc < 0) {
            log_err("engine: persisted dedup settings unreadable: %s", strerror(-rc));
            return rc == -EINVAL ? -EBADMSG : rc;
        }
    }
    rc = open_index(e, &c, &e->ix);
    if (rc < 0)
        return rc;
    e->cfg = c;
    log_info("engine: dedup %s, back-end %s, hash %s%s, default chunk %u",
             c.enabled ? "enabled" : "disabled", c.backend, hash_name(c.hash_alg),
             c.verify ? " + verify" : "", c.default_chunk_size);
    return 0;
}

void
engine__settings_fini(struct engine *e)
{
    index_close(e->ix);
    e->ix = NULL;
}

void
engine_dedup_get(struct engine *e, struct engine_dedup_config *out)
{
    pthread_rwlock_rdlock(&e->settings_lock);
    *out = e->cfg;
    pthread_rwlock_unlock(&e->settings_lock);
}

int
engine_dedup_set(struct engine *e, const struct engine_dedup_config *cfg)
{
    struct engine_dedup_config c = *cfg;
    int rc = normalize(&c);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&e->set_mu);
    struct engine_dedup_config old = e->cfg; /* only set_mu holders change it */
    struct index *nix = NULL;
    bool new_index =
        strcmp(old.backend, c.backend) != 0 ||
        (!index_persistent(e->ix) && (old.limit_nr != c.limit_nr || old.limit_mem != c.limit_mem));
    if (new_index) {
        rc = open_index(e, &c, &nix);
        if (rc < 0)
            goto out;
    }
    rc = persist(e, &c);
    if (rc < 0) {
        index_close(nix);
        goto out;
    }
    /* Waits for every write in flight (they hold the read side) to finish under old. */
    pthread_rwlock_wrlock(&e->settings_lock);
    struct index *oix = NULL;
    e->cfg = c;
    if (nix) {
        oix = e->ix;
        e->ix = nix;
    }
    pthread_rwlock_unlock(&e->settings_lock);
    index_close(oix);
    log_info("engine: dedup set: %s, back-end %s, hash %s%s, default chunk %u",
             c.enabled ? "enabled" : "disabled", c.backend, hash_name(c.hash_alg),
             c.verify ? " + verify" : "", c.default_chunk_size);
out:
    pthread_mutex_unlock(&e->set_mu);
    return rc;
}

void
engine_index_usage(struct engine *e, struct engine_index_usage *out)
{
    struct index_usage u;
    pthread_rwlock_rdlock(&e->settings_lock);
    index_usage(e->ix, &u);
    pthread_rwlock_unlock(&e->settings_lock);
    out->entries = u.entries;
    out->bytes = u.bytes;
    out->limit_nr = u.limit_nr;
    out->limit_mem = u.limit_mem;
    out->evictions = u.evictions;
    out->mem_entry_bytes = INDEX_MEMORY_ENTRY_BYTES + sizeof(uint32_t);
    out->mem_default_limit_nr = INDEX_MEMORY_DEFAULT_LIMIT_NR;
    out->filter_bytes = u.filter_bytes;
    out->filter_building_bytes = u.filter_building_bytes;
    out->filter_builds = u.filter_builds;
    out->filter_skips = u.filter_skips;
}
