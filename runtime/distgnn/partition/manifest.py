"""The partition manifest ``NAME.json``: typed dataclasses with strict validation.

See docs/partition-format.md. ``Manifest.from_json`` rejects unknown formats and
versions, missing or mistyped fields and inconsistent offsets with a
:class:`~distgnn.errors.ManifestError` naming the field.
"""

from __future__ import annotations

import itertools
import json
import posixpath
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from distgnn.errors import ManifestError

MAX_JSON_BYTES = 64 << 20
"""Largest manifest parsed (a 1,024-part manifest is a few MiB)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of a manifest's JSON (the format needs 5)."""
FORMAT = "distgnn-partitions"
VERSION = 1
METHODS = ("metis", "metis-full", "random")


@dataclass(frozen=True)
class DataSpec:
    """dtype and per-row shape of one node/edge data array."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FileInfo:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class PartitionOptions:
    """The options a partitioning ran with (part of the reuse key)."""

    method: str = "metis"
    seed: int = 0
    halo_hops: int = 1
    balance_train: bool = False
    balance_edges: bool = False
    train_mask: str = "train_mask"


@dataclass
class PartInfo:
    part_id: int
    path: str
    owned_nodes: int
    halo_nodes: int
    edges: int
    train_nodes: int
    files: dict[str, FileInfo] = field(default_factory=dict)


@dataclass
class Manifest:
    graph_name: str
    num_parts: int
    num_nodes: int
    num_edges: int
    node_types: list[str]
    edge_types: list[tuple[str, str, str]]
    node_offsets: list[int]
    edge_offsets: list[int]
    ntype_offsets: dict[str, list[int]]
    etype_offsets: dict[str, list[int]]
    node_data: dict[str, dict[str, DataSpec]]
    edge_data: dict[str, dict[str, DataSpec]]
    options: PartitionOptions
    input_fingerprint: str
    edge_cut: float
    parts: list[PartInfo]
    created_by: str = ""
    format: str = FORMAT
    version: int = VERSION

    @property
    def etype_names(self) -> list[str]:
        return [":".join(e) for e in self.edge_types]

    @property
    def is_homogeneous(self) -> bool:
        return self.node_types == ["_N"] and self.edge_types == [("_N", "_E", "_N")]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["edge_types"] = [list(e) for e in self.edge_types]
        for section in ("node_data", "edge_data"):
            for specs in d[section].values():
                for spec in specs.values():
                    spec["shape"] = list(spec["shape"])
        order = ["format", "version"]
        return {k: d[k] for k in order} | {k: v for k, v in d.items() if k not in order}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "manifest") -> Manifest:
        if len(text) > MAX_JSON_BYTES:
            raise ManifestError(f"{source}: larger than {MAX_JSON_BYTES} bytes")
        if _max_depth(text) > MAX_JSON_DEPTH:
            raise ManifestError(f"{source}: nested deeper than {MAX_JSON_DEPTH} levels")
        try:
            obj = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise ManifestError(f"{source}: not valid JSON ({str(e)[:200]})") from e
        return cls.from_dict(obj, source)

    @classmethod
    def from_dict(cls, obj: Any, source: str = "manifest") -> Manifest:
        return _Parser(source).manifest(obj)


def _max_depth(text: str | bytes) -> int:
    """An upper bound of the JSON nesting depth, computed without recursion.

    Brackets inside strings count too, so the bound can only be too high; names in a
    manifest hold no brackets, so a valid manifest stays far below the limit.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    b = np.frombuffer(raw, dtype=np.uint8)
    step = np.zeros(b.shape, dtype=np.int32)
    step[(b == ord("[")) | (b == ord("{"))] = 1
    step[(b == ord("]")) | (b == ord("}"))] = -1
    return int(np.cumsum(step).max()) if step.size else 0


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def err(self, path: str, msg: str) -> ManifestError:
        return ManifestError(f"{self.source}: field {path!r}: {msg}")

    def get(self, obj: dict[str, Any], key: str, typ: type | tuple[type, ...], path: str) -> Any:
        if key not in obj:
            raise self.err(f"{path}{key}", "missing")
        v = obj[key]
        bad_bool = isinstance(v, bool) and typ in (int, float, (int, float))
        if bad_bool or not isinstance(v, typ):
            want = typ.__name__ if isinstance(typ, type) else "number"
            raise self.err(f"{path}{key}", f"expected {want}, got {type(v).__name__}")
        return v

    def count(self, obj: dict[str, Any], key: str, path: str = "") -> int:
        v: int = self.get(obj, key, int, path)
        if v < 0:
            raise self.err(f"{path}{key}", f"must be >= 0, got {v}")
        return v

    def offsets(self, v: Any, path: str, n_parts: int, total: int | None) -> list[int]:
        if not isinstance(v, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in v
        ):
            raise self.err(path, "expected a list of integers")
        if len(v) != n_parts + 1:
            raise self.err(path, f"expected {n_parts + 1} entries, got {len(v)}")
        if v[0] != 0 or any(b < a for a, b in itertools.pairwise(v)):
            raise self.err(path, "offsets must start at 0 and be non-decreasing")
        if total is not None and v[-1] != total:
            raise self.err(path, f"must end at {total}, got {v[-1]}")
        return list(v)

    def specs(self, v: Any, path: str, keys: list[str]) -> dict[str, dict[str, DataSpec]]:
        if not isinstance(v, dict) or set(v) != set(keys):
            raise self.err(path, f"expected an object with keys {keys}")
        out: dict[str, dict[str, DataSpec]] = {}
        for t, names in v.items():
            if not isinstance(names, dict):
                raise self.err(f"{path}.{t}", "expected an object")
            out[t] = {}
            for name, spec in names.items():
                p = f"{path}.{t}.{name}"
                if not isinstance(spec, dict):
                    raise self.err(p, "expected an object")
                dtype = self.get(spec, "dtype", str, p + ".")
                shape = self.get(spec, "shape", list, p + ".")
                if not all(isinstance(x, int) and x >= 0 for x in shape):
                    raise self.err(p + ".shape", "expected non-negative integers")
                if "/" in name or name.startswith("."):
                    raise self.err(p, "bad data name")
                out[t][name] = DataSpec(dtype, tuple(shape))
        return out

    def relpath(self, v: str, path: str) -> str:
        norm = posixpath.normpath(v)
        if v.startswith("/") or norm.startswith("..") or "://" in v or "\\" in v:
            raise self.err(path, f"must be a relative path inside the folder, got {v!r}")
        return v

    def options(self, v: Any) -> PartitionOptions:
        if not isinstance(v, dict):
            raise self.err("options", "expected an object")
        method = self.get(v, "method", str, "options.")
        if method not in METHODS:
            raise self.err("options.method", f"unknown method {method!r}")
        return PartitionOptions(
            method=method,
            seed=self.get(v, "seed", int, "options."),
            halo_hops=self.count(v, "halo_hops", "options."),
            balance_train=self.get(v, "balance_train", bool, "options."),
            balance_edges=self.get(v, "balance_edges", bool, "options."),
            train_mask=self.get(v, "train_mask", str, "options."),
        )

    def part(self, v: Any, i: int, m: dict[str, Any]) -> PartInfo:
        p = f"parts[{i}]."
        if not isinstance(v, dict):
            raise self.err(p[:-1], "expected an object")
        info = PartInfo(
            part_id=self.count(v, "part_id", p),
            path=self.relpath(self.get(v, "path", str, p), p + "path"),
            owned_nodes=self.count(v, "owned_nodes", p),
            halo_nodes=self.count(v, "halo_nodes", p),
            edges=self.count(v, "edges", p),
            train_nodes=self.count(v, "train_nodes", p),
        )
        if info.part_id != i:
            raise self.err(p + "part_id", f"expected {i}, got {info.part_id}")
        no, eo = m["node_offsets"], m["edge_offsets"]
        if info.owned_nodes != no[i + 1] - no[i]:
            raise self.err(p + "owned_nodes", "does not match node_offsets")
        if info.edges != eo[i + 1] - eo[i]:
            raise self.err(p + "edges", "does not match edge_offsets")
        files = self.get(v, "files", dict, p)
        for name, f in files.items():
            fp = f"{p}files.{name}"
            self.relpath(name, fp)
            if not isinstance(f, dict):
                raise self.err(fp, "expected an object")
            sha = self.get(f, "sha256", str, fp + ".")
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise self.err(fp + ".sha256", "not a sha256 hex digest")
            info.files[name] = FileInfo(sha, self.count(f, "bytes", fp + "."))
        return info

    def manifest(self, obj: Any) -> Manifest:
        if not isinstance(obj, dict):
            raise ManifestError(f"{self.source}: expected a JSON object")
        fmt = self.get(obj, "format", str, "")
        if fmt != FORMAT:
            raise self.err("format", f"unknown format {fmt!r} (expected {FORMAT!r})")
        version = self.get(obj, "version", int, "")
        if version != VERSION:
            raise self.err("version", f"unsupported version {version} (this reader knows 1)")
        k = self.count(obj, "num_parts")
        if k < 1:
            raise self.err("num_parts", "must be >= 1")
        n, e = self.count(obj, "num_nodes"), self.count(obj, "num_edges")
        ntypes = self.get(obj, "node_types", list, "")
        if not ntypes or not all(isinstance(t, str) for t in ntypes):
            raise self.err("node_types", "expected a non-empty list of strings")
        etypes_raw = self.get(obj, "edge_types", list, "")
        etypes: list[tuple[str, str, str]] = []
        for i, et in enumerate(etypes_raw):
            if not (isinstance(et, list) and len(et) == 3 and all(isinstance(x, str) for x in et)):
                raise self.err(f"edge_types[{i}]", "expected [SRC, ETYPE, DST]")
            if et[0] not in ntypes or et[2] not in ntypes:
                raise self.err(f"edge_types[{i}]", "uses an unknown node type")
            etypes.append((et[0], et[1], et[2]))
        if list(ntypes) != sorted(ntypes):
            raise self.err("node_types", "must be sorted by name (DGL's node type IDs)")
        if etypes != sorted(etypes):
            raise self.err(
                "edge_types",
                "must be sorted as (src, etype, dst) tuples (DGL's relation IDs); "
                "partition the graph again",
            )
        enames = [":".join(x) for x in etypes]
        m: dict[str, Any] = {
            "node_offsets": self.offsets(obj.get("node_offsets"), "node_offsets", k, n),
            "edge_offsets": self.offsets(obj.get("edge_offsets"), "edge_offsets", k, e),
        }
        nto = self.typed_offsets(obj, "ntype_offsets", ntypes, k, m["node_offsets"])
        eto = self.typed_offsets(obj, "etype_offsets", enames, k, m["edge_offsets"])
        parts_raw = self.get(obj, "parts", list, "")
        if len(parts_raw) != k:
            raise self.err("parts", f"expected {k} entries, got {len(parts_raw)}")
        edge_cut = self.get(obj, "edge_cut", (int, float), "")
        return Manifest(
            format=fmt,
            version=version,
            graph_name=self.get(obj, "graph_name", str, ""),
            num_parts=k,
            num_nodes=n,
            num_edges=e,
            node_types=list(ntypes),
            edge_types=etypes,
            node_offsets=m["node_offsets"],
            edge_offsets=m["edge_offsets"],
            ntype_offsets=nto,
            etype_offsets=eto,
            node_data=self.specs(obj.get("node_data"), "node_data", ntypes),
            edge_data=self.specs(obj.get("edge_data"), "edge_data", enames),
            options=self.options(obj.get("options")),
            input_fingerprint=self.get(obj, "input_fingerprint", str, ""),
            edge_cut=float(edge_cut),
            parts=[self.part(p, i, m) for i, p in enumerate(parts_raw)],
            created_by=str(obj.get("created_by", "")),
        )

    def typed_offsets(
        self, obj: dict[str, Any], key: str, names: list[str], k: int, total: list[int]
    ) -> dict[str, list[int]]:
        v = self.get(obj, key, dict, "")
        if set(v) != set(names):
            raise self.err(key, f"expected keys {names}, got {sorted(v)}")
        out = {t: self.offsets(v[t], f"{key}.{t}", k, None) for t in names}
        for p in range(k):
            s = sum(out[t][p + 1] - out[t][p] for t in names)
            if s != total[p + 1] - total[p]:
                raise self.err(key, f"per-type counts of partition {p} do not add up")
        return out
