#!/bin/bash
# HyperPod lifecycle step: give this login node the cluster's one SSH host
# identity with hostkeyctl, and keep it converged with a systemd timer.
#
# Put this folder (contrib/hyperpod/, plus the two units of
# contrib/systemd/ and the binaries hostkeyctl-x86_64 / hostkeyctl-aarch64)
# next to lifecycle_script.py in the lifecycle scripts bucket, set
# HOSTKEYCTL_SECRET_ID and the binaries' SHA-256 in hostkeyctl.env beside
# this script, and run it on every node from lifecycle_script.py, after
# sshd is set up:
#
#     ExecuteBashScript("./hostkeyctl/install_hostkeyctl.sh").run()
#
# It acts on login nodes only, found the way lifecycle_script.py finds its
# node type: this node's address among the InstanceGroups[].Instances[]
# CustomerIpAddress of resource_config.json, and the login group's name in
# provisioning_parameters.json (login_group). Running it again changes
# nothing. Everything it does is printed, so it lands in the cluster's
# lifecycle log (CloudWatch, /aws/sagemaker/Clusters/<name>/<id>,
# LifecycleConfig/<group>/<instance>).
#
# Settings (environment, or hostkeyctl.env beside this script):
#   HOSTKEYCTL_SECRET_ID      the key set secret (name or ARN)           required
#   HOSTKEYCTL_REGION         the secret's region          default: the node's
#   HOSTKEYCTL_SHA256_X86_64, HOSTKEYCTL_SHA256_AARCH64
#                             the SHA-256 of hostkeyctl-x86_64 / -aarch64, from
#                             the release's SHA256SUMS, copied from a source
#                             you trust                     required (this arch)
#   HOSTKEYCTL_BINARY_S3_URI  s3://bucket/prefix holding hostkeyctl-ARCH, when
#                             it is not beside this script
# The binary is trusted by the pinned hash alone, never by a SHA256SUMS
# that sits beside it: whoever can write the binary's bucket could write
# that too. The lifecycle bucket itself (this script, hostkeyctl.env) is
# trusted as HyperPod trusts it: it runs as root on every node.
# Exit: 0 done (or not a login node, or the keys' install will be retried
# by the timer); 1 the binary, its checksum or the settings are wrong, or
# the install needs a human (its rollback failed): provisioning stops.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
if [ -f "$HERE/hostkeyctl.env" ]; then
  # shellcheck source=/dev/null
  . "$HERE/hostkeyctl.env"
fi
RESOURCE_CONFIG=${HOSTKEYCTL_RESOURCE_CONFIG:-/opt/ml/config/resource_config.json}
PROVISIONING_PARAMETERS=${HOSTKEYCTL_PROVISIONING_PARAMETERS:-$HERE/../provisioning_parameters.json}
# Tests install under a scratch root; on a node it is /.
ROOT=${HOSTKEYCTL_ROOT:-}

log() { echo "[hostkeyctl lifecycle] $*"; }
fail() { log "ERROR: $*"; exit 1; }

