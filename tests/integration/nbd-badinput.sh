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

# SIGTERM in the middle of a copy over four connections: requests in flight are finished,
# the server exits 0 within the bounded wait (and, in the sanitizer build, without leaks).
head -c $((96 << 20)) /dev/urandom >"$TEST_TMP/big.img"
nbdcopy --connections=4 --requests=32 "$TEST_TMP/big.img" "$(nbd_uri default)" \
    >/dev/null 2>&1 &
COPY_PID=$!
on_exit "kill -9 $COPY_PID"
sleep 0.5
nbd_server_stop
wait "$COPY_PID" 2>/dev/null || true
echo ok
