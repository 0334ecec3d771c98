#!/usr/bin/env python3
"""hostkeyctl benchmarks: figures and ratios against named baselines, all
measured in the same run on this machine. Not tests: nothing here fails on
a slow machine; it prints what it measured.

    python3 scripts/bench.py keygen  [--runs 10]
    python3 scripts/bench.py install [--runs 5]
    python3 scripts/bench.py push    [--instances 1000]
    python3 scripts/bench.py rotate  [--instances 1000]
    python3 scripts/bench.py audit   [--nodes 3 --repeats 50 --samples 150]
    python3 scripts/bench.py enrol   [--instances 1000 --quota 15 --parallel 8] (bench_enrol.py)
    python3 scripts/bench.py admission [--nodes 200 --zones 3 --batch 10 --reboot 30 --every 5 --rate 5]
                                       (bench_admission.py)
    python3 scripts/bench.py all

Uses the shipped admin build, as `make dist` stages it (`make bench` builds it).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_admission import bench_admission
from bench_common import BIN, CORES, Bed, host_busy, median_ms, proc_cpu, run_cpu, run_rss, timed
from bench_enrol import bench_enrol


def bench_keygen(runs: int) -> None:
    print(f"== keygen: one key per run, {runs} runs each, median wall time (process start included)")
    print("   baseline: ssh-keygen -t ALG (RSA -b 3072), same machine, same run")
    work = Path(tempfile.mkdtemp(prefix="hkbench-"))
    try:
        print(f"   {'algorithm':<10} {'hostkeyctl':>12} {'ssh-keygen':>12} {'ratio':>8}")
        for alg in ["ed25519", "ecdsa", "rsa"]:
            ours, theirs = [], []
            for _ in range(runs):
                t, p = timed(
                    [
                        str(BIN),
                        "keygen",
                        "--algorithms",
                        alg,
                        "--out-dir",
                        str(work / "k"),
                        "--force",
                        "--output",
                        "json",
                    ]
                )
                assert p.returncode == 0, p.stderr
                ours.append(t)
                key = work / "s" / "key"
                shutil.rmtree(work / "s", ignore_errors=True)
                (work / "s").mkdir()
                argv = ["ssh-keygen", "-q", "-t", alg, "-N", "", "-f", str(key)]
                if alg == "rsa":
                    argv[4:4] = ["-b", "3072"]
                t, p = timed(argv)
                assert p.returncode == 0, p.stderr
                theirs.append(t)
            a, b = median_ms(ours), median_ms(theirs)
            print(f"   {alg:<10} {a:>10.1f}ms {b:>10.1f}ms {a / b:>7.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_install(runs: int) -> None:
    print(f"== install on one real sshd node (started with -r), {runs} runs each, median")
    print("   goal: converging < 300 ms and < 40 MB peak RSS")
    bed = Bed(nodes=1, reexec=False)
    try:
        for name in ("a", "b"):
            p = bed.hk("init", "--secret-id", name, "--output", "json")
            assert p.returncode == 0, p.stderr
        node = bed.state["nodes"][0]
        env = dict(bed.env)
        env.update(node["env"])
        converge, noop = [], []
        for _ in range(runs):
            for name in ("a", "b"):
                t, rss, code, out, err = run_rss([str(BIN), "install", "--secret-id", name, "--quiet"], env)
                assert code == 0 and b'"changed"' in out, (out, err)
                converge.append((t, rss))
            t, rss, code, out, err = run_rss([str(BIN), "install", "--secret-id", "b", "--quiet"], env)
            assert code == 0 and b'"unchanged"' in out, (out, err)
            noop.append((t, rss))
        for label, xs in (
            ("converge (write + sshd -t + reload + verify)", converge),
            ("no-op (fetch + compare + verify)", noop),
        ):
            ms = median_ms([x[0] for x in xs])
            mb = max(x[1] for x in xs) / 1024
            print(f"   {label:<48} {ms:>7.1f} ms   peak RSS {mb:>5.1f} MB")
    finally:
        bed.close()


def bench_push(instances: int) -> None:
    batches = math.ceil(instances / 50)
    print(f"== push to {instances} emulated instances ({batches} SendCommand batches)")
    print("   baseline: the same commands, then a naive loop of GetCommandInvocation per instance")
    bed = Bed(nodes=0, virtual=instances)
    try:
        p = bed.hk("init", "--secret-id", "hk", "--algorithms", "ed25519", "--output", "json")
        assert p.returncode == 0, p.stderr
        bed.control("/_bed/counts/reset", {})
        start = time.perf_counter()
        p = bed.hk(
            "push",
            "--secret-id",
            "hk",
            "--target",
            "tag:Cluster=virtual",
            "--max-concurrency",
            "100%",
            "--max-errors",
            "100%",
            "--output",
            "json",
        )
        wall = time.perf_counter() - start
        if not p.stdout:
            raise SystemExit(
                f"bench: push exited {p.returncode} after {wall:.1f} s and printed nothing:"
                f" {p.stderr.decode(errors='replace')[-3000:]}"
            )
        report = json.loads(p.stdout)
        counts = bed.control("/_bed/counts")
        rounds = report["polling"]["rounds"]
        calls = report["polling"]["list_calls"]
        print(
            f"   hostkeyctl push: exit {p.returncode}, {report['succeeded']}/{report['targets']} ok, {wall:.1f} s wall"
        )
        print("     API calls: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
        most = report["polling"]["max_calls_per_round"]
        print(
            f"     polling: {calls} ListCommandInvocations in {rounds} rounds, at most {most} in one round"
            f" (goal <= ceil(N/50)+1 = {batches + 1})"
        )

        ssm = bed.client("ssm")  # the baseline: the Python SDK against the same bed
        ids = bed.state["virtual"]
        bed.control("/_bed/counts/reset", {})
        start = time.perf_counter()
        sent = []
        for i in range(0, len(ids), 50):
            c = ssm.send_command(
                InstanceIds=ids[i : i + 50],
                DocumentName="AWS-RunShellScript",
                Parameters={"commands": [report["command_line"]]},
                MaxConcurrency="100%",
                MaxErrors="100%",
            )["Command"]["CommandId"]
            sent += [(c, iid) for iid in ids[i : i + 50]]
        pending, naive_rounds, naive_calls, naive_max = set(sent), 0, 0, 0
        while pending:
            naive_rounds += 1
            naive_max = max(naive_max, len(pending))
            for c, iid in list(pending):
                naive_calls += 1
                try:
                    st = ssm.get_command_invocation(CommandId=c, InstanceId=iid)["Status"]
                except ssm.exceptions.InvocationDoesNotExist:
                    continue
                if st in ("Success", "Failed", "TimedOut", "Cancelled"):
                    pending.discard((c, iid))
            if pending:
                time.sleep(0.5)
        naive_wall = time.perf_counter() - start
        print(
            f"   naive per-instance loop: {naive_calls} GetCommandInvocation in {naive_rounds} rounds,"
            f" up to {naive_max} per round, {naive_wall:.1f} s wall"
        )
        print(f"   ratio: {naive_calls / max(calls, 1):.0f}x fewer polling calls with hostkeyctl")
    finally:
        bed.close()


def bench_rotate(instances: int) -> None:
    """A whole rotation (create, set, test, finish, converge: two pushes and
    two audits of every instance, 3 key types each) of N emulated instances
    that share one real sshd node (bed.py --virtual-shared): the SSM side at
    full scale, and every audit a real handshake."""
    goal = 30.0 if instances <= 1000 else None
    print(f"== rotation of {instances} emulated instances sharing one real sshd (bed.py --virtual-shared)")
    print("   baseline: one push of the same set to the same instances, in the same run")
    bed = Bed(nodes=1, virtual=instances, shared=True)
    target = ["--target", "tag:Cluster=virtual", "--max-concurrency", "100%", "--output", "json"]
    try:
        p = bed.hk("init", "--secret-id", "hk", "--output", "json")
        assert p.returncode == 0, p.stderr
        push, p = timed([str(BIN), "push", "--secret-id", "hk", *target], bed.env)
        assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
        print(f"   push (baseline): {push:.1f} s wall")

        sshd, supervisor = bed.state["nodes"][0]["pid"], bed.proc.pid

        def cpu() -> tuple[float, float, float]:
            # sshd's connection children, the bed (emulator, SSM agent and
            # the stand-ins it ran), hostkeyctl (this process's children).
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and Path(f"/proc/{sshd}/task/{sshd}/children").read_text().strip():
                time.sleep(0.01)
            own = resource.getrusage(resource.RUSAGE_CHILDREN)
            return (
                proc_cpu(sshd, reaped=True),
                proc_cpu(supervisor, reaped=False) + proc_cpu(supervisor, reaped=True),
                own.ru_utime + own.ru_stime,
            )

        def rotate(*extra: str) -> tuple[float, dict, list[float]]:
            before = cpu()
            # --min-overlap 0: the bench times the protocol, not the overlap.
            wall, p = timed([str(BIN), "rotate", "--secret-id", "hk", "--min-overlap", "0", *target, *extra], bed.env)
            if not p.stdout:
                raise SystemExit(
                    f"bench: rotate {' '.join(extra)} exited {p.returncode} after {wall:.1f} s:"
                    f" {p.stderr.decode(errors='replace')[-3000:]}"
                )
            return wall, json.loads(p.stdout), [b - a for a, b in zip(before, cpu(), strict=True)]

        whole, report, (server, emulator, client) = rotate()
        most = report["push"]["polling"]["max_calls_per_round"]
        floor = (server + emulator + client) / CORES
        verdict = f"goal < {goal:.0f} s: {'met' if whole < goal else 'missed'}" if goal else "no goal at this scale"
        print(
            f"   rotation: {report['result']}, {whole:.1f} s wall = {whole / push:.1f}x one push ({verdict});"
            f" at most {most} ListCommandInvocations in one round (goal <= {math.ceil(instances / 50) + 1})"
        )
        print(
            f"     CPU: the shared sshd {server:.1f} s ({instances} nodes' handshakes, each node's own in a fleet),"
            f" emulator + agent {emulator:.1f} s, hostkeyctl {client:.1f} s; floor {floor:.1f} s"
            f" ({CORES} cores); wall = {whole / floor:.2f}x the floor"
        )
        print(
            f"     without the shared sshd's CPU (a fleet's nodes sign their own handshakes), the floor is"
            f" {(emulator + client) / CORES:.1f} s"
        )
        if instances > 1000:
            return  # a second rotation step by step takes as long again
        steps = [
            ("create", ["--stop-after", "create"]),
            ("set", ["--resume", "--stop-after", "set"]),
            ("test", ["--resume", "--stop-after", "test"]),
            ("resume to the end (set and test again, idempotent; finish; converge)", ["--resume"]),
        ]
        parts = []
        for label, extra in steps:
            wall, report, _ = rotate(*extra)
            parts.append(f"{label} {wall:.1f} s")
        print(f"   a second rotation step by step (--stop-after): {', '.join(parts)}; {report['result']}")
    finally:
        bed.close()


def bench_audit(nodes: int, repeats: int, samples: int) -> None:
    """The audit against its CPU floor and against ssh-keyscan, direct and
    through the load balancer. The floor is the CPU the handshakes cost
    (the sshd listeners' reaped children, HAProxy, hostkeyctl) divided by
    the cores: the wall time if nothing ever waited."""
    types = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]
    probes = nodes * len(types) * repeats
    print(f"== audit: {nodes} stock sshd nodes x {len(types)} key types; {CORES} cores")
    print("   baselines: the CPU floor ((sshd + HAProxy + hostkeyctl CPU) / cores) and ssh-keyscan, same run")
    bed = Bed(nodes=nodes)
    try:
        addresses = [n["address"] for n in bed.state["nodes"]]
        sshd_pids = [n["pid"] for n in bed.state["nodes"]]
        lb = bed.state["lb"]

        def servers() -> float:
            # Connection children not yet reaped have not been counted:
            # wait (at most 5 s) until every listener has none left.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(
                Path(f"/proc/{p}/task/{p}/children").read_text().strip() for p in sshd_pids
            ):
                time.sleep(0.01)
            return sum(proc_cpu(p, reaped=True) for p in sshd_pids) + proc_cpu(lb["pid"], reaped=False)

        def audit(label: str, extra: list[str], wanted: int, count) -> float:
            argv = [
                str(BIN),
                "audit",
                "--output",
                "json",
                "--key-types",
                ",".join(types),
                "--expect",
                "SHA256:" + "A" * 43,
                *extra,
            ]
            before = servers()
            busy_before = host_busy()
            wall, client, rss, out = run_cpu(argv)
            busy = host_busy() - busy_before
            server = servers() - before
            floor = (server + client) / CORES
            got = count(json.loads(out))
            print(
                f"   hostkeyctl audit, {label}: {got}/{wanted} results in {wall:.2f} s wall;"
                f" peak RSS {rss / 1024:.1f} MB"
            )
            print(
                f"     CPU: sshd + HAProxy {server:.2f} s ({1000 * server / max(wanted, 1):.2f} ms per handshake),"
                f" hostkeyctl {client:.2f} s ({1000 * client / max(wanted, 1):.2f} ms);"
                f" floor {floor:.2f} s; wall = {wall / floor:.2f}x the floor (goal <= 1.5x)"
            )
            # An independent check of the floor: every core's busy time
            # (/proc/stat, the whole host, the bed's emulator included).
            print(
                f"     independent check: the host's CPUs were busy {busy:.2f} s;"
                f" wall = {wall / (busy / CORES):.2f}x that floor"
            )
            return wall

        direct = []
        for a in addresses:
            direct += ["--endpoint", f"{a}:22"] * repeats
        ours = audit(
            f"direct ({nodes} nodes x {repeats})",
            direct,
            probes,
            lambda r: sum(1 for n in r["nodes"] for f in n["findings"] if f.get("served")),
        )
        # A default audit (every key type the scanner knows, five), once per
        # node: what each node's sshd saw, as the report counts it.
        before = servers()
        argv = [str(BIN), "audit", "--output", "json", "--expect", "SHA256:" + "A" * 43]
        for a in addresses:
            argv += ["--endpoint", f"{a}:22"]
        _, _, _, out = run_cpu(argv)
        server = servers() - before
        opened = [n["connections"] for n in json.loads(out)["nodes"]]
        per_node = sum(opened) / len(opened)
        print(
            f"   default audit, once per node: {per_node:.1f} connections per node"
            f" ({per_node / 5:.2f}x the 5 types the scanner knows, one connection each);"
            f" sshd CPU {1000 * server / nodes:.1f} ms per node audited"
        )
        audit(
            f"through HAProxy ({samples} samples per type)",
            ["--lb", f"{lb['address']}:{lb['port']}", "--samples", str(samples), "--backends", str(nodes)],
            samples * len(types),
            lambda r: sum(s["count"] for t in r["lb"]["types"] for s in t["seen"]),
        )

        keyscan_baseline(bed, addresses, repeats, probes, ours, servers)
    finally:
        bed.close()


def keyscan_baseline(
    bed: Bed, addresses: list[str], repeats: int, probes: int, ours: float, servers: Callable[[], float]
) -> None:
    """bench_audit's baseline: ssh-keyscan on the same nodes, as many
    probes, against hostkeyctl's direct audit (``ours``: its wall time);
    ``servers``: the sshd listeners' and HAProxy's CPU so far."""
    hosts = Path(bed.dir) / "hosts"
    hosts.write_text("".join(f"{a}\n" for a in addresses for _ in range(repeats)))
    before = servers()
    start = time.perf_counter()
    k = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "rsa,ecdsa,ed25519", "-f", str(hosts)], capture_output=True)
    theirs_wall = time.perf_counter() - start
    theirs = sum(1 for line in k.stdout.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"   ssh-keyscan, direct: {theirs}/{probes} results in {theirs_wall:.2f} s wall"
        f" (sshd CPU {servers() - before:.2f} s)"
    )
    print(
        f"   ratio: ssh-keyscan takes {theirs_wall / ours:.1f}x hostkeyctl's wall time (goal >= 10x);"
        f" results {100 * theirs / probes:.0f}% against hostkeyctl's"
    )


def bench_penalties(nodes: int, samples: int) -> None:
    """The audit where penalties apply: Debian 13's OpenSSH 10.0 nodes
    (PerSourcePenalties on) behind HAProxy, which connects from its own
    address as an NLB does. The samples are paced by the budget
    (scan::pacing; docs/audit.md): wall time next to the pacing the budget
    predicts, max(0, C - 10 K) / K for C connections through K backends,
    and what sshd logged (a penalty that took effect, a dropped
    connection)."""
    types = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]
    print(f"== audit where penalties apply: {nodes} OpenSSH 10.0 nodes (Debian 13, stock PerSourcePenalties)")
    bed = Bed(nodes=nodes, extra=["--release", "trixie", "--lb-check-interval", "10"])
    try:
        lb = bed.state["lb"]
        for label, argv, connections in [
            (
                f"direct ({nodes} nodes, once each)",
                [arg for n in bed.state["nodes"] for arg in ("--endpoint", f"{n['address']}:22")],
                nodes * len(types),
            ),
            (
                f"through HAProxy ({samples} samples per type, {nodes} backends)",
                ["--lb", f"{lb['address']}:{lb['port']}", "--samples", str(samples), "--backends", str(nodes)],
                samples * len(types),
            ),
        ]:
            k = 1 if label.startswith("direct") else nodes
            # Each node alone owes 3 (under the burst); the first sample
            # goes before the budget is known.
            predicted = 0.0 if k == 1 else max(0.0, connections - 1 - 10 * k) / k
            start = time.perf_counter()
            run = bed.hk("audit", "--output", "json", "--expect", "SHA256:" + "A" * 43, *argv)
            wall = time.perf_counter() - start
            said = re.search(r"about (\d+) s", run.stderr.decode())
            print(
                f"   {label}: {connections} connections in {wall:.2f} s wall;"
                f" the budget predicts {predicted:.1f} s of pacing"
                + (f" (the audit said about {said.group(1)} s)" if said else "")
                + (f"; wall = {wall / predicted:.2f}x the pacing" if predicted else "")
            )
        tripped = sum(
            1
            for n in bed.state["nodes"]
            for line in Path(n["log"]).read_text(errors="replace").splitlines()
            if "activating" in line or "drop connection" in line
        )
        print(f"   sshd: {tripped} penalties activated or connections dropped (goal: 0)")
    finally:
        bed.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "what", choices=["keygen", "install", "push", "rotate", "audit", "penalties", "enrol", "admission", "all"]
    )
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--instances",
        type=int,
        action="append",
        help="emulated instances for push and rotate (repeatable; default 1000)",
    )
    parser.add_argument(
        "--nodes", type=int, default=None, help="sshd nodes for the audit (default 3) and admission (default 200)"
    )
    parser.add_argument("--repeats", type=int, default=50, help="direct probes per node and key type")
    parser.add_argument("--samples", type=int, default=150, help="load balancer samples per key type")
    parser.add_argument("--quota", type=int, default=15, help="enrol: the emulated KMS Sign quota per second")
    parser.add_argument("--parallel", type=int, default=8, help="enrol: nodes enrolling at a time")
    parser.add_argument("--zones", type=int, default=3, help="admission: Availability Zones the nodes span")
    parser.add_argument("--batch", type=int, default=10, help="admission: the patch's batch, percent of the group")
    parser.add_argument("--reboot", type=float, default=30, help="admission: seconds a patched node is down")
    parser.add_argument("--every", type=float, default=5, help="admission: seconds between admit passes")
    parser.add_argument("--rate", type=float, default=5, help="admission: strict logins a second")
    args = parser.parse_args()
    if not BIN.exists():
        raise SystemExit(f"{BIN} is missing: run `make bench` (builds it) or `make dist`")
    print("note: the bed runs with its IAM enforcement off (bed.py --no-iam) and the emulator's root key, so policy")
    print("      evaluation stays out of the figures; `make test` runs every command under its shipped policy")
    if args.what in ("keygen", "all"):
        bench_keygen(args.runs or 10)
    if args.what in ("install", "all"):
        bench_install(args.runs or 5)
    if args.what in ("audit", "all"):
        bench_audit(args.nodes or 3, args.repeats, args.samples)
    if args.what in ("penalties", "all"):
        bench_penalties(args.nodes or 3, 30 if args.samples == 150 else args.samples)
    if args.what in ("admission", "all"):
        bench_admission(args.nodes or 200, args.zones, args.batch, args.reboot, args.every, args.rate)
    instances = args.instances or [1000]
    for n in instances:
        if args.what in ("push", "all"):
            bench_push(n)
        if args.what in ("rotate", "all"):
            bench_rotate(n)
        if args.what in ("enrol", "all"):
            bench_enrol(n, args.quota, args.parallel, args.runs or 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
