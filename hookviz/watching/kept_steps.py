"""A watch's kept steps: one owner, :class:`KeptSteps`, for which steps are kept and their rows.

Reading is separate from keeping. Every step is read (at least its norms, checked for NaN/Inf and
explosions); :class:`KeptSteps` then decides whether it is kept. Steps come in *streams*: with
``optimizer=`` one per optimizer (a GAN's G and D), otherwise one per kind of backward in an
iteration (the parameters it reached and its position since the gradients were last reset: the
micro-batches of an accumulation, two backwards per iteration). ``every``, ``stats_every`` and
thinning count each stream's own steps, so no stream is phase-locked out:

- a stream's ``i``-th step is recorded when ``i`` is a multiple of ``every * stride`` (its stride
  starts at 1) and reads every statistic when it is recorded and ``i`` is a multiple of
  ``stats_every``;
- a step whose gradients hold NaN/Inf or whose norm is above ``exploding_norm`` (an *alarm*), and
  a step the ``GradScaler`` skipped, is kept whatever the stream's stride;
- when ``capacity`` steps are kept, each stream drops every other of its recorded steps and doubles
  its stride (alarm steps stay, unless they alone fill half the capacity: then every other alarm
  step of a stream goes, its first one never).

Steps are numbered in the order they happen, over all streams, and a number is never reused or
shifted. Source of the thinning idea: a reservoir that halves its resolution when full.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from operator import attrgetter

import torch
from torch.utils.hooks import RemovableHandle

from hookviz.stats.reduce import COLUMN
from hookviz.watching.history import STATISTICS, History, StepInfo
from hookviz.watching.reduce import NormsRow

NORM, ZEROS = COLUMN["norm"], COLUMN["zero_fraction"]
_VERSION = attrgetter("_version")  # a tensor's in-place write count

# Distinct streams a watch tells apart; later kinds share one stream (a model whose backwards
# reach ever-new sets of parameters must still thin).
MAX_STREAMS = 16


@dataclass
class Plan:
    """What one step of a stream is to be, decided before it is read.

    Attributes:
        step: the step's number (over all streams).
        stream: the stream's key.
        index: the step's place in its stream (0 first).
        recorded: kept whatever its numbers (the stream's stride allows it).
        full: read every statistic, not only the norms (``stats_every``).
    """

    step: int
    stream: object
    index: int
    recorded: bool
    full: bool


class KeptSteps:
    """The kept steps of one watch and the lock that guards them (module docstring).

    Rows are float64 CPU ``[names, 4]`` (:data:`STATISTICS`); per kept step also its update ratios
    ``[names]`` with a bool ``[names]`` of the ones read (a ratio read may be NaN: weights of norm 0
    or NaN), its pre-clip norms ``[names]`` (NaN where not read) and its :class:`StepInfo`.

    Attributes:
        lock: a ``threading.Lock`` held for every read and write of the kept steps (hooks of one
            backward may run on several autograd threads; a viewer reads from another thread).
        count: steps numbered so far (the number of the next step).
        version: bumped each time the kept steps change (a step kept, thinned, or given ratios).
    """

    def __init__(self, capacity: int, width: int, every: int = 1, stats_every: int = 1):
        self.lock = threading.Lock()
        self.capacity, self.width, self.every, self.stats_every = capacity, width, every, stats_every
        self.count = 0
        self.version = 0
        # each kept step's [width, 4] row, as keep() was given it (taken, not copied: a copy is a
        # torch call more per step; the usual step's a NormsRow, made when read); stacked when read
        self._rows: list[torch.Tensor | NormsRow] = []
        self._ratios = torch.full((capacity, width), math.nan, dtype=torch.float64)
        self._pre_clip = torch.full((capacity, width), math.nan, dtype=torch.float64)
        self._ratio_read = torch.zeros((capacity, width), dtype=torch.bool)
        self._steps: list[int] = []
        self._info: list[StepInfo] = []
        # per kept step: (stream, index in the stream, alarm)
        self._where: list[tuple[object, int, bool]] = []
        self._seen: dict[object, int] = {}  # stream -> its steps so far
        self._stride: dict[object, int] = {}  # stream -> its stride
        self._thinned = 0  # thinnings so far: a new stream starts at the stride the others reached
        self._order: dict[int, int] = {}  # column -> position at which its gradient first arrived
        self._listeners: OrderedDict[int, object] = OrderedDict()  # handle id -> listener

    # ------------------------------------------------------------------ writing

    def plan(self, stream: object) -> Plan:
        """Number the next step, of ``stream``, and say whether it is recorded and full."""
        with self.lock:
            return self._plan(stream)

    def _plan(self, stream: object) -> Plan:
        if stream not in self._seen and len(self._seen) >= MAX_STREAMS:
            stream = "other"
        index = self._seen.get(stream, 0)
        self._seen[stream] = index + 1
        stride = self._stride.setdefault(stream, 2**self._thinned)
        step = self.count
        self.count += 1
        recorded = index % (self.every * stride) == 0
        return Plan(step, stream, index, recorded, recorded and index % self.stats_every == 0)

    def peek(self, stream: object) -> tuple[bool, bool]:
        """``(recorded, full)`` of the next step of ``stream``, without numbering it."""
        with self.lock:
            stream = stream if stream in self._seen or len(self._seen) < MAX_STREAMS else "other"
            stride = self._stride.get(stream, 2**self._thinned)
            index = self._seen.get(stream, 0)
            recorded = index % (self.every * stride) == 0
            return recorded, recorded and index % self.stats_every == 0

    def add_listener(self, listener) -> RemovableHandle:
        """Call ``listener(step, row)`` after each kept step, outside the lock (see
        :meth:`hookviz.Watch.add_step_listener`)."""
        handle = RemovableHandle(self._listeners)
        self._listeners[handle.id] = listener
        return handle

    def tell(self, step: int | None, row: torch.Tensor | None) -> None:
        """Call every listener with ``(step, row)``; one that raises becomes a warning."""
        for listener in list(self._listeners.values()):
            try:
                listener(step, row)
            except Exception as error:  # a viewer's bug must not break the user's training step
                warnings.warn(
                    f"hookviz watch listener {listener!r} failed: {error!r}", RuntimeWarning, stacklevel=2
                )

    def close(self) -> None:
        """Tell the listeners the watch closed (``listener(None, None)``), then drop them."""
        self.tell(None, None)
        self._listeners.clear()

    def keep(
        self,
        plan: Plan,
        row: torch.Tensor | NormsRow,
        info: StepInfo,
        alarm: bool = False,
        arrived: list[int] | None = None,
        parameters: int = 0,
        pre_clip: torch.Tensor | None = None,
    ) -> bool:
        """Keep step ``plan.step`` with its ``[width, 4]`` ``row`` (a tensor, or the usual step's
        :class:`~hookviz.watching.reduce.NormsRow`) when it is recorded, an alarm or
        skipped; thin first when full. ``arrived``: columns in the order their gradients arrived
        (the first ``parameters`` columns not listed are placed after them, nearest the loss first).
        ``pre_clip``: float64 ``[width]`` norms as the backward left the gradients. A kept ``row`` is
        taken as it is (not copied): the caller does not change it afterwards. Returns whether it
        was kept."""
        alarm = alarm or info.skipped
        if not (plan.recorded or alarm):
            return False
        with self.lock:
            if len(self._steps) == self.capacity:
                self._thin()
                stride = self._stride.get(plan.stream, 1)
                if not alarm and plan.index % (self.every * stride):
                    return False
            # in number order: two threads' steps may arrive the other way round
            at = bisect.bisect(self._steps, plan.step)
            count = len(self._steps)
            if at < count:
                for table in (self._ratios, self._pre_clip, self._ratio_read):
                    table[at + 1 : count + 1] = table[at:count].clone()
                self._ratios[at] = math.nan
                self._ratio_read[at] = False
                self._pre_clip[at] = math.nan
            # past the kept steps every table is NaN / False (made so, and _thin refills it): a step
            # added last, the usual one, has its ratios and pre-clip norms NaN and no ratio read already
            self._rows.insert(at, row)
            if pre_clip is not None:
                self._pre_clip[at] = pre_clip
            self._steps.insert(at, plan.step)
            self._info.insert(at, info)
            self._where.insert(at, (plan.stream, plan.index, alarm))
            self.version += 1
            if len(self._order) < self.width:  # once every column has a place, none moves
                order = list(arrived or []) + list(reversed(_measured(row, parameters)))
                for position, column in enumerate(order):
                    self._order.setdefault(column, position)
            if self._listeners:
                row = self._row_at(at)
        if self._listeners:
            self.tell(plan.step, row)
        return True

    def _thin(self) -> None:
        """Each stream drops every other recorded step and doubles its stride (module docstring)."""
        self._thinned += 1
        for stream in self._stride:
            self._stride[stream] *= 2
        keep = [
            i
            for i, (stream, index, alarm) in enumerate(self._where)
            if alarm or index % (self.every * self._stride[stream]) == 0
        ]
        alarms = [i for i in keep if self._where[i][2]]
        if len(keep) == len(self._where) or len(alarms) > self.capacity // 2:
            # alarm steps fill the table: every other alarm step of each stream goes, its first stays
            seen: dict[object, int] = {}
            drop = set()
            for i in alarms:
                stream = self._where[i][0]
                seen[stream] = seen.get(stream, 0) + 1
                if seen[stream] % 2 == 0:
                    drop.add(i)
            if not drop:  # each step is the first of its stream: every other one goes
                drop = set(keep[1::2])
            keep = [i for i in keep if i not in drop]
        self._rows = [self._rows[i] for i in keep]
        for table in (self._ratios, self._pre_clip):
            table[: len(keep)] = table[keep].clone()
            table[len(keep) :] = math.nan
        self._ratio_read[: len(keep)] = self._ratio_read[keep].clone()
        self._ratio_read[len(keep) :] = False
        self._steps = [self._steps[i] for i in keep]
        self._info = [self._info[i] for i in keep]
        self._where = [self._where[i] for i in keep]

    def _row_at(self, index: int) -> torch.Tensor:
        """Kept row ``index`` as a tensor, made now if kept as a :class:`NormsRow` (callers hold
        the lock; not to be changed: it is the kept row)."""
        row = self._rows[index]
        if isinstance(row, NormsRow):
            row = self._rows[index] = row.tensor()
        return row

    def _stacked_rows(self) -> torch.Tensor:
        """The kept rows as one float64 ``[k, width, 4]`` tensor (a new one; callers hold the lock)."""
        if not self._rows:
            return torch.empty((0, self.width, len(STATISTICS)), dtype=torch.float64)
        return torch.stack([self._row_at(i) for i in range(len(self._rows))])

    def set_ratios(self, step: int, columns: list[int], ratios: list[float]) -> None:
        """The update-to-weight ratios of kept step ``step`` (from the optimizer's post-hook)."""
        with self.lock:
            if step in self._steps:
                index = self._steps.index(step)
                self._ratios[index, columns] = torch.tensor(ratios, dtype=torch.float64)
                self._ratio_read[index, columns] = True
                self.version += 1

    def set_info(self, step: int, **changes) -> None:
        """Change fields of kept step ``step``'s :class:`StepInfo`."""
        with self.lock:
            if step in self._steps:
                index = self._steps.index(step)
                self._info[index] = dataclasses.replace(self._info[index], **changes)
                self.version += 1

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def steps(self) -> list[int]:
        """The kept step numbers, ascending (a copy)."""
        with self.lock:
            return list(self._steps)

    @property
    def order(self) -> dict[int, int]:
        """``{column: position}`` where each column's gradient first arrived (a copy)."""
        with self.lock:
            return dict(self._order)

    def row(self, step: int | None) -> tuple[int, torch.Tensor] | None:
        """``(step, a copy of its [width, 4] row)`` of kept ``step`` (None: the last); None when
        ``step`` is not kept."""
        with self.lock:
            if not self._steps:
                return None
            if step is None:
                return self._steps[-1], self._row_at(-1).clone()
            if step in self._steps:
                return step, self._row_at(self._steps.index(step)).clone()
        return None

    def info(self, step: int) -> StepInfo:
        """Kept step ``step``'s :class:`StepInfo` (``step`` must be kept)."""
        with self.lock:
            return self._info[self._steps.index(step)]

    def ratios(self, step: int) -> list[float]:
        """Kept step ``step``'s update ratio per column (NaN: not measured)."""
        with self.lock:
            return self._ratios[self._steps.index(step)].tolist()

    def pre_clip(self, step: int) -> list[float]:
        """Kept step ``step``'s pre-clip norm per column (NaN: not read; ``optimizer=`` only)."""
        with self.lock:
            return self._pre_clip[self._steps.index(step)].tolist()

    def skipped(self) -> list[int]:
        """The kept steps marked skipped."""
        with self.lock:
            return [s for s, i in zip(self._steps, self._info) if i.skipped]

    def snapshot(
        self,
    ) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor, list[StepInfo], torch.Tensor]:
        """``(steps, rows [k, width, 4], ratios [k, width], pre_clip [k, width], infos, ratios
        read [k, width] bool)``: copies, consistent with one another also while another thread
        keeps steps."""
        with self.lock:
            count = len(self._steps)
            return (
                list(self._steps),
                self._stacked_rows(),
                self._ratios[:count].clone(),
                self._pre_clip[:count].clone(),
                list(self._info),
                self._ratio_read[:count].clone(),
            )

    def history(
        self,
        names: list[str],
        kinds: list[str],
        pre_clip: bool,
        numels: list[int] | None = None,
        module_types: dict[str, str] | None = None,
    ) -> History:
        """The kept steps as a :class:`~hookviz.watching.history.History` of columns ``names`` of
        ``kinds``, a consistent copy also while another thread trains; ``pre_clip``: with the
        norms before clipping (``optimizer=``); ``numels``, ``module_types``: as History keeps them."""
        steps, rows, ratios, pre_clip_norm, info, ratio_read = self.snapshot()
        return History(
            steps,
            list(names),
            list(kinds),
            *(rows[:, :, i] for i in range(len(STATISTICS))),
            update_ratio=ratios,
            optimizers=[i.optimizer for i in info],
            skipped=[i.skipped for i in info],
            learning_rates=[list(i.learning_rates) for i in info],
            loss_scales=[i.loss_scale for i in info],
            pre_clip_norm=pre_clip_norm if pre_clip else None,
            pre_clip_total=[i.pre_clip_total for i in info] if pre_clip else [],
            update_measured=ratio_read,
            numels=list(numels or []),
            module_types=dict(module_types or {}),
        )

    def values(self, step: int, row: torch.Tensor) -> tuple[list[list[float]], list[float]]:
        """Kept step ``step``'s numbers as diagnosis reads them: per column ``(norm, max_abs,
        nonfinite, zero_fraction)`` from ``row``, where a step that kept only norms
        (``stats_every``) takes each zero fraction from the last kept step that measured it; and
        per column its update ratio (NaN: not updated)."""
        values = row.tolist()
        unmeasured = [c for c, v in enumerate(values) if math.isnan(v[ZEROS]) and not math.isnan(v[NORM])]
        with self.lock:
            index = self._steps.index(step)
            ratios = self._ratios[index].tolist()
            if unmeasured:
                kept = torch.stack([self._row_at(i) for i, s in enumerate(self._steps) if s <= step])
                for column in unmeasured:
                    earlier = kept[:, column, ZEROS]
                    measured = earlier[~earlier.isnan()]
                    if measured.numel():
                        values[column][ZEROS] = measured[-1].item()
        return values, ratios


class Streams:
    """Which stream a backward's step belongs to, without ``optimizer=`` (module docstring): the
    parameters it changed and its position since their gradients were last reset.

    A loop that never resets its gradients has no iterations: its backwards are one stream. The
    length of an iteration is learnt when a reset ends one, so the first iteration's later
    backwards count with its first.

    Attributes:
        left: ``{column: (id of its .grad, that .grad's _version)}`` as the last backward left it.
    """

    def __init__(self) -> None:
        self.left: dict[int, tuple[int, int]] = {}
        self._position = 0  # backwards since the gradients were last reset, minus one
        self._length = 0  # backwards in the longest iteration that ended

    def note_left(self, columns: list[int], grads: list[torch.Tensor]) -> None:
        """A backward ended: each of ``columns``'s ``.grad`` is now ``grads``'s tensor."""
        self.left.update(zip(columns, zip(map(id, grads), map(_VERSION, grads))))

    def of_backward(self, columns: list[int], fresh: bool) -> tuple:
        """The stream key of a backward that changed ``columns``' ``.grad``; ``fresh``: one of them
        had been reset since the last backward (a new iteration)."""
        if fresh:
            self._length = max(self._length, self._position + 1)
            self._position = 0
        else:
            self._position += 1
        position = self._position if self._position < self._length else 0
        return (tuple(columns), position)


def _measured(row: torch.Tensor | NormsRow, parameters: int) -> list[int]:
    """The columns among the first ``parameters`` whose norm ``row`` holds (not NaN), in order."""
    if isinstance(row, NormsRow):
        return list(row.measured()[:parameters])
    return (~row[:parameters, NORM].isnan()).nonzero().flatten().tolist()
