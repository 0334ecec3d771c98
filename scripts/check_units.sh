#!/usr/bin/env bash
# The shipped service's sandbox, scored without a running systemd
# (`systemd-analyze security --offline`): "OK" is 4.9 or less. Both ways it
# ships: contrib/systemd as the lifecycle step and cloud-init install it,
# and the packages' unit with their ExecStart drop-in.
set -euo pipefail
cd "$(dirname "$0")/.."
THRESHOLD=${THRESHOLD:-49} # tenths: 4.9
command -v systemd-analyze >/dev/null || { echo "check_units: systemd-analyze is missing: run make deps" >&2; exit 2; }
score() { # score LABEL ARGS...
  local label=$1 out
  shift
  if ! out=$(systemd-analyze security --offline=true --threshold="$THRESHOLD" "$@" 2>&1); then
    echo "$out" | grep -v ' ✓ ' >&2
    echo "check_units: $label scores above $((THRESHOLD / 10)).$((THRESHOLD % 10)); harden it (docs/bootstrap.md, \"What the unit allows\")" >&2
    exit 1
  fi
  echo "check_units: $label: $(grep -o 'Overall exposure level.*' <<<"$out")"
}
score contrib/systemd/hostkeyctl-install.service contrib/systemd/hostkeyctl-install.service
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
units=$root/usr/lib/systemd/system
mkdir -p "$units/hostkeyctl-install.service.d"
cp contrib/systemd/hostkeyctl-install.service "$units/"
cp contrib/systemd/package/hostkeyctl-install.service.d/10-package.conf "$units/hostkeyctl-install.service.d/"
score "the packaged unit (with 10-package.conf)" --root="$root" hostkeyctl-install.service
