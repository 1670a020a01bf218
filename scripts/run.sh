#!/usr/bin/env bash
# Installs what is missing, builds an optimized dedupd, and runs it in the foreground with
# the data directory under the repo (./var/dedupd), one 16 GiB thin export named "default"
# on 127.0.0.1:10809 and the control socket at ./var/dedupd/ctl.sock. Extra arguments go to
# dedupd (see dedupd --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DDEDUPD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)"
mkdir -p var/dedupd
exec build/release/server/dedupd -d var/dedupd "$@"
