"""The SSM agent the bed plays on each targeted node: a command's steps
in order (aws:runShellScript with sh, aws:downloadContent from the
bed's buckets), each step's outcome as a plugin of the invocation, rate
controls as SendCommand asks. A mixin of the SSM command plane
(``ssm.SsmCommandPlane``), which owns the API.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from .commands import Command, Faults, Invocation, NodeEnv, PluginRun, Step

STDOUT_LIMIT = 24_000
STDERR_LIMIT = 8_000


def _limit(value: str, total: int, default: int) -> int:
    """Resolves an SSM rate value ("10" or "25%") against ``total`` targets."""
    value = (value or "").strip()
    if not value:
        return default
    if value.endswith("%"):
        return max(1, math.floor(total * int(value[:-1]) / 100)) if total else 1
    return int(value)


class Agent:
    """What runs commands, over the Emulator's state."""

    lock: threading.Lock
    faults: Faults
    nodes: dict[str, NodeEnv]
    base_env: dict[str, str]
    bare_nodes: bool
    s3_root: str
    virtual_shared: tuple[str, dict[str, str]] | None
    processes: set[subprocess.Popen[bytes]]
    closing: bool
    association_slots: dict[str, threading.Lock]

    def _dispatch(self, c: Command) -> None:
        """Runs a command on its instances as the SSM agents would."""
        total = len(c.invocations)
        concurrency = max(1, _limit(c.max_concurrency, total, 50))
        max_errors = _limit(c.max_errors, total, 0)
        slots = threading.Semaphore(concurrency)
        with ThreadPoolExecutor(max_workers=min(concurrency, 64)) as pool:
            for inv in list(c.invocations.values()):
                slots.acquire()
                with self.lock:
                    stop = c.cancelled or c.errors > max_errors or self.closing
                if stop:
                    slots.release()
                    self._finish(c, inv, "Cancelled", "Cancelled", -1, "", "")
                    continue

                def work(inv: Invocation = inv) -> None:
                    try:
                        self._execute(c, inv)
                    finally:
                        slots.release()

                pool.submit(work)

    def _finish(self, c: Command, inv: Invocation, status: str, details: str, code: int, out: str, err: str) -> None:
        with self.lock:
            inv.stdout = out[:STDOUT_LIMIT]
            inv.stderr = err[:STDERR_LIMIT]
            inv.response_code = code
            inv.ended = time.time()
            if inv.started is None:
                inv.started = inv.ended
            inv.status, inv.details = status, details
            if status in ("Failed", "TimedOut"):
                c.errors += 1

    def _execute(self, c: Command, inv: Invocation) -> None:
        # The agent runs one association at a time on an instance, in no
        # order (amazon-ssm-agent, association processor:
        # documentWorkersLimit = 1); Run Command has workers of its own.
        if c.comment.startswith("association "):
            with self.lock:
                one_at_a_time = self.association_slots.setdefault(inv.instance_id, threading.Lock())
            with one_at_a_time:
                self._run_invocation(c, inv)
        else:
            self._run_invocation(c, inv)

    def _run_invocation(self, c: Command, inv: Invocation) -> None:
        with self.lock:
            inv.status = inv.details = "InProgress"
            inv.started = time.time()
            injected = self.faults.fail_instances.get(inv.instance_id)
            inv.plugins = [PluginRun(step.name) for step in c.steps]
        if injected is not None:
            self._finish(c, inv, "Failed", "Failed", 1, "", injected or "injected failure")
            return
        node = self.nodes.get(inv.instance_id)
        env = dict(self.base_env)
        workdir = os.getcwd()
        if node is not None:
            env.update(node.env)
            workdir = node.workdir
        else:
            # A virtual instance has no sshd and no files: its hostkeyctl is
            # the stand-in in virtual-bin/, and a real one would find no ssh
            # directory and refuse before writing anything. Shared
            # (bed.py --virtual-shared), the stand-in installs on the node
            # every virtual instance shares.
            testbed = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            if self.virtual_shared is not None:
                workdir, shared_env = self.virtual_shared
                env.update(shared_env)
            else:
                env["HOSTKEYCTL_SSH_DIR"] = "/nonexistent/virtual-instance/etc/ssh"
            env["PATH"] = os.path.join(testbed, "virtual-bin") + ":" + env.get("PATH", "")
        env["AWS_SSM_INSTANCE_ID"] = inv.instance_id
        # The agent's orchestration directory for this command; a relative
        # destinationPath of aws:downloadContent lands in its downloads/,
        # which is then the working directory of aws:runShellScript steps
        # that name none (amazon-ssm-agent, plugins/downloadcontent and
        # plugins/runscript: "orchestrationDir/downloads").
        orchestration = os.path.join(workdir, "ssm-orchestration", c.command_id)
        downloads = os.path.join(orchestration, "downloads")
        status, code = "Success", 0
        for step, run in zip(c.steps, inv.plugins, strict=True):
            run.started = time.time()
            if step.action == "aws:downloadContent":
                run.status, run.response_code, run.stdout, run.stderr = self._download(step, downloads, node)
            else:
                cwd = downloads if os.path.isdir(downloads) else workdir
                run.status, run.response_code, run.stdout, run.stderr = self._shell(step, cwd, env, node)
            run.ended = time.time()
            if run.status != "Success" and status == "Success":
                status, code = run.status, run.response_code
            if run.status != "Success" and step.on_failure == "exit":
                # The remaining steps do not run, and the agent says so
                # after the step's own error (amazon-ssm-agent,
                # runpluginutil.go).
                run.stderr += "\nStep was found to have onFailure property. Further document steps will be skipped."
                for rest in inv.plugins[inv.plugins.index(run) + 1 :]:
                    rest.status = "Cancelled"
                break
        out = "\n".join(r.stdout for r in inv.plugins if r.stdout)
        err = "\n".join(r.stderr for r in inv.plugins if r.stderr)
        details = "ExecutionTimedOut" if status == "TimedOut" else status
        self._finish(c, inv, status, details, code, out, err)

    def _download(self, step: Step, downloads: str, node: NodeEnv | None) -> tuple[str, int, str, str]:
        """aws:downloadContent of sourceType S3 from the bed's bucket
        directory (``s3_root``/BUCKET/KEY): the path-style and
        virtual-hosted URLs the agent parses (amazon-ssm-agent,
        s3util.ParseAmazonS3URL). The agent downloads with the instance
        profile: the bed does not evaluate the node role's S3 policy (the
        bucket is a directory; the quick starts' read policies are checked
        by make lint-aws)."""
        inputs = step.inputs
        kind = inputs.get("sourceType", "")
        if kind not in ("S3", "GitHub", "SSMDocument"):
            return "Failed", 1, "", "invalid input: Unsupported location type"
        if kind != "S3":
            return "Failed", 1, "", f"the bed downloads from S3 only, not {kind}"
        try:
            path = json.loads(inputs.get("sourceInfo", ""))["path"].strip()
        except (ValueError, KeyError, TypeError):
            return "Failed", 1, "", "s3 url parsing failed. Source Info could not be unmarshalled for source type S3"
        m = re.fullmatch(r"https://s3(?:[.-][a-z0-9-]+)?\.amazonaws\.com/([^/]+)/(.+)", path) or re.fullmatch(
            r"https://([^/.]+(?:\.[^/.]+)*)\.s3(?:[.-][a-z0-9-]+)?\.amazonaws\.com/(.+)", path
        )
        if m is None:
            return "Failed", 1, "", f"{path} is not an S3 URL"
        bucket, key = m.group(1), m.group(2)
        source = os.path.join(self.s3_root, bucket, key)
        if not os.path.isfile(source):
            return "Failed", 1, "", f"NoSuchKey: The specified key does not exist. (s3://{bucket}/{key})"
        dest = inputs.get("destinationPath", "")
        if os.path.isabs(dest):
            return (
                "Failed",
                1,
                "",
                "the bed writes downloads under the orchestration directory only (a relative destinationPath)",
            )
        target = os.path.join(downloads, dest) if dest else os.path.join(downloads, os.path.basename(key))
        if dest.endswith("/") or os.path.isdir(target):
            target = os.path.join(target, os.path.basename(key))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # S3 keeps no file mode: the agent writes the file 0644.
        with open(source, "rb") as src, open(target, "wb") as out:
            out.write(src.read())
        os.chmod(target, 0o644)
        return "Success", 0, f"Content downloaded to {target}", ""

    def _shell(self, step: Step, cwd: str, env: dict[str, str], node: NodeEnv | None) -> tuple[str, int, str, str]:
        """aws:runShellScript: the lines as one bash script. On a bare
        node (``bare_nodes``) it runs in a mount namespace of its own where
        /usr/local/bin is that node's (``ROOT/usr/local/bin``, empty until
        something installs there), as each instance has its own disk, and
        /usr/local/sbin holds its netfilter tools and systemctl."""
        # The agent writes the lines to _script.sh and runs it with sh
        # (amazon-ssm-agent, runshellscript.go): dash on Debian and Ubuntu,
        # so a bashism fails here as it would there.
        script = "\n".join(step.inputs.get("runCommand", [])) + "\n"
        if "imds-guard" in script and not (self.bare_nodes and node is not None):
            # It changes netfilter and systemd units: only a bare node's
            # namespace below keeps that off the test machine.
            return "Failed", 1, "", "bed: a command that runs imds-guard runs on bare nodes only (bed.py --bare)"
        argv = ["sh", "-c", script]
        if self.bare_nodes and node is not None:
            # /usr/local/sbin too: the node's netfilter tools and systemctl
            # (the bed's stand-ins, parts/host.py), so its rules and units
            # are never the host's; and the node's own /etc/systemd/system
            # and /etc/default, where a unit and its settings are written.
            own = [
                (os.path.join(node.workdir, *rel.split("/")), "/" + rel)
                for rel in ("usr/local/bin", "usr/local/sbin", "etc/systemd/system", "etc/default")
            ]
            for source, _ in own:
                os.makedirs(source, exist_ok=True)
            binds = " && ".join(f'mount --bind -- "${i}" {target}' for i, (_, target) in enumerate(own))
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                f'{binds} && exec sh -c "${len(own)}"',
                *[source for source, _ in own],
                script,
            ]
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            return "Failed", 1, "", f"agent could not start sh: {e}"
        with self.lock:
            self.processes.add(proc)
        try:
            out, err = proc.communicate(timeout=step.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return (
                "TimedOut",
                -1,
                out.decode("utf-8", "replace"),
                err.decode("utf-8", "replace")
                + f"\nfailed to run commands: exceeded the execution timeout of {step.timeout}s",
            )
        finally:
            with self.lock:
                self.processes.discard(proc)
        status = "Success" if proc.returncode == 0 else "Failed"
        return status, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
