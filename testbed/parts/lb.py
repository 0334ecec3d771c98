"""The load balancer: HAProxy 2.6 in TCP mode in front of the launched
login nodes, on 127.K.0.10:22, with a health check that expects the SSH
banner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .state import Node

if TYPE_CHECKING:
    from .context import BedContext

HAPROXY = "/usr/sbin/haproxy"


def haproxy_config(address: str, nodes: list[Node], pidfile: str, check_interval: str, balance: str) -> str:
    """haproxy.cfg: a TCP frontend on ``address``:22, a backend of ``nodes``."""
    check = f"check inter {check_interval} fall 2 rise 1"
    servers = "".join(f"    server {n.name} {n.address}:22 {check}\n" for n in nodes)
    return (
        "global\n"
        "    maxconn 512\n"
        f"    pidfile {pidfile}\n"
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
        f"{servers}"
    )


def start_lb(bed: BedContext, net: int) -> None:
    """HAProxy under the supervisor (``lb`` in bed.json)."""
    address = f"127.{net}.0.10"
    config = bed.dir / "haproxy.cfg"
    config.write_text(
        haproxy_config(
            address, bed.launched(), f"{bed.dir}/haproxy.pid", bed.args.lb_check_interval, bed.args.lb_balance
        )
    )
    bed.spawn("haproxy", [HAPROXY, "-db", "-f", str(config)], bed.dir / "haproxy.log")
    bed.state["lb"] = {"address": address, "port": 22, "pid": bed.children["haproxy"].pid}
