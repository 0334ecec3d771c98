#!/bin/bash
# HyperPod lifecycle step: give this login node the cluster's one SSH host
# identity with hostkeyctl, and keep it converged with a systemd timer.
# With HOSTKEYCTL_ENROL_FUNCTION set, every node (controller, login,
# compute) also enrols: host certificates for its own keys, and its ssh
# checking the cluster's nodes strictly (docs/cluster-trust.md), renewed by
# a timer.
#
# Put this folder (contrib/hyperpod/, plus the two units of
# contrib/systemd/ and the binaries hostkeyctl-x86_64 / hostkeyctl-aarch64)
# as hostkeyctl/ next to lifecycle_script.py in the lifecycle scripts
# bucket, and set HOSTKEYCTL_SECRET_ID and the binaries' SHA-256 in
# hostkeyctl.env beside this script. S3 keeps no file modes: run it with
# bash, as base-config runs its scripts (docs/bootstrap.md has the lines):
#
#   base-config (lifecycle_script.py, in its Slurm block, after
#   start_slurm.sh, where node_type is known):
#       ExecuteBashScript("./hostkeyctl/install_hostkeyctl.sh").run(
#           node_type, args.resource_config, args.provisioning_parameters)
#   API-driven Slurm clusters (SlurmConfig per instance group, no
#   provisioning_parameters.json), from the OnInitComplete script:
#       bash ./hostkeyctl/install_hostkeyctl.sh
#
# Usage: install_hostkeyctl.sh [NODE_TYPE [RESOURCE_CONFIG [PROVISIONING_PARAMETERS]]]
#   NODE_TYPE   login, controller or compute (lifecycle_script.py's
#               node_type); empty: found from the configs, as
#               lifecycle_script.py finds it (this node's address among the
#               InstanceGroups[].Instances[].CustomerIpAddress of
#               resource_config.json, then the group's SlurmConfig.NodeType,
#               or the login_group of provisioning_parameters.json). A node
#               not in the config is looked for again as lifecycle_script.py
#               retries (about 315 s), then the step fails: never a silent
#               skip of what may be a login node.
#   RESOURCE_CONFIG  default: $SAGEMAKER_RESOURCE_CONFIG_PATH, else
#               /opt/ml/config/resource_config.json
#   PROVISIONING_PARAMETERS  default: ../provisioning_parameters.json, else
#               provisioning_parameters.json beside RESOURCE_CONFIG (HyperPod
#               writes both in /opt/ml/config)
#
# Settings, in hostkeyctl.env beside this script ONLY: base-config runs
# each script with sudo, which resets the environment, so a setting in the
# environment would work by hand and be lost at provisioning. The step
# ignores these names in its environment, and says so.
#   HOSTKEYCTL_SECRET_ID      the key set secret (name or ARN)  required on login nodes
#   HOSTKEYCTL_ENROL_FUNCTION the enrolment signer's ARN (the template's
#                             EnrolmentFunctionArn): every node enrols
#   HOSTKEYCTL_ENROL_TRUST    the cluster's host patterns, comma-separated
#                             (`*.ec2.internal,ip-10-1-*,10.1.*`)  required with it
#   HOSTKEYCTL_ENROL_CLUSTER_PORT, HOSTKEYCTL_ENROL_LOGIN_HOSTS
#                             a port for the cluster's own traffic to the login
#                             nodes (not 22), and the login nodes' patterns
#                             (`ip-10-1-17-*,10.1.17.*`): each login node serves
#                             a certificate there from a second sshd, and every
#                             node reaches the login nodes there, strictly.
#                             Both or neither (docs/cluster-trust.md, "Login nodes")
#   HOSTKEYCTL_REGION         the secret's region; default: the cluster's
#                             (ClusterConfig.ClusterArn in resource_config.json),
#                             else the SDK's (the instance metadata)
#   HOSTKEYCTL_SHA256_X86_64, HOSTKEYCTL_SHA256_AARCH64
#                             the SHA-256 of hostkeyctl-x86_64 / -aarch64, from
#                             the release's SHA256SUMS, copied from a source
#                             you trust                     required (this arch)
#   HOSTKEYCTL_BINARY_S3_URI  s3://bucket/prefix holding hostkeyctl-ARCH, when
#                             it is not beside this script (the node role then
#                             needs s3:GetObject there: docs/iam.md)
#   HOSTKEYCTL_IMDS           root-only (the default on login nodes) or open:
#                             whether the instance metadata service, and so the
#                             node's role, is kept to root
#                             (hostkeyctl-imds-guard.service, at every boot).
#                             Login nodes' roles read the key set's private
#                             keys: "open" lets every login user read them.
#                             Other nodes that install hostkeyctl (enrolment)
#                             take root-only when set; default open there, as
#                             users' jobs often read S3 with the instance role
#   HOSTKEYCTL_IMDS_ALLOW_USERS  users besides root who may reach it (a
#                             CloudWatch agent's user, say), comma-separated
#   HOSTKEYCTL_METRICS_DIR    node_exporter's textfile collector directory:
#                             install (here and at every timer run) writes
#                             hostkeyctl.prom there (docs/operations.md says
#                             how to point HyperPod's node_exporter at it);
#                             default /var/lib/node_exporter/textfile_collector,
#                             "none": no metrics file
#   HOSTKEYCTL_REPORT_COMPLIANCE  "true": report SSM Compliance items for this
#                             node's EC2 instance id (docs/operations.md; off by
#                             default: a HyperPod node is managed by SSM under
#                             the cluster's id, not its instance id)
#   HOSTKEYCTL_RESOURCE_CONFIG, HOSTKEYCTL_PROVISIONING_PARAMETERS
#                             the configs, where no argument (and for the
#                             first, no SAGEMAKER_RESOURCE_CONFIG_PATH) says
#   HOSTKEYCTL_FIND_RETRY_SECONDS  first wait before looking for this node
#                             in the config again (doubling, 6 waits); default 5
#   HOSTKEYCTL_RETRY_SECONDS  the install's retry step (default 10)
#   HOSTKEYCTL_SELF_IP, HOSTKEYCTL_ROOT   for tests: this node's address, and
#                             a root to install under (default /)
# The binary is trusted by the pinned hash alone, never by a SHA256SUMS
# that sits beside it: whoever can write the binary's bucket could write
# that too. The lifecycle bucket itself (this script, hostkeyctl.env) is
# trusted as HyperPod trusts it: it runs as root on every node.
# Exit: 0 done, or not a login node (and no enrolment), or the keys'
# install or the enrolment will be retried
# by the timer, or the keys are installed and the set's certificates need
# renewal (install's exit 6: the timer installs them once signed again); 1 provisioning must stop: the binary, its checksum, the
# settings or the configs are wrong, this node is not in the config, or
# the install needs a human (its rollback failed).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
log() { echo "[hostkeyctl lifecycle] $*"; }
fail() {
  log "ERROR: $*"
  exit 1
}

