"""A HyperPod node's life after the cluster is made, which moto 5.2.1 does
not model (its nodes are ``Running`` forever):

* a node's status changes (the SageMaker API reference,
  ``ClusterInstanceStatusDetails``: ``Running``, ``Failure``, ``Pending``,
  ``ShuttingDown``, ``SystemUpdating``, ``DeepHealthCheckInProgress``,
  ``NotFound``), as ``ListClusterNodes`` then reports it;
* a node is replaced (``BatchReplaceClusterNodes``: "terminates the
  specified instances and provisions new replacement instances with the
  same configuration"): the node leaves the cluster's list and its
  successor, with a new instance id and a new private address, joins it.

The bed's nodes are its sshd nodes, so both go through the control API:
``POST /_bed/hyperpod/status`` (``cluster``, ``instance_id``, ``status``)
and ``POST /_bed/hyperpod/replace`` (``cluster``, ``instance_id``,
``successor``, ``address``).
"""

from __future__ import annotations

import copy

from .wire import JsonObject

STATUSES = {"Running", "Failure", "Pending", "ShuttingDown", "SystemUpdating", "DeepHealthCheckInProgress", "NotFound"}


def _cluster(region: str, name: str):  # type: ignore[no-untyped-def]  # moto's backend has no types
    from moto.sagemaker.models import sagemaker_backends

    from . import ACCOUNT

    return sagemaker_backends[ACCOUNT][region].clusters[name]


class ClusterPlane:
    """Mixed into the emulator: a HyperPod node's status and replacement."""

    region: str

    def _init_cluster(self) -> None:
        self.control_hooks["/_bed/hyperpod/status"] = self._hyperpod_status  # type: ignore[attr-defined]
        self.control_hooks["/_bed/hyperpod/replace"] = self._hyperpod_replace  # type: ignore[attr-defined]

    def _hyperpod_status(self, request: JsonObject) -> JsonObject:
        status = str(request["status"])
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is none of {sorted(STATUSES)}")
        node = _cluster(self.region, str(request["cluster"])).nodes[str(request["instance_id"])]
        node.status = status
        return {"instance_id": node.instance_id, "status": status}

    def _hyperpod_replace(self, request: JsonObject) -> JsonObject:
        cluster = _cluster(self.region, str(request["cluster"]))
        old = cluster.nodes.pop(str(request["instance_id"]))
        new = copy.copy(old)
        new.instance_id = str(request["successor"])
        address = str(request["address"])
        # What patches.py's ClusterNode.describe reports.
        new.bed_ip = address
        new.bed_dns = f"ip-{address.replace('.', '-')}.ec2.internal"
        new.status = "Running"
        cluster.nodes[new.instance_id] = new
        return {"instance_id": new.instance_id, "replaced": old.instance_id}
