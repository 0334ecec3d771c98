#!/usr/bin/env bash
# make test, after `make dist`: every test, with the shipped node build on
# the bed's real sshd nodes (HOSTKEYCTL_NODE_BIN_DIR puts it there, and in
# every `hostkeyctl install` the tests run, in place of cargo's build):
#   x86_64   the whole suite (install, node profiles, lifecycle step, push,
#            rotation: every node-side run is the node build);
#   aarch64  under qemu-user with the arm64 libc of libc6-arm64-cross:
#            converge, --check drift and a rollback.
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

# Timed apart (scripts/stage.sh): the build, then each run.
echo "test: the test build"
./scripts/stage.sh test-build cargo test --locked --all-targets --features testing,testbed --no-run
echo "test: every test, with the x86_64 node build on the nodes"
HOSTKEYCTL_NODE_BIN_DIR=$work/x86_64 ./scripts/stage.sh test-run \
  cargo test --locked --all-targets --features testing,testbed

# Disk (scripts/prune-dist-tree.sh): the dependencies of the debug build
# carry no debug info (Cargo.toml, profile.dev); with it the SDK clients
# took gigabytes more and a CI run ran out of disk.
debug_dir=${CARGO_TARGET_DIR:-target}/debug
rlibs=("$debug_dir"/deps/libaws_sdk_secretsmanager-*.rlib)
[ -e "${rlibs[0]}" ] || { echo "test: no aws-sdk-secretsmanager rlib in $debug_dir/deps to check for debug info" >&2; exit 1; }
for rlib in "${rlibs[@]}"; do
  sections=$(objdump -h "$rlib")
  if grep -q '\.debug_info' <<<"$sections"; then
    echo "test: $rlib carries debug info: keep [profile.dev.package.\"*\"] debug = false in Cargo.toml" >&2
    exit 1
  fi
done
echo "test: disk: $(du -sh "$debug_dir" | cut -f1) in $debug_dir, $(du -sh target/dist | cut -f1) in target/dist"

echo "test: the aarch64 node build under qemu-user"
HOSTKEYCTL_NODE_BIN_DIR=$work/aarch64 ./scripts/stage.sh test-arm \
  cargo test --locked --features testing,testbed --test it -- --exact \
  install::a_fresh_node_converges_and_a_second_run_changes_nothing \
  install::check_reports_drift_on_a_node_with_other_keys \
  install::a_failing_reload_restores_the_files_byte_for_byte
