#!/usr/bin/env bash
# bench/scale.sh: dedupd (rocksdb back-end, default settings) with a big index, and its
# memory while more and more is written.
#
#   bench/scale.sh [--chunks 10M] [--chunk-size 4K] [--size 1G] [--reps 3]
#                  [--mem-total 20G] [--mem-step 1G] [--only scale|mem] [--quick] [--no-report]
#                  [--keep-page-cache]
#
# scale: write SIZE of fresh unique data (fio nbd engine, 4 connections of 1 MiB writes at
#   queue depth 16, --refill_buffers) into an empty store, REPS times into fresh ranges; then
#   fill another store with CHUNKS x CHUNK-SIZE bytes of unique data (same fio writes) and
#   repeat the same measurement beyond the filled range, once the server is idle again
#   (RocksDB flushes and compactions of the fill done; bounded wait). Reports full / empty.
#   CHUNKS takes binary suffixes: 10M = 10485760 chunks (40 GiB of 4 KiB chunks).
#   Every timed write starts from the same state: the server idle, the page cache written
#   back and, as root, dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`): the fill leaves
#   RAM full of its recently used pages, which alone cost the full store a third of its
#   write speed, and one GiB's dirty pages slowed the next (docs/benchmarks.md).
#   --keep-page-cache skips the drop.
# mem: write fresh unique data MEM-STEP at a time into one store up to MEM-TOTAL logical,
#   sampling VmRSS, VmHWM and disk use after every step.
# --quick: --chunks 64K --size 64M --reps 1 --mem-total 512M --mem-step 128M unless given.
# BENCH_SCALE_SERVER=nbdkit-file runs the same steps against a peer (to test the script).
# Results: bench/out/scale.tsv, bench/out/memflat.tsv, then bench/report.py.
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$BENCH_ROOT/bench/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }

chunks="" chunk_size=4K size="" reps="" mem_total="" mem_step="" only="" quick=0 report=1
server=${BENCH_SCALE_SERVER:-dedupd-rocksdb}
out=$BENCH_ROOT/bench/out
while [ $# -gt 0 ]; do
    case $1 in
    --chunks) chunks=$2; shift 2 ;;
    --chunk-size) chunk_size=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --mem-total) mem_total=$2; shift 2 ;;
    --mem-step) mem_step=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-report) report=0; shift ;;
    --keep-page-cache) BENCH_DROP_CACHE=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "scale.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ "$quick" -eq 1 ]; then
    chunks=${chunks:-64K} size=${size:-64M} reps=${reps:-1}
    mem_total=${mem_total:-512M} mem_step=${mem_step:-128M}
fi
chunks=$(to_bytes "${chunks:-10M}") # a count: K/M/G multiply by powers of 1024
size_b=$(to_bytes "${size:-1G}")
cs_b=$(to_bytes "$chunk_size")
reps=${reps:-3}
mem_total_b=$(to_bytes "${mem_total:-20G}")
mem_step_b=$(to_bytes "${mem_step:-1G}")
case $only in "" | scale | mem) ;; *) echo "scale.sh: --only scale|mem" >&2; exit 2 ;; esac
for v in "$size_b" "$mem_step_b"; do
    if [ "$v" -le 0 ] || [ $((v % (4 << 20))) -ne 0 ]; then
        echo "scale.sh: --size and --mem-step must be multiples of 4 MiB" >&2
        exit 2
    fi
done

if ! srv_available "$server"; then
    echo "scale.sh: dedupd is not built ($DEDUPD_BIN); nothing to measure" >&2
    exit 0
fi
mkdir -p "$out/raw"
work=$(mktemp -d "$out/work.XXXXXX")
trap 'srv_stop; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

{
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "machine $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1), nproc $(nproc)"
    echo "dedupd $("$DEDUPD_BIN" --version 2>/dev/null | head -n1)"
    [ "$DEDUPD_BIN" = "$BENCH_ROOT/build/release/server/dedupd" ] || echo "dedupd_bin $DEDUPD_BIN"
    [ -z "${BENCH_DEDUPD_SOURCE:-}" ] || echo "dedupd_source $BENCH_DEDUPD_SOURCE"
    echo "commit $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "server $server"
    echo "parameters chunks=$chunks chunk_size=$cs_b size=$size_b reps=$reps mem_total=$mem_total_b mem_step=$mem_step_b"
    if [ "$BENCH_DROP_CACHE" -eq 1 ]; then
        echo "page_cache synced and dropped before each timed write"
    else
        echo "page_cache synced (not dropped) before each timed write"
    fi
} >"$out/scale-machine.txt"

