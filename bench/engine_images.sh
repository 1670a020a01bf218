#!/usr/bin/env bash
# engine_images.sh OUTDIR: builds a small, realistic image set for engine_bench --images
# from files installed on this machine (no root, no mount): the same tree as ext4 and as
# btrfs, each once as is ("v1") and once rebuilt with an extra directory written first
# ("v2": every later file moves, as when an image is rebuilt from scratch).
# Prints the comma-separated image list on stdout.
set -euo pipefail
out=${1:?usage: engine_images.sh OUTDIR}
tree=${DEDUPD_IMAGE_TREE:-/usr/lib/python3.11}
extra=${DEDUPD_IMAGE_EXTRA:-/usr/share/perl}
size=${DEDUPD_IMAGE_SIZE:-160M}
for p in mke2fs mkfs.btrfs; do
    command -v "$p" >/dev/null || { echo "engine_images.sh: $p missing" >&2; exit 77; }
done
mkdir -p "$out/v1" "$out/v2/0-extra"
cp -a "$tree/." "$out/v1/"
cp -a "$extra/." "$out/v2/0-extra/"
cp -a "$tree/." "$out/v2/"
for v in v1 v2; do
    rm -f "$out/ext4-$v.img" "$out/btrfs-$v.img"
    truncate -s "$size" "$out/ext4-$v.img"
    mke2fs -q -t ext4 -N 65536 -d "$out/$v" "$out/ext4-$v.img"
    truncate -s "$size" "$out/btrfs-$v.img"
    mkfs.btrfs -q --rootdir "$out/$v" "$out/btrfs-$v.img" >/dev/null
done
rm -rf "$out/v1" "$out/v2"
echo "$out/ext4-v1.img,$out/ext4-v2.img,$out/btrfs-v1.img,$out/btrfs-v2.img"
