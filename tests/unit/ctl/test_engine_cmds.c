/* Every ctl handler against the real engine and store in a temp dir, through the socket:
 * settings persist across a reopen, the catalogue changes, counters move with real writes,
 * gc/scrub/check report on real segments (scrub finds a flipped byte). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedupd/version.h"
#include "engine/engine.h"
#include "harness.h"

static struct harness h;
static char data_dir[64];
static struct engine *eng;
static int fd = -1;

static void
open_engine(void)
{
    struct engine_options eo = {
        .data_dir = data_dir,
        .seg_bytes = 64 << 10, /* small segments: writes seal some, so gc has work */
        .default_export = "default",
        .default_export_size = 64 << 20,
    };
    cr_assert_eq(engine_open(&eo, &eng), 0);
    cr_assert_eq(harness_start(&h, eng, NULL, 0), 0);
    fd = client_connect(h.path);
    cr_assert_geq(fd, 0);
}

static void
close_engine(void)
{
    close(fd);
    fd = -1;
    harness_stop(&h);
    engine_close(eng);
    eng = NULL;
}

static int
rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb, (void) flag, (void) ftw;
    return remove(p);
}

static void
setup(void)
{
    strcpy(data_dir, "/tmp/dd-ctl-engine.XXXXXX");
    cr_assert_not_null(mkdtemp(data_dir));
    open_engine();
}

static void
teardown(void)
{
    if (eng)
        close_engine();
    nftw(data_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(engine_cmds, .init = setup, .fini = teardown);

static Dedupd__Response *
call(Dedupd__Request *req)
{
    req->version = DEDUPD_CTL_PROTO_VERSION;
    int progress;
    Dedupd__Response *r = client_call(fd, req, &progress);
    cr_assert_not_null(r);
    return r;
}

static Dedupd__Response *
ok(Dedupd__Request *req, Dedupd__Response__ResultCase want)
{
    Dedupd__Response *r = call(req);
    cr_assert_eq(r->status, 0, "status %d: %s", r->status, r->message);
    cr_assert_eq(r->result_case, want);
    return r;
}

static Dedupd__Response *
status(void)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatusRequest q = DEDUPD__STATUS_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    req.status = &q;
    return ok(&req, DEDUPD__RESPONSE__RESULT_STATUS_RESULT);
}

static Dedupd__StatsResult *
stats(Dedupd__Response **keep)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__StatsRequest q = DEDUPD__STATS_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_STATS;
    req.stats = &q;
    *keep = ok(&req, DEDUPD__RESPONSE__RESULT_STATS_RESULT);
    return (*keep)->stats_result;
}

static void
write_pattern(const char *export_name, uint64_t off, uint32_t len, uint8_t seed)
{
    struct engine_export *ex;
    cr_assert_eq(engine_export_open(eng, export_name, &ex), 0);
    uint8_t *buf = malloc(len);
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (uint8_t) (seed + i * 7 + i / 4096);
    cr_assert_eq(engine_write(ex, off, len, buf, 0), 0);
    free(buf);
    cr_assert_eq(engine_flush(eng), 0);
    engine_export_close(ex);
}

Test(engine_cmds, status_on_a_fresh_directory)
{
    Dedupd__Response *r = status();
    Dedupd__StatusResult *s = r->status_result;
    cr_assert_str_eq(s->version, DEDUPD_VERSION);
    cr_assert(s->enabled);
    cr_assert_str_eq(s->backend, "rocksdb");
    cr_assert_str_eq(s->hash, "sha256");
    cr_assert_eq(s->default_chunk_size, 4096);
    cr_assert_eq(s->exports, 1);
    cr_assert_eq(s->unique_chunks, 0);
    cr_assert_gt(s->limit_nr, 0, "the memory back-end limit in force is reported");
    cr_assert_gt(s->memory_at_limit, 0);
    dedupd__response__free_unpacked(r, NULL);
}

