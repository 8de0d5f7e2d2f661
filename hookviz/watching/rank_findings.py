"""Cross-rank findings of a gathered watch history: which rank made NaN/Inf first, which diverges,
which parameter went unused on some ranks (see :mod:`hookviz.watching.gather`, whose
:meth:`~hookviz.watching.gather.RankHistory.diagnose` calls these)."""

from __future__ import annotations

import math
import statistics
from typing import Protocol

import torch

from hookviz.advice import advice
from hookviz.analysis.findings import Finding
from hookviz.analysis.gradient_stats import module_of
from hookviz.text import number


class RankStatistics(Protocol):
    """What these findings read of a :class:`hookviz.watching.gather.RankHistory` (which imports
    this module, so this one names the fields it needs instead of importing it back); the fields
    are documented there."""

    ranks: list[int]
    steps: list[int]
    names: list[str]
    kinds: list[str]
    local: torch.Tensor
    order: torch.Tensor
    strategy: str

    def total_norms(self) -> torch.Tensor: ...


def _name_label(history: RankStatistics, column: int) -> str:
    name, kind = history.names[column], history.kinds[column]
    return f"parameter {name!r}" if kind == "parameter" else f"the output of module {name!r}"


def _module(history: RankStatistics, column: int) -> str:
    name = history.names[column]
    return name if history.kinds[column] == "output" else module_of(name)


def nan_findings(history: RankStatistics) -> list[Finding]:
    """``"nan"``: the first step at which some rank's local gradient held NaN/Inf (at most one)."""
    bad = history.local[:, :, :, 2] > 0  # [ranks, steps, names]
    if not bad.any():
        return []
    step_index = int(bad.any(0).any(-1).nonzero()[0])
    ranks = [r for i, r in enumerate(history.ranks) if bad[i, step_index].any()]
    rank_index = history.ranks.index(ranks[0])
    columns = bad[rank_index, step_index].nonzero().flatten().tolist()
    order = history.order[rank_index]
    first = min(columns, key=lambda c: (math.inf if math.isnan(order[c].item()) else order[c].item(), c))
    count = int(history.local[rank_index, step_index, first, 2].item())
    step = history.steps[step_index]
    clean = [r for r in history.ranks if r not in ranks]
    spread = (
        f"; ranks {clean} had finite local gradients, so the all-reduce spread it to every rank"
        if clean and history.strategy
        else ""
    )
    message = (
        f"rank {ranks[0]} is the first to produce NaN/Inf: at step {step} its local gradient of "
        f"{_name_label(history, first)} held {count} NaN/Inf elements (the first of its gradients "
        f"to, in backward order; "
        f"ranks with NaN/Inf at step {step}: {ranks}){spread}. Record that rank's batch and "
        f"diagnose it, {advice('diagnose_a_step')}, to find the op"
    )
    return [
        Finding(
            "nan", _module(history, first), history.names[first], message, float(count), step, rank=ranks[0]
        )
    ]


def diverging_findings(history: RankStatistics, diverge: float) -> list[Finding]:
    """``"diverging"``: each rank whose local norm is ``diverge`` times away from the others' median."""
    if len(history.ranks) < 2:
        return []
    totals = history.total_norms().tolist()
    worst: dict[
        tuple[int, str], tuple[int, float, int]
    ] = {}  # (rank, direction) -> first step, worst ratio, steps
    for s in range(len(history.steps)):
        for i, rank in enumerate(history.ranks):
            others = [
                totals[j][s] for j in range(len(history.ranks)) if j != i and math.isfinite(totals[j][s])
            ]
            mine = totals[i][s]
            if not others or not math.isfinite(mine):
                continue
            median = statistics.median(others)
            ratio = mine / median if median > 0 else (math.inf if mine > 0 else 1.0)
            direction = (
                "above"
                if ratio > diverge
                else ("below" if len(history.ranks) >= 3 and ratio < 1 / diverge else None)
            )
            if direction is None:
                continue
            first, extreme, count = worst.get((rank, direction), (s, ratio, 0))
            extreme = max(extreme, ratio) if direction == "above" else min(extreme, ratio)
            worst[(rank, direction)] = (first, extreme, count + 1)
    found = []
    for (rank, direction), (first, extreme, count) in sorted(worst.items(), key=lambda kv: (kv[1][0], kv[0])):
        step = history.steps[first]
        word = "more" if direction == "above" else "less"
        found.append(
            Finding(
                "diverging",
                "",
                None,
                (
                    f"rank {rank} diverges from the others: from step {step} its local gradient "
                    f"norm (all "
                    f"parameters) is {word} than {number(diverge)}x away from the median of the other ranks' "
                    f"({count} of {len(history.steps)} kept steps; at worst {number(extreme)}x). Its batches "
                    "differ from the others' (data, or a bad shard), or its replica differs"
                ),
                extreme,
                step,
                rank=rank,
            )
        )
    return found


def unused_findings(history: RankStatistics) -> list[Finding]:
    """``"unused"``: each parameter that got a gradient on some ranks and none on others at a step."""
    if len(history.ranks) < 2:
        return []
    has = ~history.local[:, :, :, 0].isnan() | (history.local[:, :, :, 2] > 0)  # [ranks, steps, names]
    found = []
    for column, kind in enumerate(history.kinds):
        if kind != "parameter":
            continue
        mixed = has[:, :, column].any(0) & ~has[:, :, column].all(0)  # [steps]
        if not mixed.any():
            continue
        s = int(mixed.nonzero()[0])
        without = [r for i, r in enumerate(history.ranks) if not has[i, s, column]]
        found.append(
            Finding(
                "unused",
                _module(history, column),
                history.names[column],
                (
                    f"{_name_label(history, column)} got no gradient on ranks {without} but did on "
                    f"the others "
                    f"from step {history.steps[s]} ({int(mixed.sum())} of {len(history.steps)} kept steps): "
                    "DistributedDataParallel then stops with 'Expected to have finished reduction in the "
                    "prior iteration' unless it was built with find_unused_parameters=True "
                    "(which costs a "
                    "graph walk per step); or make every rank use it"
                ),
                float(len(without)),
                history.steps[s],
                rank=without[0],
            )
        )
    return found
