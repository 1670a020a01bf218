/* nbd/internal.h: what the files of server/nbd/ share — the server, connection and request
 * structs and the functions one file calls in another (double underscore). Not for other
 * modules; tests and the fuzz target include it to adopt a socketpair end as a connection.
 * Threads: a connection and its requests belong to one loop's thread (struct nbd_loop);
 * the server object to the caller's loop thread, except what is marked atomic. */
#ifndef DD_NBD_INTERNAL_H
#define DD_NBD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "engine/engine.h"
#include "nbd/nbd.h"
#include "nbd/wire.h"
#include "util/bufpool.h"

struct nbd_conn;

struct nbd_listener {
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    struct nbd_server *srv;
    char *addr;      /* as configured, for logs */
    char *unix_path; /* unlinked at stop; NULL for TCP */
    struct nbd_listener *next;
};

/* An accepted socket on its way from the listener's loop to a connection loop. */
struct nbd_handoff {
    int fd;
    bool is_tcp;
    struct nbd_handoff *next;
};

/* One event loop serving connections: the caller's loop (srv->main: adopted sockets, and
 * every connection when the server runs one loop), or one of srv->threads, each with its
 * own loop run by its own thread (loops.c). Its connections, buffers and handles are
 * touched only by that thread; the inbox is guarded by mu, n_conns is atomic. */
struct nbd_loop {
    struct nbd_server *srv;
    uv_loop_t *loop;
    struct bufpool *bufs;     /* READ and WRITE payload buffers, reused */
    struct nbd_conn *conns;   /* doubly linked through conn->prev/next */
    unsigned pending_closes;  /* connection handles of this loop not yet closed */
    _Atomic uint32_t n_conns; /* counted from accept on: picks the least busy loop */
    uint32_t nowait_max;      /* reads up to this size are tried on the loop itself */
    /* threaded loops only */
    uv_loop_t own;
    uv_thread_t thread;
    uv_async_t wake; /* new sockets in the inbox, or stop */
    uv_mutex_t mu;
    struct nbd_handoff *inbox; /* mu */
    bool stop;                 /* mu: the server is stopping */
    bool stopping;             /* loop thread: its connections were told to stop */
    _Atomic bool exited;       /* the thread is done; the reaper joins it */
    bool joined;               /* caller's loop thread: the reaper joined it */
};

struct nbd_server {
    uv_loop_t *loop; /* the caller's: listeners, accepting, the stop sequence */
    struct engine *engine;
    struct nbd_limits limits; /* defaults filled in */
    struct nbd_listener *listeners;
    struct nbd_loop main;     /* connections on the caller's loop */
    struct nbd_loop *threads; /* n_threads loops with a thread each (none: all on main) */
    unsigned n_threads;
    unsigned threads_running; /* not yet joined */
    uv_async_t reaper;        /* a loop thread exited: join it */
    bool reaper_open;
    _Atomic uint32_t n_conns; /* every loop's, counted from accept on */
    _Atomic uint64_t next_conn_id;
    uint64_t refused;              /* connections closed at accept because of max_connections */
    uint64_t refused_logged_at_ms; /* refusals are logged at most once a second */
    uint64_t refused_unlogged;
    bool stopping;
    unsigned open_listeners;  /* listener handles not yet closed */
    unsigned pending_accepts; /* accepted handles on the caller's loop not yet closed */
    void (*stop_done)(void *arg);
    void *stop_arg;
};

/* Connection phases. Transitions:
 *   CLIENT_FLAGS -> OPT_HDR -> (OPT_DATA | OPT_SKIP) -> OPT_HDR ... -> REQ_HDR (GO or
 *   EXPORT_NAME) -> (REQ_PAYLOAD | REQ_SKIP) -> REQ_HDR ...
 *   any -> STOPPED (DISC, ABORT, protocol violation, socket error, server stop): nothing
 *   more is read; the socket closes once in-flight requests and queued replies are done. */
