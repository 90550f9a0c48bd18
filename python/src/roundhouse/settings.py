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


@dataclass(frozen=True)
class TlsFile:
    """One TLS file by Temporal's standard names (temporalio.envconfig's): its path or its PEM text, and the name
    Roundhouse read its path from before those. When the standard path and the older name are both set, the standard
    one wins and the older one is not read."""

    path: str
    data: str
    alias: str

    def source(self, env: Mapping[str, str]) -> str | None:
        """The variable this file comes from, or None when none is set."""
        path = next((name for name in (self.path, self.alias) if env.get(name, "").strip()), None)
        if path is not None and env.get(self.data, "").strip():
            raise ConfigError(self.data, f"set either {path} or {self.data}, not both")
        return self.data if env.get(self.data, "").strip() else path

    def read(self, env: Mapping[str, str]) -> bytes | None:
        source = self.source(env)
        if source == self.data:
            return env[self.data].strip().encode()
        return _file(env, source) if source is not None else None


CLIENT_CERT = TlsFile("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA", "TEMPORAL_TLS_CERT_PATH")
CLIENT_KEY = TlsFile("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_KEY_PATH")
SERVER_CA = TlsFile("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA", "TEMPORAL_TLS_CA_PATH")
# The names a client certificate and its key come from, pairwise: a certificate from one needs its key from its pair.
_PAIRS = (
    (CLIENT_CERT.path, CLIENT_KEY.path),
    (CLIENT_CERT.data, CLIENT_KEY.data),
    (CLIENT_CERT.alias, CLIENT_KEY.alias),
)


def _flag(env: Mapping[str, str], variable: str) -> bool | None:
    flag = env.get(variable, "").strip().lower()
    if flag not in ("", "true", "false", "1", "0"):
        raise ConfigError(variable, f"must be true or false, got {flag!r}")
    return None if not flag else flag in ("true", "1")


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
    flag = _flag(env, "TEMPORAL_TLS")
    if _flag(env, "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"):
        raise ConfigError(
            "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION",
            "is true, but Roundhouse always verifies the server's certificate: set TEMPORAL_TLS_SERVER_NAME to the "
            "name it holds, or TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed it",
        )
    cert_from, key_from = CLIENT_CERT.source(env), CLIENT_KEY.source(env)
    if (cert_from is None) != (key_from is None):
        cert_name, key_name = next(pair for pair in _PAIRS if cert_from in pair or key_from in pair)
        raise ConfigError(key_name if cert_from else cert_name, f"mTLS needs both {cert_name} and {key_name}")
    cert, key, ca = CLIENT_CERT.read(env), CLIENT_KEY.read(env), SERVER_CA.read(env)
    wants_tls = flag if flag is not None else bool(api_key or cert or ca)
    if flag is False and (cert or api_key):
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
