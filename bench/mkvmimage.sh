#!/usr/bin/env bash
# bench/mkvmimage.sh SIZE OUT: build a realistic VM disk image of exactly SIZE bytes at OUT,
# once: an ext4 file system (mkfs.ext4 -d) over a Debian tree made by unpacking .deb files,
# filled to about 70% of SIZE, padded with zeros (sparse) or cut to SIZE. The .debs come from
# /var/cache/apt/archives, sorted by name so that the image is the same on every machine
# with the same cache; when the cache holds too few, `apt-get download` fetches more from
# BENCH_VM_PACKAGES. An existing OUT of the right size is kept (delete it to rebuild).
set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$BENCH_ROOT/bench/lib.sh"

[ $# -eq 2 ] || { echo "usage: $0 SIZE OUT" >&2; exit 2; }
size=$(to_bytes "$1")
out=$2
if [ -f "$out" ] && [ "$(stat -c %s "$out")" -eq "$size" ]; then
    exit 0
fi
command -v mkfs.ext4 >/dev/null || { echo "mkvmimage: needs mkfs.ext4 (e2fsprogs)" >&2; exit 1; }

work=$(dirname "$out")/vm-build.$$
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree" "$work/debs"
want=$((size * 7 / 10))

# Packages fetched only when the local cache is too small: common, mostly architecture
# dependent ones, as found on a Debian VM.
BENCH_VM_PACKAGES=${BENCH_VM_PACKAGES:-"coreutils bash perl-modules-5.36 libperl5.36 python3.11-minimal libpython3.11-stdlib libpython3.11-minimal systemd libsystemd-shared udev util-linux libc6 libc-bin locales openssl libssl3 vim-runtime vim gcc-12 cpp-12 libgcc-12-dev binutils libbinutils libstdc++-12-dev libstdc++6 git git-man openssh-client openssh-server curl libcurl4 gnupg gpg gpgv dpkg apt libapt-pkg6.0 tzdata iproute2 iptables e2fsprogs man-db groff-base manpages manpages-dev"}

tree_bytes() { du -sB1 "$work/tree" | cut -f1; }

# unpack_from LIST: unpack the .debs named in the file LIST until their Installed-Size adds
# up to the target; a package that would overshoot it by more than 5% is skipped.
filled=0
unpack_from() {
    local deb isz
    while IFS= read -r deb; do
        isz=$(dpkg-deb -f "$deb" Installed-Size 2>/dev/null) || continue
        [[ $isz =~ ^[0-9]+$ ]] || continue
        isz=$((isz << 10))
        [ $((filled + isz)) -le $((want + want / 20)) ] || continue
        dpkg-deb -x "$deb" "$work/tree" 2>/dev/null || continue
        filled=$((filled + isz))
        [ "$filled" -lt $((want - want / 20)) ] || return 0
    done <"$1"
    return 1
}

echo "mkvmimage: unpacking .debs into a tree of ~$((want >> 20)) MiB" >&2
find /var/cache/apt/archives -maxdepth 1 -name '*.deb' 2>/dev/null | sort >"$work/list"
if ! unpack_from "$work/list"; then
    echo "mkvmimage: local apt cache too small; apt-get download of a package set" >&2
    # shellcheck disable=SC2086 # word list on purpose
    (cd "$work/debs" && apt-get download $BENCH_VM_PACKAGES >/dev/null 2>&1) || true
    find "$work/debs" -name '*.deb' | sort >"$work/list"
    unpack_from "$work/list" ||
        echo "mkvmimage: only $((filled >> 20)) MiB of packages found; image is mostly empty" >&2
fi

# mkfs.ext4 -d needs room for the tree plus metadata; a larger file system is cut to SIZE.
fs=$size
tb=$(tree_bytes)
while :; do
    rm -f "$out.tmp"
    truncate -s "$fs" "$out.tmp"
    if nice mkfs.ext4 -q -F -b 4096 -L benchvm -E root_owner=0:0 -d "$work/tree" "$out.tmp" \
        >"$work/mkfs.log" 2>&1; then
        break
    fi
    if [ "$fs" -gt $((4 * size + 4 * tb)) ]; then
        cat "$work/mkfs.log" >&2
        exit 1
    fi
    fs=$((fs + fs / 4))
done
truncate -s "$size" "$out.tmp"
mv "$out.tmp" "$out"
echo "mkvmimage: $out: $((size >> 20)) MiB, $((tb >> 20)) MiB of files, $(du -sB1M "$out" | cut -f1) MiB allocated" >&2