ignored=()
for name in HOSTKEYCTL_SECRET_ID HOSTKEYCTL_ENROL_FUNCTION HOSTKEYCTL_ENROL_TRUST HOSTKEYCTL_ENROL_CLUSTER_PORT HOSTKEYCTL_ENROL_LOGIN_HOSTS HOSTKEYCTL_REGION HOSTKEYCTL_SHA256_X86_64 HOSTKEYCTL_SHA256_AARCH64 \
  HOSTKEYCTL_BINARY_S3_URI HOSTKEYCTL_IMDS HOSTKEYCTL_IMDS_ALLOW_USERS HOSTKEYCTL_METRICS_DIR HOSTKEYCTL_REPORT_COMPLIANCE HOSTKEYCTL_FIND_RETRY_SECONDS HOSTKEYCTL_RETRY_SECONDS HOSTKEYCTL_SELF_IP \
  HOSTKEYCTL_ROOT HOSTKEYCTL_RESOURCE_CONFIG HOSTKEYCTL_PROVISIONING_PARAMETERS; do
  if [ -n "${!name+set}" ]; then
    ignored+=("$name")
    unset "$name"
  fi
done
if [ -f "$HERE/hostkeyctl.env" ]; then
  # shellcheck source=/dev/null
  . "$HERE/hostkeyctl.env"
