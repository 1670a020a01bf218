#!/usr/bin/env bash
# bench/run.sh: dedupd side by side with peer NBD servers, one command.
#
#   bench/run.sh [--size 2G] [--reps 3] [--quick] [--servers LIST] [--workloads LIST]
#                [--rand-time SECONDS] [--scale] [--no-report] [--keep-page-cache]
#
# For every repetition, every workload and every server (the server order rotates so that
# no server always runs first or last), it starts the server on 127.0.0.1 over a fresh data
# file or directory, runs the workload, samples dedupd's memory, disk use and dedup ratio,
# and stops the server. Workloads (SIZE each):
#   unique  nbdcopy of fresh random data (new data every repetition)  then read it back
#   dup     nbdcopy of one 1 MiB random block repeated                 then read it back
#   vm      nbdcopy of an ext4 image of unpacked .debs (cached)        then read it back
#   zero    nbdcopy of a sparse all-zero file (WRITE_ZEROES)           then read it back
#           (each repetition also runs it against `nbdkit null`, a server that does no
#           work at all: the client and protocol floor, reported next to the target)
#   rand    prefill with random data, then fio 4 KiB random writes and reads at QD16
# Before every timed phase the deferred work of the phase before it is done: the page
# cache is written back (sync; nbdkit and nbd-server never flush), and dedupd is left to
# go idle (srv_settle), so no phase pays for the RocksDB flushes and compactions an earlier
# one left (a random read right after 20 s of random writes ran at 87-95k IOPS, after a
# pause at 133-138k). Before every timed sequential write the page cache is also dropped,
# as root, and the source file read back into memory: with only the sync, `nbdkit file`
# alone wrote 2 GiB at 800-1950 MiB/s depending on what earlier runs had left cached, with
# the drop at 1750-1980 (docs/benchmarks.md); dedupd's writes did not change. Reads, and
# the random I/O after its prefill, start from the page cache their writes left, as a
# client would find it. --keep-page-cache skips the drops.
# nbdcopy runs with --connections=4 --threads=4. Results: bench/out/results.tsv, raw logs
# in bench/out/raw/, then bench/report.py writes docs/benchmarks.md and docs/img/*.png.
# A server that is not installed (or dedupd not built) is skipped with a note. --scale runs
# bench/scale.sh afterwards (with --quick when this run is quick).
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$BENCH_ROOT/bench/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

size="" reps="" rand_time="" quick=0 report=1 scale=0
servers="nbdkit-file,qemu-nbd,nbd-server,dedupd-rocksdb,dedupd-memory,dedupd-xxh3v"
workloads="unique,dup,vm,zero,rand"
out=$BENCH_ROOT/bench/out
while [ $# -gt 0 ]; do
    case $1 in
    --size) size=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --servers) servers=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --rand-time) rand_time=$2; shift 2 ;;
    --scale) scale=1; shift ;;
    --no-report) report=0; shift ;;
    --keep-page-cache) BENCH_DROP_CACHE=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ "$quick" -eq 1 ]; then
    size=${size:-256M} reps=${reps:-1} rand_time=${rand_time:-5}
fi
size=${size:-2G} reps=${reps:-3} rand_time=${rand_time:-20}
size_b=$(to_bytes "$size")
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --reps must be a positive integer" >&2; exit 2; }
if [ "$size_b" -lt $((16 << 20)) ] || [ $((size_b % (1 << 20))) -ne 0 ]; then
    echo "run.sh: --size must be a whole number of MiB, at least 16M" >&2
    exit 2
fi
IFS=, read -r -a server_list <<<"$servers"
IFS=, read -r -a workload_list <<<"$workloads"

for p in nbdcopy nbdinfo fio openssl "$PY"; do
    command -v "$p" >/dev/null || { echo "run.sh: needs $p (scripts/install-deps.sh bench)" >&2; exit 1; }
done
fio --enghelp 2>/dev/null | grep -qw nbd || { echo "run.sh: this fio has no nbd engine" >&2; exit 1; }

mkdir -p "$out/raw"
results=$out/results.tsv notes=$out/notes.txt
: >"$notes"
printf 'rep\tworkload\tserver\tmetric\tvalue\n' >"$results"
note() { echo "run.sh: $*" >&2; echo "$*" >>"$notes"; }
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$s" "$1" "$2" >>"$results"; }

# Source data lives in RAM when /dev/shm has room, so that reading it costs the client
# little and no write-back of source files competes with the servers for the disk.
shm_free=$(df -B1 --output=avail /dev/shm 2>/dev/null | tail -n1 || echo 0)
if [ "${shm_free:-0}" -gt $((3 * size_b + (1 << 30))) ]; then
    src=$(mktemp -d /dev/shm/dedupd-bench.XXXXXX)
else
    src=$(mktemp -d "$out/src.XXXXXX")
