"""Object storage through fsspec: local paths, ``file://``, ``s3://`` and any fsspec URL.

Credentials are never passed on the command line or logged: s3fs/botocore read the
standard environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL_S3``, ``AWS_DEFAULT_REGION``), which Kubernetes fills from a Secret.
Callers may also pass explicit ``storage_options``.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from distgnn import contract
from distgnn.errors import ConfigError, StorageError, StorageNotFound, StorageUnusable


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
        with errors_for(url):
            return url_to_fs(url, **opts)
    except (ImportError, ValueError) as e:
        raise StorageError(f"cannot open {redact(url)}: {e}") from e


_NOT_CONFIGURED = ("NoCredentialsError", "PartialCredentialsError")
_NO_CREDENTIALS = (*_NOT_CONFIGURED, "CredentialRetrievalError")
_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "ReadTimeoutError",
    "ClientConnectorError",
    "ServerDisconnectedError",
)
_DENIED = ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")
_MISSING = ("404", "NoSuchBucket", "NoSuchKey", "NotFound")


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen and len(seen) < 16:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _client_error_code(x: BaseException) -> tuple[str, str]:
    """A botocore ``ClientError``'s error code and HTTP status (either may be empty)."""
    resp = getattr(x, "response", None) or {}
    code = str(resp.get("Error", {}).get("Code", ""))
    return code, str(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def describe_error(e: BaseException, url: str) -> str | None:
    """One line for a storage failure of ``url`` (botocore/aiohttp/OS errors), or None
    when ``e`` is not one. Never includes credentials."""
    where = redact(url)
    for x in _chain(e):
        name = type(x).__name__
        if name in _NO_CREDENTIALS:
            return (
                f"{where}: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                "or spec.storage.credentialsSecret on Kubernetes)"
            )
        if name in _UNREACHABLE:
            endpoint = default_options(url).get("endpoint_url") or "the default AWS endpoint"
            return f"{where}: cannot reach the S3 endpoint {redact(endpoint)} ({name})"
        if name == "ClientError":
            code, status = _client_error_code(x)
            if code in _DENIED or status == "403":
                return f"{where}: access denied ({code or status}; check the S3 credentials)"
            if code in _MISSING or status == "404":
                return f"{where}: not found ({code or status})"
            return f"{where}: S3 error {code or status}"
    if isinstance(e, FileNotFoundError):
        return f"{where}: not found"
    if isinstance(e, PermissionError):
        return f"{where}: access denied ({e.strerror or type(e).__name__}; check the credentials)"
    if isinstance(e, OSError):
        return f"{where}: {e.strerror or e}"
    return None


def is_missing(e: BaseException) -> bool:
    """Whether ``e`` (or its cause) says the object, folder or bucket does not exist:
    a wrong URL, which trying again does not fix (unlike an unreachable endpoint,
    refused credentials or a timeout)."""
    for x in _chain(e):
        if isinstance(x, FileNotFoundError):
            return True
        if type(x).__name__ == "ClientError":
            code, status = _client_error_code(x)
            return code in _MISSING or status == "404"
    return False


def is_permanent(e: BaseException) -> bool:
    """Whether trying again cannot cure the failure ``e``: the object, folder or bucket
    does not exist (:func:`is_missing`), it is a folder, not a regular file or larger
    than the reader's limit (:class:`~distgnn.errors.StorageUnusable`), or no credentials are
    configured at all. Not: an
    endpoint that does not answer, credentials refused (a policy being applied), a
    credential provider that failed (instance metadata, web identity), a timeout."""
    if is_missing(e):
        return True
    return any(
        isinstance(x, StorageUnusable | IsADirectoryError | NotADirectoryError)
        or type(x).__name__ in _NOT_CONFIGURED
        for x in _chain(e)
    )


def exit_status(e: BaseException, permanent: tuple[type[BaseException], ...]) -> int:
    """A command's exit status for the error ``e``: :data:`~distgnn.contract.EXIT_CONFIG_ERROR`
    (2, not retried) for a storage failure trying again cannot cure (:func:`is_permanent`)
    or an error of the types ``permanent``; :data:`~distgnn.contract.EXIT_FAILURE` (1) for
    the rest (a restart can cure it)."""
    no_retry = is_permanent(e) if isinstance(e, StorageError) else isinstance(e, permanent)
    return contract.EXIT_CONFIG_ERROR if no_retry else contract.EXIT_FAILURE


def is_remote_failure(e: BaseException) -> bool:
    """Whether ``e`` (or its cause) is an object-store client failure (botocore, aiohttp)."""
    names = (*_NO_CREDENTIALS, *_UNREACHABLE, "ClientError")
    return any(type(x).__name__ in names for x in _chain(e))


