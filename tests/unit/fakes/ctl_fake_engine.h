/* ctl_fake_engine: in-memory engine + store + nbd stand-in for ctl tests (see fake_engine.c). */
#ifndef DD_FAKES_CTL_FAKE_ENGINE_H
#define DD_FAKES_CTL_FAKE_ENGINE_H

#include <stdint.h>

#include "engine/engine.h"
#include "fakes/ctl_fake_nbd.h"

/* Resets the fake: dedup on (rocksdb, sha256, 4 KiB), one export "default". */
struct engine *fake_engine_new(void);
/* Open handles on an export (delete refuses with -EBUSY while non-zero). */
void fake_engine_set_open_handles(const char *name, uint32_t n);
/* Make engine_dedup_set fail with err (0 = succeed). */
void fake_engine_fail_dedup_set(int err);
int fake_engine_dedup_set_calls(void);
/* store_stats reports this sync_error (-errno; 0 = none). */
void fake_engine_set_sync_error(int err);
/* gc/scrub/check report `steps` progress updates, sleeping sleep_ms before each. */
void fake_engine_maint(unsigned steps, int sleep_ms);

#endif
