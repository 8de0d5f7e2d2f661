"""One rank of a gathered watch history, read the way a :class:`hookviz.Watch` is read.

``hookviz.show(history, on=run)`` draws a :class:`~hookviz.watching.gather.RankHistory` through a
:class:`RankView` (``Widget.watch_rank(r)`` switches rank).
"""

from __future__ import annotations

import math

import torch

from hookviz.analysis.diagnose import check_thresholds
from hookviz.analysis.findings import Finding
from hookviz.analysis.step_findings import step_findings
from hookviz.errors import WatchError
from hookviz.watching.gather import DEFAULT_DIVERGE, RankHistory
from hookviz.watching.history import STATISTICS


class RankView:
    """One rank of a :class:`RankHistory` (or, with ``rank=None``, its reduced gradients), read the
    way a :class:`hookviz.Watch` is read, so the widget's watch view can show it
    (``hookviz.show(history, on=run)``; ``Widget.watch_rank(r)`` switches rank)."""

    def __init__(self, history: RankHistory, rank: int | None = None):
        if rank is not None and rank not in history.ranks:
            raise WatchError(f"rank {rank!r} is not in this history; its ranks are {history.ranks}")
        self.source, self.rank = history, rank
        self.model_name = "reduced" if rank is None else f"rank {rank}"

    @property
    def steps(self) -> list[int]:
        """The kept steps."""
        return list(self.source.steps)

    @property
    def history(self):
        """This rank's (or the reduced) statistics as a :class:`hookviz.watching.watch.History`."""
        return self.source.history(self.rank)

    def norms(self, step: int | None = None, kind: str | None = None) -> dict[str, float]:
        """As :meth:`RankHistory.norms` for this rank; reduced module outputs are empty (no reduce)."""
        if self.rank is None and kind == "output":
            return {}
        return self.source.norms(step, rank=self.rank, kind=kind)

    def diagnose(
        self, step: int | None = None, diverge: float = DEFAULT_DIVERGE, **thresholds: float
    ) -> list[Finding]:
        """Findings at ``step`` (None = the last kept step), as :meth:`hookviz.Watch.diagnose`
        reads a step: this rank's (or the reduced) statistics by a run's rules
        (:func:`hookviz.analysis.step_findings.step_findings`, with ``thresholds``: ``vanishing``,
        ``exploding``, ...), then the cross-rank findings of that step (``diverge``, see
        :meth:`RankHistory.diagnose`). A history saved before it kept element counts has no
        layer's zero fraction (dead updates): no dead-update finding there.

        Raises:
            WatchError / HookvizError: an unknown step, or a bad threshold.
        """
        limits = check_thresholds(thresholds)
        history = self.history
        if not history.steps or (step is not None and step not in history.steps):
            self.source.norms(step, rank=self.rank if self.rank is not None else 0)  # raises its error
        step = history.steps[-1] if step is None else step
        index = history.steps.index(step)
        values = torch.stack([getattr(history, s)[index] for s in STATISTICS], dim=-1).tolist()
        parameters = [c for c, k in enumerate(self.source.kinds) if k == "parameter"]
        numels = list(history.numels)
        if len(numels) != len(parameters):  # element counts unknown: see above
            numels = [1] * len(parameters)
            for column in parameters:
                values[column][3] = math.nan
        order_row = self.source.order[0 if self.rank is None else self.source.ranks.index(self.rank)].tolist()
        order = {c: position for c, position in enumerate(order_row) if not math.isnan(position)}
        found = step_findings(
            self.source.names,
            self.source.kinds,
            numels,
            self.source.module_types,
            values,
            order,
            limits,
            step,
            ratios=None if history.update_ratio is None else history.update_ratio[index].tolist(),
        )
        return found + [f for f in self.source.diagnose(diverge) if f.step == step]

    def heatmap(self, kind: str = "parameter", statistic: str = "norm"):
        """This rank's (or the reduced) log-norm heatmap."""
        return self.source.heatmap(self.rank, kind)
