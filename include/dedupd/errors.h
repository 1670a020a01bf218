/* errors: the conventions shared by server and client.
 * Inside the server every fallible call returns 0 or -errno (sizes: count or -errno).
 * -EUCLEAN means "the bytes on disk are wrong" (CRC or hash mismatch) so that scrub and
 * stats can count corruption apart from ordinary I/O errors. The control protocol carries
 * the positive errno in Response.status; dedupd-ctl prints strerror() of it. */
#ifndef DEDUPD_ERRORS_H
#define DEDUPD_ERRORS_H

#include <errno.h>

/* Process exit codes of both programs. */
enum dedupd_exit {
    DEDUPD_EXIT_OK = 0,
    DEDUPD_EXIT_RUNTIME = 1, /* the request was valid but failed */
    DEDUPD_EXIT_USAGE = 2,   /* bad option, argument or config */
};

#endif
