"""Skip partitioning when an identical result already exists at the output URL."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from distgnn import storage
from distgnn.errors import ManifestError, StorageError
from distgnn.graph.io import graph_fingerprint
from distgnn.log import kv
from distgnn.partition.loader import load_manifest
from distgnn.partition.manifest import Manifest, PartitionOptions

log = logging.getLogger("distgnn.partition")

__all__ = ["find_reusable", "graph_fingerprint"]


def find_reusable(
    out_url: str,
    name: str,
    fingerprint: str | Callable[[], str],
    options: PartitionOptions,
    num_parts: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Manifest | None:
    """The manifest at ``OUT/NAME.json`` if it has this input fingerprint and these options.

    A missing, unreadable or malformed manifest means "not reusable" (None), never an
    error. ``fingerprint`` is the input's (:meth:`GraphData.fingerprint`), or a function
    computing it: it hashes the whole input, so it is called only once a manifest with
    the same options and part count exists.
    """
    url = storage.join(out_url, f"{name}.json")
    try:
        if not storage.exists(url, storage_options):
            return None
        m = load_manifest(url, storage_options)
    except (StorageError, ManifestError) as e:
        log.info("existing manifest not reusable", extra=kv(url=storage.redact(url), why=str(e)))
        return None
    if m.options != options or (num_parts is not None and m.num_parts != num_parts):
        return None
    fp = fingerprint() if callable(fingerprint) else fingerprint
    if m.input_fingerprint != fp:
        return None
    log.info("reusing partitions", extra=kv(url=storage.redact(url)))
    return m
