"""A Network Load Balancer's targets as Elastic Load Balancing keeps them:
each registration's state, its health checks and its deregistration
delay. moto 5.2.1 calls every registered target ``healthy`` at once and
forgets a deregistered one at once; admission decides on these states, so
the bed runs them as AWS does. Sources (Elastic Load Balancing, "Network
Load Balancers" guide, and the API reference):

* **initial** until the health checks pass: "Target.RegistrationInProgress
  ... Target.InitialHealthChecking" (guide, "Target health status");
  ``HealthyThresholdCount`` consecutive successes make a target healthy,
  ``UnhealthyThresholdCount`` consecutive failures unhealthy (API
  reference, CreateTargetGroup: 5 and 2 by default for TCP);
* a TCP health check passes when the connection is made (guide, "Health
  checks for Network Load Balancer target groups": "a TCP health check
  ... the connection is established"), from the load balancer's address;
* **draining** after DeregisterTargets for the target group's
  ``deregistration_delay.timeout_seconds`` (300 by default), then gone:
  "Elastic Load Balancing stops sending requests to targets that are
  deregistering" (guide, "Deregistration delay"); a deregistered
  instance that terminates drains the same way;
* deregistering a target that is not registered succeeds: DeregisterTargets
  lists no error for it (API reference, DeregisterTargets, Errors:
  InvalidTarget is "The specified target does not exist, is not in the
  same VPC as the target group, or has an unsupported instance type");
  moto 5.2.1 refuses it;
* **unused** with ``Target.NotInUse`` when no listener forwards to the
  target group, or the target is in an Availability Zone the load
  balancer does not have; ``Target.InvalidState`` when its instance is
  stopped (guide, "Target health status", reason codes);
* **fail-open**: "If all targets fail health checks at the same time in
  all enabled Availability Zones, the load balancer fails open ... allow
  traffic to all targets in all enabled Availability Zones, regardless of
  their health status" (guide, "Health checks for Network Load Balancer
  target groups");
* a target is (target id, port): the same instance may be registered on
  several ports (API reference, TargetDescription);
* a target that turns unhealthy has its connections reset:
  ``target_health_state.unhealthy.connection_termination.enabled``, "The
  default is true" (API reference, TargetGroupAttribute);
* checks go to ``HealthCheckPort`` when the group names one, else to the
  target's own port (``traffic-port``; API reference, CreateTargetGroup).

The bed's health check interval replaces ``HealthCheckIntervalSeconds``
(AWS's minimum is 5 s): a configured shortening, as the tests shorten the
deregistration delay through the target group's own attribute; neither is
skipped. What routes where (``routable``) is what the bed's HAProxy
serves (``testbed/parts/lb.py``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moto.elbv2.models import ELBv2Backend, FakeTargetGroup

# Reason codes and their descriptions (guide, "Target health status").
INITIAL = ("initial", "Elb.RegistrationInProgress", "Target registration is in progress")
CHECKING = ("initial", "Elb.InitialHealthChecking", "Initial health checks in progress")
UNHEALTHY = ("unhealthy", "Target.FailedHealthChecks", "Health checks failed")
DRAINING = ("draining", "Target.DeregistrationInProgress", "Target deregistration is in progress")
NOT_IN_USE = ("unused", "Target.NotInUse", "Target group is not configured to receive traffic from the load balancer")
ZONE_NOT_IN_USE = (
    "unused",
    "Target.NotInUse",
    "Target is in an Availability Zone that is not enabled for the load balancer",
)
STOPPED = ("unused", "Target.InvalidState", "Target is in the stopped state")
NOT_REGISTERED = ("unused", "Target.NotRegistered", "Target is not registered to the target group")


@dataclass
class Registration:
    """One (target id, port) of a target group."""

    state: str = "initial"
    reason: str | None = INITIAL[1]
    description: str | None = INITIAL[2]
    passes: int = 0
    fails: int = 0
    drain_until: float | None = None
    # An Availability Zone given at registration (RegisterTargets'
    # TargetDescription.AvailabilityZone), for an address outside the VPC.
    zone: str | None = None

    def show(self, state: tuple[str, str | None, str | None]) -> None:
        self.state, self.reason, self.description = state


Key = tuple[str, int]

# The target group attribute that resets connections to an unhealthy target.
RESET = "target_health_state.unhealthy.connection_termination.enabled"


class TargetHealth:
    """Every target group's registrations (by ARN), checked every
    ``interval`` seconds by a thread; ``on_change`` runs when what the
    load balancers route to changes."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.groups: dict[str, dict[Key, Registration]] = {}
        self.lock = threading.RLock()
        self.on_change: list[Callable[[], None]] = []
        # Called with (target group ARN, target) when a target turns
        # unhealthy and its group resets connections to it.
        self.on_unhealthy: list[Callable[[str, Key], None]] = []
        self.checks = 0
        self._routes: dict[str, list[Key]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="elb-check")

    # ------------------------------------------------------------ the API

    def register(self, group: FakeTargetGroup, targets: list[dict[str, Any]]) -> None:
        """RegisterTargets: a new (id, port) starts ``initial``; one already
        registered is unchanged; one draining is registered again."""
        with self.lock:
            regs = self.groups.setdefault(group.arn, {})
            for t in targets:
                key = (str(t["Id"]), int(t.get("Port") or group.port))
                known = regs.get(key)
                if known is None or known.state == "draining":
                    regs[key] = Registration(zone=t.get("AvailabilityZone"))
        self._changed()

    def deregister(self, group: FakeTargetGroup, targets: list[dict[str, Any]]) -> None:
        """DeregisterTargets: each registered (id, port) drains for the
        group's deregistration delay; an unregistered one is no error.
        Without a port, every registration of the id."""
        delay = _delay(group)
        with self.lock:
            regs = self.groups.setdefault(group.arn, {})
            for t in targets:
                port = t.get("Port")
                for key, reg in regs.items():
                    if key[0] == str(t["Id"]) and (port is None or key[1] == int(port)) and reg.state != "draining":
                        reg.show(DRAINING)
                        reg.drain_until = time.monotonic() + delay
        self._changed()

    def settle(self, arn: str) -> None:
        """The bed's own fleet, in service before the bed began: its first
        registrations start healthy (a test of a new registration goes
        through ``initial``)."""
        with self.lock:
            for reg in self.groups.get(arn, {}).values():
                if reg.state == "initial":
                    reg.show(("healthy", None, None))
        self._changed()

    def describe(self, group: FakeTargetGroup, asked: list[dict[str, Any]]) -> list[tuple[str, int, Registration]]:
        """DescribeTargetHealth: every registration, or those asked (an
        unregistered one is ``unused``, ``Target.NotRegistered``)."""
        with self.lock:
            regs = self.groups.get(group.arn, {})
            if not asked:
                return [(i, p, Registration(**vars(r))) for (i, p), r in regs.items()]
            out = []
            for t in asked:
                key = (str(t["Id"]), int(t.get("Port") or group.port))
                reg = regs.get(key)
                if reg is None:
                    reg = Registration()
                    reg.show(NOT_REGISTERED)
                out.append((key[0], key[1], Registration(**vars(reg))))
            return out

    def registered(self, arn: str, target_id: str) -> bool:
        """Whether the group lists ``target_id`` on any port (draining
        included)."""
        with self.lock:
            return any(key[0] == target_id for key in self.groups.get(arn, {}))

    def routable(self, arn: str) -> list[Key]:
        """Where the load balancer sends new connections: the healthy
        targets in use; with none healthy and one failing, all in use
        (fail-open); never a draining or unused one."""
        with self.lock:
            regs = self.groups.get(arn, {})
            in_use = [k for k, r in regs.items() if r.state in ("initial", "healthy", "unhealthy")]
            healthy = [k for k in in_use if regs[k].state == "healthy"]
            if healthy:
                return sorted(healthy)
            if any(regs[k].state == "unhealthy" for k in in_use):
                return sorted(in_use)
            return []

    # ------------------------------------------------------- the checks

    def start(self, backend: Callable[[], ELBv2Backend]) -> None:
        """Checks every ``interval`` seconds until ``stop``."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.tick(backend())
                except Exception as e:  # a check must not end the thread  # noqa: BLE001
                    print(f"elb health checks: {e!r}", flush=True)

        self._thread = threading.Thread(target=loop, name="elb-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def tick(self, backend: ELBv2Backend) -> None:
        """One round: drains that ended, targets out of use, then one
        health check of each target in use."""
        now = time.monotonic()
        probes: list[tuple[str, Key, str, int, str | None]] = []
        with self.lock:
            for arn, regs in self.groups.items():
                group = backend.target_groups.get(arn)
                for key in [k for k, r in regs.items() if r.drain_until is not None and r.drain_until <= now]:
                    del regs[key]
                    if group is not None and not any(k[0] == key[0] for k in regs):
                        group.targets.pop(key[0], None)
                if group is None:
                    continue
                balancers = [backend.load_balancers[a] for a in group.load_balancer_arns if a in backend.load_balancers]
                zones = {_zone_of(s) for lb in balancers for s in lb.subnets}
                source = next((lb.dns_name for lb in balancers if _is_loopback(lb.dns_name)), None)
                for key, reg in regs.items():
                    if reg.state == "draining":
                        continue
                    address, zone, state = _where(backend, group, key[0], reg)
                    if not balancers:
                        reg.show(NOT_IN_USE)
                    elif state is not None:
                        reg.show(state)
                    elif zone is not None and zone != "all" and zones and zone not in zones:
                        reg.show(ZONE_NOT_IN_USE)
                    elif address is not None:
                        if reg.state == "unused":
                            reg.show(CHECKING)
                            reg.passes = reg.fails = 0
                        port = str(group.health_check_port)
                        probes.append((arn, key, address, int(port) if port.isdigit() else key[1], source))
        results = list(self._pool.map(lambda p: _connects(p[2], p[3], p[4], self.interval), probes))
        failing: list[tuple[str, Key]] = []
        with self.lock:
            self.checks += len(probes)
            for (arn, key, _, _, _), ok in zip(probes, results, strict=True):
                checked = self.groups.get(arn, {}).get(key)
                if checked is None or checked.state == "draining":
                    continue
                was = checked.state
                group = backend.target_groups[arn]
                _count(checked, ok, group)
                terminate = str(group.attributes.get(RESET, "true")).lower() != "false"
                if checked.state == "unhealthy" and was != "unhealthy" and terminate:
                    failing.append((arn, key))
        # Resets first, while the balancer still routes to the target.
        for arn, key in failing:
            for hook in self.on_unhealthy:
                try:
                    hook(arn, key)
                except OSError as e:  # the next round goes on regardless
                    print(f"elb connection reset of {key}: {e!r}", flush=True)
        self._changed()

    def _changed(self) -> None:
        """Runs ``on_change`` when any group's routing changed."""
        with self.lock:
            routes = {arn: self.routable(arn) for arn in self.groups}
            if routes == self._routes:
                return
            self._routes = routes
        for hook in self.on_change:
            hook()


