from __future__ import annotations

import asyncio
import base64
import json
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload

from roundhouse.codec import AesGcmPayloadCodec, ConfigError, UnknownEncryptionKeyError, keyring_from_env, parse_keys

KEY = bytes(range(32))


def test_payloads_round_trip_and_plain_ones_pass_through() -> None:
    codec = AesGcmPayloadCodec(parse_keys(f"k1={KEY.hex()}", "ROUNDHOUSE_ENCRYPTION_KEYS"))
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"values": [1.0]}')
    [sealed] = asyncio.run(codec.encode([payload]))
    assert sealed.metadata["encoding"] == b"binary/encrypted"
    assert sealed.metadata["encryption-key-id"] == b"k1"
    assert b"values" not in sealed.data
    assert asyncio.run(codec.decode([sealed, payload])) == [payload, payload]


def test_the_wire_format_is_the_typescript_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """IV, then AES-256-GCM over JSON {metadata: base64, data: base64} with the key id as AAD, then the tag."""
    codec = AesGcmPayloadCodec(parse_keys(f"k1={base64.b64encode(KEY).decode()}", "ROUNDHOUSE_ENCRYPTION_KEYS"))
    [sealed] = asyncio.run(codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b"42")]))
    opened = json.loads(AESGCM(KEY).decrypt(sealed.data[:12], sealed.data[12:], b"k1"))
    assert opened == {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()}, "data": "NDI="}
    # And what the TypeScript side seals (same layout, made here by hand) opens.
    iv = os.urandom(12)
    body = json.dumps({"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "Ig=="}).encode()
    foreign = Payload(
        metadata={"encoding": b"binary/encrypted", "encryption-cipher": b"AES256GCM", "encryption-key-id": b"k1"},
        data=iv + AESGCM(KEY).encrypt(iv, body, b"k1"),
    )
    assert asyncio.run(codec.decode([foreign])) == [Payload(metadata={"encoding": b"json/plain"}, data=b'"')]


def test_keys_are_read_as_the_typescript_worker_reads_them() -> None:
    ring = keyring_from_env(
        {"ROUNDHOUSE_ENCRYPTION_KEYS": f"# rotated\nnew={KEY.hex()}\nold={base64.b64encode(KEY).decode()}"}
    )
    assert ring is not None and ring.current_key_id == "new" and set(ring.keys) == {"new", "old"}
    assert keyring_from_env({}) is None
    with pytest.raises(ConfigError, match="not 32 bytes"):
        parse_keys("k=abcd", "ROUNDHOUSE_ENCRYPTION_KEYS")
    with pytest.raises(ConfigError, match="ROUNDHOUSE_ENCRYPTION_KEY_ID"):
        keyring_from_env({"ROUNDHOUSE_ENCRYPTION_KEYS": f"k={KEY.hex()}", "ROUNDHOUSE_ENCRYPTION_KEY_ID": "other"})
    codec = AesGcmPayloadCodec(parse_keys(f"k1={KEY.hex()}", "v"))
    [sealed] = asyncio.run(codec.encode([Payload(data=b"1")]))
    with pytest.raises(UnknownEncryptionKeyError, match="'k1'"):
        asyncio.run(AesGcmPayloadCodec(parse_keys(f"k2={KEY.hex()}", "v")).decode([sealed]))