@contextlib.contextmanager
def errors_for(url: str) -> Iterator[None]:
    """Turn storage failures inside the block into one-line :class:`StorageError` s."""
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        msg = describe_error(e, url)
        if msg is None:
            raise
        raise (StorageNotFound if is_missing(e) else StorageError)(msg) from e


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


@contextlib.contextmanager
def open_read(url: str, storage_options: Mapping[str, Any] | None = None) -> Iterator[BinaryIO]:
    """An object opened for binary, seekable reading; missing, denied or unreachable
    objects (and failures while reading in the block) raise StorageError. Local paths
    must be regular files (a FIFO or device is refused instead of blocking)."""
    fs, path = get_fs(url, storage_options)
    with errors_for(url):
        if isinstance(fs, LocalFileSystem):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StorageUnusable(f"{redact(url)}: not a regular file")
                yield f
        else:
            with fs.open(path, "rb") as f:
                yield f


def read_bytes(
    url: str, storage_options: Mapping[str, Any] | None = None, max_bytes: int | None = None
) -> bytes:
    """Read a whole object (as :func:`open_read`); with ``max_bytes``, a larger object is
    refused without reading it all."""
    limit = -1 if max_bytes is None else max_bytes + 1
    with open_read(url, storage_options) as f:
        data: bytes = f.read(limit)
    if max_bytes is not None and len(data) > max_bytes:
        raise StorageUnusable(f"{redact(url)}: larger than {max_bytes} bytes")
    return data


def write_bytes(url: str, data: bytes, storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a whole object, creating parent folders on local file systems.

    On a local file system the data goes to a temporary name in the same folder, is
    fsynced, then renamed: a reader (or a full disk) never sees a partial file under the
    final name. Object stores publish an object only when its upload completes.
    """
    fs, path = get_fs(url, storage_options)
    with errors_for(url):
        if isinstance(fs, LocalFileSystem):
            _write_local_atomic(path, data)
            return
        with fs.open(path, "wb") as f:
            f.write(data)


def _write_local_atomic(path: str, data: bytes) -> None:
    parent = os.path.dirname(path) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def exists(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    fs, path = get_fs(url, storage_options)
    with errors_for(url):
        return bool(fs.exists(path))


def check_writable_folder(url: str) -> None:
    """Fail early, in one line, when the local folder ``url`` cannot be written: it is
    created (with its parents), a file is created in it, and both are removed again, so
    nothing is left behind. A remote URL is not checked (that would cost a write; its
    first write names the failure). Several processes may check one folder at once (a
    job's trainers): a folder another check removed before this one's file went in is
    created and tried again.

    Raises :class:`~distgnn.errors.ConfigError`: trying again does not help."""
    if not is_local(url):
        return
    path = os.path.abspath(local_path(url) or ".")
    where = redact(url)
    for attempt in range(WRITE_CHECK_ATTEMPTS):
        if _probe_folder(path, where, last=attempt == WRITE_CHECK_ATTEMPTS - 1):
            return


WRITE_CHECK_ATTEMPTS = 5


def _probe_folder(path: str, where: str, last: bool) -> bool:
    """One try of :func:`check_writable_folder`: True when a file could be created in
    ``path``; False when the folder vanished meanwhile (another check removed the folder
    it made) and this is not the ``last`` try."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{where}: the output location cannot be written (not a folder)")
    created: list[str] = []  # the folders missing now, outermost first
    up = path
    while not os.path.exists(up) and os.path.dirname(up) != up:
        created.insert(0, up)
        up = os.path.dirname(up)
    made: list[str] = []
    try:
        try:
            for d in created:
                try:
                    os.mkdir(d)
                    made.append(d)
                except FileExistsError:  # another writer made it meanwhile: not ours
                    if not os.path.isdir(d):
                        raise
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise ConfigError(
                f"{where}: the output location cannot be written (cannot create the folder: {why})"
            ) from e
        try:
            fd, probe = tempfile.mkstemp(dir=path, prefix=".distgnn-write-check-")
        except FileNotFoundError as e:
            if not last:
                return False
            raise ConfigError(
                f"{where}: the output location cannot be written "
                f"(cannot create a file there: {e.strerror or type(e).__name__})"
            ) from e
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise ConfigError(
                f"{where}: the output location cannot be written "
                f"(cannot create a file there: {why})"
            ) from e
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
        return True
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(d)


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """Plain file-system path of a local URL (``file:///x`` -> ``/x``)."""
    return url[len("file://") :] if url.startswith("file://") else url


__all__ = [
    "check_writable_folder",
    "default_options",
    "describe_error",
    "dirname",
    "errors_for",
    "exists",
    "exit_status",
    "fsspec",
    "get_fs",
    "is_local",
    "is_missing",
    "is_permanent",
    "is_remote_failure",
    "join",
    "local_path",
    "open_read",
    "read_bytes",
    "redact",
    "write_bytes",
]
