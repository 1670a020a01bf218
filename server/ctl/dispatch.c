/* ctl dispatch: one request frame -> checks (decodable, protocol version, known command) ->
 * the command's handler on a worker thread via engine_submit(ENGINE_OP_FN) -> the final
 * Response on the loop thread. Also the call helpers handlers use (allocation, errors,
 * progress, findings) and the one place where -errno becomes Response.status.
 * Knows nothing of sockets (server.c) or of what commands do (cmd_*.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/internal.h"
#include "dedupd/version.h"
#include "nbd/nbd.h"
#include "util/log.h"

struct cmd {
    Dedupd__Request__CmdCase cmd;
    const char *name;
    ctl_cmd_fn fn;
    /* Long maintenance: one at a time server-wide, so control clients can never occupy
     * the worker pool that NBD I/O shares. */
    bool exclusive;
};

static const struct cmd cmds[] = {
    {DEDUPD__REQUEST__CMD_STATUS, "status", ctl__cmd_status, false},
    {DEDUPD__REQUEST__CMD_ENABLE, "enable", ctl__cmd_enable, false},
    {DEDUPD__REQUEST__CMD_DISABLE, "disable", ctl__cmd_disable, false},
    {DEDUPD__REQUEST__CMD_STATS, "stats", ctl__cmd_stats, false},
    {DEDUPD__REQUEST__CMD_EXPORT_LIST, "export list", ctl__cmd_export_list, false},
    {DEDUPD__REQUEST__CMD_EXPORT_CREATE, "export create", ctl__cmd_export_create, false},
    {DEDUPD__REQUEST__CMD_EXPORT_DELETE, "export delete", ctl__cmd_export_delete, false},
    {DEDUPD__REQUEST__CMD_EXPORT_INFO, "export info", ctl__cmd_export_info, false},
    {DEDUPD__REQUEST__CMD_EXPORT_SET, "export set", ctl__cmd_export_set, false},
    {DEDUPD__REQUEST__CMD_EXPORT_CLONE, "export clone", ctl__cmd_export_clone, false},
    {DEDUPD__REQUEST__CMD_GC, "gc", ctl__cmd_gc, true},
    {DEDUPD__REQUEST__CMD_SCRUB, "scrub", ctl__cmd_scrub, true},
    {DEDUPD__REQUEST__CMD_CHECK, "check", ctl__cmd_check, true},
};

void
ctl__error_response(Dedupd__Response *resp, int err, const char *message)
{
    dedupd__response__init(resp);
    resp->version = DEDUPD_CTL_PROTO_VERSION;
    resp->status = err < 0 ? -err : err;
    resp->message = (char *) (message ? message : strerror(resp->status));
}

/* ---- call helpers (worker thread) ---- */

void *
ctl__alloc(struct ctl_call *call, size_t size)
{
    if (call->n_allocs == call->cap_allocs) {
        size_t ncap = call->cap_allocs ? call->cap_allocs * 2 : 16;
        void **na = realloc(call->allocs, ncap * sizeof(*na));
        if (!na)
            return NULL;
        call->allocs = na;
        call->cap_allocs = ncap;
    }
    void *p = calloc(1, size ? size : 1);
    if (p)
        call->allocs[call->n_allocs++] = p;
    return p;
}

