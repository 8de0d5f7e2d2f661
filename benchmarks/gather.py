"""Cost of ``Watch.gather``: time to bring every rank's history to rank 0, on 2 CPU processes (gloo).

Each rank trains a DDP model under ``hookviz.watch`` for ``--steps`` steps (all kept: ``capacity`` is
at least ``--steps``), then calls ``w.gather(dst=0)`` ``--repeats`` times; rank 0 prints the median time,
the names, the bytes each rank sends, and the time per gathered step and per step x name x rank; and
first the median cost of a watched DDP training step over an unwatched one.

    python benchmarks/gather.py [--depth 50] [--width 16] [--steps 64 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import hookviz
from hookviz.examples import sigmoid_mlp

WORLD = 2


def worker(rank: int, port: int, depth: int, width: int, steps: list[int], repeats: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        for kept in steps:
            torch.manual_seed(0)
            model = DistributedDataParallel(sigmoid_mlp(depth=depth, width=width, inputs=8, classes=4))
            with hookviz.watch(model, capacity=max(kept, 2)) as w:
                for step in range(kept):
                    generator = torch.Generator().manual_seed(100 * step + rank)
                    x, y = (
                        torch.randn(8, 8, generator=generator),
                        torch.randint(0, 4, (8,), generator=generator),
                    )
                    F.cross_entropy(model(x), y).backward()
            if kept == steps[0]:
                watched_step_cost(rank, depth, width)
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                w.gather(dst=0)
                times.append(time.perf_counter() - start)
            if rank == 0:
                median = statistics.median(times)
                names = len(w.names)
                sent = (kept * (1 + 8 * names) + 2 * names) * 8
                print(
                    f"{names} names x {kept} kept steps x {WORLD} ranks: gather {median * 1e3:.1f} ms "
                    f"(median of {repeats}); {sent / 1e6:.2f} MB sent per rank; "
                    f"{median / kept * 1e6:.0f} us per gathered step; "
                    f"{median / (kept * names * WORLD) * 1e9:.0f} ns per step x name x rank"
                )
            del model, w
        dist.barrier()
    finally:
        dist.destroy_process_group()


def watched_step_cost(rank: int, depth: int, width: int, steps: int = 60) -> None:
    """Median DDP training step (zero_grad, forward, backward, SGD step) watched / not watched,
    the two models' steps interleaved so the shared machine's load hits both alike."""
    torch.manual_seed(0)
    plain = DistributedDataParallel(sigmoid_mlp(depth=depth, width=width, inputs=8, classes=4))
    torch.manual_seed(0)
    watched = DistributedDataParallel(sigmoid_mlp(depth=depth, width=width, inputs=8, classes=4))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (plain, watched)]
    times: list[list[float]] = [[], []]
    with hookviz.watch(watched, capacity=steps):
        for step in range(steps):
            generator = torch.Generator().manual_seed(100 * step + rank)
            x, y = torch.randn(8, 8, generator=generator), torch.randint(0, 4, (8,), generator=generator)
            for i, (model, optimizer) in enumerate(zip((plain, watched), optimizers)):
                dist.barrier()
                start = time.perf_counter()
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                times[i].append(time.perf_counter() - start)
    if rank == 0:
        base, cost = (statistics.median(t[5:]) for t in times)
        print(
            f"DDP step, {depth} Linear layers of width {width}: {base * 1e3:.2f} ms plain, "
            f"{cost * 1e3:.2f} ms watched "
            f"({cost / base:.2f}x; median of {steps - 5})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=50, help="Linear layers of the MLP")
    parser.add_argument("--width", type=int, default=16, help="width of its hidden layers")
    parser.add_argument("--steps", type=int, nargs="+", default=[64, 256], help="kept steps to gather")
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(
        worker,
        args=(port, options.depth, options.width, options.steps, options.repeats),
        nprocs=WORLD,
        join=True,
    )


if __name__ == "__main__":
    main()
