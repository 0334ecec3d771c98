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

A node's instance identity document (EC2 User Guide, "Instance identity
documents": ``accountId``, ``instanceId``, ``privateIp``, ``region``,
``pendingTime``, ...), signed as IMDS's ``/latest/dynamic/instance-identity/
signature`` is (RSA PKCS#1 v1.5 over SHA-256 of the document's exact bytes,
base64: "Verify the instance identity document"), by a key of the bed's own
in place of AWS's: ``POST /_bed/hyperpod/iid`` (``cluster``,
``instance_id``) and ``POST /_bed/iid-key`` (the Region and the key's
SubjectPublicKeyInfo, for the signer's ``HOSTKEYCTL_ENROL_IID_KEYS``).
``POST /_bed/hyperpod/imds`` (``cluster``, ``instance_id``) starts that
node's IMDS on a port of its own and answers its ``endpoint``: IMDSv2 as
the EC2 User Guide describes it ("Use IMDSv2": ``PUT /latest/api/token``
with ``X-aws-ec2-metadata-token-ttl-seconds``, then each ``GET`` with
``X-aws-ec2-metadata-token``; 401 without a token), serving
``/latest/meta-data/instance-id`` and the two identity paths. Whether
HyperPod's IMDS serves the document is not confirmed; on EC2 it does.
``POST /_bed/ec2/imds`` (``instance_id``) does the same for an EC2
instance (a ParallelCluster node): its document from moto's instance
(its private address, its launch time as ``pendingTime``).

* a node is patched (``UpdateClusterSoftware``, "Updates the platform
  software of a SageMaker HyperPod cluster for security patching": the
  root volume is replaced and the lifecycle scripts run again): it keeps
  its instance id, is ``SystemUpdating``, and ``DescribeClusterNode``
  reports its new ``CurrentImageId`` ("The ID of the Amazon Machine Image
  (AMI) currently in use by the node") and ``LastSoftwareUpdateTime``.
  Every node reports a ``CurrentImageId`` (the bed's first image until
  patched). Whether AWS keeps the instance id through a patch is not
  documented; the bed assumes it does, the case enrolment must handle.

The bed's nodes are its sshd nodes, so these go through the control API:
``POST /_bed/hyperpod/status`` (``cluster``, ``instance_id``, ``status``),
``POST /_bed/hyperpod/replace`` (``cluster``, ``instance_id``,
``successor``, ``address``); a patch is ``UpdateClusterSoftware``
(software.py).
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

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
        self.control_hooks["/_bed/hyperpod/iid"] = self._hyperpod_iid  # type: ignore[attr-defined]
        self.control_hooks["/_bed/iid-key"] = self._iid_key  # type: ignore[attr-defined]
        self.control_hooks["/_bed/hyperpod/imds"] = self._hyperpod_imds  # type: ignore[attr-defined]
        self.control_hooks["/_bed/ec2/imds"] = self._ec2_imds  # type: ignore[attr-defined]
        self.iid_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.started = time.time()

    def _hyperpod_imds(self, request: JsonObject) -> JsonObject:
        node = _cluster(self.region, str(request["cluster"])).nodes[str(request["instance_id"])]
        return self._imds(self._hyperpod_iid(request), str(node.instance_id))

    def _ec2_imds(self, request: JsonObject) -> JsonObject:
        from moto.ec2.models import ec2_backends

        from . import ACCOUNT

        instance = ec2_backends[ACCOUNT][self.region].get_instance(str(request["instance_id"]))
        # moto keeps launch_time as ISO 8601, with a "T" or a blank.
        launched = time.strptime(str(instance.launch_time)[:19].replace("T", " "), "%Y-%m-%d %H:%M:%S")
        return self._imds(
            self._signed(
                instance.id, time.strftime("%Y-%m-%dT%H:%M:%SZ", launched), str(instance.private_ip_address or "")
            ),
            instance.id,
        )

    def _imds(self, identity: JsonObject, instance_id: str) -> JsonObject:
        """An IMDSv2 of its own, serving `identity` and `instance_id`."""
        paths = {
            "/latest/dynamic/instance-identity/document": str(identity["document"]),
            "/latest/dynamic/instance-identity/signature": str(identity["signature"]),
            "/latest/meta-data/instance-id": instance_id,
        }
        tokens: set[str] = set()

        class Imds(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def _reply(self, status: int, body: str, ttl: str | None = None) -> None:
                data = body.encode()
                self.send_response(status)
                if ttl is not None:
                    # IMDS answers the token's TTL with it (the SDKs read it).
                    self.send_header("X-aws-ec2-metadata-token-ttl-seconds", ttl)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                if self.path != "/latest/api/token" or not ttl:
                    self._reply(400, "")
                    return
                token = secrets.token_urlsafe(32)
                tokens.add(token)
                self._reply(200, token, ttl)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in tokens:
                    self._reply(401, "")
                    return
                body = paths.get(self.path)
                self._reply(404, "") if body is None else self._reply(200, body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Imds)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return {"endpoint": f"http://127.0.0.1:{server.server_address[1]}"}

    def _iid_key(self, _request: JsonObject) -> JsonObject:
        spki = self.iid_key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return {"region": self.region, "spki": base64.b64encode(spki).decode()}

    def _hyperpod_iid(self, request: JsonObject) -> JsonObject:
        node = _cluster(self.region, str(request["cluster"])).nodes[str(request["instance_id"])]
        pending = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(getattr(node, "bed_pending", self.started)))
        return self._signed(str(node.instance_id), pending, getattr(node, "bed_ip", ""))

    def _signed(self, instance_id: str, pending: str, private_ip: str) -> JsonObject:
        """The identity document of an instance, and its signature."""
        from . import ACCOUNT

        document = json.dumps(
            {
                "accountId": ACCOUNT,
                "architecture": "x86_64",
                "availabilityZone": f"{self.region}a",
                "imageId": "ami-0123456789abcdef0",
                "instanceId": instance_id,
                "instanceType": "ml.m5.xlarge",
                "pendingTime": pending,
                "privateIp": private_ip,
                "region": self.region,
                "version": "2017-09-30",
            },
            indent=2,
        )
        signature = self.iid_key.sign(document.encode(), padding.PKCS1v15(), hashes.SHA256())
        return {"document": document, "signature": base64.b64encode(signature).decode()}

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
        new.bed_pending = time.time()
        cluster.nodes[new.instance_id] = new
        return {"instance_id": new.instance_id, "replaced": old.instance_id}
