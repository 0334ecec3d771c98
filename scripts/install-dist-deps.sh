#!/usr/bin/env bash
# Installs what `make dist` and `make dist-check` need, idempotently:
#   rustup: the aarch64-unknown-linux-gnu standard library
#   pip:    ziglang, the linker for old glibc, and cargo-zigbuild
#           (scripts/dist-requirements.txt)
#   apt:    qemu-user and libc6-arm64-cross (run the aarch64 build),
#           rpm (rpmbuild packages the .rpm, rpm -qlp checks it; dpkg-deb
#           the .deb: scripts/package.sh), binutils (objdump)
# Safe to run again: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/install-lib.sh
. scripts/install-lib.sh

ZIGBUILD=0.24.1 # as in scripts/dist-requirements.txt

need_apt=()
command -v qemu-aarch64 >/dev/null 2>&1 || need_apt+=(qemu-user)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6-arm64-cross)
command -v rpmbuild >/dev/null 2>&1 || need_apt+=(rpm)
command -v objdump >/dev/null 2>&1 || need_apt+=(binutils)
apt_install install-dist-deps "${need_apt[@]}"

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  echo "install-dist-deps: rustup target add aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi

if ! python3 -m ziglang version >/dev/null 2>&1 || ! cargo-zigbuild --version 2>/dev/null | grep -qF " $ZIGBUILD"; then
  echo "install-dist-deps: pip install -r scripts/dist-requirements.txt"
  pip_install -r scripts/dist-requirements.txt
  cargo-zigbuild --version 2>/dev/null | grep -qF " $ZIGBUILD" || {
    echo "install-dist-deps: pip installed cargo-zigbuild $ZIGBUILD where PATH does not reach ($(command -v cargo-zigbuild || echo 'not found')): add pip's scripts directory to PATH" >&2
    exit 2
  }
fi
