# shellcheck shell=bash
# Sourced by scripts/install-deps.sh and scripts/install-dist-deps.sh: how
# each installs what it found missing. WHO names the script in messages.

# apt_install WHO PACKAGE...: installs the Debian packages, as root (or
# says what to run), without letting any of them start a service: an
# openssh-server would otherwise listen on port 22 of every address.
apt_install() {
  local who=$1
  shift
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "$who: need $*; run as root or: sudo apt-get install $*" >&2
    exit 2
  fi
  echo "$who: apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT
}

# pip_install ARG...: pip install, quietly, as root too (Debian 12's Python
# is externally managed: a root install needs --break-system-packages
# where pip has no --root-user-action).
pip_install() {
  python3 -m pip install -q --disable-pip-version-check "$@" --root-user-action=ignore 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check "$@" --break-system-packages
}
