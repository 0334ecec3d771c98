"""The moto behaviour the bed needs and moto 5.2.1 lacks, applied
explicitly (``apply()``, once) rather than at import:

* ELBv2 targets as Elastic Load Balancing keeps them (``targets.py``:
  initial, health checks, draining, unused, fail-open), and a reported
  health that tests can set on top (a fault of DescribeTargetHealth);
* SageMaker HyperPod nodes with an ``arn``, and the bed's addresses as
  ``PrivatePrimaryIp`` and ``PrivateDnsHostname``;
* ``DescribeInstances`` paged by instances, as EC2 does (moto pages by
  reservations);
* a resource's own tags read directly (moto filtered every tag of the
  region per instance), and every scan of all tags counted;
* ``ListSecretVersionIds`` with each version's own ``CreatedDate`` (API
  reference, SecretVersionsListEntry: "The date and time this version of
  the secret was created"); moto 5.2 answers the time of the call, so two
  reads a second apart differed, and versions could not be ordered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .wire import JsonObject

if TYPE_CHECKING:
    from moto.ec2.models.tags import TagBackend
    from moto.packages.boto.ec2.instance import Reservation
    from moto.sagemaker.models import ClusterNode

# (target group ARN, target id) -> (state, reason, description), set through
# the control API: what DescribeTargetHealth reports for it, whatever its
# checks found (a fault; routing follows the checks).
TARGET_HEALTH: dict[tuple[str, str], tuple[str, str | None, str | None]] = {}


# Scans of every tag of the region (GET /_bed/counts, "moto:tag-scans").
TAG_SCANS = [0]
_APPLIED = [False]


def apply() -> None:
    """Applies the patches (the first call only)."""
    if _APPLIED[0]:
        return
    _APPLIED[0] = True
    _patch_moto()


# The AMI every bed HyperPod node runs until a patch (hyperpod.py).
FIRST_IMAGE = "ami-0bed000000000001"


def _patch_moto() -> None:
    """The ELBv2, SageMaker, EC2 and Secrets Manager behaviour moto lacks
    (module docstring)."""
    _patch_secret_versions()
    from moto.sagemaker.models import ClusterNode

    from . import autoscaling

    autoscaling.apply()

    _patch_target_health()
    _patch_network_target_groups()

    def node_arn(self: ClusterNode) -> str:
        cluster = f"arn:aws:sagemaker:{self.region_name}:{self.account_id}:cluster/{self.cluster_name}"
        return f"{cluster}/node/{self.instance_id}"

    ClusterNode.arn = property(node_arn)  # type: ignore[attr-defined]
    real_describe = ClusterNode.describe

    def describe(self: ClusterNode) -> dict[str, object]:
        out = real_describe(self)
        for attr, key in (
            ("bed_ip", "PrivatePrimaryIp"),
            ("bed_dns", "PrivateDnsHostname"),
            ("bed_software_at", "LastSoftwareUpdateTime"),
        ):
            if getattr(self, attr, None):
                out[key] = getattr(self, attr)
        # Every node runs an image (hyperpod.py: a patch changes it).
        out["CurrentImageId"] = getattr(self, "bed_image", FIRST_IMAGE)
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

    def describe_instances(self: InstanceResponse) -> ActionResult:
        if "MaxResults" not in self.data or "InstanceId.1" in self.data:
            return real_describe_instances(self)
        self.error_on_dryrun()
        reservations = self.ec2_backend.describe_instances(filters=self._filters_from_querystring())
        pairs = [(r, i) for r in reservations for i in r.instances]
        token = self._get_param("NextToken")
        start = int(token) if token else 0
        end = start + int(self._get_param("MaxResults"))
        page: list[Reservation] = []
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

    def get_tags(self: TaggedEC2Resource) -> list[dict[str, str]]:
        rid = getattr(self, "id", None)
        if not rid:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(rid), "")
        # Every tagged resource has its backend (moto declares it on each).
        own = list(self.ec2_backend.tags.get(rid, {}).items())  # type: ignore[attr-defined]
        return [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in own]

    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]

    # Every scan of all the region's tags, counted (GET /_bed/counts,
    # "moto:tag-scans"): a test holds that a tag filter scans none.
    from moto.ec2.models.tags import TagBackend

    real_describe_tags = TagBackend.describe_tags

    def describe_tags(self: TagBackend, filters: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
        TAG_SCANS[0] += 1
        return real_describe_tags(self, filters)

    TagBackend.describe_tags = describe_tags  # type: ignore[method-assign]


def _patch_target_health() -> None:
    """RegisterTargets, DeregisterTargets (and an instance's termination)
    and DescribeTargetHealth through ``targets.MODEL`` (its docstring
    names the sources)."""
    from moto.elbv2.models import ELBv2Backend, FakeHealthStatus, FakeTargetGroup

    from .targets import MODEL

    real_register = FakeTargetGroup.register

    def register(self: FakeTargetGroup, targets: list[JsonObject]) -> None:
        real_register(self, targets)  # moto's checks (an instance not running is refused)
        MODEL.register(self, targets)

    def deregister(self: FakeTargetGroup, targets: list[JsonObject]) -> None:
        MODEL.deregister(self, targets)

    def deregister_terminated_instances(self: FakeTargetGroup, instance_ids: list[str]) -> None:
        MODEL.deregister(self, [{"Id": i} for i in instance_ids])

    def describe_target_health(
        self: ELBv2Backend, target_group_arn: str, targets: list[JsonObject]
    ) -> list[FakeHealthStatus]:
        from moto.elbv2.exceptions import TargetGroupNotFoundError

        group = self.target_groups.get(target_group_arn)
        if group is None:
            raise TargetGroupNotFoundError()
        out = []
        for target_id, port, reg in MODEL.describe(group, targets):
            state, reason, description = TARGET_HEALTH.get(
                (group.arn, target_id), (reg.state, reg.reason, reg.description)
            )
            out.append(FakeHealthStatus(target_id, str(port), group.health_check_port, state, reason, description))
        return out

    FakeTargetGroup.register = register  # type: ignore[method-assign]
    FakeTargetGroup.deregister = deregister  # type: ignore[method-assign]
    FakeTargetGroup.deregister_terminated_instances = deregister_terminated_instances  # type: ignore[method-assign]
    ELBv2Backend.describe_target_health = describe_target_health  # type: ignore[method-assign]


def _patch_secret_versions() -> None:
    """ListSecretVersionIds dates each version by its creation (module
    docstring), as GetSecretValue already does."""
    import json

    from moto.secretsmanager.models import SecretsManagerBackend

    real_list = SecretsManagerBackend.list_secret_version_ids

    def list_secret_version_ids(self: SecretsManagerBackend, secret_id: str) -> str:
        answer = json.loads(real_list(self, secret_id))
        versions = self.secrets[secret_id].versions
        for entry in answer.get("Versions", []):
            created = versions.get(entry.get("VersionId"), {}).get("createdate")
            if isinstance(created, (int, float)):
                entry["CreatedDate"] = created
        return json.dumps(answer)

    SecretsManagerBackend.list_secret_version_ids = list_secret_version_ids  # type: ignore[method-assign]


def _patch_network_target_groups() -> None:
    """The attributes of a Network Load Balancer's target group that moto
    5.2.1 leaves out, with their defaults, and the change ELB refuses
    (Elastic Load Balancing API Reference, TargetGroupAttribute):

    - ``preserve_client_ip.enabled``: "The default is disabled if the target
      group type is IP address and the target group protocol is TCP or TLS.
      Otherwise, the default is enabled. Client IP preservation can't be
      disabled for UDP and TCP_UDP target groups."
    - ``proxy_protocol_v2.enabled``: false by default (Network Load
      Balancers only);
    - ``target_health_state.unhealthy.connection_termination.enabled``:
      "The default is true" (TCP and TLS target groups).
    """
    from moto.elbv2.exceptions import InvalidConfigurationRequest
    from moto.elbv2.models import ELBv2Backend, FakeTargetGroup

    network = ("TCP", "TLS", "UDP", "TCP_UDP")
    real_init = FakeTargetGroup.__init__

    def init(self: FakeTargetGroup, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.protocol in network:
            off = self.target_type == "ip" and self.protocol in ("TCP", "TLS")
            self.attributes["preserve_client_ip.enabled"] = "false" if off else "true"
            self.attributes["proxy_protocol_v2.enabled"] = "false"
            if self.protocol in ("TCP", "TLS"):
                self.attributes["target_health_state.unhealthy.connection_termination.enabled"] = "true"

    FakeTargetGroup.__init__ = init  # type: ignore[method-assign]
    real_modify = ELBv2Backend.modify_target_group_attributes

    def modify(self: ELBv2Backend, target_group_arn: str, attributes: dict[str, object]) -> None:
        group = self.target_groups.get(target_group_arn)
        if (
            group is not None
            and group.protocol in ("UDP", "TCP_UDP")
            and str(attributes.get("preserve_client_ip.enabled", "true")).lower() == "false"
        ):
            raise InvalidConfigurationRequest(
                "Client IP preservation cannot be disabled for UDP and TCP_UDP target groups"
            )
        real_modify(self, target_group_arn, attributes)

    ELBv2Backend.modify_target_group_attributes = modify  # type: ignore[method-assign]
