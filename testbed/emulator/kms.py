"""AWS KMS asymmetric signing as AWS documents it, where moto 5.2.1 differs.

hostkeyctl's KMS CA (docs/certificates.md, "A CA in KMS") signs host
certificates with ``kms:Sign`` and reads the CA's public key with
``kms:GetPublicKey``. moto 5.2.1 models both, but not as KMS answers them;
each difference below names its source, the KMS API Reference (the same text
is botocore's ``kms/2014-11-01/service-2.json``, installed with the bed):

* ``ECC_NIST_EDWARDS25519`` keys: moto refuses the KeySpec. CreateKey:
  "ECC_NIST_EDWARDS25519 (ed25519) - signing and verification only", with
  the signing algorithms ``ED25519_SHA_512`` (MessageType RAW) and
  ``ED25519_PH_SHA_512`` (DIGEST). The emulator makes pure Ed25519 keys
  (RFC 8032); it does not model Ed25519ph and refuses it by name.
* ``MessageType``: moto ignores it and always hashes. Sign: "When the value
  of MessageType is RAW, KMS uses the standard signing algorithm, which
  begins with a hash function. When the value is DIGEST, KMS skips the
  hashing step ... the length of the Message value must match the length of
  hashed messages for the specified signing algorithm", and for Ed25519
  "ED25519_SHA_512 signing algorithm requires KMS MessageType:RAW".
* ``Message`` length: moto takes any. Sign: "Messages can be 0-4096 bytes"
  (the shape ``PlaintextType``: min 1, max 4096).
* Key state: moto signs with disabled keys and keys pending deletion. Sign's
  errors: ``DisabledException`` ("the specified KMS key is not enabled") and
  ``KMSInvalidStateException`` ("the state of the specified resource is not
  valid for this request"; Key states of AWS KMS keys, Developer Guide).
* Key usage and algorithm: moto answers ``ValidationException``. Sign's
  ``InvalidKeyUsageException``: "the KeyUsage value of the KMS key is
  incompatible with the API operation" or the signing algorithm is not one
  the key supports.
* GetPublicKey of a symmetric key: moto answers a public key it made up;
  KMS answers ``UnsupportedOperationException`` (GetPublicKey's errors:
  "the specified KMS key is not ... an asymmetric KMS key").
* GetPublicKey: moto omits ``KeySpec`` and answers the bare key id. Its
  output names ``KeyId`` "The Amazon Resource Name (key ARN) of the
  asymmetric KMS key from which the public key was downloaded" and
  ``KeySpec`` ("The type of the public key that was downloaded").

Everything else (CreateKey, DescribeKey, aliases, DisableKey,
ScheduleKeyDeletion, the symmetric keys Secrets Manager encrypts with) is
moto's. The private keys live in this process only; ``private_pem`` hands
one to a test that searches the bed for it (``GET /_bed/kms/private``).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, cast

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, utils

from .errors import ApiError
from .wire import JsonObject

if TYPE_CHECKING:
    from moto.kms.models import Key, KmsBackend

ED25519 = "ECC_NIST_EDWARDS25519"
# CreateKey: the signing algorithms of an ECC_NIST_EDWARDS25519 key.
ED25519_ALGORITHMS = ["ED25519_SHA_512", "ED25519_PH_SHA_512"]
# Sign: "Messages can be 0-4096 bytes" (PlaintextType: min 1, max 4096).
MAX_MESSAGE = 4096
# The hash of each signing algorithm: a DIGEST's length must be its size.
HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "ECDSA_SHA_256": hashes.SHA256,
    "ECDSA_SHA_384": hashes.SHA384,
    "ECDSA_SHA_512": hashes.SHA512,
    "RSASSA_PKCS1_V1_5_SHA_256": hashes.SHA256,
    "RSASSA_PKCS1_V1_5_SHA_384": hashes.SHA384,
    "RSASSA_PKCS1_V1_5_SHA_512": hashes.SHA512,
    "RSASSA_PSS_SHA_256": hashes.SHA256,
    "RSASSA_PSS_SHA_384": hashes.SHA384,
    "RSASSA_PSS_SHA_512": hashes.SHA512,
}
_APPLIED = [False]


class Ed25519Key:
    """An ECC_NIST_EDWARDS25519 key, in moto's private key interface."""

    def __init__(self) -> None:
        self.private_key = ed25519.Ed25519PrivateKey.generate()

    def sign(self, message: bytes, signing_algorithm: str) -> bytes:
        return self.private_key.sign(message)

    def verify(self, message: bytes, signature: bytes, signing_algorithm: str) -> bool:
        try:
            self.private_key.public_key().verify(signature, message)
            return True
        except Exception:
            return False

    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            encoding=serialization.Encoding.DER, format=serialization.PublicFormat.SubjectPublicKeyInfo
        )


