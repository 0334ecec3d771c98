#!/usr/bin/env bash
# make test, after `make dist`: every test, with the shipped node build on
# the bed's real sshd nodes (HOSTKEYCTL_NODE_BIN_DIR puts it there, and in
# every `hostkeyctl install` the tests run, in place of cargo's build):
#   x86_64   the whole suite (install, node profiles, lifecycle step, push,
#            rotation: every node-side run is the node build);
#   aarch64  under qemu-user with the arm64 libc of libc6-arm64-cross:
#            converge, --check drift and a rollback.
# The scheduled rotation tests run the shipped x86_64 Lambda zip's
# bootstrap (HOSTKEYCTL_LAMBDA_BOOTSTRAP). The arm64 zip is built and its
# scheduled test run natively by the release workflow's arm64 job
# (scripts/release-arm64.sh; CONTRIBUTING.md, "What runs where").
set -euo pipefail
cd "$(dirname "$0")/.."

dist=$PWD/dist
work=$PWD/target/dist/node-tests
for f in hostkeyctl-x86_64 hostkeyctl-aarch64; do
  [ -x "$dist/$f" ] || { echo "test: $dist/$f is missing: run make dist" >&2; exit 2; }
done
rm -rf "$work"
mkdir -p "$work/x86_64" "$work/aarch64"
install -m 0755 "$dist/hostkeyctl-x86_64" "$work/x86_64/hostkeyctl"
cat >"$work/aarch64/hostkeyctl" <<WRAPPER
#!/bin/sh
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$dist/hostkeyctl-aarch64" "\$@"
WRAPPER
chmod 0755 "$work/aarch64/hostkeyctl"
[ -f "$dist/hostkeyctl-lambda-x86_64.zip" ] || { echo "test: $dist/hostkeyctl-lambda-x86_64.zip is missing: run make dist" >&2; exit 2; }
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$dist/hostkeyctl-lambda-x86_64.zip" "$work/lambda-x86_64"
chmod 0755 "$work/lambda-x86_64/bootstrap"

# The tests build in the admin build's tree and profile (make dist's
# `--profile dist`, target x86_64 glibc 2.17, target/dist): the SDK clients
# and every other dependency compile once, for what ships and for the
# tests (Cargo.toml, [profile.dist]; docs/design-notes.md). clippy (-D
# warnings, as make lint) runs in the same build: clippy-driver is the
# workspace's compiler (what `cargo clippy` does), so its lints cost no
# check build of the dependencies. The wrapper also documents the library
# (rustdoc, broken intra-doc links denied) from the dependencies this build
# made (scripts/rustc-doc-wrapper.sh). Every cargo run below uses the same
# command and environment, or cargo would rebuild the crate.
export RUSTC_WORKSPACE_WRAPPER=$PWD/scripts/rustc-doc-wrapper.sh CLIPPY_ARGS=-Dwarnings
tests=(cargo-zigbuild test --locked --profile dist --target x86_64-unknown-linux-gnu.2.17 --target-dir target/dist
  --features testing,testbed)

# Timed apart (scripts/stage.sh): the build, then each run.
echo "test: the test build, with clippy"
./scripts/stage.sh test-build "${tests[@]}" --all-targets --no-run
echo "test: every test, with the x86_64 node build on the nodes"
starts=$work/bed-starts
: >"$starts"
# Three at a time on two cores: a bed test waits more than it computes
# (sshd and HAProxy starting, a schedule's ticks: the two-minute timer and
# audit run of issue 25), so a third keeps the cores busy.
HOSTKEYCTL_BED_STARTS=$starts HOSTKEYCTL_NODE_BIN_DIR=$work/x86_64 \
  HOSTKEYCTL_LAMBDA_BOOTSTRAP=$work/lambda-x86_64/bootstrap \
  ./scripts/stage.sh test-run "${tests[@]}" --all-targets -- --test-threads 3
# The bed's share (issue 30: at most half): the tests that started one, of
# the integration tests.
total=$("${tests[@]}" --test it -- --list 2>/dev/null | grep -c ': test$')
started=$(sort -u "$starts" | wc -l)
echo "test: $started of $total integration tests started a bed"
echo "test: disk: $(du -sh target/dist | cut -f1) in target/dist"

echo "test: the aarch64 node build under qemu-user"
# By exact name: a test renamed or moved would match nothing and pass in
# silence, so the count of tests run is checked.
arm=(bed::install::a_fresh_node_converges_and_a_second_run_changes_nothing
  bed::install::check_reports_drift_on_a_node_with_other_keys
  bed::install_rollback::a_failing_reload_restores_the_files_byte_for_byte)
HOSTKEYCTL_NODE_BIN_DIR=$work/aarch64 \
  ./scripts/stage.sh test-arm \
  "${tests[@]}" --test it -- --exact "${arm[@]}" | tee "$work/arm.log"
grep -q "test result: ok. ${#arm[@]} passed" "$work/arm.log" ||
  { echo "test: the aarch64 run did not run its ${#arm[@]} tests (renamed?)" >&2; exit 1; }
