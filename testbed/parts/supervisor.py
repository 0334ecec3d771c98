"""The supervisor: ``Bed`` holds what runs (children, nodes, the emulator)
and ``bed.json``; ``up`` starts the parts in order, ``serve`` runs the
control API's node operations (``POST /_bed/nodes/stop``, ``start``,
``launch``) on the main thread until told to stop, ``down`` stops
everything."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import aws, fleet, keys, lb, nodes, profiles
from .aws import REGION
from .context import Options
from .host import allocate_net, die_with_parent, log, netfilter_standins, node_netfilter, require, wait_banner
from .lb import HAPROXY
from .nodes import SSHD
from .state import BedState, Node

if TYPE_CHECKING:
    # Types only: the emulator (and moto) load once the botocore loader is
    # shared (aws.start_emulator).
    from werkzeug.serving import BaseWSGIServer

    from emulator import Emulator, NodeEnv
    from emulator.wire import JsonObject

    # Where a node operation's answer goes: (ok, the answer or the error's text).
    Reply = queue.Queue[tuple[bool, object]]
    # A node operation of the control API: (op, its request, where to answer).
    Operation = tuple[str, JsonObject, Reply]


class Bed:
    """The bed as it runs; each part's module (``aws``, ``fleet``,
    ``nodes``, ``profiles``, ``lb``) starts its part on it, seeing it as a
    ``context.BedContext`` (``fleet.FleetBed``)."""

    # Set as ``up`` reaches them (``down`` checks which with hasattr).
    emulator: Emulator
    server: BaseWSGIServer
    endpoint: str
    node_credentials: dict[str, str]
    launcher: fleet.Launcher
    lock_handle: TextIO
    profiles: list[Node]
    netns: str

    def __init__(self, args: Options):
        self.args = args
        self.dir = Path(args.dir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        # What every hostkeyctl on the bed owes the nodes' sshd: one source
        # (loopback), one ledger, apart from the host's and other beds'.
        self.pacing_dir = str(self.dir / "pacing")
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.main_queue: queue.Queue[Operation] = queue.Queue()
        self.stop_event = threading.Event()
        self.state: BedState = {}
        self.nodes: list[Node] = []

    # ------------------------------------------------------------ processes

    def spawn(self, name: str, argv: list[str], logfile: Path) -> subprocess.Popen[bytes]:
        """Starts a supervised child. Must run on the main thread (PDEATHSIG
        follows the thread that forked)."""
        out = open(logfile, "ab")
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=die_with_parent, close_fds=True
        )
        out.close()
        self.children[name] = proc
        return proc

    def stop_child(self, name: str) -> None:
        proc = self.children.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # --------------------------------------------------------------- nodes

    def launched(self) -> list[Node]:
        """The login nodes but the last ``--held``, which boot (their sshd
        runs) but are launched in EC2 only by ``POST /_bed/nodes/launch``."""
        return self.nodes[: len(self.nodes) - self.args.held]

    def node_env(self, node: Node) -> NodeEnv:
        from emulator import NodeEnv

        if self.args.bare:
            netfilter_standins(Path(node.root) / "usr" / "local" / "sbin", self.netns)
        return NodeEnv(node.instance_id, node.name, node.root, node.env)

    # ---------------------------------------------------- main-thread work

    def on_main(self, op: str, request: JsonObject) -> object:
        """Runs node operations on the main thread (they spawn processes)."""
        reply: Reply = queue.Queue()
        self.main_queue.put((op, request, reply))
        ok, value = reply.get(timeout=30)
        if not ok:
            raise ValueError(value)
        return value

    def handle(self, op: str, request: JsonObject) -> dict[str, object]:
        node = next((n for n in self.nodes if n.name == request.get("name")), None)
        if node is None:
            raise ValueError(f"no node named {request.get('name')!r}")
        if op == "stop":
            self.stop_child(node.name)
            return {"stopped": node.name}
        if op == "start":
            self.stop_child(node.name)
            nodes.start_node(self, node)
            wait_banner(node.address, 22, time.time() + 10)
            return {"started": node.name, "pid": node.pid}
        if op == "launch":
            return fleet.launch(self, node)
        raise ValueError(op)

    # --------------------------------------------------------------- run

    def up(self) -> None:
        require(SSHD, "openssh-server")
        require(HAPROXY, "haproxy")
        require("/usr/bin/ssh-keygen", "openssh-client")
        Path("/run/sshd").mkdir(exist_ok=True)
        net, self.lock_handle = allocate_net(self.args.net)
        self.state.update({"dir": str(self.dir), "net": net, "region": REGION, "cluster": self.args.cluster})
        if self.args.bare:
            self.netns = f"hkbed-{os.getpid()}"
            node_netfilter(self.netns)
            self.state["netns"] = self.netns
        aws.start_emulator(self)
        self.state["endpoint"] = self.endpoint
        aws.create_roles(self)
        self.state["supervisor_pid"] = os.getpid()
        (self.dir / "bed.pid").write_text(str(os.getpid()))
        self.state["client_key"] = keys.client_key(self.dir)
        self.nodes = [nodes.prepare_node(self, i, net) for i in range(self.args.nodes)]
        self.profiles = [profiles.prepare_profile(self, p) for p in self.args.profile]
        for node in self.profiles:
            profiles.start_profile(self, node)
        self.state["profiles"] = [p.as_json() for p in self.profiles]
        fleet.register_instances(self, net)
        for node in self.nodes:
            nodes.start_node(self, node)
        deadline = time.time() + 20
        for node in self.nodes:
            wait_banner(node.address, 22, deadline)
        for node in self.launched():
            self.emulator.nodes[node.instance_id] = self.node_env(node)
            if self.args.no_ssm:
                self.emulator.unmanaged.add(node.instance_id)
        fleet.register_lb_and_cluster(self, net)
        if self.nodes:
            lb.start_lb(self, net)
            for _ in range(len(self.nodes) * 2):
                wait_banner(self.state["lb"]["address"], 22, deadline)
        with self.emulator.lock:
            self.emulator.counts.clear()
        # From here on every request is checked against its signer's policy.
        self.emulator.iam.enabled = not self.args.no_iam
        self.state["iam"] = self.emulator.iam.enabled
        self.state["nodes"] = [n.as_json() for n in self.nodes]
        (self.dir / "bed.json").write_text(json.dumps(self.state, indent=2))
        print(json.dumps(self.state), flush=True)
        lb_address = self.state["lb"]["address"] if "lb" in self.state else None
        log(f"ready: {len(self.nodes)} nodes on 127.{net}.0.11+, LB {lb_address}, AWS {self.endpoint}")

    def serve(self) -> None:
        if self.args.watch_stdin:
            threading.Thread(target=self._watch_stdin, daemon=True).start()
        while not self.stop_event.is_set():
            try:
                op, request, reply = self.main_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                reply.put((True, self.handle(op, request)))
            except Exception as e:  # reported to the caller of the control API
                reply.put((False, str(e)))

    def _watch_stdin(self) -> None:
        while sys.stdin.buffer.read(4096):
            pass
        self.stop_event.set()

    def down(self) -> None:
        if hasattr(self, "emulator"):
            self.emulator.close()
        for name in list(self.children):
            self.stop_child(name)
        if hasattr(self, "server"):
            self.server.shutdown()
        if hasattr(self, "netns"):
            subprocess.run(["ip", "netns", "delete", self.netns], check=False)
        try:
            (self.dir / "bed.pid").unlink()
        except FileNotFoundError:
            pass
        log("torn down")
