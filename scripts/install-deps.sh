#!/usr/bin/env bash
# Installs what the test bed and the tests need, idempotently:
#   apt: openssh-server (sshd), openssh-client (ssh, ssh-keygen, ssh-keyscan), haproxy,
#        iproute2 (ip: the node-profile matrix brings up loopback in its namespaces),
#        iptables (imds-guard's rules, in namespaces the tests create),
#        systemd (systemd-analyze, for the unit's sandbox score), bubblewrap (that sandbox, emulated),
#        mmdebstrap (Debian 11, 13 and testing root file systems: scripts/build-releases.sh),
#        putty-tools (plink, puttygen) and dropbear-bin (dbclient): the client matrix
#   pip: the pinned moto server, Paramiko and AsyncSSH, the linters (testbed/requirements.txt)
# Safe to run again: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/install-lib.sh
. scripts/install-lib.sh

need_apt=()
command -v /usr/sbin/sshd >/dev/null 2>&1 || need_apt+=(openssh-server)
command -v ssh-keyscan >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
[ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need_apt+=(iproute2)
# imds-guard keeps the metadata service to root with iptables; the bed runs
# it in network namespaces of its own (tests/it/common/bed/netfilter.rs).
[ -x /usr/sbin/iptables-restore ] && [ -x /usr/sbin/ip6tables-restore ] || need_apt+=(iptables)
# systemd-analyze scores the shipped unit's sandbox offline (make lint-units);
# bwrap runs install inside that sandbox on the bed (tests/it/bed/profiles.rs).
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# mmdebstrap builds the other OpenSSH releases' root file systems.
command -v mmdebstrap >/dev/null 2>&1 || need_apt+=(mmdebstrap)
# The client matrix (tests/it/bed/clients.rs, docs/clients.md): PuTTY's plink
# and Dropbear's dbclient, as Debian 12 ships them (0.78, 2022.83).
command -v plink >/dev/null 2>&1 || need_apt+=(putty-tools)
command -v dbclient >/dev/null 2>&1 || need_apt+=(dropbear-bin)
apt_install install-deps "${need_apt[@]}"
mkdir -p /run/sshd 2>/dev/null || true

if ! python3 testbed/check_deps.py 2>/dev/null; then
  echo "install-deps: pip install -r testbed/requirements.txt"
  # The file's requirements, then those marked `# no-deps` without their
  # declared dependencies (the file says why).
  mapfile -t with_deps < <(grep -v '# no-deps$' testbed/requirements.txt | sed -e 's/[[:space:]]*#.*//' -e '/^$/d')
  mapfile -t no_deps < <(sed -n 's/[[:space:]]*# no-deps$//p' testbed/requirements.txt)
  pip_install "${with_deps[@]}"
  [ ${#no_deps[@]} -eq 0 ] || pip_install --no-deps "${no_deps[@]}"
  python3 testbed/check_deps.py
fi

# OpenSSH 8.4 and 10.0 for the bed's release nodes, built once per machine.
./scripts/build-releases.sh