enum nbd_conn_state {
    NBD_CONN_CLIENT_FLAGS,
    NBD_CONN_OPT_HDR,
    NBD_CONN_OPT_DATA,
    NBD_CONN_OPT_SKIP,
    NBD_CONN_REQ_HDR,
    NBD_CONN_REQ_PAYLOAD,
    NBD_CONN_REQ_SKIP,
    NBD_CONN_STOPPED,
};

/* Options bigger than this are skipped unread and answered NBD_REP_ERR_TOO_BIG: the
 * largest legitimate one is a meta context option with a 4 KiB name and a few queries. */
#define NBD_OPT_MAX_LEN (64u << 10)
/* Stop reading while this much option-reply data waits to be sent (a client that sends
 * LIST forever without reading must not grow our memory). */
#define NBD_HANDSHAKE_WQ_MAX (1u << 20)
/* Reads of cached data up to this size are answered by the caller's loop itself when it
 * serves the connections alone; larger ones go to the workers, or its one core would copy
 * every byte of a sequential read (docs/benchmarks.md, item 14). Loop threads, one per
 * CPU, answer cached reads of any size engine_read_nowait takes. */
#define NBD_NOWAIT_MAX_MAIN (64u << 10)
/* Connection loops when nbd_limits.loops is 0: one per CPU, up to this many. */
#define NBD_LOOPS_DEFAULT_MAX 4

/* Input buffer: one read() worth; headers and small payloads are copied out of it (large
 * payloads mostly bypass it: NBD_DIRECT_MIN). */
#define NBD_INBUF_SIZE (64u << 10)
/* Payload buffers kept idle for reuse by the server's connections together: enough for
 * the ups and downs of 4 connections with 64 requests of 256 KiB each in flight. */
#define NBD_BUFPOOL_IDLE_MAX ((size_t) 16 << 20)
/* Read data filled but not yet sent, per connection, before further READs wait (parked,
 * without a buffer) for a reply to go out; at least NBD_READS_HELD_MIN reads are always
 * let through, so one fills while another is sent. Other requests are not held up. A client that
 * asks faster than it takes its replies (nbdcopy keeps 64 reads of 256 KiB in flight per
 * connection) otherwise has the workers fill up to 64 MiB of buffers that then wait for the socket:
 * by the time they are sent they are out of the CPU caches, and both the fill and the send copy
 * cost up to twice as much (docs/benchmarks.md, item 28). */
#define NBD_READ_HELD_MAX  ((uint64_t) 1 << 20)
#define NBD_READS_HELD_MIN 2
/* A WRITE payload with at least this much still to come, and nothing of it buffered, is
 * read from the socket straight into the request's buffer: no copy through inbuf. Smaller
 * rests go through inbuf, so the next request headers arrive in the same read. */
#define NBD_DIRECT_MIN (64u << 10)

/* Small WRITEs decoded from one read of the socket are handed to the engine together, up
 * to this many per worker job (engine_submit_writes): they commit in one group, and the
 * loop and the workers hand over once per batch. Four, so that a queue depth of 16 still
 * keeps four workers busy; larger writes go alone, hashed on separate workers. */
#ifndef NBD_WBATCH_MAX
#define NBD_WBATCH_MAX 4
#endif
#define NBD_WBATCH_MAX_BYTES (32u << 10)

struct nbd_req {
    struct engine_req er;
    struct nbd_conn *conn;
    struct nbd_req *prev, *next; /* conn->reqs */
    uint64_t cookie;
    uint64_t off;
    uint32_t len;
    uint16_t type;
    uint16_t flags;
    uint8_t *buf;              /* WRITE payload / READ data (len bytes), or NULL */
    size_t buf_len;            /* what buf was taken from conn->lp->bufs for */
    uint64_t bytes;            /* counted in conn->inflight_bytes */
    bool read_held;            /* a read buffer counted in conn->read_held_bytes */
    struct nbd_req *park_next; /* conn->parked */
    int err;                   /* decided before the engine (-errno), 0 = submit */
    const char *msg;           /* human text for a structured error chunk, static */
    struct engine_extent *ext; /* BLOCK_STATUS */
    /* READ data the engine left spread in buf (stride != 0) rather than contiguous */
    struct engine_spread spread;
    /* the reply being written */
    uv_write_t w;
    uint8_t *out; /* headers and small payloads of the reply, malloc'd */
    uv_buf_t *bufs;
    unsigned nbufs;
    bool replying;
};