def apply() -> None:
    """Teaches moto the Ed25519 KeySpec (the first call only)."""
    if _APPLIED[0]:
        return
    _APPLIED[0] = True
    from moto.kms import models
    from moto.kms.models import Key, KmsBackend

    real_generate = models.generate_private_key  # type: ignore[attr-defined]

    def generate(key_spec: str) -> Any:
        return Ed25519Key() if key_spec == ED25519 else real_generate(key_spec)

    models.generate_private_key = generate  # type: ignore[attr-defined]
    real_check = KmsBackend._KmsBackend__ensure_valid_key_spec  # type: ignore[attr-defined]

    def check(self: KmsBackend, key_spec: str) -> None:
        if key_spec != ED25519:
            real_check(self, key_spec)

    KmsBackend._KmsBackend__ensure_valid_key_spec = check  # type: ignore[attr-defined]
    real_algorithms = Key.signing_algorithms

    def algorithms(self: Key) -> list[str]:
        if self.key_spec == ED25519 and self.key_usage == "SIGN_VERIFY":
            return list(ED25519_ALGORITHMS)
        return real_algorithms.fget(self)  # type: ignore[no-any-return,attr-defined]

    Key.signing_algorithms = property(algorithms)  # type: ignore[assignment,method-assign]


def backend(account: str, region: str) -> KmsBackend:
    from moto.kms.models import kms_backends

    return kms_backends[account][region]


def find_key(account: str, region: str, key_id: str) -> Key:
    """The key `key_id` names (an id, ARN, alias name or alias ARN), or
    KMS's NotFoundException."""
    from moto.core.exceptions import JsonRESTError

    try:
        return backend(account, region).describe_key(key_id)
    except (JsonRESTError, KeyError) as e:
        raise ApiError("NotFoundException", f"Key '{key_id}' does not exist") from e


def key_arn(account: str, region: str, key_id: str) -> str:
    """The ARN IAM checks for a request naming `key_id` (its own when the
    key exists)."""
    try:
        return str(find_key(account, region, key_id).arn)
    except ApiError:
        return f"arn:aws:kms:{region}:{account}:key/{key_id}"


def key_tags(account: str, region: str, key_id: str) -> dict[str, str]:
    """The tags of the key `key_id` names (none when there is no such key):
    IAM's ``aws:ResourceTag/KEY`` for a KMS request."""
    try:
        key = find_key(account, region, key_id)
    except ApiError:
        return {}
    listed = backend(account, region).list_resource_tags(key.id).get("Tags", [])
    return {t["TagKey"]: t["TagValue"] for t in listed}


def _usable(key: Key) -> None:
    """Sign's and GetPublicKey's key state errors."""
    if key.key_state == "Disabled":
        raise ApiError("DisabledException", f"{key.arn} is disabled.")
    if key.key_state != "Enabled":
        raise ApiError("KMSInvalidStateException", f"{key.arn} is pending deletion.")


