/* A randomized model test: thousands of seeded random writes, trims, zeroes and reads on
 * two exports (4 KiB and 16 KiB chunks) against shadow copies in memory, with a few
 * duplicate-rich patterns so chunks are shared within and across exports, random live
 * settings switches (back-end, hash, verify, enable, limits, per-export dedup), full
 * compactions and a restart on the way; every read is checked, and at the end the store's
 * check proves refcounts and index entries. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "store/store.h"

#define REGION   (512u << 10) /* the part of each export the model uses */
#define PATTERNS 16
#define OPS      3000

static uint8_t pat[PATTERNS][4096];

static uint64_t rnd_state;

static uint32_t
rnd(uint32_t n)
{
    rnd_state = rnd_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t) ((rnd_state >> 33) % n);
}

/* Data laid out on 4 KiB blocks of absolute offsets, each block one pattern or zeros, so
 * equal blocks recur at many offsets (and whole chunks repeat, in both chunk sizes). */
static void
gen(uint8_t *buf, uint64_t off, uint32_t len)
{
    uint32_t done = 0;
    while (done < len) {
        uint64_t pos = off + done;
        uint32_t in_block = (uint32_t) (pos % 4096), n = 4096 - in_block;
        if (n > len - done)
            n = len - done;
        uint32_t s = rnd(PATTERNS + 4);
        if (s >= PATTERNS)
            memset(buf + done, 0, n);
        else
            memcpy(buf + done, pat[s] + in_block, n);
        done += n;
    }
}

struct target {
    struct engine_export *ex;
    uint8_t *shadow;
    const char *name;
};

static void
verify_all(struct target *t)
{
    uint8_t *got = malloc(REGION);
    cr_assert_eq(engine_read(t->ex, 0, REGION, got), 0);
    cr_assert(!memcmp(got, t->shadow, REGION), "export %s differs from its shadow", t->name);
    free(got);
}

static void
one_op(struct target *t, int op)
{
    static uint8_t buf[64 << 10], got[64 << 10];
    uint32_t len = 1 + rnd(rnd(4) == 0 ? sizeof(buf) : 3 * 4096);
    uint64_t off = rnd(REGION - len + 1);
    if (rnd(3) == 0) /* favour aligned requests, as file systems send */
        off -= off % 4096;
    switch (rnd(10)) {
    case 0:
        cr_assert_eq(engine_trim(t->ex, off, len, 0), 0, "op %d trim", op);
        memset(t->shadow + off, 0, len);
        break;
    case 1:
        cr_assert_eq(engine_zero(t->ex, off, len, 0), 0, "op %d zero", op);
        memset(t->shadow + off, 0, len);
        break;
    case 2:
    case 3:
    case 4:
        cr_assert_eq(engine_read(t->ex, off, len, got), 0, "op %d read", op);
        cr_assert(!memcmp(got, t->shadow + off, len), "op %d: read of %s at %llu+%u differs", op,
                  t->name, (unsigned long long) off, len);
        break;
    default:
        gen(buf, off, len);
        cr_assert_eq(engine_write(t->ex, off, len, buf, rnd(20) == 0 ? ENGINE_FUA : 0), 0,
                     "op %d write", op);
        memcpy(t->shadow + off, buf, len);
    }
}

/* Any combination the engine accepts, switched live between requests. */
static void
random_settings(struct fx *f)
{
    struct engine_dedup_config c;
    engine_dedup_get(f->e, &c);
    snprintf(c.backend, sizeof(c.backend), "%s", rnd(2) ? "memory" : "rocksdb");
    c.enabled = rnd(4) != 0;
    c.hash_alg = rnd(3) ? DEDUPD_HASH_SHA256 : DEDUPD_HASH_XXH3_128;
    c.verify = rnd(2);
    c.limit_nr = rnd(2) ? 0 : 1 + rnd(64); /* a tiny table evicts all the time */
    cr_assert_eq(engine_dedup_set(f->e, &c), 0);
    cr_assert_eq(engine_export_set_dedup(f->e, rnd(2) ? "disk" : "big", rnd(3) != 0), 0);
}

static void
open_targets(struct fx *f, struct target t[2])
{
    t[0].ex = f->ex;
    cr_assert_eq(engine_export_open(f->e, "big", &t[1].ex), 0);
}

static void
model_run(uint64_t seed)
{
    rnd_state = seed;
    for (int i = 0; i < PATTERNS; i++)
        fx_fill(pat[i], sizeof(pat[i]), 1000 + i);
    struct fx f;
    fx_seg_bytes = 128 << 10; /* many sealed segments for compaction to move */
    fx_open(&f);
    cr_assert_eq(engine_export_create(f.e, "big", REGION, 16 << 10, 0, NULL), 0);
    struct target t[2] = {{.name = "disk"}, {.name = "big"}};
    for (int i = 0; i < 2; i++)
        t[i].shadow = calloc(1, REGION);
    open_targets(&f, t);
    for (int op = 0; op < OPS; op++) {
        one_op(&t[rnd(2)], op);
        if (op % 400 == 399)
            random_settings(&f);
        if (op % 1000 == 500) {
            /* Move every live record: chunk ids, maps and index entries must not care. */
            struct store_compact_result cr;
            cr_assert_eq(store_compact(engine_store(f.e), true, NULL, NULL, &cr), 0);
            cr_assert_gt(cr.segments_compacted, 0);
            verify_all(&t[0]);
            verify_all(&t[1]);
        }
        if (op == 2 * OPS / 3) {
            engine_export_close(t[1].ex);
            fx_reopen(&f);
            open_targets(&f, t);
            verify_all(&t[0]);
            verify_all(&t[1]);
            fx_check(&f);
        }
    }
    verify_all(&t[0]);
    verify_all(&t[1]);
    struct engine_stats s;
    cr_assert_eq(engine_stats(f.e, NULL, &s), 0);
    cr_assert_gt(s.dedup_hits, 0, "the patterns must produce sharing");
    cr_assert_gt(s.rmw_count, 0);
    cr_assert_leq(s.unique_bytes, s.logical_bytes);
    engine_export_close(t[1].ex);
    for (int i = 0; i < 2; i++)
        free(t[i].shadow);
    fx_close(&f);
}

Test(model, random_ops_match_the_shadow_seed_1)
{
    model_run(1);
}

Test(model, random_ops_match_the_shadow_seed_2)
{
    model_run(0xdeadbeef);
}