def _count(reg: Registration, ok: bool, group: FakeTargetGroup) -> None:
    """One check's result, against the group's thresholds."""
    if ok:
        reg.passes, reg.fails = reg.passes + 1, 0
        if reg.state != "healthy" and reg.passes >= int(group.healthy_threshold_count):
            reg.show(("healthy", None, None))
        elif reg.state == "initial":
            reg.show(CHECKING)
    else:
        reg.passes, reg.fails = 0, reg.fails + 1
        if reg.state != "unhealthy" and reg.fails >= int(group.unhealthy_threshold_count):
            reg.show(UNHEALTHY)


def _where(
    backend: ELBv2Backend, group: FakeTargetGroup, target_id: str, reg: Registration
) -> tuple[str | None, str | None, tuple[str, str | None, str | None] | None]:
    """A target's address and Availability Zone, or the state that keeps it
    out of use (an instance stopped; a terminated one drains)."""
    ec2 = backend.ec2_backend
    if group.target_type == "instance":
        try:
            instance = ec2.get_instance_by_id(target_id)
        except Exception:  # noqa: BLE001  # moto raises its own for an unknown id
            instance = None
        if instance is None or instance.state == "terminated":
            # Elastic Load Balancing deregisters a terminated instance.
            reg.show(DRAINING)
            reg.drain_until = time.monotonic() + _delay(group)
            return None, None, DRAINING
        if instance.state != "running":
            return None, None, STOPPED
        return instance.private_ip, instance._placement.zone, None
    if reg.zone is None:
        # Once: the zone of the instance that holds the address, else
        # anywhere ("all", as RegisterTargets takes for one outside the VPC).
        owner = next((i for i in ec2.all_instances() if i.private_ip == target_id), None)
        reg.zone = owner._placement.zone if owner is not None else "all"
    return target_id, reg.zone, None


def _delay(group: FakeTargetGroup) -> float:
    """The group's deregistration delay (300 s unless set)."""
    return float(str(group.attributes.get("deregistration_delay.timeout_seconds", 300)))


def _zone_of(subnet: Any) -> str:
    zone = subnet.availability_zone
    return str(getattr(zone, "name", zone))


def _is_loopback(name: str | None) -> bool:
    return bool(name) and str(name).startswith("127.") and str(name).replace(".", "").isdigit()


def _connects(address: str, port: int, source: str | None, timeout: float) -> bool:
    """A TCP health check: the connection is made (then closed)."""
    try:
        with socket.create_connection(
            (address, port), timeout=max(0.2, min(timeout, 2.0)), source_address=(source, 0) if source else None
        ):
            return True
    except OSError:
        return False


# The emulator's one model (its process runs one emulator).
MODEL = TargetHealth()
