"""A user's inference script for a typed model (run by test_inference_hetero_servers.py as each
trainer): open the graph from the contract environment, the same seeded R-GCN on every
rank, ``hetero_infer_to_storage`` to ``sys.argv[1]``."""

from __future__ import annotations

import sys

import torch
from tests.unit.test_inference_hetero import RGCN

from distgnn.contract import TrainerEnv
from distgnn.train.ddp import init_ddp
from distgnn.train.graph import open_train_graph
from distgnn.train.hetero_inference import hetero_infer_to_storage
from distgnn.train.inference import InferOptions


def main() -> None:
    ctx = init_ddp(TrainerEnv.from_env())
    tg = open_train_graph()
    torch.manual_seed(0)
    model = RGCN().eval()
    hetero_infer_to_storage(tg, model, ctx, InferOptions(sys.argv[1], batch_size=9))
    tg.close()


if __name__ == "__main__":
    main()
