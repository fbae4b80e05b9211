"""The manifest fuzzer shared by ``tests/unit/test_manifest_hostile.py`` and
``bench/hostile_inputs.py``: seeded tree and byte mutations of a DistGNNJob manifest."""

from __future__ import annotations

import contextlib
import copy
import math
import random
from collections.abc import Sequence
from typing import Any

HOSTILE_VALUES: list[Any] = [
    None, True, 0, -1, 2**63, 10**30, 1.5, math.nan, math.inf, -math.inf, "", "x" * 5000,
    "\x00", "\ud800", "a\x00b", "~nouser/x", "s3://", "file://", "../../../../etc/passwd",
    [], [1, [2, [3]]], {}, {"a": {"b": None}}, {1: 2}, {"": ""}, ["\ud800"], {"k": "\x00"},
    "500m", "-1Gi", "metis", "node-classification", "/dev/zero", "DistGNNJob",
]  # fmt: skip
"""Values put in place of a manifest's values (and, the first six, as keys)."""

YAML_TOKENS: list[bytes] = [
    b"&a ", b"*a", b"[", b"{", b"- ", b"\x00", b"\xff", b"!!python/name:os.system",
    b"<<: ", b"\t", b"'", b'"\\ud800"', b": ", b"\n  ", b"---\n", b"%YAML 1.1\n",
    b"!!binary ", b"!!set ", b"? ",
]  # fmt: skip
"""Byte runs spliced into a manifest's YAML text."""


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a parsed manifest (the root's is ``()``)."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*prefix, i))
    return out


def mutate_tree(obj: Any, rng: random.Random, values: Sequence[Any] = HOSTILE_VALUES) -> Any:
    """A copy of ``obj`` with 1-3 values replaced, keys added or entries removed."""
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths(obj)[1:])
        parent = obj
        for p in path[:-1]:
            parent = parent[p]
        op = rng.random()
        if op < 0.6:
            parent[path[-1]] = copy.deepcopy(rng.choice(values))
        elif op < 0.8 and isinstance(parent, dict):
            key = rng.choice([*values[:6], "extra", "\ud800", "x" * 300])
            with contextlib.suppress(TypeError):  # an unhashable key
                parent[key] = rng.choice(values)
        else:
            del parent[path[-1]]
    return obj


def mutate_bytes(data: bytes, rng: random.Random, tokens: Sequence[bytes] = YAML_TOKENS) -> bytes:
    """``data`` with 1-4 byte runs replaced by tokens or single random bytes."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(buf))
        if rng.random() < 0.5:
            buf[i : i + rng.randint(0, 4)] = rng.choice(tokens)
        else:
            buf[i] = rng.randrange(256)
    return bytes(buf)
