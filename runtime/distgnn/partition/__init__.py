"""Partitioning: manifest, partition book, partitioner (METIS/random), loader, reuse.

Import the submodules directly (``distgnn.partition.partitioner`` pulls in pymetis lazily).
"""

from __future__ import annotations

from distgnn.partition.book import PartitionBook
from distgnn.partition.manifest import DataSpec, FileInfo, Manifest, PartInfo, PartitionOptions

__all__ = ["DataSpec", "FileInfo", "Manifest", "PartInfo", "PartitionBook", "PartitionOptions"]
