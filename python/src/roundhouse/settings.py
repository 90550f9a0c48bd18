"""Server settings from the same environment the TypeScript worker reads (config/io/worker-env.ts)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.service import TLSConfig

from roundhouse.codec import AesGcmPayloadCodec, ConfigError, Keyring, keyring_from_env

DEFAULT_TASK_QUEUE = "roundhouse-python"


@dataclass(frozen=True)
class Settings:
    address: str
    namespace: str
    task_queue: str
    api_key: str | None
    tls: TLSConfig | bool
    keyring: Keyring | None


def _file(env: Mapping[str, str], variable: str) -> bytes | None:
    path = env.get(variable, "").strip()
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(variable, f"cannot read {path}: {err.strerror}") from err


def settings_from_env(env: Mapping[str, str] = os.environ, task_queue: str | None = None) -> Settings:
    """TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY(_FILE), TEMPORAL_TLS*, ROUNDHOUSE_ENCRYPTION_KEYS*."""
    api_key = env.get("TEMPORAL_API_KEY", "").strip() or None
    key_file = _file(env, "TEMPORAL_API_KEY_FILE")
    if api_key and key_file is not None:
        raise ConfigError("TEMPORAL_API_KEY_FILE", "set either TEMPORAL_API_KEY or TEMPORAL_API_KEY_FILE, not both")
    if key_file is not None:
        api_key = key_file.decode().strip()
        if not api_key:
            raise ConfigError("TEMPORAL_API_KEY_FILE", "file is empty")
    flag = env.get("TEMPORAL_TLS", "").strip().lower()
    if flag not in ("", "true", "false", "1", "0"):
        raise ConfigError("TEMPORAL_TLS", f"must be true or false, got {flag!r}")
    cert, key, ca = (_file(env, v) for v in ("TEMPORAL_TLS_CERT_PATH", "TEMPORAL_TLS_KEY_PATH", "TEMPORAL_TLS_CA_PATH"))
    if (cert is None) != (key is None):
        missing = "TEMPORAL_TLS_KEY_PATH" if cert is not None else "TEMPORAL_TLS_CERT_PATH"
        raise ConfigError(missing, "mTLS needs both TEMPORAL_TLS_CERT_PATH and TEMPORAL_TLS_KEY_PATH")
    wants_tls = flag in ("true", "1") if flag else bool(api_key or cert or ca)
    if flag in ("false", "0") and (cert or api_key):
        raise ConfigError("TEMPORAL_TLS", "is false, but an API key or client certificate needs TLS")
    tls: TLSConfig | bool = False
    if wants_tls:
        server_name = env.get("TEMPORAL_TLS_SERVER_NAME", "").strip() or None
        tls = TLSConfig(server_root_ca_cert=ca, client_cert=cert, client_private_key=key, domain=server_name)
    address = env.get("TEMPORAL_ADDRESS", "").strip()
    if (api_key or wants_tls) and not address:
        raise ConfigError("TEMPORAL_ADDRESS", "is required with an API key or TLS (the server to connect to)")
    return Settings(
        address=address or "127.0.0.1:7233",
        namespace=env.get("TEMPORAL_NAMESPACE", "").strip() or "default",
        task_queue=task_queue or env.get("ROUNDHOUSE_PYTHON_TASK_QUEUE", "").strip() or DEFAULT_TASK_QUEUE,
        api_key=api_key,
        tls=tls,
        keyring=keyring_from_env(env),
    )


async def connect(settings: Settings) -> Client:
    converter = DataConverter.default
    if settings.keyring is not None:
        converter = dataclasses.replace(converter, payload_codec=AesGcmPayloadCodec(settings.keyring))
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key,
        tls=settings.tls,
        data_converter=converter,
    )
