# lib.sh: sourced by every integration script.
#   requires PROG...         exit 77 (skip) when a client program is missing
#   dd_start [ARGS...]       start dedupd on a private data dir, TCP port and Unix socket;
#                            sets DD_DIR, DD_PORT, DD_SOCK (NBD unix socket), DD_CTL, DD_PID
#   dd_stop                  SIGTERM and wait (bounded); fails if the exit code is not 0
#   dd_kill                  SIGKILL (crash)
#   ctl ARGS...              dedupd-ctl on the test server's control socket
#   on_exit CMD              run CMD at exit (LIFO), whatever happens
#   small_fs SIZE            the data dir on a tmpfs of SIZE at $FS (root; else skip, 77)
#   fail MSG                 print and exit 1
# Every server binds 127.0.0.1 or a Unix socket only; every wait is bounded.
set -euo pipefail

: "${DEDUPD_BIN:?set by ctest}"
: "${DEDUPD_CTL_BIN:?set by ctest}"
TEST_NAME=$(basename "$0" .sh)
TEST_TMP=$(mktemp -d "/tmp/dedupd-${TEST_NAME}.XXXXXX")
_exit_cmds=()

on_exit() { _exit_cmds+=("$*"); }
_run_exit() {
    local rc=$?
    for ((i = ${#_exit_cmds[@]} - 1; i >= 0; i--)); do
        eval "${_exit_cmds[$i]}" >/dev/null 2>&1 || true
    done
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -f "$TEST_TMP/dedupd.log" ]; then
        echo "---- dedupd log (last 40 lines) ----" >&2
        tail -n 40 "$TEST_TMP/dedupd.log" >&2
    fi
    rm -rf "$TEST_TMP"
    exit "$rc"
}
trap _run_exit EXIT

fail() { echo "FAIL: $TEST_NAME: $*" >&2; exit 1; }
log() { echo "# $TEST_NAME: $*" >&2; }

requires() {
    for p in "$@"; do
        command -v "$p" >/dev/null 2>&1 || { echo "SKIP: $TEST_NAME: needs $p" >&2; exit 77; }
    done
}

# A free TCP port on 127.0.0.1 (the kernel picks; tiny race accepted in tests).
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_until SECONDS CMD...: retry CMD every 0.1 s until it succeeds or time runs out.
wait_until() {
    local t=$1; shift
    local n=$((t * 10))
    while ((n-- > 0)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# small_fs SIZE: a tmpfs of SIZE mounted for this test at $FS, with the data directory on
# it (DD_DIR), unmounted at exit: a file system that really fills up. Needs root and
# permission to mount (a container without CAP_SYS_ADMIN has neither): skips (77)
# otherwise — faking ENOSPC in an I/O layer would not show what the kernel and RocksDB do.
small_fs() {
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: $TEST_NAME: needs root for mount" >&2; exit 77; }
    FS="$TEST_TMP/fs"
    mkdir -p "$FS"
    mount -t tmpfs -o "size=$1" tmpfs "$FS" ||
        { echo "SKIP: $TEST_NAME: cannot mount tmpfs" >&2; exit 77; }
    on_exit "umount -l '$FS'"
    DD_DIR="$FS/data"
}

DD_DIR="$TEST_TMP/data"
DD_PID=""
dd_start() {
    DD_PORT=$(free_port)
    DD_SOCK="$TEST_TMP/nbd.sock"
    DD_CTL="$DD_DIR/ctl.sock"
    mkdir -p "$DD_DIR"
    "$DEDUPD_BIN" -d "$DD_DIR" -l "127.0.0.1:$DD_PORT" -l "unix:$DD_SOCK" \
        --log-level "${DD_LOG_LEVEL:-info}" "$@" >>"$TEST_TMP/dedupd.log" 2>&1 &
    DD_PID=$!
    on_exit "kill -9 $DD_PID"
    wait_until 20 test -S "$DD_SOCK" || fail "dedupd did not start listening"
    wait_until 10 test -S "$DD_CTL" || fail "dedupd control socket did not appear"
    kill -0 "$DD_PID" 2>/dev/null || fail "dedupd exited at start"
}

dd_stop() {
    [ -n "$DD_PID" ] || return 0
    kill -TERM "$DD_PID"
    local n=300
    while kill -0 "$DD_PID" 2>/dev/null && ((n-- > 0)); do sleep 0.1; done
    kill -0 "$DD_PID" 2>/dev/null && fail "dedupd did not stop within 30 s of SIGTERM"
    local rc=0
    wait "$DD_PID" || rc=$?
    DD_PID=""
    [ "$rc" -eq 0 ] || fail "dedupd exited with $rc on SIGTERM"
}

dd_kill() {
    [ -n "$DD_PID" ] || return 0
    kill -9 "$DD_PID" 2>/dev/null || true
    wait "$DD_PID" 2>/dev/null || true
    DD_PID=""
}

ctl() { "$DEDUPD_CTL_BIN" -s "$DD_CTL" "$@"; }

# NBD URIs for the test server.
nbd_uri() { echo "nbd://127.0.0.1:$DD_PORT/${1:-default}"; }
nbd_unix_uri() { echo "nbd+unix:///${1:-default}?socket=$DD_SOCK"; }
