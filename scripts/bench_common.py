"""What the benchmarks (bench.py) share: the shipped admin build they run,
timing a process (wall time, CPU, peak RSS), CPU from /proc, and a bed
(testbed/bed.py up) to run against."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The shipped admin build (`make dist` stages it here as `hostkeyctl`):
# what users run, optimised as it ships.
BIN = ROOT / "target" / "dist" / "stage" / "hostkeyctl"


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Runs argv; returns wall seconds and the result."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env)
    return time.perf_counter() - start, done


def run_rss(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int, bytes, bytes]:
    """Runs argv with os.wait4 to get its own peak RSS (KiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss, proc.returncode, out, err


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


class Bed:
    def __init__(
        self, nodes: int, virtual: int = 0, reexec: bool = True, shared: bool = False, extra: list[str] | None = None
    ):
        self.dir = Path(tempfile.mkdtemp(prefix="hkbench-bed-"))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "testbed" / "bed.py"),
                "up",
                "--dir",
                str(self.dir),
                "--nodes",
                str(nodes),
                "--virtual",
                str(virtual),
                "--bin-dir",
                str(BIN.parent),
                "--watch-stdin",
                "--no-iam",
            ]
            + ([] if reexec else ["--no-reexec"])
            + (["--virtual-shared"] if shared else [])
            + (extra or []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.dir / "bed.log", "wb"),
        )
        line = self.proc.stdout.readline() if self.proc.stdout else b""
        if not line:
            raise SystemExit("bed did not start: " + (self.dir / "bed.log").read_text())
        self.state = json.loads(line)
        # Policy evaluation stays out of the figures: the bed's IAM is off
        # (--no-iam) and every call signs with the emulator's root key.
        self.env = dict(os.environ)
        self.env.update(
            {
                "AWS_ENDPOINT_URL": self.state["endpoint"],
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true",
                # The bed's own connection budget (scan::pacing), not the host's.
                "HOSTKEYCTL_PACING_DIR": str(self.dir / "pacing"),
            }
        )

    def control(self, path: str, body: dict | None = None) -> object:
        req = urllib.request.Request(
            self.state["endpoint"] + path,
            data=json.dumps(body or {}).encode(),
            method="POST" if body is not None else "GET",
        )
        return json.loads(urllib.request.urlopen(req).read())

    def client(self, service: str) -> Any:
        """A boto3 client of the bed's emulator (the Python SDK: the
        baselines' and the benches' own calls)."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.state["endpoint"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def hk(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN), *args], env=self.env, capture_output=True)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


CLK_TCK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def proc_cpu(pid: int, reaped: bool) -> float:
    """CPU seconds of process pid from /proc: its own (utime + stime), or
    with reaped=True that of the children it has waited for (cutime +
    cstime; an sshd listener reaps one child per connection)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime is field 14, cutime field 16.
    first = 13 if reaped else 11
    return (int(fields[first]) + int(fields[first + 1])) / CLK_TCK


def run_cpu(argv: list[str]) -> tuple[float, float, int, bytes]:
    """Runs argv; returns wall seconds, its CPU seconds (user + system), its
    peak RSS in KiB, and its stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        out = proc.stdout.read() if proc.stdout else b""
        _, _, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if not out:
            err.seek(0)
            raise SystemExit(f"bench: {argv[1]} printed nothing: {err.read().decode(errors='replace')[:2000]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, out


def host_busy() -> float:
    """Seconds every CPU of the host spent busy (not idle, not waiting
    for I/O), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