# fio_write URI OFFSET BYTES JSON: unique data in 4 parallel connections; prints MiB/s.
# fio's own rate is used; it is checked against the wall clock around fio, because fio once
# reported a 40 GiB fill here with a runtime of 6.8e12 ms and a rate of 0 (its clock, not
# the write, went wrong). A runtime longer than the wall time (or no rate) is impossible:
# then the wall-clock rate is used, with a warning. (Shorter is normal: fio's start-up.)
fio_write() {
    local part=$(($3 / 4)) t0 t1
    t0=$(now_ns)
    fio --name=seq --ioengine=nbd --uri="$1" --rw=write --bs=1M --iodepth=16 --numjobs=4 \
        --offset="$2" --size="$part" --offset_increment="$part" --refill_buffers \
        --randrepeat=0 --group_reporting --output-format=json --output="$4" >/dev/null 2>&1 ||
        return 1
    t1=$(now_ns)
    "$PY" - "$4" "$3" $((t1 - t0)) <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
fio_mibs = w["bw"] / 1024
wall_s = int(sys.argv[3]) / 1e9
wall_mibs = int(sys.argv[2]) / 1048576 / wall_s
if fio_mibs <= 0 or w["runtime"] > wall_s * 1000 * 1.05 + 50:
    print(f"scale.sh: fio reported {fio_mibs:.2f} MiB/s (runtime {w['runtime']} ms), "
          f"the wall clock {wall_mibs:.2f}: using the wall clock", file=sys.stderr)
    fio_mibs = wall_mibs
print(f"{fio_mibs:.2f}")
EOF
}

dd_chunks() { # chunk count from the stats, or empty
    "$DEDUPD_CTL_BIN" -s "$SRV_DIR/data/ctl.sock" --json stats 2>/dev/null |
        "$PY" -c 'import json,sys
try: print(int(json.load(sys.stdin).get("chunks")))
except Exception: pass' || true
}

if [ "$only" != mem ]; then
    fill=$((chunks * cs_b))
    fill=$(((fill + (4 << 20) - 1) / (4 << 20) * (4 << 20)))
    export_size=$((fill + reps * size_b))
    printf 'store\trep\tchunks\tmibs\n' >"$out/scale.tsv"
    for store in empty full; do
        srv_start "$server" "$work/$store" "$export_size" || { echo "scale.sh: $SRV_ERR" >&2; exit 1; }
        if [ "$store" = full ]; then
            echo "scale.sh: filling a store with $chunks chunks ($((fill >> 20)) MiB)" >&2
            v=$(fio_write "$SRV_URI" 0 "$fill" "$out/raw/scale-fill.json") ||
                { echo "scale.sh: fill failed" >&2; exit 1; }
            echo "scale.sh: filled at $v MiB/s; waiting for the server to go idle" >&2
        fi
        n=""
        for ((r = 1; r <= reps; r++)); do
            # Every repetition from the same state: the server idle, the page cache written
            # back and dropped. Back to back, the third GiB met the dirty limits the first
            # two left and ran at half speed in both stores, so a median of three unlike
            # writes decided the ratio (docs/benchmarks.md, "Scale").
            srv_settle 300 4 # past dedupd's own flush 2-3 s after the last write
            page_cache_reset
            [ -n "$n" ] || n=$(dd_chunks)
            [ -n "$n" ] || n=$([ "$store" = full ] && echo $((fill / cs_b)) || echo 0)
            v=$(fio_write "$SRV_URI" $((fill + (r - 1) * size_b)) "$size_b" "$out/raw/scale-$store-$r.json") ||
                { echo "scale.sh: $store write $r failed" >&2; exit 1; }
            echo "scale.sh: $store store ($n chunks): $v MiB/s" >&2
            printf '%s\t%s\t%s\t%s\n' "$store" "$r" "$n" "$v" >>"$out/scale.tsv"
        done
        srv_stop
        cp "$SRV_DIR/server.log" "$out/raw/scale-$store.server.log" 2>/dev/null || true
        rm -rf "${work:?}/$store"
    done
fi

if [ "$only" != scale ]; then
    printf 'gib\trss_kib\thwm_kib\tdu_bytes\n' >"$out/memflat.tsv"
    steps=$((mem_total_b / mem_step_b))
    srv_start "$server" "$work/mem" $((steps * mem_step_b)) || { echo "scale.sh: $SRV_ERR" >&2; exit 1; }
    for ((g = 1; g <= steps; g++)); do
        fio_write "$SRV_URI" $(((g - 1) * mem_step_b)) "$mem_step_b" "$out/raw/memflat-$g.json" >/dev/null ||
            { echo "scale.sh: memory run: write $g failed" >&2; exit 1; }
        declare -A m=()
        while read -r k v; do m[$k]=$v; done < <(dd_sample s)
        gib=$(awk -v b=$((g * mem_step_b)) 'BEGIN { printf "%.3f", b / 1073741824 }')
        echo "scale.sh: $gib GiB written: VmRSS ${m[s_rss_kib]:-?} KiB, VmHWM ${m[s_hwm_kib]:-?} KiB" >&2
        printf '%s\t%s\t%s\t%s\n' "$gib" "${m[s_rss_kib]:-0}" "${m[s_hwm_kib]:-0}" "${m[s_store_du_bytes]:-0}" >>"$out/memflat.tsv"
    done
    srv_stop
    rm -rf "$work/mem"
fi

if [ "$report" -eq 1 ]; then
    "$PY" "$BENCH_ROOT/bench/report.py" --out "$out" --doc "$BENCH_ROOT/docs/benchmarks.md" \
        --img "$BENCH_ROOT/docs/img"
fi
