"""A trainer's cache of hot ``DistTensor`` rows, kept consistent with the servers' writes.

Off by default; ``DISTGNN_FEATURE_CACHE_MB`` (or the job's ``trainers.featureCacheMB``)
gives each trainer process a budget. Which rows: the first ``WARMUP_READS`` large reads
of a tensor are counted; the most read rows are chosen up to the budget (on a power-law
graph the high-degree nodes every batch samples again), provided at least
``MIN_CACHED_ROWS`` were read twice; a co-located trainer leaves out its own partition
(read from shared memory anyway). The chosen rows are filled as they are next read.

A read looks up every row's code in one gather (``TensorCache.live``: its slot, or not
cached), pulls the others packed in the caller's order into the output's first rows and
places every row in one pass (:mod:`distgnn.distributed.rowplace`: the native kernel
expands the pulled rows in place around the cached ones; no scratch buffers).

Consistency (DGL's semantics: a write acknowledged by a server is seen by every later
read of every trainer): each server keeps a write generation per tensor, bumped after
every write and read by a PULL before it gathers rows (:mod:`distgnn.server.store`). A
cached read still sends one PULL (``gen: true``) to every server owning a row it pulls
or holding cached rows of the tensor, without the cached rows (zero rows when it has
nothing to pull there); the rows of a server whose answer carries another generation
than the one they were read at are dropped and fetched again (a second request). A
tensor written between many of its reads (an embedding trained every step) stops being
cached.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from distgnn import contract
from distgnn.distributed.rowplace import kernel_for, place_rows
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
NOT_CHOSEN, NOT_FILLED = -1, -2
"""``TensorCache.live`` of a row not cached, and of a chosen row not filled."""


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
    """Memory held: rows, their slot map, bookkeeping (and, without the native kernel,
    the reads' scratch buffers)."""


@dataclass
class _Warmup:
    reads: list[np.ndarray] = field(default_factory=list)


class TensorCache:
    """The cached rows of one tensor: ``rows[slot]`` for the chosen IDs ``ids``
    (ascending), ``live[id]``: the slot of a filled row, ``NOT_FILLED`` for a chosen row
    not (or no longer) filled, ``NOT_CHOSEN`` (a read's codes in one gather); and the
    generation of each server its rows were read at."""

    def __init__(self, t: DistTensor, ids: np.ndarray, stats: CacheStats) -> None:
        self.key = t.key
        self.stats = stats
        self.row_bytes = t.np_dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
        self.ids = ids
        self.live = np.full(t.shape[0], NOT_CHOSEN, dtype=np.int32)
        self.live[ids] = NOT_FILLED
        self.part = t.policy.locate(ids)[0].astype(np.int32)
        self.held = np.unique(self.part).tolist()
        """The servers owning cached rows: every cached read learns their generations."""
        self.rows = np.empty((len(ids), *t.shape[1:]), dtype=t.np_dtype)
        self.filled = np.zeros(len(ids), dtype=bool)
        self.unfilled = len(ids)
        self.gen: list[int | None] = [None] * (len(t.policy.offsets) - 1)
        self.reads = 0
        self.written = 0
        """Reads, and reads that found a server's generation moved since the last one."""
        self.off = False
        self.lock = threading.Lock()
        self._bufs: dict[str, np.ndarray] = {}
        self.nbytes = (
            self.live.nbytes + self.ids.nbytes + self.part.nbytes
            + self.rows.nbytes + self.filled.nbytes
        )  # fmt: skip

    def read(self, t: DistTensor, idx: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Rows ``idx`` into ``out``: cached rows whose servers' generations are unchanged,
        the others pulled (and filled when chosen).

        With few hits (a co-located trainer: other partitions' rows only) the other rows
        are received in place by the read plan and the hits written around them; else the
        missing rows are pulled packed (into ``out``'s first rows when the native kernel
        can expand them in place) and :func:`place_rows` puts every row where it goes."""
        codes = self.live[idx]  # the slot of a cached row, < 0: pulled
        miss = codes < 0
        nmiss = int(np.count_nonzero(miss))
        nhit = len(idx) - nmiss
        check = self.held if nhit else []
        packed = None
        if not nhit:  # nothing cached yet: received in place
            got, gens = t.pull_into(idx, out, gen=True)
            if got is not out:
                out[...] = got  # an in-process answer
        elif nhit * FEW_HITS <= len(idx):  # the other rows keep their long runs
            got, gens = t.pull_into(idx, out, gen=True, check=check, skip=~miss)
        else:
            dest = out[:nmiss] if kernel_for(out, self.rows) else self._scratch("got", nmiss)
            got, gens = t.pull_into(np.compress(miss, idx), dest, gen=True, check=check)
            packed = dest
            if got is not dest:
                dest[...] = got  # an in-process answer
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
        refetched = 0
        if nhit:
            place_rows(out, codes, self.rows, packed, self._scratch)
            if stale:  # cached rows of servers written since: read again
                hit_pos = np.flatnonzero(~miss)
                bad = hit_pos[np.isin(self.part[codes[hit_pos]], stale)]
                if len(bad):
                    fresh, again = t.pull_into(idx[bad], gen=True)
                    out[bad] = fresh
                    self._fill(codes[bad], fresh, again)
                    refetched = len(bad)
        if self.unfilled:
            pos = np.flatnonzero(codes == NOT_FILLED)
            if len(pos):
                self._fill(np.searchsorted(self.ids, idx[pos]), out[pos], gens)
        good = nhit - refetched
        self.stats.hits += good
        self.stats.misses += nmiss
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
        """``n`` rows of a buffer kept between reads (no fresh pages every step; only
        without the native kernel)."""
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
        ok = slots[same[self.part[slots]]]
        self.rows[ok] = rows[same[self.part[slots]]]
        new = ok[~self.filled[ok]]
        self.unfilled -= len(np.unique(new))
        self.filled[ok] = True
        self.live[self.ids[ok]] = ok

    def _drop(self, p: int) -> None:
        """Forget server ``p``'s cached rows (an invalidation when any was filled)."""
        mine = np.flatnonzero((self.part == p) & self.filled)
        if len(mine):
            self.filled[mine] = False
            self.live[self.ids[mine]] = NOT_FILLED
            self.unfilled += len(mine)
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
        """The rows read in the warm-up, most read first, that fit; none when fewer than
        ``MIN_CACHED_ROWS`` were read twice (the tensor's rows do not repeat)."""
        n = t.shape[0]
        row = t.np_dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
        cap = (self.left - 4 * n) // (row + 13)  # live map; per row: ID, server, filled
        if cap < MIN_CACHED_ROWS:  # not even counted (a table far larger than the budget)
            w.reads.clear()
            log.info("feature cache: tensor not cached", extra=kv(name=t.key, room_rows=0))
            return None
        read = np.concatenate(w.reads)
        w.reads.clear()
        if n <= 4 * len(read):  # a count per row of the table: 10 ms for 1M rows
            counts = np.bincount(read, minlength=n)
            seen = np.flatnonzero(counts)
            counts = counts[seen]
        else:  # memory of the reads, not of the table's rows (which may be 10**8)
            seen, counts = np.unique(read, return_counts=True)
        del read
        lp = self.local_part
        if lp is not None and lp < len(t.policy.offsets) - 1:
            counts[(seen >= t.policy.offsets[lp]) & (seen < t.policy.offsets[lp + 1])] = 0
        repeated = int(np.count_nonzero(counts >= 2))
        if repeated < MIN_CACHED_ROWS:
            log.info(
                "feature cache: tensor not cached",
                extra=kv(name=t.key, repeated_rows=repeated, room_rows=max(0, cap)),
            )
            return None
        # a budget larger than the repeated rows takes rows read once too (measured on the
        # benchmark's batches with 256 MB: 89 % of later reads' rows vs 81 %)
        keep = np.flatnonzero(counts)
        if len(keep) > cap:
            keep = keep[np.argpartition(-counts[keep], cap - 1)[:cap]]
        cand = seen[keep]
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
