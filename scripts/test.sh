#!/usr/bin/env bash
# Installs what is missing, builds with AddressSanitizer + UndefinedBehaviorSanitizer and
# runs every unit and integration test through ctest. Non-zero exit on any failure.
# Extra arguments go to ctest (e.g. -L unit, -R nbd).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DDEDUPD_SANITIZE=address,undefined >/dev/null
cmake --build build/asan -j"$(nproc)"
cd build/asan
ctest --output-on-failure --no-tests=error -j2 "$@"
