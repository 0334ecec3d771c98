"""The Lambda API for the bed's functions: what `hostkeyctl schedule
enable` calls to pin a function to its secret, and ``Invoke``, which a
node's `hostkeyctl enroll` calls on the enrolment signer
(``POST /2015-03-31/functions/NAME/invocations``, RequestResponse: a
function error is HTTP 200 with ``X-Amz-Function-Error``, its payload
``errorType`` and ``errorMessage``; Lambda API reference, "Invoke").

``GetFunctionConfiguration`` (``GET /2015-03-31/functions/NAME/configuration``)
and ``UpdateFunctionConfiguration`` (``PUT`` on the same path) answer for
the functions registered with ``/_bed/lambda/register`` (rotation.py).
Modelled from the Lambda API reference: ``FunctionName`` in the path is a
name or an ARN; an update replaces the whole ``Environment.Variables`` map;
``RevisionId``, when given, must be the function's current one
(``PreconditionFailedException``, HTTP 412), and every update makes a new
one; an unknown function is ``ResourceNotFoundException`` (404). moto's
own Lambda backend is not used: it needs Docker to run a function.
"""

from __future__ import annotations

import json
import re
import threading
from typing import TYPE_CHECKING
from urllib.parse import unquote

from .errors import ApiError
from .wire import Answer

if TYPE_CHECKING:
    from .functions import Function

PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/configuration/?$")
# Invoke (Lambda API Reference, "Invoke": POST .../functions/NAME/invocations).
INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations/?$")


def action(method: str, path: str) -> str:
    """The IAM action of a Lambda API request, from its method and path."""
    if PATH.match(path):
        return "GetFunctionConfiguration" if method == "GET" else "UpdateFunctionConfiguration"
    if INVOKE.match(path):
        return "InvokeFunction"
    return "unknown"


def function_name(path: str) -> str:
    """The function a request's path names (a name or an ARN)."""
    match = PATH.match(path) or INVOKE.match(path)
    return unquote(match.group("name")) if match else ""


class LambdaApi:
    """Mixed into the emulator beside ``RotationPlane``."""

    functions: dict[str, Function]
    lock: threading.Lock

    def function_arn(self, name: str, region: str, account: str) -> str:
        """The ARN a request's function name means."""
        if name.startswith("arn:"):
            return name
        return f"arn:aws:lambda:{region}:{account}:function:{name}"

    def invoke_function(self, path: str, body: bytes, region: str, account: str) -> tuple[bool, object]:
        """Invoke, synchronously (RequestResponse): (succeeded, the
        function's response or its error). A function error is still HTTP
        200, with ``X-Amz-Function-Error`` (Lambda API Reference, Invoke)."""
        arn = self.function_arn(function_name(path), region, account)
        with self.lock:
            function = self.functions.get(arn)
        if function is None:
            raise ApiError("ResourceNotFoundException", f"Function not found: {arn}", 404)
        try:
            event = json.loads(body or b"{}")
        except ValueError as e:
            raise ApiError("InvalidRequestContentException", f"Could not parse request body into json: {e}", 400) from e
        # Past its reserved concurrency: TooManyRequestsException (functions.py).
        return function.invoke(event, 60)

    def lambda_call(self, method: str, path: str, body: bytes, region: str, account: str) -> Answer:
        """Answers one Lambda API request (module docstring)."""
        arn = self.function_arn(function_name(path), region, account)
        with self.lock:
            function = self.functions.get(arn)
        if function is None:
            raise ApiError("ResourceNotFoundException", f"Function not found: {arn}", 404)
        if method == "GET":
            return dict(function.configuration())
        if method != "PUT":
            raise ApiError("InvalidParameterValueException", f"{method} is not a Lambda configuration call", 400)
        request = json.loads(body or b"{}")
        revision = request.get("RevisionId")
        if revision is not None and revision != function.revision:
            raise ApiError(
                "PreconditionFailedException",
                "The Revision Id provided does not match the latest Revision Id. Call the GetFunction/GetAlias "
                "API to retrieve the latest Revision Id",
                412,
            )
        environment = request.get("Environment")
        if environment is not None:
            variables = environment.get("Variables") or {}
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in variables.items()):
                raise ApiError("InvalidParameterValueException", "Environment variables must be strings", 400)
            function.update(variables)
        return dict(function.configuration())
