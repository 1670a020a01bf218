#!/usr/bin/env bash
# Installs exactly the Debian 12 packages dedupd needs to build, test and benchmark.
# Idempotent: installs only what is missing; `apt-get update` runs only when needed.
# Usage: scripts/install-deps.sh [build|test|bench|all]   (default: all)
set -euo pipefail

build_pkgs=(
    build-essential cmake pkg-config
    libuv1-dev libssl-dev librocksdb-dev libprotobuf-c-dev protobuf-c-compiler
    libinih-dev libxxhash-dev libzstd-dev liblz4-dev libisal-dev
)
test_pkgs=(
    libcriterion-dev valgrind clang libclang-rt-14-dev
    nbdkit libnbd-bin python3-libnbd qemu-utils nbd-server
    btrfs-progs fuse3 util-linux e2fsprogs
)
bench_pkgs=(fio hyperfine gnuplot-nox e2fsprogs linux-perf procps time openssl iproute2)

want=()
case "${1:-all}" in
build) want=("${build_pkgs[@]}") ;;
test) want=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
bench) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
all) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
*) echo "usage: $0 [build|test|bench|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
