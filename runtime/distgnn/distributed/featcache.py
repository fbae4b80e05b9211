"""A trainer's cache of hot ``DistTensor`` rows, kept consistent with the servers' writes.

Off by default; ``DISTGNN_FEATURE_CACHE_MB`` (or the job's ``trainers.featureCacheMB``)
gives each trainer process a budget. Which rows: the first ``WARMUP_READS`` large reads
of a tensor are counted (rows read at least twice, the most read first, up to the
budget: on a power-law graph the high-degree nodes every batch samples again); a
co-located trainer leaves out its own partition (read from shared memory anyway). The
chosen rows are filled as they are next read.

Consistency (DGL's semantics: a write acknowledged by a server is seen by every later
read of every trainer): each server keeps a write generation per tensor, bumped after
every write and read by a PULL before it gathers rows (:mod:`distgnn.server.store`). A
cached read still sends one PULL (``gen: true``) to every server owning any requested
row, without the cached rows (zero rows when all are cached); the rows of a server whose
answer carries another generation than the one they were read at are dropped and
fetched again (a second request). A tensor written between many of its reads (an
embedding trained every step) stops being cached.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distgnn import contract
from distgnn.errors import ConfigError, ProtocolError
from distgnn.log import kv

if TYPE_CHECKING:
    from distgnn.distributed.tensor import DistTensor

log = logging.getLogger("distgnn.distributed")

WARMUP_READS = 8
"""Large reads of a tensor counted before its cached rows are chosen."""
MIN_CACHED_READ = 1024
"""Reads of fewer rows bypass the cache (probes, labels of one batch)."""
MIN_CACHED_ROWS = 64
"""A tensor is cached only when at least this many rows fit the budget left."""
FEW_HITS = 4
"""With at most 1 hit in ``FEW_HITS`` rows (co-located trainers: hits are only other
partitions' rows) the other rows are received in place, the hits placed afterwards."""
JUDGE_READS = 8
WRITTEN_SHARE = 4
"""A tensor written between at least 1 in ``WRITTEN_SHARE`` of its first ``JUDGE_READS``
(or more) reads stops being cached: its hits would mostly cost a second request."""
MAX_GEN = (1 << 64) - 1


def cache_budget(env: Mapping[str, str]) -> int:
    """``DISTGNN_FEATURE_CACHE_MB`` in bytes (0: off); ConfigError naming it when wrong."""
    raw = env.get(contract.ENV_FEATURE_CACHE_MB, "").strip()
    if not raw:
        return 0
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not 0 <= mb <= 1 << 30:  # NaN fails too
        raise ConfigError(
            f"{contract.ENV_FEATURE_CACHE_MB}={raw[:40]!r}: expected a size in MB >= 0 "
            "(0: no feature cache)"
        )
    return int(mb * (1 << 20))


def answer_gen(part: int, meta: Mapping[str, Any]) -> int | None:
    """The write generation a PULL answer of server ``part`` carries (None: a server that
    does not report one); a malformed value is a ProtocolError naming the server."""
    if "gen" not in meta:
        return None
    g = meta["gen"]
    if type(g) is not int or not 0 <= g <= MAX_GEN:
        raise ProtocolError(
            f"PULL answer of server {part}: field 'gen' must be an integer in [0, 2**64), "
            f"got {str(g)[:40]!r}"
        )
    return g


@dataclass
class CacheStats:
    """Counters of one process's feature cache (rows of cached tensors only)."""

    hits: int = 0
    """Rows answered from the cache."""
    misses: int = 0
    """Rows of cached tensors pulled from the servers."""
    invalidations: int = 0
    """Times a server's new write generation dropped cached rows."""
    refetched: int = 0
    """Rows found stale at a read and pulled again (a second request)."""
    bytes_saved: int = 0
    """Bytes not pulled thanks to hits."""
    rows: int = 0
    """Rows the cache holds room for (all tensors)."""
    bytes: int = 0
    """Memory held: rows, their slot map, bookkeeping and the reads' scratch buffers."""


@dataclass
class _Warmup:
    reads: list[np.ndarray] = field(default_factory=list)


def _copy_rows(dest: torch.Tensor, pos: np.ndarray, rows: Any) -> None:
    """``dest[pos] = rows`` (row by row, no temporary)."""
    src = rows if isinstance(rows, torch.Tensor) else torch.from_numpy(rows)
    dest.index_copy_(0, torch.from_numpy(pos), src)


class TensorCache:
    """The cached rows of one tensor: ``slot[id]`` (-1: not cached), ``rows[slot]``,
    whether each slot is filled, and the generation of each server its rows were read at."""

    def __init__(self, t: DistTensor, ids: np.ndarray, stats: CacheStats) -> None:
        self.key = t.key
        self.stats = stats
        self.row_bytes = t.np_dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
        self.slot = np.full(t.shape[0], -1, dtype=np.int32)
        self.slot[ids] = np.arange(len(ids), dtype=np.int32)
        self.part = t.policy.locate(ids)[0].astype(np.int32)
        self.rows = np.empty((len(ids), *t.shape[1:]), dtype=t.np_dtype)
        self.filled = np.zeros(len(ids), dtype=bool)
        self.gen: list[int | None] = [None] * (len(t.policy.offsets) - 1)
        self.reads = 0
        self.written = 0
        """Reads, and reads that found a server's generation moved since the last one."""
        self.off = False
        self.lock = threading.Lock()
        self._bufs: dict[str, np.ndarray] = {}
        self.nbytes = self.slot.nbytes + self.rows.nbytes + self.part.nbytes + len(ids)

    def read(self, t: DistTensor, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Rows ``idx`` into ``out``: cached rows whose servers' generations are unchanged,
        the others pulled (and filled when chosen).

        The pulled rows are received together and copied to their positions, the cached
        ones gathered to theirs, both with torch's ``index_copy_`` (several times faster
        than NumPy's fancy-index assignment of rows)."""
        slot = self.slot[idx]
        cand = slot >= 0
        hit = cand.copy()
        hit[cand] = self.filled[slot[cand]]
        hit_pos = np.flatnonzero(hit)
        in_place = len(hit_pos) * FEW_HITS <= len(idx)
        if not len(hit_pos):  # nothing cached yet: received in place
            got, gens = t.pull_into(idx, out, gen=True)
            miss_pos = np.arange(len(idx))
        else:
            miss_pos = np.flatnonzero(~hit)
            hit_slot = slot[hit_pos]
            nparts = len(self.gen)
            hit_parts = np.flatnonzero(np.bincount(self.part[hit_slot], minlength=nparts))
            if in_place:  # the other rows keep their long runs: received in place
                got, gens = t.pull_into(idx, out, gen=True, check=hit_parts.tolist(), skip=hit)
            else:
                got, gens = t.pull_into(
                    idx[miss_pos], self._scratch("got", len(miss_pos)), gen=True,
                    check=hit_parts.tolist(),
                )  # fmt: skip
        # rows of a server are good when its generation is the one they were read at
        stale = [p for p, g in enumerate(self.gen) if gens.get(p, g) != g or g is None]
        written = False
        for p, g in gens.items():
            if g != self.gen[p] or g is None:
                written |= self.gen[p] is not None
                self._drop(p)
                self.gen[p] = g
        self.reads += 1
        self.written += written
        dest = torch.from_numpy(out)
        refetched = 0
        if len(hit_pos):
            if len(miss_pos) and not in_place:
                _copy_rows(dest, miss_pos, got)
            cached = torch.from_numpy(self._scratch("hit", len(hit_pos)))
            torch.index_select(
                torch.from_numpy(self.rows),
                0,
                torch.from_numpy(hit_slot.astype(np.int64)),
                out=cached,
            )
            _copy_rows(dest, hit_pos, cached)
            bad = np.flatnonzero(np.isin(self.part[hit_slot], stale)) if stale else hit_pos[:0]
            if len(bad):
                fresh, again = t.pull_into(idx[hit_pos[bad]], gen=True)
                _copy_rows(dest, hit_pos[bad], fresh)
                self._fill(hit_slot[bad], fresh, again)
                refetched = len(bad)
        elif got is not out:
            out[...] = got  # an in-process answer
        ms = slot[miss_pos]
        fill = np.flatnonzero(ms >= 0)
        if len(fill):
            placed = in_place or not len(hit_pos)  # the pulled rows are in ``out``
            self._fill(ms[fill], out[miss_pos[fill]] if placed else got[fill], gens)
        good = len(hit_pos) - refetched
        self.stats.hits += good
        self.stats.misses += len(miss_pos)
        self.stats.refetched += refetched
        self.stats.bytes_saved += good * self.row_bytes
        if self.reads >= JUDGE_READS and self.written * WRITTEN_SHARE >= self.reads:
            self.off = True
            log.info(
                "feature cache: tensor written between its reads, no longer cached",
                extra=kv(name=self.key, reads=self.reads, written=self.written),
            )
        return out

    def _scratch(self, which: str, n: int) -> np.ndarray:
        """``n`` rows of a buffer kept between reads (no fresh pages every step)."""
        buf = self._bufs.get(which)
        if buf is None or len(buf) < n:
            old = 0 if buf is None else buf.nbytes
            buf = self._bufs[which] = np.empty((n, *self.rows.shape[1:]), self.rows.dtype)
            self.stats.bytes += buf.nbytes - old
            self.nbytes += buf.nbytes - old
        return buf[:n]

    def _fill(self, slots: np.ndarray, rows: np.ndarray, gens: Mapping[int, int | None]) -> None:
        """Keep ``rows`` (pulled with generations ``gens``) in ``slots``: those of the
        servers whose generation is the one the cache holds rows at."""
        same = np.array(
            [g is not None and gens.get(p, -1) == g for p, g in enumerate(self.gen)], dtype=bool
        )
        ok = same[self.part[slots]]
        self.rows[slots[ok]] = rows[ok]
        self.filled[slots[ok]] = True

    def _drop(self, p: int) -> None:
        """Forget server ``p``'s cached rows (an invalidation when any was filled)."""
        mine = self.part == p
        if self.filled[mine].any():
            self.filled[mine] = False
            self.stats.invalidations += 1


class FeatureCache:
    """One process's cache of hot rows, ``budget`` bytes over all tensors, first come."""

    def __init__(
        self,
        budget: int,
        local_part: int | None = None,
        warmup: int = WARMUP_READS,
        min_read: int = MIN_CACHED_READ,
    ) -> None:
        self.budget = budget
        self.warmup = warmup
        self.min_read = min_read
        self.left = budget
        self.local_part = local_part
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._state: dict[str, _Warmup | TensorCache | None] = {}

    def read(self, t: DistTensor, idx: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """``out`` filled through the cache, or None: the caller pulls as usual (a tensor
        not cached, or still being counted)."""
        if len(idx) < self.min_read:
            return None
        with self._lock:
            st = self._state.get(t.key, _Warmup())
            if isinstance(st, _Warmup):
                st.reads.append(idx.copy())
                st = self._choose(t, st) if len(st.reads) >= self.warmup else st
                self._state[t.key] = st
                return None
        if st is None:
            return None
        with st.lock:
            if st.off:
                return None
            res = st.read(t, idx, out)
            if st.off:
                self._release(t.key, st)
            return res

    def _release(self, key: str, tc: TensorCache) -> None:
        with self._lock:
            if self._state.get(key) is tc:
                self._state[key] = None
                self.left += tc.nbytes
                self.stats.bytes -= tc.nbytes
                self.stats.rows -= len(tc.rows)
        tc.rows = tc.rows[:0]

    def _choose(self, t: DistTensor, w: _Warmup) -> TensorCache | None:
        """The rows read at least twice in the warm-up, most read first, that fit."""
        n = t.shape[0]
        counts = np.bincount(np.concatenate(w.reads), minlength=n)
        w.reads.clear()
        lp = self.local_part
        if lp is not None and lp < len(t.policy.offsets) - 1:
            counts[int(t.policy.offsets[lp]) : int(t.policy.offsets[lp + 1])] = 0
        row = t.np_dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
        cap = (self.left - 4 * n) // (row + 5)
        cand = np.flatnonzero(counts >= 2)
        if cap < MIN_CACHED_ROWS or len(cand) < MIN_CACHED_ROWS:
            log.info(
                "feature cache: tensor not cached",
                extra=kv(name=t.key, repeated_rows=len(cand), room_rows=max(0, cap)),
            )
            return None
        if len(cand) > cap:
            cand = cand[np.argpartition(-counts[cand], cap - 1)[:cap]]
        tc = TensorCache(t, np.sort(cand), self.stats)
        self.left -= tc.nbytes
        self.stats.rows += len(cand)
        self.stats.bytes += tc.nbytes
        log.info(
            "feature cache: rows chosen",
            extra=kv(name=t.key, rows=len(cand), mb=round(tc.nbytes / (1 << 20), 1),
                     budget_left_mb=round(self.left / (1 << 20), 1)),
        )  # fmt: skip
        return tc
