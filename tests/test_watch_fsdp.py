"""FSDP2 with ``optimizer=`` on two gloo ranks: each step's local norms and the reduced ones equal
plain PyTorch's (the sharded ``.grad`` is a DTensor: the watch reads each rank's shard)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from test_distributed import WORLD, batch, cpu_fsdp2, local_grads, mlp, spawn

import hookviz
from hookviz.record import torch_compat


def _fsdp_optimizer(rank, device):
    plain = mlp().to(device)
    model = copy.deepcopy(plain)
    fully_shard = torch_compat.fsdp2().fully_shard
    fully_shard(model[0])
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    expected_local, expected_reduced = [], []
    with hookviz.watch(model, optimizer=optimizer, stats_every=1) as w:
        for step in range(3):
            x, y = batch(rank, step, device)
            mine = local_grads(plain, x, y)
            expected_local.append({n: torch.linalg.vector_norm(g).item() for n, g in mine.items()})
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
            expected_reduced.append({n: torch.linalg.vector_norm(g).item() for n, g in grads.items()})
            optimizer.step()  # the step pre-hook reads the DTensor .grad
            with torch.no_grad():
                for p, q in zip(plain.parameters(), model.parameters()):
                    p.copy_(q.full_tensor())
    assert w.steps == [0, 1, 2] and all(w.update_ratios(s) for s in w.steps)
    names = list(expected_local[0])
    table = torch.tensor([[e[n] for n in names] for e in expected_local], dtype=torch.float64)
    tables = [torch.empty_like(table) for _ in range(WORLD)]
    dist.all_gather(tables, table)
    gathered = w.gather(dst=0)
    if rank != 0:
        return
    compared = 0
    for step in range(3):
        for r in range(WORLD):
            local = gathered.norms(step, rank=r, kind="parameter")
            for j, n in enumerate(names):
                assert local[n] == pytest.approx(tables[r][step, j].item(), rel=1e-5), (step, r, n)
                compared += 1
        reduced = gathered.norms(step)
        for n in names:
            assert reduced[n] == pytest.approx(expected_reduced[step][n], rel=1e-5), (step, n)
            compared += 1
    assert compared == 3 * 3 * len(names)


@cpu_fsdp2
def test_fsdp2_with_optimizer_keeps_each_step_with_local_and_reduced_norms():
    spawn(_fsdp_optimizer)