Test(engine_cmds, enable_and_disable_persist_across_reopen)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__EnableRequest en = DEDUPD__ENABLE_REQUEST__INIT;
    Dedupd__U64 lim = DEDUPD__U64__INIT;
    lim.value = 1000;
    en.backend = "memory";
    en.limit_nr = &lim;
    en.chunk_size = 16384;
    req.cmd_case = DEDUPD__REQUEST__CMD_ENABLE;
    req.enable = &en;
    dedupd__response__free_unpacked(ok(&req, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT), NULL);
    close_engine();
    open_engine();
    Dedupd__Response *r = status();
    cr_assert_str_eq(r->status_result->backend, "memory");
    cr_assert_eq(r->status_result->limit_nr, 1000);
    cr_assert_eq(r->status_result->default_chunk_size, 16384);
    cr_assert(r->status_result->enabled);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__Request dreq = DEDUPD__REQUEST__INIT;
    Dedupd__DisableRequest dq = DEDUPD__DISABLE_REQUEST__INIT;
    dreq.cmd_case = DEDUPD__REQUEST__CMD_DISABLE;
    dreq.disable = &dq;
    dedupd__response__free_unpacked(ok(&dreq, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT), NULL);
    close_engine();
    open_engine();
    r = status();
    cr_assert(!r->status_result->enabled);
    cr_assert_str_eq(r->status_result->backend, "memory", "disable keeps the settings");
    dedupd__response__free_unpacked(r, NULL);
}