fi
work=$(mktemp -d "$out/work.XXXXXX")
cleanup() { srv_stop; rm -rf "$src" "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- machine and run description (read by report.py) ---
{
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
    echo "cpu_mhz $(sed -n 's/^cpu MHz[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
    echo "cpu_flags $(grep -o -w -E 'sha_ni|aes|avx2|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "nproc $(nproc)"
    echo "mem_total_kib $(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
    echo "kernel $(uname -r)"
    echo "size $size_b"
    echo "reps $reps"
    echo "rand_time $rand_time"
    echo "servers $servers"
    echo "workloads $workloads"
    echo "quick $quick"
    echo "page_cache_drop $BENCH_DROP_CACHE"
    echo "nbdkit $(nbdkit --version 2>/dev/null | head -n1)"
    echo "qemu_nbd $(qemu-nbd --version 2>/dev/null | head -n1)"
    echo "nbd_server $(nbd-server -V 2>&1 | sed -n 's/.*version //p' | head -n1)"
    echo "nbdcopy $(nbdcopy --version | head -n1)"
    echo "fio $(fio --version)"
    echo "dedupd $([ -x "$DEDUPD_BIN" ] && "$DEDUPD_BIN" --version 2>/dev/null | head -n1 || echo none)"
    echo "dedupd_commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    # where the measured dedupd came from when it is not this tree's build/release
    [ "$DEDUPD_BIN" = "$BENCH_ROOT/build/release/server/dedupd" ] || echo "dedupd_bin $DEDUPD_BIN"
    [ -z "${BENCH_DEDUPD_SOURCE:-}" ] || echo "dedupd_source $BENCH_DEDUPD_SOURCE"
} >"$out/machine.txt"

available=()
for s in "${server_list[@]}"; do
    if srv_available "$s"; then
        available+=("$s")
    elif [[ $s == dedupd-* ]]; then
        note "$s skipped: dedupd is not built (${DEDUPD_BIN#"$BENCH_ROOT"/} or ${DEDUPD_CTL_BIN#"$BENCH_ROOT"/} missing)"
    else
        note "$s skipped: not installed"
    fi
done
[ ${#available[@]} -gt 0 ] || { echo "run.sh: no server to measure" >&2; exit 1; }

applies() { # SERVER WORKLOAD: xxh3+verify is measured where it matters, on duplicates
    [ "$1" != dedupd-xxh3v ] || [ "$2" = dup ]
}

# --- source data ---
vm_image=$out/vm-$size_b.img
for w in "${workload_list[@]}"; do
    case $w in
    vm) "$BENCH_ROOT/bench/mkvmimage.sh" "$size_b" "$vm_image" ;;
    unique | dup | zero | rand) ;;
    *) echo "run.sh: unknown workload '$w'" >&2; exit 2 ;;
    esac
done

# check_sample URI FILE: the server returns the source bytes at 8 spread-out offsets (a
# benchmark of a server that returns wrong data is worthless).
check_sample() {
    "$PY" - "$1" "$2" "$size_b" <<'EOF'
import sys, nbd
uri, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
blk = 1 << 16
with open(path, "rb") as f:
    for i in range(8):
        off = (size - blk) * i // 7 // 4096 * 4096
        f.seek(off)
        want = f.read(blk)
        if h.pread(blk, off) != want:
            print(f"mismatch at offset {off}", file=sys.stderr)
            sys.exit(1)
h.shutdown()
EOF
}

# Before a timed phase: the deferred work of the phase before it is done. For the page-
# cache writers that is the kernel's write-back (sync); for dedupd also its own RocksDB
# memtable flushes and compactions (srv_settle: its CPU use falls below 5% for QUIET s,
# default 4: longer than the 2-3 s after the last write at which dedupd flushes its
# memtables on its own, so that flush runs before the next phase, not during it). Random
# writes leave the filled segments about half live, at the background compaction's
# threshold: the fio phases wait 6 quiet seconds, longer than its 5 s poll, so a pass that
# would begin right after a shorter settle runs before the reads, not during them.
settle() {
    if srv_is_dedupd; then srv_settle 120 "${1:-4}"; fi
    sync
}

# timed_copy FROM TO LOG: nanoseconds on stdout, or fails.
timed_copy() {
    local t0 t1
    settle
    t0=$(now_ns)
    nbdcopy --connections=4 --threads=4 "$1" "$2" >"$3" 2>&1 || return 1
    t1=$(now_ns)
    echo $((t1 - t0))
}

fio_run() { # MODE URI JSON
    settle 6
    fio --name="$1" --ioengine=nbd --uri="$2" --rw="$1" --bs=4k --iodepth=16 --size="$size_b" \
        --time_based --runtime="$rand_time" --ramp_time=1 --refill_buffers --norandommap \
        --randrepeat=0 --output-format=json --output="$3" >/dev/null 2>&1 || return 1
    "$PY" - "$3" "$1" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["write" if sys.argv[2] == "randwrite" else "read"]
print(f"{d['iops']:.1f} {d['bw'] / 1024:.2f}")
EOF
}

