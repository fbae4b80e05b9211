"""What a supervised built-in app optimises and measures: the loss, the label dtype it
needs, the streamed evaluation sums and the metric that selects the best epoch.

* classification (:data:`CLASSIFICATION`, ``edge-classification``): integer class IDs,
  cross-entropy, accuracy (higher is better).
* regression (:data:`REGRESSION`, ``edge-regression``): a float target of shape ``[N]``
  or ``[N, k]``, MSE, RMSE and MAE (the lowest validation RMSE is the best epoch).

:func:`for_app` gives each supervised app's objective (nodes or edges: what the label
field is, for messages).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from distgnn.errors import ConfigError


@dataclass(frozen=True)
class Objective:
    """Classification (``regression=False``) or regression; ``app`` names it in messages."""

    app: str
    regression: bool = False
    where: str = "node data"
    """what the label field is (``node data``, ``edge data``), for messages"""

    @property
    def metric(self) -> str:
        """The validation metric that selects the best epoch: ``accuracy`` or ``rmse``."""
        return "rmse" if self.regression else "accuracy"

    @property
    def progress_name(self) -> str:
        """Its camelCase name in ``/progress`` and Prometheus (``valAccuracy``, ``valRmse``)."""
        return "valRmse" if self.regression else "valAccuracy"

    def better(self, value: float, best: float | None) -> bool:
        if best is None:
            return True
        return value < best if self.regression else value > best

    def check_labels(self, option: str, name: str, labels: np.ndarray) -> None:
        """ConfigError naming ``option`` when the label's dtype does not fit the task."""
        if labels.size == 0:
            return
        floating = np.issubdtype(labels.dtype, np.floating)
        if self.regression and not floating:
            raise ConfigError(
                f"{option}: {self.where} {name!r} is {labels.dtype}; {self.app} needs a float "
                "target (for integer class IDs use the classification app)"
            )
        if not self.regression and floating:
            hint = self.app.replace("classification", "regression")
            raise ConfigError(
                f"{option}: {self.where} {name!r} is {labels.dtype}; {self.app} needs integer "
                f"class IDs (for a float target use {hint})"
            )
        if not self.regression and labels.ndim != 1:
            raise ConfigError(
                f"{option}: {self.where} {name!r} has shape {list(labels.shape)}; class IDs are "
                "one per row"
            )
        if self.regression and labels.ndim > 2:
            raise ConfigError(
                f"{option}: {self.where} {name!r} has shape {list(labels.shape)}; a target is "
                "[N] or [N, k]"
            )

    def out_feats(self, labels: np.ndarray) -> int:
        """The model's output width: classes (max ID + 1, before the all-reduce) or ``k``."""
        if self.regression:
            return 1 if labels.ndim == 1 else int(labels.shape[1])
        return int(labels.max(initial=0)) + 1

    def target(self, y: torch.Tensor) -> torch.Tensor:
        """Labels as the loss takes them: int64 IDs, or float32 ``[B, k]``."""
        if self.regression:
            return y.float().reshape(y.shape[0], -1)
        return y.long()

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, y) if self.regression else F.cross_entropy(out, y)

    def sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[float, float, float]:
        """A batch's evaluation sums: ``(correct, 0, rows)`` or ``(squared error, absolute
        error, values)``; :meth:`measure` turns their totals into the metrics."""
        if self.regression:
            d = out.detach().float() - y
            return float((d * d).sum().item()), float(d.abs().sum().item()), float(d.numel())
        correct = float((out.detach().argmax(1) == y).sum().item())
        return correct, 0.0, float(y.numel())

    def measure(self, sums: tuple[float, float, float]) -> dict[str, float]:
        """``{"accuracy"}`` or ``{"rmse", "mae"}`` of summed :meth:`sums` (0 for no rows)."""
        a, b, n = sums
        if self.regression:
            return {"rmse": math.sqrt(a / n) if n else 0.0, "mae": b / n if n else 0.0}
        return {"accuracy": a / n if n else 0.0}

    @torch.no_grad()
    def over(
        self,
        model: nn.Module,
        batches: Iterable[Any],
        outputs: Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]],
    ) -> dict[str, float]:
        """:meth:`measure` of the sums over ``batches``, ``outputs(model, batch)`` giving a
        batch's ``(outputs, targets)`` on one device; the model (DDP's unwrapped) evaluates
        in eval mode and is back in train mode after."""
        from distgnn.train.ddp import unwrap

        m = unwrap(model)
        m.eval()
        sums = (0.0, 0.0, 0.0)
        try:
            for b in batches:
                out, y = outputs(m, b)
                sums = add(sums, self.sums(out, y))
        finally:
            m.train()
        return self.measure(sums)

    def baseline(self, labels: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict[str, float]:
        """The trivial predictor's test metric, fitted on the rows ``train`` of ``labels``
        and measured on the rows ``test``: ``majority_test_accuracy`` (always the most
        frequent training class) or ``mean_test_rmse`` (always the mean training target);
        0 when either set is empty."""
        if self.regression:
            if test.size == 0 or train.size == 0:
                return {"mean_test_rmse": 0.0}
            y = labels.astype(np.float64).reshape(labels.shape[0], -1)
            d = y[test] - y[train].mean(0)
            return {"mean_test_rmse": round(float(np.sqrt((d * d).mean())), 4)}
        if test.size == 0 or train.size == 0:
            return {"majority_test_accuracy": 0.0}
        top = int(np.bincount(labels[train].astype(np.int64)).argmax())
        return {"majority_test_accuracy": round(float((labels[test] == top).mean()), 4)}


CLASSIFICATION = Objective("node-classification")
REGRESSION = Objective("node-regression", regression=True)
OBJECTIVES = {
    o.app: o
    for o in (
        CLASSIFICATION,
        REGRESSION,
        Objective("edge-classification", where="edge data"),
        Objective("edge-regression", regression=True, where="edge data"),
    )
}
"""The supervised apps' objectives by app name."""


def for_app(app: str) -> Objective:
    """The supervised app's objective (node classification for another name)."""
    return OBJECTIVES.get(app, CLASSIFICATION)


def add(x: tuple[float, float, float], y: tuple[float, float, float]) -> tuple[float, float, float]:
    return x[0] + y[0], x[1] + y[1], x[2] + y[2]
