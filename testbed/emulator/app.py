"""The emulator: a WSGI application of moto plus what the bed adds (the
package's ``__init__`` lists it all)."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from . import cbor, kms, lambda_api, patches, targets
from .associations import ASSOCIATION_ACTIONS, StateManager
from .autoscaling import LifecyclePlane
from .commands import Command, Faults, NodeEnv
from .ec2_tags import check_tags
from .errors import JSON_SERVICES, ApiError, denied, throttled
from .hyperpod import ClusterPlane
from .iam import Enforcer, Principal, Refused
from .lambda_api import LambdaApi
from .rotation import RotationPlane, patch_describe
from .secretsmanager import check_put, check_stage_move, sync_current
from .software import SoftwarePlane
from .ssm import OWN_SSM_ACTIONS
from .wire import JsonObject

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment


class Emulator(StateManager, RotationPlane, LambdaApi, LifecyclePlane, ClusterPlane, SoftwarePlane):
    """A WSGI application: moto plus the additions described above (the
    SSM command plane, ``ssm.SsmCommandPlane``, is State Manager's base)."""

    def __init__(self, region: str, bin_dir: str | None = None, log_dir: str | None = None):
        patches.apply()
        kms.apply()
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
        self.quota_used: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen[bytes]] = set()
        self.control_hooks: dict[str, Callable[[JsonObject], object]] = {}
        # Faults.hold_at: the held call ("service:Action"), the calls of its
        # actions seen, and whether its release lets it take effect.
        self.hold: dict[str, object] = {"held": None, "seen": 0, "effect": False}
        self.hold_released = threading.Event()
        self.base_env: dict[str, str] = {}
        self.bare_nodes = False
        self.association_slots: dict[str, threading.Lock] = {}
        self.s3_root = os.path.join(log_dir or os.environ.get("TMPDIR", "/tmp"), "s3")
        # bed.py --virtual-shared: (workdir, env) of the node virtual
        # instances share.
        self.virtual_shared: tuple[str, dict[str, str]] | None = None
        self.closing = False
        self._init_state_manager()
        patch_describe()
        self._init_rotation(log_dir or os.environ.get("TMPDIR", "/tmp"))
        self._init_lifecycle()
        self._init_cluster()
        self._init_software()
        self.control_hooks["/_bed/kms/private"] = self._kms_private

    # ----------------------------------------------------------------- WSGI

    def _over_quota(self, key: str, quota: int | None) -> bool:
        """A call of ``key`` beyond its quota in this one-second interval
        (under the lock): counted as ``key:throttled``."""
        if quota is None:
            return False
        second = int(time.time())
        start, used = self.quota_used.get(key, (second, 0))
        if start != second:
            start, used = second, 0
        self.quota_used[key] = (start, used + 1)
        if used < quota:
            return False
        self.counts[f"{key}:throttled"] = self.counts.get(f"{key}:throttled", 0) + 1
        return True

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        if path.startswith("/_bed/"):
            return self._control(path, environ.get("REQUEST_METHOD", "GET"), body, start_response)
        service, region, action = self._identify(environ, body)
        cbor_operation = cbor.operation(environ)
        principal: Principal | None = None
        if self.iam.enabled and not path.startswith("/moto-api/"):
            try:
                principal = self.iam.authenticate(environ, body, service, action)
                # CloudWatch signs as "monitoring"; its IAM actions are cloudwatch:*.
                iam_service = "cloudwatch" if service == "monitoring" else service
                self.iam.authorize(principal, iam_service, action, body, region or self.region, path)
            except Refused as e:
                with self.lock:
                    key = f"{service}:{action}"
                    self.counts[key] = self.counts.get(key, 0) + 1
                if cbor_operation:
                    return cbor.respond(start_response, f"{e.status} Error", {"__type": e.code, "message": e.message})
                return self._error(start_response, service, ApiError(e.code, e.message, e.status))
        with self.lock:
            key = f"{service}:{action}"
            self.counts[key] = self.counts.get(key, 0) + 1
            self.fault_counts[action] = self.fault_counts.get(action, 0) + 1
            faults = self.faults
            interrupt = next(
                (
                    f
                    for f in faults.fail_at
                    if f.get("action") in (action, key) and f.get("n") == self.fault_counts[action]
                ),
                None,
            )
            held = self._hold_here(action, key, faults, principal)
            is_throttled = (
                faults.throttle_fraction > 0
                and (not faults.throttle_actions or action in faults.throttle_actions or key in faults.throttle_actions)
                and self.rng.random() < faults.throttle_fraction
            ) or self._over_quota(key, faults.quotas.get(key))
        if faults.latency_ms:
            time.sleep(faults.latency_ms / 1000)
        try:
            if held and not self._held(key):
                raise ApiError("InternalFailure", f"held {action} call, released without effect", 500)
            denial = faults.deny_actions.get(action, faults.deny_actions.get(key))
            if denial is not None:
                raise denied(service, action, denial)
            if is_throttled:
                raise throttled(service)
            if interrupt is not None and not interrupt.get("after"):
                raise ApiError("InternalFailure", f"injected failure of {action} call {interrupt['n']}", 500)
            if service == "secretsmanager":
                self._check_secretsmanager(action, body, region or self.region)
            if service == "ec2":
                check_tags(action, body)
            if service == "secretsmanager" and action == "RotateSecret":
                return self._json(start_response, 200, self.rotate_secret(json.loads(body or b"{}")))
            if service == "autoscaling" and (completed := self.autoscaling(action, body)) is not None:
                size = str(len(completed[0]))
                start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", size)])
                return completed
            own = self._own(service, action, body, region or self.region, environ, principal, start_response)
            if own is not None:
                return own
        except ApiError as e:
            if cbor_operation:
                return cbor.respond(start_response, f"{e.status} Error", {"__type": e.code, "message": e.message})
            return self._error(start_response, service, e)
        if cbor_operation:
            request = cbor.decode(environ, body)
            target = f"GraniteServiceVersion20100801.{cbor_operation}"
            return cbor.call_moto(self.moto, environ, start_response, target, request)
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
        answer: Iterable[bytes] = self.moto(environ, start_response)  # moto's WSGI app returns Any
        return answer

    def _own(
        self,
        service: str,
        action: str,
        body: bytes,
        region: str,
        environ: WSGIEnvironment,
        principal: Principal | None,
        start_response: StartResponse,
    ) -> list[bytes] | None:
        """The answers the emulator makes itself rather than moto's (the
        package docstring): KMS signing, Lambda, SSM's command plane and
        State Manager. None for moto's."""
        path = environ.get("PATH_INFO", "")
        if service == "kms" and action in ("Sign", "GetPublicKey"):
            request = json.loads(body or b"{}")
            kms_call = kms.sign if action == "Sign" else kms.get_public_key
            return self._json(start_response, 200, kms_call(ACCOUNT, region, request))
        if service == "lambda" and action == "InvokeFunction":
            ok, result = self.invoke_function(path, body, region, ACCOUNT)
            data = json.dumps(result).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
            start_response("200 OK", headers if ok else [*headers, ("X-Amz-Function-Error", "Unhandled")])
            return [data]
        if service == "lambda":
            method = environ.get("REQUEST_METHOD", "GET")
            result = self.lambda_call(method, path, body, region, ACCOUNT)
            return self._json(start_response, 200, result)
        if service == "sagemaker" and action == "UpdateClusterSoftware":
            return self._json(start_response, 200, self.update_cluster_software(json.loads(body or b"{}")))
        if service == "ssm" and (action in OWN_SSM_ACTIONS or action in ASSOCIATION_ACTIONS):
            request = json.loads(body or b"{}")
            if action == "SendCommand":
                result = self._ssm_SendCommand(request, region, principal)
            else:
                result = getattr(self, f"_ssm_{action}")(request, region)
            return self._json(start_response, 200, result)
        return None

    @staticmethod
    def _check_secretsmanager(action: str, body: bytes, region: str) -> None:
        """Where Secrets Manager refuses what moto takes (secretsmanager.py)."""
        if action == "UpdateSecretVersionStage":
            check_stage_move(json.loads(body or b"{}"), region)
        if action == "PutSecretValue":
            check_put(json.loads(body or b"{}"), region)
            sync_current(json.loads(body or b"{}"), region)

    @staticmethod
    def _identify(environ: WSGIEnvironment, body: bytes) -> tuple[str, str, str]:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        service, region = "unknown", ""
        if "Credential=" in auth:
            scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
            if len(scope) >= 4:
                region, service = scope[2], scope[3]
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        operation = cbor.operation(environ)
        if service == "lambda":
            action = lambda_api.action(environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", ""))
        elif operation:
            action = operation
        elif target:
            action = target.rsplit(".", 1)[-1]
        else:
            form = parse_qs(body.decode("utf-8", "replace"))
            action = form.get("Action", ["unknown"])[0]
        return service, region, action

    @staticmethod
    def _json(start_response: StartResponse, status: int, payload: object) -> list[bytes]:
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

    def _error(self, start_response: StartResponse, service: str, e: ApiError) -> list[bytes]:
        if service in JSON_SERVICES or service in ("unknown", "lambda"):
            return self._json(start_response, e.status, {"__type": e.code, "message": e.message, **e.fields})
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

    def _kms_private(self, request: JsonObject) -> JsonObject:
        """A KMS key's private half in every form a leak would take, and
        the secret versions (of every secret, in every Region the bed
        uses) whose value holds any of them: what a test searches files
        with, and what it asserts is empty."""
        from moto.secretsmanager.models import secretsmanager_backends

        forms = kms.private_forms(ACCOUNT, request.get("region") or self.region, str(request["key_id"]))
        needles = [forms["pem"].split("-----")[2].strip().splitlines()[0], *list(forms.values())[1:]]
        found = []
        for region, backend in secretsmanager_backends[ACCOUNT].items():
            for name, secret in backend.secrets.items():
                for version_id, version in secret.versions.items():
                    value = str(version.get("secret_string", "")) + str(version.get("secret_binary", ""))
                    if any(n and n in value for n in needles):
                        found.append(f"{region}/{name}/{version_id}")
        return {**forms, "secrets_holding_it": found}

    def _hold_here(self, action: str, key: str, faults: Faults, principal: Principal | None) -> bool:
        """Whether this call is the one ``Faults.hold_at`` holds (under
        the lock): of its actions, by its signer (``"principal"``, a user
        name) when it names one."""
        actions = faults.hold_at.get("actions", [])
        if action not in actions and key not in actions:
            return False
        signer = faults.hold_at.get("principal")
        if signer is not None and (principal is None or principal.name != signer):
            return False
        seen = int(str(self.hold["seen"])) + 1
        self.hold["seen"] = seen
        return seen == faults.hold_at.get("n")

    def _held(self, key: str) -> bool:
        """Holds this call until the test releases it (its client killed
        meanwhile); whether it then takes effect."""
        with self.lock:
            self.hold["held"] = key
        self.hold_released.wait(timeout=300)
        with self.lock:
            return bool(self.hold["effect"])

    def _control(self, path: str, method: str, body: bytes, start_response: StartResponse) -> list[bytes]:
        try:
            request = json.loads(body) if body else {}
            result = self._control_dispatch(path, method, request)
            return self._json(start_response, 200, result)
        except (ValueError, KeyError, TypeError) as e:
            return self._json(start_response, 400, {"error": str(e)})

    def _control_dispatch(self, path: str, method: str, request: JsonObject) -> object:
        if path == "/_bed/health":
            return {"ok": True}
        if path == "/_bed/counts":
            with self.lock:
                return {**self.counts, **({"moto:tag-scans": patches.TAG_SCANS[0]} if patches.TAG_SCANS[0] else {})}
        if path == "/_bed/counts/reset" and method == "POST":
            with self.lock:
                self.counts.clear()
                patches.TAG_SCANS[0] = 0
            return {}
        if path == "/_bed/faults":
            with self.lock:
                if method == "POST":
                    self.faults.update(request)
                    self.rng = random.Random(self.faults.seed)
                    self.fault_counts.clear()
                    self.hold.update(held=None, seen=0, effect=False)
                    self.hold_released.clear()
                return self.faults.__dict__
        if path == "/_bed/ssm/unmanaged" and method == "POST":
            # These instances are not SSM's: it neither lists them
            # (DescribeInstanceInformation) nor sends to them, as for an
            # instance whose role lacks AmazonSSMManagedInstanceCore.
            with self.lock:
                self.unmanaged.update(request["InstanceIds"])
                return {"unmanaged": sorted(self.unmanaged)}
        if path == "/_bed/hold":
            with self.lock:
                return {"held": self.hold["held"], "seen": self.hold["seen"]}
        if path == "/_bed/hold/release" and method == "POST":
            with self.lock:
                self.hold["effect"] = bool(request.get("effect"))
            self.hold_released.set()
            return {}
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
                    patches.TARGET_HEALTH[key] = (request["state"], request.get("reason"), request.get("description"))
                else:
                    patches.TARGET_HEALTH.pop(key, None)
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
        if path == "/_bed/associations":
            return self.associations_json()
        if path == "/_bed/target-states" and method == "POST":
            # What DescribeTargetHealth would answer, without counting as a
            # call (the admission benchmark samples it every second).
            with targets.MODEL.lock:
                regs = targets.MODEL.groups.get(str(request["target_group_arn"]), {})
                return {f"{i}:{p}": r.state for (i, p), r in regs.items()}
        if path == "/_bed/hyperpod/patches":
            return self.patches_json()
        if path == "/_bed/associations/run" and method == "POST":
            self.run_associations(self.region, (request or {}).get("association_id"))
            return {}
        if path == "/_bed/associations/settle" and method == "POST":
            self.settle_associations()
            return self.associations_json()
        hook = self.control_hooks.get(path)
        if hook is not None and method == "POST":
            return hook(request)
        raise KeyError(f"no control endpoint {method} {path}")

    def close(self) -> None:
        """Stops dispatching and kills commands and functions still running."""
        targets.MODEL.stop()
        self.close_functions()
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
