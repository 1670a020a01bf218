# shellcheck shell=bash disable=SC2034 # SRV_* are read by the scripts that source this file
# bench/lib.sh: server life cycle and measuring helpers for the benchmark scripts
# (sourced by bench/run.sh and bench/scale.sh). Owns how each NBD server is started on
# loopback over a fresh data file or directory, how it is stopped, and how dedupd's memory,
# disk use and dedup ratio are sampled. Knows nothing about workloads or reporting.
#
#   srv_start NAME DIR SIZE   start server NAME over the fresh directory DIR with an export
#                             of SIZE bytes; sets SRV_PID SRV_URI SRV_NAME SRV_DIR; returns
#                             non-zero (with a line in $SRV_ERR) when it cannot start
#   srv_stop                  stop the running server (bounded), whatever state it is in
#   srv_is_dedupd             true when the running server is a dedupd variant
#   dd_sample PREFIX          print "PREFIX_hwm_kib V" ... lines for the running dedupd
#                             (hwm_kib rss_kib store_du_bytes and the stats counters)
#   srv_settle [MAX] [QUIET]  wait until the running server is idle (bounded)
#   now_ns / mibs BYTES NS    clock and throughput helpers
#   page_cache_reset [FILE..] write the page cache back and, when BENCH_DROP_CACHE is 1 and
#                             we are root, drop it; then read the FILEs back in (a client's
#                             source data stays in memory)
#   make_random / make_dup FILE BYTES SEED   source data (unique / one 1 MiB block repeated)
#
# DEDUPD_EXTRA_ARGS: more dedupd options for experiments (split into words), e.g.
# --no-compaction or --log-level info; the published runs leave it empty.
#
# Every server binds 127.0.0.1 only, on a port the kernel picked; every wait is bounded.

BENCH_ROOT=${BENCH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
DEDUPD_BIN=${DEDUPD_BIN:-$BENCH_ROOT/build/release/server/dedupd}
DEDUPD_CTL_BIN=${DEDUPD_CTL_BIN:-$BENCH_ROOT/build/release/client/dedupd-ctl}
PY=${PY:-/usr/bin/python3}

# dedupd-ctl arguments that turn each dedupd variant on after start. The defaults follow the
# documented CLI; override them from the environment if the CLI spells them differently.
BENCH_CTL_ROCKSDB=${BENCH_CTL_ROCKSDB:-}
BENCH_CTL_MEMORY=${BENCH_CTL_MEMORY:-enable -s memory}
BENCH_CTL_XXH3=${BENCH_CTL_XXH3:-enable -a xxh3 --verify}

SRV_PID=""
SRV_URI=""
SRV_NAME=""
SRV_DIR=""
SRV_ERR=""

make_random() { # FILE BYTES SEED: AES-CTR keystream, fast and never repeating
    # head closes the pipe early: openssl's SIGPIPE is expected, the length is checked
    { openssl enc -aes-128-ctr -nosalt -pbkdf2 -pass "pass:$3" -in /dev/zero 2>/dev/null || true; } |
        head -c "$2" >"$1"
    [ "$(stat -c %s "$1")" -eq "$2" ] || { echo "bench: could not generate $1" >&2; exit 1; }
}
make_dup() { # FILE BYTES SEED: one 1 MiB random block repeated
    make_random "$1.blk" $((1 << 20)) "$3"
    local i n=$(($2 >> 20))
    for ((i = 0; i < n; i++)); do cat "$1.blk"; done >"$1"
    rm -f "$1.blk"
}

now_ns() { date +%s%N; }

# 1: page_cache_reset drops clean pages too (--keep-page-cache sets 0; exported, so
# bench/scale.sh started by bench/run.sh --scale follows run.sh).
export BENCH_DROP_CACHE=${BENCH_DROP_CACHE:-1}
[ -w /proc/sys/vm/drop_caches ] || BENCH_DROP_CACHE=0 # not root: written back only

page_cache_reset() {
    sync
    [ "$BENCH_DROP_CACHE" -eq 1 ] || return 0
    echo 3 >/proc/sys/vm/drop_caches
    local f
    for f in "$@"; do cat "$f" >/dev/null; done
}

# mibs BYTES NS: MiB/s with two decimals.
mibs() { awk -v b="$1" -v t="$2" 'BEGIN { printf "%.2f", (b / 1048576) / (t / 1e9) }'; }

# to_bytes 2G|64M|123: bytes (binary units).
to_bytes() {
    local v=$1 n u
    n=${v%[KkMmGgTt]}
    u=${v#"$n"}
    [[ $n =~ ^[0-9]+$ ]] || { echo "bad size: $v" >&2; return 1; }
    case $u in
    "") echo "$n" ;;
    [Kk]) echo $((n << 10)) ;;
    [Mm]) echo $((n << 20)) ;;
    [Gg]) echo $((n << 30)) ;;
    [Tt]) echo $((n << 40)) ;;
    esac
}

