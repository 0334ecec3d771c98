"""HyperPod's ``UpdateClusterSoftware``, which moto 5.2.1 does not have:
a rolling patch of a cluster's instance groups.

What AWS documents, and the bed does:

* the request (SageMaker API reference, ``UpdateClusterSoftware`` and
  botocore's model of it): ``ClusterName`` (a name or an ARN);
  ``InstanceGroups`` (1 to 100 ``InstanceGroupName``; without them "all
  of the instance groups are patched"); ``DeploymentConfig``
  (``RollingUpdatePolicy.MaximumBatchSize``: ``Type`` ``INSTANCE_COUNT``
  or ``CAPACITY_PERCENTAGE``, ``Value`` at least 1;
  ``WaitIntervalInSeconds`` 0 to 3600, "the duration in seconds that
  SageMaker waits before updating more instances"); ``ImageId``
  (``ami-[0-9a-fA-F]{8,17}`` or ``default``). Its errors are
  ``ResourceNotFound`` and ``ConflictException``; the answer is the
  ``ClusterArn``, at once, while the update runs;
* the cluster is ``SystemUpdating`` (``ClusterStatus``) while it runs, and
  ``InService`` after; a second update meanwhile is a conflict;
* each node of a batch is ``SystemUpdating`` (``ClusterInstanceStatus``)
  while its root volume is replaced and its lifecycle scripts run again
  (SageMaker Developer Guide, "Update the SageMaker HyperPod platform
  software of a cluster": the update replaces the root volume, so
  anything kept there is lost, and the lifecycle scripts run again), then
  ``Running`` on its new image (``CurrentImageId``,
  ``LastSoftwareUpdateTime`` in ``DescribeClusterNode``).

What the bed assumes: the node keeps its instance id (hyperpod.py's
docstring); a node whose step fails is left ``Failure`` and the update
stops there, its later batches untouched (the guide names no rollback
without alarms); a percentage rounds down, never below one node; without
a ``RollingUpdatePolicy`` the selection is one batch.

The bed's nodes are its sshd processes, so what "root volume replaced" and
"lifecycle scripts run again" mean on a node is the bed's to say:
``POST /_bed/hyperpod/node-steps`` (``cluster``, ``instance_id``,
``root_volume``, ``on_create``: two shell scripts) names them, and a patch
runs them in that order with ``sh -c``. A node without them is patched in
its status and image alone (the bed's workers where nothing listens).
``GET /_bed/hyperpod/patches`` lists each node's patch as it happened
(``instance_id``, ``batch``, ``started``, ``ended``, ``status``).
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable

from .errors import ApiError
from .hyperpod import STATUSES, _cluster
from .wire import JsonObject

IMAGE = re.compile(r"ami-[0-9a-fA-F]{8,17}|default")
STEP_TIMEOUT_S = 300


class SoftwarePlane:
    """Mixed into the emulator: ``UpdateClusterSoftware``."""

    region: str
    lock: threading.Lock
    processes: set[subprocess.Popen[bytes]]
    closing: bool

    def _init_software(self) -> None:
        self.node_steps: dict[str, JsonObject] = {}
        self.patch_log: list[JsonObject] = []
        self.control_hooks["/_bed/hyperpod/node-steps"] = self._node_steps  # type: ignore[attr-defined]

    def _node_steps(self, request: JsonObject) -> JsonObject:
        instance = str(request["instance_id"])
        if instance not in _cluster(self.region, str(request["cluster"])).nodes:
            raise KeyError(f"no node {instance} in cluster {request['cluster']}")
        self.node_steps[instance] = {"root_volume": str(request["root_volume"]), "on_create": str(request["on_create"])}
        return {"instance_id": instance}

    def patches_json(self) -> list[JsonObject]:
        with self.lock:
            return [dict(p) for p in self.patch_log]

    def update_cluster_software(self, request: JsonObject) -> JsonObject:
        """Checks the request as SageMaker does, then rolls the patch in a
        thread of its own (module docstring)."""
        from moto.sagemaker.models import sagemaker_backends

        from . import ACCOUNT

        name = str(request.get("ClusterName") or "")
        if not name:
            raise ApiError("ValidationException", "1 validation error detected: ClusterName must not be null")
        name = name.rsplit("/", 1)[-1] if name.startswith("arn:") else name
        cluster = sagemaker_backends[ACCOUNT][self.region].clusters.get(name)
        if cluster is None:
            raise ApiError("ResourceNotFound", f"Cluster {name} not found.")
        groups = self._groups(cluster, request.get("InstanceGroups"))
        batch, wait_s = _deployment(request.get("DeploymentConfig") or {})
        image = str(request.get("ImageId") or "default")
        if not IMAGE.fullmatch(image):
            raise ApiError("ValidationException", f"ImageId {image!r} is no AMI id and not 'default'")
        with self.lock:
            if cluster.status != "InService":
                raise ApiError("ConflictException", f"Cluster {name} is {cluster.status}, not InService.")
            cluster.status = "SystemUpdating"
        nodes = sorted(
            (n for n in cluster.nodes.values() if n.instance_group_name in groups),
            key=lambda n: (n.instance_group_name, n.instance_id),
        )
        size = batch(len(nodes))
        batches = [nodes[i : i + size] for i in range(0, len(nodes), size)]
        threading.Thread(target=self._roll, args=(cluster, batches, image, wait_s), daemon=True).start()
        return {"ClusterArn": cluster.arn}

    @staticmethod
    def _groups(cluster: object, asked: object) -> set[str]:
        known = {str(g["InstanceGroupName"]) for g in cluster.instance_groups}  # type: ignore[attr-defined]
        if asked is None:
            return known
        if not isinstance(asked, list) or not 1 <= len(asked) <= 100:
            raise ApiError("ValidationException", "InstanceGroups must hold 1 to 100 instance groups")
        names = {str(g.get("InstanceGroupName")) for g in asked}
        unknown = sorted(names - known)
        if unknown:
            raise ApiError("ValidationException", f"Instance groups {unknown} are not in the cluster")
        return names

    def _roll(self, cluster: object, batches: list[list[object]], image: str, wait_s: int) -> None:
        try:
            for number, batch in enumerate(batches):
                if number and wait_s:
                    time.sleep(wait_s)
                threads = [threading.Thread(target=self._patch_node, args=(node, image, number)) for node in batch]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if self.closing or any(n.status != "Running" for n in batch):  # type: ignore[attr-defined]
                    return
        finally:
            cluster.status = "InService"  # type: ignore[attr-defined]

    def _patch_node(self, node: object, image: str, batch: int) -> None:
        instance = str(node.instance_id)  # type: ignore[attr-defined]
        entry: JsonObject = {"instance_id": instance, "batch": batch, "started": time.time()}
        with self.lock:
            self.patch_log.append(entry)
        node.status = "SystemUpdating"  # type: ignore[attr-defined]
        current = str(getattr(node, "bed_image", "ami-0bed000000000001"))
        # "default", the latest image: the bed's next one.
        digits = current[4:]
        following = f"ami-{int(digits, 16) + 1:0{len(digits)}x}"
        node.bed_image = image if image != "default" else following  # type: ignore[attr-defined]
        node.bed_software_at = datetime.datetime.now(datetime.UTC)  # type: ignore[attr-defined]
        steps = self.node_steps.get(instance, {})
        ok = all(self._run_node_step(str(steps[step])) for step in ("root_volume", "on_create") if step in steps)
        status = "Running" if ok else "Failure"
        assert status in STATUSES
        node.status = status  # type: ignore[attr-defined]
        with self.lock:
            entry.update(ended=time.time(), status=status)

    def _run_node_step(self, script: str) -> bool:
        with self.lock:
            if self.closing:
                return False
            proc = subprocess.Popen(
                ["sh", "-c", script],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(os.environ),
            )
            self.processes.add(proc)
        try:
            return proc.wait(timeout=STEP_TIMEOUT_S) == 0
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return False
        finally:
            with self.lock:
                self.processes.discard(proc)


def _deployment(config: JsonObject) -> tuple[Callable[[int], int], int]:
    """The batch size (a function of the node count) and the wait between
    batches, from a ``DeploymentConfiguration``."""
    wait_s = int(config.get("WaitIntervalInSeconds") or 0)
    if not 0 <= wait_s <= 3600:
        raise ApiError("ValidationException", f"WaitIntervalInSeconds {wait_s} is not within 0 to 3600")
    policy = config.get("RollingUpdatePolicy")
    if policy is None:
        return (lambda total: max(1, total)), wait_s
    size = policy.get("MaximumBatchSize") or {}
    kind, value = size.get("Type"), size.get("Value")
    if kind not in ("INSTANCE_COUNT", "CAPACITY_PERCENTAGE") or not isinstance(value, int) or value < 1:
        raise ApiError(
            "ValidationException",
            "MaximumBatchSize needs Type INSTANCE_COUNT or CAPACITY_PERCENTAGE and a Value of at least 1",
        )
    if kind == "INSTANCE_COUNT":
        return (lambda _total: value), wait_s
    return (lambda total: max(1, total * value // 100)), wait_s
