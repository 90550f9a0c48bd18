"""The artifact store, as the TypeScript workers see it: a local directory, or `s3://bucket/key` through boto3.

The workflows hand the Python side locations, never the data itself (completions stay out of Temporal's history).
Writes are atomic: a reader sees the old object or the new one, never part of one (a rename on disk; one PUT on S3).
S3 settings are boto3's own environment (credentials, AWS_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL), plus
ROUNDHOUSE_S3_FORCE_PATH_STYLE=true for servers that need path-style addressing, as for the TypeScript workers.
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, Protocol

# Not world-readable: the store holds test-set answers and episode tokens, and model-written code in a sandbox runs
# as another uid on the same host. The same modes as the TypeScript store's (config/io/artifacts.ts).
FILE_MODE = 0o640
DIR_MODE = 0o750


def _make_dirs(directory: Path) -> None:
    """Like mkdir -p, but every directory it creates gets DIR_MODE (Path.mkdir gives parents the umask's mode)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another writer made it first


class Store(Protocol):
    def read(self, location: str) -> bytes | None: ...
    def write(self, location: str, body: bytes) -> None: ...
    def list(self, prefix: str) -> list[str]: ...


class LocalStore:
    def read(self, location: str) -> bytes | None:
        try:
            return Path(location).read_bytes()
        except FileNotFoundError:
            return None

    def list(self, prefix: str) -> list[str]:
        root = Path(prefix)
        return sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []

    def write(self, location: str, body: bytes) -> None:
        target = Path(location)
        _make_dirs(target.parent)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class S3Store:
    def __init__(self) -> None:
        try:
            import boto3  # optional dependency (pip install 'roundhouse[s3]')
            from botocore.config import Config
        except ImportError as err:  # pragma: no cover - depends on the installation
            raise RuntimeError("an s3:// artifact location needs boto3: pip install 'roundhouse[s3]'") from err
        path_style = os.environ.get("ROUNDHOUSE_S3_FORCE_PATH_STYLE", "").strip().lower()
        if path_style not in ("", "true", "false"):
            raise ValueError(f"ROUNDHOUSE_S3_FORCE_PATH_STYLE: must be true or false, got {path_style!r}")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        config = Config(s3={"addressing_style": "path"}) if path_style == "true" else None
        self._client = boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)
        self._missing = self._client.exceptions.NoSuchKey

    @staticmethod
    def _split(location: str) -> tuple[str, str]:
        bucket, _, key = location.removeprefix("s3://").partition("/")
        if not bucket or not key:
            raise ValueError(f"{location!r} is not an s3://bucket/key location")
        return bucket, key

    def read(self, location: str) -> bytes | None:
        bucket, key = self._split(location)
        try:
            body: bytes = self._client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self._missing:
            return None
        return body

    def write(self, location: str, body: bytes) -> None:
        bucket, key = self._split(location)
        self._client.put_object(Bucket=bucket, Key=key, Body=body)

    def list(self, prefix: str) -> list[str]:
        bucket, key = self._split(prefix)
        found: list[str] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/"):
            found.extend(f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", []))
        return sorted(found)


@cache
def _s3() -> S3Store:
    return S3Store()


_local = LocalStore()


def store_for(location: str) -> Store:
    if location.startswith("s3://"):
        return _s3()
    if "://" in location and not location.startswith("file://"):
        raise ValueError(f"{location!r}: only a path, file:// or s3:// location is supported")
    return _local


def _plain(location: str) -> str:
    return location.removeprefix("file://")


def join(base: str, *parts: str) -> str:
    """`base/part/part` for paths and URIs alike (as the TypeScript side joins them)."""
    if base.startswith("s3://"):
        return "/".join([base.rstrip("/"), *parts])
    return str(Path(_plain(base), *parts))


def read_json(location: str) -> Any | None:
    body = store_for(location).read(_plain(location))
    return None if body is None else json.loads(body)


def write_json(location: str, value: Any) -> None:
    store_for(location).write(_plain(location), json.dumps(value, ensure_ascii=False).encode("utf-8"))


def list_under(prefix: str) -> list[str]:
    """The locations of the objects under `prefix` (a "directory"), deeply, sorted."""
    return store_for(prefix).list(_plain(prefix))


def read_text(location: str) -> str | None:
    body = store_for(location).read(_plain(location))
    return None if body is None else body.decode("utf-8")


def write_text(location: str, text: str) -> None:
    store_for(location).write(_plain(location), text.encode("utf-8"))
