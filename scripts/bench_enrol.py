"""bench.py enrol: what enrolment (docs/cluster-trust.md) costs.

1. `hostkeyctl enroll` (the node build, as nodes run it) on a HyperPod
   node of the bed: a first enrolment and renewals, each from process start
   to the reloaded sshd, against the 2 s it may add to provisioning, and
   against `hostkeyctl install` converging another node in the same run.
2. N enrolments (default 1,000) of HyperPod nodes through the signer
   function, with the emulator's KMS throttling `Sign` at a quota
   (the `quotas` fault, per one-second interval as KMS counts): how many
   succeed, the `Sign` rate reached against the quota, and what that means
   at KMS's default quotas (RSA 500/s, ECC 300/s per account and Region:
   KMS Developer Guide, "Request quotas").

The bed's Lambda runs an execution environment per concurrent invocation
up to the function's reserved concurrency (the template's 10), as Lambda
does; the emulated quota is set below what they can sign. A renewal within
10 minutes of the last signing is answered from the binding, without a
Sign: the renewals of part 1 measure that path.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_common import BIN, ROOT, Bed

NODE_BIN = ROOT / "dist" / "hostkeyctl-x86_64"
SECRET = "hostkeyctl-ca/hp"
TABLE = "hostkeyctl-enrolment-bench"
TRUST = "*.ec2.internal,ip-127-*,127.*"
# KMS's default request quotas (KMS Developer Guide, "Request quotas").
KMS_QUOTAS = {"ECC (ed25519, P-256, P-384)": 300, "RSA": 500}


def deploy(bed: Bed) -> str:
    """The KMS CA, the bindings table and the signer; the signer's ARN."""
    made = bed.hk("ca", "init", "--ca-secret-id", SECRET, "--kms", "--algorithm", "ecdsa", "--output", "json")
    assert made.returncode == 0, made.stderr
    import boto3

    region = bed.env["AWS_REGION"]
    boto3.client(
        "dynamodb",
        endpoint_url=bed.state["endpoint"],
        region_name=region,
        aws_access_key_id=bed.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=bed.env["AWS_SECRET_ACCESS_KEY"],
    ).create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "instance_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "instance_id", "KeyType": "HASH"}],
    )
    key = bed.control("/_bed/iid-key", {})
    assert isinstance(key, dict)
    arn = f"arn:aws:lambda:{region}:123456789012:function:hostkeyctl-enrolment-bench"
    home = bed.dir / "enrol-signer"
    home.mkdir()
    # The shipped build is the function when it runs as `bootstrap`.
    bootstrap = home / "bootstrap"
    shutil.copy(BIN, bootstrap)
    keep = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "PATH")
    env = {k: v for k, v in bed.env.items() if k in keep}
    env["HOME"] = str(home)
    variables = {
        "HOSTKEYCTL_FUNCTION": "enrolment",
        "HOSTKEYCTL_ENROL_CLUSTER": bed.state["hyperpod"]["cluster"],
        "HOSTKEYCTL_ENROL_CA_SECRET_ID": SECRET,
        "HOSTKEYCTL_ENROL_TABLE": TABLE,
        "HOSTKEYCTL_ENROL_IID_KEYS_REPLACE": f"{key['region']}={key['spki']}",
    }
    registered = bed.control(
        "/_bed/lambda/register",
        {
            "arn": arn,
            "bootstrap": str(bootstrap),
            "variables": variables,
            "env": env,
            "step_timeout": 60,
            "reserved_concurrency": 10,
        },
    )
    assert isinstance(registered, dict)
    bed.function_log = Path(registered["log"])
    return arn


def enroll(bed: Bed, arn: str, instance: str, ssh_dir: Path, extra_env: dict[str, str], args: list[str]) -> tuple:
    """One `enroll` of `instance` with keys in `ssh_dir`: (seconds, exit code, stderr)."""
    imds = bed.control("/_bed/hyperpod/imds", {"cluster": bed.state["hyperpod"]["cluster"], "instance_id": instance})
    assert isinstance(imds, dict)
    env = {k: v for k, v in bed.env.items() if k != "AWS_EC2_METADATA_DISABLED"}
    env.update(extra_env)
    env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds["endpoint"]
    argv = [str(NODE_BIN), "enroll", "--function", arn, "--ssh-dir", str(ssh_dir), "--trust", TRUST, *args]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True)
    return time.perf_counter() - start, done.returncode, done.stderr.decode(errors="replace")


