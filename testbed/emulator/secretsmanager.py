"""Secrets Manager as the real service behaves where moto 5.2 differs."""

from __future__ import annotations

from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT

from .errors import ApiError


def sync_current(request: dict[str, Any], region: str) -> None:
    """PutSecretValue with AWSCURRENT moves the label from the version
    that holds it (which becomes AWSPREVIOUS). moto 5.2 moves it from its
    own `default_version_id`, which UpdateSecretVersionStage never
    updates: after a rotation two versions held AWSCURRENT and stage
    reads returned the old one. Point it at the real holder first."""
    from moto.secretsmanager.models import secretsmanager_backends

    if "AWSCURRENT" not in (request.get("VersionStages") or []):
        return
    backend = secretsmanager_backends[ACCOUNT][region]
    secret_id = request.get("SecretId", "")
    if secret_id not in backend.secrets:
        return
    secret = backend.secrets[secret_id]
    for version_id, version in secret.versions.items():
        if "AWSCURRENT" in version.get("version_stages", []):
            secret.default_version_id = version_id


def check_stage_move(request: dict[str, Any], region: str) -> None:
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
