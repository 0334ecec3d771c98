"""What ``bed.json`` holds (and ``up`` prints on one line): the shapes that
tests/it/common/bed.rs, scripts/demo.sh and scripts/bench.py read. They are
plain dicts at run time (``json.dumps`` writes them as they are), in the
order ``up`` fills them in; and ``Node``, the sshd node whose ``as_json()``
its ``nodes`` and ``profiles`` hold (here, below every part that uses it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict


class AccessKey(TypedDict):
    """An access key of the emulator's IAM (``credentials``: role -> key)."""

    access_key_id: str
    secret_access_key: str


class Noise(TypedDict):
    """An instance that is not a login node of the cluster."""

    instance_id: str
    kind: str
    state: str


class Elb(TypedDict):
    """A network load balancer and its target group (``elb``: ``ip`` or
    ``instance`` -> this)."""

    lb_name: str
    lb_arn: str
    target_group_arn: str


class HyperPod(TypedDict):
    """The HyperPod cluster: its name, node id -> address, node id ->
    instance group."""

    cluster: str
    nodes: dict[str, str]
    groups: dict[str, str]


class Lb(TypedDict):
    """HAProxy: where it listens (the ip target group's load balancer, and
    the instance target group's), and its pid."""

    address: str
    instance_address: str
    port: int
    pid: int


class BedState(TypedDict, total=False):
    """``bed.json``. Keys appear as ``up`` reaches them."""

    dir: str
    net: int
    region: str
    cluster: str
    endpoint: str
    credentials: dict[str, AccessKey]
    supervisor_pid: int
    client_key: str
    profiles: list[dict[str, object]]
    noise: list[Noise]
    virtual: list[str]
    elb: dict[str, Elb]
    hyperpod: HyperPod
    lb: Lb
    iam: bool
    nodes: list[dict[str, object]]
    # --bare: the nodes' netfilter namespace (host.node_netfilter).
    netns: str


@dataclass
class Node:
    """One sshd node of the bed: a login node (registered in EC2) or a
    profile node (its own namespaces, not registered). bed.json holds
    ``as_json()`` of it, which tests/it/common/bed.rs reads."""

    name: str
    address: str
    port: int
    root: str
    ssh_dir: str
    sshd_config: str
    pid_file: str
    log: str
    # The environment the SSM agent gives commands on this node.
    env: dict[str, str]
    # How the bed starts its sshd (login nodes), and reloads it.
    argv: list[str] = field(default_factory=list)
    reload_command: str = ""
    # The profile (profile nodes).
    profile: str | None = None
    instance_id: str = ""
    pid: int | None = None
    # The process holding a profile node's namespaces.
    ns_pid: int | None = None
    # A release node: commands enter its chroot (the holder's root), where
    # the bed's directory and the bin dir are at their own paths.
    chroot: bool = False

    def as_json(self) -> dict[str, object]:
        return asdict(self)