Test(engine_cmds, export_lifecycle_and_busy_delete)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__ExportCreateRequest c = DEDUPD__EXPORT_CREATE_REQUEST__INIT;
    c.name = "vm1";
    c.size = 8 << 20;
    c.chunk_size = 65536;
    req.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_CREATE;
    req.export_create = &c;
    Dedupd__Response *r = ok(&req, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert_eq(r->export_result->export->size, 8 << 20);
    cr_assert_eq(r->export_result->export->chunk_size, 65536);
    dedupd__response__free_unpacked(r, NULL);
    r = call(&req);
    cr_assert_eq(r->status, EEXIST);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__Request lreq = DEDUPD__REQUEST__INIT;
    Dedupd__ExportListRequest l = DEDUPD__EXPORT_LIST_REQUEST__INIT;
    lreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_LIST;
    lreq.export_list = &l;
    r = ok(&lreq, DEDUPD__RESPONSE__RESULT_EXPORT_LIST_RESULT);
    cr_assert_eq(r->export_list_result->n_exports, 2);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    Dedupd__ExportSetRequest s = DEDUPD__EXPORT_SET_REQUEST__INIT;
    s.name = "vm1";
    s.dedup = DEDUPD__TOGGLE__OFF;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_SET;
    sreq.export_set = &s;
    r = ok(&sreq, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert(!r->export_result->export->dedup);
    dedupd__response__free_unpacked(r, NULL);

    struct engine_export *ex;
    cr_assert_eq(engine_export_open(eng, "vm1", &ex), 0);
    Dedupd__Request dreq = DEDUPD__REQUEST__INIT;
    Dedupd__ExportDeleteRequest d = DEDUPD__EXPORT_DELETE_REQUEST__INIT;
    d.name = "vm1";
    dreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_DELETE;
    dreq.export_delete = &d;
    r = call(&dreq);
    cr_assert_eq(r->status, EBUSY, "delete while open: %d %s", r->status, r->message);
    dedupd__response__free_unpacked(r, NULL);
    engine_export_close(ex);
    r = call(&dreq);
    cr_assert_eq(r->status, 0, "%s", r->message);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__Request ireq = DEDUPD__REQUEST__INIT;
    Dedupd__ExportInfoRequest i = DEDUPD__EXPORT_INFO_REQUEST__INIT;
    i.name = "vm1";
    ireq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_INFO;
    ireq.export_info = &i;
    r = call(&ireq);
    cr_assert_eq(r->status, ENOENT);
    dedupd__response__free_unpacked(r, NULL);
}

Test(engine_cmds, stats_follow_real_writes)
{
    /* The same 64 KiB twice: 16 chunks stored once, referenced twice. */
    write_pattern("default", 0, 65536, 1);
    write_pattern("default", 1 << 20, 65536, 1);
    Dedupd__Response *keep;
    Dedupd__StatsResult *s = stats(&keep);
    cr_assert_eq(s->n_exports, 1);
    cr_assert_eq(s->total->logical_bytes, 2 * 65536);
    cr_assert_eq(s->total->unique_bytes, 65536);
    cr_assert_float_eq(s->total->dedup_ratio, 2.0, 1e-9);
    cr_assert_geq(s->total->dedup_hits, 16);
    cr_assert_eq(s->chunks, 16);
    cr_assert_eq(s->chunks_shared, 16);
    cr_assert_float_eq(s->compression_ratio, 1.0, 1e-9);
    dedupd__response__free_unpacked(keep, NULL);
    Dedupd__Response *r = status();
    cr_assert_eq(r->status_result->unique_chunks, 16);
    cr_assert_gt(r->status_result->rocksdb_index_estimate, 0);
    dedupd__response__free_unpacked(r, NULL);
}

Test(engine_cmds, gc_reclaims_overwritten_data_with_progress)
{
    /* 256 KiB of distinct chunks over 64 KiB segments, then overwritten: dead bytes. */
    for (int round = 0; round < 2; round++)
        write_pattern("default", 0, 256 << 10, (uint8_t) (round * 100 + 3));
    Dedupd__Response *keep;
    Dedupd__StatsResult *s = stats(&keep);
    uint64_t dead_before = s->dead_bytes;
    dedupd__response__free_unpacked(keep, NULL);
    cr_assert_gt(dead_before, 0, "overwrites leave dead bytes");

    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__GcRequest q = DEDUPD__GC_REQUEST__INIT;
    q.force = true;
    req.cmd_case = DEDUPD__REQUEST__CMD_GC;
    req.gc = &q;
    Dedupd__Response *r = ok(&req, DEDUPD__RESPONSE__RESULT_GC_RESULT);
    cr_assert_gt(r->gc_result->segments_compacted, 0);
    cr_assert_gt(r->gc_result->bytes_reclaimed, 0);
    cr_assert_lt(r->gc_result->disk_bytes_after, r->gc_result->disk_bytes_before);
    dedupd__response__free_unpacked(r, NULL);
    s = stats(&keep);
    cr_assert_lt(s->dead_bytes, dead_before);
    cr_assert_eq(s->total->logical_bytes, 256 << 10, "live data untouched by gc");
    dedupd__response__free_unpacked(keep, NULL);
}

Test(engine_cmds, check_and_scrub_a_healthy_store)
{
    write_pattern("default", 0, 65536, 9);
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__CheckRequest c = DEDUPD__CHECK_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_CHECK;
    req.check = &c;
    Dedupd__Response *r = ok(&req, DEDUPD__RESPONSE__RESULT_CHECK_RESULT);
    cr_assert_eq(r->check_result->problems, 0);
    cr_assert_eq(r->check_result->chunks, 16);
    cr_assert_eq(r->check_result->map_entries, 16);
    cr_assert_eq(r->check_result->n_findings, 0);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    Dedupd__ScrubRequest s = DEDUPD__SCRUB_REQUEST__INIT;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_SCRUB;
    sreq.scrub = &s;
    r = ok(&sreq, DEDUPD__RESPONSE__RESULT_SCRUB_RESULT);
    cr_assert_eq(r->scrub_result->chunks, 16);
    cr_assert_eq(r->scrub_result->bytes, 65536);
    cr_assert_eq(r->scrub_result->crc_errors + r->scrub_result->hash_errors, 0);
    dedupd__response__free_unpacked(r, NULL);
}

/* Flips one byte in the middle of the oldest segment file, under the running server, as
 * bit rot would. (Done before a reopen, the store's recovery may drop the chunk instead.) */
static void
corrupt_first_segment(void)
{
    char segdir[128], path[400] = "";
    snprintf(segdir, sizeof(segdir), "%s/segments", data_dir);
    DIR *d = opendir(segdir);
    cr_assert_not_null(d);
    struct dirent *de;
    char best[256] = "";
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && (!best[0] || strcmp(de->d_name, best) < 0))
            snprintf(best, sizeof(best), "%s", de->d_name);
    closedir(d);
    cr_assert_neq(best[0], '\0');
    snprintf(path, sizeof(path), "%s/%s", segdir, best);
    int f = open(path, O_RDWR);
    cr_assert_geq(f, 0);
    off_t mid = lseek(f, 0, SEEK_END) / 2;
    cr_assert_gt(mid, 4096);
    uint8_t b;
    cr_assert_eq(pread(f, &b, 1, mid), 1);
    b ^= 0x5a;
    cr_assert_eq(pwrite(f, &b, 1, mid), 1);
    close(f);
}

Test(engine_cmds, scrub_reports_a_flipped_byte)
{
    write_pattern("default", 0, 256 << 10, 11); /* 64 chunks over 64 KiB segments */
    corrupt_first_segment();
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__ScrubRequest s = DEDUPD__SCRUB_REQUEST__INIT;
    req.cmd_case = DEDUPD__REQUEST__CMD_SCRUB;
    req.scrub = &s;
    Dedupd__Response *r = ok(&req, DEDUPD__RESPONSE__RESULT_SCRUB_RESULT);
    Dedupd__ScrubResult *sr = r->scrub_result;
    cr_assert_geq(sr->crc_errors + sr->hash_errors + sr->io_errors, 1, "scrub missed the flip");
    cr_assert_geq(sr->n_findings, 1);
    cr_assert(strstr(sr->findings[0], "seg") || strstr(sr->findings[0], "chunk"), "%s",
              sr->findings[0]);
    dedupd__response__free_unpacked(r, NULL);
}
