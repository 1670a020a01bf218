#!/usr/bin/env bash
# bench/profile.sh: where a server spends its CPU during one workload, with perf.
#
#   bench/profile.sh [--server dedupd-rocksdb] [--workload unique] [--size 512M]
#                    [--call-graph fp|dwarf|none]
#
# --call-graph none records samples without stacks: only the flat profile, and less
# overhead in the workload. Before a write workload the page cache is written back and, as
# root, dropped with the source read back in, as bench/run.sh does before its timed writes.
#
# Workloads: unique | dup | zero (nbdcopy writes, as in run.sh), read (unique data written
# first, untimed, then read back), overwrite (unique data written first, untimed, then other
# unique data written over it: what a file system rewriting its blocks costs, 2-3x a first
# write — docs/benchmarks.md, "Measured after item 39"), randwrite | randread (fio 4 KiB
# QD16 for 10 s over a prefilled export). Only the workload itself is recorded (perf record
# -p on the server).
# Output: bench/out/profile-SERVER-WORKLOAD.{data,txt}; the .txt holds the flat profile
# (self time by symbol) and the callers of the top symbols. Use it to write "what bounds the
# numbers" in docs/benchmarks.md.
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$BENCH_ROOT/bench/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

server=dedupd-rocksdb workload=unique size=512M cg=fp
out=$BENCH_ROOT/bench/out
while [ $# -gt 0 ]; do
    case $1 in
    --server) server=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --call-graph) cg=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "profile.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
case $workload in unique | dup | zero | read | overwrite | randwrite | randread) ;; *)
    echo "profile.sh: unknown workload '$workload'" >&2; exit 2 ;;
esac
case $cg in fp | dwarf | none) ;; *)
    echo "profile.sh: --call-graph takes fp, dwarf or none, not '$cg'" >&2; exit 2 ;;
esac
command -v perf >/dev/null || { echo "profile.sh: needs perf (linux-perf)" >&2; exit 1; }
srv_available "$server" || { echo "profile.sh: $server is not available (dedupd not built?)" >&2; exit 1; }
size_b=$(to_bytes "$size")

mkdir -p "$out"
work=$(mktemp -d "$out/work.XXXXXX")
perf_pid=""
trap '[ -n "$perf_pid" ] && kill -INT "$perf_pid" 2>/dev/null; srv_stop; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

src=$work/src.bin
case $workload in
dup) make_dup "$src" "$size_b" "profile-$$-$(date +%s%N)" ;;
zero) truncate -s "$size_b" "$src" ;;
*) make_random "$src" "$size_b" "profile-$$-$(date +%s%N)" ;;
esac
src2=$work/src2.bin # overwrite: what goes over src
[ "$workload" = overwrite ] && make_random "$src2" "$size_b" "profile2-$$-$(date +%s%N)"

srv_start "$server" "$work/srv" "$size_b" || { echo "profile.sh: $SRV_ERR" >&2; exit 1; }
case $workload in
read | randwrite | randread)
    nbdcopy --connections=4 --threads=4 "$src" "$SRV_URI"
    srv_settle 60 6 ;; # as bench/run.sh: the fill's own flushes are not the workload's
overwrite)
    nbdcopy --connections=4 --threads=4 "$src" "$SRV_URI"
    srv_settle 60 ;;
esac

# As bench/run.sh does before its timed phases: the page cache written back and, before a
# write (as root), dropped with the source read back in — the copy into the page cache costs
# several times more in a guest whose free memory was never touched or was handed back.
case $workload in
unique | dup | zero) page_cache_reset "$src" ;;
overwrite) page_cache_reset "$src2" ;;
*) sync ;;
esac
base=$out/profile-$server-$workload
cg_args=(--call-graph "$cg")
[ "$cg" = none ] && cg_args=()
perf record -F 999 "${cg_args[@]}" -p "$SRV_PID" -o "$base.data" >/dev/null 2>"$work/perf.log" &
perf_pid=$!
sleep 0.5
t0=$(now_ns)
case $workload in
unique | dup | zero) nbdcopy --connections=4 --threads=4 "$src" "$SRV_URI" ;;
overwrite) nbdcopy --connections=4 --threads=4 "$src2" "$SRV_URI" ;;
read) nbdcopy --connections=4 --threads=4 "$SRV_URI" null: ;;
randwrite | randread)
    fio --name=p --ioengine=nbd --uri="$SRV_URI" --rw="$workload" --bs=4k --iodepth=16 \
        --size="$size_b" --time_based --runtime=10 --refill_buffers --norandommap \
        --randrepeat=0 >/dev/null ;;
esac
t1=$(now_ns)
kill -INT "$perf_pid"
wait "$perf_pid" 2>/dev/null || true
perf_pid=""
{
    echo "# $server $workload, $((size_b >> 20)) MiB, $(mibs "$size_b" $((t1 - t0))) MiB/s while profiled"
    echo "# flat profile (self time)"
    perf report -i "$base.data" --stdio --no-children -g none --percent-limit 0.5 2>/dev/null |
        grep -v '^$'
    if [ "$cg" != none ]; then
        echo
        echo "# callers of the top symbols"
        perf report -i "$base.data" --stdio --no-children -G --percent-limit 5 2>/dev/null |
            grep -v '^$' | head -n 200
    fi
} >"$base.txt"
echo "profile.sh: wrote $base.txt" >&2
head -n 30 "$base.txt"
