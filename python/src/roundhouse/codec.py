"""The deployment's payload codec, byte for byte as the TypeScript workers' (workers/encryption.ts): AES-256-GCM.

A payload is serialised as JSON `{"metadata": {k: base64}, "data": base64}`, encrypted with the keyring's current key
(a fresh 12-byte IV, the key id as additional authenticated data) and stored as IV + ciphertext + 16-byte tag, with
metadata `encoding: binary/encrypted`, `encryption-cipher: AES256GCM`, `encryption-key-id: <id>`. Decoding picks the
key by that id; payloads that were never encrypted pass through. Keys come from the same environment:
ROUNDHOUSE_ENCRYPTION_KEYS (or ROUNDHOUSE_ENCRYPTION_KEYS_FILE) as `id=key` entries, ROUNDHOUSE_ENCRYPTION_KEY_ID.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCRYPTED_ENCODING = b"binary/encrypted"
CIPHER = b"AES256GCM"
IV_BYTES = 12
KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class ConfigError(ValueError):
    """A setting in the environment is wrong; the message names the variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True)
class Keyring:
    current_key_id: str
    keys: Mapping[str, bytes]


def parse_keys(text: str, variable: str, current_key_id: str | None = None) -> Keyring:
    """`id=key` entries (comma- or newline-separated, `#` comments), each key 32 bytes in hex or base64."""
    keys: dict[str, bytes] = {}
    for raw in re.split(r"[\n,]", text):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        key_id, _, encoded = (part.strip() for part in entry.partition("="))
        if not KEY_ID.match(key_id) or not encoded:
            raise ConfigError(variable, "expected entries id=key (key id of letters, digits, ., _ or -)")
        try:
            key = bytes.fromhex(encoded) if re.fullmatch(r"[0-9a-fA-F]{64}", encoded) else base64.b64decode(encoded)
        except (ValueError, binascii.Error) as err:
            raise ConfigError(variable, f"key {key_id!r} is neither hex nor base64") from err
        if len(key) != 32:
            raise ConfigError(variable, f"key {key_id!r} is not 32 bytes (give 32 random bytes in base64 or hex)")
        if key_id in keys:
            raise ConfigError(variable, f"key id {key_id!r} appears twice")
        keys[key_id] = key
    if not keys:
        raise ConfigError(variable, "has no keys")
    current = current_key_id or next(iter(keys))
    if current not in keys:
        raise ConfigError("ROUNDHOUSE_ENCRYPTION_KEY_ID", f"{current!r} is not among the keys")
    return Keyring(current, keys)


def keyring_from_env(env: Mapping[str, str] = os.environ) -> Keyring | None:
    inline = env.get("ROUNDHOUSE_ENCRYPTION_KEYS", "").strip()
    file = env.get("ROUNDHOUSE_ENCRYPTION_KEYS_FILE", "").strip()
    if inline and file:
        raise ConfigError(
            "ROUNDHOUSE_ENCRYPTION_KEYS_FILE", "set either ROUNDHOUSE_ENCRYPTION_KEYS or its _FILE, not both"
        )
    if file:
        return parse_keys(
            Path(file).read_text(), "ROUNDHOUSE_ENCRYPTION_KEYS_FILE", env.get("ROUNDHOUSE_ENCRYPTION_KEY_ID")
        )
    if inline:
        return parse_keys(inline, "ROUNDHOUSE_ENCRYPTION_KEYS", env.get("ROUNDHOUSE_ENCRYPTION_KEY_ID"))
    return None


class UnknownEncryptionKeyError(Exception):
    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"payload was encrypted with key {key_id!r}, which this process does not have "
            "(add it to ROUNDHOUSE_ENCRYPTION_KEYS)"
        )


def _serialise(payload: Payload) -> bytes:
    metadata = {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()}
    return json.dumps({"metadata": metadata, "data": base64.b64encode(payload.data).decode()}).encode()


def _deserialise(body: bytes) -> Payload:
    parsed = json.loads(body)
    return Payload(
        metadata={k: base64.b64decode(v) for k, v in parsed["metadata"].items()},
        data=base64.b64decode(parsed["data"]),
    )


class AesGcmPayloadCodec(PayloadCodec):
    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        key_id = self._keyring.current_key_id
        aead = AESGCM(self._keyring.keys[key_id])
        encoded = []
        for payload in payloads:
            iv = os.urandom(IV_BYTES)
            sealed = aead.encrypt(iv, _serialise(payload), key_id.encode())  # ciphertext followed by the 16-byte tag
            encoded.append(
                Payload(
                    metadata={
                        "encoding": ENCRYPTED_ENCODING,
                        "encryption-cipher": CIPHER,
                        "encryption-key-id": key_id.encode(),
                    },
                    data=iv + sealed,
                )
            )
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
                decoded.append(payload)
                continue
            key_id = payload.metadata.get("encryption-key-id", b"").decode()
            key = self._keyring.keys.get(key_id)
            if key is None:
                raise UnknownEncryptionKeyError(key_id)
            body = AESGCM(key).decrypt(payload.data[:IV_BYTES], payload.data[IV_BYTES:], key_id.encode())
            decoded.append(_deserialise(body))
        return decoded