fi
if [ ${#ignored[@]} -gt 0 ]; then
  log "ignoring ${ignored[*]} from the environment (sudo resets it at provisioning): set them in $HERE/hostkeyctl.env"
fi

# A misspelt setting (HOSTKEYCTL_ENROLL_FUNCTION) would be ignored in
# silence: name every HOSTKEYCTL_ variable the step does not know.
known=" HOSTKEYCTL_SECRET_ID HOSTKEYCTL_ENROL_FUNCTION HOSTKEYCTL_ENROL_TRUST HOSTKEYCTL_ENROL_CLUSTER_PORT HOSTKEYCTL_ENROL_LOGIN_HOSTS HOSTKEYCTL_REGION HOSTKEYCTL_SHA256_X86_64 HOSTKEYCTL_SHA256_AARCH64 HOSTKEYCTL_BINARY_S3_URI HOSTKEYCTL_IMDS HOSTKEYCTL_IMDS_ALLOW_USERS HOSTKEYCTL_METRICS_DIR HOSTKEYCTL_REPORT_COMPLIANCE HOSTKEYCTL_FIND_RETRY_SECONDS HOSTKEYCTL_RETRY_SECONDS HOSTKEYCTL_SELF_IP HOSTKEYCTL_ROOT HOSTKEYCTL_RESOURCE_CONFIG HOSTKEYCTL_PROVISIONING_PARAMETERS "
if [ -f "$HERE/hostkeyctl.env" ]; then
  while read -r name; do
    case "$known" in *" $name "*) ;; *) log "WARNING: $name in hostkeyctl.env is no setting of this step (a misspelling? the names are in its header)" ;; esac
  done < <(sed -n 's/^[[:space:]]*\(export[[:space:]]\{1,\}\)\{0,1\}\(HOSTKEYCTL_[A-Za-z0-9_]*\)=.*/\2/p' "$HERE/hostkeyctl.env")
fi
enrol=${HOSTKEYCTL_ENROL_FUNCTION:-}
if [ -n "$enrol" ]; then
  [[ "$enrol" =~ ^arn:aws[a-z-]*:lambda:[a-z0-9-]+:[0-9]{12}:function:[A-Za-z0-9_-]+$ ]] ||
    fail "HOSTKEYCTL_ENROL_FUNCTION '$enrol' is not a Lambda function ARN (the template's EnrolmentFunctionArn)"
  [[ "${HOSTKEYCTL_ENROL_TRUST:-}" =~ ^!?[A-Za-z0-9.*?:_-]+(,!?[A-Za-z0-9.*?:_-]+)*$ ]] ||
    fail "HOSTKEYCTL_ENROL_TRUST '${HOSTKEYCTL_ENROL_TRUST:-}' is not the cluster's host patterns, comma-separated (e.g. ip-10-1-*.ec2.internal,ip-10-1-*,10.1.*; no CIDR)"
  cluster_port=${HOSTKEYCTL_ENROL_CLUSTER_PORT:-}
  login_hosts=${HOSTKEYCTL_ENROL_LOGIN_HOSTS:-}
  if [ -n "$cluster_port$login_hosts" ]; then
    [[ "$cluster_port" =~ ^[1-9][0-9]{0,4}$ ]] && [ "$cluster_port" -le 65535 ] && [ "$cluster_port" -ne 22 ] ||
      fail "HOSTKEYCTL_ENROL_CLUSTER_PORT '$cluster_port' is not a port of its own for the cluster (1 to 65535, not 22: the load balancer's); it goes with HOSTKEYCTL_ENROL_LOGIN_HOSTS"
    [[ "$login_hosts" =~ ^[A-Za-z0-9.*?:_-]+(,[A-Za-z0-9.*?:_-]+)*$ ]] ||
      fail "HOSTKEYCTL_ENROL_LOGIN_HOSTS '$login_hosts' is not the login nodes' host patterns, comma-separated (e.g. ip-10-1-17-*,10.1.17.*); it goes with HOSTKEYCTL_ENROL_CLUSTER_PORT"
  fi
fi
node_type=${1:-}
case "$node_type" in
  "" | login | controller | compute) ;;
  *) fail "node type '$node_type' is not login, controller or compute (the first argument: lifecycle_script.py's node_type)" ;;
