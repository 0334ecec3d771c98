"""Secrets Manager's scheduled rotation, as the bed models it.

``RotateSecret`` is handled here, not by moto (moto 5.2 invokes Lambda
through Docker). Each behaviour names its source:

* with ``RotationLambdaARN`` / ``RotationRules`` it stores the schedule
  (``DescribeSecret`` then shows ``RotationEnabled``, ``RotationLambdaARN``,
  ``RotationRules`` with ``ScheduleExpression``, ``NextRotationDate``)
  (RotateSecret and DescribeSecret API reference);
* it is refused while AWSPENDING is on a version other than AWSCURRENT
  (RotateSecret API reference: "any later invocation of RotateSecret
  assumes that a previous rotation request is still in progress and
  returns an error");
* **before any step, Secrets Manager stages the token as AWSPENDING on an
  empty version** (DescribeSecret API reference: "During rotation, Secrets
  Manager creates an AWSPENDING version ID before creating the new secret
  version"; RotateSecret: a failed rotation can leave "AWSPENDING attached
  to an empty secret version"; moto 5.2.1's own ``rotate_secret`` does
  exactly this, and AWS's rotation function templates,
  ``aws-samples/aws-secrets-manager-rotation-lambdas``
  ``SecretsManagerRotationTemplate/lambda_function.py``, refuse every step
  whose token is not AWSPENDING and read the empty version as
  ResourceNotFoundException in createSecret). Reading that version gives
  ResourceNotFoundException (moto's ``SecretHasNoValueException``), and
  ``PutSecretValue`` with the token stores the value on it;
* ``RotateImmediately`` (default true) runs the four steps, one after
  another, each with the same ``ClientRequestToken``; false stages the
  token as AWSPENDING on a copy of the current value (moto 5.2.1), runs
  ``testSecret`` alone, then takes AWSPENDING off again (RotateSecret API
  reference: "Secrets Manager tests the rotation configuration by running
  the testSecret step ... The test creates an AWSPENDING version of the
  secret and then removes it");
* the steps run in the background, as RotateSecret is asynchronous (API
  reference: "starts the asynchronous process"); a failed step ends the
  rotation and leaves AWSPENDING where the function left it (AWS retries a
  failed rotation a number of times it does not document; the bed does not
  retry), and a rotation that completes sets ``LastRotatedDate`` and the
  next date;
* a test-driven clock (``/_bed/clock``) ages every date the emulator keeps
  (versions' ``CreatedDate``, the last and next rotation, and the
  ``created`` date inside each hostkeyctl document, which dates an
  announcement) by the time it is advanced, so that the real clock of the
  function and of hostkeyctl sees the time pass; it then starts every
  rotation that fell due.

Each function is a real ``bootstrap`` (the shipped binary), run as Lambda
runs it (functions.py: the runtime API, execution environments, reserved
concurrency). The Lambda API's
``GetFunctionConfiguration`` and ``UpdateFunctionConfiguration`` (its
``Environment`` and ``RevisionId``, Lambda API reference) answer for the
registered functions.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT

from .errors import ApiError
from .functions import STEP_TIMEOUT, Function
from .wire import Answer, JsonObject

if TYPE_CHECKING:
    from moto.secretsmanager.models import FakeSecret, SecretsManagerBackend

STEPS = ("createSecret", "setSecret", "testSecret", "finishSecret")


class Step(TypedDict):
    """One step a rotation ran: the function's answer (raw JSON, or its
    text when it is none) or its error."""

    step: str
    ok: bool
    result: object


class Rotation(TypedDict):
    """A rotation Secrets Manager started (``GET /_bed/rotations``)."""

    secret: str
    token: str
    steps: list[Step]
    status: str
    immediately: bool


def aged_document(text: str, delta: float) -> str:
    """A hostkeyctl document with its ``created`` date ``delta`` seconds
    earlier (the announcement's date the promotion gate reads); any other
    value as it is."""
    try:
        document = json.loads(text)
    except ValueError:
        return text
    if not isinstance(document, dict) or not str(document.get("format", "")).startswith("hostkeyctl/"):
        return text
    created = document.get("created")
    if not isinstance(created, str):
        return text
    try:
        when = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return text
    aged = when - datetime.timedelta(seconds=delta)
    document["created"] = aged.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(document)


def rate_seconds(expression: str | None, days: int | None) -> float | None:
    """The period of ``rate(N days|hours)`` or ``AutomaticallyAfterDays``;
    ``None`` for ``cron()``, which the bed does not model."""
    if days:
        return days * 86400.0
    if not expression or not expression.startswith("rate("):
        return None
    n, unit = expression[5:-1].split()
    return int(n) * (86400.0 if unit.startswith("day") else 3600.0)


class RotationPlane:
    """Mixed into the emulator: RotateSecret, the functions, the clock."""

    region: str
    lock: threading.Lock
    control_hooks: dict[str, Callable[[JsonObject], object]]

    def _init_rotation(self, log_dir: str) -> None:
        self.functions: dict[str, Function] = {}
        self.rotations: list[Rotation] = []
        self.rotation_cv = threading.Condition()
        self.function_log_dir = log_dir
        self.step_timeout = STEP_TIMEOUT
        self.control_hooks["/_bed/lambda/register"] = self._register
        self.control_hooks["/_bed/rotations"] = lambda _r: self.rotations_json()
        self.control_hooks["/_bed/rotations/wait"] = self._wait
        self.control_hooks["/_bed/clock"] = self._advance
        self.control_hooks["/_bed/lambda/invoke"] = self._invoke
        self.control_hooks["/_bed/lambda/hold"] = lambda r: self._function(r["arn"]).hold(float(r["seconds"]))
        self.control_hooks["/_bed/lambda/stats"] = lambda r: self._function(r["arn"]).stats()
        self.control_hooks["/_bed/rotate-secret"] = self.rotate_secret
        self.control_hooks["/_bed/secret-versions"] = self._versions

    @staticmethod
    def now() -> float:
        """The clock: real time (advancing it ages the emulator's dates)."""
        return time.time()

    def _register(self, request: JsonObject) -> Answer:
        arn = request["arn"]
        with self.lock:
            old = self.functions.pop(arn, None)
        if old is not None:
            old.close()
        log = os.path.join(self.function_log_dir, f"lambda-{arn.rsplit(':', 1)[-1]}.log")
        reserved = request.get("reserved_concurrency")
        function = Function(
            arn,
            request["bootstrap"],
            request.get("variables", {}),
            request.get("env", {}),
            log,
            int(reserved) if reserved is not None else None,
        )
        with self.lock:
            self.functions[arn] = function
            if request.get("step_timeout"):
                self.step_timeout = float(request["step_timeout"])
        return {"arn": arn, "log": log}

    def rotations_json(self) -> list[Rotation]:
        with self.rotation_cv:
            return [{**r, "steps": list(r["steps"])} for r in self.rotations]

    def _wait(self, request: JsonObject) -> list[Rotation]:
        """Waits until at least ``count`` rotations ended (or ``timeout``)."""
        count, timeout = int(request["count"]), float(request.get("timeout", 600))
        deadline = time.monotonic() + timeout
        with self.rotation_cv:
            while sum(r["status"] != "running" for r in self.rotations) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ValueError(f"fewer than {count} rotations ended within {timeout} s: {self.rotations}")
                self.rotation_cv.wait(left)
        return self.rotations_json()

    def _versions(self, request: JsonObject) -> list[Answer]:
        """Every version of a secret, deprecated ones included: id, stages,
        whether it holds a value (what a test needs to forge an event)."""
        secret = self._backend().secrets[request["secret"]]
        return [
            {
                "id": version_id,
                "stages": list(v.get("version_stages", [])),
                "value": "secret_string" in v or "secret_binary" in v,
            }
            for version_id, v in secret.versions.items()
        ]

    def _function(self, arn: str) -> Function:
        with self.lock:
            function = self.functions.get(arn)
        if function is None:
            raise ApiError("ResourceNotFoundException", f"Function not found: {arn}", 404)
        return function

    def _invoke(self, request: JsonObject) -> Answer:
        """Invokes a function with any event, as anyone with
        ``lambda:InvokeFunction`` can (the function, not Secrets Manager,
        must check whose secret and which token it is given)."""
        function = self._function(request["arn"])
        with self.lock:
            timeout = self.step_timeout
        try:
            ok, result = function.invoke(request["event"], timeout)
        except ApiError as e:
            return {"ok": False, "result": {"errorType": e.code, "errorMessage": e.message}}
        return {"ok": ok, "result": result}

    def _advance(self, request: JsonObject) -> Answer:
        """Ages every date by ``days``/``hours`` (as if that much time
        passed) and starts every rotation that fell due (one per secret, as
        Secrets Manager rotates once)."""
        delta = float(request.get("days", 0)) * 86400 + float(request.get("hours", 0)) * 3600
        secrets = self._primaries()
        with self.rotation_cv:
            for secret in secrets:
                for version in secret.versions.values():
                    if isinstance(version.get("createdate"), (int, float)):
                        version["createdate"] = int(version["createdate"] - delta)
                    if isinstance(version.get("secret_string"), str):
                        version["secret_string"] = aged_document(version["secret_string"], delta)
                for attr in ("last_rotation_date", "next_rotation_date", "created_date"):
                    value = getattr(secret, attr, None)
                    if isinstance(value, (int, float)):
                        setattr(secret, attr, int(value - delta))
        started: list[dict[str, str]] = []
        for secret in secrets:
            due = getattr(secret, "next_rotation_date", None)
            if secret.rotation_enabled and due is not None and due <= self.now():
                try:
                    started.append(self._start_rotation(secret, None, immediately=True))
                except ApiError as e:
                    started.append({"secret": secret.name, "refused": e.message})
        return {"now": self.now(), "started": started}

    def _backend(self) -> SecretsManagerBackend:
        from moto.secretsmanager.models import secretsmanager_backends

        return secretsmanager_backends[ACCOUNT][self.region]

    def _primaries(self) -> list[FakeSecret]:
        """Every secret of the region but replicas (the bed makes none): a
        replica shares its primary's versions and rotates with it."""
        from moto.secretsmanager.models import FakeSecret

        return [s for s in self._backend().secrets.values() if isinstance(s, FakeSecret)]

    def rotate_secret(self, request: JsonObject) -> Answer:
        """RotateSecret (module docstring)."""
        backend = self._backend()
        secret_id = request.get("SecretId", "")
        if not backend._is_valid_identifier(secret_id):
            raise ApiError("ResourceNotFoundException", "Secrets Manager can't find the specified secret.", 400)
        from moto.secretsmanager.models import FakeSecret

        secret = backend.secrets[secret_id]
        if not isinstance(secret, FakeSecret):  # a replica (the bed makes none), refused as moto refuses it
            raise ApiError(
                "InvalidParameterException",
                "Operation not permitted on a replica secret. Call must be made in primary secret's region.",
                400,
            )
        arn = request.get("RotationLambdaARN")
        rules = request.get("RotationRules") or {}
        if arn is not None:
            with self.lock:
                known = arn in self.functions
            if not known:
                raise ApiError(
                    "InvalidRequestException",
                    f"Secrets Manager cannot invoke the specified Lambda function {arn}. Ensure that the "
                    "function policy grants access to the principal secretsmanager.amazonaws.com.",
                    400,
                )
            secret.rotation_lambda_arn = arn
        if not secret.rotation_lambda_arn:
            raise ApiError(
                "InvalidRequestException",
                "No Lambda rotation function ARN is associated with this secret.",
                400,
            )
        if rules:
            expression = rules.get("ScheduleExpression")
            days = rules.get("AutomaticallyAfterDays")
            if expression and expression.startswith("cron("):
                raise ApiError("InvalidParameterException", "the bed models rate() schedules, not cron()", 400)
            # The bed's own attributes (moto 5.2 keeps neither), which
            # patch_describe reports.
            secret.schedule_expression = expression  # type: ignore[attr-defined]
            secret.auto_rotate_after_days = days or 0
            secret.rotation_window = rules.get("Duration")  # type: ignore[attr-defined]
            secret.rotation_requested = True
            secret.rotation_enabled = True
            period = rate_seconds(expression, days)
            secret.next_rotation_date = int(self.now() + period) if period else None
        token = request.get("ClientRequestToken")
        started = self._start_rotation(secret, token, immediately=request.get("RotateImmediately", True))
        return {"ARN": secret.arn, "Name": secret.name, "VersionId": started["token"]}

    def _start_rotation(self, secret: FakeSecret, token: str | None, immediately: bool) -> dict[str, str]:
        for version_id, version in secret.versions.items():
            stages = version.get("version_stages", [])
            if "AWSPENDING" in stages and "AWSCURRENT" not in stages:
                raise ApiError(
                    "InvalidRequestException",
                    f"A previous rotation isn't complete. That rotation will be reattempted. "
                    f"(AWSPENDING is on version {version_id}, not AWSCURRENT.)",
                    400,
                )
        with self.lock:
            function = self.functions[secret.rotation_lambda_arn]
            timeout = self.step_timeout
        token = token or str(uuid.uuid4())
        self._stage_pending(secret, token, immediately)
        record: Rotation = {
            "secret": secret.name,
            "token": token,
            "steps": [],
            "status": "running",
            "immediately": immediately,
        }
        with self.rotation_cv:
            self.rotations.append(record)
        threading.Thread(target=self._run, args=(secret, function, record, timeout), daemon=True).start()
        return {"secret": secret.name, "token": record["token"]}

    def _stage_pending(self, secret: FakeSecret, token: str, immediately: bool) -> None:
        """Secrets Manager's own step before the function's: the token as
        AWSPENDING on an empty version (module docstring), as moto 5.2.1's
        ``rotate_secret`` writes it; for the configuration test, on a copy
        of the current value."""
        if token in secret.versions:
            raise ApiError(
                "InvalidRequestException",
                f"You can't use ClientRequestToken {token} because that value is already in use for a version "
                f"of secret {secret.arn}.",
                400,
            )
        version: dict[str, object] = {
            "createdate": int(self.now()),
            "version_id": token,
            "version_stages": ["AWSPENDING"],
        }
        if not immediately:
            current = next(
                (v for v in secret.versions.values() if "AWSCURRENT" in v.get("version_stages", [])),
                None,
            )
            if current is not None and "secret_string" in current:
                version["secret_string"] = current["secret_string"]
        secret.remove_version_stages_from_old_versions(["AWSPENDING"])
        secret.versions[token] = version

    def _run(self, secret: FakeSecret, function: Function, record: Rotation, timeout: float) -> None:
        steps = STEPS if record["immediately"] else ("testSecret",)
        ok = True
        for step in steps:
            event = {
                "Step": step,
                "SecretId": secret.arn,
                "ClientRequestToken": record["token"],
                "RotationToken": str(uuid.uuid4()),
            }
            ok, result = function.invoke(event, timeout)
            with self.rotation_cv:
                record["steps"].append({"step": step, "ok": ok, "result": result})
            if not ok:
                break
        with self.rotation_cv:
            if not record["immediately"]:
                # The configuration test's AWSPENDING comes off again.
                version = secret.versions.get(record["token"], {})
                stages = version.get("version_stages", [])
                if "AWSPENDING" in stages:
                    stages.remove("AWSPENDING")
            if ok and record["immediately"]:
                secret.last_rotation_date = int(self.now())
                period = rate_seconds(getattr(secret, "schedule_expression", None), secret.auto_rotate_after_days)
                secret.next_rotation_date = int(self.now() + period) if period and secret.rotation_enabled else None
            record["status"] = "succeeded" if ok else "failed"
            self.rotation_cv.notify_all()

    def close_functions(self) -> None:
        with self.lock:
            functions = list(self.functions.values())
        for f in functions:
            f.close()


def patch_describe() -> None:
    """DescribeSecret shows ``ScheduleExpression`` and ``Duration`` (moto
    5.2 shows ``AutomaticallyAfterDays`` alone), and no next date once the
    schedule is off."""
    from moto.secretsmanager.models import FakeSecret

    real = FakeSecret.to_dict

    def to_dict(self: FakeSecret) -> dict[str, object]:
        out = real(self)
        if self.rotation_requested:
            rules: dict[str, object] = {}
            expression = getattr(self, "schedule_expression", None)
            window = getattr(self, "rotation_window", None)
            if expression:
                rules["ScheduleExpression"] = expression
            elif self.auto_rotate_after_days:
                rules["AutomaticallyAfterDays"] = self.auto_rotate_after_days
            if window:
                rules["Duration"] = window
            out["RotationRules"] = rules
            if not self.rotation_enabled:
                out["NextRotationDate"] = None
        return {k: v for k, v in out.items() if v is not None}

    FakeSecret.to_dict = to_dict  # type: ignore[method-assign]
