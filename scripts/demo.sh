#!/usr/bin/env bash
# The hostkeyctl story, end to end, on the local test bed (see testbed/):
# three real sshd login nodes behind HAProxy, and an AWS emulator.
#
#   1. the problem: real ssh through the load balancer hits
#      "REMOTE HOST IDENTIFICATION HAS CHANGED";
#   2. hostkeyctl adopts node 1's keys as the canonical set in Secrets Manager;
#   3. audits what clients see (drift), 4. pushes the set to every node with
#   SSM Run Command, through hostkeyctl's own document, pinned by its hash (a
#   changed document is refused), 5. audits again (clean);
#   6. users get one known_hosts line per key: 20 real ssh connections, 0 warnings;
#      6b. a node's keys changed by hand: admit drains it from the target
#      group (HAProxy follows it), its install puts it right, admit takes
#      it back, 20 more connections;
#   7. rotation with overlap (UpdateHostKeys), while a node's timer agrees
#      with every step, and a PuTTY user's -hostkey arguments; promoted only
#      after the minimum overlap (the bed's clock moves a day); 8. 20 more
#      connections with ssh and 20 with plink, 0 warnings;
#   9. the same install on other distributions' sshd set-ups (Ubuntu 24.04
#      socket activation, Amazon Linux 2023), with nothing but its defaults;
#  10. host certificates: a CA in KMS (its private key never leaves it)
#      signs the set, clients hold one @cert-authority line, 20
#      connections, and the audit judges them;
#  11-12. revocation, a State Manager association, Compliance and metrics;
#  13. scheduled rotation: Secrets Manager's schedule runs the Lambda
#      function (this binary as `bootstrap`), which promotes the set the
#      nodes offered for an interval: a plain-key user, 20 connections;
#  14. inside the cluster (a second bed: a controller and two compute
#      nodes of a HyperPod cluster): each node enrols its own keys, the
#      nodes reach each other strictly by name and address, and a revoked
#      node is refused once the others renew.
# Every command signs as the IAM role docs/iam.md names for it, and the
# bed's AWS emulator enforces that role's policy (iam/*.json).
#
# Run it with `make demo` (which installs what is missing and builds first).
# It always tears the bed down, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

# Where cargo put the binary: CARGO_TARGET_DIR and .cargo/config are
# honoured by asking cargo itself.
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BIN_DIR="$TARGET_DIR/debug"
HOSTKEYCTL="$BIN_DIR/hostkeyctl"
WORK=$(mktemp -d /tmp/hostkeyctl-demo.XXXXXX)
BED_PID=""
CLUSTER_PID=""

exec 3>&2 # the commands shown, whatever a command's stderr is redirected to
bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
# run ROLE COMMAND...: as the IAM role docs/iam.md names for the command,
# whose policy (iam/ROLE.json) the bed enforces.
run() {
  local role=$1
  shift
  printf '   [%s] $ %s\n' "$role" "$*" >&3
  AWS_ACCESS_KEY_ID=$(state "s['credentials']['$role']['access_key_id']") \
    AWS_SECRET_ACCESS_KEY=$(state "s['credentials']['$role']['secret_access_key']") "$@"
}

teardown() {
  local rc=$?
  for pid in "$BED_PID" "$CLUSTER_PID"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [ $rc -eq 0 ]; then
    rm -rf "$WORK"
  else
    echo "demo failed (exit $rc); logs kept in $WORK" >&2
  fi
  exit $rc
}
trap teardown EXIT INT TERM

# Waits for a bed started in the background to write its state file:
# await_bed STATE PID LOG. A bed that exits, or says nothing in 60 s,
# ends the demo with its log.
await_bed() {
  for _ in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "demo: the bed did not come up in 60 s" >&2
  cat "$3" >&2
  exit 1
}

[ -x "$HOSTKEYCTL" ] || { echo "demo: $HOSTKEYCTL is missing; run \`make demo\` (it builds first)" >&2; exit 2; }

bold "Starting the test bed: 3 sshd login nodes, HAProxy, AWS emulator"
python3 testbed/bed.py up --dir "$WORK/bed" --nodes 3 --profile ubuntu-24.04 --profile al2023 --profile debian-13 \
  --bin-dir "$BIN_DIR" --bare >"$WORK/ready.json" 2>"$WORK/bed.log" &
