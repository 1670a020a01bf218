#!/usr/bin/env bash
# Bad input: garbage handshakes, truncated requests, huge lengths, abrupt disconnects,
# hundreds of connections opened and dropped, the connection limit, and a client that
# never reads its replies. The server stays up, correct, and bounded in memory.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires nbdinfo
requires_libnbd_python

MAX_CONN=40
nbd_server_start --max-connections "$MAX_CONN"
py "$NBD_SCRIPTS/nbd_badinput.py" 127.0.0.1 "$DD_PORT" "$DD_PID" "$MAX_CONN" ||
    fail "nbd_badinput.py"
grep -q "refused" "$TEST_TMP/dedupd.log" || fail "refusal over max_connections not logged"
nbd_alive || fail "server not answering"
nbd_server_stop
echo ok
