/* Control protocol encoding: Request/Response round trips through protobuf-c, presence of
 * "keep" fields, framing, and that garbage does not decode as a command. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "dedupd.pb-c.h"
#include "dedupd/ctl_frame.h"
#include "dedupd/version.h"

Test(encoding, frame_length_is_big_endian)
{
    uint8_t hdr[DEDUPD_CTL_FRAME_HDR];
    ctl_frame_put_len(hdr, 0x01020304u);
    cr_assert_eq(hdr[0], 1);
    cr_assert_eq(hdr[3], 4);
    cr_assert_eq(ctl_frame_get_len(hdr), 0x01020304u);
    ctl_frame_put_len(hdr, 0xffffffffu);
    cr_assert_eq(ctl_frame_get_len(hdr), 0xffffffffu);
}

Test(encoding, enable_request_round_trip_keeps_presence)
{
    Dedupd__Request req = DEDUPD__REQUEST__INIT;
    Dedupd__EnableRequest en = DEDUPD__ENABLE_REQUEST__INIT;
    Dedupd__U64 lim = DEDUPD__U64__INIT;
    lim.value = 0; /* present with value 0: "back-end default", not "keep" */
    en.backend = "memory";
    en.chunk_size = 8192;
    en.limit_nr = &lim;
    en.verify = DEDUPD__TOGGLE__ON;
    req.version = DEDUPD_CTL_PROTO_VERSION;
    req.cmd_case = DEDUPD__REQUEST__CMD_ENABLE;
    req.enable = &en;
    uint8_t buf[256];
    size_t len = dedupd__request__get_packed_size(&req);
    cr_assert_lt(len, sizeof(buf));
    dedupd__request__pack(&req, buf);
    Dedupd__Request *out = dedupd__request__unpack(NULL, len, buf);
    cr_assert_not_null(out);
    cr_assert_eq(out->version, DEDUPD_CTL_PROTO_VERSION);
    cr_assert_eq(out->cmd_case, DEDUPD__REQUEST__CMD_ENABLE);
    cr_assert_str_eq(out->enable->backend, "memory");
    cr_assert_str_eq(out->enable->hash, "");
    cr_assert_eq(out->enable->chunk_size, 8192);
    cr_assert_not_null(out->enable->limit_nr);
    cr_assert_eq(out->enable->limit_nr->value, 0);
    cr_assert_null(out->enable->limit_mem);
    cr_assert_eq(out->enable->verify, DEDUPD__TOGGLE__ON);
    dedupd__request__free_unpacked(out, NULL);
}

Test(encoding, response_with_progress_and_list_round_trip)
{
    Dedupd__Response resp = DEDUPD__RESPONSE__INIT;
    Dedupd__Progress p = DEDUPD__PROGRESS__INIT;
    p.operation = "gc";
    p.done = 3;
    p.total = 7;
    resp.more = true;
    resp.version = DEDUPD_CTL_PROTO_VERSION;
    resp.result_case = DEDUPD__RESPONSE__RESULT_PROGRESS;
    resp.progress = &p;
    uint8_t buf[256];
    size_t len = dedupd__response__pack(&resp, buf);
    Dedupd__Response *out = dedupd__response__unpack(NULL, len, buf);
    cr_assert_not_null(out);
    cr_assert(out->more);
    cr_assert_eq(out->status, 0);
    cr_assert_eq(out->result_case, DEDUPD__RESPONSE__RESULT_PROGRESS);
    cr_assert_str_eq(out->progress->operation, "gc");
    cr_assert_eq(out->progress->done, 3);
    cr_assert_eq(out->progress->total, 7);
    dedupd__response__free_unpacked(out, NULL);

    Dedupd__ExportInfo a = DEDUPD__EXPORT_INFO__INIT, b = DEDUPD__EXPORT_INFO__INIT;
    a.name = "a";
    a.size = 1ULL << 40;
    b.name = "b\"q";
    b.read_only = true;
    Dedupd__ExportInfo *items[] = {&a, &b};
    Dedupd__ExportListResult lr = DEDUPD__EXPORT_LIST_RESULT__INIT;
    lr.n_exports = 2;
    lr.exports = items;
    Dedupd__Response r2 = DEDUPD__RESPONSE__INIT;
    r2.result_case = DEDUPD__RESPONSE__RESULT_EXPORT_LIST_RESULT;
    r2.export_list_result = &lr;
    len = dedupd__response__pack(&r2, buf);
    out = dedupd__response__unpack(NULL, len, buf);
    cr_assert_not_null(out);
    cr_assert(!out->more);
    cr_assert_eq(out->export_list_result->n_exports, 2);
    cr_assert_eq(out->export_list_result->exports[0]->size, 1ULL << 40);
    cr_assert_str_eq(out->export_list_result->exports[1]->name, "b\"q");
    cr_assert(out->export_list_result->exports[1]->read_only);
    dedupd__response__free_unpacked(out, NULL);
}

Test(encoding, error_response_carries_status_and_message)
{
    Dedupd__Response resp = DEDUPD__RESPONSE__INIT;
    resp.status = EBUSY;
    resp.message = "export 'x' has active connections";
    uint8_t buf[128];
    size_t len = dedupd__response__pack(&resp, buf);
    Dedupd__Response *out = dedupd__response__unpack(NULL, len, buf);
    cr_assert_not_null(out);
    cr_assert_eq(out->status, EBUSY);
    cr_assert_str_eq(out->message, "export 'x' has active connections");
    cr_assert_eq(out->result_case, DEDUPD__RESPONSE__RESULT__NOT_SET);
    dedupd__response__free_unpacked(out, NULL);
}

Test(encoding, garbage_does_not_decode)
{
    /* Field 10 (status) as a length-delimited field longer than the buffer. */
    const uint8_t truncated[] = {0x52, 0x7f, 0x00};
    cr_assert_null(dedupd__request__unpack(NULL, sizeof(truncated), truncated));
    /* A varint that never ends. */
    const uint8_t endless[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                               0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    cr_assert_null(dedupd__request__unpack(NULL, sizeof(endless), endless));
}

Test(encoding, unknown_command_field_decodes_as_no_command)
{
    /* version = 1, then field 99 (a newer client's command) as an empty message. */
    const uint8_t newer[] = {0x08, 0x01, 0x9a, 0x06, 0x00};
    Dedupd__Request *out = dedupd__request__unpack(NULL, sizeof(newer), newer);
    cr_assert_not_null(out);
    cr_assert_eq(out->version, 1);
    cr_assert_eq(out->cmd_case, DEDUPD__REQUEST__CMD__NOT_SET);
    dedupd__request__free_unpacked(out, NULL);
}
