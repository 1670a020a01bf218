/* ctl handlers through the socket with the fake engine: each command's arguments reach the
 * engine, its results come back in the right fields, and its errors carry errno + message. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "dedupd/version.h"
#include "fakes/ctl_fake_engine.h"
#include "harness.h"

static struct harness h;
static int fd = -1;

static void
setup(void)
{
    struct engine *e = fake_engine_new(); /* resets the fake: before fake_nbd() */
    cr_assert_eq(harness_start(&h, e, fake_nbd(3), 0), 0);
    fd = client_connect(h.path);
    cr_assert_geq(fd, 0);
}

static void
teardown(void)
{
    close(fd);
    harness_stop(&h);
}

TestSuite(cmd, .init = setup, .fini = teardown);

#define REQ(field, CASE, msg)                                                                      \
    Dedupd__Request req = DEDUPD__REQUEST__INIT;                                                   \
    req.version = DEDUPD_CTL_PROTO_VERSION;                                                        \
    req.cmd_case = DEDUPD__REQUEST__CMD_##CASE;                                                    \
    req.field = (msg)

static Dedupd__Response *
call_ok(const Dedupd__Request *req, Dedupd__Response__ResultCase want)
{
    Dedupd__Response *r = client_call(fd, req, NULL);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, 0, "status %d: %s", r->status, r->message);
    cr_assert_eq(r->result_case, want);
    return r;
}

static int
call_err(const Dedupd__Request *req, const char *needle)
{
    Dedupd__Response *r = client_call(fd, req, NULL);
    cr_assert_not_null(r);
    int st = r->status;
    if (needle)
        cr_assert(strstr(r->message, needle), "message '%s' lacks '%s'", r->message, needle);
    dedupd__response__free_unpacked(r, NULL);
    return st;
}

Test(cmd, status_reports_settings_usage_and_estimates)
{
    Dedupd__StatusRequest q = DEDUPD__STATUS_REQUEST__INIT;
    REQ(status, STATUS, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_STATUS_RESULT);
    Dedupd__StatusResult *s = r->status_result;
    cr_assert_str_eq(s->version, DEDUPD_VERSION);
    cr_assert_eq(s->protocol, DEDUPD_CTL_PROTO_VERSION);
    cr_assert(s->enabled);
    cr_assert_str_eq(s->backend, "rocksdb");
    cr_assert_str_eq(s->hash, "sha256");
    cr_assert_eq(s->default_chunk_size, 4096);
    cr_assert_eq(s->limit_nr, 32768);
    cr_assert_eq(s->index_entries, 10);
    cr_assert_eq(s->nbd_connections, 3);
    cr_assert_eq(s->nbd_loops, FAKE_NBD_LOOPS);
    cr_assert_eq(s->exports, 1);
    cr_assert_eq(s->unique_chunks, 3);
    /* No memory back-end running: the engine's per-entry figure (fake: 44 B) at the limit. */
    cr_assert_eq(s->memory_at_limit, 32768ULL * 44);
    /* rocksdb running: measured 600 B / 10 entries, times 3 unique chunks. */
    cr_assert_eq(s->rocksdb_index_estimate, 180);
    cr_assert_eq(s->sync_error, 0);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, status_reports_a_failed_segment_sync_as_a_positive_errno)
{
    fake_engine_set_sync_error(-EIO);
    Dedupd__StatusRequest q = DEDUPD__STATUS_REQUEST__INIT;
    REQ(status, STATUS, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_STATUS_RESULT);
    cr_assert_eq(r->status_result->sync_error, EIO);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, enable_applies_given_options_and_keeps_the_rest)
{
    Dedupd__EnableRequest q = DEDUPD__ENABLE_REQUEST__INIT;
    Dedupd__U64 lim = DEDUPD__U64__INIT;
    lim.value = 1000;
    q.backend = "memory";
    q.limit_nr = &lim;
    REQ(enable, ENABLE, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT);
    cr_assert(r->dedup_result->enabled);
    cr_assert_str_eq(r->dedup_result->backend, "memory");
    cr_assert_str_eq(r->dedup_result->hash, "sha256");
    cr_assert_eq(r->dedup_result->limit_nr, 1000);
    cr_assert_eq(r->dedup_result->default_chunk_size, 4096);
    dedupd__response__free_unpacked(r, NULL);

    /* Status now measures the memory back-end: 800 B / 10 entries = 80, times the limit. */
    Dedupd__StatusRequest sq = DEDUPD__STATUS_REQUEST__INIT;
    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    sreq.version = DEDUPD_CTL_PROTO_VERSION;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_STATUS;
    sreq.status = &sq;
    r = call_ok(&sreq, DEDUPD__RESPONSE__RESULT_STATUS_RESULT);
    cr_assert_eq(r->status_result->memory_at_limit, 80 * 1000);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, enable_xxh3_forces_verify_and_refuses_verify_off)
{
    Dedupd__EnableRequest q = DEDUPD__ENABLE_REQUEST__INIT;
    q.hash = "xxh3";
    q.verify = DEDUPD__TOGGLE__OFF;
    REQ(enable, ENABLE, &q);
    cr_assert_eq(call_err(&req, "verify is mandatory"), EINVAL);
    cr_assert_eq(fake_engine_dedup_set_calls(), 0);
    q.verify = DEDUPD__TOGGLE__KEEP;
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT);
    cr_assert_str_eq(r->dedup_result->hash, "xxh3");
    cr_assert(r->dedup_result->verify);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, enable_rejects_bad_arguments_before_the_engine)
{
    Dedupd__EnableRequest q = DEDUPD__ENABLE_REQUEST__INIT;
    REQ(enable, ENABLE, &q);
    q.backend = "floppy";
    cr_assert_eq(call_err(&req, "unknown back-end"), EINVAL);
    q.backend = "";
    q.hash = "md5";
    cr_assert_eq(call_err(&req, "unknown hash"), EINVAL);
    q.hash = "";
    q.chunk_size = 12288;
    cr_assert_eq(call_err(&req, "power of two"), EINVAL);
    cr_assert_eq(fake_engine_dedup_set_calls(), 0);
}

