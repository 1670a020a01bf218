/* scrub: reads every live record and verifies its CRC (via store_chunk_read, which also
 * checks the header against the chunk entry) and its hash (util/hash.h). Changes nothing.
 * Runs beside normal traffic: chunks freed while it runs are skipped. */
#include "store/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/log.h"

static void
report(store_finding_fn fn, void *arg, const char *line)
{
    log_warn("store: scrub: %s", line);
    if (fn)
        fn(arg, line);
}

int
store_scrub(struct store *st, store_progress_fn progress, store_finding_fn finding, void *arg,
            struct store_scrub_result *out)
{
    struct store_scrub_result res = {0};
    struct store_progress prog = {0};
    pthread_mutex_lock(&st->stat_lock);
    prog.total = st->cnt.stored_bytes;
    pthread_mutex_unlock(&st->stat_lock);
    uint8_t *buf = malloc(DEDUPD_CHUNK_MAX);
    struct meta_iter *it = meta_iter_new(st->meta, META_CF_CHUNK);
    int rc = 0;
    if (!buf || !it) {
        rc = -ENOMEM;
        goto out;
    }
    char line[256];
    for (meta_iter_seek_first(it); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl, vl;
        const void *k = meta_iter_key(it, &kl);
        const void *v = meta_iter_value(it, &vl);
        uint64_t id;
        struct meta_chunk_rec r;
        if (meta_key_chunk_decode(k, kl, &id) || meta_chunk_rec_decode(v, vl, &r)) {
            res.io_errors++;
            report(finding, arg, "malformed chunk entry");
            continue;
        }
        ssize_t n = store_chunk_read(st, id, buf, DEDUPD_CHUNK_MAX);
        if (n == -ENOENT)
            continue; /* freed since the snapshot */
        res.chunks++;
        if (n == -EUCLEAN) {
            res.crc_errors++;
            snprintf(line, sizeof(line),
                     "chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64 ": crc mismatch", id, r.seg,
                     r.off);
            report(finding, arg, line);
        } else if (n < 0) {
            res.io_errors++;
            snprintf(line, sizeof(line),
                     "chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64 ": read error: %s", id, r.seg,
                     r.off, strerror((int) -n));
            report(finding, arg, line);
        } else {
            res.bytes += (uint64_t) n;
            uint8_t h[DEDUPD_HASH_MAX_LEN];
            if (r.hash_alg && (hash_compute((enum dedupd_hash_alg) r.hash_alg, buf, (size_t) n,
                                            h) != r.hash_len ||
                               memcmp(h, r.hash, r.hash_len) != 0)) {
                res.hash_errors++;
                snprintf(line, sizeof(line),
                         "chunk %" PRIu64 " seg %" PRIu32 " off %" PRIu64
                         ": bytes do not match the recorded hash",
                         id, r.seg, r.off);
                report(finding, arg, line);
            }
        }
        prog.done += r.stored_len;
        if (progress && progress(arg, &prog)) {
            rc = -ECANCELED;
            break;
        }
    }
    if (rc == 0)
        rc = meta_iter_status(it);
    log_info("store: scrub: %" PRIu64 " chunks, %" PRIu64 " bytes: %" PRIu64 " crc, %" PRIu64
             " hash, %" PRIu64 " I/O errors",
             res.chunks, res.bytes, res.crc_errors, res.hash_errors, res.io_errors);
out:
    meta_iter_free(it);
    free(buf);
    if (out)
        *out = res;
    return rc;
}
