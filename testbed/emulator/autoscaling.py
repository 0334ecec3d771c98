"""Auto Scaling's launch lifecycle hook, which moto 5.2.1 lacks (it has
``PutLifecycleHook`` and ``DescribeLifecycleHooks``, but puts every
instance InService at once and has no ``CompleteLifecycleAction``).

Modelled from the Amazon EC2 Auto Scaling User Guide ("Amazon EC2 Auto
Scaling lifecycle hooks", "Complete a lifecycle action") and the
``CompleteLifecycleAction`` API reference:

* an instance launched into a group with an ``autoscaling:EC2_INSTANCE_LAUNCHING``
  hook waits in ``Pending:Wait`` until a ``CompleteLifecycleAction`` for it
  or the hook's ``HeartbeatTimeout``, whichever comes first;
* ``CONTINUE`` puts it ``InService`` (and only then would the group
  register it with its target groups); ``ABANDON`` terminates it;
* at the timeout the hook's ``DefaultResult`` applies (``ABANDON`` by
  default);
* completing an action for an instance that is not waiting on that hook
  is a ``ValidationError`` ("No active Lifecycle Action found with instance
  ID ...");
* a group attached to target groups registers an instance only once its
  launch hook completed, before it is InService ("How lifecycle hooks
  work", step 3); moto registered it at attach, in ``Pending:Wait``;
* an abandoned launch is replaced: the group keeps its desired capacity
  (PutLifecycleHook, DefaultResult: ``ABANDON`` terminates the instance)
  and launches another, here the bed's next held node (``replacements``);
* scale-in (TerminateInstanceInAutoScalingGroup, a lower desired
  capacity) deregisters an instance from the group's target groups
  first, and it terminates once the deregistration delay has drained it
  ("How lifecycle hooks work", step 4); moto terminated it at once;
* only ``instance`` target groups attach to a group: it registers
  instance ids (Auto Scaling guide, "Prerequisites" of attaching Elastic
  Load Balancing).

The bed's instances are its sshd nodes, so an instance joins the group
through the control API (``POST /_bed/autoscaling/launch``: a launched
node attached in ``Pending:Wait``), and time passes for the hooks through
``POST /_bed/autoscaling/expire`` (``seconds``: how much).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from .errors import ApiError
from .wire import JsonObject

LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"


@dataclass
class Waiting:
    """An instance in ``Pending:Wait`` on a hook."""

    group: str
    hook: str
    deadline: float
    default_result: str


def _backend(region: str):  # type: ignore[no-untyped-def]  # moto's backend has no types
    from moto.autoscaling.models import autoscaling_backends

    from . import ACCOUNT

    return autoscaling_backends[ACCOUNT][region]


class LifecyclePlane:
    """Mixed into the emulator: the launch hook's wait and its end."""

    region: str

    def _init_lifecycle(self) -> None:
        self.waiting: dict[str, Waiting] = {}
        # Called with a group's name to launch a replacement for an
        # abandoned instance (the bed attaches its next held node); none
        # left, the group stays short.
        self.replacements: list[Callable[[str], None]] = []
        self.control_hooks["/_bed/autoscaling/launch"] = self._asg_launch  # type: ignore[attr-defined]
        self.control_hooks["/_bed/autoscaling/expire"] = self._asg_expire  # type: ignore[attr-defined]

    def _asg_launch(self, request: JsonObject) -> JsonObject:
        """Attaches a launched instance to a group; with a launching hook,
        it waits in Pending:Wait."""
        group_name, instance_id = str(request["group"]), str(request["instance_id"])
        backend = _backend(self.region)
        hooks = [h for h in backend.describe_lifecycle_hooks(group_name) if h.lifecycle_transition == LAUNCHING]
        if not hooks:
            backend.attach_instances(group_name, [instance_id])
            return {"instance_id": instance_id, "state": "InService"}
        # Registered with the group's target groups only once the hook
        # completes (``_end``), not at attach.
        group = backend.autoscaling_groups[group_name]
        target_groups, group.target_group_arns = group.target_group_arns, []
        try:
            backend.attach_instances(group_name, [instance_id])
        finally:
            group.target_group_arns = target_groups
        hook = hooks[0]
        self._state(group_name, instance_id).lifecycle_state = "Pending:Wait"
        self.waiting[instance_id] = Waiting(
            group_name, hook.name, time.time() + float(hook.heartbeat_timeout), str(hook.default_result)
        )
        return {"instance_id": instance_id, "state": "Pending:Wait", "hook": hook.name}

    def _asg_expire(self, request: JsonObject) -> JsonObject:
        """``seconds`` pass for every waiting action; those past their
        timeout end with their hook's default result."""
        seconds = float(request.get("seconds", 0))
        for waiting in self.waiting.values():
            waiting.deadline -= seconds
        return {"ended": self.expire_lifecycle_actions()}

    def expire_lifecycle_actions(self) -> list[JsonObject]:
        """Ends every action past its timeout (before any Auto Scaling call)."""
        ended: list[JsonObject] = []
        for instance_id, waiting in list(self.waiting.items()):
            if waiting.deadline <= time.time():
                self._end(instance_id, waiting.default_result)
                ended.append({"instance_id": instance_id, "result": waiting.default_result})
        return ended

    def autoscaling(self, action: str, body: bytes) -> list[bytes] | None:
        """Before any Auto Scaling call, what timed out ends, as the
        service ends it on its own; ``CompleteLifecycleAction`` is
        answered here (None: moto answers)."""
        self.expire_lifecycle_actions()
        if action == "CompleteLifecycleAction":
            return self.complete_lifecycle_action(body)
        return None

    def complete_lifecycle_action(self, body: bytes) -> list[bytes]:
        """``CompleteLifecycleAction``: the query protocol's form in, its
        XML answer out."""
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        instance_id = form.get("InstanceId", "")
        waiting = self.waiting.get(instance_id)
        if (
            waiting is None
            or waiting.group != form.get("AutoScalingGroupName")
            or waiting.hook != form.get("LifecycleHookName")
        ):
            raise ApiError("ValidationError", f"No active Lifecycle Action found with instance ID {instance_id}", 400)
        result = form.get("LifecycleActionResult", "")
        if result not in ("CONTINUE", "ABANDON"):
            raise ApiError("ValidationError", "LifecycleActionResult must be CONTINUE or ABANDON", 400)
        self._end(instance_id, result)
        return [
            (
                '<CompleteLifecycleActionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
                "<CompleteLifecycleActionResult/>"
                f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
                "</CompleteLifecycleActionResponse>"
            ).encode()
        ]

    def _end(self, instance_id: str, result: str) -> None:
        waiting = self.waiting.pop(instance_id)
        backend = _backend(self.region)
        if result == "CONTINUE":
            self._state(waiting.group, instance_id).lifecycle_state = "InService"
            backend.update_attached_target_groups(waiting.group)
            return
        group = backend.autoscaling_groups[waiting.group]
        group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
        backend.ec2_backend.terminate_instances([instance_id])
        for replace in self.replacements:
            replace(waiting.group)

    def _state(self, group_name: str, instance_id: str):  # type: ignore[no-untyped-def]  # moto's InstanceState
        group = _backend(self.region).autoscaling_groups[group_name]
        return next(s for s in group.instance_states if s.instance.id == instance_id)