# This node's address as lifecycle_script.py finds it (a UDP socket
# "connected" to a private address: no packet is sent).
self_ip=${HOSTKEYCTL_SELF_IP:-$(python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("10.254.254.254", 1))
    print(s.getsockname()[0])
except OSError:
    print("127.0.0.1")
finally:
    s.close()
')}

[ -r "$RESOURCE_CONFIG" ] || fail "cannot read $RESOURCE_CONFIG (set HOSTKEYCTL_RESOURCE_CONFIG)"
[ -r "$PROVISIONING_PARAMETERS" ] || fail "cannot read $PROVISIONING_PARAMETERS (set HOSTKEYCTL_PROVISIONING_PARAMETERS)"
group=$(python3 -c '
import json, sys
config = json.load(open(sys.argv[1]))
for group in config.get("InstanceGroups", []):
    for instance in group.get("Instances", []):
        if instance.get("CustomerIpAddress") == sys.argv[2]:
            print(group.get("Name", ""))
            sys.exit(0)
' "$RESOURCE_CONFIG" "$self_ip")
login_group=$(python3 -c '
import json, sys
print(json.load(open(sys.argv[1])).get("login_group") or "")
' "$PROVISIONING_PARAMETERS")
if [ -z "$login_group" ]; then
  log "provisioning_parameters.json names no login_group: no login nodes here; nothing to do"
  exit 0
fi
if [ "$group" != "$login_group" ]; then
  log "this node ($self_ip) is in instance group '${group:-unknown}', not the login group '$login_group'; nothing to do"
  exit 0
fi
log "login node $self_ip (instance group $group)"

[ -n "${HOSTKEYCTL_SECRET_ID:-}" ] || fail "HOSTKEYCTL_SECRET_ID is not set (in hostkeyctl.env beside this script)"
arch=$(uname -m)
case "$arch" in x86_64 | aarch64) ;; *) fail "no hostkeyctl build for $arch" ;; esac
name="hostkeyctl-$arch"
pin_var=HOSTKEYCTL_SHA256_$(echo "$arch" | tr '[:lower:]' '[:upper:]')
expected=${!pin_var:-}
[ -n "$expected" ] || fail "$pin_var is not set: put the SHA-256 of $name (from the release's SHA256SUMS, copied from a source you trust) in hostkeyctl.env beside this script"
[[ "$expected" =~ ^[0-9a-f]{64}$ ]] || fail "$pin_var is not a SHA-256 (64 lowercase hex digits)"
source_dir=$HERE
if [ ! -f "$HERE/$name" ]; then
  [ -n "${HOSTKEYCTL_BINARY_S3_URI:-}" ] || fail "$name is not beside this script and HOSTKEYCTL_BINARY_S3_URI is not set"
  source_dir=$(mktemp -d)
  trap 'rm -rf "$source_dir"' EXIT
  log "downloading $name from $HOSTKEYCTL_BINARY_S3_URI"
  aws s3 cp --only-show-errors "$HOSTKEYCTL_BINARY_S3_URI/$name" "$source_dir/$name"
fi

# The hash is taken of the file that will run, in its final directory
# (root's alone), after the copy: nothing can change it between the check
# and the rename.
bin="$ROOT/usr/local/bin/hostkeyctl"
if [ -f "$bin" ] && [ "$(sha256sum "$bin" | cut -d' ' -f1)" = "$expected" ]; then
  log "$bin is already this build"
else
  mkdir -p "$(dirname "$bin")"
  install -m 0755 "$source_dir/$name" "$bin.new"
  actual=$(sha256sum "$bin.new" | cut -d' ' -f1)
  if [ "$actual" != "$expected" ]; then
    rm -f "$bin.new"
    fail "$name has SHA-256 $actual, $pin_var says $expected: not installing it"
  fi
  mv -f "$bin.new" "$bin"
  log "installed $bin ($actual)"
fi

# The timer's settings, then the units; each written only when it changes.
put() { # put MODE SOURCE DEST
  if cmp -s "$2" "$3"; then return 0; fi
  mkdir -p "$(dirname "$3")"
  install -m "$1" "$2" "$3.new" && mv -f "$3.new" "$3"
  log "wrote $3"
}
settings=$(mktemp)
{
  echo "# Written by the hostkeyctl lifecycle step; read by hostkeyctl-install.service."
  echo "HOSTKEYCTL_SECRET_ID=$HOSTKEYCTL_SECRET_ID"
  if [ -n "${HOSTKEYCTL_REGION:-}" ]; then echo "AWS_REGION=$HOSTKEYCTL_REGION"; fi
} >"$settings"
put 0644 "$settings" "$ROOT/etc/default/hostkeyctl"
rm -f "$settings"
units=$HERE
[ -f "$units/hostkeyctl-install.service" ] || units="$HERE/../systemd"
for unit in hostkeyctl-install.service hostkeyctl-install.timer; do
  [ -f "$units/$unit" ] || fail "$unit is missing beside this script"
  put 0644 "$units/$unit" "$ROOT/etc/systemd/system/$unit"
done

# The keys now, before the node takes traffic. The node role's credentials
# can take a moment at first boot: retry what may pass later.
args=(install --secret-id "$HOSTKEYCTL_SECRET_ID")
if [ -n "${HOSTKEYCTL_REGION:-}" ]; then args+=(--region "$HOSTKEYCTL_REGION"); fi
rc=0
for attempt in 1 2 3 4 5; do
  rc=0
  "$bin" "${args[@]}" >/dev/null || rc=$?
  case $rc in
    0) log "host keys installed and verified"; break ;;
    2) fail "hostkeyctl refused its input (exit 2): check HOSTKEYCTL_SECRET_ID and the secret" ;;
    5) fail "the install failed and so did its rollback (exit 5): this node needs a human" ;;
  esac
  log "attempt $attempt: hostkeyctl install exited $rc; retrying"
  sleep $((attempt * ${HOSTKEYCTL_RETRY_SECONDS:-10}))
done
if [ "$rc" -ne 0 ]; then
  log "WARNING: the host keys are not installed yet (exit $rc); the node keeps its own keys, and the timer retries"
fi

systemctl daemon-reload
systemctl enable --now hostkeyctl-install.timer
log "hostkeyctl-install.timer enabled"
