"""What the bed needs of this machine: its programs, a network index of its
own, children that die with the supervisor, network namespaces, and an SSH
banner to wait for."""

from __future__ import annotations

import ctypes
import fcntl
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

# testbed/: the bed's own files (profiles, node-bin, standin_systemd.py).
HERE = Path(__file__).resolve().parent.parent
LOCK_DIR = Path("/tmp/hostkeyctl-bed-locks")
CLONE_NEWNET = 0x40000000

T = TypeVar("T")


def log(msg: str) -> None:
    print(f"[bed] {msg}", file=sys.stderr, flush=True)


def without_root_bashrc(argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where root's ``~/.bashrc`` is
    empty. sshd runs every command through the user's shell, and Debian's
    bash sources ``~/.bashrc`` for commands sshd runs; this machine's root
    has pyenv's set-up there, about 0.12 s of CPU per login (measured with
    perf: three quarters of a login's CPU), which a login node would not
    pay. The file stays as it is for everything else."""
    bashrc = Path.home() / ".bashrc"
    if not bashrc.is_file():
        return argv
    mask = f'mount --bind /dev/null {shlex.quote(str(bashrc))} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mask, "sshd-node", *argv]


def die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the supervisor's main thread dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def require(path: str, package: str) -> str:
    found = path if os.path.exists(path) else shutil.which(os.path.basename(path))
    if not found:
        raise SystemExit(f"bed: {path} not found; install it with `make deps` or `apt-get install {package}`")
    return found


def allocate_net(requested: int | None) -> tuple[int, TextIO]:
    """The first free network index (or ``requested``), and the open lock
    file that holds it while the bed runs."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    candidates = [requested] if requested is not None else range(0, 250)
    for k in candidates:
        handle = open(LOCK_DIR / f"net-{k}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return k, handle
        except BlockingIOError:
            handle.close()
    raise SystemExit("bed: no free network index (another bed holds each lock in /tmp/hostkeyctl-bed-locks)")


def in_netns(ns_pid: int, fn: Callable[[], T]) -> T:
    """Runs fn in a thread that joined the network namespace of ns_pid: the
    sockets it creates belong there, whichever thread uses them later."""
    values: list[T] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            fd = os.open(f"/proc/{ns_pid}/ns/net", os.O_RDONLY)
            try:
                if ctypes.CDLL("libc.so.6", use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            values.append(fn())
        except BaseException as e:  # re-raised in the caller
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if errors:
        raise errors[0]
    return values[0]


def wait_banner(host: str, port: int, deadline: float) -> str:
    last = ""
    while time.time() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1) as s:
                s.settimeout(2)
                data = s.recv(256)
                if data.startswith(b"SSH-"):
                    return data.decode().strip()
                last = repr(data)
        except OSError as e:
            last = str(e)
        time.sleep(0.05)
    raise RuntimeError(f"no SSH banner from {host}:{port}: {last}")


NETFILTER_TOOLS = ("iptables", "ip6tables", "iptables-restore", "ip6tables-restore")


def node_netfilter(name: str) -> None:
    """A network namespace for the bare nodes' netfilter (``ip netns add``):
    a node's ``imds-guard`` and ``install --check`` change and read rules
    there, never the test machine's own. One for all the nodes, as their
    shared host would have it (tests/it/common/bed/netfilter.rs runs the
    same tools in it)."""
    # A bed that died before its teardown left its namespace: a new bed
    # with the same pid takes it over empty.
    subprocess.run(["ip", "netns", "delete", name], check=False, stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "netns", "add", name], check=True)


def netfilter_standins(sbin: Path, name: str) -> None:
    """Stand-ins for the netfilter tools in a node's ``/usr/local/sbin``
    (first on systemd's PATH, and bound there for the node's SSM
    commands: emulator/agent.py) that run the real ones in ``name``; and
    a ``systemctl`` that writes what it was asked to the node's
    ``systemctl.log`` (a bed node has no systemd of its own)."""
    sbin.mkdir(parents=True, exist_ok=True)
    log = sbin.parent.parent.parent / "systemctl.log"
    systemctl = sbin / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "systemctl $*" >> {shlex.quote(str(log))}\n')
    systemctl.chmod(0o755)
    for tool in NETFILTER_TOOLS:
        real = next((d / tool for d in (Path("/usr/sbin"), Path("/sbin")) if (d / tool).is_file()), None)
        if real is None:
            raise SystemExit(f"bed: {tool} is missing: run make deps")
        path = sbin / tool
        path.write_text(f'#!/bin/sh\nexec ip netns exec {name} {real} "$@"\n')
        path.chmod(0o755)
