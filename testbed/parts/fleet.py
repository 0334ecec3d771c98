"""The fleet as AWS sees it: the login nodes as running EC2 instances
tagged ``Role=login``, ``Cluster=<cluster>`` (and noise beside them:
compute nodes, a stopped login node, a login node of another cluster,
``--virtual`` instances with no sshd), two network load balancers whose
target groups hold the nodes, and a HyperPod cluster whose login group
holds them."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any, Protocol

from . import aws
from .aws import REGION
from .context import BedContext
from .state import Elb, Node, Noise


@dataclass(frozen=True)
class Launcher:
    """Runs instances of one of moto's images, as the bed's own account:
    at start-up, and later for a held node (``launch``)."""

    ec2: Any  # a boto3 client (boto3 has no types)
    image: str

    def run(self, ip: str | None, tags: dict[str, str], count: int = 1, zone: str | None = None) -> list[str]:
        kwargs: dict[str, object] = {
            "ImageId": self.image,
            "MinCount": count,
            "MaxCount": count,
            "InstanceType": "m5.xlarge",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        }
        if ip:
            kwargs["PrivateIpAddress"] = ip
        if zone:
            kwargs["Placement"] = {"AvailabilityZone": zone}
        return [i["InstanceId"] for i in self.ec2.run_instances(**kwargs)["Instances"]]


class FleetBed(BedContext, Protocol):
    """The bed as this module sees it: the context, and the ``Launcher``
    that ``register_instances`` sets and ``launch`` uses again."""

    launcher: Launcher


def login_tags(bed: BedContext, node: Node) -> dict[str, str]:
    """A login node's tags: the bed's own (``Role=login``,
    ``Cluster=<cluster>``), or with ``--login-tags parallelcluster`` only
    those ParallelCluster 3 puts on a login node's instance
    (``parallelcluster:node-type=LoginNode``,
    ``parallelcluster:cluster-name``, and ``Name=LoginNode`` on every one)."""
    if bed.args.login_tags == "parallelcluster":
        # ParallelCluster names every login node "LoginNode"
        # (pcluster/templates/cdk_builder_utils.py, 3.16.1).
        return {
            "Name": "LoginNode",
            "parallelcluster:node-type": "LoginNode",
            "parallelcluster:cluster-name": bed.args.cluster,
        }
    return {"Name": node.name, "Role": "login", "Cluster": bed.args.cluster}


def register_instances(bed: FleetBed, net: int) -> None:
    """The launched login nodes, the noise and the virtual instances, as
    running (or stopped) EC2 instances."""
    from moto.ec2.models.amis import AMIS

    ec2 = aws.ec2(bed)
    # One of moto's built-in images, asked for by id: every image of
    # the region in one answer took a second of the bed's start-up.
    image = ec2.describe_images(ImageIds=[AMIS[0]["ami_id"]])["Images"][0]["ImageId"]
    cluster = bed.args.cluster
    bed.launcher = Launcher(ec2, image)
    run = bed.launcher.run
    zones = _zones(ec2, bed.args.zones)
    for i, node in enumerate(bed.launched()):
        # --zones: round-robin across the first N zones (EC2's placement).
        zone = zones[i % len(zones)] if bed.args.zones else None
        node.instance_id = run(node.address, login_tags(bed, node), zone=zone)[0]
    noise: list[Noise] = []
    for i in range(2):
        iid = run(
            f"127.{net}.1.{11 + i}", {"Name": f"{cluster}-compute-{i + 1}", "Role": "compute", "Cluster": cluster}
        )[0]
        noise.append({"instance_id": iid, "kind": "compute", "state": "running"})
    stopped = run(f"127.{net}.1.30", {"Name": f"{cluster}-login-stopped", "Role": "login", "Cluster": cluster})[0]
    ec2.stop_instances(InstanceIds=[stopped])
    noise.append({"instance_id": stopped, "kind": "login", "state": "stopped"})
    other = run(f"127.{net}.1.40", {"Name": "other-login-1", "Role": "login", "Cluster": "other"})[0]
    noise.append({"instance_id": other, "kind": "login of cluster 'other'", "state": "running"})
    bed.state["noise"] = noise
    virtual: list[str] = []
    remaining = bed.args.virtual
    while remaining > 0:
        batch = min(remaining, 100)
        virtual += run(None, {"Role": "login", "Cluster": "virtual"}, batch)
        remaining -= batch
    bed.state["virtual"] = virtual
    if bed.args.virtual_shared and virtual:
        share_first_node(bed, virtual)


def launch(bed: FleetBed, node: Node) -> dict[str, object]:
    """A held node comes online: its instance runs with the login tags,
    its SSM agent registers, and State Manager applies the associations
    that target it (emulator/associations.py)."""
    if node.instance_id:
        raise ValueError(f"{node.name} is already launched ({node.instance_id})")
    node.instance_id = bed.launcher.run(node.address, login_tags(bed, node))[0]
    bed.emulator.nodes[node.instance_id] = bed.node_env(node)
    bed.emulator.instance_online(node.instance_id, REGION)
    bed.state["nodes"] = [n.as_json() for n in bed.nodes]
    (bed.dir / "bed.json").write_text(json.dumps(bed.state, indent=2))
    return {"launched": node.name, "instance_id": node.instance_id}


def share_first_node(bed: BedContext, virtual: list[str]) -> None:
    """``--virtual-shared``: every virtual instance is the first node
    under another instance id. Its PrivateIpAddress becomes the node's
    (EC2 refuses a duplicate address, so the emulator's record is set
    directly), so audits and rotations handshake with a real sshd, on
    loopback; and its agent runs the stand-in in its shared mode, which
    installs on that node once per distinct command line."""
    from moto.ec2.models import ec2_backends

    from emulator import ACCOUNT

    if not bed.nodes:
        raise SystemExit("bed: --virtual-shared needs --nodes 1 or more (the node the virtual instances share)")
    shared = bed.nodes[0]
    backend = ec2_backends[ACCOUNT][REGION]
    for iid in virtual:
        backend.get_instance(iid).nics[0].private_ip_address = shared.address
    real = shutil.which("hostkeyctl", path=bed.emulator.base_env["PATH"])
    if not real:
        raise SystemExit("bed: --virtual-shared needs hostkeyctl on the nodes' PATH (--bin-dir)")
    cache = bed.dir / "virtual-shared"
    cache.mkdir(exist_ok=True)
    env = dict(shared.env)
    env.update({"HOSTKEYCTL_VIRTUAL_SHARED": str(cache), "HOSTKEYCTL_VIRTUAL_REAL": real})
    bed.emulator.virtual_shared = (shared.root, env)


def _zones(ec2: Any, count: int) -> list[str]:
    """The region's first ``count`` Availability Zones, by name."""
    names = sorted(z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
    if count > len(names):
        raise SystemExit(f"bed: --zones {count}, but the region has {len(names)} zones")
    return names[: max(count, 1)]


def register_lb_and_cluster(bed: BedContext, net: int) -> None:
    """What `--target lb:`, `tg:` and `hyperpod:` find: two network load
    balancers with a TCP listener on 22, one forwarding to an IP target
    group of the nodes' addresses, one to an instance target group of
    their instance ids; and a HyperPod cluster whose login group holds
    the nodes (plus ``--hyperpod-workers`` workers at addresses where
    nothing listens). The load balancers' DNS name is the bed's HAProxy."""
    import boto3

    kwargs = dict(
        endpoint_url=bed.endpoint, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    register_load_balancers(bed, net, aws.ec2(bed), boto3.client("elbv2", **kwargs))
    register_hyperpod(bed, net, boto3.client("sagemaker", **kwargs))


def register_load_balancers(bed: BedContext, net: int, ec2: Any, elb: Any) -> None:
    """The two network load balancers and their target groups (``ec2`` and
    ``elb``: boto3 clients, which have no types)."""
    from moto.elbv2.models import elbv2_backends

    from emulator import ACCOUNT
    from emulator.targets import MODEL

    from .lb import ADDRESS

    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    found = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    # A subnet in each zone the load balancers serve: --zones's, else the
    # first two subnets'.
    wanted = _zones(ec2, bed.args.zones) if bed.args.zones else None
    subnets = [s["SubnetId"] for s in found if wanted is None or s["AvailabilityZone"] in wanted]
    subnets = subnets[: len(wanted)] if wanted else subnets[:2]
    cluster = bed.args.cluster
    state: dict[str, Elb] = {}
    for kind, targets in (
        ("ip", [{"Id": n.address, "Port": 22} for n in bed.launched()]),
        ("instance", [{"Id": n.instance_id, "Port": 22} for n in bed.launched()]),
    ):
        suffix = "" if kind == "ip" else "-i"
        tg = elb.create_target_group(
            Name=f"{cluster}-login{suffix}",
            Protocol="TCP",
            Port=22,
            VpcId=vpc,
            TargetType=kind,
            HealthCheckProtocol="TCP",
            # AWS's least (2 to 10; 5 by default for TCP): a target the
            # tests register is healthy after two of the bed's checks.
            HealthyThresholdCount=2,
        )["TargetGroups"][0]["TargetGroupArn"]
        # The deregistration delay shortened by the group's own attribute
        # (0 to 3600 s, 300 by default), never skipped.
        delay = {"Key": "deregistration_delay.timeout_seconds", "Value": str(bed.args.lb_deregistration_delay)}
        elb.modify_target_group_attributes(TargetGroupArn=tg, Attributes=[delay])
        elb.register_targets(TargetGroupArn=tg, Targets=targets)
        # The bed's nodes answer already (supervisor.py waits for their
        # banners): in service before the tests begin.
        MODEL.settle(tg)
        lb = elb.create_load_balancer(
            Name=f"{cluster}-login{suffix}", Type="network", Scheme="internal", Subnets=subnets
        )["LoadBalancers"][0]["LoadBalancerArn"]
        elb.create_listener(
            LoadBalancerArn=lb, Protocol="TCP", Port=22, DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}]
        )
        elbv2_backends[ACCOUNT][REGION].load_balancers[lb].dns_name = ADDRESS[kind].format(net=net)
        state[kind] = {"lb_name": f"{cluster}-login{suffix}", "lb_arn": lb, "target_group_arn": tg}
    bed.state["elb"] = state