esac
resource_config=${2:-${SAGEMAKER_RESOURCE_CONFIG_PATH:-${HOSTKEYCTL_RESOURCE_CONFIG:-/opt/ml/config/resource_config.json}}}
provisioning_parameters=${3:-${HOSTKEYCTL_PROVISIONING_PARAMETERS:-}}
if [ -z "$provisioning_parameters" ]; then
  provisioning_parameters=$HERE/../provisioning_parameters.json
  # HyperPod also writes it beside resource_config.json (/opt/ml/config),
  # where upstream's node detector (Extensions/detect-node) reads it.
  [ -r "$provisioning_parameters" ] || provisioning_parameters=$(dirname "$resource_config")/provisioning_parameters.json
fi
# Tests install under a scratch root; on a node it is /.
ROOT=${HOSTKEYCTL_ROOT:-}

# This node's address as lifecycle_script.py finds it (a UDP socket
# "connected" to a private address: no packet is sent; 127.0.0.1 when
# there is no route yet).
self_ip() {
  if [ -n "${HOSTKEYCTL_SELF_IP:-}" ]; then
    echo "$HOSTKEYCTL_SELF_IP"
    return
  fi
  python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("10.254.254.254", 1))
    print(s.getsockname()[0])
except OSError:
    print("127.0.0.1")
finally:
    s.close()
'
}

# What the configs say of this node: three lines, its type (login,
# controller, compute; "absent" when the address is in no group;
# "no-login-group" when the cluster has none; "unknown" when the configs
# cannot tell), its group, and the cluster's region. A line "error ..."
# when a config cannot be read. Groups and instances may be null.
lookup() {
  python3 - "$resource_config" "$provisioning_parameters" "$1" <<'PY'
import json
import os
import sys

rc_path, pp_path, ip = sys.argv[1:4]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"error cannot read {path}: {e}")
        sys.exit(0)


config = load(rc_path)
if not isinstance(config, dict):
    print(f"error {rc_path} is not a JSON object")
    sys.exit(0)
params = load(pp_path) if os.path.exists(pp_path) else None
if params is not None and not isinstance(params, dict):
    print(f"error {pp_path} is not a JSON object")
    sys.exit(0)
groups = [g for g in (config.get("InstanceGroups") or []) if isinstance(g, dict)]
arn = str((config.get("ClusterConfig") or {}).get("ClusterArn") or "")
parts = arn.split(":")
region = parts[3] if len(parts) > 5 and parts[0] == "arn" and parts[2] == "sagemaker" else ""
login_group = (params or {}).get("login_group") or ""
controller_group = (params or {}).get("controller_group") or ""
api_driven = any(isinstance(g.get("SlurmConfig"), dict) for g in groups)


def kind(group):
    slurm = group.get("SlurmConfig")
    if isinstance(slurm, dict) and slurm.get("NodeType"):
        return {"login": "login", "controller": "controller"}.get(str(slurm["NodeType"]).lower(), "compute")
    if login_group and group.get("Name") == login_group:
        return "login"
    if controller_group and group.get("Name") == controller_group:
        return "controller"
    return "compute"


found = None
if ip != "127.0.0.1":
    for group in groups:
        for instance in group.get("Instances") or []:
            if isinstance(instance, dict) and instance.get("CustomerIpAddress") == ip:
                found = group
if not api_driven and params is None:
    print("unknown")
elif not api_driven and not login_group:
    print("no-login-group")
elif found is None:
    print("absent")
else:
    print(kind(found))
print(found.get("Name", "") if found else "")
print(region)
PY
}

case "$node_type" in
  controller | compute)
    if [ -z "$enrol" ]; then
      log "this node is a $node_type node, not a login node: nothing to do"
      exit 0
    fi
    ;;
esac
attempts=7
if [ ! -r "$resource_config" ]; then
  [ -n "$node_type" ] || fail "cannot read $resource_config (pass it as the second argument, or set SAGEMAKER_RESOURCE_CONFIG_PATH)"
  log "cannot read $resource_config: the region is not the cluster's"
  attempts=0 ip=$(self_ip) group="" cluster_region=""