def apply() -> None:
    """The target groups of an Auto Scaling group as the guide has them
    (the module docstring's last three points)."""
    from moto.autoscaling.exceptions import ValidationError
    from moto.autoscaling.models import AutoScalingBackend, FakeAutoScalingGroup, TerminateInstanceActivity

    real_update = AutoScalingBackend.update_attached_target_groups

    def update_attached_target_groups(self: Any, group_name: str) -> None:
        group = self.autoscaling_groups[group_name]
        everyone = group.instance_states
        group.instance_states = [s for s in everyone if s.lifecycle_state in ("InService", "Pending:Proceed")]
        try:
            real_update(self, group_name)
        finally:
            group.instance_states = everyone

    real_attach = AutoScalingBackend.attach_load_balancer_target_groups

    def attach_load_balancer_target_groups(self: Any, group_name: str, target_group_arns: list[str]) -> None:
        for arn in target_group_arns:
            target_group = self.elbv2_backend.target_groups.get(arn)
            if target_group is not None and target_group.target_type != "instance":
                raise ValidationError(
                    f"Target group {target_group.name} has target type {target_group.target_type}: an Auto Scaling"
                    " group registers instances, so only instance target groups attach"
                )
        real_attach(self, group_name, target_group_arns)

    real_terminate = AutoScalingBackend.terminate_instance

    def terminate_instance(self: Any, instance_id: str, should_decrement: bool) -> Any:
        groups = self.autoscaling_groups.values()
        group = next((g for g in groups if any(s.instance.id == instance_id for s in g.instance_states)), None)
        if group is None or not group.target_group_arns:
            return real_terminate(self, instance_id, should_decrement)
        state = next(s for s in group.instance_states if s.instance.id == instance_id)
        original = group.desired_capacity
        group.instance_states = [s for s in group.instance_states if s is not state]
        if should_decrement:
            group.desired_capacity = original - 1
        _drain_then_terminate(self, group, instance_id)
        return TerminateInstanceActivity(state.instance, original)

    real_set = FakeAutoScalingGroup.set_desired_capacity

    def set_desired_capacity(self: Any, new_capacity: int | None) -> None:
        # Scale-in of a group with target groups: the instances leaving
        # drain first (moto terminated them at once).
        target = self.min_size if new_capacity is None else new_capacity
        active = self.active_instances()
        excess = len(active) - int(target or 0)
        if self.target_group_arns and excess > 0 and not self.mixed_instances_policy:
            leaving = [s for s in active if not s.protected_from_scale_in][:excess]
            self.instance_states = [s for s in self.instance_states if s not in leaving]
            for state in leaving:
                _drain_then_terminate(self.autoscaling_backend, self, state.instance.id)
        real_set(self, new_capacity)

    FakeAutoScalingGroup.set_desired_capacity = set_desired_capacity  # type: ignore[method-assign]
    AutoScalingBackend.update_attached_target_groups = update_attached_target_groups  # type: ignore[method-assign]
    AutoScalingBackend.attach_load_balancer_target_groups = attach_load_balancer_target_groups  # type: ignore[method-assign]
    AutoScalingBackend.terminate_instance = terminate_instance  # type: ignore[method-assign]


def _drain_then_terminate(backend: Any, group: Any, instance_id: str) -> None:
    """Deregisters a leaving instance from the group's target groups, and
    terminates it once none lists it (its drain ended)."""
    from .targets import MODEL

    arns = list(group.target_group_arns)
    for arn in arns:
        MODEL.deregister(backend.elbv2_backend.target_groups[arn], [{"Id": instance_id}])
    ec2 = backend.ec2_backend

    def terminate_once_drained() -> None:
        while any(MODEL.registered(arn, instance_id) for arn in arns):
            time.sleep(0.2)
        ec2.terminate_instances([instance_id])

    threading.Thread(target=terminate_once_drained, daemon=True).start()
