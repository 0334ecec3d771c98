#!/usr/bin/env bash
# Installs what `make dist` and `make dist-check` need, idempotently:
#   rustup: the aarch64-unknown-linux-gnu standard library
#   pip:    ziglang (scripts/dist-requirements.txt), the linker for old glibc
#   cargo:  cargo-zigbuild, cargo-deb, cargo-generate-rpm (pinned, --locked)
#   apt:    qemu-user and libc6-arm64-cross (run the aarch64 build),
#           rpm (rpm -qlp), binutils (objdump)
# Safe to run again: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

ZIGBUILD=0.24.1
DEB=3.8.0
GENERATE_RPM=0.21.1

need_apt=()
command -v qemu-aarch64 >/dev/null 2>&1 || need_apt+=(qemu-user)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6-arm64-cross)
command -v rpm >/dev/null 2>&1 || need_apt+=(rpm)
command -v objdump >/dev/null 2>&1 || need_apt+=(binutils)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-dist-deps: need ${need_apt[*]}; run as root or: sudo apt-get install ${need_apt[*]}" >&2
    exit 2
  fi
  echo "install-dist-deps: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  echo "install-dist-deps: rustup target add aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi

if ! python3 -m ziglang version >/dev/null 2>&1; then
  echo "install-dist-deps: pip install -r scripts/dist-requirements.txt"
  pip_args=(install -q --disable-pip-version-check -r scripts/dist-requirements.txt)
  python3 -m pip "${pip_args[@]}" --root-user-action=ignore 2>/dev/null ||
    python3 -m pip "${pip_args[@]}" --break-system-packages
fi

# cargo install VERSION-pinned tools, once; one scratch target dir, so the
# three share the dependencies they have in common, removed afterwards (the
# binaries are in ~/.cargo/bin; the build tree would only take disk).
tools_target=
tool() { # tool CRATE VERSION COMMAND
  if "$3" --version 2>/dev/null | grep -qF " $2"; then return 0; fi
  if [ -z "$tools_target" ]; then
    tools_target=$(mktemp -d "${TMPDIR:-/tmp}/hostkeyctl-tools.XXXXXX")
    trap 'rm -rf "$tools_target"' EXIT
  fi
  echo "install-dist-deps: cargo install $1@$2 (once)"
  cargo install --locked --quiet --target-dir "$tools_target" "$1@$2"
}
tool cargo-zigbuild "$ZIGBUILD" cargo-zigbuild
tool cargo-deb "$DEB" cargo-deb
tool cargo-generate-rpm "$GENERATE_RPM" cargo-generate-rpm
