"""State Manager as the bed plays it: associations of a Command document
on Targets, run by the SSM agent the command plane plays (a mixin of the
Emulator, beside ``ssm.SsmCommandPlane``).

When an association runs, as AWS documents it:

* at once when it is created or updated ("By default, when you create a new
  association, the system runs it immediately after it is created and then
  according to the schedule you specified and when target changes are
  detected", CreateAssociation and UpdateAssociation, ApplyOnlyAtCronInterval,
  in the SSM API reference);
* on an instance that comes online with the target tags ("For dynamic
  targets, such as an Amazon Web Services resource group or an Amazon Web
  Services autoscaling group, State Manager ... applies the configuration
  when new managed nodes are added to the group", CreateAssociation; the
  user guide's "Running Auto Scaling groups with associations" recommends
  tag targets): the bed calls ``instance_online`` when it launches a held
  node (``POST /_bed/nodes/launch``);
* on its schedule: the bed does not wait 30 minutes; a test fires the
  schedule with ``POST /_bed/associations/run``.

``POST /_bed/associations/settle`` waits until no run is in progress; ``GET
/_bed/associations`` lists them with each instance's last run.

Compliance (moto has none): ``PutComplianceItems`` stores a resource's items
of one compliance type (``COMPLETE`` replaces them all, as AWS documents:
"This call overwrites existing compliance information on the resource");
``ListComplianceItems`` lists them by resource id, resource type and
``ComplianceType``/``Status`` filters, paginated.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass, field

from .commands import Command, Invocation
from .errors import ApiError
from .ssm import SsmCommandPlane
from .wire import Answer, JsonObject, page

ASSOCIATION_ACTIONS = {
    "PutComplianceItems",
    "ListComplianceItems",
    "CreateAssociation",
    "DescribeAssociation",
    "ListAssociations",
    "UpdateAssociation",
    "DeleteAssociation",
}
NAME = re.compile(r"[a-zA-Z0-9_\-.]{3,128}")
RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")


@dataclass
class Settings:
    """What a Create or Update request sets (``StateManager._checked``)."""

    association_name: str
    document: str
    document_version: str
    parameters: dict[str, list[str]]
    targets: list[JsonObject]
    schedule: str
    max_concurrency: str
    max_errors: str
    compliance_severity: str
    sync_compliance: str


@dataclass
class Association(Settings):
    """An association: its settings, and what State Manager keeps of it."""

    association_id: str
    version: int = 1
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    last_execution: float | None = None
    last_success: float | None = None
    # The status of each instance's last run.
    instances: dict[str, str] = field(default_factory=dict)
    runs: list[Command] = field(default_factory=list)

    def overview(self) -> Answer:
        counts: dict[str, int] = {}
        for status in self.instances.values():
            counts[status] = counts.get(status, 0) + 1
        if not self.instances:
            status = "Pending"
        elif any(s not in ("Success", "Failed", "TimedOut", "Cancelled") for s in self.instances.values()):
            status = "Pending"
        elif all(s == "Success" for s in self.instances.values()):
            status = "Success"
        else:
            status = "Failed"
        return {"Status": status, "DetailedStatus": status, "AssociationStatusAggregatedCount": counts}

    def description(self) -> Answer:
        out: Answer = {
            "Name": self.document,
            "AssociationVersion": str(self.version),
            "Date": self.created,
            "LastUpdateAssociationDate": self.updated,
            "Overview": self.overview(),
            "DocumentVersion": self.document_version,
            "Parameters": self.parameters,
            "AssociationId": self.association_id,
            "Targets": self.targets,
            "ScheduleExpression": self.schedule,
            "AssociationName": self.association_name,
            "MaxConcurrency": self.max_concurrency,
            "MaxErrors": self.max_errors,
            "ComplianceSeverity": self.compliance_severity,
            "SyncCompliance": self.sync_compliance,
            "ApplyOnlyAtCronInterval": False,
        }
        if self.last_execution is not None:
            out["LastExecutionDate"] = self.last_execution
        if self.last_success is not None:
            out["LastSuccessfulExecutionDate"] = self.last_success
        return out


class StateManager(SsmCommandPlane):
    """State Manager's associations over the command plane
    (``_render_document``, ``_resolve_targets``, ``_dispatch``, ``lock``)."""

    def _init_state_manager(self) -> None:
        self.associations: dict[str, Association] = {}
        self.association_threads: list[threading.Thread] = []
        # (resource id, compliance type) -> the items last put.
        self.compliance: dict[tuple[str, str], list[JsonObject]] = {}

    # ------------------------------------------------------- compliance

    def _ssm_PutComplianceItems(self, request: JsonObject, region: str) -> Answer:
        resource = request.get("ResourceId", "")
        resource_type = request.get("ResourceType", "")
        kind = request.get("ComplianceType", "")
        if resource_type != "ManagedInstance":
            raise ApiError("ValidationException", "ManagedInstance is the only supported resource type.")
        if not re.fullmatch(r"Custom:[A-Za-z0-9_\-]{1,93}", kind):
            raise ApiError("ValidationException", f"ComplianceType {kind!r}: a custom type is Custom:NAME")
        summary = request.get("ExecutionSummary") or {}
        if "ExecutionTime" not in summary:
            raise ApiError("ValidationException", "ExecutionSummary.ExecutionTime is required.")
        items = request.get("Items") or []
        if len(items) > 10000:
            raise ApiError("ValidationException", "at most 10000 items")
        stored: list[JsonObject] = []
        for item in items:
            status = item.get("Status")
            if status not in ("COMPLIANT", "NON_COMPLIANT"):
                raise ApiError("ValidationException", f"Status {status!r} is not COMPLIANT or NON_COMPLIANT")
            severity = item.get("Severity")
            if severity not in ("CRITICAL", "HIGH", "MEDIUM", "LOW", "INFORMATIONAL", "UNSPECIFIED"):
                raise ApiError("ValidationException", f"Severity {severity!r} is not valid")
            for key, value in (item.get("Details") or {}).items():
                if not 1 <= len(key) <= 64 or len(value) > 4096:
                    raise ApiError("ValidationException", f"Details {key!r}: key 1 to 64, value at most 4096")
            stored.append(
                {
                    "ComplianceType": kind,
                    "ResourceType": resource_type,
                    "ResourceId": resource,
                    "Id": item.get("Id", ""),
                    "Title": item.get("Title", ""),
                    "Status": status,
                    "Severity": severity,
                    "ExecutionSummary": summary,
                    "Details": item.get("Details") or {},
                }
            )
        with self.lock:
            if request.get("UploadType", "COMPLETE") == "COMPLETE":
                self.compliance[(resource, kind)] = stored
            else:
                kept = {i["Id"]: i for i in self.compliance.get((resource, kind), [])}
                kept.update({i["Id"]: i for i in stored})
                self.compliance[(resource, kind)] = list(kept.values())
        return {}

    def _ssm_ListComplianceItems(self, request: JsonObject, region: str) -> Answer:
        ids = request.get("ResourceIds") or []
        types = request.get("ResourceTypes") or []
        with self.lock:
            rows = [i for items in self.compliance.values() for i in items]
        if ids:
            rows = [i for i in rows if i["ResourceId"] in ids]
        if types:
            rows = [i for i in rows if i["ResourceType"] in types]
        for f in request.get("Filters") or []:
            key, values = f.get("Key"), f.get("Values") or []
            if f.get("Type", "EQUAL") != "EQUAL":
                raise ApiError("ValidationException", "the bed filters compliance items with EQUAL only")
            field_name = {"ComplianceType": "ComplianceType", "Status": "Status", "Severity": "Severity"}.get(key)
            if field_name is None:
                raise ApiError("ValidationException", f"the bed does not filter compliance items by {key!r}")
            rows = [i for i in rows if i[field_name] in values]
        max_results = int(request.get("MaxResults") or 10)
        return page(request, "ComplianceItems", rows, max_results)

    # ------------------------------------------------------------- API

    def _checked(self, request: JsonObject, region: str, current: Association | None) -> Settings:
        """The association's settings from a Create or Update request, checked
        as SSM checks them."""
        name = request.get("AssociationName", current.association_name if current else "")
        if name and not NAME.fullmatch(name):
            raise ApiError("ValidationException", f"AssociationName {name!r} must match [a-zA-Z0-9_\\-.]{{3,128}}")
        document = request.get("Name", current.document if current else "")
        version = request.get("DocumentVersion", current.document_version if current else "") or "$DEFAULT"
        parameters = request.get("Parameters", current.parameters if current else {}) or {}
        # What SendCommand would refuse, CreateAssociation refuses too.
        self._render_document(document, None if version == "$DEFAULT" else version, parameters, region)
        targets = request.get("Targets", current.targets if current else [])
        if not targets:
            raise ApiError("ValidationException", "Targets is required (the bed models tag and InstanceIds targets).")
        for t in targets:
            key = t.get("Key", "")
            if not (key.startswith("tag:") or key in ("InstanceIds", "tag-key")):
                raise ApiError("ValidationException", f"unsupported target key {key!r}")
        schedule = request.get("ScheduleExpression", current.schedule if current else "")
        m = RATE.fullmatch(schedule)
        if schedule and not schedule.startswith("cron("):
            minutes = 0
            if m:
                n, unit = int(m.group(1)), m.group(2)
                minutes = n * {"m": 1, "h": 60, "d": 1440}[unit[0]]
            if minutes < 30:
                raise ApiError(
                    "InvalidSchedule",
                    f"Schedule expression {schedule} is not valid: the minimum rate is 30 minutes.",
                )
        return Settings(
            association_name=name,
            document=document,
            document_version=version,
            parameters=parameters,
            targets=targets,
            schedule=schedule,
            max_concurrency=request.get("MaxConcurrency", current.max_concurrency if current else "") or "",
            max_errors=request.get("MaxErrors", current.max_errors if current else "") or "",
            compliance_severity=request.get(
                "ComplianceSeverity", current.compliance_severity if current else "UNSPECIFIED"
            ),
            sync_compliance=request.get("SyncCompliance", current.sync_compliance if current else "AUTO"),
        )

    def _find_association(self, request: JsonObject) -> Association:
        with self.lock:
            found = self.associations.get(request.get("AssociationId", ""))
        if found is None:
            raise ApiError("AssociationDoesNotExist", "The specified association does not exist.")
        return found

    def _ssm_CreateAssociation(self, request: JsonObject, region: str) -> Answer:
        settings = self._checked(request, region, None)
        association = Association(association_id=str(uuid.uuid4()), **vars(settings))
        with self.lock:
            self.associations[association.association_id] = association
        self._apply(association, region, None)
        return {"AssociationDescription": association.description()}

    def _ssm_UpdateAssociation(self, request: JsonObject, region: str) -> Answer:
        association = self._find_association(request)
        settings = self._checked(request, region, association)
        with self.lock:
            for key, value in vars(settings).items():
                setattr(association, key, value)
            association.version += 1
            association.updated = time.time()
        self._apply(association, region, None)
        return {"AssociationDescription": association.description()}

    def _ssm_DescribeAssociation(self, request: JsonObject, region: str) -> Answer:
        association = self._find_association(request)
        with self.lock:
            return {"AssociationDescription": association.description()}

    def _ssm_DeleteAssociation(self, request: JsonObject, region: str) -> Answer:
        association = self._find_association(request)
        with self.lock:
            self.associations.pop(association.association_id, None)
        return {}

    def _ssm_ListAssociations(self, request: JsonObject, region: str) -> Answer:
        filters = request.get("AssociationFilterList") or []
        with self.lock:
            rows = list(self.associations.values())
        for f in filters:
            key, value = f.get("key"), f.get("value")
            if key == "AssociationName":
                rows = [a for a in rows if a.association_name == value]
            elif key == "Name":
                rows = [a for a in rows if a.document == value]
            elif key == "AssociationId":
                rows = [a for a in rows if a.association_id == value]
            else:
                raise ApiError("ValidationException", f"the bed does not filter associations by {key!r}")
        max_results = int(request.get("MaxResults") or 50)
        with self.lock:
            summaries = [
                {
                    "Name": a.document,
                    "AssociationId": a.association_id,
                    "AssociationVersion": str(a.version),
                    "DocumentVersion": a.document_version,
                    "Targets": a.targets,
                    "Overview": a.overview(),
                    "ScheduleExpression": a.schedule,
                    "AssociationName": a.association_name,
                    **({"LastExecutionDate": a.last_execution} if a.last_execution else {}),
                }
                for a in rows
            ]
        return page(request, "Associations", summaries, max_results)

    # ------------------------------------------------------------- runs

    def _apply(self, association: Association, region: str, only: str | None) -> None:
        """Runs `association` on its targets (or on instance `only`, when
        it is one of them) in the background, as State Manager does."""
        try:
            instances = self._resolve_targets({"Targets": association.targets}, region)
        except ApiError:
            instances = []
        instances = [i for i in instances if i.id not in self.unmanaged and (only is None or i.id == only)]
        if not instances:
            return
        version = association.document_version
        steps, timeout = self._render_document(
            association.document,
            None if version == "$DEFAULT" else version,
            association.parameters,
            region,
        )
        command = Command(
            command_id=str(uuid.uuid4()),
            document=association.document,
            parameters=association.parameters,
            instance_ids=[i.id for i in instances],
            targets=association.targets,
            comment=f"association {association.association_id}",
            max_concurrency=association.max_concurrency or "50",
            max_errors=association.max_errors or "0",
            timeout_seconds=timeout,
            requested=time.time(),
            invocations={i.id: Invocation(i.id, self._tags(i).get("Name", "")) for i in instances},
            steps=steps,
            document_version=version,
        )
        with self.lock:
            association.runs.append(command)
            association.last_execution = command.requested
            for i in instances:
                association.instances[i.id] = "Pending"

        def run() -> None:
            self._dispatch(command)
            with self.lock:
                for inv in command.invocations.values():
                    association.instances[inv.instance_id] = inv.status
                if all(inv.status == "Success" for inv in command.invocations.values()):
                    association.last_success = command.requested

        thread = threading.Thread(target=run, daemon=True)
        with self.lock:
            self.association_threads.append(thread)
        thread.start()

    def instance_online(self, instance_id: str, region: str) -> None:
        """An instance's SSM agent registered: every association whose
        targets it matches runs on it."""
        with self.lock:
            associations = list(self.associations.values())
        for association in associations:
            self._apply(association, region, instance_id)

    def run_associations(self, region: str, association_id: str | None = None) -> None:
        """The schedule fired (for one association, or all)."""
        with self.lock:
            associations = [a for a in self.associations.values() if association_id in (None, a.association_id)]
        for association in associations:
            self._apply(association, region, None)

    def settle_associations(self, timeout: float = 300) -> None:
        """Waits until every run started so far has finished."""
        deadline = time.time() + timeout
        while True:
            with self.lock:
                threads = [t for t in self.association_threads if t.is_alive()]
                self.association_threads = threads
            if not threads:
                return
            threads[0].join(max(0.0, deadline - time.time()))
            if time.time() >= deadline:
                raise ValueError("association runs still in progress after the timeout")

    def associations_json(self) -> list[Answer]:
        with self.lock:
            return [
                {
                    **a.description(),
                    "Instances": dict(a.instances),
                    "Runs": [
                        {
                            "CommandId": c.command_id,
                            "Invocations": {
                                i.instance_id: {
                                    "Status": i.status,
                                    "ResponseCode": i.response_code,
                                    "Output": i.stdout[-2000:],
                                    "Error": i.stderr[-2000:],
                                }
                                for i in c.invocations.values()
                            },
                        }
                        for c in a.runs
                    ],
                }
                for a in self.associations.values()
            ]
