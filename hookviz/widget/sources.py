"""A run, a watch or a hookviz file, opened the way the widget's banner reads it: one shape for the
command line (``hookviz report``) and :func:`hookviz.compare`.

A file holds a :class:`hookviz.Run` or a watch history (:class:`hookviz.RankHistory`, one process's
or gathered from every rank). A history is read as the widget's watch view reads it: a gathered
one by its reduced gradients (``.grad`` after the all-reduce, what the optimizer stepped on), a
one-process one by its rank's own; ``rank=`` picks a rank's local gradients instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from hookviz.advice import advice
from hookviz.analysis.diagnose import diagnose
from hookviz.analysis.findings import Finding
from hookviz.analysis.onset import onsets
from hookviz.data.run import Run
from hookviz.errors import HookvizError, WatchError
from hookviz.files.saving import load
from hookviz.watching.gather import RankHistory
from hookviz.watching.history import History
from hookviz.watching.rank_view import RankView
from hookviz.watching.watch import Watch


@dataclass
class Source:
    """What was opened, and how to read it.

    Attributes:
        label: its name in tables and legends (the file's name without ``.hookviz``, or the
            name given).
        path: the file it was read from, or None.
        run: a run (a run file), or the run saved with a watch history; else None.
        watch: the watch as the widget reads it (a :class:`hookviz.Watch`, or a rank of a history),
            or None for a run.
        history: the watch's kept steps (:class:`hookviz.watching.history.History`), or None.
        order: ``{column: position}`` where each name's gradient arrived in backward (names the
            place of an onset), or None when not known.
        ranks: the ranks of a gathered history (``[0]`` for one process); empty for a run.
        rank: the rank read (None: the reduced gradients of a gathered history, or not a watch).
        notes: what a reader of the numbers must know (what a step is, a loss scale in them).
    """

    label: str
    path: Path | None
    run: Run | None
    watch: object = None
    history: History | None = None
    order: dict[int, int] | None = None
    ranks: list[int] = field(default_factory=list)
    rank: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``"watch"`` or ``"run"``."""
        return "run" if self.watch is None else "watch"

    @property
    def gathered(self) -> bool:
        """A history gathered from ranks that all-reduce (DDP / FSDP2)."""
        return isinstance(self.watch, RankView) and bool(self.watch.source.strategy)

    def findings(self, step: int | None = None) -> list[Finding]:
        """The banner's findings: a run's (:func:`hookviz.diagnose`), or the watch's at ``step``
        (None = the last kept), without the cross-rank ones (:meth:`cross_rank` has them all).

        Raises:
            WatchError: ``step`` is not kept.
        """
        if self.watch is None:
            return diagnose(self.run)
        return [f for f in self.watch.diagnose(step) if f.rank is None]

    def cross_rank(self) -> list[Finding]:
        """A gathered history's cross-rank findings over every kept step (a rank first with
        NaN/Inf, a rank whose norm diverges, a parameter a rank never got a gradient for:
        :meth:`hookviz.RankHistory.diagnose`); [] otherwise."""
        return self.watch.source.diagnose() if self.gathered else []

    def onsets(self) -> list[Finding]:
        """When each trouble started and where (:func:`hookviz.analysis.onset.onsets`); [] for a run."""
        if self.history is None:
            return []
        return onsets(self.history, self.order)

    @property
    def skipped_steps(self) -> list[int]:
        """The steps whose ``optimizer.step()`` the ``GradScaler`` skipped (Inf/NaN found)."""
        if self.history is None:
            return []
        return [step for step, skipped in zip(self.history.steps, self.history.skipped) if skipped]


def arrival_order(history: RankHistory, rank: int | None) -> dict[int, int]:
    """``{column: position}`` where each name's gradient first arrived in a backward on ``rank``
    (None: the first rank's, as the reduced findings read it), from ``history.order``; names that
    never got one are left out. What a :class:`hookviz.Watch`'s ``arrival_order`` is for a
    history read back from a file: an onset names the first bad name in this order."""
    row = history.order[history.ranks.index(rank) if rank is not None else 0].tolist()
    return {column: int(position) for column, position in enumerate(row) if not math.isnan(position)}


def open_source(
    source: str | Path | Watch | RankHistory | Run, rank: int | None = None, label: str | None = None
) -> Source:
    """Open ``source`` for reading as the widget's banner reads it.

    Args:
        source: a path to a ``.hookviz`` file (:func:`hookviz.load`), a :class:`hookviz.Watch`, a
            :class:`hookviz.RankHistory` or a :class:`hookviz.Run`.
        rank: with a history: read that rank's local gradients (default: the reduced ones of a
            gathered history, the only rank's of a one-process one).
        label: the name shown for it; default the file's name without its suffix, or ``"a"``.

    Raises:
        FileFormatError: the file is not a hookviz file, or is corrupt (:func:`hookviz.load`).
        FileNotFoundError: no such file. PathError: the path is a folder or not a regular file.
        WatchError: ``rank`` is not one of the history's ranks, or was given with a run or a Watch.
        HookvizError: ``source`` is none of the above.
    """
    path = None
    if isinstance(source, (str, Path)):
        path = Path(source)
        source = load(path)
    name = label or (path.name.removesuffix(".hookviz") if path is not None else "a")
    if isinstance(source, Run):
        if rank is not None:
            raise WatchError(
                f"rank={rank} reads one rank of a watch history; {name} is a run, which has none"
            )
        return Source(name, path, source)
    if isinstance(source, Watch):
        if rank is not None:
            raise WatchError(
                f"rank={rank}: a watch in this process is its own rank's; save the job's gathered "
                "history (every rank calls gather()) and open that file"
            )
        return Source(
            name,
            path,
            None,
            source,
            source.history,
            source.arrival_order,
            [0],
            None,
            list(source.notes),
        )
    if isinstance(source, RankHistory):
        if rank is None and not source.strategy:
            rank = source.ranks[0]
        view = RankView(source, rank)
        order = arrival_order(source, rank)
        return Source(
            name, path, source.run, view, view.history, order, list(source.ranks), rank, list(source.notes)
        )
    raise HookvizError(
        f"expected a .hookviz file, a hookviz.Watch, a watch history or a hookviz.Run, got "
        f"{type(source).__name__}; save a watch with {advice('save_watch')} and pass the path"
    )
