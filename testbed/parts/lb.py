"""The load balancer: HAProxy 2.6 in TCP mode on 127.K.0.10:22, with a
health check that expects the SSH banner, in front of exactly the targets
registered in the bed's ip target group (``{cluster}-login``), as a
Network Load Balancer forwards to its target group's registered, healthy
targets.

Registering or deregistering a target (ELBv2 ``RegisterTargets``,
``DeregisterTargets``, admission's calls) rewrites the configuration and
reloads HAProxy in master-worker mode (``SIGUSR2``): the new worker takes
the listening socket from the old one (``expose-fd listeners``), so no
connection is refused, and the old worker keeps serving the connections
it holds until they end, as an NLB's deregistration delay drains a
target (Elastic Load Balancing, "Deregistration delay": in-flight
requests complete, no new ones are sent)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import BedContext

HAPROXY = "/usr/sbin/haproxy"
_RELOAD = threading.Lock()


def haproxy_config(
    address: str, servers: list[tuple[str, str, int]], run_dir: str, check_interval: str, balance: str
) -> str:
    """haproxy.cfg: a TCP frontend on ``address``:22, a backend of
    ``servers`` (name, address, port)."""
    check = f"check inter {check_interval} fall 2 rise 1"
    lines = "".join(f"    server {name} {host}:{port} {check}\n" for name, host, port in servers)
    return (
        "global\n"
        "    maxconn 512\n"
        f"    pidfile {run_dir}/haproxy.pid\n"
        # The listening socket passes from worker to worker on a reload.
        f"    stats socket {run_dir}/haproxy.sock mode 600 level admin expose-fd listeners\n"
        "defaults\n"
        "    mode tcp\n"
        "    timeout connect 2s\n"
        "    timeout client 120s\n"
        "    timeout server 120s\n"
        "frontend ssh\n"
        f"    bind {address}:22\n"
        "    default_backend login\n"
        "backend login\n"
        f"    balance {balance}\n"
        # From its own address, as a Network Load Balancer whose IP
        # targets do not preserve the client's: every connection
        # through it, and its health checks, come from one source.
        f"    source {address}\n"
        "    option tcp-check\n"
        "    tcp-check expect rstring ^SSH-2.0-\n"
        f"{lines}"
    )


def registered(bed: BedContext) -> list[tuple[str, str, int]]:
    """The ip target group's registered targets (draining ones are gone
    from ``targets`` in moto), named after the node at that address."""
    from moto.elbv2.models import elbv2_backends

    from emulator import ACCOUNT

    from .aws import REGION

    arn = bed.state["elb"]["ip"]["target_group_arn"]
    group = elbv2_backends[ACCOUNT][REGION].target_groups[arn]
    names = {n.address: n.name for n in bed.nodes}
    out = []
    for target in group.targets.values():
        host = str(target["Id"])
        name = names.get(host, "t-" + host.replace(".", "-"))
        out.append((name, host, int(target.get("Port") or group.port or 22)))
    return sorted(out)


def write_config(bed: BedContext) -> None:
    bed_dir = str(bed.dir)
    (Path(bed_dir) / "haproxy.cfg").write_text(
        haproxy_config(
            bed.state["lb"]["address"] if "lb" in bed.state else f"127.{bed.state['net']}.0.10",
            registered(bed),
            bed_dir,
            bed.args.lb_check_interval,
            bed.args.lb_balance,
        )
    )


def start_lb(bed: BedContext, net: int) -> None:
    """HAProxy's master under the supervisor (``lb`` in bed.json), and the
    emulator's hook that follows the target group."""
    address = f"127.{net}.0.10"
    write_config(bed)
    config = bed.dir / "haproxy.cfg"
    bed.spawn("haproxy", [HAPROXY, "-W", "-db", "-f", str(config)], bed.dir / "haproxy.log")
    bed.state["lb"] = {"address": address, "port": 22, "pid": bed.children["haproxy"].pid}
    bed.emulator.elb_hooks.append(lambda: follow(bed))


def follow(bed: BedContext) -> None:
    """After a target group changed: the new configuration, and a reload
    (the master re-reads it and starts a new worker)."""
    with _RELOAD:
        write_config(bed)
        master = bed.children.get("haproxy")
        if master is not None and master.poll() is None:
            os.kill(master.pid, signal.SIGUSR2)