run_case() { # uses rep w s
    local dir=$work/$s-$w-$rep tag=$w-$s-r$rep srcfile ns v
    rm -rf "$dir"
    if ! srv_start "$s" "$dir" "$size_b"; then
        note "rep $rep $w: $SRV_ERR"
        record status start-failed
        cp "$dir/server.log" "$out/raw/$tag.server.log" 2>/dev/null || true
        rm -rf "$dir"
        return 0
    fi
    case $w in
    unique | dup | vm | zero)
        case $w in
        unique) srcfile=$src/unique.bin ;;
        dup) srcfile=$src/dup.bin ;;
        vm) srcfile=$vm_image ;;
        zero) srcfile=$src/zero.bin ;;
        esac
        page_cache_reset "$srcfile"
        if ns=$(timed_copy "$srcfile" "$SRV_URI" "$out/raw/$tag.write.log"); then
            record write_mibs "$(mibs "$size_b" "$ns")"
        else
            note "rep $rep $w $s: write failed (see bench/out/raw/$tag.write.log)"
            record status write-failed
        fi
        record post_write_du_bytes "$(du -sB1 "$dir" | cut -f1)"
        srv_is_dedupd && dd_sample post_write | while read -r k v; do record "$k" "$v"; done
        if ns=$(timed_copy "$SRV_URI" null: "$out/raw/$tag.read.log"); then
            record read_mibs "$(mibs "$size_b" "$ns")"
        else
            note "rep $rep $w $s: read failed (see bench/out/raw/$tag.read.log)"
            record status read-failed
        fi
        if ! check_sample "$SRV_URI" "$srcfile" 2>"$out/raw/$tag.check.log"; then
            note "rep $rep $w $s: DATA MISMATCH on read-back ($(head -c 200 "$out/raw/$tag.check.log"))"
            record status data-mismatch
        fi
        srv_is_dedupd && dd_sample post_read | while read -r k v; do record "$k" "$v"; done
        ;;
    rand)
        # every 4 KiB read must hit written data: fill the whole export first (untimed)
        if ! timed_copy "$src/unique.bin" "$SRV_URI" "$out/raw/$tag.fill.log" >/dev/null; then
            note "rep $rep rand $s: prefill failed"
            record status write-failed
        fi
        if v=$(fio_run randwrite "$SRV_URI" "$out/raw/$tag.randwrite.json"); then
            record randwrite_iops "${v% *}"
            record randwrite_mibs "${v#* }"
        else
            note "rep $rep rand $s: fio randwrite failed"
            record status randwrite-failed
        fi
        if v=$(fio_run randread "$SRV_URI" "$out/raw/$tag.randread.json"); then
            record randread_iops "${v% *}"
            record randread_mibs "${v#* }"
        else
            note "rep $rep rand $s: fio randread failed"
            record status randread-failed
        fi
        record post_write_du_bytes "$(du -sB1 "$dir" | cut -f1)"
        srv_is_dedupd && dd_sample post_rand | while read -r k v; do record "$k" "$v"; done
        ;;
    esac
    if ! kill -0 "$SRV_PID" 2>/dev/null; then
        note "rep $rep $w $s: server died during the workload (log: bench/out/raw/$tag.server.log)"
        record status died
    fi
    srv_stop
    cp "$dir/server.log" "$out/raw/$tag.server.log" 2>/dev/null || true
    rm -rf "$dir"
}

nsrv=${#available[@]}
for ((rep = 1; rep <= reps; rep++)); do
    echo "run.sh: repetition $rep/$reps: generating fresh source data ($((size_b >> 20)) MiB)" >&2
    make_random "$src/unique.bin" "$size_b" "unique-$rep-$$-$(date +%s%N)"
    make_dup "$src/dup.bin" "$size_b" "dup-$rep-$$-$(date +%s%N)"
    rm -f "$src/zero.bin"
    truncate -s "$size_b" "$src/zero.bin"
    widx=0
    for w in "${workload_list[@]}"; do
        for ((i = 0; i < nsrv; i++)); do
            s=${available[$(((i + rep + widx) % nsrv))]}
            applies "$s" "$w" || continue
            echo "run.sh: rep $rep/$reps  $w  $s" >&2
            run_case
        done
        # WRITE_ZEROES is metadata only for the servers: what bounds it is nbdcopy and the
        # protocol, measured against a server that does nothing (not a peer: no table).
        if [ "$w" = zero ] && srv_available nbdkit-null; then
            s=nbdkit-null
            echo "run.sh: rep $rep/$reps  $w  $s (client floor)" >&2
            run_case
        fi
        widx=$((widx + 1))
    done
done

if [ "$scale" -eq 1 ]; then
    if [ "$quick" -eq 1 ]; then
        "$BENCH_ROOT/bench/scale.sh" --quick --no-report
    else
        "$BENCH_ROOT/bench/scale.sh" --no-report
    fi
fi
if [ "$report" -eq 1 ]; then
    "$PY" "$BENCH_ROOT/bench/report.py" --out "$out" --doc "$BENCH_ROOT/docs/benchmarks.md" \
        --img "$BENCH_ROOT/docs/img"
fi