free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_nbd SECONDS URI: until the server answers a handshake.
wait_nbd() {
    local n=$(($1 * 10))
    while ((n-- > 0)); do
        nbdinfo --size "$2" >/dev/null 2>&1 && return 0
        [ -n "$SRV_PID" ] && ! kill -0 "$SRV_PID" 2>/dev/null && return 1
        sleep 0.1
    done
    return 1
}

srv_is_dedupd() { [[ $SRV_NAME == dedupd-* ]]; }

srv_available() {
    case $1 in
    nbdkit-file | nbdkit-null) command -v nbdkit >/dev/null ;;
    qemu-nbd) command -v qemu-nbd >/dev/null ;;
    nbd-server) command -v nbd-server >/dev/null ;;
    dedupd-*) [ -x "$DEDUPD_BIN" ] && [ -x "$DEDUPD_CTL_BIN" ] ;;
    *) return 1 ;;
    esac
}

_srv_fail() {
    SRV_ERR="$SRV_NAME: $*"
    srv_stop
    return 1
}

srv_start() {
    SRV_NAME=$1 SRV_DIR=$2
    local size=$3 port
    SRV_ERR="" SRV_PID=""
    port=$(free_port)
    SRV_URI="nbd://127.0.0.1:$port/default"
    mkdir -p "$SRV_DIR"
    case $SRV_NAME in
    nbdkit-file)
        truncate -s "$size" "$SRV_DIR/disk.img"
        nbdkit -f -i 127.0.0.1 -p "$port" file "$SRV_DIR/disk.img" \
            >"$SRV_DIR/server.log" 2>&1 &
        SRV_PID=$!
        ;;
    nbdkit-null) # discards writes, reads zeros: a floor, not a peer
        nbdkit -f -i 127.0.0.1 -p "$port" null size="$size" >"$SRV_DIR/server.log" 2>&1 &
        SRV_PID=$!
        ;;
    qemu-nbd)
        truncate -s "$size" "$SRV_DIR/disk.img"
        qemu-nbd -f raw --cache=writeback -e 8 -t -b 127.0.0.1 -p "$port" -x default \
            "$SRV_DIR/disk.img" >"$SRV_DIR/server.log" 2>&1 &
        SRV_PID=$!
        ;;
    nbd-server)
        # nbd-server always daemonizes to serve more than one client (-d serves one and
        # exits), so its pid is read back from the listening socket.
        truncate -s "$size" "$SRV_DIR/disk.img"
        cat >"$SRV_DIR/nbd-server.conf" <<EOF
[generic]
    listenaddr = 127.0.0.1
    port = $port
    allowlist = false
[default]
    exportname = $SRV_DIR/disk.img
    flush = true
    fua = true
    trim = true
EOF
        nbd-server -C "$SRV_DIR/nbd-server.conf" >"$SRV_DIR/server.log" 2>&1 ||
            { _srv_fail "nbd-server did not start (see $SRV_DIR/server.log)"; return 1; }
        local n=100
        while ((n-- > 0)); do
            SRV_PID=$(ss -Hltnp "sport = :$port" 2>/dev/null |
                sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n1)
            [ -n "$SRV_PID" ] && break
            sleep 0.1
        done
        [ -n "$SRV_PID" ] || { _srv_fail "nbd-server is not listening on $port"; return 1; }
        ;;
    dedupd-*)
        mkdir -p "$SRV_DIR/data"
        "$DEDUPD_BIN" -d "$SRV_DIR/data" -l "127.0.0.1:$port" --default-export-size "$size" \
            --log-level warn ${DEDUPD_EXTRA_ARGS:-} >"$SRV_DIR/server.log" 2>&1 &
        SRV_PID=$!
        ;;
    *)
        SRV_ERR="unknown server $SRV_NAME"
        return 1
        ;;
    esac
    wait_nbd 30 "$SRV_URI" || { _srv_fail "no NBD handshake within 30 s (see $SRV_DIR/server.log)"; return 1; }
    if srv_is_dedupd; then
        local n=100 args=""
        while ((n-- > 0)) && [ ! -S "$SRV_DIR/data/ctl.sock" ]; do sleep 0.1; done
        [ -S "$SRV_DIR/data/ctl.sock" ] || { _srv_fail "no control socket"; return 1; }
        case $SRV_NAME in
        dedupd-rocksdb) args=$BENCH_CTL_ROCKSDB ;;
        dedupd-memory) args=$BENCH_CTL_MEMORY ;;
        dedupd-xxh3v) args=$BENCH_CTL_XXH3 ;;
        esac
        if [ -n "$args" ]; then
            # shellcheck disable=SC2086 # the argument list is a word list on purpose
            "$DEDUPD_CTL_BIN" -s "$SRV_DIR/data/ctl.sock" $args >"$SRV_DIR/ctl-enable.log" 2>&1 ||
                { _srv_fail "'dedupd-ctl $args' failed: $(head -c 300 "$SRV_DIR/ctl-enable.log")"; return 1; }
        fi
    fi
    return 0
}