def sign(account: str, region: str, request: JsonObject) -> JsonObject:
    """Sign, as the module docstring says KMS answers it."""
    key = find_key(account, region, str(request.get("KeyId", "")))
    _usable(key)
    if key.key_usage != "SIGN_VERIFY":
        raise ApiError(
            "InvalidKeyUsageException", f"{key.arn} key usage is {key.key_usage} which is not valid for Sign."
        )
    algorithm = str(request.get("SigningAlgorithm", ""))
    if algorithm not in (key.signing_algorithms or []):
        raise ApiError(
            "InvalidKeyUsageException",
            f"Algorithm {algorithm} is incompatible with key spec {key.key_spec}.",
        )
    message = base64.b64decode(str(request.get("Message", "")))
    if not 1 <= len(message) <= MAX_MESSAGE:
        raise ApiError(
            "ValidationException",
            f"1 validation error detected: Value at 'message' failed to satisfy constraint: "
            f"Member must have length less than or equal to {MAX_MESSAGE}"
            if message
            else "1 validation error detected: Value at 'message' failed to satisfy constraint: "
            "Member must have length greater than or equal to 1",
        )
    message_type = str(request.get("MessageType") or "RAW")
    if message_type not in ("RAW", "DIGEST"):
        raise ApiError("ValidationException", f"MessageType {message_type} is not valid for {key.key_spec}.")
    if key.key_spec == ED25519:
        if algorithm != "ED25519_SHA_512":
            raise ApiError("UnsupportedOperationException", f"the test bed does not model {algorithm} (Ed25519ph)")
        if message_type != "RAW":
            raise ApiError("ValidationException", "ED25519_SHA_512 signing algorithm requires KMS MessageType:RAW")
        signature = cast(Any, key.private_key).private_key.sign(message)
    else:
        signature = _sign_hashed(key, algorithm, message, message_type)
    return {"KeyId": key.arn, "Signature": base64.b64encode(signature).decode(), "SigningAlgorithm": algorithm}


def _sign_hashed(key: Key, algorithm: str, message: bytes, message_type: str) -> bytes:
    """ECDSA or RSA over `message` (RAW) or the digest it is (DIGEST)."""
    hash_type = HASHES[algorithm]
    if message_type == "DIGEST":
        if len(message) != hash_type().digest_size:
            raise ApiError(
                "ValidationException",
                f"Digest is invalid length for algorithm {algorithm}: "
                f"{len(message)} bytes, not {hash_type().digest_size}.",
            )
        chosen: Any = utils.Prehashed(hash_type())
    else:
        chosen = hash_type()
    private = cast(Any, key.private_key).private_key
    if algorithm.startswith("ECDSA"):
        return bytes(private.sign(message, ec.ECDSA(chosen)))
    if algorithm.startswith("RSASSA_PSS"):
        pss = padding.PSS(mgf=padding.MGF1(hash_type()), salt_length=padding.PSS.DIGEST_LENGTH)
        return bytes(private.sign(message, pss, chosen))
    return bytes(private.sign(message, padding.PKCS1v15(), chosen))


def get_public_key(account: str, region: str, request: JsonObject) -> JsonObject:
    """GetPublicKey with the key ARN and KeySpec (module docstring)."""
    key = find_key(account, region, str(request.get("KeyId", "")))
    _usable(key)
    if key.key_spec == "SYMMETRIC_DEFAULT" or key.key_spec.startswith("HMAC"):
        raise ApiError("UnsupportedOperationException", f"{key.arn} key usage is not supported for GetPublicKey.")
    answer: JsonObject = {
        "KeyId": key.arn,
        "PublicKey": base64.b64encode(key.private_key.public_key()).decode(),
        "CustomerMasterKeySpec": key.key_spec,
        "KeySpec": key.key_spec,
        "KeyUsage": key.key_usage,
    }
    if key.key_usage == "SIGN_VERIFY":
        answer["SigningAlgorithms"] = key.signing_algorithms
    else:
        answer["EncryptionAlgorithms"] = key.encryption_algorithms
    return answer


def private_forms(account: str, region: str, key_id: str) -> JsonObject:
    """The forms a leaked copy of a key's private half would take (for a
    test that searches the bed's files and secrets): PKCS#8 PEM, its body,
    and the raw private scalar in hex and base64."""
    private = cast(Any, find_key(account, region, key_id).private_key).private_key
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    der = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    if isinstance(private, ed25519.Ed25519PrivateKey):
        scalar = private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
    elif isinstance(private, ec.EllipticCurvePrivateKey):
        value = private.private_numbers().private_value
        scalar = value.to_bytes((value.bit_length() + 7) // 8, "big")
    else:
        value = private.private_numbers().d
        scalar = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return {
        "pem": pem,
        "der_base64": base64.b64encode(der).decode(),
        "scalar_hex": scalar.hex(),
        "scalar_base64": base64.b64encode(scalar).decode(),
    }
