#!/usr/bin/env bash
# bench/selftest.sh: tests the harness itself in a few seconds, without dedupd. It runs
# bench/run.sh on 16 MiB against nbdkit and against a stand-in "dedupd" (nbdkit's memory
# plugin behind dedupd's command line, and a dedupd-ctl that answers `stats --json` with
# known counters), then checks that every metric, the dedupd samples, the notes for a
# missing server and the rendered report are there. It writes to a temporary directory and
# leaves bench/out and docs/ alone. Exit 0 = pass, 77 = a needed program is missing.
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
for p in nbdkit nbdcopy nbdinfo fio openssl gnuplot /usr/bin/python3; do
    command -v "$p" >/dev/null || { echo "SKIP: selftest needs $p" >&2; exit 77; }
done

t=$(mktemp -d /tmp/dedupd-bench-selftest.XXXXXX)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: selftest: $*" >&2; exit 1; }

# The stand-in server: dedupd's options, a control socket file, then nbdkit in its place
# (exec, so that the pid the harness samples is the serving process).
cat >"$t/dedupd" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
dir="" listen="" size=""
while [ $# -gt 0 ]; do
    case $1 in
    -d) dir=$2; shift 2 ;;
    -l) listen=$2; shift 2 ;;
    --default-export-size) size=$2; shift 2 ;;
    --log-level) shift 2 ;;
    --version) echo "dedupd stand-in"; exit 0 ;;
    *) echo "fake dedupd: unexpected argument $1" >&2; exit 2 ;;
    esac
done
/usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$dir/ctl.sock"
exec nbdkit -f -i "${listen%:*}" -p "${listen##*:}" memory "$size"
EOF
cat >"$t/dedupd-ctl" <<'EOF'
#!/usr/bin/env bash
# records its arguments; `stats` answers with fixed counters
echo "$*" >>"${FAKE_CTL_LOG:?}"
case " $* " in
*" stats "*) echo '{"exports":[],"total":{"logical_bytes":100,"unique_bytes":40,"disk_bytes":50,"dedup_ratio":2.5},"chunks":10}' ;;
esac
EOF
chmod +x "$t/dedupd" "$t/dedupd-ctl"

# run.sh writes bench/out and docs/: run a copy of bench/ inside a scratch tree
mkdir -p "$t/tree/docs"
cp -r "$BENCH_ROOT/bench" "$t/tree/bench"
rm -rf "$t/tree/bench/out"
cp "$BENCH_ROOT/docs/benchmarks.md" "$t/tree/docs/benchmarks.md"

export FAKE_CTL_LOG=$t/ctl.log
DEDUPD_BIN=$t/dedupd DEDUPD_CTL_BIN=$t/dedupd-ctl \
    "$t/tree/bench/run.sh" --size 16M --reps 2 --rand-time 1 \
    --servers nbdkit-file,dedupd-rocksdb,dedupd-memory,dedupd-xxh3v,no-such-server \
    --workloads unique,dup,zero,rand >"$t/run.log" 2>&1 || { cat "$t/run.log" >&2; fail "run.sh failed"; }

r=$t/tree/bench/out/results.tsv
have() { # WORKLOAD SERVER METRIC COUNT
    local n
    n=$(awk -F'\t' -v w="$1" -v s="$2" -v m="$3" '$2 == w && $3 == s && $4 == m' "$r" | wc -l)
    [ "$n" -eq "$4" ] || fail "$1 $2 $3: $n values, want $4"
}
for s in nbdkit-file dedupd-rocksdb dedupd-memory; do
    for w in unique dup zero; do
        have "$w" "$s" write_mibs 2
        have "$w" "$s" read_mibs 2
    done
    have rand "$s" randwrite_iops 2
    have rand "$s" randread_iops 2
done
have dup dedupd-xxh3v write_mibs 2
have unique dedupd-xxh3v write_mibs 0
have unique dedupd-rocksdb post_write_hwm_kib 2
have unique dedupd-rocksdb post_write_dedup_ratio 2
have rand dedupd-memory post_rand_store_du_bytes 2
have unique dedupd-rocksdb post_write_du_bytes 2
have unique nbdkit-file post_write_hwm_kib 0
awk -F'\t' '$4 == "post_write_dedup_ratio" && $5 != 2.5 { exit 1 }' "$r" || fail "dedup ratio not parsed"
! grep -q $'\tstatus\t' "$r" || fail "a measurement failed: $(grep $'\tstatus\t' "$r" | head -n 3)"
grep -q '^no-such-server skipped' "$t/tree/bench/out/notes.txt" || fail "no note for a missing server"
grep -q -- '-s memory' "$t/ctl.log" || fail "memory variant not enabled through dedupd-ctl"
grep -q -- '-a xxh3 --verify' "$t/ctl.log" || fail "xxh3 variant not enabled through dedupd-ctl"

d=$t/tree/docs/benchmarks.md
grep -q '^| unique random | ' "$d" || fail "no write table in the report"
grep -q '^| dedupd-rocksdb | unique random | .* | 100 B | 50 B | 2.50 |$' "$d" || fail "no dedupd resources row"
grep -q '^| unique sequential write | ≥ 0.6× | [0-9.]*× | \*\*\(met\|missed\)\*\* |$' "$d" ||
    fail "unique write target not evaluated"
grep -q 'Quick development run' "$d" || fail "a 16 MiB run is not labelled as a quick run"
for png in seq_write seq_read rand; do
    [ -s "$t/tree/docs/img/$png.png" ] || fail "no $png.png"
done
echo "ok: bench selftest"