fi
# lifecycle_script.py's wait for its own address: 5 s, doubling, 6 times.
wait_s=${HOSTKEYCTL_FIND_RETRY_SECONDS:-5}
for ((attempt = 1; attempt <= attempts; attempt++)); do
  ip=$(self_ip)
  kind=error rest="no answer from the config lookup" group="" cluster_region=""
  { read -r kind rest && read -r group && read -r cluster_region; } < <(lookup "$ip") || true
  [ "$kind" != error ] || fail "$rest"
  [ -z "$node_type" ] || break
  [ "$kind" = absent ] || break
  if [ "$attempt" -lt "$attempts" ]; then
    log "this node ($ip) is in no instance group of $resource_config yet; looking again in ${wait_s} s"
    sleep "$wait_s"
    wait_s=$((wait_s * 2))
  fi
done
if [ -z "$node_type" ]; then
  case "$kind" in
    absent) fail "this node ($ip) is in no instance group of $resource_config after 7 looks: it may be a login node, so provisioning stops (pass the node type as the first argument, as lifecycle_script.py knows it)" ;;
    unknown) fail "cannot tell whether this node is a login node: $resource_config has no SlurmConfig.NodeType and there is no $provisioning_parameters (pass the node type as the first argument, or the provisioning parameters as the third)" ;;
    no-login-group)
      if [ -z "$enrol" ]; then
        log "this cluster has no login group ($provisioning_parameters names no login_group): nothing to do"
        exit 0
      fi
      kind=compute
      ;;
  esac
  node_type=$kind
fi
if [ "$node_type" != login ]; then
  if [ -z "$enrol" ]; then
    log "this node ($ip${group:+, instance group $group}) is a $node_type node, not a login node: nothing to do"
    exit 0
  fi
  log "$node_type node $ip${group:+ (instance group $group)}: it enrols, and serves its own keys"
else
  log "login node $ip${group:+ (instance group $group)}"
fi

region=${HOSTKEYCTL_REGION:-$cluster_region}
if [ -n "${HOSTKEYCTL_REGION:-}" ]; then
  log "region $region (HOSTKEYCTL_REGION)"
elif [ -n "$region" ]; then
  log "region $region (the cluster's, from ClusterConfig.ClusterArn)"
else
  log "no region in hostkeyctl.env or $resource_config: the SDK's (instance metadata)"
fi

