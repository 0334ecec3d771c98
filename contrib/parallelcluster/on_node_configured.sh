#!/bin/bash
# ParallelCluster custom action for a login nodes pool (OnNodeConfigured):
# give this login node the cluster's one SSH host identity with hostkeyctl,
# and keep it converged with a systemd timer (docs/quickstart/parallelcluster.md).
#
# It runs the same step as HyperPod's lifecycle (contrib/hyperpod/), told
# that this is a login node: put that folder (install_hostkeyctl.sh, its
# hostkeyctl.env, the units of contrib/systemd/ and the binaries
# hostkeyctl-x86_64 / hostkeyctl-aarch64) at s3://BUCKET/PREFIX, and give
# that URI as the action's one argument:
#
#   LoginNodes:
#     Pools:
#       - CustomActions:
#           OnNodeConfigured:
#             Script: s3://BUCKET/PREFIX/on_node_configured.sh
#             Args:
#               - s3://BUCKET/PREFIX
#
# The pool's role needs s3:GetObject and s3:ListBucket there (an
# Iam.AdditionalIamPolicies entry, or S3Access) and the node policy of
# iam/node.json.
#
# With enrolment (HOSTKEYCTL_ENROL_FUNCTION in hostkeyctl.env, a signer of
# HOSTKEYCTL_ENROL_CLUSTER_KIND=parallelcluster: docs/cluster-trust.md),
# give the same action to the head node and to every Slurm queue, with the
# node type as a second argument (controller or compute): they enrol.
#   Scheduling:
#     SlurmQueues:
#       - CustomActions:
#           OnNodeConfigured:
#             Script: s3://BUCKET/PREFIX/on_node_configured.sh
#             Args: [s3://BUCKET/PREFIX, compute]
# Exit: the step's (0 done or retried by the timer; 1
# provisioning must stop: the settings, the binary or its checksum are wrong).
set -euo pipefail

# On stderr: what ParallelCluster keeps of a failed custom action.
log() { echo "[hostkeyctl custom action] $*" >&2; }
step=${1:-}
node_type=${2:-login}
case "$node_type" in
  login | controller | compute) ;;
  *)
    log "ERROR: the node type is '$node_type': give login, controller or compute as the action's second argument"
    exit 1
    ;;
esac
case "$step" in
  s3://?*) ;;
  *)
    log "ERROR: the action's argument is '$step': give the step's folder as s3://BUCKET/PREFIX (Args in the pool's OnNodeConfigured)"
    exit 1
    ;;
esac
# A directory of root's own (mktemp: 0700, a fresh name), never a fixed
# path in a directory others can write, where they could plant the step.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
aws s3 cp --recursive --only-show-errors "${step%/}" "$dir/hostkeyctl" || {
  log "ERROR: cannot download $step: the pool's role needs s3:GetObject and s3:ListBucket on it"
  exit 1
}
bash "$dir/hostkeyctl/install_hostkeyctl.sh" "$node_type"