BED_PID=$!
await_bed "$WORK/ready.json" "$BED_PID" "$WORK/bed.log"

# The bed whose state is read (section 14 switches to the cluster's).
STATE_FILE=$WORK/ready.json
state() { python3 -c "import json,sys; s=json.load(open(sys.argv[2])); print(eval(sys.argv[1]))" "$1" "$STATE_FILE"; }
LB=$(state 's["lb"]["address"]')
CLIENT_KEY=$(state 's["client_key"]')
NODES=$(state '" ".join(n["name"] for n in s["nodes"])')
export AWS_ENDPOINT_URL AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
AWS_ENDPOINT_URL=$(state 's["endpoint"]')
say "login nodes: $NODES"
say "load balancer: $LB:22 (round robin)   AWS emulator: $AWS_ENDPOINT_URL"
say "every command signs as its role (admin, rotation, node, auditor, signer, admission); the emulator enforces iam/*.json"

# One ssh through the load balancer as a user would, with a known_hosts file.
ssh_lb() {
  ssh -i "$CLIENT_KEY" -o UserKnownHostsFile="$1" -o StrictHostKeyChecking="$2" -o BatchMode=yes \
    -o ConnectTimeout=5 -o LogLevel=ERROR "${@:3}" "root@$LB" 'echo "$SSH_CONNECTION"' 2>&1
}

bold "1. The problem: every node has its own host keys"
KH="$WORK/known_hosts.before"
ssh_lb "$KH" accept-new >/dev/null
say "first connection: the user accepts the key of whichever node answered"
mismatches=0
for _ in 1 2 3 4 5 6; do
  out=$(ssh_lb "$KH" yes || true)
  if grep -q "REMOTE HOST IDENTIFICATION HAS CHANGED" <<<"$out"; then
    mismatches=$((mismatches + 1))
    [ $mismatches -eq 1 ] && grep -m3 -E "WARNING|IDENTIFICATION|Host key verification failed" <<<"$out" | sed 's/^/   | /'
  fi
done
say "next 6 connections with StrictHostKeyChecking=yes: $mismatches refused with a host key mismatch"
[ $mismatches -gt 0 ] || { echo "demo: expected mismatches before the fix" >&2; exit 1; }

bold "2. Adopt node 1's host keys as the canonical set (in Secrets Manager)"
say "(users who already trust node 1 keep trusting it; nodes 2 and 3 will take its keys)"
NODE1_SSH_DIR=$(state 's["nodes"][0]["ssh_dir"]')
run admin "$HOSTKEYCTL" init --secret-id hostkeys/demo --from-dir "$NODE1_SSH_DIR" --output table
run admin "$HOSTKEYCTL" status --secret-id hostkeys/demo --output table

bold "3. Audit: what clients see, node by node and through the load balancer"
LB_ADDR="$LB:22"
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --lb "$LB_ADDR" --samples 9 --key-types ssh-ed25519,ecdsa-sha2-nistp256,ssh-rsa --output table || true
say "(exit 1: drift. Nodes 2 and 3 serve their own keys, and the load balancer shows 3 keys per type)"

bold "4. Push it to every login node with SSM Run Command, through hostkeyctl's own document"
say "(the admin role may send only this document, which can only run 'hostkeyctl install' with typed"
say " parameters; iam/admin.json denies AWS-RunShellScript. push sends it only when SSM's SHA-256 of its"
say " default version is the document this hostkeyctl deploys: a changed document is never sent)"
run admin "$HOSTKEYCTL" ssm-document deploy --output table
say "Role=login alone also reaches the login node of another cluster in this account: refused, nothing sent"
if run admin "$HOSTKEYCTL" push --secret-id hostkeys/demo --target tag:Role=login --dry-run \
  --output table 2>"$WORK/scoped.txt"; then
  echo "demo: a push reached another cluster's node" >&2; exit 1
fi
fold -s -w 100 "$WORK/scoped.txt" | sed 's/^/   | /'
say "the login nodes have no hostkeyctl, as an AMI starts: the node build comes from your bucket (here the"
say "bed's directory), pinned in hostkeyctl's setup document by the SHA-256 of your copy"
BUILDS=$WORK/builds
mkdir -p "$BUILDS" "$WORK/bed/s3/demo-bucket/hostkeyctl"
cp "$HOSTKEYCTL" "$BUILDS/hostkeyctl-$(uname -m)"
cp "$BUILDS/hostkeyctl-$(uname -m)" "$WORK/bed/s3/demo-bucket/hostkeyctl/"
run admin "$HOSTKEYCTL" ssm-document deploy-setup --builds "$BUILDS" --builds-at s3://demo-bucket/hostkeyctl \
  --output table