struct nbd_conn {
    struct nbd_server *srv;
    struct nbd_loop *lp; /* the loop serving it */
    struct nbd_conn *prev, *next;
    uint64_t id;
    char peer[64];
    union {
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    bool listed; /* in srv->conns (refused connections never are) */
    bool reading;
    bool in_process;       /* the parser loop is running: do not re-enter or close */
    bool force;            /* close without waiting for queued replies to be written */
    bool closing;          /* uv_close called */
    uv_timer_t hs_timer;   /* handshake time-out; closed with the connection */
    unsigned open_handles; /* h and hs_timer until their close callbacks ran */
    enum nbd_conn_state state;

    /* input */
    uint8_t *inbuf;
    size_t in_pos, in_len;
    bool in_direct;  /* the read in progress goes straight into cur's payload (conn.c) */
    uint8_t hdr[32]; /* fixed-size message being assembled */
    size_t hdr_have;
    uint64_t skip_left; /* OPT_SKIP / REQ_SKIP */
    uint8_t *opt_buf;
    uint32_t opt, opt_len, opt_have;

    /* negotiated */
    bool fixed_newstyle;
    bool no_zeroes;
    bool structured;
    unsigned meta_ctx;       /* bit (1 << id) for each selected context */
    uint32_t meta_export_id; /* the export the contexts were selected for */

