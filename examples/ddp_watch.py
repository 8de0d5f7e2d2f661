"""Watch the gradients of a DDP job on every rank and find the rank whose batch made them explode.

    torchrun --standalone --nproc_per_node=2 examples/ddp_watch.py --out ddp_watch.hookviz

Each rank trains the same small regression MLP (DistributedDataParallel over gloo, CPU) on its own
batches under ``hookviz.watch``. At step ``--bad-step`` rank ``--bad-rank`` gets a batch with one
outlier target (1e4 where the others are about 1): its local gradient explodes, and the all-reduce
hands its share to every rank, so every rank's ``.grad`` looks bad and none says where it came from.

After training, ``w.gather(dst=0)`` (a collective) brings every rank's local and reduced gradient
norms to rank 0. Every rank then records one :class:`hookviz.Session` run of that bad step's batch
(also a collective: each rank records its own batch). Rank 0 prints the cross-rank findings and
saves the history with its run (whose graph the widget colours) to ``--out``; the bad rank saves its
own run next to it (``<out stem>_rank<r>_run.hookviz``). Open both with ``hookviz.load`` (see
``notebooks/06_distributed.ipynb``).
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import hookviz


def batch(rank: int, step: int, bad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """16 samples of ``y = sum(sin(x))`` over 8 features, different on every rank and step."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(16, 8, generator=generator)
    y = torch.sin(x).sum(1, keepdim=True)
    if bad:
        y[0] = 1e4  # one outlier target: a mislabelled sample
    return x, y


def train(options: argparse.Namespace) -> None:
    """Train under a watch on this rank, gather on rank 0, record the bad step's batch; save."""
    rank = dist.get_rank()
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    with hookviz.watch(ddp) as w:
        for step in range(options.steps):
            x, y = batch(rank, step, bad=(rank, step) == (options.bad_rank, options.bad_step))
            optimizer.zero_grad()
            F.mse_loss(ddp(x), y).backward()
            optimizer.step()
    history = w.gather(dst=0)  # every rank calls it; rank 0 gets the history

    # a recorded run of the bad step's batches: a collective too, each rank records its own batch
    x, y = batch(rank, options.bad_step, bad=rank == options.bad_rank)
    run = hookviz.Session(ddp, (x,), loss_fn=lambda out: F.mse_loss(out, y)).run()
    if rank == 0:  # the history, with a run whose graph the widget draws its norms on
        path = hookviz.save(w, options.out, run=run)
        print(f"saved {len(history.steps)} steps of ranks {history.ranks} to {path}")
        for finding in history.diagnose():
            print(f"[{finding.kind}] {finding.message}")
    if rank == options.bad_rank:
        path = hookviz.save(run, options.out.with_name(f"{options.out.stem}_rank{rank}_run"))
        local = run.leaf_grad("0.weight", local=True).norm().item()
        reduced = run.leaf_grad("0.weight").norm().item()
        print(
            f"rank {rank} saved its run of step {options.bad_step} to {path}: "
            f"0.weight grad norm {local:.4g} here, {reduced:.4g} after the all-reduce"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("ddp_watch.hookviz"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bad-step", type=int, default=6)
    parser.add_argument("--bad-rank", type=int, default=1)
    options = parser.parse_args()

    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    try:
        train(options)
        # DDP holds the process group: free it (train's locals are gone) before tearing gloo down,
        # or gloo's threads may still hold work at interpreter exit and abort the process
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
