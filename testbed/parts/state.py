"""What ``bed.json`` holds (and ``up`` prints on one line): the shapes that
tests/it/common/bed.rs, scripts/demo.sh and scripts/bench.py read. They are
plain dicts at run time (``json.dumps`` writes them as they are), in the
order ``up`` fills them in."""

from __future__ import annotations

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
    """The HyperPod cluster: its name, and node id -> address."""

    cluster: str
    nodes: dict[str, str]


class Lb(TypedDict):
    """HAProxy: where it listens, and its pid."""

    address: str
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