    /* transmission */
    struct engine_export *ex;
    struct engine_export_info info;
    uint16_t tx_flags;
    struct nbd_req *cur;  /* WRITE whose payload is being read */
    struct nbd_req *reqs; /* every live request, for shutdown */
    uint32_t pay_have;
    uint32_t inflight;       /* live requests (until their reply is written) */
    uint64_t inflight_bytes; /* payload and read buffers they hold */
    uint32_t reads_held;     /* READ/CACHE requests holding a buffer until their reply is sent */
    uint64_t read_held_bytes;
    struct nbd_req *parked, *parked_tail;   /* READs waiting for the held bytes to drop */
    unsigned engine_pending;                /* requests submitted to the engine, not yet done */
    struct nbd_req *wbatch[NBD_WBATCH_MAX]; /* WRITEs decoded, not yet submitted (counted in
                                               engine_pending): nbd__tx_flush_writes */
    unsigned wbatch_n;
    unsigned writes_pending; /* uv_write in flight (option replies and request replies) */
};

/* server.c */
/* Something the caller's loop waits for at stop closed: finishes the stop when it was the
 * last. */
void nbd__server_check_done(struct nbd_server *srv);

/* loops.c */
/* Starts n loop threads (n >= 2). 0 or -errno (those started are stopped by
 * nbd__loops_stop). */
int nbd__loops_start(struct nbd_server *srv, unsigned n);
/* Hands an accepted socket (ours to close) to the least busy loop thread. */
void nbd__loops_hand(struct nbd_server *srv, int fd, bool is_tcp);
/* Tells every loop thread to stop its connections and exit (they are joined as they do). */
void nbd__loops_stop(struct nbd_server *srv);
/* Whether every loop thread has been joined and its resources freed. */
bool nbd__loops_done(struct nbd_server *srv);
/* Counts a connection in and out of lp's and the server's n_conns: from its accept (before
 * a hand-off) to its close. Any thread. */
void nbd__loop_count(struct nbd_loop *lp, int delta);
/* Stops every connection of lp (forced; in-flight requests still finish). lp's thread. */
void nbd__loop_stop_conns(struct nbd_loop *lp);
/* A connection handle of lp finished closing. */
void nbd__loop_conn_gone(struct nbd_loop *lp);

/* conn.c */
/* Accepts from listener: served on the caller's loop, or handed to a loop thread. */
int nbd__conn_accept(struct nbd_server *srv, uv_stream_t *listener, bool is_tcp);
/* Serves an accepted socket fd on lp (lp's thread; the connection is already counted in
 * n_conns). 0 or -errno (fd closed and uncounted then). */
int nbd__conn_open(struct nbd_loop *lp, int fd, bool is_tcp);
/* Wraps an already-connected stream socket fd on the caller's loop (tests, fuzzing). 0 or
 * -errno. */
int nbd__conn_adopt(struct nbd_server *srv, int fd);
/* The handshake is over (transmission starts): its time-out no longer applies. */
void nbd__conn_handshake_done(struct nbd_conn *c);
/* Stops reading and closes once in-flight work is done (and, unless force, once queued
 * replies are written). reason is logged at info level (NULL: nothing logged). */
void nbd__conn_stop(struct nbd_conn *c, const char *reason, bool force);
/* Something drained or finished: resume reading, or close a stopped connection. */
void nbd__conn_kick(struct nbd_conn *c);
/* Queues len bytes (copied) for sending. 0 or -ENOMEM (the connection is then stopped). */
int nbd__conn_send(struct nbd_conn *c, const void *data, size_t len);
/* Queues a request's reply (req->bufs); the request is freed when written. */
void nbd__conn_send_req(struct nbd_conn *c, struct nbd_req *req);
struct nbd_req *nbd__req_new(struct nbd_conn *c);
void nbd__req_free(struct nbd_req *req);

/* transmit.c: submits the WRITEs batched so far. Called before any other request is
 * started (so nothing overtakes them) and whenever the parser runs out of input. */
void nbd__tx_flush_writes(struct nbd_conn *c);

/* handshake.c */
int nbd__hs_start(struct nbd_conn *c);
void nbd__hs_client_flags(struct nbd_conn *c);
void nbd__hs_opt_hdr(struct nbd_conn *c);
void nbd__hs_opt_data(struct nbd_conn *c);
void nbd__hs_opt_skipped(struct nbd_conn *c);

/* Transmission flags for an export on this connection (handshake.c). */
uint16_t nbd__tx_flags(const struct nbd_conn *c, const struct engine_export_info *info);

/* transmit.c */
void nbd__tx_req_hdr(struct nbd_conn *c);
void nbd__tx_payload_done(struct nbd_conn *c);
void nbd__tx_skip_done(struct nbd_conn *c);
/* Whether another request may be read now (limits on requests and bytes in flight). */
bool nbd__tx_can_accept(const struct nbd_conn *c);
/* Submits parked READs while the bound on held read data allows (after a reply went out);
 * nothing once the connection is closing. */
void nbd__tx_resume_reads(struct nbd_conn *c);

/* reply.c */
uint32_t nbd__errno_to_nbd(int neg_errno);
/* Builds and queues the reply of a finished request (result: 0, or -errno). */
void nbd__reply(struct nbd_req *req, int result);

/* context.c: meta contexts */
const char *nbd__ctx_name(uint32_t id);
/* Ids matching one query: a full name, or a namespace ("base:", "x-dedupd:") when
 * allow_ns. Returns a bit mask (1 << id). */
unsigned nbd__ctx_match(const char *q, size_t len, bool allow_ns);
unsigned nbd__ctx_all(void);
/* Status flags of an engine extent in context id. */
uint32_t nbd__ctx_status(uint32_t id, uint32_t engine_flags);

/* names.c: for logs */
const char *nbd__opt_name(uint32_t opt);
const char *nbd__cmd_name(uint16_t type);
const char *nbd__rep_name(uint32_t rep);
const char *nbd__err_name(uint32_t err);

#endif
