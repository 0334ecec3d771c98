"""IAM enforcement for the bed's emulator: the shipped policies, enforced.

Every AWS request is authenticated (its access key exists in the emulator's
IAM, its SigV4 signature is right) and authorised by the caller's policies,
evaluated with moto's own policy evaluator, against the resource the request
really names. moto itself evaluates every request against the resource
``*``, so a policy scoped to ``secret:hostkeys/*`` would deny everything and
one scoped to the wrong prefix would pass; here the resource is the ARN of
the secret, document, instance or cluster of the request:

========================  ====================================================
request                   resource(s) checked
========================  ====================================================
Secrets Manager           the secret's ARN (``SecretId``, or ``Name`` for
                          ``CreateSecret``, which with ``Tags`` also needs
                          ``secretsmanager:TagResource``, as AWS documents)
SSM document actions      ``arn:aws:ssm:REGION:ACCOUNT:document/NAME``
                          (``REGION::document/`` for AWS-owned documents)
``ssm:SendCommand``       the document, and each instance it reaches, with the
                          instance's tags as ``ssm:resourceTag/KEY``
``ssm:PutComplianceItems`` the instance of its ``ResourceId``
``ssm:*Association``      ``arn:aws:ssm:REGION:ACCOUNT:association/ID`` (a new
                          one's id for Create), and the document for Create
                          and Update (tag targets name no instance; the bed
                          does not check instance targets' instances)
SageMaker cluster calls   the cluster's ARN
KMS calls with a KeyId    the key's ARN (an alias resolved to its key)
DynamoDB item calls       the table's ARN (``TableName``)
Lambda configuration      the function's ARN (from the request's path)
ELB Register/Deregister   the target group's ARN (``TargetGroupArn``)
CompleteLifecycleAction   the Auto Scaling group's ARN
everything else           ``*`` (EC2 and ELB describes have no resource-level
                          permissions)
========================  ====================================================

Conditions: ``StringEquals`` on ``ssm:resourceTag/*`` and
``aws:ResourceTag/*`` is evaluated from the instance's tags, or a KMS
key's own for KMS requests (a missing tag never matches), and on a KMS
request's ``aws:RequestTag/*``, ``kms:KeyUsage`` and ``kms:KeySpec``;
moto ignores other operators (``ForAllValues:...``), and keys the bed does not
model (``kms:ViaService``, ``aws:SourceIp``, ...) are not evaluated. Those
are covered by unit tests of the policy text (``scripts/lint_policies.py``
and ``tests/it/bed/iam.rs``), and docs/iam.md says so.

Every decision is recorded by principal and action (``GET /_bed/iam``), so a
test can show what a role used and what it was refused.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from moto.iam.access_control import IAMPolicy, IAMPolicyStatement, IAMRequest, PermissionResult

from . import kms, lambda_api
from .wire import JsonObject

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

# The account the shipped policies name; the bed substitutes its own, as the
# CloudFormation template substitutes the stack's.
EXAMPLE_ACCOUNT = "111122223333"
# The target group admission's policy names (iam/admission.json).
EXAMPLE_TARGET_GROUP = "targetgroup/my-cluster-login/"
# The Auto Scaling group whose launch hook admission completes.
EXAMPLE_GROUP = "autoScalingGroupName/my-cluster-login"
# The roles of iam/<role>.json.
# The services whose requests are JSON documents the checks read.
JSON_BODIES = ("secretsmanager", "ssm", "sagemaker", "kms", "dynamodb")
ROLES = ("admin", "rotation", "node", "auditor", "signer", "rotation-lambda", "admission", "enrolment", "cluster-node")
# The bed's own calls (setting up load balancers, reading what a test
# checks, tampering on purpose): allowed everything, never a role under test.
BED_ROOT = "bed-root"
ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
SSM_DOCUMENT_ACTIONS = {
    "CreateDocument",
    "UpdateDocument",
    "UpdateDocumentDefaultVersion",
    "GetDocument",
    "DescribeDocument",
    "DeleteDocument",
    "ListDocumentVersions",
}
# Elastic Load Balancing's resource-level actions the bed checks (the
# ELB service authorization reference: RegisterTargets and
# DeregisterTargets take the targetgroup resource).
ELB_TARGET_ACTIONS = {"RegisterTargets", "DeregisterTargets"}
SAGEMAKER_CLUSTER_ACTIONS = {"ListClusterNodes", "DescribeClusterNode", "DescribeCluster"}
TAG_KEY_PREFIXES = ("ssm:resourceTag/", "aws:ResourceTag/")


class Refused(Exception):
    """A request the caller may not make: (code, message, HTTP status)."""

    def __init__(self, code: str, message: str, status: int):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class TagContext(dict[str, str]):
    """Condition values for moto's evaluator: every ``*ResourceTag/KEY`` key
    is present, with the tag's value or a value no policy names (moto aligns
    condition values by position, so a key must never be missing)."""

    ABSENT = "\x00no such tag"

    def __init__(self, tags: dict[str, str]):
        super().__init__()
        self.tags = tags

    def __bool__(self) -> bool:
        return True

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.startswith(TAG_KEY_PREFIXES)

    def __getitem__(self, key: str) -> str:
        return self.tags.get(key.split("/", 1)[1], self.ABSENT)


class RequestContext(TagContext):
    """A KMS request's condition values: the key's tags as
    ``aws:ResourceTag/KEY``, the request's ``Tags`` as
    ``aws:RequestTag/KEY``, and CreateKey's ``kms:KeyUsage`` and
    ``kms:KeySpec`` (KMS Developer Guide, "Condition keys for AWS KMS").
    Every such key is present, as in ``TagContext``."""

    REQUEST_TAG = "aws:RequestTag/"

    def __init__(self, resource_tags: dict[str, str], request: JsonObject):
        super().__init__(resource_tags)
        tags = request.get("Tags") or []
        self.request_tags = {str(t.get("TagKey")): str(t.get("TagValue")) for t in tags if isinstance(t, dict)}
        self.request_values = {
            "kms:KeyUsage": str(request.get("KeyUsage") or "ENCRYPT_DECRYPT"),
            "kms:KeySpec": str(request.get("KeySpec") or "SYMMETRIC_DEFAULT"),
        }

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (
            isinstance(key, str) and (key.startswith(self.REQUEST_TAG) or key in self.request_values)
        )

    def __getitem__(self, key: str) -> str:
        if key.startswith(self.REQUEST_TAG):
            return self.request_tags.get(key.removeprefix(self.REQUEST_TAG), self.ABSENT)
        if key in self.request_values:
            return self.request_values[key]
        return super().__getitem__(key)


@dataclass
class Principal:
    """Who signed a request, and the policies that apply to them."""

    name: str
    arn: str
    policies: list[dict[str, str]] | list[str]


@dataclass
class Usage:
    """Decisions by principal: action -> count, allowed and refused."""

    allowed: dict[str, dict[str, int]] = field(default_factory=dict)
    denied: dict[str, dict[str, int]] = field(default_factory=dict)

    def record(self, principal: str, action: str, ok: bool) -> None:
        book = self.allowed if ok else self.denied
        actions = book.setdefault(principal, {})
        actions[action] = actions.get(action, 0) + 1

    def as_json(self) -> dict[str, dict[str, dict[str, int]]]:
        return {"allowed": self.allowed, "denied": self.denied}


def policy_for_bed(text: str, account: str, cluster: str = "hp") -> str:
    """A shipped policy with the bed's account in place of the example one,
    and the bed's ip target group and Auto Scaling group (``CLUSTER-login``)
    in place of the example ``my-cluster-login``."""
    json.loads(text)  # a broken file fails here, naming nothing else
    return (
        text.replace(EXAMPLE_ACCOUNT, account)
        .replace(EXAMPLE_TARGET_GROUP, f"targetgroup/{cluster}-login/")
        .replace(EXAMPLE_GROUP, f"autoScalingGroupName/{cluster}-login")
    )


def headers_of(environ: WSGIEnvironment) -> dict[str, str]:
    """The request's headers as moto's signature check reads them."""
    headers = {key[5:].replace("_", "-").title(): value for key, value in environ.items() if key.startswith("HTTP_")}
    for key, name in (("CONTENT_TYPE", "Content-Type"), ("CONTENT_LENGTH", "Content-Length")):
        if environ.get(key):
            headers[name] = environ[key]
    return headers


class Enforcer:
    """Authenticates and authorises the emulator's requests (module doc)."""

    def __init__(self, account: str):
        self.account = account
        self.enabled = False
        self.usage = Usage()
        self.lock = threading.Lock()

    # ---------------------------------------------------------- identity

    def authenticate(self, environ: WSGIEnvironment, body: bytes, service: str, action: str) -> Principal:
        headers = headers_of(environ)
        if "Credential=" not in headers.get("Authorization", ""):
            raise self._unrecognized(service)
        # The path as sent, not as decoded: a Lambda function's ARN in the
        # path is signed percent-encoded (PATH_INFO has it decoded).
        path = (environ.get("RAW_URI") or environ.get("REQUEST_URI") or "").split("?", 1)[0]
        path = path or environ.get("PATH_INFO", "/")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        try:
            request = IAMRequest(
                account_id=self.account,
                method=environ.get("REQUEST_METHOD", "POST"),
                path=path,
                data={},
                body=body,
                headers=headers,
                action=action,
            )
            request.check_signature()
            key = request._access_key  # moto's record of the signing key
            return Principal(name=key.arn.rsplit("/", 1)[-1], arn=key.arn, policies=key.collect_policies())
        except Refused:
            raise
        except Exception:  # moto's InvalidClientTokenId / SignatureDoesNotMatch
            raise self._unrecognized(service) from None

    @staticmethod
    def _unrecognized(service: str) -> Refused:
        if service in ("ec2",):
            return Refused("AuthFailure", "AWS was not able to validate the provided access credentials", 401)
        return Refused("UnrecognizedClientException", "The security token included in the request is invalid.", 400)

    # ------------------------------------------------------ authorisation

    def require(
        self,
        principal: Principal | None,
        service: str,
        action: str,
        resource: str,
        context: dict[str, str] | None = None,
    ) -> None:
        """Raises Refused unless `principal` may do `service:action` on
        `resource`. No principal means enforcement is off."""
        if principal is None:
            return
        full = f"{service}:{action}"
        allowed = False
        denied = False
        for policy in principal.policies:
            # moto's reading of a policy (a managed one's default version,
            # an inline one's text), then statement by statement.
            statements = IAMPolicy(policy)._policy_json["Statement"]
            for statement in statements if isinstance(statements, list) else [statements]:
                # moto 5.2.1 answers DENIED for a statement whose condition
                # does not hold, Allow or Deny alike; in IAM such a statement
                # does not apply (IAM User Guide, "Policy evaluation logic":
                # an explicit Deny denies, an Allow allows, nothing else
                # counts). Two Allow statements for one action under
                # different tag conditions (the shipped SendCommand grants)
                # need AWS's rule. So each statement is asked as an Allow:
                # PERMITTED means it applies.
                applies = IAMPolicyStatement({**statement, "Effect": "Allow"}).is_action_permitted(
                    full, resource, None, context
                )
                if applies == PermissionResult.PERMITTED:
                    if statement.get("Effect") == "Deny":
                        denied = True
                    else:
                        allowed = True
        allowed = allowed and not denied
        with self.lock:
            self.usage.record(principal.name, full, allowed)
        if not allowed:
            message = (
                f"User: {principal.arn} is not authorized to perform: {full} on resource: {resource} "
                f"because no identity-based policy allows the {full} action"
            )
            if service == "ec2":
                raise Refused("UnauthorizedOperation", message, 403)
            if service == "elasticloadbalancing":
                raise Refused("AccessDenied", message, 403)
            raise Refused("AccessDeniedException", message, 400)

    def resources(self, service: str, action: str, request: JsonObject, region: str, path: str = "") -> list[str]:
        """The resources a request names (module doc), before SendCommand's
        instances, which only the agent's target resolution knows."""
        if service == "lambda":
            name = lambda_api.function_name(path)
            return [name if name.startswith("arn:") else f"arn:aws:lambda:{region}:{self.account}:function:{name}"]
        if service == "secretsmanager":
            if action == "CreateSecret":
                return [self.new_secret_arn(str(request.get("Name", "")), region)]
            if "SecretId" in request:
                return [self.secret_arn(str(request["SecretId"]), region)]
        if service == "ssm":
            if action in SSM_DOCUMENT_ACTIONS:
                return [self.document_arn(str(request.get("Name", "")), region)]
            if action == "SendCommand":
                return [self.document_arn(str(request.get("DocumentName", "")), region)]
            if action == "PutComplianceItems":
                return [f"arn:aws:ec2:{region}:{self.account}:instance/{request.get('ResourceId', '')}"]
            if action in ("CreateAssociation", "UpdateAssociation", "DescribeAssociation", "DeleteAssociation"):
                association = f"arn:aws:ssm:{region}:{self.account}:association/{request.get('AssociationId', 'new')}"
                if action in ("CreateAssociation", "UpdateAssociation") and request.get("Name"):
                    return [association, self.document_arn(str(request["Name"]), region)]
                return [association]
        if service == "elasticloadbalancing" and action in ELB_TARGET_ACTIONS:
            return [str(request.get("TargetGroupArn", ""))]
        if service == "autoscaling" and action == "CompleteLifecycleAction":
            return [self.group_arn(str(request.get("AutoScalingGroupName", "")), region)]
        if service == "sagemaker" and action in SAGEMAKER_CLUSTER_ACTIONS:
            return [self.cluster_arn(str(request.get("ClusterName", "")), region)]
        if service == "dynamodb" and "TableName" in request:
            return [f"arn:aws:dynamodb:{region}:{self.account}:table/{request['TableName']}"]
        if service == "kms" and "KeyId" in request:
            return [kms.key_arn(self.account, region, str(request["KeyId"]))]
        return ["*"]

    def authorize(
        self, principal: Principal | None, service: str, action: str, body: bytes, region: str, path: str = ""
    ) -> JsonObject:
        """Checks what `resources` names; returns the parsed JSON request."""
        try:
            request = json.loads(body) if body and service in JSON_BODIES else {}
        except ValueError:
            request = {}
        if service in ("elasticloadbalancing", "autoscaling") and body:
            # The query protocol: a form, one value per key here.
            request = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        if principal is None:
            return request
        # A KMS key's tags are its aws:ResourceTag/* (the shipped signing
        # grants name the CA keys by tag: docs/iam.md).
        context = (
            RequestContext(kms.key_tags(self.account, region, str(request.get("KeyId", ""))), request)
            if service == "kms"
            else None
        )
        for resource in self.resources(service, action, request, region, path):
            self.require(principal, service, action, resource, context)
        if service == "kms" and action == "CreateKey" and request.get("Tags"):
            # "To use the Tags parameter, you must have kms:TagResource
            # permission in an IAM policy" (KMS API Reference, CreateKey).
            self.require(principal, service, "TagResource", f"arn:aws:kms:{region}:{self.account}:key/new", context)
        if service == "secretsmanager" and action == "CreateSecret" and request.get("Tags"):
            # "To add tags to a secret when you create it, you must also have
            # secretsmanager:TagResource" (Secrets Manager API reference).
            self.require(principal, service, "TagResource", self.new_secret_arn(str(request.get("Name", "")), region))
        return request

    def instance(
        self, principal: Principal | None, action: str, instance_id: str, tags: dict[str, str], region: str
    ) -> None:
        """SendCommand's check of one instance it reaches."""
        arn = f"arn:aws:ec2:{region}:{self.account}:instance/{instance_id}"
        self.require(principal, "ssm", action, arn, TagContext(tags))

    # ------------------------------------------------------------ ARNs

    def secret_arn(self, secret_id: str, region: str) -> str:
        if secret_id.startswith("arn:"):
            return secret_id
        from moto.secretsmanager.models import secretsmanager_backends

        found = secretsmanager_backends[self.account][region].secrets.get(secret_id)
        return found.arn if found is not None else self.new_secret_arn(secret_id, region)

    def new_secret_arn(self, name: str, region: str) -> str:
        # Secrets Manager appends six random characters to the name.
        return f"arn:aws:secretsmanager:{region}:{self.account}:secret:{name}-AbCdEf"

    def document_arn(self, name: str, region: str) -> str:
        if name.startswith("arn:"):
            return name
        owner = "" if name.startswith(("AWS-", "AWSSupport-", "Amazon")) else self.account
        return f"arn:aws:ssm:{region}:{owner}:document/{name}"

    def group_arn(self, name: str, region: str) -> str:
        from moto.autoscaling.models import autoscaling_backends

        group = autoscaling_backends[self.account][region].autoscaling_groups.get(name)
        if group is not None:
            return str(group.arn)
        return f"arn:aws:autoscaling:{region}:{self.account}:autoScalingGroup:*:autoScalingGroupName/{name}"

    def cluster_arn(self, name: str, region: str) -> str:
        if name.startswith("arn:"):
            return name
        return f"arn:aws:sagemaker:{region}:{self.account}:cluster/{name}"
