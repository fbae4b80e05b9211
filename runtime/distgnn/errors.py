"""The one exception family of the runtime.

Every error a user can cause is a subclass of :class:`DistGNNError` with a
message that names the offending file, field or peer. The ``ValueError`` /
``OSError`` / ``TimeoutError`` bases let callers catch them the usual way.
"""

from __future__ import annotations


class DistGNNError(Exception):
    """Base class of every error raised on purpose by DistGNN."""


class GraphFormatError(DistGNNError, ValueError):
    """The input graph is malformed (missing arrays, bad IDs, wrong lengths or dtypes)."""


class ManifestError(DistGNNError, ValueError):
    """A partition manifest is malformed, of an unknown version, or inconsistent."""


class PartitionDataError(DistGNNError, ValueError):
    """A partition file is missing, truncated or fails its checksum."""


class StorageError(DistGNNError, OSError):
    """Object storage could not be read or written (unreachable, denied, not found)."""


class ConfigError(DistGNNError, ValueError):
    """A job manifest, option or environment variable is invalid."""


class ProtocolError(DistGNNError, ConnectionError):
    """A network frame is malformed, truncated, oversized or of an unknown type."""


class AuthError(DistGNNError, PermissionError):
    """A graph server refused the connection's token."""


class ServerError(DistGNNError, RuntimeError):
    """A graph server answered a request with an error."""


class RequestTimeout(DistGNNError, TimeoutError):
    """A network request got no answer within its timeout."""


class ServerUnavailable(DistGNNError, ConnectionError):
    """A graph server could not be reached (not started, dead, or gone mid-request)."""


class JobFailed(DistGNNError, RuntimeError):
    """A local job failed; the message names the failing process and its cause."""
