"""The bed's Lambda functions, as Lambda runs them.

Each function is a real ``bootstrap`` (the shipped binary) run behind a
stand-in for the Lambda runtime API: ``GET
/2018-06-01/runtime/invocation/next`` hands it the event with the
``Lambda-Runtime-*`` headers, ``POST .../response`` and ``.../error`` end
the invocation, ``POST /2018-06-01/runtime/init/error`` reports a start
that failed (Lambda Developer Guide, "Using the Lambda runtime API for
custom runtimes").

Concurrency, as Lambda has it (Lambda Developer Guide, "Understanding
Lambda function scaling" and "Configuring reserved concurrency"):

* an execution environment handles one invocation at a time; an
  invocation that finds none free gets a new one, and a warm one is kept
  for the next (here: one process, with its own runtime API, per
  environment, kept until the configuration changes);
* a function with reserved concurrency N never has more than N
  invocations at once; a synchronous invocation beyond that is refused at
  once, never queued: HTTP 429 ``TooManyRequestsException`` with
  ``Reason`` ``ReservedFunctionConcurrentInvocationLimitExceeded`` (Lambda
  API Reference, "Invoke", Errors). A function without reserved
  concurrency shares the account's (1,000 by default): not modelled as a
  limit here;
* ``/_bed/lambda/hold`` takes a function's whole concurrency for a while,
  as other invocations would: what a test uses to make every invocation
  in that time meet the limit, with no race.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .errors import ApiError
from .wire import Answer, JsonObject

# Lambda's own limit on one invocation; a rotation step has at most this.
STEP_TIMEOUT = 900.0
RUNTIME = "/2018-06-01/runtime"


def throttled() -> ApiError:
    """Invoke's refusal past the reserved concurrency (Lambda API
    Reference, "Invoke": TooManyRequestsException, HTTP 429)."""
    error = ApiError("TooManyRequestsException", "Rate Exceeded.", 429)
    error.fields = {"Reason": "ReservedFunctionConcurrentInvocationLimitExceeded", "Type": "User"}
    return error


class Sandbox:
    """One execution environment: a ``bootstrap`` process and its own
    runtime API, one invocation at a time."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.events: queue.Queue[tuple[str, JsonObject]] = queue.Queue()
        self.results: dict[str, tuple[bool, object]] = {}
        self.done = threading.Condition()
        self.init_error: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sandbox = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def _reply(self, status: int, body: bytes = b"{}", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != f"{RUNTIME}/invocation/next":
                    self._reply(404)
                    return
                request_id, event = sandbox.events.get()
                deadline = int((time.time() + STEP_TIMEOUT) * 1000)
                self._reply(
                    200,
                    json.dumps(event).encode(),
                    {
                        "Content-Type": "application/json",
                        "Lambda-Runtime-Aws-Request-Id": request_id,
                        "Lambda-Runtime-Deadline-Ms": str(deadline),
                        "Lambda-Runtime-Invoked-Function-Arn": sandbox.function.arn,
                        "Lambda-Runtime-Trace-Id": f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]}",
                    },
                )

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = self.path.split("/")
                if self.path == f"{RUNTIME}/init/error":
                    with sandbox.done:
                        sandbox.init_error = body.decode("utf-8", "replace")
                        sandbox.done.notify_all()
                    self._reply(202)
                    return
                if len(parts) == 6 and parts[3] == "invocation" and parts[5] in ("response", "error"):
                    text = body.decode("utf-8", "replace")
                    payload: object = text
                    try:
                        payload = json.loads(text)
                    except ValueError:
                        pass
                    with sandbox.done:
                        sandbox.results[parts[4]] = (parts[5] == "response", payload)
                        sandbox.done.notify_all()
                    self._reply(202)
                    return
                self._reply(404)

        return Handler

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.alive():
            return
        function = self.function
        self.init_error = None
        port = self.server.server_address[1]
        name = function.arn.rsplit(":", 1)[-1]
        env = {
            **function.runtime_env,
            **function.variables,
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "bed",
            "_HANDLER": "bootstrap",
            "LAMBDA_TASK_ROOT": os.path.dirname(function.bootstrap),
        }
        with open(function.log, "ab") as log:
            self.process = subprocess.Popen(
                [function.bootstrap], env=env, stdout=log, stderr=log, cwd=os.path.dirname(function.bootstrap)
            )

    def run(self, event: JsonObject, timeout: float) -> tuple[bool, object]:
        """One invocation: (succeeded, the response or the error)."""
        self.start()
        request_id = str(uuid.uuid4())
        self.events.put((request_id, event))
        deadline = time.monotonic() + timeout
        with self.done:
            while request_id not in self.results:
                if self.init_error is not None:
                    return False, {"errorType": "Runtime.InitError", "errorMessage": self.init_error}
                if self.process is not None and self.process.poll() is not None:
                    return False, {"errorType": "Runtime.ExitError", "errorMessage": f"exit {self.process.returncode}"}
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stop()
                    return False, {"errorType": "Sandbox.Timedout", "errorMessage": f"timed out after {timeout} s"}
                self.done.wait(min(left, 0.2))
            return self.results.pop(request_id)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None
        # An event the killed process never took would go to the next one.
        while not self.events.empty():
            self.events.get_nowait()

    def close(self) -> None:
        self.stop()
        self.server.shutdown()
        self.server.server_close()