char *
ctl__strdup(struct ctl_call *call, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ctl__alloc(call, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int
ctl__fail(struct ctl_call *call, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->message, sizeof(call->message), fmt, ap);
    va_end(ap);
    return err;
}

int
ctl__progress(struct ctl_call *call, const char *op, uint64_t done, uint64_t total)
{
    pthread_mutex_lock(&call->lock);
    snprintf(call->progress.op, sizeof(call->progress.op), "%s", op);
    call->progress.done = done;
    call->progress.total = total;
    pthread_mutex_unlock(&call->lock);
    uv_async_send(&call->async); /* coalesced: the loop sends the latest state */
    return atomic_load(&call->cancelled) ? 1 : 0;
}

void
ctl__finding(struct ctl_call *call, const char *finding)
{
    call->n_findings++; /* the store logged it, with its context */
    if (!call->findings) {
        call->findings = ctl__alloc(call, CTL_MAX_FINDINGS * sizeof(char *));
        if (!call->findings)
            return;
    }
    if (call->n_kept < CTL_MAX_FINDINGS) {
        char *s = ctl__strdup(call, finding);
        if (s)
            call->findings[call->n_kept++] = s;
    }
}

char **
ctl__findings(struct ctl_call *call, size_t *n)
{
    *n = call->n_kept;
    return call->findings;
}

/* ---- a call's life ---- */

static void
on_async_closed(uv_handle_t *h)
{
    struct ctl_call *call = h->data;
    struct ctl_server *srv = call->srv;
    for (size_t i = 0; i < call->n_allocs; i++)
        free(call->allocs[i]);
    free(call->allocs);
    dedupd__request__free_unpacked(call->req, NULL);
    pthread_mutex_destroy(&call->lock);
    free(call);
    ctl__call_freed(srv);
}

static void
on_progress(uv_async_t *a)
{
    struct ctl_call *call = a->data;
    if (call->finished || !call->conn || ctl__backlog(call->conn) > CTL_PROGRESS_BACKLOG)
        return;
    Dedupd__Progress p;
    dedupd__progress__init(&p);
    char op[sizeof(call->progress.op)];
    pthread_mutex_lock(&call->lock);
    memcpy(op, call->progress.op, sizeof(op));
    p.done = call->progress.done;
    p.total = call->progress.total;
    pthread_mutex_unlock(&call->lock);
    p.operation = op;
    Dedupd__Response resp;
    dedupd__response__init(&resp);
    resp.version = DEDUPD_CTL_PROTO_VERSION;
    resp.more = true;
    resp.result_case = DEDUPD__RESPONSE__RESULT_PROGRESS;
    resp.progress = &p;
    ctl__send(call->conn, &resp, false);
}

static int
run_handler(void *arg)
{
    struct ctl_call *call = arg;
    return call->fn(call);
}

static void
on_handler_done(struct engine_req *req)
{
    struct ctl_call *call = req->user;
    call->finished = true;
    int rc = req->result;
    if (rc < 0)
        log_info("ctl: %s: %s%s%s", call->name, strerror(-rc), call->message[0] ? ": " : "",
                 call->message);
    if (call->conn) {
        Dedupd__Response err;
        const Dedupd__Response *resp = &call->resp;
        if (rc < 0) {
            ctl__error_response(&err, rc, call->message[0] ? call->message : NULL);
            resp = &err;
        }
        struct ctl_conn *conn = call->conn;
        ctl__send(conn, resp, false);
        call->conn = NULL;
        ctl__call_ended(conn);
    }
    ctl__call_close(call);
}

int
ctl__decode(const uint8_t *msg, size_t len, Dedupd__Request **out, ctl_cmd_fn *fn,
            const char **name, bool *exclusive, char *why, size_t cap)
{
    Dedupd__Request *req = dedupd__request__unpack(NULL, len, msg);
    if (!req) {
        snprintf(why, cap, "malformed request: not a dedupd control Request");
        return -EBADMSG;
    }
    if (req->version != DEDUPD_CTL_PROTO_VERSION) {
        snprintf(why, cap,
                 "unsupported protocol version %u (this server speaks version %d); use a "
                 "dedupd-ctl of the same release",
                 req->version, DEDUPD_CTL_PROTO_VERSION);
        dedupd__request__free_unpacked(req, NULL);
        return -EPROTONOSUPPORT;
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (cmds[i].cmd == req->cmd_case) {
            *out = req;
            *fn = cmds[i].fn;
            *name = cmds[i].name;
            *exclusive = cmds[i].exclusive;
            return 0;
        }
    }
    dedupd__request__free_unpacked(req, NULL);
    snprintf(why, cap, "unknown command (is dedupd older than dedupd-ctl?)");
    return -EOPNOTSUPP;
}

struct ctl_call *
ctl__call_new(struct ctl_server *srv, struct ctl_conn *conn, Dedupd__Request *req, ctl_cmd_fn fn,
              const char *name)
{
    struct ctl_call *call = calloc(1, sizeof(*call));
    if (!call) {
        dedupd__request__free_unpacked(req, NULL);
        return NULL;
    }
    call->srv = srv;
    call->conn = conn;
    call->req = req;
    call->fn = fn;
    call->name = name;
    dedupd__response__init(&call->resp);
    call->resp.version = DEDUPD_CTL_PROTO_VERSION;
    pthread_mutex_init(&call->lock, NULL);
    atomic_init(&call->cancelled, false);
    call->nbd_connections = srv->nbd ? nbd_server_connections(srv->nbd) : 0;
    call->nbd_loops = srv->nbd ? nbd_server_loops(srv->nbd) : 0;
    uv_async_init(srv->loop, &call->async, on_progress);
    call->async.data = call;
    srv->n_calls++;
    return call;
}

void
ctl__call_close(struct ctl_call *call)
{
    if (call->exclusive)
        call->srv->maint_running = NULL;
    call->exclusive = false;
    call->finished = true;
    call->conn = NULL;
    uv_close((uv_handle_t *) &call->async, on_async_closed);
}

/* Loop thread: refuse the request at once with err and message. */
static bool
refuse(struct ctl_conn *conn, int err, const char *message)
{
    log_info("ctl: request refused: %s", message);
    Dedupd__Response resp;
    ctl__error_response(&resp, err, message);
    ctl__send(conn, &resp, false);
    return false;
}

bool
ctl__dispatch(struct ctl_conn *conn, const uint8_t *msg, size_t len)
{
    struct ctl_server *srv = conn->srv;
    Dedupd__Request *req;
    ctl_cmd_fn fn;
    const char *name;
    bool exclusive;
    char m[192];
    int rc = ctl__decode(msg, len, &req, &fn, &name, &exclusive, m, sizeof(m));
    if (rc < 0)
        return refuse(conn, rc, m);
    if (exclusive && srv->maint_running) {
        dedupd__request__free_unpacked(req, NULL);
        snprintf(m, sizeof(m), "%s refused: %s is already running; try again when it ends", name,
                 srv->maint_running);
        return refuse(conn, -EBUSY, m);
    }
    struct ctl_call *call = ctl__call_new(srv, conn, req, fn, name);
    if (!call)
        return refuse(conn, -ENOMEM, "server out of memory");
    call->exclusive = exclusive;
    if (exclusive)
        srv->maint_running = name;
    call->ereq.op = ENGINE_OP_FN;
    call->ereq.engine = srv->engine;
    call->ereq.fn = run_handler;
    call->ereq.arg = call;
    call->ereq.done = on_handler_done;
    call->ereq.user = call;
    log_debug("ctl: %s", name);
    rc = engine_submit(srv->loop, &call->ereq);
    if (rc < 0) {
        /* done never runs: answer here and let the async close free the call. */
        ctl__call_close(call);
        snprintf(m, sizeof(m), "cannot queue %s: %s", name, strerror(-rc));
        return refuse(conn, rc, m);
    }
    conn->call = call;
    return true;
}
