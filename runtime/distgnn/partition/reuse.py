"""Skip partitioning when an identical result already exists at the output URL."""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
    fingerprint: str,
    options: PartitionOptions,
    num_parts: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Manifest | None:
    """The manifest at ``OUT/NAME.json`` if it has this input fingerprint and these options.

    A missing, unreadable or malformed manifest means "not reusable" (None), never an
    error. Compute ``fingerprint`` with :func:`distgnn.graph.io.graph_fingerprint`.
    """
    url = storage.join(out_url, f"{name}.json")
    try:
        if not storage.exists(url, storage_options):
            return None
        m = load_manifest(url, storage_options)
    except (StorageError, ManifestError) as e:
        log.info("existing manifest not reusable", extra=kv(url=storage.redact(url), why=str(e)))
        return None
    same = m.input_fingerprint == fingerprint and m.options == options
    if same and (num_parts is None or m.num_parts == num_parts):
        log.info("reusing partitions", extra=kv(url=storage.redact(url)))
        return m
    return None
