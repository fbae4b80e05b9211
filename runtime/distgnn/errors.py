"""The one exception family of the runtime.

Every error a user can cause is a subclass of :class:`DistGNNError` with a
message that names the offending file, field or peer. The ``ValueError`` /
``OSError`` / ``TimeoutError`` bases let callers catch them the usual way.
"""

from __future__ import annotations


class DistGNNError(Exception):
    """Base class of every error raised on purpose by DistGNN."""


DGLError = DistGNNError
"""DGL's ``dgl.DGLError`` (``except dgl.DGLError`` after ``import distgnn as dgl``)."""


class GraphFormatError(DistGNNError, ValueError):
    """The input graph is malformed (missing arrays, bad IDs, wrong lengths or dtypes)."""


class ManifestError(DistGNNError, ValueError):
    """A partition manifest is malformed, of an unknown version, or inconsistent."""


class PartitionDataError(DistGNNError, ValueError):
    """A partition file is missing, truncated or fails its checksum."""


class StorageError(DistGNNError, OSError):
    """Object storage could not be read or written (unreachable, denied, not found)."""


class StorageNotFound(StorageError, FileNotFoundError):
    """The object, folder or bucket named does not exist (a wrong URL: trying again does
    not help, unlike an unreachable endpoint or refused credentials)."""


class StorageUnusable(StorageError):
    """The object exists but cannot be read as asked: not a regular file (a folder, FIFO
    or device) or larger than the reader's limit. A wrong URL or an oversized file does
    not cure itself: trying again does not help."""


class ConfigError(DistGNNError, ValueError):
    """A job manifest, option or environment variable is invalid."""


class IDOutOfRange(ConfigError, GraphFormatError, IndexError):
    """Node or edge IDs outside ``[0, n)``; also an ``IndexError``, as DGL's
    ``DistTensor`` indexing raises."""


class UnknownType(ConfigError, GraphFormatError, KeyError):
    """A node or edge type name the graph does not have; also a ``KeyError``, as DGL's
    ``num_nodes(ntype)`` and partition book raise."""

    def __str__(self) -> str:  # the message, not KeyError's quoted repr
        return str(self.args[0]) if self.args else ""


class ProtocolError(DistGNNError, ConnectionError):
    """A network frame is malformed, truncated, oversized or of an unknown type."""


class AuthError(DistGNNError, PermissionError):
    """A graph server refused the connection's token."""


class ServerError(DistGNNError, RuntimeError):
    """A graph server answered a request with an error; ``code`` is the ERROR frame's
    (``bad_request``, ``protocol``, ``auth``, ``busy``, ``resource``, ``internal``)."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code


class RequestTimeout(DistGNNError, TimeoutError):
    """A network request got no answer within its timeout."""


class ServerUnavailable(DistGNNError, ConnectionError):
    """A graph server could not be reached (not started, dead, or gone mid-request)."""


class WriteFailed(ServerUnavailable):
    """A write (PUSH, SPARSE_UPDATE, INIT/ATTACH/DETACH/DELETE_TENSOR) lost its server.

    ``applied`` is False when the request never reached the server whole (it was not
    applied: retrying is safe), None when the connection failed while waiting for the
    answer (it may or may not have been applied)."""

    def __init__(self, message: str, applied: bool | None) -> None:
        super().__init__(message)
        self.applied = applied


class TensorError(DistGNNError, ValueError):
    """A request named an unknown tensor, a bad shape/dtype, rows out of range, or values
    that do not fit the tensor's dtype."""


class JobFailed(DistGNNError, RuntimeError):
    """A local job failed; the message names the failing process and its cause.
    ``exit_status`` is ``distgnn run``'s: 2 when a trainer's configuration error failed
    it, else 1."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status
