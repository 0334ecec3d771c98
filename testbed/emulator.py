"""The AWS side of the hostkeyctl test bed.

The moto server (EC2, Secrets Manager, the rest of SSM) runs in-process
behind a WSGI layer that adds what the tests need and moto lacks:

* an SSM command plane that plays the SSM agent: every ``SendCommand`` of
  ``AWS-RunShellScript`` really runs its ``commands`` with bash once per
  targeted instance, in that node's environment, honouring MaxConcurrency,
  MaxErrors and executionTimeout, and ``ListCommandInvocations`` (paginated,
  with Details), ``GetCommandInvocation``, ``ListCommands`` and
  ``CancelCommand`` report it as SSM does;
* fault injection: failing instances, throttling, access denied, latency,
  and invocations that stay invisible for a while after SendCommand
  (eventual consistency);
* counters of API calls by ``service:Action``;
* Elastic Load Balancing v2 and SageMaker HyperPod as the bed sets them up
  (see ``Bed.register_lb_and_cluster``): target health that tests can set
  (moto reports every registered target healthy), HyperPod nodes with EC2-like
  instance ids and the bed's addresses as ``PrivatePrimaryIp`` and
  ``PrivateDnsHostname`` (moto names them ``GROUP-N`` with no address), and
  ``ListClusterNodes`` pagination that works (moto 5.2.1 fails on the second
  page: its nodes have no ``arn``);
* a small control API under ``/_bed/`` (see README.md beside this file).

Facts about SSM reproduced here: at most 50 InstanceIds per SendCommand;
Targets entries are ANDed; GetCommandInvocation cuts stdout at 24,000 and
stderr at 8,000 characters; a plugin's Output in ListCommandInvocations
(Details=true) is stdout, then ``----------ERROR-------`` and stderr, cut at
2,500 characters; when errors exceed MaxErrors no further instance is
started and the rest end Cancelled.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import parse_qs

from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from iam import Enforcer, Principal, Refused

ACCOUNT = DEFAULT_ACCOUNT_ID
# (target group ARN, target id) -> (state, reason, description), set through
# the control API; read by the patched FakeTargetGroup.health_for.
TARGET_HEALTH: dict[tuple[str, str], tuple[str, str | None, str | None]] = {}


def _patch_moto() -> None:
    """The ELBv2 and SageMaker behaviour moto lacks (module docstring)."""
    from moto.elbv2.models import FakeHealthStatus, FakeTargetGroup
    from moto.sagemaker.models import ClusterNode

    real_health_for = FakeTargetGroup.health_for

    def health_for(self: Any, target: dict[str, Any], ec2_backend: Any) -> Any:
        override = TARGET_HEALTH.get((self.arn, target["Id"]))
        if override is None:
            return real_health_for(self, target, ec2_backend)
        port = self.targets.get(target["Id"], {}).get("Port", self.port)
        state, reason, description = override
        return FakeHealthStatus(target["Id"], port, self.health_check_port, state, reason, description)

    FakeTargetGroup.health_for = health_for  # type: ignore[method-assign]

    def node_arn(self: Any) -> str:
        return f"arn:aws:sagemaker:{self.region_name}:{self.account_id}:cluster/{self.cluster_name}/node/{self.instance_id}"

    ClusterNode.arn = property(node_arn)  # type: ignore[attr-defined]
    real_describe = ClusterNode.describe

    def describe(self: Any) -> dict[str, Any]:
        out = real_describe(self)
        for attr, key in (("bed_ip", "PrivatePrimaryIp"), ("bed_dns", "PrivateDnsHostname")):
            if getattr(self, attr, None):
                out[key] = getattr(self, attr)
        return out

    ClusterNode.describe = describe  # type: ignore[method-assign]

    # EC2 pages DescribeInstances by instances (MaxResults 5 to 1000); moto
    # 5.2.1 pages by reservations, so the bed's 5000 virtual instances (50
    # reservations) came back as one page of 5000, slower to build than the
    # SDK's 30 s attempt timeout. Page by instances, as EC2 does.
    import copy

    from moto.core.responses import ActionResult
    from moto.ec2.responses.instances import InstanceResponse

    real_describe_instances = InstanceResponse.describe_instances

    def describe_instances(self: Any) -> Any:
        if "MaxResults" not in self.data or "InstanceId.1" in self.data:
            return real_describe_instances(self)
        self.error_on_dryrun()
        reservations = self.ec2_backend.describe_instances(filters=self._filters_from_querystring())
        pairs = [(r, i) for r in reservations for i in r.instances]
        token = self._get_param("NextToken")
        start = int(token) if token else 0
        end = start + int(self._get_param("MaxResults"))
        page: list[Any] = []
        for reservation, instance in pairs[start:end]:
            if not page or page[-1].id != reservation.id:
                page.append(copy.copy(reservation))
                page[-1].instances = []
            page[-1].instances.append(instance)
        next_token = str(end) if len(pairs) > end else None
        return ActionResult({"Reservations": page, "NextToken": next_token})

    InstanceResponse.describe_instances = describe_instances  # type: ignore[method-assign]

    # moto 5.2.1 reads one resource's tags by filtering every tag of the
    # region (describe_tags with a resource-id regex), so a tag filter over
    # N instances costs N x all tags: 14 ms per instance at 5000, 70 s for
    # one filtered DescribeInstances page, past the SDK's timeout (push to
    # 5000 failed with exit 4). Read the resource's own tags, as EC2 does.
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(self: Any) -> list[dict[str, str]]:
        rid = getattr(self, "id", None)
        if not rid:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
        own = list(self.ec2_backend.tags.get(rid, {}).items())
        return [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in own]

    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]

    # Every scan of all the region's tags, counted (GET /_bed/counts,
    # "moto:tag-scans"): a test holds that a tag filter scans none.
    from moto.ec2.models.tags import TagBackend

    real_describe_tags = TagBackend.describe_tags

    def describe_tags(self: Any, filters: Any = None) -> Any:
        TAG_SCANS[0] += 1
        return real_describe_tags(self, filters)

    TagBackend.describe_tags = describe_tags  # type: ignore[method-assign]


TAG_SCANS = [0]


_patch_moto()
STDOUT_LIMIT = 24_000
STDERR_LIMIT = 8_000
PLUGIN_OUTPUT_LIMIT = 2_500
MAX_INSTANCE_IDS = 50
PLUGIN_NAME = "aws:runShellScript"
JSON_SERVICES = {"ssm", "secretsmanager", "sagemaker"}
OWN_SSM_ACTIONS = {"SendCommand", "ListCommandInvocations", "GetCommandInvocation", "ListCommands", "CancelCommand"}
FINAL = {"Success", "Failed", "TimedOut", "Cancelled"}


@dataclass
class NodeEnv:
    """Where and how the agent runs commands for one instance."""

    instance_id: str
    name: str
    workdir: str
    env: dict[str, str]
    virtual: bool = False


@dataclass
class Faults:
    """Faults the tests switch on through ``POST /_bed/faults``."""

    fail_instances: dict[str, str] = field(default_factory=dict)
    throttle_fraction: float = 0.0
    throttle_actions: list[str] = field(default_factory=list)
    deny_actions: dict[str, str] = field(default_factory=dict)
    latency_ms: int = 0
    invisible_ms: int = 0
    # Deterministic interruption: [{"action": "UpdateSecretVersionStage",
    # "n": 1, "after": true}] answers the Nth call of that action (counted
    # from when the faults were set) with HTTP 500 InternalFailure, after
    # the call took effect when "after" is true (a client killed before it
    # read the answer), before it otherwise.
    fail_at: list[dict[str, Any]] = field(default_factory=list)
    # SendCommand of these documents is denied (e.g. AWS-RunShellScript:
    # a role that may only send hostkeyctl's own document).
    deny_documents: list[str] = field(default_factory=list)
    seed: int = 1

    def update(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if not hasattr(self, key):
                raise ValueError(f"unknown fault {key!r}")
            setattr(self, key, value)


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass
class Invocation:
    instance_id: str
    instance_name: str
    status: str = "Pending"
    details: str = "Pending"
    response_code: int = -1
    stdout: str = ""
    stderr: str = ""
    started: float | None = None
    ended: float | None = None


@dataclass
class Command:
    command_id: str
    document: str
    parameters: dict[str, list[str]]
    instance_ids: list[str]
    targets: list[dict[str, Any]]
    comment: str
    max_concurrency: str
    max_errors: str
    timeout_seconds: int
    requested: float
    invocations: dict[str, Invocation]
    # The document version asked for ("" for the default).
    document_version: str = ""
    # What the agent runs: the document's runCommand lines with the
    # parameters interpolated, and its timeout.
    script: list[str] = field(default_factory=list)
    execution_timeout: int = 3600
    errors: int = 0
    cancelled: bool = False

    def status(self) -> str:
        states = [i.status for i in self.invocations.values()]
        if any(s not in FINAL for s in states):
            return "Pending" if all(s == "Pending" for s in states) else "InProgress"
        if self.cancelled:
            return "Cancelled"
        if all(s == "Success" for s in states):
            return "Success"
        if any(s == "TimedOut" for s in states) and not any(s == "Failed" for s in states):
            return "TimedOut"
        return "Failed"


def _limit(value: str, total: int, default: int) -> int:
    """Resolves an SSM rate value ("10" or "25%") against ``total`` targets."""
    value = (value or "").strip()
    if not value:
        return default
    if value.endswith("%"):
        return max(1, math.floor(total * int(value[:-1]) / 100)) if total else 1
    return int(value)


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Emulator:
    """A WSGI application: moto plus the additions described above."""

    def __init__(self, region: str, bin_dir: str | None = None):
        self.region = region
        self.bin_dir = bin_dir
        self.moto = DomainDispatcherApplication(create_backend_app)
        self.faults = Faults()
        # The shipped IAM policies, enforced once the bed is set up (iam.py).
        self.iam = Enforcer(ACCOUNT)
        self.rng = random.Random(self.faults.seed)
        self.nodes: dict[str, NodeEnv] = {}
        # Instances whose SSM agent is not registered (a pull-only fleet):
        # SendCommand refuses them, as SSM does unmanaged instances.
        self.unmanaged: set[str] = set()
        self.commands: dict[str, Command] = {}
        self.command_order: list[str] = []
        self.counts: dict[str, int] = {}
        self.fault_counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen] = set()
        self.control_hooks: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.base_env: dict[str, str] = {}
        # bed.py --virtual-shared: (workdir, env) of the node virtual
        # instances share.
        self.virtual_shared: tuple[str, dict[str, str]] | None = None
        self.closing = False

    # ----------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        if path.startswith("/_bed/"):
            return self._control(path, environ.get("REQUEST_METHOD", "GET"), body, start_response)
        service, region, action = self._identify(environ, body)
        principal: Principal | None = None
        if self.iam.enabled and not path.startswith("/moto-api/"):
            try:
                principal = self.iam.authenticate(environ, body, service, action)
                self.iam.authorize(principal, service, action, body, region or self.region)
            except Refused as e:
                with self.lock:
                    key = f"{service}:{action}"
                    self.counts[key] = self.counts.get(key, 0) + 1
                return self._error(start_response, service, ApiError(e.code, e.message, e.status))
        with self.lock:
            key = f"{service}:{action}"
            self.counts[key] = self.counts.get(key, 0) + 1
            self.fault_counts[action] = self.fault_counts.get(action, 0) + 1
            faults = self.faults
            interrupt = next(
                (f for f in faults.fail_at if f.get("action") in (action, key) and f.get("n") == self.fault_counts[action]),
                None,
            )
            throttled = faults.throttle_fraction > 0 and (
                not faults.throttle_actions or action in faults.throttle_actions or key in faults.throttle_actions
            ) and self.rng.random() < faults.throttle_fraction
        if faults.latency_ms:
            time.sleep(faults.latency_ms / 1000)
        try:
            denied = faults.deny_actions.get(action, faults.deny_actions.get(key))
            if denied is not None:
                raise self._denied(service, action, denied)
            if throttled:
                raise self._throttled(service)
            if interrupt is not None and not interrupt.get("after"):
                raise ApiError("InternalFailure", f"injected failure of {action} call {interrupt['n']}", 500)
            if service == "secretsmanager" and action == "UpdateSecretVersionStage":
                self._check_stage_move(json.loads(body or b"{}"), region or self.region)
            if service == "secretsmanager" and action == "PutSecretValue":
                self._sync_current(json.loads(body or b"{}"), region or self.region)
            if service == "ssm" and action in OWN_SSM_ACTIONS:
                request = json.loads(body or b"{}")
                if action == "SendCommand":
                    result = self._ssm_SendCommand(request, region or self.region, principal)
                else:
                    result = getattr(self, f"_ssm_{action}")(request, region or self.region)
                return self._json(start_response, 200, result)
        except ApiError as e:
            return self._error(start_response, service, e)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        if interrupt is not None:
            # Let the call take effect, then lose the answer.
            b"".join(self.moto(environ, lambda *_args, **_kw: None))
            return self._error(
                start_response,
                service,
                ApiError("InternalFailure", f"injected: {action} call {interrupt['n']} took effect, answer lost", 500),
            )
        return self.moto(environ, start_response)

    @staticmethod
    def _sync_current(request: dict[str, Any], region: str) -> None:
        """PutSecretValue with AWSCURRENT moves the label from the version
        that holds it (which becomes AWSPREVIOUS). moto 5.2 moves it from its
        own `default_version_id`, which UpdateSecretVersionStage never
        updates: after a rotation two versions held AWSCURRENT and stage
        reads returned the old one. Point it at the real holder first."""
        from moto.secretsmanager.models import secretsmanager_backends

        if "AWSCURRENT" not in (request.get("VersionStages") or []):
            return
        backend = secretsmanager_backends[ACCOUNT][region]
        secret_id = request.get("SecretId", "")
        if secret_id not in backend.secrets:
            return
        secret = backend.secrets[secret_id]
        for version_id, version in secret.versions.items():
            if "AWSCURRENT" in version.get("version_stages", []):
                secret.default_version_id = version_id

    @staticmethod
    def _check_stage_move(request: dict[str, Any], region: str) -> None:
        """Secrets Manager refuses to move a staging label that another
        version holds unless RemoveFromVersionId names that version; moto 5.2
        enforces this for AWSCURRENT only. hostkeyctl relies on the refusal
        to claim AWSPENDING atomically."""
        from moto.secretsmanager.models import secretsmanager_backends

        if request.get("RemoveFromVersionId") or not request.get("MoveToVersionId"):
            return
        backend = secretsmanager_backends[ACCOUNT][region]
        secret_id, label = request.get("SecretId", ""), request.get("VersionStage", "")
        if secret_id not in backend.secrets:
            return
        secret = backend.secrets[secret_id]
        for version_id, version in secret.versions.items():
            if label in version.get("version_stages", []) and version_id != request["MoveToVersionId"]:
                raise ApiError(
                    "InvalidParameterException",
                    f"The parameter RemoveFromVersionId can't be empty. Staging label {label} is currently "
                    f"attached to version {version_id}, so you must explicitly reference that version in "
                    "RemoveFromVersionId.",
                )

    @staticmethod
    def _identify(environ: dict[str, Any], body: bytes) -> tuple[str, str, str]:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        service, region = "unknown", ""
        if "Credential=" in auth:
            scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
            if len(scope) >= 4:
                region, service = scope[2], scope[3]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            action = target.rsplit(".", 1)[-1]
        else:
            form = parse_qs(body.decode("utf-8", "replace"))
            action = form.get("Action", ["unknown"])[0]
        return service, region, action

    def _denied(self, service: str, action: str, message: str) -> ApiError:
        text = message or (
            f"User: arn:aws:sts::{ACCOUNT}:assumed-role/test/test is not authorized to perform: "
            f"{service}:{action} because no identity-based policy allows the {service}:{action} action"
        )
        if service in JSON_SERVICES:
            return ApiError("AccessDeniedException", text, 400)
        return ApiError("UnauthorizedOperation", text, 403)

    @staticmethod
    def _throttled(service: str) -> ApiError:
        if service in JSON_SERVICES:
            return ApiError("ThrottlingException", "Rate exceeded", 400)
        return ApiError("RequestLimitExceeded", "Request limit exceeded.", 503)

    @staticmethod
    def _json(start_response: Callable, status: int, payload: Any) -> list[bytes]:
        data = json.dumps(payload).encode()
        start_response(
            f"{status} {'OK' if status == 200 else 'Error'}",
            [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("Content-Length", str(len(data))),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ],
        )
        return [data]

    def _error(self, start_response: Callable, service: str, e: ApiError) -> list[bytes]:
        if service in JSON_SERVICES or service == "unknown":
            return self._json(start_response, e.status, {"__type": e.code, "message": e.message})
        if service == "ec2":
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                f"<Code>{e.code}</Code><Message>{e.message}</Message></Error></Errors>"
                f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
            ).encode()
        else:  # the query protocol (Elastic Load Balancing, IAM)
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse><Error><Type>Sender</Type>'
                f"<Code>{e.code}</Code><Message>{e.message}</Message></Error>"
                f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
            ).encode()
        start_response(f"{e.status} Error", [("Content-Type", "text/xml"), ("Content-Length", str(len(xml)))])
        return [xml]

    # --------------------------------------------------------- control API

    def _control(self, path: str, method: str, body: bytes, start_response: Callable) -> list[bytes]:
        try:
            request = json.loads(body) if body else {}
            result = self._control_dispatch(path, method, request)
            return self._json(start_response, 200, result)
        except (ValueError, KeyError, TypeError) as e:
            return self._json(start_response, 400, {"error": str(e)})

    def _control_dispatch(self, path: str, method: str, request: dict[str, Any]) -> Any:
        if path == "/_bed/health":
            return {"ok": True}
        if path == "/_bed/counts":
            with self.lock:
                return {**self.counts, **({"moto:tag-scans": TAG_SCANS[0]} if TAG_SCANS[0] else {})}
        if path == "/_bed/counts/reset" and method == "POST":
            with self.lock:
                self.counts.clear()
                TAG_SCANS[0] = 0
            return {}
        if path == "/_bed/faults":
            with self.lock:
                if method == "POST":
                    self.faults.update(request)
                    self.rng = random.Random(self.faults.seed)
                    self.fault_counts.clear()
                return self.faults.__dict__
        if path == "/_bed/faults/reset" and method == "POST":
            with self.lock:
                self.faults = Faults()
                self.rng = random.Random(self.faults.seed)
                self.fault_counts.clear()
            return {}
        if path == "/_bed/target-health" and method == "POST":
            key = (request["target_group_arn"], request["id"])
            with self.lock:
                if request.get("state"):
                    TARGET_HEALTH[key] = (request["state"], request.get("reason"), request.get("description"))
                else:
                    TARGET_HEALTH.pop(key, None)
            return {}
        if path == "/_bed/iam":
            with self.iam.lock:
                return {"enabled": self.iam.enabled, **self.iam.usage.as_json()}
        if path == "/_bed/iam/reset" and method == "POST":
            with self.iam.lock:
                self.iam.usage.allowed.clear()
                self.iam.usage.denied.clear()
            return {}
        if path == "/_bed/commands":
            with self.lock:
                return [
                    {
                        "CommandId": c.command_id,
                        "DocumentName": c.document,
                        "DocumentVersion": c.document_version,
                        "Parameters": c.parameters,
                        "InstanceIds": c.instance_ids,
                        "Targets": c.targets,
                        "Comment": c.comment,
                        "Invocations": {
                            i.instance_id: {"Status": i.status, "ResponseCode": i.response_code}
                            for i in c.invocations.values()
                        },
                    }
                    for c in (self.commands[cid] for cid in self.command_order)
                ]
        hook = self.control_hooks.get(path)
        if hook is not None and method == "POST":
            return hook(request)
        raise KeyError(f"no control endpoint {method} {path}")

    # ------------------------------------------------------------- targets

    def _running_instances(self, region: str) -> list[Any]:
        return [i for i in ec2_backends[ACCOUNT][region].all_instances() if i._state.name == "running"]

    @staticmethod
    def _tags(instance: Any) -> dict[str, str]:
        return {t["key"]: t["value"] for t in instance.get_tags()}

    def _resolve_targets(self, request: dict[str, Any], region: str) -> list[Any]:
        ids = request.get("InstanceIds") or []
        targets = request.get("Targets") or []
        if ids and targets:
            raise ApiError("ValidationException", "Specify either InstanceIds or Targets, not both.")
        if not ids and not targets:
            raise ApiError("ValidationException", "InstanceIds or Targets is required.")
        running = self._running_instances(region)
        if ids:
            if len(ids) > MAX_INSTANCE_IDS:
                raise ApiError(
                    "ValidationException",
                    "1 validation error detected: Value at 'instanceIds' failed to satisfy constraint: "
                    f"Member must have length less than or equal to {MAX_INSTANCE_IDS}",
                )
            by_id = {i.id: i for i in running if i.id not in self.unmanaged}
            missing = [i for i in ids if i not in by_id]
            if missing:
                raise ApiError("InvalidInstanceId", f"Instances {missing} not in a valid state for account {ACCOUNT}")
            seen: list[str] = []
            return [by_id[i] for i in ids if not (i in seen or seen.append(i))]
        chosen = running
        for target in targets:
            key, values = target.get("Key", ""), target.get("Values", [])
            if key == "InstanceIds":
                chosen = [i for i in chosen if i.id in values]
            elif key.startswith("tag:"):
                name = key[4:]
                chosen = [i for i in chosen if self._tags(i).get(name) in values]
            elif key == "tag-key":
                chosen = [i for i in chosen if any(v in self._tags(i) for v in values)]
            else:
                raise ApiError("ValidationException", f"unsupported target key {key!r}")
        return chosen

    # ------------------------------------------------------------- SSM API

    def _ssm_SendCommand(self, request: dict[str, Any], region: str, principal: Principal | None = None) -> dict[str, Any]:
        document = request.get("DocumentName", "")
        if document in self.faults.deny_documents:
            raise self._denied(
                "ssm",
                "SendCommand",
                f"User: arn:aws:sts::{ACCOUNT}:assumed-role/test/test is not authorized to perform: ssm:SendCommand "
                f"on resource: arn:aws:ssm:{region}::document/{document}",
            )
        parameters = request.get("Parameters") or {}
        if document == "AWS-RunShellScript":
            commands = parameters.get("commands")
            if not commands:
                raise ApiError("InvalidParameters", "Parameter 'commands' is required for AWS-RunShellScript.")
            timeout = int((parameters.get("executionTimeout") or ["3600"])[0])
        else:
            commands, timeout = self._render_document(document, request.get("DocumentVersion"), parameters, region)
        instances = self._resolve_targets(request, region)
        try:
            for instance in instances:
                self.iam.instance(principal, "SendCommand", instance.id, self._tags(instance), region)
        except Refused as e:
            raise ApiError(e.code, e.message, e.status) from None
        command_id = str(uuid.uuid4())
        invocations = {}
        for instance in instances:
            invocations[instance.id] = Invocation(instance.id, self._tags(instance).get("Name", ""))
        command = Command(
            command_id=command_id,
            document=document,
            parameters=parameters,
            instance_ids=list(request.get("InstanceIds") or []),
            targets=list(request.get("Targets") or []),
            comment=request.get("Comment", ""),
            max_concurrency=request.get("MaxConcurrency") or "50",
            max_errors=request.get("MaxErrors") or "0",
            timeout_seconds=int(request.get("TimeoutSeconds") or 3600),
            requested=time.time(),
            invocations=invocations,
            script=list(commands),
            execution_timeout=timeout,
            document_version=str(request.get("DocumentVersion") or ""),
        )
        with self.lock:
            self.commands[command_id] = command
            self.command_order.append(command_id)
        threading.Thread(target=self._dispatch, args=(command,), daemon=True).start()
        return {"Command": self._command_json(command)}

    @staticmethod
    def _render_document(
        name: str, version: str | None, parameters: dict[str, list[str]], region: str
    ) -> tuple[list[str], int]:
        """What SSM does with a Command document before the agent runs it:
        every parameter must be declared, present (or defaulted), a single
        value for a String, and match its allowedPattern in full; then the
        runCommand lines get the values interpolated."""
        from moto.ssm.models import ssm_backends

        try:
            info = ssm_backends[ACCOUNT][region].get_document(name, version or "", "", "JSON")
        except Exception:  # moto's InvalidDocument, with its own message
            raise ApiError("InvalidDocument", f"Document {name} does not exist in your account.") from None
        content = json.loads(info["Content"])
        declared: dict[str, Any] = content.get("parameters", {})
        unknown = sorted(set(parameters) - set(declared))
        if unknown:
            raise ApiError("InvalidParameters", f"Parameters {unknown} are not defined in document {name}.")
        values: dict[str, str] = {}
        for pname, spec in declared.items():
            given = parameters.get(pname)
            if given is None:
                if "default" not in spec:
                    raise ApiError("InvalidParameters", f"Parameter \"{pname}\" is required by document {name}.")
                value = str(spec["default"])
            elif spec.get("type", "String") == "String" and len(given) != 1:
                raise ApiError("InvalidParameters", f"Parameter \"{pname}\" takes one value.")
            else:
                value = given[0]
            pattern = spec.get("allowedPattern")
            if pattern is not None and re.fullmatch(pattern, value) is None:
                raise ApiError(
                    "InvalidParameters",
                    f"Parameter \"{pname}\" \"{value}\" failed to satisfy constraint: {pattern}",
                )
            values[pname] = value
        lines: list[str] = []
        timeout = 3600
        for step in content.get("mainSteps", []):
            if step.get("action") != "aws:runShellScript":
                raise ApiError("InvalidDocument", f"the bed runs aws:runShellScript steps only, not {step.get('action')}")
            inputs = step.get("inputs", {})
            timeout = int(inputs.get("timeoutSeconds", timeout))
            for line in inputs.get("runCommand", []):
                lines.append(re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], line))
        return lines, timeout

    def _command_json(self, c: Command) -> dict[str, Any]:
        states = [i.status for i in c.invocations.values()]
        return {
            "CommandId": c.command_id,
            "DocumentName": c.document,
            "DocumentVersion": "$DEFAULT",
            "Comment": c.comment,
            "Parameters": c.parameters,
            "InstanceIds": c.instance_ids,
            "Targets": c.targets,
            "RequestedDateTime": c.requested,
            "Status": c.status(),
            "StatusDetails": c.status(),
            "MaxConcurrency": c.max_concurrency,
            "MaxErrors": c.max_errors,
            "TargetCount": len(states),
            "CompletedCount": sum(s in FINAL for s in states),
            "ErrorCount": sum(s in ("Failed", "TimedOut") for s in states),
            "DeliveryTimedOutCount": 0,
            "TimeoutSeconds": c.timeout_seconds,
        }

    def _visible(self, c: Command) -> bool:
        return time.time() >= c.requested + self.faults.invisible_ms / 1000

    def _find(self, command_id: str) -> Command:
        with self.lock:
            c = self.commands.get(command_id)
        if c is None or not self._visible(c):
            raise ApiError("InvalidCommandId", f"Command {command_id} not found")
        return c

    def _ssm_ListCommandInvocations(self, request: dict[str, Any], region: str) -> dict[str, Any]:
        max_results = int(request.get("MaxResults") or 50)
        if not 1 <= max_results <= 50:
            raise ApiError("ValidationException", "MaxResults must be between 1 and 50")
        details = bool(request.get("Details"))
        wanted = request.get("CommandId")
        with self.lock:
            commands = [self.commands[c] for c in reversed(self.command_order)]
        rows = []
        for c in commands:
            if (wanted and c.command_id != wanted) or not self._visible(c):
                continue
            for inv in list(c.invocations.values()):
                if request.get("InstanceId") and inv.instance_id != request["InstanceId"]:
                    continue
                rows.append(self._invocation_json(c, inv, details))
        start = int(request.get("NextToken") or 0)
        page = rows[start : start + max_results]
        result: dict[str, Any] = {"CommandInvocations": page}
        if start + max_results < len(rows):
            result["NextToken"] = str(start + max_results)
        return result

    @staticmethod
    def _invocation_json(c: Command, inv: Invocation, details: bool) -> dict[str, Any]:
        row: dict[str, Any] = {
            "CommandId": c.command_id,
            "InstanceId": inv.instance_id,
            "InstanceName": inv.instance_name,
            "Comment": c.comment,
            "DocumentName": c.document,
            "DocumentVersion": "$DEFAULT",
            "RequestedDateTime": c.requested,
            "Status": inv.status,
            "StatusDetails": inv.details,
            "StandardOutputUrl": "",
            "StandardErrorUrl": "",
            "CommandPlugins": [],
        }
        if details:
            output = inv.stdout
            if inv.stderr:
                output += "\n----------ERROR-------\n" + inv.stderr
            plugin = {
                "Name": PLUGIN_NAME,
                "Status": inv.status,
                "StatusDetails": inv.details,
                "ResponseCode": inv.response_code,
                "Output": output[:PLUGIN_OUTPUT_LIMIT],
                "StandardOutputUrl": "",
                "StandardErrorUrl": "",
            }
            if inv.started is not None:
                plugin["ResponseStartDateTime"] = inv.started
            if inv.ended is not None:
                plugin["ResponseFinishDateTime"] = inv.ended
            row["CommandPlugins"] = [plugin]
        return row

    def _ssm_GetCommandInvocation(self, request: dict[str, Any], region: str) -> dict[str, Any]:
        try:
            c = self._find(request.get("CommandId", ""))
        except ApiError:
            raise ApiError("InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)") from None
        inv = c.invocations.get(request.get("InstanceId", ""))
        if inv is None:
            raise ApiError("InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)")
        elapsed = (inv.ended or time.time()) - inv.started if inv.started else 0
        return {
            "CommandId": c.command_id,
            "InstanceId": inv.instance_id,
            "Comment": c.comment,
            "DocumentName": c.document,
            "DocumentVersion": "$DEFAULT",
            "PluginName": PLUGIN_NAME,
            "ResponseCode": inv.response_code,
            "ExecutionStartDateTime": _iso(inv.started),
            "ExecutionElapsedTime": f"PT{elapsed:.3f}S",
            "ExecutionEndDateTime": _iso(inv.ended),
            "Status": inv.status,
            "StatusDetails": inv.details,
            "StandardOutputContent": inv.stdout,
            "StandardOutputUrl": "",
            "StandardErrorContent": inv.stderr,
            "StandardErrorUrl": "",
        }

    def _ssm_ListCommands(self, request: dict[str, Any], region: str) -> dict[str, Any]:
        max_results = int(request.get("MaxResults") or 50)
        with self.lock:
            commands = [self.commands[c] for c in reversed(self.command_order)]
        rows = [
            self._command_json(c)
            for c in commands
            if self._visible(c)
            and (not request.get("CommandId") or c.command_id == request["CommandId"])
            and (not request.get("InstanceId") or request["InstanceId"] in c.invocations)
        ]
        start = int(request.get("NextToken") or 0)
        result: dict[str, Any] = {"Commands": rows[start : start + max_results]}
        if start + max_results < len(rows):
            result["NextToken"] = str(start + max_results)
        return result

    def _ssm_CancelCommand(self, request: dict[str, Any], region: str) -> dict[str, Any]:
        c = self._find(request.get("CommandId", ""))
        with self.lock:
            c.cancelled = True
        return {}

    # --------------------------------------------------------------- agent

    def _dispatch(self, c: Command) -> None:
        """Runs a command on its instances as the SSM agents would."""
        total = len(c.invocations)
        concurrency = max(1, _limit(c.max_concurrency, total, 50))
        max_errors = _limit(c.max_errors, total, 0)
        slots = threading.Semaphore(concurrency)
        with ThreadPoolExecutor(max_workers=min(concurrency, 64)) as pool:
            for inv in list(c.invocations.values()):
                slots.acquire()
                with self.lock:
                    stop = c.cancelled or c.errors > max_errors or self.closing
                if stop:
                    slots.release()
                    self._finish(c, inv, "Cancelled", "Cancelled", -1, "", "")
                    continue

                def work(inv: Invocation = inv) -> None:
                    try:
                        self._execute(c, inv)
                    finally:
                        slots.release()

                pool.submit(work)

    def _finish(self, c: Command, inv: Invocation, status: str, details: str, code: int, out: str, err: str) -> None:
        with self.lock:
            inv.stdout = out[:STDOUT_LIMIT]
            inv.stderr = err[:STDERR_LIMIT]
            inv.response_code = code
            inv.ended = time.time()
            if inv.started is None:
                inv.started = inv.ended
            inv.status, inv.details = status, details
            if status in ("Failed", "TimedOut"):
                c.errors += 1

    def _execute(self, c: Command, inv: Invocation) -> None:
        with self.lock:
            inv.status = inv.details = "InProgress"
            inv.started = time.time()
            injected = self.faults.fail_instances.get(inv.instance_id)
        if injected is not None:
            self._finish(c, inv, "Failed", "Failed", 1, "", injected or "injected failure")
            return
        node = self.nodes.get(inv.instance_id)
        script = "\n".join(c.script) + "\n"
        timeout = c.execution_timeout
        env = dict(self.base_env)
        workdir = os.getcwd()
        if node is not None:
            env.update(node.env)
            workdir = node.workdir
        else:
            # A virtual instance has no sshd and no files: its hostkeyctl is
            # the stand-in in virtual-bin/, and a real one would find no ssh
            # directory and refuse before writing anything. Shared
            # (bed.py --virtual-shared), the stand-in installs on the node
            # every virtual instance shares.
            here = os.path.dirname(os.path.abspath(__file__))
            if self.virtual_shared is not None:
                workdir, shared_env = self.virtual_shared
                env.update(shared_env)
            else:
                env["HOSTKEYCTL_SSH_DIR"] = "/nonexistent/virtual-instance/etc/ssh"
            env["PATH"] = os.path.join(here, "virtual-bin") + ":" + env.get("PATH", "")
        env["AWS_SSM_INSTANCE_ID"] = inv.instance_id
        try:
            proc = subprocess.Popen(
                ["bash", "-c", script],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            self._finish(c, inv, "Failed", "Failed", 1, "", f"agent could not start bash: {e}")
            return
        with self.lock:
            self.processes.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            self._finish(
                c,
                inv,
                "TimedOut",
                "ExecutionTimedOut",
                -1,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace") + f"\nfailed to run commands: exceeded the execution timeout of {timeout}s",
            )
            return
        finally:
            with self.lock:
                self.processes.discard(proc)
        status = "Success" if proc.returncode == 0 else "Failed"
        self._finish(
            c, inv, status, status, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )

    def close(self) -> None:
        """Stops dispatching and kills commands still running."""
        with self.lock:
            self.closing = True
            for c in self.commands.values():
                c.cancelled = True
            procs = list(self.processes)
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
