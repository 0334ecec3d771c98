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
  ID ...").

The bed's instances are its sshd nodes, so an instance joins the group
through the control API (``POST /_bed/autoscaling/launch``: a launched
node attached in ``Pending:Wait``), and time passes for the hooks through
``POST /_bed/autoscaling/expire`` (``seconds``: how much).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
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
        self.control_hooks["/_bed/autoscaling/launch"] = self._asg_launch  # type: ignore[attr-defined]
        self.control_hooks["/_bed/autoscaling/expire"] = self._asg_expire  # type: ignore[attr-defined]

    def _asg_launch(self, request: JsonObject) -> JsonObject:
        """Attaches a launched instance to a group; with a launching hook,
        it waits in Pending:Wait."""
        group_name, instance_id = str(request["group"]), str(request["instance_id"])
        backend = _backend(self.region)
        backend.attach_instances(group_name, [instance_id])
        hooks = [h for h in backend.describe_lifecycle_hooks(group_name) if h.lifecycle_transition == LAUNCHING]
        if not hooks:
            return {"instance_id": instance_id, "state": "InService"}
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
            return
        group = backend.autoscaling_groups[waiting.group]
        group.instance_states = [s for s in group.instance_states if s.instance.id != instance_id]
        group.desired_capacity = len(group.instance_states)
        backend.ec2_backend.terminate_instances([instance_id])

    def _state(self, group_name: str, instance_id: str):  # type: ignore[no-untyped-def]  # moto's InstanceState
        group = _backend(self.region).autoscaling_groups[group_name]
        return next(s for s in group.instance_states if s.instance.id == instance_id)