[ "$node_type" != login ] || [ -n "${HOSTKEYCTL_SECRET_ID:-}" ] || fail "HOSTKEYCTL_SECRET_ID is not set (in hostkeyctl.env beside this script)"
# The metrics file: in node_exporter's textfile directory, made here (root's,
# 0755: node_exporter reads it as any user). The unit may write the default
# directory; another one gets a drop-in that lets it.
default_metrics_dir=/var/lib/node_exporter/textfile_collector
metrics_dir=${HOSTKEYCTL_METRICS_DIR-$default_metrics_dir}
metrics_file=""
case "$metrics_dir" in
  none | "") ;;
  /*)
    case "$metrics_dir" in *[[:space:]]* | *[\"\'\\\$%]*) fail "HOSTKEYCTL_METRICS_DIR '$metrics_dir' has a blank, a quote, a backslash, a dollar or a percent sign: the unit's ReadWritePaths cannot name it" ;; esac
    metrics_file=$metrics_dir/hostkeyctl.prom
    ;;
  *) fail "HOSTKEYCTL_METRICS_DIR '$metrics_dir' is not an absolute path (or \"none\" for no metrics file)" ;;
esac
case "${HOSTKEYCTL_REPORT_COMPLIANCE:-false}" in
  true) report_compliance=true ;;
  false) report_compliance="" ;;
  *) fail "HOSTKEYCTL_REPORT_COMPLIANCE is '$HOSTKEYCTL_REPORT_COMPLIANCE': set it to true or false" ;;
esac
imds_default=open
[ "$node_type" != login ] || imds_default=root-only
imds=${HOSTKEYCTL_IMDS:-$imds_default}
case "$imds" in
  root-only | open) ;;
  *) fail "HOSTKEYCTL_IMDS is '$imds': set it to root-only or open" ;;
esac
imds_allow=${HOSTKEYCTL_IMDS_ALLOW_USERS:-}
[[ -z "$imds_allow" || "$imds_allow" =~ ^[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*$ ]] ||
  fail "HOSTKEYCTL_IMDS_ALLOW_USERS '$imds_allow' is not user names or uids, comma-separated"
arch=$(uname -m)
case "$arch" in x86_64 | aarch64) ;; *) fail "no hostkeyctl build for $arch" ;; esac
name="hostkeyctl-$arch"
pin_var=HOSTKEYCTL_SHA256_$(echo "$arch" | tr '[:lower:]' '[:upper:]')
expected=${!pin_var:-}
[ -n "$expected" ] || fail "$pin_var is not set: put the SHA-256 of $name (from the release's SHA256SUMS, copied from a source you trust) in hostkeyctl.env beside this script"
[[ "$expected" =~ ^[0-9a-f]{64}$ ]] || fail "$pin_var is not a SHA-256 (64 lowercase hex digits)"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
source_dir=$HERE
if [ ! -f "$HERE/$name" ]; then
  [ -n "${HOSTKEYCTL_BINARY_S3_URI:-}" ] || fail "$name is not beside this script and HOSTKEYCTL_BINARY_S3_URI is not set"
  source_dir=$scratch
  log "downloading $name from $HOSTKEYCTL_BINARY_S3_URI"
  aws s3 cp --only-show-errors ${region:+--region "$region"} "$HOSTKEYCTL_BINARY_S3_URI/$name" "$source_dir/$name" ||
    fail "cannot download $HOSTKEYCTL_BINARY_S3_URI/$name: the node role needs s3:GetObject on it (docs/iam.md), or keep the binaries beside this script in the lifecycle bucket"
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

# The timers' settings, then the units; each written only when it changes.
put() { # put MODE SOURCE DEST
  if cmp -s "$2" "$3"; then return 0; fi
  mkdir -p "$(dirname "$3")"
  install -m "$1" "$2" "$3.new" && mv -f "$3.new" "$3"
  log "wrote $3"
}
units=$HERE
[ -f "$units/hostkeyctl-install.service" ] || units="$HERE/../systemd"

# The metadata service for root alone, before the keys come and before
# any user can log in; and at every boot after (the unit): netfilter rules
# do not survive a reboot.
guard=hostkeyctl-imds-guard.service
if [ "$imds" = root-only ]; then
  [ -f "$units/$guard" ] || fail "$guard is missing beside this script"
  # Names become uids here, once: at boot the unit must not wait on a
  # directory service to keep the service to root.
  uids=()
  IFS=, read -r -a names <<<"$imds_allow"
  for user in ${names[@]+"${names[@]}"}; do
    entry=$(getent passwd "$user") || fail "HOSTKEYCTL_IMDS_ALLOW_USERS names $user, no user on this node (getent passwd)"
    uids+=("$(echo "$entry" | cut -d: -f3)")
  done
  allow=$(IFS=,; echo "${uids[*]+${uids[*]}}")
  printf '%s\n' "# Written by the hostkeyctl lifecycle step; read by $guard." \
    "HOSTKEYCTL_IMDS_ALLOW_USERS=$allow" >"$scratch/imds"
  rc=0
  HOSTKEYCTL_IMDS_ALLOW_USERS=$allow "$bin" imds-guard --output table >"$scratch/imds-out" 2>"$scratch/stderr" || rc=$?
  sed 's/^/  /' "$scratch/imds-out"
  sed 's/^/  hostkeyctl: /' "$scratch/stderr"
  [ "$rc" -eq 0 ] ||
    fail "the instance metadata service could not be kept to root (exit $rc, said above): every login user could read the key set with the node's role. Fix it, or set HOSTKEYCTL_IMDS=open in hostkeyctl.env to accept that"
  put 0644 "$scratch/imds" "$ROOT/etc/default/hostkeyctl-imds-guard"
  put 0644 "$units/$guard" "$ROOT/etc/systemd/system/$guard"
  systemctl daemon-reload
  systemctl enable "$guard"
  log "the instance metadata service is kept to root${imds_allow:+ and $imds_allow} ($guard, at every boot)"
else
  if [ -f "$ROOT/etc/systemd/system/$guard" ]; then
    systemctl disable "$guard" || true
    rm -f "$ROOT/etc/systemd/system/$guard" "$ROOT/etc/default/hostkeyctl-imds-guard"
    "$bin" imds-guard --open --output json >/dev/null
    log "removed $guard: the instance metadata service is open to every user (HOSTKEYCTL_IMDS=open)"
  fi
  if [ "$node_type" = login ]; then
    log "WARNING: HOSTKEYCTL_IMDS=open: every login user reaches the instance metadata service, and with the node's role reads the key set's private keys (docs/security.md)"
  fi
fi
if [ "$node_type" = login ]; then
{
  echo "# Written by the hostkeyctl lifecycle step; read by hostkeyctl-install.service."
  echo "HOSTKEYCTL_SECRET_ID=$HOSTKEYCTL_SECRET_ID"
  if [ -n "$region" ]; then echo "AWS_REGION=$region"; fi
  if [ -n "$metrics_file" ]; then echo "HOSTKEYCTL_METRICS_FILE=$metrics_file"; fi
  if [ -n "$report_compliance" ]; then echo "HOSTKEYCTL_REPORT_COMPLIANCE=true"; fi
} >"$scratch/settings"
put 0644 "$scratch/settings" "$ROOT/etc/default/hostkeyctl"
for unit in hostkeyctl-install.service hostkeyctl-install.timer; do
  [ -f "$units/$unit" ] || fail "$unit is missing beside this script"
  put 0644 "$units/$unit" "$ROOT/etc/systemd/system/$unit"
done
dropin="$ROOT/etc/systemd/system/hostkeyctl-install.service.d/20-metrics.conf"
if [ -n "$metrics_file" ]; then
  if [ ! -d "$ROOT$metrics_dir" ]; then
    mkdir -p -m 0755 "$ROOT$metrics_dir"
    log "made $metrics_dir (node_exporter's textfile directory)"
  fi
  if [ "$metrics_dir" != "$default_metrics_dir" ]; then
    printf '%s\n' "# Written by the hostkeyctl lifecycle step: the metrics file's directory." \
      "[Service]" "ReadWritePaths=-$metrics_dir" >"$scratch/dropin"
    put 0644 "$scratch/dropin" "$dropin"
  fi
fi
if { [ -z "$metrics_file" ] || [ "$metrics_dir" = "$default_metrics_dir" ]; } && [ -f "$dropin" ]; then
  rm -f "$dropin"
  log "removed $dropin"
fi

# The keys now, before the node takes traffic. The node role's credentials
# can take a moment at first boot: retry what may pass later.
args=(install --secret-id "$HOSTKEYCTL_SECRET_ID")
if [ -n "$region" ]; then args+=(--region "$region"); fi
if [ -n "$metrics_file" ]; then args+=(--metrics-file "$ROOT$metrics_file"); fi
if [ -n "$report_compliance" ]; then args+=(--report-compliance); fi
rc=0
for attempt in 1 2 3 4 5; do
  rc=0
  "$bin" "${args[@]}" >/dev/null 2>"$scratch/stderr" || rc=$?
  sed 's/^/  hostkeyctl: /' "$scratch/stderr"
  case $rc in
    0)
      log "host keys installed and verified"
      break
      ;;
    6)
      # The keys are the canonical ones; a certificate of the set is
      # expired or not valid yet and was left out. The timer installs the
      # renewed set (hostkeyctl sign) at its next run.
      log "WARNING: host keys installed and verified, but the set's certificates need renewal (exit 6, said above): run hostkeyctl sign; the timer installs them"
      break
      ;;
    2)
      if grep -q "no AWS region" "$scratch/stderr"; then
        fail "no AWS region (exit 2): set HOSTKEYCTL_REGION in hostkeyctl.env; $resource_config has no ClusterConfig.ClusterArn to take it from, and the instance metadata gave none"
      fi
      fail "hostkeyctl refused its input (exit 2, its message is above): check HOSTKEYCTL_SECRET_ID and the secret"
      ;;
    5) fail "the install failed and so did its rollback (exit 5): this node needs a human" ;;
  esac
  if [ "$attempt" -lt 5 ]; then
    log "attempt $attempt: hostkeyctl install exited $rc; retrying"
    sleep $((attempt * ${HOSTKEYCTL_RETRY_SECONDS:-10}))
  else
    log "attempt $attempt: hostkeyctl install exited $rc; giving up here"
  fi
done
if [ "$rc" -ne 0 ]; then
  # Exit 0 all the same: failing the lifecycle script fails the whole
  # cluster's creation. The node must not take users meanwhile: that is
  # admission's (docs/admission.md), which checks by handshake.
  log "WARNING: the host keys are not installed yet (exit $rc); the node serves its own keys, and the timer retries"
  log "WARNING: keep this node out of the load balancer until it serves the fleet's keys: hostkeyctl admit holds it out and admits it once it does (docs/admission.md); if you register targets by hand, do not register ${ip:-this node} yet"
fi

systemctl daemon-reload
systemctl enable --now hostkeyctl-install.timer
log "hostkeyctl-install.timer enabled"
fi

[ -n "$enrol" ] || exit 0
# Enrolment, after the install: on a login node that serves the set,
# enroll leaves its keys and sshd alone and writes the client trust.
args=(enroll --function "$enrol" --trust "$HOSTKEYCTL_ENROL_TRUST" --client-dir "$ROOT/etc/ssh")
if [ -n "$region" ]; then args+=(--region "$region"); fi
# A login node claims its instance and takes the trust alone, even when
# its install has not succeeded yet (its own keys must get no certificate:
# install would then refuse the node).
if [ "$node_type" = login ]; then args+=(--login-node); fi
# Every node reaches the login nodes on their listener for the cluster;
# a login node serves it (its own keys, certified, on a second sshd).
if [ -n "$cluster_port" ]; then args+=(--cluster-port "$cluster_port" --login-hosts "$login_hosts"); fi
rc=0
for attempt in 1 2 3 4 5; do
  rc=0
  "$bin" "${args[@]}" >"$scratch/stdout" 2>"$scratch/stderr" || rc=$?
  sed 's/^/  hostkeyctl: /' "$scratch/stdout" "$scratch/stderr"
  case $rc in
    0)
      log "enrolled"
      break
      ;;
    2) fail "hostkeyctl enroll refused its input (exit 2, its message is above): check HOSTKEYCTL_ENROL_FUNCTION and HOSTKEYCTL_ENROL_TRUST" ;;
  esac
  if [ "$attempt" -lt 5 ]; then
    log "attempt $attempt: hostkeyctl enroll exited $rc; retrying"
    sleep $((attempt * ${HOSTKEYCTL_RETRY_SECONDS:-10}))
  else
    # Exit 0 all the same (failing the step fails the cluster's creation);
    # the other nodes refuse this one until it enrols, never silently.
    log "WARNING: not enrolled (exit $rc, said above): the other nodes refuse this one until it enrols; the timer retries"
  fi
done
{
  echo "# Written by the hostkeyctl lifecycle step; read by hostkeyctl-enroll.service."
  echo "HOSTKEYCTL_ENROL_FUNCTION=$enrol"
  echo "HOSTKEYCTL_ENROL_TRUST=$HOSTKEYCTL_ENROL_TRUST"
  if [ -n "$region" ]; then echo "AWS_REGION=$region"; fi
  if [ "$node_type" = login ]; then echo "HOSTKEYCTL_ENROL_LOGIN_NODE=true"; fi
  if [ -n "$cluster_port" ]; then
    echo "HOSTKEYCTL_ENROL_CLUSTER_PORT=$cluster_port"
    echo "HOSTKEYCTL_ENROL_LOGIN_HOSTS=$login_hosts"
  fi
} >"$scratch/enroll"
put 0644 "$scratch/enroll" "$ROOT/etc/default/hostkeyctl-enroll"
for unit in hostkeyctl-enroll.service hostkeyctl-enroll.timer; do
  [ -f "$units/$unit" ] || fail "$unit is missing beside this script"
  put 0644 "$units/$unit" "$ROOT/etc/systemd/system/$unit"
done
systemctl daemon-reload
systemctl enable --now hostkeyctl-enroll.timer
log "hostkeyctl-enroll.timer enabled"
