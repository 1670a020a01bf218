/* ctl export: list, create, delete, info, set dedup=on|off, clone — the engine's export
 * catalogue. Checks names and sizes for a precise message, then calls the engine; new and
 * deleted exports are seen by the next NBD connection. Worker thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/internal.h"
#include "dedupd/limits.h"

static int
check_name(struct ctl_call *call, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return ctl__fail(call, -EINVAL, "an export name is required");
    if (n > DEDUPD_EXPORT_NAME_MAX)
        return ctl__fail(call, -EINVAL, "export name longer than %d bytes", DEDUPD_EXPORT_NAME_MAX);
    for (const unsigned char *p = (const unsigned char *) name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return ctl__fail(call, -EINVAL, "export name contains a control character");
    return 0;
}

static Dedupd__ExportInfo *
export_msg(struct ctl_call *call, const struct engine_export_info *in, const char *dflt)
{
    Dedupd__ExportInfo *m = ctl__alloc(call, sizeof(*m));
    if (!m)
        return NULL;
    dedupd__export_info__init(m);
    m->id = in->id;
    m->name = ctl__strdup(call, in->name);
    if (!m->name)
        return NULL;
    m->size = in->size;
    m->chunk_size = in->chunk_size;
    m->dedup = in->dedup;
    m->read_only = in->read_only;
    m->parent_id = in->parent_id;
    m->connections = in->open_handles;
    m->is_default = dflt && strcmp(dflt, in->name) == 0;
    return m;
}

static int
reply_export(struct ctl_call *call, const struct engine_export_info *info)
{
    Dedupd__ExportResult *r = ctl__alloc(call, sizeof(*r));
    if (!r)
        return -ENOMEM;
    dedupd__export_result__init(r);
    r->export = export_msg(call, info, engine_default_export(call->srv->engine));
    if (!r->export)
        return -ENOMEM;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_EXPORT_RESULT;
    call->resp.export_result = r;
    return 0;
}

int
ctl__cmd_export_list(struct ctl_call *call)
{
    struct engine *e = call->srv->engine;
    struct engine_export_info *list = NULL;
    size_t n = 0;
    int rc = engine_export_list(e, &list, &n);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot list exports: %s", strerror(-rc));
    Dedupd__ExportListResult *r = ctl__alloc(call, sizeof(*r));
    Dedupd__ExportInfo **items = ctl__alloc(call, n * sizeof(*items));
    if (!r || !items) {
        free(list);
        return -ENOMEM;
    }
    dedupd__export_list_result__init(r);
    const char *dflt = engine_default_export(e);
    for (size_t i = 0; i < n; i++) {
        items[i] = export_msg(call, &list[i], dflt);
        if (!items[i]) {
            free(list);
            return -ENOMEM;
        }
    }
    free(list);
    r->n_exports = n;
    r->exports = items;
    call->resp.result_case = DEDUPD__RESPONSE__RESULT_EXPORT_LIST_RESULT;
    call->resp.export_list_result = r;
    return 0;
}

int
ctl__cmd_export_create(struct ctl_call *call)
{
    const Dedupd__ExportCreateRequest *q = call->req->export_create;
    int rc = check_name(call, q->name);
    if (rc < 0)
        return rc;
    if (q->size == 0 || q->size > DEDUPD_EXPORT_SIZE_MAX)
        return ctl__fail(call, -EINVAL, "export size must be between 1 byte and 2^60 bytes");
    uint32_t cs = q->chunk_size;
    if (cs && (cs < DEDUPD_CHUNK_MIN || cs > DEDUPD_CHUNK_MAX || (cs & (cs - 1))))
        return ctl__fail(call, -EINVAL, "chunk size %u is not a power of two between %u and %u", cs,
                         DEDUPD_CHUNK_MIN, DEDUPD_CHUNK_MAX);
    unsigned flags =
        (q->no_dedup ? ENGINE_EXPORT_NO_DEDUP : 0) | (q->read_only ? ENGINE_EXPORT_READ_ONLY : 0);
    struct engine_export_info info;
    rc = engine_export_create(call->srv->engine, q->name, q->size, cs, flags, &info);
    if (rc == -EEXIST)
        return ctl__fail(call, rc, "export '%s' already exists", q->name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot create export '%s': %s", q->name, strerror(-rc));
    return reply_export(call, &info);
}

int
ctl__cmd_export_delete(struct ctl_call *call)
{
    const Dedupd__ExportDeleteRequest *q = call->req->export_delete;
    int rc = check_name(call, q->name);
    if (rc < 0)
        return rc;
    rc = engine_export_delete(call->srv->engine, q->name);
    if (rc == -ENOENT)
        return ctl__fail(call, rc, "no export named '%s'", q->name);
    if (rc == -EBUSY)
        return ctl__fail(call, rc, "export '%s' has active connections; disconnect them first",
                         q->name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot delete export '%s': %s", q->name, strerror(-rc));
    return 0;
}

int
ctl__cmd_export_info(struct ctl_call *call)
{
    const char *name = call->req->export_info->name ? call->req->export_info->name : "";
    if (*name && check_name(call, name) < 0)
        return -EINVAL;
    struct engine_export_info info;
    int rc = engine_export_lookup(call->srv->engine, name, &info);
    if (rc == -ENOENT)
        return ctl__fail(call, rc, "no export named '%s'", name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot look up export '%s': %s", name, strerror(-rc));
    return reply_export(call, &info);
}

int
ctl__cmd_export_set(struct ctl_call *call)
{
    const Dedupd__ExportSetRequest *q = call->req->export_set;
    int rc = check_name(call, q->name);
    if (rc < 0)
        return rc;
    if (q->dedup != DEDUPD__TOGGLE__ON && q->dedup != DEDUPD__TOGGLE__OFF)
        return ctl__fail(call, -EINVAL, "nothing to set (dedup=on|off)");
    rc = engine_export_set_dedup(call->srv->engine, q->name, q->dedup == DEDUPD__TOGGLE__ON);
    if (rc == -ENOENT)
        return ctl__fail(call, rc, "no export named '%s'", q->name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot set dedup on '%s': %s", q->name, strerror(-rc));
    struct engine_export_info info;
    rc = engine_export_lookup(call->srv->engine, q->name, &info);
    if (rc < 0)
        return ctl__fail(call, rc, "export '%s' vanished: %s", q->name, strerror(-rc));
    return reply_export(call, &info);
}

int
ctl__cmd_export_clone(struct ctl_call *call)
{
    const Dedupd__ExportCloneRequest *q = call->req->export_clone;
    int rc = check_name(call, q->source);
    if (rc == 0)
        rc = check_name(call, q->name);
    if (rc < 0)
        return rc;
    struct engine_export_info info;
    rc = engine_export_clone(call->srv->engine, q->source, q->name, &info);
    if (rc == -ENOENT)
        return ctl__fail(call, rc, "no export named '%s'", q->source);
    if (rc == -EEXIST)
        return ctl__fail(call, rc, "export '%s' already exists", q->name);
    if (rc < 0)
        return ctl__fail(call, rc, "cannot clone '%s' to '%s': %s", q->source, q->name,
                         strerror(-rc));
    return reply_export(call, &info);
}
