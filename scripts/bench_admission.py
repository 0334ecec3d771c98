"""Admission at scale (issue 59, item 6): a HyperPod login group of real
sshd nodes across Availability Zones behind the bed's load balancer, a
rolling ``UpdateClusterSoftware`` of the whole group, ``admit`` run on a
schedule, and a stream of strict logins through the balancer.

What a patched node does on the bed (the emulator's ``node-steps``): its
sshd stops (the reboot onto a new root volume) for ``--reboot`` seconds,
comes back with new host keys (what a fresh image generates), then its
lifecycle step runs ``hostkeyctl install`` and it serves the set again.
AWS's reboot takes minutes and admission runs every minute or so: what
matters is the reboot's length against admission's cadence, which the
figures print as a ratio.

Figures: logins (ok, host-key mismatches, connections that failed), the
healthy targets sampled every second against the floor the patch itself
sets (the group less two batches: the batch rebooting and the one
re-admitted, ``initial`` until its health checks pass), the same per
zone, each pass's decisions, exit status, wall time and AWS calls.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from bench_common import BIN, Bed

CONTROL = (
    "import json, sys, urllib.request; urllib.request.urlopen(urllib.request.Request("
    "sys.argv[1], data=json.dumps({'name': sys.argv[2]}).encode(), method='POST'), timeout=60)"
)


class Patch:
    """The nodes' steps for the emulator's rolling patch."""

    def __init__(self, bed: Bed, reboot_s: float) -> None:
        self.bed = bed
        self.reboot_s = reboot_s

    def register(self) -> None:
        cluster = self.bed.state["hyperpod"]["cluster"]
        endpoint = self.bed.state["endpoint"]
        for node in self.bed.state["nodes"]:
            hyperpod = self.bed.state["hyperpod"]["nodes"]
            instance = next(i for i, address in hyperpod.items() if address == node["address"])
            q = shlex.quote
            keygen = " && ".join(
                f"ssh-keygen -q -t {kind} -N '' -f ssh_host_{kind}_key" for kind in ("ed25519", "ecdsa", "rsa")
            )
            root_volume = (
                f"python3 -c {q(CONTROL)} {q(endpoint + '/_bed/nodes/stop')} {q(node['name'])}"
                f" && sleep {self.reboot_s}"
                f" && cd {q(node['ssh_dir'])} && rm -f ssh_host_* && rm -rf {q(node['env']['HOSTKEYCTL_STATE_DIR'])}"
                f" && {keygen}"
                f" && python3 -c {q(CONTROL)} {q(endpoint + '/_bed/nodes/start')} {q(node['name'])}"
            )
            env = {**self.bed.env, **node["env"]}
            words = [f"{k}={v}" for k, v in env.items() if k.startswith(("AWS_", "HOSTKEYCTL_", "PATH"))]
            on_create = " ".join(q(w) for w in ["env", *words, str(BIN), "install", "--secret-id", "hk", "--quiet"])
            self.bed.control(
                "/_bed/hyperpod/node-steps",
                {"cluster": cluster, "instance_id": instance, "root_volume": root_volume, "on_create": on_create},
            )

    def start(self, batch_percent: int) -> None:
        sagemaker = self.bed.client("sagemaker")
        sagemaker.update_cluster_software(
            ClusterName=self.bed.state["hyperpod"]["cluster"],
            InstanceGroups=[{"InstanceGroupName": "login-group"}],
            DeploymentConfig={
                "RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "CAPACITY_PERCENTAGE", "Value": batch_percent}},
                "WaitIntervalInSeconds": 0,
            },
        )

    def done(self, nodes: int) -> bool:
        patches = self.bed.control("/_bed/hyperpod/patches")
        return isinstance(patches, list) and sum(1 for p in patches if "ended" in p) == nodes


class Logins:
    """Strict logins through the load balancer, ``rate`` a second."""

    def __init__(self, bed: Bed, known_hosts: Path, rate: float) -> None:
        self.bed = bed
        self.known_hosts = known_hosts
        self.rate = rate
        self.outcomes: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def one(self) -> None:
        argv = [
            "ssh",
            "-F",
            "none",
            "-i",
            self.bed.state["client_key"],
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            f"root@{self.bed.state['lb']['address']}",
            "true",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        err = done.stderr
        if done.returncode == 0:
            kind = "ok"
        elif "IDENTIFICATION HAS CHANGED" in err or "Host key verification failed" in err or "WARNING" in err:
            kind = "mismatch"
        else:
            kind = "failed"
        with self.lock:
            self.outcomes[kind] += 1
            self.examples.setdefault(kind, err.strip()[-300:])

    def run(self) -> None:
        threads: list[threading.Thread] = []
        while not self.stop.is_set():
            t = threading.Thread(target=self.one)
            t.start()
            threads.append(t)
            self.stop.wait(1 / self.rate)
        for t in threads:
            t.join()


def admit(bed: Bed, group: str, log: list[dict[str, object]], stop: threading.Event, every_s: float) -> None:
    """``admit`` every ``every_s`` seconds (as its schedule runs it), each
    pass's report, wall time and AWS calls kept in ``log``."""
    cluster = bed.state["hyperpod"]["cluster"]
    argv = [str(BIN), "admit", "--secret-id", "hk", "--target-group", f"tg:{group}"]
    argv += ["--target", f"hyperpod:{cluster}/login-group", "--output", "json"]
    while not stop.is_set():
        before = bed.control("/_bed/counts")
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, env=bed.env, timeout=600)
        wall = time.perf_counter() - start
        after = bed.control("/_bed/counts")
        assert isinstance(before, dict) and isinstance(after, dict)
        # Admission's calls: the patched nodes' installs read the secret
        # meanwhile, and the patch is asked for once; admission does neither.
        others = ("secretsmanager:GetSecretValue", "sagemaker:UpdateClusterSoftware")
        calls = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0) and k not in others}
        report = json.loads(done.stdout) if done.stdout.startswith(b"{") else {}
        decisions = Counter(str(n.get("decision")) for n in report.get("nodes", []))
        if not report:
            raise SystemExit(f"bench: admit exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        log.append({"exit": done.returncode, "wall": wall, "calls": calls, "decisions": decisions, "at": start})
        stop.wait(max(0.0, every_s - wall))


def sample(
    bed: Bed, group: str, zones: dict[str, str], samples: list[tuple[int, Counter[str]]], stop: threading.Event
) -> None:
    """Healthy targets, in all and by zone, every second."""
    while not stop.is_set():
        states = bed.control("/_bed/target-states", {"target_group_arn": group})
        assert isinstance(states, dict)
        healthy = [k.rsplit(":", 1)[0] for k, s in states.items() if s == "healthy"]
        samples.append((len(healthy), Counter(zones.get(a, "unknown") for a in healthy)))
        stop.wait(1.0)


def node_zones(bed: Bed) -> dict[str, str]:
    """Each node of the bed's Availability Zone, by address (EC2's
    placement; the bed's other instances left out)."""
    ec2 = bed.client("ec2")
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "tag:Role", "Values": ["login"]}])
    ours = {n["address"] for n in bed.state["nodes"]}
    return {
        i["PrivateIpAddress"]: i["Placement"]["AvailabilityZone"]
        for page in pages
        for r in page["Reservations"]
        for i in r["Instances"]
        if i.get("PrivateIpAddress") in ours
    }