srv_stop() {
    [ -n "$SRV_PID" ] || return 0
    local kids
    kids=$(ps -o pid= --ppid "$SRV_PID" 2>/dev/null || true)
    kill -TERM "$SRV_PID" 2>/dev/null || true
    local n=300
    while kill -0 "$SRV_PID" 2>/dev/null && ((n-- > 0)); do
        # a daemonized server is reaped by init, which may leave a zombie behind
        [ "$(ps -o stat= -p "$SRV_PID" 2>/dev/null)" = "Z" ] && break
        sleep 0.1
    done
    kill -KILL "$SRV_PID" 2>/dev/null || true
    for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
    wait "$SRV_PID" 2>/dev/null || true
    SRV_PID=""
}

# srv_settle [MAX_SECONDS] [QUIET_SECONDS]: wait (bounded, default 120 s) until the server
# has used under 5% of a core for QUIET (default 2) seconds in a row, so that background
# work left over from a previous step (RocksDB flushes and compactions) is not billed to the
# next measurement.
srv_settle() {
    local max=${1:-120} want=${2:-2} quiet=0 prev cur hz
    hz=$(getconf CLK_TCK)
    prev=$(awk '{ print $14 + $15 }' "/proc/$SRV_PID/stat" 2>/dev/null) || return 0
    while ((max-- > 0)); do
        sleep 1
        cur=$(awk '{ print $14 + $15 }' "/proc/$SRV_PID/stat" 2>/dev/null) || return 0
        if (((cur - prev) * 20 < hz)); then
            quiet=$((quiet + 1))
            ((quiet < want)) || return 0
        else
            quiet=0
        fi
        prev=$cur
    done
    return 0
}

# dd_sample PREFIX: memory, disk use and dedup counters of the running dedupd, as
# "PREFIX_key value" lines. Disk use is the allocated size of the data directory.
dd_sample() {
    local p=$1 st="/proc/$SRV_PID/status"
    [ -r "$st" ] || return 0
    awk -v p="$p" '/^VmHWM:/ { print p "_hwm_kib", $2 } /^VmRSS:/ { print p "_rss_kib", $2 }' "$st"
    echo "${p}_store_du_bytes $(du -sB1 "$SRV_DIR/data" 2>/dev/null | cut -f1)"
    if "$DEDUPD_CTL_BIN" -s "$SRV_DIR/data/ctl.sock" --json stats >"$SRV_DIR/stats-$p.json" 2>/dev/null; then
        "$PY" - "$p" "$SRV_DIR/stats-$p.json" <<'EOF'
import json, sys
p, path = sys.argv[1], sys.argv[2]
try:
    doc = json.load(open(path))
except ValueError:
    sys.exit(0)
tot = doc.get("total", doc) if isinstance(doc, dict) else {}
for key in ("dedup_ratio", "disk_bytes", "unique_bytes", "logical_bytes"):
    v = tot.get(key) if isinstance(tot, dict) else None
    if v is None:
        # accept camelCase from a protobuf JSON printer too
        parts = key.split("_")
        v = tot.get(parts[0] + "".join(w.title() for w in parts[1:])) if isinstance(tot, dict) else None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            v = None
    if isinstance(v, (int, float)):
        print(f"{p}_{key} {v}")
EOF
    fi
}
