# nbd-lib.sh: sourced by the nbd-*.sh scripts after lib.sh.
#   nbd_server_start [ARGS...]  start the server under test with a 1 GiB "default" export
#                               and a 16 MiB read-only "ro" export; sets
#                               DD_PORT, DD_SOCK, DD_PID and NBD_HAVE_RO (1 or 0)
#   nbd_server_stop             SIGTERM, bounded wait, exit code 0 required
#   py FILE ARGS...             run a Python script with the system python3 (python3-libnbd)
#   run_nbdsh ARGS...           nbdsh with that python3
# The server under test is dedupd, or — when NBD_TESTSRV names it — nbd_testsrv (the NBD
# module on the in-memory fake engine) or nbd_enginesrv (on the real engine, in DD_DIR).

NBD_PY=/usr/bin/python3
NBD_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

py() { "$NBD_PY" "$@"; }
# nbdsh runs "python3" from PATH; the system one has the nbd module.
run_nbdsh() { PATH="/usr/bin:$PATH" nbdsh "$@"; }

requires_libnbd_python() {
    "$NBD_PY" -c 'import nbd' 2>/dev/null || { echo "SKIP: $TEST_NAME: needs python3-libnbd" >&2; exit 77; }
}

nbd_server_start() {
    NBD_HAVE_RO=0
    if [ -n "${NBD_TESTSRV:-}" ]; then
        DD_PORT=$(free_port)
        DD_SOCK="$TEST_TMP/nbd.sock"
        mkdir -p "$DD_DIR"
        "$NBD_TESTSRV" -d "$DD_DIR" -l "127.0.0.1:$DD_PORT" -l "unix:$DD_SOCK" -e default:1G \
            -e ro:16M:4K:ro --log-level "${DD_LOG_LEVEL:-info}" "$@" \
            >>"$TEST_TMP/dedupd.log" 2>&1 &
        DD_PID=$!
        on_exit "kill -9 $DD_PID"
        wait_until 20 test -S "$DD_SOCK" || fail "nbd_testsrv did not start listening"
        NBD_HAVE_RO=1
    else
        dd_start --default-export-size 1G "$@"
        ctl export create ro 16M --read-only >/dev/null || fail "dedupd-ctl export create ro"
        NBD_HAVE_RO=1
    fi
}

nbd_server_stop() { dd_stop; }

# The server must still answer: a cheap liveness and correctness probe.
nbd_alive() {
    nbdinfo --size "$(nbd_uri default)" >/dev/null 2>&1
}
