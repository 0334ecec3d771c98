"""The load balancers: HAProxy 2.6 in TCP mode, one frontend per network
load balancer of the bed (the ip target group's on 127.K.0.10:22, the
instance target group's on 127.K.0.9:22), each in front of exactly the
targets its target group routes to as the emulator keeps it
(``emulator/targets.py``: healthy targets, or all in use when none is:
fail-open; never one initial, draining or unused). HAProxy runs no health
check of its own: Elastic Load Balancing's, run by the emulator from the
balancer's address, decide.

When what a target group routes to changes (a target healthy or failing,
a deregistration draining, a drain's end), the configuration is
rewritten and HAProxy reloaded in master-worker mode (``SIGUSR2``): the
new worker takes the listening socket from the old one (``expose-fd
listeners``), so no connection is refused, and the old worker keeps
serving the connections it holds until they end, as an NLB's
deregistration delay drains a target (Elastic Load Balancing,
"Deregistration delay": in-flight requests complete, no new ones are
sent). A target that turns unhealthy has its connections reset in every
worker, through the master CLI. Idle connections end after 350 s, an
NLB's idle timeout for TCP flows (Network Load Balancers guide,
"Connection idle timeout")."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import BedContext

HAPROXY = "/usr/sbin/haproxy"
# Each load balancer's DNS name: its HAProxy frontend's address.
ADDRESS = {"ip": "127.{net}.0.10", "instance": "127.{net}.0.9"}
# Each load balancer's HAProxy backend.
BACKEND = {"ip": "login", "instance": "login-i"}
_RELOAD = threading.Lock()


def haproxy_config(frontends: list[tuple[str, str, list[tuple[str, str, int]]]], run_dir: str, balance: str) -> str:
    """haproxy.cfg: per load balancer (backend name, address, servers as
    (name, address, port)), a TCP frontend on its address:22."""
    out = (
        "global\n"
        "    maxconn 512\n"
        f"    pidfile {run_dir}/haproxy.pid\n"
        # The listening socket passes from worker to worker on a reload.
        f"    stats socket {run_dir}/haproxy.sock mode 600 level admin expose-fd listeners\n"
        "defaults\n"
        "    mode tcp\n"
        "    timeout connect 2s\n"
        "    timeout client 350s\n"
        "    timeout server 350s\n"
    )
    for backend, address, servers in frontends:
        lines = "".join(f"    server {name} {host}:{port}\n" for name, host, port in servers)
        out += (
            f"frontend {backend}\n"
            f"    bind {address}:22\n"
            f"    default_backend {backend}\n"
            f"backend {backend}\n"
            f"    balance {balance}\n"
            # From its own address, as a Network Load Balancer whose IP
            # targets do not preserve the client's: every connection
            # through it comes from one source.
            f"    source {address}\n"
            f"{lines}"
        )
    return out


def routed(bed: BedContext, kind: str) -> list[tuple[str, str, int]]:
    """What the ``kind`` target group routes to (emulator/targets.py), as
    (name, address, port): named after the node at that address."""
    from moto.ec2.models import ec2_backends

    from emulator import ACCOUNT
    from emulator.targets import MODEL

    from .aws import REGION

    arn = bed.state["elb"][kind]["target_group_arn"]
    names = {n.address: n.name for n in bed.nodes}
    out = []
    for target_id, port in MODEL.routable(arn):
        host: str | None = target_id
        if kind == "instance":
            instance = ec2_backends[ACCOUNT][REGION].get_instance_by_id(target_id)
            host = instance.private_ip if instance is not None else None
        if host is None:
            continue
        out.append((server_name(names.get(host, "t-" + host.replace(".", "-")), port), host, port))
    return sorted(out)


def server_name(name: str, port: int) -> str:
    """A target's HAProxy server name: unique in its backend, as a target
    is an address and a port."""
    return name if port == 22 else f"{name}-{port}"


def reset(bed: BedContext, arn: str, key: tuple[str, int]) -> None:
    """A target turned unhealthy: its connections are reset, as an NLB
    resets them (emulator/targets.py). Every HAProxy worker, old ones
    included, shuts its sessions to that server (the master CLI)."""
    from moto.ec2.models import ec2_backends

    from emulator import ACCOUNT

    from .aws import REGION

    kind = next((k for k, elb in bed.state["elb"].items() if elb["target_group_arn"] == arn), None)
    if kind is None:
        return
    host = key[0]
    if kind == "instance":
        instance = ec2_backends[ACCOUNT][REGION].get_instance_by_id(key[0])
        host = str(instance.private_ip) if instance is not None else key[0]
    names = {n.address: n.name for n in bed.nodes}
    server = f"{BACKEND[kind]}/{server_name(names.get(host, 't-' + host.replace('.', '-')), key[1])}"
    master = str(bed.dir / "haproxy-master.sock")
    # No reload meanwhile: it re-executes the master, which then refuses
    # its socket for a moment.
    with _RELOAD:
        rows = [line.split() for line in _master(master, "show proc").splitlines()]
        workers = [row[0] for row in rows if len(row) > 1 and row[1] == "worker"]
        for pid in workers:
            _master(master, f"@!{pid} shutdown sessions server {server}")


def _master(socket_path: str, command: str) -> str:
    """One command to HAProxy's master CLI, and its answer; tried again
    for up to 5 s while a reload that began before re-executes the master."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return _master_once(socket_path, command)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _master_once(socket_path: str, command: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(socket_path)
        conn.sendall(command.encode() + b"\n")
        # The end of the request: the master answers, then closes.
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def write_config(bed: BedContext) -> None:
    bed_dir = str(bed.dir)
    frontends = [(BACKEND[kind], ADDRESS[kind], routed(bed, kind)) for kind in ("ip", "instance")]
    frontends = [(b, a.format(net=bed.state["net"]), servers) for b, a, servers in frontends]
    (Path(bed_dir) / "haproxy.cfg").write_text(haproxy_config(frontends, bed_dir, bed.args.lb_balance))


def start_lb(bed: BedContext, net: int) -> None:
    """HAProxy's master under the supervisor (``lb`` in bed.json), the
    hook that follows the target groups, and their health checks."""
    from moto.elbv2.models import elbv2_backends

    from emulator import ACCOUNT
    from emulator.targets import MODEL

    from .aws import REGION

    write_config(bed)
    config = bed.dir / "haproxy.cfg"
    master = f"{bed.dir / 'haproxy-master.sock'},level,admin"
    bed.spawn("haproxy", [HAPROXY, "-W", "-db", "-S", master, "-f", str(config)], bed.dir / "haproxy.log")
    bed.state["lb"] = {
        "address": ADDRESS["ip"].format(net=net),
        "instance_address": ADDRESS["instance"].format(net=net),
        "port": 22,
        "pid": bed.children["haproxy"].pid,
    }
    MODEL.interval = bed.args.lb_check_interval
    MODEL.on_change.append(lambda: follow(bed))
    MODEL.on_unhealthy.append(lambda arn, key: reset(bed, arn, key))
    MODEL.start(lambda: elbv2_backends[ACCOUNT][REGION])


def follow(bed: BedContext) -> None:
    """After a target group changed: the new configuration, and a reload
    (the master re-reads it and starts a new worker)."""
    with _RELOAD:
        write_config(bed)
        master = bed.children.get("haproxy")
        if master is not None and master.poll() is None:
            os.kill(master.pid, signal.SIGUSR2)
