"""``dgl.distributed.nn``: the distributed embedding (also at ``distgnn.distributed``)."""

from distgnn.distributed.embedding import DistEmbedding

__all__ = ["DistEmbedding"]