run admin "$HOSTKEYCTL" deliver --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --max-concurrency 100% --output table
say "(deliver also keeps each node's metadata service to root, now and at boot: the node role reads the key set)"
say "(each node runs 'hostkeyctl install' with the node role: fetch, validate, atomic write, sshd -t, reload,"
say " verify, roll back on failure)"
run admin "$HOSTKEYCTL" push --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --canary 1 --max-concurrency 100% --output table
say "doctor reads the whole set-up (secret, functions, documents, targets, SSM, the load balancer's target group,"
say "each node through the read-only check):"
run admin "$HOSTKEYCTL" doctor --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --target-group lb:hp-login --output table

say "someone who may update documents (here the bed's own account) adds one line to hostkeyctl-Install:"
python3 - "$AWS_ENDPOINT_URL" "$(state "s['credentials']['bed-root']['access_key_id']")" \
  "$(state "s['credentials']['bed-root']['secret_access_key']")" <<'PY'
import sys, boto3
ssm = boto3.client("ssm", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
content = ssm.get_document(Name="hostkeyctl-Install")["Content"].replace('"set -eu",', '"set -eu", "id > /tmp/pwned",', 1)
version = ssm.update_document(Name="hostkeyctl-Install", Content=content, DocumentVersion="$LATEST")
ssm.update_document_default_version(Name="hostkeyctl-Install",
                                    DocumentVersion=version["DocumentDescription"]["DocumentVersion"])
PY
if run admin "$HOSTKEYCTL" push --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --max-concurrency 100% --output table 2>"$WORK/refused.txt"; then
  echo "demo: push sent a changed document" >&2; exit 1
fi
fold -s -w 100 "$WORK/refused.txt" | sed 's/^/   | /'
say "(exit 2, nothing sent to any node; redeploying puts hostkeyctl's own version back as the default)"
run admin "$HOSTKEYCTL" ssm-document deploy --output table

bold "5. Audit again, with the nodes and the backend count from the load balancer itself"
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target lb:hp-login --lb lb:hp-login --samples 9 --output table

bold "6. Users trust the fleet's one identity"
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --host "$LB" > "$WORK/known_hosts"
sed 's/^/   | /; s/\(AAAA.\{20\}\).*/\1.../' "$WORK/known_hosts"
KH="$WORK/known_hosts"
TWENTY_OPTS=()
twenty() {
  local warnings=0 node out
  declare -A served=()
  for _ in $(seq 1 20); do
    if out=$(ssh_lb "$KH" yes "${TWENTY_OPTS[@]}"); then
      node=$(awk '{print $3}' <<<"$out")
      served[$node]=$(( ${served[$node]:-0} + 1 ))
    else
      warnings=$((warnings + 1))
      sed 's/^/   | /' <<<"$out"
    fi
  done
  for node in "${!served[@]}"; do say "node $node served ${served[$node]} connections"; done
  say "host key warnings: $warnings of 20"
  [ $warnings -eq 0 ] || { echo "demo: host key warnings remain" >&2; exit 1; }
}
say "20 real ssh connections through the load balancer, StrictHostKeyChecking=yes:"
twenty

bold "6b. Admission: the load balancer sends users only to nodes that serve the set"
TG="tg:$(state 's["elb"]["ip"]["target_group_arn"]')"
NODE3_SSH_DIR=$(state 's["nodes"][2]["ssh_dir"]')
say "someone regenerates node 3's ed25519 key by hand; every user it serves now sees the warning"
rm -f "$NODE3_SSH_DIR/ssh_host_ed25519_key" "$NODE3_SSH_DIR/ssh_host_ed25519_key.pub"
ssh-keygen -q -t ed25519 -N '' -f "$NODE3_SSH_DIR/ssh_host_ed25519_key"
say "admit checks every node by handshake and drains the drifted one (never the last, at most a third a run):"
rc=0
run admission "$HOSTKEYCTL" admit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --target-group "$TG" --output table || rc=$?
[ $rc -eq 1 ] || { echo "demo: admit exited $rc, not 1 (drift)" >&2; exit 1; }
say "(exit 1: the drift remains until node 3's install runs; users no longer reach it)"
say "node 3's timer installs the set again; the next admit run takes it back:"
mapfile -t NODE3_ENV < <(state '"\n".join(f"{k}={v}" for k, v in s["nodes"][2]["env"].items())')
env "${NODE3_ENV[@]}" "$HOSTKEYCTL" install --secret-id hostkeys/demo >/dev/null
run admission "$HOSTKEYCTL" admit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --target-group "$TG" --output table
say "20 more connections through the load balancer:"
twenty

bold "7. Rotate the keys without a warning: overlap, then finish"
run rotation "$HOSTKEYCTL" rotate --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --overlap --max-concurrency 100% --output table -q
say "a user logs in during the overlap; OpenSSH (UpdateHostKeys) learns the new keys:"
ssh -i "$CLIENT_KEY" -o UserKnownHostsFile="$KH" -o StrictHostKeyChecking=yes -o BatchMode=yes \
  -o UpdateHostKeys=yes -o LogLevel=ERROR "root@$LB" true
say "known_hosts now holds $(grep -vc "^#" "$KH") lines for $LB: the current keys and the learned next ones"
say "a PuTTY user fetches plink's -hostkey arguments now: every key the nodes serve, current and next (docs/clients.md):"
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --client plink -q > "$WORK/plink-args"
sed 's/^/   | /; s/\(-hostkey SHA256:.\{8\}\)[^ ]*/\1.../g' "$WORK/plink-args"
run admin "$HOSTKEYCTL" status --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp --output table
say "meanwhile node 2's timer runs its plain install; it reads the same state from the stages, so it changes nothing:"
mapfile -t NODE2_ENV < <(state '"\n".join(f"{k}={v}" for k, v in s["nodes"][1]["env"].items())')
env "${NODE2_ENV[@]}" "$HOSTKEYCTL" install --secret-id hostkeys/demo 2>&1 >/dev/null | sed 's/^/   | /'
say "promoting at once is held back: clients are given at least a day (--min-overlap) to learn the keys:"
if run rotation "$HOSTKEYCTL" rotate --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --finish --max-concurrency 100% -q >/dev/null 2>"$WORK/held.txt"; then
  echo "demo: the promotion was not held back" >&2
  exit 1
fi
sed 's/^/   | /' "$WORK/held.txt" | cut -c1-160
say "a day passes (the test bed's clock ages every date the AWS emulator keeps):"
python3 -c "import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=b'{\"hours\": 25}', method='POST')).read()" \
  "$AWS_ENDPOINT_URL/_bed/clock"
run rotation "$HOSTKEYCTL" rotate --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --finish --canary 1 --max-concurrency 100% --output table -q
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --lb "$LB_ADDR" --samples 9 --key-types ssh-ed25519,ecdsa-sha2-nistp256,ssh-rsa --output table

bold "8. 20 real ssh connections through the load balancer, after the rotation"
twenty
puttygen "$CLIENT_KEY" -O private -o "$WORK/client.ppk"
refused=0
read -r -a PLINK_ARGS <"$WORK/plink-args"
for _ in $(seq 1 20); do
  HOME="$WORK" plink -batch -ssh -i "$WORK/client.ppk" "${PLINK_ARGS[@]}" "root@$LB" true </dev/null >/dev/null 2>&1 ||
    refused=$((refused + 1))
done
say "20 plink connections with the arguments fetched during the overlap: $refused refused"
[ $refused -eq 0 ] || { echo "demo: plink was refused" >&2; exit 1; }
bold "9. The same install on other distributions' sshd set-ups, and on another OpenSSH"
say "(each in its own namespaces with that distribution's /etc/ssh; install finds the config,"
say " the reload and the verify address itself: no flags but the secret. The last is Debian 13's"
say " own OpenSSH 10.0 in a chroot of Debian's packages, PerSourcePenalties on: three connections"
say " check what its sshd serves, one per key it holds. Amazon Linux 2023's crypto policy leaves"
say " out the post-quantum key exchange OpenSSH 10.1 clients warn without: install adds the one"
say " its sshd has, keeping the policy's whole list)"
for i in 0 1 2; do
  profile=$(state "s['profiles'][$i]['name']")
  ns=$(state "s['profiles'][$i]['ns_pid']")
  root=()
  [ "$(state "s['profiles'][$i]['chroot']")" = True ] && root=(--root="/proc/$ns/root" --wd="/proc/$ns/root")
  mapfile -t PROFILE_ENV < <(state "'\\n'.join(f'{k}={v}' for k, v in s['profiles'][$i]['env'].items())")
  say "$profile:"
  env "${PROFILE_ENV[@]}" nsenter --mount="/proc/$ns/ns/mnt" --net="/proc/$ns/ns/net" "${root[@]}" -- \
    "$HOSTKEYCTL" install --secret-id hostkeys/demo 2>&1 >/dev/null | sed 's/^/   | /'
done

bold "10. Host certificates: one @cert-authority line, no trust on first use"
run admin "$HOSTKEYCTL" ca init --ca-secret-id hostkeyctl-ca/demo --kms --output json > "$WORK/ca.json"
CA_FP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fingerprint"])' "$WORK/ca.json")
say "CA $CA_FP: a KMS signing key, whose private key never leaves KMS; its secret (a prefix of its own)"
say "holds the key's ARN and public key, and every certificate is a kms:Sign call CloudTrail logs"
run signer "$HOSTKEYCTL" sign --secret-id hostkeys/demo --ca-secret-id hostkeyctl-ca/demo \
  --principal login.demo.internal --output table
say "(the same keys with certificates, as a new AWSCURRENT version: nodes converge with a reload, no key changes)"
run admin "$HOSTKEYCTL" push --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --max-concurrency 100% --output table -q
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --host login.demo.internal --cert-authority > "$WORK/known_hosts.ca"
sed 's/^/   | /; s/\(AAAA.\{20\}\).*/\1.../' "$WORK/known_hosts.ca"
KH="$WORK/known_hosts.ca"
TWENTY_OPTS=(-o HostKeyAlias=login.demo.internal)
say "20 connections with only that line (HostKeyAlias login.demo.internal, the certificate's principal):"
twenty
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --lb "$LB" --samples 6 --key-types ssh-ed25519,ecdsa-sha2-nistp256,ssh-rsa \
  --ca-fingerprint "$CA_FP" --principal login.demo.internal --output table

bold "11. A rotation retires the signed set; revocation retires it for CA-trusting clients too"
say "(the retired keys' certificates stay valid until they expire: a leaked one would be accepted until then)"
say "(an immediate rotation, --min-overlap 0: every client that does not learn the keys during it is warned once)"
run rotation "$HOSTKEYCTL" rotate --secret-id hostkeys/demo --ca-secret-id hostkeyctl-ca/demo --min-overlap 0 \
  --target tag:Role=login --target tag:Cluster=hp --max-concurrency 100% --output table -q | grep -A3 '^revoke:' | sed 's/^/   | /'
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --host login.demo.internal --revoked -q \
  | sed 's/^/   | /; s/\(AAAA.\{20\}\)[^ ]*/\1.../'
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --krl "$WORK/revoked.krl"
say "clients get those lines beside the @cert-authority line, or the KRL as RevokedHostKeys:"
TWENTY_OPTS=(-o HostKeyAlias=login.demo.internal -o "RevokedHostKeys=$WORK/revoked.krl")
twenty

bold "12. Kept converged and watched: a State Manager association, SSM Compliance, the audit's metrics"
run admin "$HOSTKEYCTL" association deploy --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --output table
say "(State Manager runs it now, on its schedule, and on every instance that comes online with the tags;"
say " it installs what the stages say, as a rotation does, so it never fights one: docs/operations.md)"
# The bed's State Manager: wait for runs, fire the schedule (testbed/emulator/associations.py).
bed_control() { python3 -c "import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=b'{}', method='POST')).read()" "$AWS_ENDPOINT_URL/_bed/associations/$1"; }
bed_control settle
NODE2_SSH_DIR=$(state 's["nodes"][1]["ssh_dir"]')
NODE2_ID=$(state 's["nodes"][1]["instance_id"]')
compliance() {
  python3 - "$AWS_ENDPOINT_URL" "$(state "s['credentials']['bed-root']['access_key_id']")" \
    "$(state "s['credentials']['bed-root']['secret_access_key']")" "$NODE2_ID" <<'PY'
import sys, boto3
ssm = boto3.client("ssm", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
items = ssm.list_compliance_items(ResourceIds=[sys.argv[4]], ResourceTypes=["ManagedInstance"],
                                  Filters=[{"Key": "ComplianceType", "Values": ["Custom:HostKeys"]}])["ComplianceItems"]
for i in items:
    if i["Id"] in ("ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"):
        print(f"   | {sys.argv[4]} Custom:HostKeys {i['Id']:<20} {i['Status']}")
PY
}
say "someone regenerates node 2's ed25519 key by hand:"
rm -f "$NODE2_SSH_DIR/ssh_host_ed25519_key" "$NODE2_SSH_DIR/ssh_host_ed25519_key.pub"
ssh-keygen -q -t ed25519 -N '' -f "$NODE2_SSH_DIR/ssh_host_ed25519_key"
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --lb lb:hp-login --samples 9 --via-ssm --metrics-file "$WORK/audit.prom" --cloudwatch hostkeyctl/demo \
  --output table >/dev/null || say "(exit $?: the audit found the drift)"
grep -E '^hostkeyctl_audit_nodes(_not_ok)?[{ ]' "$WORK/audit.prom" | sed 's/^/   | /'
say "the node reported it to SSM Compliance (its on-disk check ran under SSM):"
compliance
say "the association's schedule fires; it puts the key back, and the node reports it:"
bed_control run
bed_control settle
compliance
run auditor "$HOSTKEYCTL" audit --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --metrics-file "$WORK/audit.prom" --cloudwatch hostkeyctl/demo --output table >/dev/null
grep -E '^hostkeyctl_audit_nodes_not_ok ' "$WORK/audit.prom" | sed 's/^/   | /'
say "(NodesNotOk, in CloudWatch too, is what the template's alarm watches: docs/operations.md)"

bold "13. Scheduled rotation: Secrets Manager's schedule and a Lambda function, one interval of overlap"
KH="$WORK/known_hosts.plain"
run admin "$HOSTKEYCTL" known-hosts --secret-id hostkeys/demo --host "$LB" -q >"$KH"
say "a user with plain keys (no CA): $(grep -vc '^#' "$KH") lines for $LB"
mkdir -p "$WORK/lambda"
cp "$HOSTKEYCTL" "$WORK/lambda/bootstrap"
FUNCTION=arn:aws:lambda:us-east-1:123456789012:function:hostkeyctl-rotation
# The bed's Lambda: this binary named bootstrap behind a stand-in for the
# runtime API, signing as iam/rotation-lambda.json (testbed/emulator/rotation.py).
python3 - "$AWS_ENDPOINT_URL" "$WORK/lambda/bootstrap" "$FUNCTION" \
  "$(state "s['credentials']['rotation-lambda']['access_key_id']")" \
  "$(state "s['credentials']['rotation-lambda']['secret_access_key']")" <<'PY'
import json, os, sys, urllib.request as u
endpoint, bootstrap, arn, key, secret = sys.argv[1:]
args = ["--target", "tag:Role=login", "--target", "tag:Cluster=hp", "--max-concurrency", "100%",
        "--ca-secret-id", "hostkeyctl-ca/demo"]
env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
       "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
       "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "HOME": os.path.dirname(bootstrap)}
variables = {"HOSTKEYCTL_ROTATE_ARGS": json.dumps(args)}
body = json.dumps({"arn": arn, "bootstrap": bootstrap, "env": env, "variables": variables}).encode()
u.urlopen(u.Request(endpoint + "/_bed/lambda/register", data=body, method="POST")).read()
PY
run rotation "$HOSTKEYCTL" schedule enable --secret-id hostkeys/demo --function "$FUNCTION" --schedule 'rate(30 days)' \
  --ca-secret-id hostkeyctl-ca/demo --output table | sed 's/^/   | /'
run admin "$HOSTKEYCTL" push --secret-id hostkeys/demo --target tag:Role=login --target tag:Cluster=hp \
  --max-concurrency 100% -q >/dev/null
say "the nodes offer the announced set beside the current one; the user logs in once in the interval:"
ssh_lb "$KH" yes -o UpdateHostKeys=yes >/dev/null
say "known_hosts now holds $(grep -vc '^#' "$KH") lines: the current keys and the announced ones"
# The bed's clock: 30 days on, the schedule fires; wait for the rotation.
rotation_bed() { python3 -c "import json, sys, urllib.request as u; print(u.urlopen(u.Request(sys.argv[1], data=sys.argv[2].encode(), method='POST')).read().decode())" "$AWS_ENDPOINT_URL/_bed/$1" "$2"; }
rotation_bed clock '{"days": 30}' >/dev/null
rotation_bed rotations/wait '{"count": 2, "timeout": 300}' | python3 -c '
import json, sys
r = json.load(sys.stdin)[-1]
for s in r["steps"]:
    said = s["result"]["result"] if s["ok"] else "FAILED " + json.dumps(s["result"])
    print("   | " + s["step"].ljust(13) + " " + said[:110])
sys.exit(0 if r["status"] == "succeeded" else 1)'
run rotation "$HOSTKEYCTL" schedule show --secret-id hostkeys/demo --output table | sed 's/^/   | /'
say "(RotationEnabled and LastRotatedDate: what Security Hub's SecretsManager.1 and .4 read)"
TWENTY_OPTS=()
twenty

bold "14. Inside the cluster: each node its own keys, certified for the names AWS gives it"
python3 testbed/bed.py up --dir "$WORK/cluster" --nodes 3 --hyperpod-groups controller-machine=1,worker-group=2 \
  --bin-dir "$BIN_DIR" >"$WORK/cluster.json" 2>"$WORK/cluster.log" &
CLUSTER_PID=$!
await_bed "$WORK/cluster.json" "$CLUSTER_PID" "$WORK/cluster.log"
STATE_FILE=$WORK/cluster.json
AWS_ENDPOINT_URL=$(state 's["endpoint"]')
say "a second bed: a HyperPod cluster's controller and two compute nodes, each serving keys of its own"
run admin "$HOSTKEYCTL" ca init --ca-secret-id hostkeyctl-ca/cluster --kms --algorithm ecdsa -q >/dev/null
SIGNER=arn:aws:lambda:us-east-1:123456789012:function:hostkeyctl-enrolment-hostkeyctl-my-cluster
mkdir -p "$WORK/signer"
cp "$HOSTKEYCTL" "$WORK/signer/bootstrap"
# What the template's EnrolmentCluster creates: the bindings table and the
# signer (this binary as `bootstrap`, HOSTKEYCTL_FUNCTION=enrolment,
# signing as iam/enrolment.json). The bed signs each node's identity
# document with a key of its own, which the signer is told to trust.
python3 - "$STATE_FILE" "$SIGNER" "$WORK/signer/bootstrap" <<'PY'
import json, os, sys, urllib.request as u
import boto3
state, arn, bootstrap = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
endpoint, root, signer = state["endpoint"], state["credentials"]["bed-root"], state["credentials"]["enrolment"]
boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
             aws_access_key_id=root["access_key_id"], aws_secret_access_key=root["secret_access_key"]).create_table(
    TableName="hostkeyctl-enrolment-hostkeyctl-my-cluster", BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[{"AttributeName": "instance_id", "AttributeType": "S"}],
    KeySchema=[{"AttributeName": "instance_id", "KeyType": "HASH"}])
post = lambda path, body: json.loads(u.urlopen(u.Request(endpoint + path, data=json.dumps(body).encode(), method="POST")).read())
key = post("/_bed/iid-key", {})
env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": signer["access_key_id"],
       "AWS_SECRET_ACCESS_KEY": signer["secret_access_key"], "AWS_REGION": "us-east-1",
       "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
       "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "HOME": os.path.dirname(bootstrap)}
variables = {"HOSTKEYCTL_FUNCTION": "enrolment", "HOSTKEYCTL_ENROL_CLUSTER": state["hyperpod"]["cluster"],
             "HOSTKEYCTL_ENROL_CA_SECRET_ID": "hostkeyctl-ca/cluster", "HOSTKEYCTL_ENROL_TABLE": "hostkeyctl-enrolment-hostkeyctl-my-cluster",
             "HOSTKEYCTL_ENROL_IID_KEYS_REPLACE": f"{key['region']}={key['spki']}",
             # A deployed signer re-reads the revoked list within a minute
             # (its cache); the demo's renewals follow the revocation at once.
             "HOSTKEYCTL_ENROL_CACHE_SECONDS": "0"}
post("/_bed/lambda/register", {"arn": arn, "bootstrap": bootstrap, "env": env, "variables": variables})
PY
CLUSTER_NODES=$(state 'len(s["nodes"])')
node() { state "s['nodes'][$1]['$2']"; }
instance() { state "next(i for i, ip in s['hyperpod']['nodes'].items() if ip == s['nodes'][$1]['address'])"; }
# enroll I: node I's root runs the node build's enroll (the cluster-node
# role: the signer's Invoke alone), with that node's IMDS.
enroll() {
  local imds
  imds=$(python3 -c "import json, sys, urllib.request as u; print(json.loads(u.urlopen(u.Request(sys.argv[1] + '/_bed/hyperpod/imds', data=json.dumps({'cluster': sys.argv[2], 'instance_id': sys.argv[3]}).encode(), method='POST')).read())['endpoint'])" \
    "$AWS_ENDPOINT_URL" "$(state 's["hyperpod"]["cluster"]')" "$(instance "$1")")
  mapfile -t NODE_ENV < <(state "'\\n'.join(f'{k}={v}' for k, v in s['nodes'][$1]['env'].items() if k.startswith('HOSTKEYCTL_'))")
  (
    export "${NODE_ENV[@]}" AWS_EC2_METADATA_SERVICE_ENDPOINT="$imds"
    run cluster-node "$HOSTKEYCTL" enroll --function "$SIGNER" --client-dir "$(node "$1" ssh_dir)" \
      --trust '*.ec2.internal,ip-127-*,127.*' --output table
  )
}
for i in $(seq 0 $((CLUSTER_NODES - 1))); do enroll "$i" | sed 's/^/   | /'; done
say "its certificate, as ssh-keygen -L reads it: the names AWS reports, nothing the node asked for"
ssh-keygen -L -f "$(node 0 ssh_dir)/ssh_host_ecdsa_key-cert.pub" | sed -n '/Signing CA/p;/Principals/,/Critical/p' | sed 's/^/   | /'
# A node's users: its ssh_config (as /etc/ssh/ssh_config), and names that
# resolve (the bed has no DNS: each name's address).
cluster_ssh() {
  local from=$1 to=$2 config="$WORK/cluster-ssh-$1"
  {
    echo "Include $(node "$from" ssh_dir)/ssh_config"
    for j in $(seq 0 $((CLUSTER_NODES - 1))); do
      local ip
      ip=$(node "$j" address)
      echo "Host ip-${ip//./-}.ec2.internal ip-${ip//./-}"
      echo "    Hostname $ip"
    done
  } >"$config"
  ssh -F "$config" -i "$(state 's["client_key"]')" -o BatchMode=yes -o UserKnownHostsFile=/dev/null \
    -o ConnectTimeout=5 "root@$to" true 2>&1
}
pairs() {
  local ok=0 bad=0 skip=${1:-}
  for i in $(seq 0 $((CLUSTER_NODES - 1))); do
    [ "$i" = "$skip" ] && continue
    for j in $(seq 0 $((CLUSTER_NODES - 1))); do
      [ "$i" = "$j" ] && continue
      local ip
      ip=$(node "$j" address)
      for name in "ip-${ip//./-}.ec2.internal" "ip-${ip//./-}" "$ip"; do
        if out=$(cluster_ssh "$i" "$name") && ! grep -q WARNING <<<"$out"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
      done
    done
  done
  say "$ok strict logins between nodes succeeded, $bad refused (StrictHostKeyChecking yes, no prompt)"
  [ "$bad" -eq 0 ]
}
pairs
say "an admin revokes the third node; the others renew (their timer's work) and learn its keys as @revoked:"
STORE=$STATE_FILE
run admin "$HOSTKEYCTL" enrolment revoke --table hostkeyctl-enrolment-hostkeyctl-my-cluster --instance "$(instance 2)" --output table \
  | sed 's/^/   | /'
for i in 0 1; do enroll "$i" >/dev/null; done
gone=$(node 2 address)
if cluster_ssh 0 "$gone" >/dev/null; then say "node 3 was still accepted"; exit 1; fi
say "node 1 now refuses node 3 (its certificate is still valid); nodes 1 and 2 still reach each other:"
cluster_ssh 0 "$(node 1 address)" >/dev/null || { say "node 1 -> node 2 was refused"; exit 1; }
say "node 1 -> node 2: ok"
STATE_FILE=$STORE

bold "Done: one host identity behind the load balancer, rotated without a warning; strict checking inside the cluster"
