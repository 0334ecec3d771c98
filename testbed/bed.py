#!/usr/bin/env python3
"""The hostkeyctl test bed: the whole world on loopback.

    python3 testbed/bed.py up --dir DIR [--nodes 3] [--no-reexec] [--virtual N] ...
    python3 testbed/bed.py down --dir DIR

``up`` starts, and supervises until told to stop:

* the AWS emulator (``emulator.py``: moto + an SSM agent) on 127.0.0.1, a free port;
* N login nodes: real ``sshd`` processes, each with its own fresh host keys
  (rsa, ecdsa, ed25519: different per node, the problem hostkeyctl solves),
  config and pid file, on 127.K.0.(11+i) port 22, registered in the emulator
  as running EC2 instances tagged ``Role=login``, ``Cluster=<name>`` with that
  PrivateIpAddress, plus noise (compute nodes, a stopped login node, a login
  node of another cluster) and optionally N "virtual" instances with no sshd
  (``Role=login``, ``Cluster=virtual``)
  (with ``--virtual-shared``, they share the first node's address and sshd);
* HAProxy in TCP mode, round robin with health checks, on 127.K.0.10:22;
* with ``--profile NAME`` (repeatable), profile nodes: sshd set-ups modelled
  on a distribution's defaults (``PROFILES``; fixtures in testbed/profiles),
  each in its own mount and network namespace, where ``/etc`` and ``/run``
  are the node's own, sshd listens where the distribution's config says
  (port 22 on every address of the namespace), and ``systemctl`` is the
  stand-in of ``standin_systemd.py``. The emulator is reachable there at
  127.0.0.1 on its own port. Profile nodes are not registered in EC2.

K is a free network index (a lock file per index), so beds run in parallel.
When everything answers, ``up`` writes ``DIR/bed.json`` and prints the same
JSON on one stdout line. It tears everything down on SIGTERM/SIGINT, on
``down``, or (with ``--watch-stdin``) when its stdin closes, which is how the
Rust test helper makes sure nothing outlives a test, even a panicking one.
Every child also gets SIGTERM if the supervisor dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from parts.context import Options  # noqa: E402  (the bed's own modules, on the path above)
from parts.host import log  # noqa: E402
from parts.profiles import PROFILES  # noqa: E402
from parts.supervisor import Bed  # noqa: E402


def cmd_up(args: argparse.Namespace) -> int:
    bed = Bed(Options.from_args(args))
    signal.signal(signal.SIGTERM, lambda *_: bed.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: bed.stop_event.set())
    try:
        bed.up()
        bed.serve()
    except BaseException as e:
        log(f"failed: {e}")
        bed.down()
        raise
    bed.down()
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    pid_file = Path(args.dir) / "bed.pid"
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        log(f"no bed running in {args.dir}")
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.05)
    log(f"supervisor {pid} did not stop in 15 s; killing it")
    os.kill(pid, signal.SIGKILL)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the bed and supervise it until stopped")
    up.add_argument("--dir", required=True, help="working directory for keys, configs, logs and bed.json")
    up.add_argument("--nodes", type=int, default=3, help="number of sshd login nodes")
    up.add_argument(
        "--virtual", type=int, default=0, help="extra running instances with no sshd (Role=login, Cluster=virtual)"
    )
    up.add_argument(
        "--held",
        type=int,
        default=0,
        help="the last N login nodes boot but are launched in EC2 (and reached by SSM) only by POST /_bed/nodes/launch",
    )
    up.add_argument("--cluster", default="hp", help="Cluster tag and node name prefix")
    up.add_argument(
        "--login-tags",
        choices=("role", "parallelcluster"),
        default="role",
        help="the login nodes' tags: Role=login and Cluster=<cluster>, or ParallelCluster's own only",
    )
    up.add_argument(
        "--zones",
        type=int,
        default=0,
        help="place the login nodes round-robin across the region's first N Availability Zones, and give each"
        " load balancer a subnet in each (default: EC2's placement, and the first two subnets)",
    )
    up.add_argument("--net", type=int, default=None, help="network index K (default: first free)")
    up.add_argument("--no-reexec", action="store_true", help="start sshd with -r, so only a reload changes its keys")
    up.add_argument(
        "--no-ssm",
        action="store_true",
        help="the nodes' SSM agent is not registered: SendCommand refuses them (a pull-only fleet)",
    )
    up.add_argument(
        "--virtual-shared",
        action="store_true",
        help="virtual instances share the first node's address and sshd (rotation benchmarks)",
    )
    up.add_argument(
        "--hyperpod-workers", type=int, default=0, help="HyperPod worker nodes (no sshd) beside the login group"
    )
    up.add_argument(
        "--hyperpod-groups",
        default="",
        help="the sshd nodes' HyperPod instance groups, in order, as NAME=COUNT,... (default: all in login-group)",
    )
    up.add_argument("--profile", action="append", default=[], help=f"add a profile node ({', '.join(PROFILES)})")
    up.add_argument(
        "--no-iam",
        action="store_true",
        help="do not enforce the IAM policies (benchmarks: policy evaluation stays out of the figures)",
    )
    up.add_argument("--bin-dir", default=None, help="directory put first on the nodes' PATH (hostkeyctl)")
    up.add_argument(
        "--bare",
        action="store_true",
        help="nodes start without hostkeyctl: SSM commands see the node's own /usr/local/bin (ROOT/usr/local/bin)",
    )
    up.add_argument(
        "--release",
        default=None,
        help="login nodes run this Debian suite's sshd (bullseye, trixie, forky: scripts/build-releases.sh);"
        " a comma-separated list gives one per node in turn, empty for the host's (',bullseye,trixie')",
    )
    up.add_argument(
        "--crypto-policy",
        action="store_true",
        help="login nodes include a RHEL 9 / Amazon Linux 2023 DEFAULT crypto policy (no post-quantum key exchange)",
    )
    up.add_argument(
        "--lb-check-interval",
        default=1.0,
        type=float,
        help="seconds between the load balancer's health checks of each target (an NLB's are 5 to 300 s;"
        " each check is a connection)",
    )
    up.add_argument(
        "--lb-deregistration-delay",
        default=5,
        type=int,
        help="the target groups' deregistration_delay.timeout_seconds (AWS's default is 300)",
    )
    up.add_argument(
        "--lb-balance",
        default="roundrobin",
        help="HAProxy's balance algorithm (source: each client pinned to one backend, as NLB flow hashing does)",
    )
    up.add_argument("--watch-stdin", action="store_true", help="tear down when stdin closes")
    down = sub.add_parser("down", help="stop the bed running in DIR")
    down.add_argument("--dir", required=True)
    args = parser.parse_args()
    return cmd_up(args) if args.cmd == "up" else cmd_down(args)


if __name__ == "__main__":
    sys.exit(main())
