/* ctl internals shared by server.c (socket, framing), dispatch.c (command table, calls)
 * and the cmd_*.c handlers. The only ctl files that see protobuf types are these.
 *
 * A request's life: server.c reads one frame on the loop thread and hands its bytes to
 * ctl__dispatch(); dispatch unpacks and checks it, then runs the command's handler on a
 * worker thread through engine_submit(ENGINE_OP_FN); the handler fills call->resp (memory
 * from ctl__alloc) and may report progress; back on the loop, dispatch sends the final
 * Response and frees the call. */
#ifndef DD_CTL_INTERNAL_H
#define DD_CTL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "ctl/ctl.h"
#include "dedupd.pb-c.h"
#include "engine/engine.h"

/* Control clients are few (operators, scripts); each may hold a 1 MiB frame, so cap them. */
#define CTL_MAX_CONNS 64
/* Findings (scrub, check) kept in a Response; the rest are counted, and all are logged. */
#define CTL_MAX_FINDINGS 100
/* Progress updates are dropped, not queued, while a client has this much unread output. */
#define CTL_PROGRESS_BACKLOG (64U << 10)
#define CTL_DEFAULT_IDLE_MS  10000

struct ctl_call;

struct ctl_server {
    uv_loop_t *loop;
    struct engine *engine;
    struct nbd_server *nbd; /* may be NULL */
    uv_pipe_t listener;
    char *path;
    uint32_t idle_timeout_ms;
    uint64_t start_ns; /* uv_hrtime() at start: uptime */
    struct ctl_conn *conns;
    unsigned n_conns;
    unsigned n_calls;          /* calls not yet freed (handlers running or async closing) */
    const char *maint_running; /* name of the gc/scrub/check running, or NULL */
    bool listening;
    bool stopping;
    void (*stop_done)(void *arg);
    void *stop_arg;
};

struct ctl_conn {
    struct ctl_server *srv;
    struct ctl_conn *prev, *next;
    uv_pipe_t pipe;
    uv_timer_t timer;
    uint8_t *buf; /* received bytes not yet consumed: at most one frame plus one read */
    size_t len, cap;
    struct ctl_call *call; /* the request being served; reading pauses meanwhile */
    unsigned writes;       /* uv_write requests in flight */
    unsigned open_handles; /* pipe, timer: freed when both are closed and call is NULL */
    bool closing;
    bool close_after_write;
};

/* Worker thread. Fill call->resp's result (memory from ctl__alloc); 0 or -errno. A failure
 * may explain itself with ctl__fail(); otherwise the message is strerror(). */
typedef int (*ctl_cmd_fn)(struct ctl_call *call);

struct ctl_call {
    struct ctl_server *srv;
    struct ctl_conn *conn; /* NULL once the client has gone */
    Dedupd__Request *req;  /* unpacked; freed with the call */
    Dedupd__Response resp;
    ctl_cmd_fn fn;
    const char *name;
    struct engine_req ereq;
    uv_async_t async;     /* progress from the worker */
    pthread_mutex_t lock; /* guards progress */
    struct {
        char op[16];
        uint64_t done, total;
    } progress;
    atomic_bool cancelled;    /* client gone or server stopping: long commands stop early */
    bool finished;            /* final Response sent: no progress after it */
    bool exclusive;           /* holds srv->maint_running */
    uint32_t nbd_connections; /* read on the loop thread before the handler runs */
    uint32_t nbd_loops;       /* likewise */
    char message[256];
    void **allocs;
    size_t n_allocs, cap_allocs;
    char **findings; /* kept findings, ctl__alloc'd array of CTL_MAX_FINDINGS */
    size_t n_kept;
    uint64_t n_findings; /* all findings reported, kept or not */
};

/* ---- server.c: loop thread only ---- */

/* Queues one framed message; close_after closes the connection once it is written.
 * Responses that do not fit DEDUPD_CTL_MAX_MSG are replaced by an EMSGSIZE error. */
void ctl__send(struct ctl_conn *conn, const Dedupd__Response *resp, bool close_after);
/* Unread output queued on the connection, for dropping progress under back-pressure. */
size_t ctl__backlog(struct ctl_conn *conn);
/* Called by dispatch when a call ends: the connection may read its next request. */
void ctl__call_ended(struct ctl_conn *conn);
/* Called when a call has been freed (stop waits for running handlers). */
void ctl__call_freed(struct ctl_server *srv);

/* ---- dispatch.c ---- */

/* Loop thread. Serves one request frame (bytes borrowed until return). Returns true when a
 * call was started (the connection waits for ctl__call_ended), false when the reply was
 * sent at once (error or bad request). */
bool ctl__dispatch(struct ctl_conn *conn, const uint8_t *msg, size_t len);
/* Any thread. Decodes and checks one request: 0 with *out (free with
 * dedupd__request__free_unpacked, or hand to ctl__call_new), the command's handler, name
 * and whether it is exclusive maintenance (one at a time); or -EBADMSG / -EPROTONOSUPPORT /
 * -EOPNOTSUPP with the reason in why. */
int ctl__decode(const uint8_t *msg, size_t len, Dedupd__Request **out, ctl_cmd_fn *fn,
                const char **name, bool *exclusive, char *why, size_t cap);
/* Loop thread. A call for req (taken, freed with the call; also on failure), or NULL on
 * out of memory. Counted in srv->n_calls until freed by ctl__call_close + the loop. */
struct ctl_call *ctl__call_new(struct ctl_server *srv, struct ctl_conn *conn, Dedupd__Request *req,
                               ctl_cmd_fn fn, const char *name);
/* Loop thread. Ends the call: no more progress; freed once the loop closes its handle. */
void ctl__call_close(struct ctl_call *call);
/* Fills resp as an error Response (status, message; no result). message is borrowed. */
void ctl__error_response(Dedupd__Response *resp, int err, const char *message);

/* Worker thread, for handlers. Memory freed with the call; NULL on out of memory. */
void *ctl__alloc(struct ctl_call *call, size_t size);
char *ctl__strdup(struct ctl_call *call, const char *s);
/* Sets the call's error message and returns err (a negative errno). */
int ctl__fail(struct ctl_call *call, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reports progress to the client; returns non-zero when the command should stop. */
int ctl__progress(struct ctl_call *call, const char *op, uint64_t done, uint64_t total);
/* Keeps a finding for the Response (up to CTL_MAX_FINDINGS); the store has logged it. */
void ctl__finding(struct ctl_call *call, const char *finding);
char **ctl__findings(struct ctl_call *call, size_t *n);

/* ---- cmd_*.c: the handlers (worker threads) ---- */

int ctl__cmd_status(struct ctl_call *call);
int ctl__cmd_enable(struct ctl_call *call);
int ctl__cmd_disable(struct ctl_call *call);
int ctl__cmd_stats(struct ctl_call *call);
int ctl__cmd_export_list(struct ctl_call *call);
int ctl__cmd_export_create(struct ctl_call *call);
int ctl__cmd_export_delete(struct ctl_call *call);
int ctl__cmd_export_info(struct ctl_call *call);
int ctl__cmd_export_set(struct ctl_call *call);
int ctl__cmd_export_clone(struct ctl_call *call);
int ctl__cmd_gc(struct ctl_call *call);
int ctl__cmd_scrub(struct ctl_call *call);
int ctl__cmd_check(struct ctl_call *call);

#endif
