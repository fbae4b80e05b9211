"""Object storage through fsspec: local paths, ``file://``, ``s3://`` and any fsspec URL.

Credentials are never passed on the command line or logged: s3fs/botocore read the
standard environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``), which Kubernetes fills from a Secret.
Callers may also pass explicit ``storage_options``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from distgnn import contract
from distgnn.errors import StorageError


def default_options(url: str) -> dict[str, Any]:
    """Storage options implied by the environment for ``url`` (only the endpoint for s3)."""
    if url.startswith(("s3://", "s3a://")):
        endpoint = os.environ.get(contract.ENV_S3_ENDPOINT) or os.environ.get(
            contract.ENV_S3_ENDPOINT_GENERIC
        )
        opts: dict[str, Any] = {}
        if endpoint:
            opts["endpoint_url"] = endpoint
        return opts
    return {}


def get_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """(filesystem, path) for ``url``; explicit options override the environment's."""
    opts = default_options(url)
    opts.update(storage_options or {})
    try:
        return url_to_fs(url, **opts)
    except (ImportError, ValueError) as e:
        raise StorageError(f"cannot open {redact(url)}: {e}") from e


def join(base: str, *parts: str) -> str:
    """Join URL path segments with '/' whatever the protocol (keeps ``s3://`` intact)."""
    if "://" in base:
        proto, rest = base.split("://", 1)
        return f"{proto}://" + posixpath.join(rest, *parts)
    return os.path.join(base, *parts)


def dirname(url: str) -> str:
    """The folder part of a path or URL."""
    if "://" in url:
        proto, rest = url.split("://", 1)
        return f"{proto}://" + posixpath.dirname(rest)
    return os.path.dirname(url) or "."


def redact(url: str) -> str:
    """A URL safe to log: drops any ``user:password@`` part."""
    if "://" in url and "@" in url.split("://", 1)[1].split("/", 1)[0]:
        proto, rest = url.split("://", 1)
        return f"{proto}://***@" + rest.split("@", 1)[1]
    return url


def read_bytes(url: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """Read a whole object; missing, denied or unreachable objects raise StorageError."""
    fs, path = get_fs(url, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data: bytes = f.read()
            return data
    except FileNotFoundError as e:
        raise StorageError(f"{redact(url)}: not found") from e
    except PermissionError as e:
        raise StorageError(f"{redact(url)}: access denied ({e})") from e
    except OSError as e:
        raise StorageError(f"{redact(url)}: {e}") from e


def write_bytes(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a whole object, creating parent folders on local file systems."""
    fs, path = get_fs(url, storage_options)
    try:
        parent = posixpath.dirname(path)
        if parent and isinstance(fs, LocalFileSystem):
            fs.makedirs(parent, exist_ok=True)
        with fs.open(path, "wb") as f:
            f.write(data)
    except PermissionError as e:
        raise StorageError(f"{redact(url)}: access denied ({e})") from e
    except OSError as e:
        raise StorageError(f"{redact(url)}: {e}") from e


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    fs, path = get_fs(url, storage_options)
    try:
        return bool(fs.exists(path))
    except OSError as e:
        raise StorageError(f"{redact(url)}: {e}") from e


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """Plain file-system path of a local URL (``file:///x`` -> ``/x``)."""
    return url[len("file://") :] if url.startswith("file://") else url


__all__ = [
    "default_options",
    "dirname",
    "exists",
    "fsspec",
    "get_fs",
    "is_local",
    "join",
    "local_path",
    "read_bytes",
    "redact",
    "write_bytes",
]
