"""Reading a manifest file safely: bounded size, depth and alias expansion; no duplicates.

``distgnn run`` reads YAML written by people (and by whatever generated it), so the
loader refuses, with one :class:`~distgnn.errors.ConfigError` line, what would
otherwise crash or exhaust the process: a file larger than :data:`MAX_BYTES`, bytes
that are not UTF-8, nesting deeper than :data:`MAX_DEPTH`, more than
:data:`MAX_NODES` values once aliases are expanded (a "billion laughs" bomb),
duplicate keys, and any tag beyond plain YAML (``!!python/object`` never runs).
"""

from __future__ import annotations

import os
import reprlib
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from distgnn.errors import ConfigError

MAX_BYTES = 256 * 1024
"""Largest manifest file read (real manifests are a few KiB)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists."""
MAX_NODES = 50_000
"""Most values in the document, counting every alias expansion."""
MAX_ALIASES = 256
"""Most alias uses (``*name``)."""

_SHORT = reprlib.Repr()
_SHORT.maxstring = 48
_SHORT.maxother = 48
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = 4
_SHORT.maxlevel = 2


def short(value: Any, limit: int = 64) -> str:
    """A bounded ``repr`` of any value (error messages never quote more than this)."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Limits:
    """The loader's bounds (defaults documented in docs/local-mode.md)."""

    max_bytes: int = MAX_BYTES
    max_depth: int = MAX_DEPTH
    max_nodes: int = MAX_NODES
    max_aliases: int = MAX_ALIASES


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts depth, expanded values and aliases while composing."""

    def __init__(self, stream: str, limits: Limits) -> None:
        super().__init__(stream)
        self.limits = limits
        self.depth = 0
        self.aliases = 0
        self.weight: dict[int, int] = {}
        """id(node) -> values in the node with aliases expanded."""

    def _fail(self, what: str) -> ConfigError:
        try:
            mark = self.peek_event().start_mark
        except (yaml.YAMLError, IndexError, AttributeError):
            return ConfigError(what)
        return ConfigError(f"line {mark.line + 1}: {what}")

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                raise self._fail(f"more than {self.limits.max_aliases} aliases")
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise self._fail(f"nested deeper than {self.limits.max_depth} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is None:
            return None
        key = id(node)
        if key in self.weight:  # an alias: its expansion counts again
            w = self.weight[key]
        else:
            w = 1 + sum(self.weight.get(id(c), 1) for c in _children(node))
            self.weight[key] = w
        if w > self.limits.max_nodes:
            raise self._fail(
                f"more than {self.limits.max_nodes} values (aliases expanded): too large"
            )
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        if not isinstance(node, MappingNode):  # e.g. `!!map [a]`: the base class refuses it
            return super().construct_mapping(node, deep=deep)
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                k = (key_node.tag, key_node.value)
                if k in seen:
                    raise ConfigError(
                        f"line {key_node.start_mark.line + 1}: duplicate key "
                        f"{short(key_node.value)}"
                    )
                seen.add(k)
        return super().construct_mapping(node, deep=deep)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def loads(text: str | bytes, source: str = "manifest", limits: Limits | None = None) -> Any:
    """Parse one YAML document within ``limits``; every failure is a one-line ConfigError."""
    lim = limits or Limits()
    if len(text) > lim.max_bytes:
        raise ConfigError(f"{source}: larger than {lim.max_bytes} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = short(e.object[e.start : e.start + 4])
            raise ConfigError(f"{source}: not UTF-8 text (byte {e.start}: {bad})") from e
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text, lim)
        return loader.get_single_data()
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(f"{source}:{where} malformed YAML ({short(problem, 160)})") from e
    except (ValueError, OverflowError, RecursionError, MemoryError) as e:
        # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{source}: unreadable value ({short(str(e), 120)})") from e
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: Path, limits: Limits | None = None) -> Any:
    """Read and parse a manifest file: a regular file of at most ``max_bytes``."""
    lim = limits or Limits()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the manifest ({e.strerror or e})") from e
    except ValueError as e:  # NUL in the path
        raise ConfigError(f"{short(str(path))}: cannot read the manifest ({e})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if st.st_size > lim.max_bytes:
            raise ConfigError(f"{path}: larger than {lim.max_bytes} bytes ({st.st_size})")
        data = os.read(fd, lim.max_bytes + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the manifest ({e.strerror or e})") from e
    finally:
        os.close(fd)
    return loads(data, str(path), lim)