class Function:
    """A function: its ``bootstrap``, environment, reserved concurrency
    and execution environments (module docstring)."""

    def __init__(
        self,
        arn: str,
        bootstrap: str,
        variables: dict[str, str],
        runtime_env: dict[str, str],
        log: str,
        reserved: int | None = None,
    ):
        self.arn = arn
        self.bootstrap = bootstrap
        # The function's configuration (Environment.Variables), and what
        # Lambda itself gives the process (the role's credentials, HOME).
        self.variables = variables
        self.runtime_env = runtime_env
        self.revision = str(uuid.uuid4())
        self.log = log
        self.reserved = reserved
        self.lock = threading.Lock()
        self.sandboxes: list[Sandbox] = []
        self.busy: set[Sandbox] = set()
        self.held = 0
        self.throttles = 0

    def _take(self) -> Sandbox:
        with self.lock:
            if self.reserved is not None and len(self.busy) + self.held >= self.reserved:
                self.throttles += 1
                raise throttled()
            idle = [s for s in self.sandboxes if s not in self.busy]
            sandbox = idle[0] if idle else Sandbox(self)
            if not idle:
                self.sandboxes.append(sandbox)
            self.busy.add(sandbox)
            return sandbox

    def invoke(self, event: JsonObject, timeout: float) -> tuple[bool, object]:
        """One synchronous invocation: (succeeded, the response or the
        error); :func:`throttled` past the reserved concurrency."""
        sandbox = self._take()
        try:
            return sandbox.run(event, timeout)
        finally:
            with self.lock:
                self.busy.discard(sandbox)

    def hold(self, seconds: float) -> Answer:
        """Takes the whole reserved concurrency for ``seconds`` (module
        docstring)."""
        if self.reserved is None:
            raise ApiError("InvalidParameterValueException", f"{self.arn} has no reserved concurrency to hold", 400)
        with self.lock:
            self.held += self.reserved

        def release() -> None:
            with self.lock:
                self.held -= self.reserved or 0

        timer = threading.Timer(seconds, release)
        timer.daemon = True
        timer.start()
        return {"held": self.reserved, "seconds": seconds}

    def stats(self) -> Answer:
        """How many invocations were throttled, and environments made."""
        with self.lock:
            return {"throttles": self.throttles, "environments": len(self.sandboxes), "reserved": self.reserved}

    def configuration(self) -> Answer:
        """GetFunctionConfiguration's answer (the fields hostkeyctl reads)."""
        name = self.arn.rsplit(":", 1)[-1]
        return {
            "FunctionName": name,
            "FunctionArn": self.arn,
            "Runtime": "provided.al2023",
            "Handler": "bootstrap",
            "Timeout": int(STEP_TIMEOUT),
            "Environment": {"Variables": dict(self.variables)},
            "RevisionId": self.revision,
            "State": "Active",
            "LastUpdateStatus": "Successful",
        }

    def update(self, variables: dict[str, str]) -> None:
        """A new configuration: Lambda starts new environments with it."""
        self.variables = dict(variables)
        self.revision = str(uuid.uuid4())
        self.stop()

    def stop(self) -> None:
        with self.lock:
            sandboxes = list(self.sandboxes)
        for sandbox in sandboxes:
            sandbox.stop()

    def close(self) -> None:
        with self.lock:
            sandboxes, self.sandboxes = list(self.sandboxes), []
        for sandbox in sandboxes:
            sandbox.close()
