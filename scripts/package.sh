#!/usr/bin/env bash
# The .deb and .rpm of the admin build (make dist, after scripts/dist.sh
# staged the binary, completions and man pages), with the distributions'
# own tools: dpkg-deb (dpkg) and rpmbuild (Debian's rpm package, which
# make dist's dependencies install for `rpm -qlp` anyway). Both packages
# hold the same tree; only zsh's completion directory differs.
#   package.sh VERSION STAGE OUT
set -euo pipefail
cd "$(dirname "$0")/.."
version=$1 stage=$(cd "$2" && pwd) out=$(cd "$3" && pwd)
summary="One SSH host identity for every login node behind a load balancer"
# The long description, for both (dpkg wants each line indented by one space).
description="Gives every SSH login node behind a load balancer one host identity: the
canonical key set lives in AWS Secrets Manager, \`hostkeyctl install\` puts it
on a node safely (verify, roll back), and \`hostkeyctl audit\` checks by real
handshakes what every node serves. The package ships the timer that keeps a
node converged; it is not enabled until /etc/default/hostkeyctl names the
secret (see /usr/share/doc/hostkeyctl)."

# tree ROOT ZSH_DIR: the package's files under ROOT, root's, with their modes.
tree() {
  local root=$1 zsh=$2 units=usr/lib/systemd/system
  rm -rf "$root"
  install -D -m 0755 "$stage/hostkeyctl" "$root/usr/bin/hostkeyctl"
  install -D -m 0644 contrib/systemd/hostkeyctl-install.service "$root/$units/hostkeyctl-install.service"
  install -D -m 0644 contrib/systemd/hostkeyctl-install.timer "$root/$units/hostkeyctl-install.timer"
  install -D -m 0644 contrib/systemd/package/hostkeyctl-install.service.d/10-package.conf \
    "$root/$units/hostkeyctl-install.service.d/10-package.conf"
  install -D -m 0644 "$stage/completions/hostkeyctl.bash" "$root/usr/share/bash-completion/completions/hostkeyctl"
  install -D -m 0644 "$stage/completions/_hostkeyctl" "$root/$zsh/_hostkeyctl"
  install -D -m 0644 "$stage/completions/hostkeyctl.fish" "$root/usr/share/fish/vendor_completions.d/hostkeyctl.fish"
  install -d -m 0755 "$root/usr/share/man/man1" "$root/usr/share/doc/hostkeyctl"
  install -m 0644 "$stage"/man/*.1.gz "$root/usr/share/man/man1/"
  install -m 0644 README.md docs/bootstrap.md "$root/usr/share/doc/hostkeyctl/"
  printf '%s\n' "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
    "Upstream-Name: hostkeyctl" "Copyright: hostkeyctl developers" "License: Apache-2.0" \
    >"$root/usr/share/doc/hostkeyctl/copyright"
  chmod 0644 "$root/usr/share/doc/hostkeyctl/copyright"
  # Reproducible: every file and directory dated by the last commit.
  find "$root" -exec touch -h -d "@$epoch" {} +
}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH=$epoch

# .deb
deb=$stage/deb
tree "$deb" usr/share/zsh/vendor-completions
mkdir -p "$deb/DEBIAN"
(cd "$deb" && find usr -type f -printf '%P\n' | sort | sed 's|^|usr/|' | xargs md5sum) >"$deb/DEBIAN/md5sums"
{
  echo "Package: hostkeyctl"
  echo "Version: ${version}-1"
  echo "Architecture: amd64"
  echo "Section: admin"
  echo "Priority: optional"
  echo "Maintainer: hostkeyctl developers"
  echo "Installed-Size: $(du -sk --exclude=DEBIAN "$deb" | cut -f1)"
  echo "Depends: libc6 (>= 2.17)"
  echo "Suggests: openssh-server"
  echo "Description: $summary"
  sed 's/^/ /' <<<"$description"
} >"$deb/DEBIAN/control"
chmod 0644 "$deb/DEBIAN/control" "$deb/DEBIAN/md5sums"
dpkg-deb --root-owner-group -Zxz --build "$deb" "$out/hostkeyctl_${version}-1_amd64.deb" >/dev/null

# .rpm: the same tree, installed as it is; no strip, no debuginfo, no
# dependency scan (the binary needs glibc 2.17, said below).
rpm_root=$stage/rpm
tree "$rpm_root/root" usr/share/zsh/site-functions
mkdir -p "$rpm_root/SPECS"
{
  echo "Name: hostkeyctl"
  echo "Version: $version"
  echo "Release: 1"
  echo "Summary: $summary"
  echo "License: Apache-2.0"
  echo "Requires: glibc >= 2.17"
  echo "AutoReqProv: no"
  echo "%global debug_package %{nil}"
  echo "%global __os_install_post %{nil}"
  echo "%description"
  echo "$description"
  echo "%install"
  echo "cp -a $rpm_root/root/. %{buildroot}/"
  echo "%files"
  (cd "$rpm_root/root" && find . -type f -printf '/%P\n' | sort) | while read -r f; do
    case $f in
      /usr/share/man/* | /usr/share/doc/*) echo "%doc %attr(-,root,root) $f" ;;
      *) echo "%attr(-,root,root) $f" ;;
    esac
  done
} >"$rpm_root/SPECS/hostkeyctl.spec"
rpmbuild -bb --quiet --nodeps --target x86_64 \
  --define "_topdir $rpm_root" --define "_rpmdir $rpm_root/RPMS" \
  --define "_build_id_links none" --define "_binary_payload w9.zstdio" --define "use_source_date_epoch_as_buildtime 1" \
  "$rpm_root/SPECS/hostkeyctl.spec" >/dev/null
mv "$rpm_root/RPMS/x86_64/hostkeyctl-${version}-1.x86_64.rpm" "$out/"
