"""An AWS error answer, as the emulator sends it, and the errors a service
answers with for access denied and throttling."""

from __future__ import annotations

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT

# The services that speak JSON (the others the EC2 or query protocol).
JSON_SERVICES = {"ssm", "secretsmanager", "sagemaker", "kms"}


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        # Further members of a JSON error's body (Lambda's ``Reason``).
        self.fields: dict[str, str] = {}


def denied(service: str, action: str, message: str) -> ApiError:
    """Access denied, as ``service`` answers it (``message``, or AWS's own)."""
    text = message or (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/test/test is not authorized to perform: "
        f"{service}:{action} because no identity-based policy allows the {service}:{action} action"
    )
    if service in JSON_SERVICES:
        return ApiError("AccessDeniedException", text, 400)
    return ApiError("UnauthorizedOperation", text, 403)


def throttled(service: str) -> ApiError:
    """Throttling, as ``service`` answers it."""
    if service in JSON_SERVICES:
        return ApiError("ThrottlingException", "Rate exceeded", 400)
    return ApiError("RequestLimitExceeded", "Request limit exceeded.", 503)