Test(cmd, engine_refusal_is_reported)
{
    fake_engine_fail_dedup_set(-EIO);
    Dedupd__DisableRequest q = DEDUPD__DISABLE_REQUEST__INIT;
    REQ(disable, DISABLE, &q);
    cr_assert_eq(call_err(&req, "cannot disable"), EIO);
}

Test(cmd, disable_then_enable)
{
    Dedupd__DisableRequest q = DEDUPD__DISABLE_REQUEST__INIT;
    REQ(disable, DISABLE, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT);
    cr_assert(!r->dedup_result->enabled);
    cr_assert_str_eq(r->dedup_result->backend, "rocksdb");
    dedupd__response__free_unpacked(r, NULL);
    Dedupd__EnableRequest e = DEDUPD__ENABLE_REQUEST__INIT;
    Dedupd__Request req2 = DEDUPD__REQUEST__INIT;
    req2.version = DEDUPD_CTL_PROTO_VERSION;
    req2.cmd_case = DEDUPD__REQUEST__CMD_ENABLE;
    req2.enable = &e;
    r = call_ok(&req2, DEDUPD__RESPONSE__RESULT_DEDUP_RESULT);
    cr_assert(r->dedup_result->enabled);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, export_create_list_info_set_clone_delete)
{
    Dedupd__ExportCreateRequest c = DEDUPD__EXPORT_CREATE_REQUEST__INIT;
    c.name = "vm1";
    c.size = 1ULL << 30;
    c.chunk_size = 65536;
    c.read_only = true;
    REQ(export_create, EXPORT_CREATE, &c);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert_str_eq(r->export_result->export->name, "vm1");
    cr_assert_eq(r->export_result->export->chunk_size, 65536);
    cr_assert(r->export_result->export->read_only);
    cr_assert(r->export_result->export->dedup);
    dedupd__response__free_unpacked(r, NULL);
    cr_assert_eq(call_err(&req, "already exists"), EEXIST);

    Dedupd__ExportListRequest l = DEDUPD__EXPORT_LIST_REQUEST__INIT;
    Dedupd__Request lreq = DEDUPD__REQUEST__INIT;
    lreq.version = DEDUPD_CTL_PROTO_VERSION;
    lreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_LIST;
    lreq.export_list = &l;
    r = call_ok(&lreq, DEDUPD__RESPONSE__RESULT_EXPORT_LIST_RESULT);
    cr_assert_eq(r->export_list_result->n_exports, 2);
    cr_assert_str_eq(r->export_list_result->exports[0]->name, "default");
    cr_assert(r->export_list_result->exports[0]->is_default);
    cr_assert(!r->export_list_result->exports[1]->is_default);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__ExportSetRequest s = DEDUPD__EXPORT_SET_REQUEST__INIT;
    s.name = "vm1";
    s.dedup = DEDUPD__TOGGLE__OFF;
    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    sreq.version = DEDUPD_CTL_PROTO_VERSION;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_SET;
    sreq.export_set = &s;
    r = call_ok(&sreq, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert(!r->export_result->export->dedup);
    dedupd__response__free_unpacked(r, NULL);
    s.dedup = DEDUPD__TOGGLE__KEEP;
    cr_assert_eq(call_err(&sreq, "nothing to set"), EINVAL);

    Dedupd__ExportCloneRequest cl = DEDUPD__EXPORT_CLONE_REQUEST__INIT;
    cl.source = "vm1";
    cl.name = "vm1-snap";
    Dedupd__Request creq = DEDUPD__REQUEST__INIT;
    creq.version = DEDUPD_CTL_PROTO_VERSION;
    creq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_CLONE;
    creq.export_clone = &cl;
    r = call_ok(&creq, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert_neq(r->export_result->export->parent_id, 0);
    dedupd__response__free_unpacked(r, NULL);

    Dedupd__ExportInfoRequest i = DEDUPD__EXPORT_INFO_REQUEST__INIT;
    i.name = "";
    Dedupd__Request ireq = DEDUPD__REQUEST__INIT;
    ireq.version = DEDUPD_CTL_PROTO_VERSION;
    ireq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_INFO;
    ireq.export_info = &i;
    r = call_ok(&ireq, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT);
    cr_assert_str_eq(r->export_result->export->name, "default");
    dedupd__response__free_unpacked(r, NULL);

    fake_engine_set_open_handles("vm1", 2);
    Dedupd__ExportDeleteRequest d = DEDUPD__EXPORT_DELETE_REQUEST__INIT;
    d.name = "vm1";
    Dedupd__Request dreq = DEDUPD__REQUEST__INIT;
    dreq.version = DEDUPD_CTL_PROTO_VERSION;
    dreq.cmd_case = DEDUPD__REQUEST__CMD_EXPORT_DELETE;
    dreq.export_delete = &d;
    cr_assert_eq(call_err(&dreq, "active connections"), EBUSY);
    fake_engine_set_open_handles("vm1", 0);
    cr_assert_eq(call_err(&dreq, NULL), 0);
    cr_assert_eq(call_err(&dreq, "no export named 'vm1'"), ENOENT);
    i.name = "vm1";
    cr_assert_eq(call_err(&ireq, "no export"), ENOENT);
}

Test(cmd, export_create_checks_name_and_size)
{
    Dedupd__ExportCreateRequest c = DEDUPD__EXPORT_CREATE_REQUEST__INIT;
    REQ(export_create, EXPORT_CREATE, &c);
    c.name = "";
    c.size = 4096;
    cr_assert_eq(call_err(&req, "name is required"), EINVAL);
    c.name = "bad\nname";
    cr_assert_eq(call_err(&req, "control character"), EINVAL);
    c.name = "ok";
    c.size = 0;
    cr_assert_eq(call_err(&req, "size"), EINVAL);
    c.size = 4096;
    c.chunk_size = 1000;
    cr_assert_eq(call_err(&req, "power of two"), EINVAL);
}

Test(cmd, stats_per_export_and_total)
{
    Dedupd__ExportCreateRequest c = DEDUPD__EXPORT_CREATE_REQUEST__INIT;
    c.name = "b";
    c.size = 1 << 20;
    REQ(export_create, EXPORT_CREATE, &c);
    dedupd__response__free_unpacked(call_ok(&req, DEDUPD__RESPONSE__RESULT_EXPORT_RESULT), NULL);

    Dedupd__StatsRequest q = DEDUPD__STATS_REQUEST__INIT;
    Dedupd__Request sreq = DEDUPD__REQUEST__INIT;
    sreq.version = DEDUPD_CTL_PROTO_VERSION;
    sreq.cmd_case = DEDUPD__REQUEST__CMD_STATS;
    sreq.stats = &q;
    Dedupd__Response *r = call_ok(&sreq, DEDUPD__RESPONSE__RESULT_STATS_RESULT);
    Dedupd__StatsResult *s = r->stats_result;
    cr_assert_eq(s->n_exports, 2);
    cr_assert_str_eq(s->exports[1]->name, "b");
    cr_assert_eq(s->exports[0]->logical_bytes, 8192);
    cr_assert_float_eq(s->exports[0]->dedup_ratio, 2.0, 1e-9);
    cr_assert_eq(s->total->logical_bytes, 12288);
    cr_assert_float_eq(s->total->dedup_ratio, 3.0, 1e-9);
    cr_assert_eq(s->total->dedup_hits, 2);
    cr_assert_eq(s->chunks, 3);
    cr_assert_eq(s->chunks_shared, 1);
    cr_assert_eq(s->dead_bytes, 4096);
    cr_assert_eq(s->live_bytes, 3 * 4096);
    cr_assert_float_eq(s->compression_ratio, 1.0, 1e-9);
    dedupd__response__free_unpacked(r, NULL);

    q.export = "b";
    r = call_ok(&sreq, DEDUPD__RESPONSE__RESULT_STATS_RESULT);
    cr_assert_eq(r->stats_result->n_exports, 1);
    cr_assert_str_eq(r->stats_result->exports[0]->name, "b");
    dedupd__response__free_unpacked(r, NULL);
    q.export = "nope";
    cr_assert_eq(call_err(&sreq, "no export named 'nope'"), ENOENT);
}

Test(cmd, gc_streams_progress_then_summary)
{
    fake_engine_maint(5, 30);
    Dedupd__GcRequest q = DEDUPD__GC_REQUEST__INIT;
    q.force = true;
    REQ(gc, GC, &q);
    int progress = 0;
    Dedupd__Response *r = client_call(fd, &req, &progress);
    cr_assert_not_null(r);
    cr_assert_eq(r->status, 0);
    cr_assert_eq(r->result_case, DEDUPD__RESPONSE__RESULT_GC_RESULT);
    cr_assert_eq(r->gc_result->segments_compacted, 2, "force reached the store");
    cr_assert_eq(r->gc_result->bytes_reclaimed, 4096);
    cr_assert_eq(r->gc_result->disk_bytes_before, 1 << 20);
    cr_assert_geq(progress, 1, "no progress before the summary");
    cr_assert_leq(progress, 5);
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, scrub_keeps_first_findings_and_counts_the_rest)
{
    Dedupd__ScrubRequest q = DEDUPD__SCRUB_REQUEST__INIT;
    REQ(scrub, SCRUB, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_SCRUB_RESULT);
    cr_assert_eq(r->scrub_result->crc_errors, 105);
    cr_assert_eq(r->scrub_result->n_findings, 100);
    cr_assert_eq(r->scrub_result->findings_dropped, 5);
    cr_assert_str_eq(r->scrub_result->findings[99], "seg 1 off 0: crc mismatch");
    dedupd__response__free_unpacked(r, NULL);
}

Test(cmd, check_passes_repair_and_returns_findings)
{
    Dedupd__CheckRequest q = DEDUPD__CHECK_REQUEST__INIT;
    q.repair = true;
    REQ(check, CHECK, &q);
    Dedupd__Response *r = call_ok(&req, DEDUPD__RESPONSE__RESULT_CHECK_RESULT);
    cr_assert_eq(r->check_result->problems, 1);
    cr_assert_eq(r->check_result->repaired, 1);
    cr_assert_eq(r->check_result->n_findings, 1);
    cr_assert(strstr(r->check_result->findings[0], "refcount"));
    dedupd__response__free_unpacked(r, NULL);
}
