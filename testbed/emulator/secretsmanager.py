"""Secrets Manager as the real service behaves where moto 5.2 differs."""

from __future__ import annotations

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT

from .errors import ApiError
from .wire import JsonObject


def sync_current(request: JsonObject, region: str) -> None:
    """PutSecretValue with AWSCURRENT moves the label from the version
    that holds it (which becomes AWSPREVIOUS). moto 5.2 moves it from its
    own `default_version_id`, which UpdateSecretVersionStage never
    updates: after a rotation two versions held AWSCURRENT and stage
    reads returned the old one. Point it at the real holder first."""
    from moto.secretsmanager.models import FakeSecret, secretsmanager_backends

    if "AWSCURRENT" not in (request.get("VersionStages") or []):
        return
    backend = secretsmanager_backends[ACCOUNT][region]
    secret_id = request.get("SecretId", "")
    if secret_id not in backend.secrets:
        return
    secret = backend.secrets[secret_id]
    if not isinstance(secret, FakeSecret):  # a replica (the bed makes none): moto refuses the put
        return
    for version_id, version in secret.versions.items():
        if "AWSCURRENT" in version.get("version_stages", []):
            secret.default_version_id = version_id


def check_stage_move(request: JsonObject, region: str) -> None:
    """Secrets Manager refuses to move a staging label that another
    version holds unless RemoveFromVersionId names that version; moto 5.2
    enforces this for AWSCURRENT only. hostkeyctl relies on the refusal
    to claim AWSPENDING atomically."""
    from moto.secretsmanager.models import secretsmanager_backends

    if request.get("RemoveFromVersionId") or not request.get("MoveToVersionId"):
        return
    backend = secretsmanager_backends[ACCOUNT][region]
    secret_id, label = request.get("SecretId", ""), request.get("VersionStage", "")
    if secret_id not in backend.secrets:
        return
    secret = backend.secrets[secret_id]
    for version_id, version in secret.versions.items():
        if label in version.get("version_stages", []) and version_id != request["MoveToVersionId"]:
            raise ApiError(
                "InvalidParameterException",
                f"The parameter RemoveFromVersionId can't be empty. Staging label {label} is currently "
                f"attached to version {version_id}, so you must explicitly reference that version in "
                "RemoveFromVersionId.",
            )


def check_put(request: JsonObject, region: str) -> None:
    """PutSecretValue with the token of a version that holds a value is a
    no-op for the same value and refused for another (PutSecretValue API
    reference: "If a version with this value already exists and that
    version's SecretString and SecretBinary values are different from
    those in the request, then the request fails because you can't modify
    a secret version"). moto 5.2 overwrites any AWSPENDING version; only
    the empty one Secrets Manager stages before a rotation (rotation.py)
    takes a value."""
    from moto.secretsmanager.models import secretsmanager_backends

    token = request.get("ClientRequestToken")
    backend = secretsmanager_backends[ACCOUNT][region]
    secret_id = request.get("SecretId", "")
    if not token or not backend._is_valid_identifier(secret_id):
        return
    secret = backend.secrets[secret_id]
    version = secret.versions.get(token)
    if version is None or ("secret_string" not in version and "secret_binary" not in version):
        return
    if version.get("secret_string") != request.get("SecretString") or version.get("secret_binary") != request.get(
        "SecretBinary"
    ):
        raise ApiError(
            "ResourceExistsException",
            f"You can't use ClientRequestToken {token} because that value is already in use for a version of "
            f"secret {secret.arn}.",
        )
