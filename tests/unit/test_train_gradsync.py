"""distgnn.train.gradsync: DDP's gradients with the all-reduce after the backward.

Two real trainer processes on loopback (gloo), as the built-in apps run them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.ranks import run_ranks

from distgnn.contract import ENV_DEFER_ALLREDUCE as ENV
from distgnn.errors import ConfigError
from distgnn.train.gradsync import use_deferred_allreduce
from distgnn.train.loop import Steps

TRAINER = """
import json, os, sys, time
import torch
from torch import nn
from torch.nn import functional as F
from distgnn.train.ddp import init_ddp, shutdown, wrap
from distgnn.train.finish import end_process
from distgnn.train.gradsync import DeferredGradSync

flag = sys.argv[1]
ctx = init_ddp(timeout_s=60)
torch.set_num_threads(1)

def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    return wrap(ctx, m)

def batches():
    g = torch.Generator().manual_seed(100 + ctx.rank)  # every rank its own data
    return [(torch.randn(32 + 8 * ctx.rank, 8, generator=g),
             torch.randint(0, 3, (32 + 8 * ctx.rank,), generator=g)) for _ in range(4)]

def train(deferred):
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    sync = DeferredGradSync(m, ctx.world_size) if deferred else None
    torch.manual_seed(1)  # dropout's draws, the same in both runs
    data = batches()
    for i, (x, y) in enumerate(data):
        if sync is not None and i == 0 and ctx.rank == 1:
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(os.path.exists(flag))
        if sync is None:
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
        else:
            with sync.no_sync():
                loss = F.cross_entropy(m(x), y)
                opt.zero_grad()
                loss.backward()
            sync.start()
            if i == 0 and ctx.rank == 0:
                open(flag, "w").close()  # rank 1 starts its step only after this
            sync.finish()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]

seen = []
ddp = train(False)
deferred = train(True)
same = all(torch.equal(a, b) for a, b in zip(ddp, deferred))
print(json.dumps({"rank": ctx.rank, "same": same, "seen": seen}), flush=True)
shutdown(ctx)
# as `distgnn train` ends (docs/training.md "How a trainer ends"): no interpreter teardown,
# where a gloo worker thread dropping its last reference to a finished all-reduce aborts
end_process(0)
"""


def test_deferred_all_reduce_gives_ddps_parameters_and_lets_the_faster_rank_work_on(
    tmp_path: Path,
) -> None:
    """Rank 1 begins its first deferred step only once rank 0's ``start()`` has returned:
    with DDP's all-reduce inside the backward rank 0 would wait there for rank 1, which
    waits for rank 0 (no flag within 60 s). The parameters after 4 Adam steps (dropout,
    different batch sizes per rank) are bit-identical to DDP's."""
    flag = str(tmp_path / "rank0-started")
    outs = run_ranks(TRAINER, flag)
    assert [o["same"] for o in outs] == [True, True], outs
    rank1 = next(o for o in outs if o["rank"] == 1)
    assert rank1["seen"] == [True], "rank 0 was held in its backward by rank 1"


def test_a_single_trainer_keeps_its_gradients() -> None:
    import torch
    from torch import nn

    from distgnn.train.gradsync import DeferredGradSync

    m = nn.Linear(4, 2)
    m(torch.ones(3, 4)).sum().backward()
    before = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    sync = DeferredGradSync(m, 1)
    with sync.no_sync():
        pass
    sync.start()
    sync.finish()
    assert all(torch.equal(a, p.grad) for a, p in zip(before, m.parameters(), strict=True))


class _Sync:
    """Records when the all-reduce starts and ends."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def no_sync(self) -> Any:
        return contextlib.nullcontext()

    def start(self) -> None:
        self.events.append("start")

    def finish(self) -> None:
        self.events.append("finish")


def _made(events: list[str], n: int) -> Iterator[int]:
    for i in range(n):
        events.append(f"made {i}")
        yield i


def test_steps_make_the_next_batch_between_the_all_reduces_start_and_finish() -> None:
    events: list[str] = []
    steps = Steps(_made(events, 3), _Sync(events))  # type: ignore[arg-type]
    seen = []
    for item in steps:
        events.append(f"step {item}")
        seen.append(item)
        steps.sync_gradients()
    assert seen == [0, 1, 2]
    assert events == [
        "made 0", "step 0", "start", "made 1", "finish",
        "step 1", "start", "made 2", "finish",
        "step 2", "start", "finish",
    ]  # fmt: skip


def test_steps_without_a_deferred_sync_make_each_batch_when_asked() -> None:
    events: list[str] = []
    steps = Steps(_made(events, 2))
    for item in steps:
        events.append(f"step {item}")
        with steps.no_sync():
            steps.sync_gradients()
    assert events == ["made 0", "step 0", "made 1", "step 1"]


def test_the_mode_follows_the_environment_and_a_bad_value_names_the_variable() -> None:
    on, off, auto = ({ENV: v} for v in ("on", "off", "auto"))
    assert use_deferred_allreduce(2, prefetch_thread=False, env={})
    assert use_deferred_allreduce(2, prefetch_thread=False, env=auto)
    assert not use_deferred_allreduce(2, prefetch_thread=True, env=auto)
    assert use_deferred_allreduce(2, prefetch_thread=True, env=on)
    assert not use_deferred_allreduce(2, prefetch_thread=False, env=off)
    assert not use_deferred_allreduce(1, prefetch_thread=False, env=on)  # nothing to reduce
    with pytest.raises(ConfigError, match=ENV):
        use_deferred_allreduce(2, prefetch_thread=False, env={ENV: "sometimes"})


def test_a_model_with_buffers_keeps_ddps_all_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP broadcasts buffers (batch norm statistics) in every syncing forward; under
    ``no_sync()`` it would not, so such a model is not deferred."""
    import torch
    from torch import nn

    from distgnn.train.ddp import DDPContext
    from distgnn.train.loop import deferred_sync

    monkeypatch.delenv(ENV, raising=False)
    ctx = DDPContext(rank=0, world_size=2, device=torch.device("cpu"), joined=True)
    assert deferred_sync(ctx, nn.Linear(4, 2), prefetch_thread=False) is not None
    with_buffers = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))
    assert deferred_sync(ctx, with_buffers, prefetch_thread=False) is None
