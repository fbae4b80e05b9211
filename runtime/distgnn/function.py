"""DGL's ``dgl.function`` built-ins for ``apply_edges`` on pair graphs.

``u_dot_v('h', 'h', 'score')`` and the other ``{u,v,e}_{add,sub,mul,div,dot}_{u,v,e}``
combinations, ``copy_u``/``copy_v``/``copy_e``. A built-in is a small callable object
over an :class:`EdgeBatch`, so a Python function of the batch works in its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from distgnn.errors import ConfigError


@dataclass
class EdgeBatch:
    """The edges being computed: ``src[name]``/``dst[name]`` are endpoint data per edge,
    ``data[name]`` edge data (DGL's ``EdgeBatch``)."""

    src_ids: torch.Tensor
    dst_ids: torch.Tensor
    src_frame: dict[str, Any]
    dst_frame: dict[str, Any]
    data: dict[str, Any]

    @property
    def src(self) -> dict[str, torch.Tensor]:
        return {k: v.index_select(0, self.src_ids.to(v.device)) for k, v in self.src_frame.items()}

    @property
    def dst(self) -> dict[str, torch.Tensor]:
        return {k: v.index_select(0, self.dst_ids.to(v.device)) for k, v in self.dst_frame.items()}


@dataclass(frozen=True)
class BinaryOp:
    """``out = lhs_target[lhs] OP rhs_target[rhs]`` per edge (targets ``u``, ``v``, ``e``)."""

    op: str
    lhs_target: str
    lhs: str
    rhs_target: str
    rhs: str
    out: str

    def _get(self, edges: EdgeBatch, target: str, name: str) -> torch.Tensor:
        if target == "e":
            return edges.data[name]
        frame, ids = (
            (edges.src_frame, edges.src_ids) if target == "u" else (edges.dst_frame, edges.dst_ids)
        )
        if name not in frame:
            raise ConfigError(f"apply_edges: no node data {name!r}")
        x: torch.Tensor = frame[name]
        return x.index_select(0, ids.to(x.device))

    def __call__(self, edges: EdgeBatch) -> dict[str, torch.Tensor]:
        a = self._get(edges, self.lhs_target, self.lhs)
        b = self._get(edges, self.rhs_target, self.rhs)
        if self.op == "dot":
            r = (a * b).sum(-1, keepdim=True)
        elif self.op == "add":
            r = a + b
        elif self.op == "sub":
            r = a - b
        elif self.op == "mul":
            r = a * b
        else:
            r = a / b
        return {self.out: r}


@dataclass(frozen=True)
class CopyOp:
    target: str
    name: str
    out: str

    def __call__(self, edges: EdgeBatch) -> dict[str, torch.Tensor]:
        if self.target == "e":
            return {self.out: edges.data[self.name]}
        side = edges.src if self.target == "u" else edges.dst
        return {self.out: side[self.name]}


def _binary(op: str, lt: str, rt: str) -> Any:
    def make(lhs: str, rhs: str, out: str) -> BinaryOp:
        return BinaryOp(op, lt, lhs, rt, rhs, out)

    make.__name__ = f"{lt}_{op}_{rt}"
    make.__doc__ = f"``out = {lt}[lhs] {op} {rt}[rhs]`` per edge."
    return make


u_dot_v = _binary("dot", "u", "v")
u_add_v = _binary("add", "u", "v")
u_sub_v = _binary("sub", "u", "v")
u_mul_v = _binary("mul", "u", "v")
u_div_v = _binary("div", "u", "v")
v_dot_u = _binary("dot", "v", "u")
u_dot_e = _binary("dot", "u", "e")
u_mul_e = _binary("mul", "u", "e")
e_dot_v = _binary("dot", "e", "v")


def copy_u(u: str, out: str) -> CopyOp:
    return CopyOp("u", u, out)


def copy_v(v: str, out: str) -> CopyOp:
    return CopyOp("v", v, out)


def copy_e(e: str, out: str) -> CopyOp:
    return CopyOp("e", e, out)


copy_src = copy_u
copy_edge = copy_e
