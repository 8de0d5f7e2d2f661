"""How every benchmark row is timed: interleaved pairs with a baseline, in one process.

A row's ratio is the median over pairs of (row's time / baseline's time), each pair run back to
back, which one goes first alternating, so that load on a shared machine that drifts during a
table hits both members of a pair alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously); nothing on CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(
    function: Callable[[], object], device: str, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Seconds one call of ``function()`` takes, with the device synchronised before and after, by
    ``clock``: wall time, or ``time.process_time`` (the CPU time of every thread of the process,
    which counts a background thread's work and not the other processes' load)."""
    sync(device)
    start = clock()
    function()
    sync(device)
    return clock() - start


@dataclass
class Pairs:
    """Times of ``repeats`` interleaved (row, baseline) pairs, in seconds."""

    row: list[float]
    baseline: list[float]

    @property
    def ratios(self) -> list[float]:
        return [r / b for r, b in zip(self.row, self.baseline)]

    @property
    def ratio(self) -> float:
        """Median over pairs of row time / baseline time."""
        return statistics.median(self.ratios)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartile of the pair ratios (their spread under the machine's load)."""
        if len(self.ratios) < 2:
            return self.ratio, self.ratio
        first, _, third = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return first, third


def paired(
    row: Callable[[], object],
    baseline: Callable[[], object],
    repeats: int,
    device: str,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> Pairs:
    """Time ``row`` against ``baseline`` in ``repeats`` back-to-back pairs after ``warmup`` of each
    (by ``clock``, as :func:`timed`)."""
    for _ in range(warmup):
        baseline()
        row()
    pairs = Pairs([], [])
    for i in range(repeats):
        if i % 2:
            pairs.baseline.append(timed(baseline, device, clock))
            pairs.row.append(timed(row, device, clock))
        else:
            pairs.row.append(timed(row, device, clock))
            pairs.baseline.append(timed(baseline, device, clock))
    return pairs


def blocks(
    row: Callable[[], object], baseline: Callable[[], object], seconds: float, device: str
) -> tuple[Callable[[], None], Callable[[], None]]:
    """``row`` and ``baseline`` each repeated as many times as ``baseline`` takes about
    ``seconds`` to run (at least once): one timed sample then spans a whole period of a cost that
    comes now and then."""
    baseline()
    count = max(1, round(seconds / timed(baseline, device)))

    def repeat(function: Callable[[], object]) -> Callable[[], None]:
        def block() -> None:
            for _ in range(count):
                function()

        return block

    return repeat(row), repeat(baseline)
