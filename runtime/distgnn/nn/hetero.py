"""DGL's ``HeteroGraphConv``: one module per relation of a typed block, outputs
aggregated per destination node type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from distgnn.errors import ConfigError

Aggregate = str | Callable[[list[torch.Tensor], str], torch.Tensor]


def _key(etype: str | tuple[str, str, str]) -> str:
    return ":".join(etype) if isinstance(etype, tuple) else etype


def _stack_agg(kind: str) -> Callable[[list[torch.Tensor], str], torch.Tensor]:
    def agg(outs: list[torch.Tensor], dsttype: str) -> torch.Tensor:
        if len(outs) == 1 and kind != "stack":
            return outs[0]
        st = torch.stack(outs, dim=0)
        if kind == "sum":
            return st.sum(0)
        if kind == "mean":
            return st.mean(0)
        if kind == "max":
            return st.max(0)[0]
        if kind == "min":
            return st.min(0)[0]
        return st.transpose(0, 1)  # "stack": (N, R, ...)

    return agg


class HeteroGraphConv(nn.Module):
    """``HeteroGraphConv(mods, aggregate='sum')``: ``mods`` maps an edge type (name or
    canonical triple) to a module called as ``mod(rel_block, (h_src, h_dst), ...)``;
    ``aggregate`` is sum/max/min/mean/stack or ``fn(list_of_tensors, dsttype)``.

    ``forward(g, inputs, mod_args=None, mod_kwargs=None)``: ``inputs`` is a dict
    ``ntype -> tensor`` (sources; on a block the destinations are their first
    ``num_dst_nodes(ntype)`` rows) or a pair of such dicts. Relations without edges
    are skipped, so the output holds only the destination types that got messages.
    """

    def __init__(self, mods: Mapping[Any, nn.Module], aggregate: Aggregate = "sum") -> None:
        super().__init__()
        self.mod_dict = {_key(k): v for k, v in mods.items()}
        self.mods = nn.ModuleDict(self.mod_dict)
        if isinstance(aggregate, str):
            if aggregate not in ("sum", "max", "min", "mean", "stack"):
                raise ConfigError(f"aggregate: {aggregate!r} is not sum/max/min/mean/stack")
            self.agg_fn = _stack_agg(aggregate)
        else:
            self.agg_fn = aggregate

    def _module(self, cet: tuple[str, str, str]) -> nn.Module | None:
        for k in (_key(cet), cet[1]):
            if k in self.mod_dict:
                return self.mods[k]
        return None

    def forward(
        self,
        g: Any,
        inputs: Any,
        mod_args: Mapping[str, tuple[Any, ...]] | None = None,
        mod_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> dict[str, torch.Tensor]:
        mod_args, mod_kwargs = mod_args or {}, mod_kwargs or {}
        if isinstance(inputs, tuple):
            src_in, dst_in = inputs
        elif getattr(g, "is_block", False):
            src_in = inputs
            dst_in = {k: v[: g.num_dst_nodes(k)] for k, v in inputs.items()}
        else:
            src_in = dst_in = inputs
        outputs: dict[str, list[torch.Tensor]] = {}
        for cet in g.canonical_etypes:
            stype, etype, dtype = cet
            mod = self._module(cet)
            if mod is None or stype not in src_in or dtype not in dst_in:
                continue
            rel = g[cet]
            if rel.num_edges() == 0:
                continue
            args = mod_args.get(etype, mod_args.get(_key(cet), ()))
            kwargs = mod_kwargs.get(etype, mod_kwargs.get(_key(cet), {}))
            out = mod(rel, (src_in[stype], dst_in[dtype]), *args, **kwargs)
            outputs.setdefault(dtype, []).append(out)
        return {t: self.agg_fn(outs, t) for t, outs in outputs.items()}
