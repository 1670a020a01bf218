/* dedupd-ctl internals: the connection (conn.c), output helpers (print.c, json.c) and one
 * entry point per command group (cmd_*.c). */
#ifndef DD_CLIENT_CLIENT_H
#define DD_CLIENT_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "dedupd.pb-c.h"
#include "json.h"

#define PROG "dedupd-ctl"

struct client {
    const char *socket_path;
    bool json;
    bool tty; /* stderr is a terminal: progress on one updating line */
    int fd;   /* -1 until the first call */
};

/* Sends req and waits for the final Response (progress updates go to stderr unless --json).
 * NULL after printing why (connection or protocol failure). timeout_sec 0 = wait forever.
 * Free the result with dedupd__response__free_unpacked(r, NULL). */
Dedupd__Response *client_call(struct client *c, Dedupd__Request *req, int timeout_sec);
void client_close(struct client *c);
/* client_call + client_status + a check that the result is `want` (NOT_SET: any). NULL with
 * *exit_code set after printing why; else the Response and *exit_code = 0. */
Dedupd__Response *client_request(struct client *c, Dedupd__Request *req, int timeout_sec,
                                 Dedupd__Response__ResultCase want, int *exit_code);

/* A failed Response: prints "dedupd-ctl: MESSAGE" on stderr (and a JSON error object on
 * stdout with --json) and returns DEDUPD_EXIT_RUNTIME; a good one returns DEDUPD_EXIT_OK. */
int client_status(struct client *c, const Dedupd__Response *r);

/* Usage errors: message + "Try ..." on stderr; returns DEDUPD_EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Human size ("4.0 KiB") into a static rotating buffer: valid for a few calls. */
const char *hsize(uint64_t bytes);
/* Parses a size argument ("16G", "4096"); prints a usage error and returns false if bad. */
bool parse_size_arg(const char *cmd, const char *what, const char *arg, uint64_t *out);

/* Commands: argv[0] is the command word; return an exit code. */
int cmd_status(struct client *c, int argc, char **argv);
int cmd_enable(struct client *c, int argc, char **argv);
int cmd_disable(struct client *c, int argc, char **argv);
int cmd_stats(struct client *c, int argc, char **argv);
int cmd_export(struct client *c, int argc, char **argv);
int cmd_gc(struct client *c, int argc, char **argv);
int cmd_scrub(struct client *c, int argc, char **argv);
int cmd_check(struct client *c, int argc, char **argv);

#endif
