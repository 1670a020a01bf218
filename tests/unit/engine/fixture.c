/* fixture.c: see fixture.h. */
#include "fixture.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>

#include "store/store.h"

static int
rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    return remove(path);
}

static void
open_engine(struct fx *f)
{
    struct engine_options o = {
        .data_dir = f->dir,
        .seg_bytes = 8ULL << 20,
        .block_cache_bytes = 8ULL << 20,
        .default_export = "disk",
        .default_export_size = FX_SIZE,
    };
    cr_assert_eq(engine_open(&o, &f->e), 0);
    cr_assert_eq(engine_export_open(f->e, "", &f->ex), 0);
}

void
fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    strcpy(f->dir, "/tmp/dd-engine-XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir));
    open_engine(f);
}

void
fx_reopen(struct fx *f)
{
    engine_export_close(f->ex);
    engine_close(f->e);
    open_engine(f);
}

void
fx_check(struct fx *f)
{
    struct store_check_result r;
    cr_assert_eq(store_check(engine_store(f->e), false, NULL, NULL, NULL, &r), 0);
    cr_assert_eq(r.problems, 0, "store check found %llu problems", (unsigned long long) r.problems);
}

void
fx_close(struct fx *f)
{
    fx_check(f);
    engine_export_close(f->ex);
    engine_close(f->e);
    nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

void
fx_fill(void *buf, size_t n, uint32_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t) (x | 1); /* never zero: a filled chunk is never a zero chunk */
    }
}

uint64_t
fx_chunks(struct fx *f)
{
    struct store_stats s;
    cr_assert_eq(store_stats(engine_store(f->e), &s), 0);
    return s.chunks;
}

void
fx_set_backend(struct fx *f, const char *backend)
{
    struct engine_dedup_config c;
    engine_dedup_get(f->e, &c);
    snprintf(c.backend, sizeof(c.backend), "%s", backend);
    cr_assert_eq(engine_dedup_set(f->e, &c), 0);
}