def bench_admission(nodes: int, zones: int, batch_percent: int, reboot_s: float, every_s: float, rate: float) -> None:
    batch = max(1, nodes * batch_percent // 100)
    print(
        f"== admission: {nodes} sshd nodes in {zones} zones, a rolling patch {batch} at a time"
        f" (reboot {reboot_s:.0f} s), admit every {every_s:.0f} s, {rate:.0f} strict logins a second"
    )
    print(f"   baseline: the floor the patch itself sets ({nodes} less two batches of {batch})")
    bed = Bed(
        nodes=nodes,
        extra=["--zones", str(zones), "--lb-check-interval", "5", "--lb-deregistration-delay", "5"],
    )
    try:
        for args in (
            ["init", "--secret-id", "hk", "--output", "json"],
            ["ssm-document", "deploy", "--output", "json"],
            ["push", "--secret-id", "hk", "--target", "tag:Role=login", "--target", "tag:Cluster=hp"]
            + ["--max-concurrency", "100%", "--output", "json"],
        ):
            done = bed.hk(*args)
            if done.returncode != 0:
                raise SystemExit(f"bench: {args[0]} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        group = bed.state["elb"]["ip"]["target_group_arn"]
        zone_of = node_zones(bed)
        known_hosts = bed.dir / "known_hosts"
        lines = bed.hk("known-hosts", "--secret-id", "hk", "--host", bed.state["lb"]["address"])
        known_hosts.write_bytes(lines.stdout)
        patch = Patch(bed, reboot_s)
        patch.register()
        passes: list[dict[str, object]] = []
        samples: list[tuple[int, Counter[str]]] = []
        stop = threading.Event()
        logins = Logins(bed, known_hosts, rate)
        threads = [
            threading.Thread(target=admit, args=(bed, group, passes, stop, every_s)),
            threading.Thread(target=sample, args=(bed, group, zone_of, samples, stop)),
            threading.Thread(target=logins.run),
        ]
        for t in threads:
            t.start()
        try:
            # A quiet pass first: the calls of a pass with nothing to do.
            while len(passes) < 2:
                time.sleep(0.2)
            started = time.perf_counter()
            patch.start(batch_percent)
            while not patch.done(nodes):
                time.sleep(1)
            patched = time.perf_counter() - started
            # Until every node is a healthy target again, or two minutes.
            deadline = time.perf_counter() + 120
            while time.perf_counter() < deadline and (not samples or samples[-1][0] < nodes):
                time.sleep(1)
            settled = time.perf_counter() - started
        finally:
            stop.set()
            logins.stop.set()
            for t in threads:
                t.join()
        report(nodes, batch, zones, zone_of, passes, samples, logins, patched, settled, reboot_s, every_s, bed)
    finally:
        bed.close()


def report(
    nodes: int,
    batch: int,
    zones: int,
    zone_of: dict[str, str],
    passes: list[dict[str, object]],
    samples: list[tuple[int, Counter[str]]],
    logins: Logins,
    patched: float,
    settled: float,
    reboot_s: float,
    every_s: float,
    bed: Bed,
) -> None:
    patches = bed.control("/_bed/hyperpod/patches")
    assert isinstance(patches, list)
    failed_steps = [p for p in patches if p.get("status") != "Running"]
    steps = f"{len(patches)} nodes in {patched:.0f} s, {len(failed_steps)} failed steps"
    print(f"   patch: {steps}; all healthy again after {settled:.0f} s")
    print(f"   reboot / admission cadence: {reboot_s / every_s:.1f}x")
    out = logins.outcomes
    total = sum(out.values())
    print(
        f"   logins: {total}: {out['ok']} ok, {out['mismatch']} host-key mismatches, {out['failed']} failed connections"
    )
    for kind in ("mismatch", "failed"):
        if out[kind]:
            print(f"     e.g. {kind}: {logins.examples[kind]!r}")
    floor = nodes - 2 * batch
    least = min(s[0] for s in samples)
    print(
        f"   healthy targets: least {least} of {nodes} ({least / floor:.2f}x the patch's floor of {floor});"
        f" {sum(1 for s in samples if s[0] < floor)} of {len(samples)} samples below it"
    )
    # A batch is consecutive nodes of a round-robin placement: at most
    # ceil(batch / zones) of it in one zone.
    in_zone = Counter(zone_of.values())
    for z in sorted(in_zone):
        z_floor = in_zone[z] - 2 * math.ceil(batch / zones)
        z_least = min(s[1].get(z, 0) for s in samples)
        print(f"     {z}: least {z_least} of {in_zone[z]} ({z_least / z_floor:.2f}x its floor of {z_floor})")
    walls = sorted(float(p["wall"]) for p in passes)  # type: ignore[arg-type]
    exits = Counter(int(p["exit"]) for p in passes)  # type: ignore[call-overload]
    decisions: Counter[str] = Counter()
    for p in passes:
        decisions.update(p["decisions"])  # type: ignore[arg-type]
    print(
        f"   admit: {len(passes)} passes, wall median {walls[len(walls) // 2]:.1f} s, longest {walls[-1]:.1f} s;"
        f" exits {dict(sorted(exits.items()))}"
    )
    print(f"     decisions over all passes: {dict(sorted(decisions.items()))}")
    quiet = passes[0]["calls"]
    print(f"     calls of a pass with nothing to do: {quiet}")
    busiest = max(passes, key=lambda p: sum(p["calls"].values()))  # type: ignore[union-attr, attr-defined]
    print(f"     calls of the busiest pass: {busiest['calls']}")
