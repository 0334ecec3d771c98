#!/usr/bin/env bash
# Builds, once per machine, a root file system per OpenSSH release the bed
# runs besides the host's own (Debian 12, OpenSSH 9.2), from Debian's own
# packages with mmdebstrap:
#   bullseye  Debian 11, OpenSSH 8.4p1 (close to Ubuntu 20.04's 8.2 and RHEL 9's 8.7)
#   trixie    Debian 13, OpenSSH 10.0p2 (PerSourcePenalties on, sshd-session)
#   forky     Debian testing, OpenSSH 10.6p1: a client that warns on a key
#             exchange that is not post-quantum (10.1 and later)
# Cached outside the clone ($HOSTKEYCTL_RELEASES, default
# /var/cache/hostkeyctl-bed/releases); a file system is used only once its
# build finished (the `.built` stamp, with the packages' versions). The bed
# mounts each read-only under an overlay per node (testbed/bed.py).
set -euo pipefail

cache=${HOSTKEYCTL_RELEASES:-/var/cache/hostkeyctl-bed/releases}
mirror=${HOSTKEYCTL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What a login node has: sshd, the client tools, and CA certificates (the
# node build reaches Secrets Manager over TLS). A change here rebuilds.
include=openssh-server,openssh-client,ca-certificates
mkdir -p "$cache"
for suite in bullseye trixie forky; do
  dir=$cache/$suite
  [ "$(head -n1 "$dir/.built" 2>/dev/null)" = "include $include" ] && continue
  if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "build-releases: mmdebstrap is missing: apt-get install mmdebstrap" >&2
    exit 2
  fi
  echo "build-releases: $suite from $mirror (about 40 s)"
  tmp=$(mktemp -d "$cache/.$suite.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Testing's Release file expires within days; the mirror may be a
  # snapshot older than that.
  mmdebstrap --quiet --variant=apt --mode=root --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$include" "$suite" "$tmp/fs" "$mirror"
  # The stock host keys of the build go: every bed node gets its own.
  rm -f "$tmp"/fs/etc/ssh/ssh_host_*
  {
    echo "include $include"
    chroot "$tmp/fs" dpkg-query -W -f '${Package} ${Version}\n' openssh-server openssh-client libc6
  } >"$tmp/fs/.built"
  rm -rf "$dir"
  mv "$tmp/fs" "$dir"
  rm -rf "$tmp"
  trap - EXIT
  sed -n '2,$s/^/build-releases: /p' "$dir/.built"
done
