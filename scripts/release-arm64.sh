#!/usr/bin/env bash
# The release workflow's arm64 job (.github/workflows/release.yml), on an
# arm64 machine, as root (the bed's sshd nodes need it):
#   - the aarch64 node build and the aarch64 admin build, built natively
#     for glibc 2.17 (as scripts/dist.sh builds them on x86_64);
#   - dist-arm64/hostkeyctl-lambda-arm64.zip from the admin build, checked
#     as scripts/check_dist.py checks every zip;
#   - the scheduled rotation's bed test, its function run by that zip's
#     own bootstrap, with the aarch64 node build on the nodes.
# make test on x86_64 builds neither arm64 build of the admin: it is the
# slowest build there is on an x86_64 machine (CONTRIBUTING.md, "What
# runs where").
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(uname -m)" = aarch64 ] || { echo "release-arm64: run on an arm64 machine (this one is $(uname -m))" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "release-arm64: run as root (the bed's sshd nodes need it)" >&2; exit 2; }

./scripts/install-deps.sh
./scripts/install-dist-deps.sh

glibc=2.17
target=aarch64-unknown-linux-gnu.$glibc
target_dir=target/dist
out=dist-arm64
work=$target_dir/arm64-tests

echo "release-arm64: node and admin builds (aarch64, glibc $glibc)"
cargo zigbuild --locked --quiet --profile dist-node --no-default-features --features node \
  --target "$target" --target-dir "$target_dir"
cargo zigbuild --locked --quiet --profile dist --target "$target" --target-dir "$target_dir"

rm -rf "$out" "$work"
mkdir -p "$out" "$work/node" "$work/lambda"
python3 scripts/lambda_zip.py "$target_dir/aarch64-unknown-linux-gnu/dist/hostkeyctl" "$out/hostkeyctl-lambda-arm64.zip"
install -m 0755 "$target_dir/aarch64-unknown-linux-gnu/dist-node/hostkeyctl" "$work/node/hostkeyctl"
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$out/hostkeyctl-lambda-arm64.zip" "$work/lambda"
chmod 0755 "$work/lambda/bootstrap"
# As check_dist.py checks the x86_64 one: outside Lambda it refuses, saying why.
set +e
said=$(env -i PATH=/usr/bin:/bin "$work/lambda/bootstrap" 2>&1)
status=$?
set -e
if [ "$status" -ne 2 ] || ! grep -q "AWS_LAMBDA_RUNTIME_API is not set" <<<"$said"; then
  echo "release-arm64: bootstrap outside Lambda exited $status: $said" >&2
  exit 1
fi

echo "release-arm64: the scheduled rotations, run by the arm64 zip's bootstrap"
test_name=bed::scheduled::a_pull_fleet_goes_through_three_scheduled_rotations_a_stopped_timer_and_a_failed_one
HOSTKEYCTL_NODE_BIN_DIR=$PWD/$work/node HOSTKEYCTL_LAMBDA_BOOTSTRAP=$PWD/$work/lambda/bootstrap \
  cargo-zigbuild test --locked --profile dist --target "$target" --target-dir "$target_dir" \
  --features testing,testbed --test it -- --exact "$test_name" | tee "$work/test.log"
# By exact name: a renamed test would match nothing and pass in silence.
grep -q "test result: ok. 1 passed" "$work/test.log" ||
  { echo "release-arm64: $test_name did not run (renamed?)" >&2; exit 1; }

(cd "$out" && sha256sum -- * >SHA256SUMS.arm64)
echo "release-arm64: done"
ls -l "$out"
