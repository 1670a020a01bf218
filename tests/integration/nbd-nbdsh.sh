#!/usr/bin/env bash
# Protocol details through libnbd (python3-libnbd, the library behind nbdsh): options,
# structured replies, block status of both meta contexts, FUA, zeroes, errors.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires nbdsh
requires_libnbd_python

nbd_server_start
py "$NBD_SCRIPTS/nbd_protocol.py" "$(nbd_uri default)" "$DD_SOCK" "$NBD_HAVE_RO" ||
    fail "nbd_protocol.py"
# nbdsh itself, as a user would run it.
run_nbdsh -c 'h.add_meta_context("x-dedupd:shared")' -u "$(nbd_uri default)" \
    -c 'assert h.can_meta_context("x-dedupd:shared")' -c 'print(h.get_size())' \
    >"$TEST_TMP/nbdsh.out" 2>&1 || fail "nbdsh: $(cat "$TEST_TMP/nbdsh.out")"
[ "$(cat "$TEST_TMP/nbdsh.out")" = $((1 << 30)) ] || fail "nbdsh size: $(cat "$TEST_TMP/nbdsh.out")"
nbd_alive || fail "server not answering"
nbd_server_stop
echo ok
