/* Shared set-up for the engine tests: an engine on a fresh temp directory, an open handle
 * on its default export, deterministic data, and the store's invariant check. */
#ifndef DD_TESTS_ENGINE_FIXTURE_H
#define DD_TESTS_ENGINE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

struct fx {
    char dir[64];
    struct engine *e;
    struct engine_export *ex; /* the default export "disk" */
};

#define FX_SIZE (64ULL << 20) /* default export: 64 MiB, 4 KiB chunks */
/* Segment size of the next fx_open/fx_reopen (default 8 MiB; small ones make compaction
 * have sealed segments to work on). */
extern uint64_t fx_seg_bytes;

void fx_open(struct fx *f);
/* Closes the handle and the engine, opens both again on the same directory. */
void fx_reopen(struct fx *f);
/* Runs fx_check, closes everything, removes the directory. */
void fx_close(struct fx *f);
/* Only removes the directory (for tests that closed or never opened the engine). */
void fx_remove_dir(struct fx *f);

/* Deterministic, non-zero bytes for seed. */
void fx_fill(void *buf, size_t n, uint32_t seed);
/* Live chunks in the store. */
uint64_t fx_chunks(struct fx *f);
/* Asserts invariants 1 and 2 over the metadata (refcounts = map entries; hash entries
 * name live chunks with that hash), then that store_check finds no problem. */
void fx_check(struct fx *f);
/* An engine_hash_fn under which every chunk hashes alike (engine_test_set_hash_fn): the
 * collision that verify exists for. */
int fx_colliding_hash(enum dedupd_hash_alg alg, const void *buf, size_t len,
                      uint8_t out[DEDUPD_HASH_MAX_LEN]);
/* Switches the hash-index back-end, keeping the other settings. */
void fx_set_backend(struct fx *f, const char *backend);

#endif