def provisioning(bed: Bed, arn: str, renewals: int) -> None:
    node = bed.state["nodes"][0]
    instance = next(i for i, ip in bed.state["hyperpod"]["nodes"].items() if ip == node["address"])
    client = bed.dir / "enrol-client"
    client.mkdir()
    times = []
    for _ in range(1 + renewals):
        t, code, err = enroll(bed, arn, instance, Path(node["ssh_dir"]), node["env"], ["--client-dir", str(client)])
        assert code == 0, err + bed.function_log.read_text(errors="replace")[-2000:]
        times.append(t)
    # The baseline on the other node: install refuses a node whose sshd
    # serves certificates it did not install.
    made = bed.hk("init", "--secret-id", "hostkeys/bench", "--output", "json")
    assert made.returncode == 0, made.stderr
    env = {**bed.env, **bed.state["nodes"][1]["env"]}
    start = time.perf_counter()
    done = subprocess.run(
        [str(NODE_BIN), "install", "--secret-id", "hostkeys/bench", "--quiet"], env=env, capture_output=True
    )
    install = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    renewal = statistics.median(times[1:]) if renewals else times[0]
    print(f"   first enrolment {times[0] * 1000:7.1f} ms   renewal (median of {renewals}) {renewal * 1000:7.1f} ms")
    print(f"   goal: < 2000 ms added to provisioning: first enrolment = {times[0] / 2:.3f}x the goal")
    print(f"   baseline: install converging another node, same run: {install * 1000:.1f} ms;")
    print(f"   first enrolment = {times[0] / install:.2f}x install")


def worker_dir(template: Path, work: Path, i: int) -> Path:
    """A worker's /etc/ssh stand-in: the template's keys, an sshd_config
    that includes sshd_config.d."""
    d = work / f"w{i}"
    shutil.copytree(template, d)
    (d / "sshd_config").write_text(f"Include {d}/sshd_config.d/*.conf\n")
    return d


# A stand-in sshd for the many nodes: `-t` passes, and `-T -f CONFIG` lists
# the certificates of CONFIG's directory's drop-ins as `sshd -T` would, so
# enroll's check that sshd serves them holds (a real sshd per node would
# cost more than the enrolment it measures).
FAKE_SSHD = """#!/bin/sh
config=""
dump=no
while [ $# -gt 0 ]; do
  case "$1" in -T) dump=yes ;; -f) config=$2; shift ;; esac
  shift
done
[ "$dump" = yes ] || exit 0
sed -n 's/^HostCertificate /hostcertificate /p' "$(dirname "$config")"/sshd_config.d/*.conf 2>/dev/null
exit 0
"""


def many(bed: Bed, arn: str, count: int, quota: int, parallel: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="hkbench-enrol-"))
    try:
        sshd = work / "sshd"
        sshd.write_text(FAKE_SSHD)
        sshd.chmod(0o755)
        template = work / "template"
        (template / "sshd_config.d").mkdir(parents=True)
        for kind in ("ed25519", "ecdsa", "rsa"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(template / f"ssh_host_{kind}_key")], check=True
            )
        workers = sorted(
            i
            for i, ip in bed.state["hyperpod"]["nodes"].items()
            if bed.state["hyperpod"]["groups"][i] == "worker-group"
        )[:count]
        dirs = [worker_dir(template, work, i) for i in range(len(workers))]
        bed.control("/_bed/faults", {"quotas": {"kms:Sign": quota}})
        before = bed.control("/_bed/counts")
        assert isinstance(before, dict)

        def one(k: int) -> tuple:
            return enroll(
                bed,
                arn,
                workers[k],
                dirs[k],
                {},
                [
                    "--sshd",
                    str(sshd),
                    "--sshd-config",
                    str(dirs[k] / "sshd_config"),
                    "--reload-command",
                    "true",
                    "--client-dir",
                    str(dirs[k]),
                ],
            )

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
            results = list(pool.map(one, range(len(workers))))
        wall = time.perf_counter() - start
        after = bed.control("/_bed/counts")
        assert isinstance(after, dict)
        throttled = after.get("kms:Sign:throttled", 0) - before.get("kms:Sign:throttled", 0)
        # The emulator counts every call, the throttled ones too.
        signs = after.get("kms:Sign", 0) - before.get("kms:Sign", 0) - throttled
        ok = sum(1 for _, code, _ in results if code == 0)
        failed = [err.strip().splitlines()[-1] for _, code, err in results if code != 0]
        rate = signs / wall
        stats = bed.control("/_bed/lambda/stats", {"arn": arn})
        assert isinstance(stats, dict)
        print(
            f"   {ok} of {len(workers)} enrolled in {wall:.1f} s ({parallel} nodes at a time,"
            f" {stats['environments']} signer environments, {stats['throttles']} invocations throttled)"
        )
        print(
            f"   kms:Sign {signs} answered ({signs / max(ok, 1):.1f} per enrolment), {throttled} throttled and retried"
        )
        print(f"   Sign rate {rate:.1f}/s = {rate / quota:.2f}x the emulated quota of {quota}/s")
        for reason in sorted(set(failed))[:5]:
            print(f"   failed: {reason}")
        per = signs / max(ok, 1)
        for family, q in KMS_QUOTAS.items():
            print(
                f"   at KMS's {family} quota {q}/s: {q / per:.0f} enrolments/s;"
                f" {len(workers)} take {len(workers) * per / q:.1f} s"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_enrol(count: int, quota: int, parallel: int, renewals: int) -> None:
    print(f"== enrolment: enroll on one node, then {count} nodes through the signer at an emulated KMS Sign quota")
    if not NODE_BIN.exists():
        raise SystemExit(f"{NODE_BIN} is missing: run `make dist`")
    bed = Bed(nodes=2, extra=["--hyperpod-workers", str(count)])
    try:
        arn = deploy(bed)
        provisioning(bed, arn, renewals)
        many(bed, arn, count, quota, parallel)
    finally:
        bed.close()
