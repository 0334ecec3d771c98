"""CloudWatch's Smithy RPC v2 CBOR protocol in front of moto's JSON one.

aws-sdk-cloudwatch speaks RPC v2 CBOR (``POST
/service/GraniteServiceVersion20100801/operation/NAME``, header
``smithy-protocol: rpc-v2-cbor``, CBOR bodies, timestamps as CBOR tag 1);
moto 5.2.1 knows CloudWatch's JSON protocol only. A request is decoded,
handed to moto as ``X-Amz-Target: GraniteServiceVersion20100801.NAME`` with
its JSON, and moto's JSON answer (or error) is encoded back as CBOR.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from typing import TYPE_CHECKING, Any

import cbor2

from .wire import JsonObject

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

PREFIX = "/service/"
# Fields of CloudWatch's answers that are timestamps (tag 1 in CBOR).
TIMESTAMP_FIELDS = {"Timestamps", "Timestamp", "StateUpdatedTimestamp", "AlarmConfigurationUpdatedTimestamp"}


def operation(environ: WSGIEnvironment) -> str | None:
    """The operation of an RPC v2 CBOR request, or None for another protocol."""
    path = environ.get("PATH_INFO", "")
    if environ.get("HTTP_SMITHY_PROTOCOL") != "rpc-v2-cbor" or not path.startswith(PREFIX):
        return None
    parts = path[len(PREFIX) :].split("/")
    return parts[2] if len(parts) == 3 and parts[1] == "operation" else None


def _to_json(value: Any) -> Any:  # raw CBOR in (cbor2 has no types), raw JSON out
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, bytes):
        raise ValueError("the bed's CBOR bridge carries no blobs")
    return value


def _to_cbor(value: object, key: str = "") -> object:
    if key in TIMESTAMP_FIELDS:
        if isinstance(value, list):
            return [cbor2.CBORTag(1, float(v)) for v in value]
        if isinstance(value, int | float):
            return cbor2.CBORTag(1, float(value))
    if isinstance(value, dict):
        return {k: _to_cbor(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cbor(v) for v in value]
    return value


def decode(environ: WSGIEnvironment, body: bytes) -> JsonObject:
    """The request's parameters, as JSON would carry them."""
    if environ.get("HTTP_CONTENT_ENCODING", "") == "gzip":
        body = gzip.decompress(body)
    return _to_json(cbor2.loads(body)) if body else {}


def call_moto(
    moto: DomainDispatcherApplication,
    environ: WSGIEnvironment,
    start_response: StartResponse,
    target: str,
    request: JsonObject,
) -> list[bytes]:
    """Runs the request through moto's JSON protocol; answers in CBOR."""
    data = json.dumps(request).encode()
    inner = dict(environ)
    inner.update(
        {
            "PATH_INFO": "/",
            "REQUEST_METHOD": "POST",
            "CONTENT_TYPE": "application/x-amz-json-1.0",
            "CONTENT_LENGTH": str(len(data)),
            "HTTP_X_AMZ_TARGET": target,
            "wsgi.input": io.BytesIO(data),
        }
    )
    inner.pop("HTTP_CONTENT_ENCODING", None)
    captured: dict[str, str] = {}

    def capture(status: str, headers: list[tuple[str, str]], *_: object) -> None:
        captured["status"] = status

    raw = b"".join(moto(inner, capture))
    answer = json.loads(raw) if raw.strip() else {}
    return respond(start_response, captured.get("status", "500 Error"), answer)


def respond(start_response: StartResponse, status: str, answer: JsonObject) -> list[bytes]:
    """A CBOR answer (errors carry ``__type`` and ``message``, as JSON's do)."""
    if not status.startswith("200") and "message" not in answer and "Message" in answer:
        answer["message"] = answer.pop("Message")
    data = cbor2.dumps(_to_cbor(answer))
    start_response(
        status,
        [
            ("Content-Type", "application/cbor"),
            ("smithy-protocol", "rpc-v2-cbor"),
            ("Content-Length", str(len(data))),
        ],
    )
    return [data]
