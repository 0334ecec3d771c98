"""The SSM command plane the bed plays: SendCommand of AWS-RunShellScript or
a Command document (declared parameters checked as SSM does), run by an
agent on each targeted node with bash, and the reads
(ListCommandInvocations, GetCommandInvocation, ListCommands,
CancelCommand) as SSM reports them. A mixin of the Emulator.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
import uuid

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import Instance

from .agent import Agent
from .commands import FINAL, Command, Invocation, PluginRun, Step
from .errors import ApiError, denied
from .iam import Enforcer, Principal, Refused
from .wire import Answer, JsonObject, page

PLUGIN_OUTPUT_LIMIT = 2_500
MAX_INSTANCE_IDS = 50
PLUGIN_NAME = "aws:runShellScript"
OWN_SSM_ACTIONS = {
    "SendCommand",
    "ListCommandInvocations",
    "GetCommandInvocation",
    "ListCommands",
    "CancelCommand",
    "DescribeInstanceInformation",
}


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class SsmCommandPlane(Agent):
    """SSM's command plane, over the Emulator's state (set by ``Emulator``)."""

    # The rest (the lock, the nodes, --bare's bare_nodes, the buckets'
    # s3_root, ...) are the Agent's.
    iam: Enforcer
    commands: dict[str, Command]
    command_order: list[str]
    unmanaged: set[str]

    # ------------------------------------------------------------- targets

    def _running_instances(self, region: str) -> list[Instance]:
        return [i for i in ec2_backends[ACCOUNT][region].all_instances() if i._state.name == "running"]

    @staticmethod
    def _tags(instance: Instance) -> dict[str, str]:
        return {t["key"]: t["value"] for t in instance.get_tags()}

    def _resolve_targets(self, request: JsonObject, region: str) -> list[Instance]:
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
            return [by_id[i] for i in dict.fromkeys(ids)]  # each once, in order
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

    def _ssm_SendCommand(self, request: JsonObject, region: str, principal: Principal | None = None) -> Answer:
        document = request.get("DocumentName", "")
        if document in self.faults.deny_documents:
            raise denied(
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
            steps = [Step(PLUGIN_NAME, PLUGIN_NAME, {"runCommand": list(commands)}, timeout=timeout)]
        else:
            steps, timeout = self._render_document(document, request.get("DocumentVersion"), parameters, region)
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
            steps=steps,
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
    ) -> tuple[list[Step], int]:
        """What SSM does with a Command document before the agent runs it:
        every parameter must be declared, present (or defaulted), a single
        value for a String, and match its allowedPattern in full; then the
        steps' inputs get the values interpolated. Returns the steps and
        the longest step timeout."""
        from moto.ssm.models import ssm_backends

        try:
            info = ssm_backends[ACCOUNT][region].get_document(name, version or "", "", "JSON")
        except Exception:  # moto's InvalidDocument, with its own message
            raise ApiError("InvalidDocument", f"Document {name} does not exist in your account.") from None
        content = json.loads(info["Content"])
        declared: JsonObject = content.get("parameters", {})
        unknown = sorted(set(parameters) - set(declared))
        if unknown:
            raise ApiError("InvalidParameters", f"Parameters {unknown} are not defined in document {name}.")
        values: dict[str, str] = {}
        for pname, spec in declared.items():
            given = parameters.get(pname)
            if given is None:
                if "default" not in spec:
                    raise ApiError("InvalidParameters", f'Parameter "{pname}" is required by document {name}.')
                value = str(spec["default"])
            elif spec.get("type", "String") == "String" and len(given) != 1:
                raise ApiError("InvalidParameters", f'Parameter "{pname}" takes one value.')
            else:
                value = given[0]
            pattern = spec.get("allowedPattern")
            if pattern is not None and re.fullmatch(pattern, value) is None:
                raise ApiError(
                    "InvalidParameters",
                    f'Parameter "{pname}" "{value}" failed to satisfy constraint: {pattern}',
                )
            values[pname] = value

        def fill(text: str) -> str:
            return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], text)

        steps: list[Step] = []
        longest = 0
        for step in content.get("mainSteps", []):
            action = step.get("action")
            inputs = step.get("inputs", {})
            if action not in ("aws:runShellScript", "aws:downloadContent"):
                raise ApiError(
                    "InvalidDocument",
                    f"the bed runs aws:runShellScript and aws:downloadContent steps only, not {action}",
                )
            # onFailure is one of the step's inputs: the agent reads it from
            # the plugin's properties, which are the inputs, and never from
            # the step (amazon-ssm-agent, runpluginutil.go).
            on_failure = str(inputs.get("onFailure", ""))
            if on_failure not in ("", "exit", "successAndExit"):
                raise ApiError("InvalidDocumentContent", f"onFailure {on_failure!r} is not exit or successAndExit")
            # aws:runShellScript's timeoutSeconds defaults to 3600 (the
            # plugin reference); aws:downloadContent has none of its own.
            timeout = int(inputs.get("timeoutSeconds", 3600))
            longest = max(longest, timeout)
            filled: JsonObject = {
                key: [fill(line) for line in value] if isinstance(value, list) else fill(str(value))
                for key, value in inputs.items()
            }
            steps.append(Step(action, step.get("name", action), filled, on_failure, timeout))
        return steps, longest or 3600

    def _command_json(self, c: Command) -> Answer:
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

    def _ssm_ListCommandInvocations(self, request: JsonObject, region: str) -> Answer:
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
        return page(request, "CommandInvocations", rows, max_results)

    @staticmethod
    def _invocation_json(c: Command, inv: Invocation, details: bool) -> Answer:
        row: Answer = {
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
            # One plugin per step (a command that never ran, or an
            # injected failure, shows the invocation's own).
            runs = inv.plugins if any(r.started is not None for r in inv.plugins) else []
            if not runs:
                runs = [PluginRun(c.steps[0].name if c.steps else PLUGIN_NAME, **inv.run())]
            plugins = []
            for run in runs:
                output = run.stdout
                if run.stderr:
                    output += "\n----------ERROR-------\n" + run.stderr
                plugin: Answer = {
                    "Name": run.name,
                    "Status": run.status,
                    "StatusDetails": run.status,
                    "ResponseCode": run.response_code,
                    "Output": output[:PLUGIN_OUTPUT_LIMIT],
                    "StandardOutputUrl": "",
                    "StandardErrorUrl": "",
                }
                if run.started is not None:
                    plugin["ResponseStartDateTime"] = run.started
                if run.ended is not None:
                    plugin["ResponseFinishDateTime"] = run.ended
                plugins.append(plugin)
            row["CommandPlugins"] = plugins
        return row

    def _ssm_GetCommandInvocation(self, request: JsonObject, region: str) -> Answer:
        try:
            c = self._find(request.get("CommandId", ""))
        except ApiError:
            raise ApiError("InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)") from None
        inv = c.invocations.get(request.get("InstanceId", ""))
        if inv is None:
            raise ApiError("InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)")
        # "If the document contains more than one step, you must specify
        # the name of the step" (GetCommandInvocation, PluginName).
        plugin = request.get("PluginName")
        if len(c.steps) > 1:
            run = next((r for r in inv.plugins if r.name == plugin), None)
            if run is None:
                raise ApiError("InvalidPluginName", "The plugin name is not valid.")
            inv = Invocation(inv.instance_id, inv.instance_name, details=run.status, **run.run())
        elapsed = (inv.ended or time.time()) - inv.started if inv.started else 0
        return {
            "CommandId": c.command_id,
            "InstanceId": inv.instance_id,
            "Comment": c.comment,
            "DocumentName": c.document,
            "DocumentVersion": "$DEFAULT",
            "PluginName": plugin or (c.steps[0].name if c.steps else PLUGIN_NAME),
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

    def _ssm_ListCommands(self, request: JsonObject, region: str) -> Answer:
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
        return page(request, "Commands", rows, max_results)

    def _ssm_DescribeInstanceInformation(self, request: JsonObject, region: str) -> Answer:
        """The instances whose SSM agent is registered (every bed instance
        but the unmanaged): Online while running, ConnectionLost once
        stopped. As the SSM API Reference (DescribeInstanceInformation)
        takes it: Filters or InstanceInformationFilterList, not both;
        MaxResults 5 to 50; the InstanceIds filter at most 50 values; an
        unknown key refused (InvalidFilterKey)."""
        old_style = request.get("InstanceInformationFilterList") or []
        new_style = request.get("Filters") or []
        if old_style and new_style:
            raise ApiError("InvalidFilter", "Specify InstanceInformationFilterList or Filters, not both.")
        max_results = int(request.get("MaxResults") or 50)
        if not 5 <= max_results <= 50:
            raise ApiError("ValidationException", "MaxResults must be between 5 and 50")
        filters = [(f.get("key", ""), f.get("valueSet") or []) for f in old_style]
        filters += [(f.get("Key", ""), f.get("Values") or []) for f in new_style]
        instances = [
            i
            for i in ec2_backends[ACCOUNT][region].all_instances()
            if i._state.name not in ("terminated", "shutting-down") and i.id not in self.unmanaged
        ]
        for key, values in filters:
            if key not in ("InstanceIds", "PingStatus", "PlatformTypes", "ResourceType"):
                raise ApiError("InvalidFilterKey", f"The filter key {key} is not valid.")
            if key == "InstanceIds":
                if len(values) > 50:
                    raise ApiError("InvalidInstanceInformationFilterValue", "At most 50 instance ids.")
                instances = [i for i in instances if i.id in values]
        rows = []
        for i in instances:
            running = i._state.name == "running"
            row: Answer = {
                "InstanceId": i.id,
                "PingStatus": "Online" if running else "ConnectionLost",
                "LastPingDateTime": time.time(),
                "AgentVersion": "3.3.1142.0",
                "IsLatestVersion": True,
                "PlatformType": "Linux",
                "PlatformName": "Debian GNU/Linux",
                "PlatformVersion": "12",
                "ResourceType": "EC2Instance",
                "IPAddress": i.private_ip_address or "",
                "ComputerName": self._tags(i).get("Name", i.id),
            }
            for key, values in filters:
                field_of = {"PingStatus": "PingStatus", "PlatformTypes": "PlatformType", "ResourceType": "ResourceType"}
                if key in field_of and row[field_of[key]] not in values:
                    break
            else:
                rows.append(row)
        return page(request, "InstanceInformationList", rows, max_results)

    def _ssm_CancelCommand(self, request: JsonObject, region: str) -> Answer:
        c = self._find(request.get("CommandId", ""))
        with self.lock:
            c.cancelled = True
        return {}
