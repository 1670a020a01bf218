/* unixsock: helpers for listening Unix sockets shared by the NBD and control servers.
 * Any thread; blocking calls that never wait (a Unix-socket connect succeeds or is refused
 * at once). */
#ifndef DD_UTIL_UNIXSOCK_H
#define DD_UTIL_UNIXSOCK_H

/* Makes path free for bind(): 0 when nothing is there or a stale socket file was removed;
 * -EADDRINUSE when a live server answers on it; -EEXIST when path is not a socket (never
 * removed: not ours); another -errno when it cannot be probed. who ("nbd", "ctl") starts
 * the one log line written on failure or removal. */
int unixsock_clear_stale(const char *path, const char *who);

#endif
