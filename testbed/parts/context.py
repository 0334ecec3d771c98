"""What the parts (``aws``, ``fleet``, ``lb``, ``nodes``, ``profiles``) use
of the running bed: ``Options`` (``bed.py up``'s command line) and
``BedContext``, the supervisor's ``Bed`` as the parts see it. The parts
depend on this module, never on ``supervisor``, which imports them: so the
import graph runs one way (host, keys, state, context; aws, nodes, lb;
fleet, profiles; supervisor; bed.py)."""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Types only: the emulator (and moto) load once the botocore loader is
    # shared (aws.start_emulator).
    from werkzeug.serving import BaseWSGIServer

    from emulator import Emulator, NodeEnv
    from emulator.wire import JsonObject

    from .state import BedState, Node


@dataclass(frozen=True)
class Options:
    """``bed.py up``'s command line (``bed.py --help``)."""

    dir: str
    nodes: int
    virtual: int
    held: int
    cluster: str
    zones: int
    net: int | None
    no_reexec: bool
    no_ssm: bool
    virtual_shared: bool
    hyperpod_workers: int
    hyperpod_groups: str
    profile: list[str]
    no_iam: bool
    bin_dir: str | None
    bare: bool
    release: str | None
    crypto_policy: bool
    lb_check_interval: float
    lb_deregistration_delay: int
    lb_balance: str
    login_tags: str
    watch_stdin: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


class BedContext(Protocol):
    """The ``Bed`` (supervisor.py) as a part sees it: what it reads, what
    it sets as ``up`` reaches it, and the supervisor's methods it calls."""

    args: Options
    dir: Path
    # The connection budget's ledger every hostkeyctl on the bed shares.
    pacing_dir: str
    children: dict[str, subprocess.Popen[bytes]]
    state: BedState
    nodes: list[Node]
    # Set by aws.start_emulator and aws.create_roles.
    emulator: Emulator
    server: BaseWSGIServer
    endpoint: str
    node_credentials: dict[str, str]

    def spawn(self, name: str, argv: list[str], logfile: Path) -> subprocess.Popen[bytes]:
        """Starts a supervised child (on the main thread)."""
        ...

    def launched(self) -> list[Node]:
        """The login nodes launched in EC2 at start-up (all but ``--held``)."""
        ...

    def node_env(self, node: Node) -> NodeEnv:
        """What the emulator's SSM agent knows of ``node``."""
        ...

    def on_main(self, op: str, request: JsonObject) -> object:
        """Runs a node operation of the control API on the main thread."""
        ...
