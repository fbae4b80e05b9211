"""Exit statuses of ``distgnn train`` and ``distgnn serve`` for each kind of error: 2 only
for what a restart cannot cure (the operator fails the job at once on it), 1 for the rest.
The storage failures are the real botocore exceptions, wrapped as ``storage.errors_for``
wraps them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import botocore.exceptions as bx
import pytest

from distgnn import contract, storage
from distgnn.errors import (
    AuthError,
    ConfigError,
    GraphFormatError,
    ManifestError,
    PartitionDataError,
    RequestTimeout,
    ServerUnavailable,
    StorageError,
)
from distgnn.partition import cli_partition as partition_cli
from distgnn.server import cli as serve_cli
from distgnn.server.server import PortUnavailable, ServerStartError
from distgnn.train import cli as train_cli

URL = "s3://bucket/graphs/cora.json"


def _wrapped(e: Exception) -> StorageError:
    """The StorageError that ``storage.errors_for`` raises for ``e``."""
    with pytest.raises(StorageError) as info, storage.errors_for(URL):
        raise e
    return info.value


def _client_error(code: str, status: int) -> bx.ClientError:
    return bx.ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"
    )


def _read_error(what: str) -> StorageError:
    """The StorageError ``storage.read_bytes`` raises on a real local path: a folder
    (``Is a directory``), a FIFO (``not a regular file``, refused before it blocks) or a
    file over its ``max_bytes``."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "cora.json")
        if what == "fifo":
            os.mkfifo(path)
        elif what == "big":
            path.write_bytes(b"x" * 10)
        with pytest.raises(StorageError) as info:
            storage.read_bytes(d if what == "folder" else str(path), max_bytes=4)
    return info.value


PERMANENT_STORAGE = [
    pytest.param(lambda: _wrapped(bx.NoCredentialsError()), id="no-credentials"),
    pytest.param(lambda: _wrapped(_client_error("NoSuchBucket", 404)), id="no-bucket"),
    pytest.param(lambda: _wrapped(_client_error("NoSuchKey", 404)), id="no-key"),
    pytest.param(lambda: _wrapped(FileNotFoundError(2, "No such file")), id="local-missing"),
    pytest.param(lambda: _read_error("folder"), id="a-folder"),
    pytest.param(lambda: _read_error("fifo"), id="not-a-regular-file"),
    pytest.param(lambda: _read_error("big"), id="larger-than-max-bytes"),
]
RETRYABLE_STORAGE = [
    pytest.param(lambda: _wrapped(_client_error("AccessDenied", 403)), id="denied"),
    pytest.param(
        lambda: _wrapped(bx.EndpointConnectionError(endpoint_url="http://s3:8333")),
        id="unreachable",
    ),
    pytest.param(lambda: _wrapped(_client_error("SlowDown", 503)), id="throttled"),
]


@pytest.mark.parametrize("make", PERMANENT_STORAGE)
@pytest.mark.parametrize(
    "module", [train_cli, serve_cli, partition_cli], ids=["train", "serve", "partition"]
)
def test_permanent_storage_errors_exit_2(module: object, make: object) -> None:
    e = make()  # type: ignore[operator]
    assert storage.is_permanent(e)
    assert module.error_status(e) == contract.EXIT_CONFIG_ERROR  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", RETRYABLE_STORAGE)
@pytest.mark.parametrize(
    "module", [train_cli, serve_cli, partition_cli], ids=["train", "serve", "partition"]
)
def test_other_storage_errors_exit_1(module: object, make: object) -> None:
    e = make()  # type: ignore[operator]
    assert module.error_status(e) == contract.EXIT_FAILURE  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("--manifest is required"), 2),
        (ManifestError("cora.json: unknown version"), 2),
        (PartitionDataError("part0/graph/indptr.npy: size 10 != 12 bytes"), 2),
        (GraphFormatError("indptr is not monotone"), 2),
        (PortUnavailable("cannot bind 0.0.0.0:30050: Address already in use"), 2),
        (ServerStartError("server worker pid 7 failed to start"), 1),
        (StorageError("s3://b/g.json: read failed"), 1),
    ],
)
def test_serve_error_status(error: BaseException, status: int) -> None:
    assert serve_cli.error_status(error) == status


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConfigError("--feat: no node field 'x'"), 2),
        (ManifestError("cora.json: unknown version"), 2),
        (GraphFormatError("labels out of range"), 2),
        (ServerUnavailable("server 1 lost"), 1),
        (RequestTimeout("no answer in 30 s"), 1),
        (AuthError("token refused"), 1),
    ],
)
def test_train_error_status(error: BaseException, status: int) -> None:
    assert train_cli.error_status(error) == status
