"""A watch's kept steps: storing a recorded step's row, thinning the kept steps when they are full.

``capacity`` steps are kept; when full, every other kept step is dropped and from then on only
every other step is recorded (:mod:`hookviz.watching.watch`). Steps come from the end of a backward
(:mod:`hookviz.watching.backward_steps`) or from ``optimizer.step()``
(:mod:`hookviz.watching.optimizer_steps`).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from hookviz.stats.reduce import COLUMN
from hookviz.watching.history import StepInfo


def keep(watch, step: int, row: torch.Tensor, arrived: list[int], info: StepInfo) -> bool:
    """Store a recorded step's row and what it was; tell the listeners; False when thinned out."""
    with watch._lock:
        kept = _store(watch, step, row, info)
        if len(watch._order) < len(watch.names):  # once every column has a place, none moves
            arrived = arrived + [
                c
                for c in reversed(range(len(watch.parameter_names)))
                if not math.isnan(row[c, COLUMN["norm"]])
            ]
            for position, column in enumerate(arrived):
                watch._order.setdefault(column, position)
    if kept and watch._listeners:
        watch._tell_listeners(step, row)
    return kept


def _store(watch, step: int, row: torch.Tensor, info: StepInfo) -> bool:
    """Keep ``row`` as step ``step`` (thinning the kept steps when full); False when thinning
    left this step out."""
    if len(watch._steps) == watch.capacity:
        keep = [i for i, s in enumerate(watch._steps) if s % (watch.every * watch._stride * 2) == 0]
        for table in (watch._rows, watch._ratios):
            table[: len(keep)] = table[keep].clone()
            table[len(keep) :] = math.nan
        watch._steps = [watch._steps[i] for i in keep]
        watch._info = [watch._info[i] for i in keep]
        watch._stride *= 2
        if step % (watch.every * watch._stride):
            return False
    watch._rows[len(watch._steps)] = row
    watch._steps.append(step)
    watch._info.append(info)
    return True


def set_update_ratios(watch, step: int, columns: list[int], ratios: list[float]) -> None:
    """The update-to-weight ratios of kept step ``step`` (from the optimizer's post-hook)."""
    with watch._lock:
        if step in watch._steps:
            watch._ratios[watch._steps.index(step), columns] = torch.tensor(ratios, dtype=torch.float64)


def set_loss_scale(watch, step: int, scale: float) -> None:
    """The ``GradScaler`` scale that kept step ``step``'s gradients carry, learnt after it was kept
    (:mod:`hookviz.watching.scaler_search`)."""
    with watch._lock:
        if step in watch._steps:
            index = watch._steps.index(step)
            watch._info[index] = dataclasses.replace(watch._info[index], loss_scale=scale)


def step_values(watch, step: int, row: torch.Tensor) -> tuple[list[list[float]], list[float]]:
    """Kept step ``step``'s numbers as diagnosis reads them: per column ``(norm, max_abs,
    nonfinite, zero_fraction)`` from ``row``, where a step that kept only norms (``stats_every``)
    takes each zero fraction from the last kept step that measured it; and per column its update
    ratio (NaN: not updated; all NaN without ``optimizer=``)."""
    values = row.tolist()
    norm, zeros = COLUMN["norm"], COLUMN["zero_fraction"]
    unmeasured = [c for c, v in enumerate(values) if math.isnan(v[zeros]) and not math.isnan(v[norm])]
    with watch._lock:
        index = watch._steps.index(step)
        ratios = watch._ratios[index].tolist()
        if unmeasured:
            kept = [i for i, s in enumerate(watch._steps) if s <= step]
            for column in unmeasured:
                earlier = watch._rows[kept, column, zeros]
                measured = earlier[~earlier.isnan()]
                if measured.numel():
                    values[column][zeros] = measured[-1].item()
    return values, ratios
