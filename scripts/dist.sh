#!/usr/bin/env bash
# make dist: what ships, in dist/ (docs/install.md, "Builds and packages"):
#   hostkeyctl-x86_64, hostkeyctl-aarch64   the node build (install only),
#                                            for glibc 2.17 and later
#   hostkeyctl-admin-x86_64                 the admin build (every command)
#   hostkeyctl-lambda-x86_64.zip,
#   hostkeyctl-lambda-arm64.zip             the Lambda functions (scheduled
#                                            rotation, admission, the
#                                            enrolment signer): the admin
#                                            build as `bootstrap`
#                                            (provided.al2023)
#   hostkeyctl_VERSION-1_amd64.deb,
#   hostkeyctl-VERSION-1.x86_64.rpm         the admin build, the systemd
#                                            units, completions, man pages
#   hostkeyctl-contrib.tar.gz               contrib/ (the HyperPod lifecycle
#                                            step, cloud-init, the units),
#                                            iam/ and cloudformation/: what
#                                            the quick starts use
#   SHA256SUMS                              of all of the above
# Cross-built with cargo-zigbuild (scripts/install-dist-deps.sh installs it);
# packaged with dpkg-deb and rpmbuild (scripts/package.sh).
#
# DIST_LAMBDA_ARCHES (default "x86_64 arm64") chooses the Lambda zips. make
# test builds x86_64 alone: the arm64 admin build is the slowest build of
# all on an x86_64 machine, and the release workflow builds it natively on
# an arm64 runner, where its test runs too (CONTRIBUTING.md, "What runs
# where").
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir=target/dist
glibc=2.17
out=dist
stage=$target_dir/stage

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "dist: no version in Cargo.toml" >&2; exit 1; }

rm -rf "$out" "$stage"
mkdir -p "$out" "$stage/completions" "$stage/man"

echo "dist: node build (x86_64, aarch64; glibc $glibc)"
cargo zigbuild --locked --quiet --profile dist-node --no-default-features --features node \
  --target "x86_64-unknown-linux-gnu.$glibc" --target "aarch64-unknown-linux-gnu.$glibc" \
  --target-dir "$target_dir"
for arch in x86_64 aarch64; do
  install -m 0755 "$target_dir/$arch-unknown-linux-gnu/dist-node/hostkeyctl" "$out/hostkeyctl-$arch"
done

lambda_arches=${DIST_LAMBDA_ARCHES-x86_64 arm64}
admin_targets=(--target "x86_64-unknown-linux-gnu.$glibc")
for arch in $lambda_arches; do
  case $arch in
    x86_64) ;;
    arm64) admin_targets+=(--target "aarch64-unknown-linux-gnu.$glibc") ;;
    *) echo "dist: DIST_LAMBDA_ARCHES: $arch is not x86_64 or arm64" >&2; exit 2 ;;
  esac
done
echo "dist: admin build (x86_64; Lambda zips: ${lambda_arches:-none}; glibc $glibc)"
cargo zigbuild --locked --quiet --profile dist "${admin_targets[@]}" --target-dir "$target_dir"
admin=$out/hostkeyctl-admin-x86_64
install -m 0755 "$target_dir/x86_64-unknown-linux-gnu/dist/hostkeyctl" "$admin"

echo "dist: Lambda function zips (bootstrap)"
for arch in $lambda_arches; do
  triple=x86_64
  [ "$arch" = arm64 ] && triple=aarch64
  python3 scripts/lambda_zip.py "$target_dir/$triple-unknown-linux-gnu/dist/hostkeyctl" \
    "$out/hostkeyctl-lambda-$arch.zip"
done

echo "dist: completions and man pages"
install -m 0755 "$admin" "$stage/hostkeyctl"
"$admin" completions bash >"$stage/completions/hostkeyctl.bash"
"$admin" completions zsh >"$stage/completions/_hostkeyctl"
"$admin" completions fish >"$stage/completions/hostkeyctl.fish"
"$admin" man --out-dir "$stage/man"
gzip -9n "$stage"/man/*.1

echo "dist: packages"
./scripts/package.sh "$version" "$stage" "$out"

echo "dist: contrib, iam and cloudformation"
# Byte for byte the same from the same tree: sorted, no times, no owners.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=go-w -cf - contrib iam cloudformation |
  gzip -9n >"$out/hostkeyctl-contrib.tar.gz"

(cd "$out" && sha256sum -- * >SHA256SUMS)
echo "dist: done"
ls -l "$out"
