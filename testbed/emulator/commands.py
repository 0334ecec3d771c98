"""What the bed's SSM keeps of a command and the instances it runs on:
the command and its document's steps, each instance's invocation and
the plugin run of each step, where and how the agent runs commands on a
node, and the faults the tests switch on. Read by the command plane
(``ssm.py``), its agent (``agent.py``) and State Manager
(``associations.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .wire import JsonObject

FINAL = {"Success", "Failed", "TimedOut", "Cancelled"}


@dataclass
class Step:
    """One step of a Command document as the agent runs it: its action
    (plugin), its name (the plugin's name in the invocation's
    CommandPlugins; AWS-RunShellScript's one step is named after its
    plugin), its inputs with the parameters interpolated, and onFailure
    ("exit": the remaining steps do not run; absent: they do. AWS Systems
    Manager User Guide, "Command document plugin reference", the step
    properties)."""

    action: str
    name: str
    inputs: JsonObject
    on_failure: str = ""
    timeout: int = 3600


@dataclass(kw_only=True)
class Run:
    """How a run went on one instance: one step's (``PluginRun``) or the
    whole command's (``Invocation``)."""

    status: str = "Pending"
    response_code: int = -1
    stdout: str = ""
    stderr: str = ""
    started: float | None = None
    ended: float | None = None

    def run(self) -> dict[str, Any]:
        """This run's own fields, to give another run the same outcome."""
        return {f.name: getattr(self, f.name) for f in fields(Run)}


@dataclass
class PluginRun(Run):
    """What one step did on one instance."""

    name: str


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
    fail_at: list[JsonObject] = field(default_factory=list)
    # A client killed mid-call: {"actions": ["PutSecretValue", ...], "n": 5,
    # "principal": "hostkeyctl-rotation"} holds the Nth call of any of those
    # actions (by that signer, if named; counted from when the faults were
    # set) unanswered until POST /_bed/hold/release (the test kills the
    # client meanwhile); {"effect": true} lets it take effect.
    hold_at: JsonObject = field(default_factory=dict)
    # SendCommand of these documents is denied (e.g. AWS-RunShellScript:
    # a role that may only send hostkeyctl's own document).
    deny_documents: list[str] = field(default_factory=list)
    # Request quotas, {"kms:Sign": 300}: calls of that action beyond the
    # figure in one second are throttled, as KMS counts its quotas "in each
    # one-second interval" (KMS Developer Guide, "Request quotas"), with
    # ThrottlingException (its "throttling" page).
    quotas: dict[str, int] = field(default_factory=dict)
    seed: int = 1

    def update(self, changes: JsonObject) -> None:
        for key, value in changes.items():
            if not hasattr(self, key):
                raise ValueError(f"unknown fault {key!r}")
            setattr(self, key, value)


@dataclass
class Invocation(Run):
    instance_id: str
    instance_name: str
    details: str = "Pending"
    plugins: list[PluginRun] = field(default_factory=list)


@dataclass
class Command:
    command_id: str
    document: str
    parameters: dict[str, list[str]]
    instance_ids: list[str]
    targets: list[JsonObject]
    comment: str
    max_concurrency: str
    max_errors: str
    timeout_seconds: int
    requested: float
    invocations: dict[str, Invocation]
    # The document version asked for ("" for the default).
    document_version: str = ""
    # What the agent runs: the document's steps with the parameters
    # interpolated.
    steps: list[Step] = field(default_factory=list)
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
