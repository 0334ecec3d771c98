#!/usr/bin/env bash
# make test, after `make dist`: when the disk is short, removes the dist
# build tree (target/dist/<target triple>: about 3 GB, the admin build's SDK
# clients most of it) before the checks and the test build need the room
# (about 4 GB more: clippy's artifacts and the debug test build). dist/ and
# the staged binaries stay; the next `make dist` rebuilds from scratch.
# A clean-clone CI run ran out of disk building the tests with that tree in
# place; on a roomy machine the tree stays, and `make dist` stays warm.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target
need_gib=${HOSTKEYCTL_PRUNE_BELOW_GIB:-12}
free_gib=$(($(df -Pk target | awk 'NR == 2 { print $4 }') / 1024 / 1024))
if [ "$free_gib" -ge "$need_gib" ]; then
  exit 0
fi
trees=(target/dist/*-unknown-linux-gnu)
[ -e "${trees[0]}" ] || exit 0
size=$(du -sch "${trees[@]}" | tail -n1 | cut -f1)
echo "prune-dist-tree: ${free_gib} GiB free, under ${need_gib}: removing the dist build tree (${size}); the next make dist rebuilds it"
rm -rf "${trees[@]}"
