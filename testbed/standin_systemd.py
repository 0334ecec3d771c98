#!/usr/bin/env python3
"""A stand-in for the parts of systemd a login node's sshd depends on.

The bed has no systemd, and hostkeyctl finds out how to reload sshd by
asking `systemctl`. Each profile node runs in its own mount and network
namespace, where `/run` is the node's own; unit states live in
``/run/standin-systemd/UNIT.json`` there.

    standin_systemd.py ctl is-active [--quiet] UNIT...   (node-bin/systemctl)
    standin_systemd.py ctl reload UNIT
    standin_systemd.py socket --socket ssh.socket --service ssh.service \\
        --listen 0.0.0.0:22 --listen [::]:22 --backend 127.0.0.1:10022 -- SSHD ARGV...

``ctl`` answers like systemctl: ``is-active`` prints the state and exits 0
only for ``active`` (a service is active while its MainPID is an sshd);
``reload`` runs the unit's ExecReload (``sshd -t``, then SIGHUP to MainPID)
and fails, as systemctl does, when the unit is not active. A test can put
``reload-fails`` or ``reload-kills-caller`` into ``/run/standin-systemd/fault``.

``socket`` models socket activation (Ubuntu 22.10 and later): it listens
where ``ssh.socket`` would, starts the service (sshd, listening on a
private backend address) at the first connection, marks it active, and
passes every connection through. The service keeps running, as
ssh.service does, until it exits; the next connection starts it again.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TypedDict

STATE = Path("/run/standin-systemd")


class Unit(TypedDict, total=False):
    """A unit's state file: a service's MainPID, whether a socket listens."""

    MainPID: int
    active: bool


def unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def read_unit(unit: str) -> Unit:
    try:
        state: Unit = json.loads((STATE / f"{unit}.json").read_text())
        return state
    except (FileNotFoundError, ValueError):
        return {}


def write_unit(unit: str, data: Unit) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    tmp = STATE / f".{unit}.json.tmp"
    tmp.write_text(json.dumps(data))
    tmp.replace(STATE / f"{unit}.json")


def main_pid(unit: str) -> int | None:
    pid = read_unit(unit).get("MainPID")
    if not pid:
        return None
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text().split()
    except OSError:
        return None
    return pid if comm == "sshd" and stat[2] != "Z" else None


def state_of(unit: str) -> str:
    if unit.endswith(".socket"):
        return "active" if read_unit(unit).get("active") else "inactive"
    return "active" if main_pid(unit) else "inactive"


def ctl(argv: list[str]) -> int:
    quiet = "--quiet" in argv or "-q" in argv
    words = [a for a in argv if not a.startswith("-")]
    if not words:
        print("systemctl (bed stand-in): no verb", file=sys.stderr)
        return 1
    verb, units = words[0], [unit_name(u) for u in words[1:]]
    if verb == "is-active":
        states = [state_of(u) for u in units]
        if not quiet:
            print("\n".join(states))
        return 0 if states and all(s == "active" for s in states) else 3
    if verb == "reload" and len(units) == 1:
        unit = units[0]
        fault = (STATE / "fault").read_text().strip() if (STATE / "fault").exists() else ""
        if fault == "reload-kills-caller":
            os.kill(os.getppid(), signal.SIGKILL)
            return 1
        if fault == "reload-fails":
            print(
                f"Job for {unit} failed because the control process exited with error code.\n"
                f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.',
                file=sys.stderr,
            )
            return 1
        pid = main_pid(unit)
        if pid is None:
            print(f"Failed to reload {unit}: Unit {unit} is not active.", file=sys.stderr)
            return 1
        # ExecReload of Debian's ssh.service: sshd -t, then kill -HUP $MAINPID.
        test = subprocess.run(["/usr/sbin/sshd", "-t"], capture_output=True, text=True)
        if test.returncode != 0:
            print(f"Job for {unit} failed: {test.stderr.strip()}", file=sys.stderr)
            return 1
        os.kill(pid, signal.SIGHUP)
        return 0
    print(f"systemctl (bed stand-in): {verb} is not modelled", file=sys.stderr)
    return 1


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def splice(conn: socket.socket, upstream: socket.socket) -> None:
    """Passes bytes both ways until either side closes; then closes both."""
    threading.Thread(target=_pump, args=(conn, upstream), daemon=True).start()
    _pump(upstream, conn)
    conn.close()
    upstream.close()


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def parse_addr(text: str) -> tuple[int, str, int]:
    host, _, port = text.rpartition(":")
    if host.startswith("["):
        return socket.AF_INET6, host[1:-1], int(port)
    return socket.AF_INET, host, int(port)


class Activator:
    def __init__(self, args: list[str]):
        opts: dict[str, list[str]] = {"--listen": []}
        i = 0
        while args[i] != "--":
            key, value = args[i], args[i + 1]
            if key == "--listen":
                opts["--listen"].append(value)
            else:
                opts[key] = [value]
            i += 2
        self.sshd_argv = args[i + 1 :]
        self.socket_unit = opts["--socket"][0]
        self.service = opts["--service"][0]
        self.backend = parse_addr(opts["--backend"][0])
        self.log = opts.get("--log", ["/dev/null"])[0]
        self.listen = opts["--listen"]
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        # Requests to start the service: where the starter answers (None,
        # or why it could not).
        self.requests: queue.Queue[queue.Queue[OSError | None]] = queue.Queue()

    def starter(self) -> None:
        """Starts the service on request. One long-lived thread forks it:
        the child's PDEATHSIG fires when the forking thread ends."""
        while True:
            reply = self.requests.get()
            try:
                with open(self.log, "ab") as out:
                    self.proc = subprocess.Popen(
                        self.sshd_argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=_die_with_parent
                    )
                write_unit(self.service, {"MainPID": self.proc.pid})
                reply.put(None)
            except OSError as e:
                reply.put(e)

    def ensure_service(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            reply: queue.Queue[OSError | None] = queue.Queue()
            self.requests.put(reply)
            error = reply.get()
            if error is not None:
                raise error
            family, host, port = self.backend
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    socket.create_connection((host, port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.02)

    def handle(self, conn: socket.socket) -> None:
        try:
            self.ensure_service()
            family, host, port = self.backend
            upstream = socket.create_connection((host, port), timeout=5)
            upstream.settimeout(None)
        except OSError:
            conn.close()
            return
        splice(conn, upstream)

    def serve(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def run(self) -> int:
        listeners = []
        for text in self.listen:
            family, host, port = parse_addr(text)
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind((host, port))
            except OSError as e:  # an address family the host lacks, as systemd logs and goes on
                print(f"{self.socket_unit}: cannot listen on {text}: {e}", file=sys.stderr, flush=True)
                s.close()
                continue
            s.listen(64)
            listeners.append(s)
        if not listeners:
            return 1
        threading.Thread(target=self.starter, daemon=True).start()
        write_unit(self.socket_unit, {"active": True})
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        for s in listeners[1:]:
            threading.Thread(target=self.serve, args=(s,), daemon=True).start()
        try:
            self.serve(listeners[0])
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
        return 0


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "ctl":
        return ctl(sys.argv[2:])
    if len(sys.argv) >= 2 and sys.argv[1] == "socket":
        return Activator(sys.argv[2:]).run()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
