/* fuzz_ctl_request: bytes of one control frame body -> ctl__decode -> the command's handler
 * (against the fake engine) -> the Response packed as it would be sent. Finds crashes,
 * leaks and asserts reachable from a control client. Seeds: corpus/fuzz_ctl_request/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ctl/internal.h"
#include "fakes/ctl_fake_engine.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uv_loop_t loop;
    static struct ctl_server srv;
    if (!srv.loop) {
        uv_loop_init(&loop);
        srv.loop = &loop;
        log_set_level(LOG_LEVEL_ERROR); /* findings would flood the output */
    }
    srv.engine = fake_engine_new(); /* fresh catalogue each input */
    fake_engine_maint(2, 0);
    Dedupd__Request *req;
    ctl_cmd_fn fn;
    const char *name;
    bool exclusive;
    char why[192];
    if (ctl__decode(data, size, &req, &fn, &name, &exclusive, why, sizeof(why)) < 0)
        return 0;
    struct ctl_call *call = ctl__call_new(&srv, NULL, req, fn, name);
    if (!call)
        return 0;
    int rc = fn(call);
    if (rc == 0) {
        size_t len = dedupd__response__get_packed_size(&call->resp);
        uint8_t *buf = malloc(len ? len : 1);
        dedupd__response__pack(&call->resp, buf);
        free(buf);
    }
    ctl__call_close(call);
    uv_run(&loop, UV_RUN_NOWAIT); /* frees the call */
    return 0;
}