def register_hyperpod(bed: BedContext, net: int, sm: Any) -> None:
    """The HyperPod cluster (``sm``: a boto3 client, which has no types):
    its nodes get EC2-like instance ids, and the bed's addresses that
    patches.py's ``describe`` reports."""
    from moto.sagemaker.models import sagemaker_backends

    from emulator import ACCOUNT

    cluster = bed.args.cluster
    groups = []
    sshd = sshd_groups(bed.args.hyperpod_groups, len(bed.launched()))
    if bed.args.hyperpod_workers and "worker-group" in sshd:
        raise ValueError("--hyperpod-workers adds a worker-group: name the sshd nodes' groups otherwise")
    offsets, first = {}, 0
    for name, count in sshd.items():
        offsets[name] = first
        first += count
    for name, count in [*sshd.items(), ("worker-group", bed.args.hyperpod_workers)]:
        if count:
            groups.append(
                {
                    "InstanceGroupName": name,
                    "InstanceType": "ml.m5.xlarge",
                    "InstanceCount": count,
                    "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/hp", "OnCreate": "on_create.sh"},
                    "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/hyperpod",
                    "ThreadsPerCore": 1,
                }
            )
    if not groups:
        return
    sm.create_cluster(ClusterName=cluster, InstanceGroups=groups)
    model = sagemaker_backends[ACCOUNT][REGION].clusters[cluster]
    renamed = {}
    addresses: dict[str, str] = {}
    for i, (old_id, node) in enumerate(
        sorted(model.nodes.items(), key=lambda kv: (kv[1].instance_group_name, int(kv[0].rsplit("-", 1)[1])))
    ):
        node.instance_id = f"i-{0x0A0000000000000 + i:017x}"
        n = int(old_id.rsplit("-", 1)[1])
        if node.instance_group_name in offsets:
            ip = bed.nodes[offsets[node.instance_group_name] + n].address
        else:
            # Workers at addresses where nothing listens (connections refused).
            ip = f"127.{net}.{2 + n // 200}.{10 + n % 200}"
        # What patches.py's ClusterNode.describe reports (moto has neither).
        node.bed_ip = ip  # type: ignore[attr-defined]
        node.bed_dns = f"ip-{ip.replace('.', '-')}.ec2.internal"  # type: ignore[attr-defined]
        renamed[node.instance_id] = node
        addresses[node.instance_id] = ip
    model.nodes = renamed
    groups_of = {i: n.instance_group_name for i, n in renamed.items()}
    bed.state["hyperpod"] = {"cluster": cluster, "nodes": addresses, "groups": groups_of}


def sshd_groups(spec: str, nodes: int) -> dict[str, int]:
    """``--hyperpod-groups``: NAME=COUNT,... in order, covering the ``nodes``
    sshd nodes; empty, all of them in login-group."""
    if not spec:
        return {"login-group": nodes}
    groups: dict[str, int] = {}
    for part in spec.split(","):
        name, _, count = part.partition("=")
        if not name or not count.isdigit() or name in groups:
            raise ValueError(f"--hyperpod-groups: {part!r} is not NAME=COUNT (each NAME once)")
        groups[name] = int(count)
    if sum(groups.values()) != nodes:
        raise ValueError(f"--hyperpod-groups: {sum(groups.values())} nodes named, the bed has {nodes} sshd nodes")
    return groups
