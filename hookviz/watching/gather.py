"""Watching a DDP or FSDP2 job on every rank, and bringing the ranks together on one.

On a data-parallel model (see :mod:`hookviz.record.distributed`) a :class:`hookviz.Watch` records, per step,

- each parameter's **local** gradient statistics, taken in a ``register_post_accumulate_grad_hook``
  right after ``AccumulateGrad`` and before DDP's reducer (a post-hook of the same Node) or FSDP2's
  reduce-scatter sees the gradient (FSDP2: on the all-gathered ``_unsharded_param``, full shape), and
- the **reduced** statistics of ``.grad`` after the backward's last callback (DDP's
  ``finalize_backward``, FSDP2's root post-backward callback, both queued before hookviz's), i.e. what
  the optimizer steps on (FSDP2: this rank's shard of it).

``Watch.gather(dst=0)`` (:func:`gather`) is a collective: every rank of the group calls it; rank
``dst`` gets a :class:`RankHistory`, the others None. Its cost: two collectives (``all_gather`` of
a 3-number header, then ``gather`` of one float64 tensor per rank of ``kept steps x names x 8 + 2 x
names + kept steps`` numbers), so O(names x ranks) per gathered step, bounded by the watch's
``capacity`` (kept steps) and ``every`` (which steps are recorded at all); ``python -m benchmarks
--gather`` measures it per kept step x name x rank. Recording itself adds, per parameter, the engine's
statistics of its local gradient queued in its hook (:func:`hookviz.stats.reduce.measure`, NaN / Inf
counted at once since the all-reduce writes over the gradient; no host transfer) and the watch's
batched reduction of ``.grad`` after the all-reduce.

Cross-rank findings (:meth:`RankHistory.diagnose`):

- ``"nan"``: the first step at which some rank's *local* gradient held NaN/Inf, the rank(s), and the
  name whose gradient held it first on that rank (the all-reduce then spreads it to every rank).
- ``"diverging"``: a rank whose local gradient norm (all parameters together) is more than
  ``diverge`` times (default 10) the median of the other ranks' at a step; with 3 or more ranks also
  one less than ``1/diverge`` times it (with 2 ranks "less" is the other rank being more).
- ``"unused"``: a parameter that got a gradient on some ranks and none on others at a step: plain DDP
  then fails ("Expected to have finished reduction in the prior iteration") unless
  ``find_unused_parameters=True``.
"""

from __future__ import annotations

import math
import weakref
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import torch

from hookviz.advice import advice
from hookviz.analysis.findings import Finding
from hookviz.colors import PLOTLY_COLORSCALE
from hookviz.errors import WatchError
from hookviz.record import torch_compat
from hookviz.stats.reduce import COLUMN, combine, combined_norm, summary_of
from hookviz.text import module_name
from hookviz.watching.history import STATISTICS, History
from hookviz.watching.plots import color_range
from hookviz.watching.rank_findings import diverging_findings, nan_findings, unused_findings
from hookviz.watching.reduce import row_from_statistics

if TYPE_CHECKING:  # annotations only
    import plotly.graph_objects

DEFAULT_DIVERGE = 10.0


# ---------------------------------------------------------------------------- recording


def is_shard(tensor: torch.Tensor) -> bool:
    """True for a ``DTensor`` (an FSDP2 sharded parameter, whose ``.grad`` is already reduced)."""
    return hasattr(tensor, "to_local") and hasattr(tensor, "device_mesh")


class RankRecorder:
    """The part of a :class:`hookviz.Watch` that only data-parallel models need (module docstring).

    Attributes:
        strategy: ``"ddp"`` or ``"fsdp"``.
        reduced: ``{step: float64 [names, 4]}``, the statistics of ``.grad`` after each recorded
            step's all-reduce (FSDP2: of this rank's shard; NaN for module outputs).
        shard_numel: float64 ``[names]``: elements of this rank's ``.grad`` per parameter (FSDP2:
            the shard), used to combine shards; 0 for module outputs.
        pre_clip_shares: FSDP2 with ``optimizer=``: ``{step: 2-norm of this rank's shards of the
            gradients the step read, before clipping}``; :func:`gather` combines them into the total
            ``clip_grad_norm_`` returns.
    """

    def __init__(
        self,
        watch,
        model: torch.nn.Module,
        strategy: str,
        parameters: list[tuple[str, torch.Tensor]],
        handles: list,
        reduce,
    ):
        from hookviz.record import distributed

        self._watch, self.strategy, self._handles, self._reduce = (
            weakref.ref(watch),
            strategy,
            handles,
            reduce,
        )
        self.columns = {name: column for column, (name, _) in enumerate(parameters)}
        self.parameters = [p for _, p in parameters]
        self.reduced: dict[int, torch.Tensor] = {}
        self.pre_clip_shares: dict[int, float] = {}
        self.shard_numel = torch.zeros(len(watch.names), dtype=torch.float64)
        for column, parameter in enumerate(self.parameters):
            local = parameter.to_local() if is_shard(parameter) else parameter
            self.shard_numel[column] = local.numel()
        self._hooked: dict[int, int] = {}  # column -> id of the unsharded parameter hooked
        self._fsdp_by_name = dict(distributed.fsdp_parameters(model)) if strategy == distributed.FSDP else {}

    def close(self) -> None:
        """The watch closed: let go of the parameters (what :func:`gather` reads stays)."""
        self.parameters, self._fsdp_by_name = [], {}

    def hook_unsharded(self, hook_for_column) -> None:
        """FSDP2: put ``hook_for_column(column)`` on each parameter's ``_unsharded_param`` (made by
        FSDP2's first all-gather, so this runs from a forward pre-hook); the handles go to the
        watch, which removes them on close."""
        for name, column in self.columns.items():
            fsdp_param = self._fsdp_by_name.get(name)
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            if unsharded is None or self._hooked.get(column) == id(unsharded):
                continue
            self._hooked[column] = id(unsharded)
            self._handles.add(unsharded.register_post_accumulate_grad_hook(hook_for_column(column)))

    def finish(self, step: int) -> None:
        """End of a recorded backward: queue reading the reduced ``.grad`` after the all-reduce
        (DDP's and FSDP2's own end-of-backward callbacks were queued earlier, so they run first)."""
        torch_compat.queue_end_of_backward(lambda: self._read_reduced(step))

    def note_step(self, step: int, reduced: torch.Tensor, share: float) -> None:
        """``optimizer=``: optimizer step ``step`` was kept, with ``reduced`` (the statistics of the
        ``.grad`` it read) and ``share`` (FSDP2: see :attr:`pre_clip_shares`); those of steps no
        longer kept are dropped."""
        watch = self._watch()
        self.reduced[step] = reduced
        if self.strategy == "fsdp":
            self.pre_clip_shares[step] = share
        kept = set(watch.steps) if watch is not None else {step}
        for table in (self.reduced, self.pre_clip_shares):
            for old in [s for s in table if s not in kept and s != step]:
                del table[old]

    def _read_reduced(self, step: int) -> None:
        """Read the reduced ``.grad`` as the statistics of ``step``."""
        watch = self._watch()
        if watch is None:
            return
        grads = [(c, p.grad) for c, p in enumerate(self.parameters) if p.grad is not None]
        grads = [(c, g.to_local() if is_shard(g) else g) for c, g in grads]
        self.reduced[step] = self._reduce(grads, len(watch.names))  # as the watch reduces .grad
        kept = set(watch.steps)
        for old in [s for s in self.reduced if s not in kept and s != step]:
            del self.reduced[old]


def attach(
    watch,
    model: torch.nn.Module,
    parameters: list[tuple[str, torch.Tensor]],
    hook_for_column,
    handles: list,
    reduce,
) -> RankRecorder | None:
    """A :class:`RankRecorder` for ``watch`` when ``model`` is DDP or FSDP2, else None.

    ``hook_for_column(column)`` makes the watch's parameter hook for one column; on FSDP2 it is put
    on the unsharded parameters from a forward hook on ``model``. Every handle goes to ``handles``
    (the watch's, which it removes on close). ``reduce(pairs, width)`` is the watch's batched
    reduction of ``(column, gradient)`` pairs into a ``[width, 4]`` row."""
    from hookviz.record import distributed

    kind = distributed.strategy(model)
    if kind is None:
        return None
    recorder = RankRecorder(watch, model, kind, parameters, handles, reduce)
    if kind == distributed.FSDP:
        handles.add(
            model.register_forward_hook(partial(_after_forward, weakref.ref(recorder), hook_for_column))
        )
    return recorder


def _after_forward(reference: weakref.ref, hook_for_column, module, args, output) -> None:
    """Forward hook on an FSDP2 model: hook the unsharded parameters the forward all-gathered."""
    recorder = reference()
    if recorder is not None:
        recorder.hook_unsharded(hook_for_column)


# ---------------------------------------------------------------------------- the gathered history


@dataclass
class RankHistory:
    """Gradient statistics of every rank of a job over the kept steps (from :func:`gather`), or of
    one process (``hookviz.save(watch, path)`` without a gather: ``ranks == [0]``, ``strategy == ""``).

    Attributes:
        ranks: global ranks, in the order of the first axis of ``local``.
        steps: kept step numbers, ascending (the union over ranks).
        names: parameter and module names, one column each (parameters first), as in
            :class:`hookviz.watching.watch.History`.
        kinds: ``"parameter"`` or ``"output"`` per name.
        local: float64 ``[len(ranks), len(steps), len(names), 4]``: each rank's own gradients before
            the all-reduce; the last axis is :data:`STATISTICS` (norm, max |grad|, NaN+Inf count,
            fraction of exact zeros). NaN where a rank recorded no gradient for a name at a step.
        reduced: float64 ``[len(steps), len(names), 4]``: ``.grad`` after the all-reduce (what the
            optimizer sees; FSDP2 shards combined into the full gradient's statistics); NaN for
            module outputs (no reduce) and for a one-process history.
        order: float64 ``[len(ranks), len(names)]``: position at which each name's gradient first
            arrived in a backward on that rank (NaN: never), for "which came first".
        module_types: class name of every module.
        strategy: ``"ddp"``, ``"fsdp"`` or ``""``.
        every: the watch's ``every``.
        run: a recorded run of the same model, saved with the history (``hookviz.save(watch, path,
            run=run)``) so that ``hookviz.show(history)`` can draw the norms on its graph; or None.
        update_ratio: float64 ``[len(steps), len(names)]``: ``‖Δw‖ / ‖w‖`` per parameter and step
            (``optimizer=``; of the rank that holds the history), NaN elsewhere; None in older files.
        optimizers: per step, the name of the optimizer whose ``step()`` it is (``""``: a step is a
            backward), as :class:`hookviz.watching.history.StepInfo` holds it; empty in older files.
        skipped: per step, whether the ``GradScaler`` skipped ``optimizer.step()``; empty in older files.
        learning_rates: per step, each param group's learning rate; empty in older files.
        loss_scales: per step, the ``GradScaler``'s scale (NaN without one); empty in older files.
        notes: what a step is and whether its gradients carry a loss scale (``Watch.notes``).
        pre_clip_norm: float64 ``[len(steps), len(names)]`` with ``optimizer=``: each gradient's
            norm as the backward left it, before clipping (of the rank that holds the history);
            None without ``optimizer=`` and in older files.
        pre_clip_total: per step, their total (what ``clip_grad_norm_`` returns); empty without
            ``optimizer=`` and in older files.
        update_measured: bool ``[len(steps), len(names)]``: where an update ratio was read
            (:attr:`hookviz.watching.history.History.update_measured`); None without
            ``optimizer=`` and in older files.
        numels: each parameter column's element count (weights a layer's zero fraction in its
            diagnosis); empty in older files.
    """

    ranks: list[int]
    steps: list[int]
    names: list[str]
    kinds: list[str]
    local: torch.Tensor
    reduced: torch.Tensor
    order: torch.Tensor
    module_types: dict[str, str] = field(default_factory=dict)
    strategy: str = ""
    every: int = 1
    run: object = None  # a hookviz.Run (typed loosely: run.py does not import this module)
    update_ratio: torch.Tensor | None = None
    optimizers: list[str] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    learning_rates: list[list[float]] = field(default_factory=list)
    loss_scales: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pre_clip_norm: torch.Tensor | None = None
    pre_clip_total: list[float] = field(default_factory=list)
    update_measured: torch.Tensor | None = None
    numels: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)

    def _step(self, step: int | None) -> int:
        if not self.steps:
            raise WatchError(
                "the history holds no step: no rank recorded a backward while its watch was open"
            )
        if step is None:
            return len(self.steps) - 1
        if step not in self.steps:
            raise WatchError(
                f"step {step} is not kept (kept: {len(self.steps)} steps from {self.steps[0]} to "
                f"{self.steps[-1]}); pick one of .steps"
            )
        return self.steps.index(step)

    def _rank(self, rank: int) -> int:
        if rank not in self.ranks:
            raise WatchError(f"rank {rank!r} is not in this history; its ranks are {self.ranks}")
        return self.ranks.index(rank)

    def norms(
        self, step: int | None = None, rank: int | None = None, kind: str | None = None
    ) -> dict[str, float]:
        """``{name: gradient norm}`` at one step: the 2-norm of each gradient, as a Python float.

        Args:
            step: a kept step number (see ``steps``); None for the last kept.
            rank: None for the reduced norms (parameters only: what ``.grad`` holds after the
                all-reduce); a rank for that rank's local, pre-reduce norms (parameters and module
                outputs).
            kind: ``"parameter"``, ``"output"`` or None for both.

        Raises:
            WatchError: unknown step, rank or kind; or module outputs asked for without a rank.
        """
        if kind not in (None, "parameter", "output"):
            raise WatchError(f"kind={kind!r} must be None, 'parameter' or 'output'")
        index = self._step(step)
        if rank is None:
            if kind == "output":
                raise WatchError(
                    "module outputs are not all-reduced, so they have no reduced norm; "
                    "pass rank=r for that rank's own"
                )
            if not self.strategy:
                raise WatchError("this history is from one process, with no all-reduce; pass rank=0")
            row = self.reduced[index]
        else:
            row = self.local[self._rank(rank), index]
        return {
            n: norm
            for n, k, norm, nonfinite in zip(
                self.names, self.kinds, row[:, COLUMN["norm"]].tolist(), row[:, COLUMN["nonfinite"]].tolist()
            )
            if kind in (None, k) and (not math.isnan(norm) or nonfinite > 0)
        }

    def history(self, rank: int | None = None) -> History:
        """One rank's local statistics (or the reduced ones) as a :class:`hookviz.watching.watch.History`.

        Args:
            rank: a rank of ``ranks``; None for the reduced statistics (``.grad`` after the
                all-reduce; NaN for module outputs).

        Raises:
            WatchError: ``rank`` is not in this history.
        """
        table = self.reduced if rank is None else self.local[self._rank(rank)]
        return History(
            list(self.steps),
            list(self.names),
            list(self.kinds),
            *(table[:, :, i].clone() for i in range(4)),
            # what each step was and did: the same on every rank (the weights are all-reduced)
            update_ratio=None if self.update_ratio is None else self.update_ratio.clone(),
            optimizers=list(self.optimizers),
            skipped=list(self.skipped),
            learning_rates=[list(rates) for rates in self.learning_rates],
            loss_scales=list(self.loss_scales),
            pre_clip_norm=None if self.pre_clip_norm is None else self.pre_clip_norm.clone(),
            pre_clip_total=list(self.pre_clip_total),
            update_measured=None if self.update_measured is None else self.update_measured.clone(),
            numels=list(self.numels),
            module_types=dict(self.module_types),
        )

    def total_norms(self) -> torch.Tensor:
        """float64 ``[len(ranks), len(steps)]``: each rank's local norm of all parameter gradients
        together (:func:`hookviz.stats.reduce.combined_norm`: a NaN gradient makes it NaN, an Inf
        one Inf; NaN where the rank had no gradient at that step)."""
        columns = [i for i, k in enumerate(self.kinds) if k == "parameter"]
        norms = self.local[:, :, columns, 0].tolist()
        nonfinite = self.local[:, :, columns, 2].tolist()
        totals = torch.full((len(self.ranks), len(self.steps)), math.nan, dtype=torch.float64)
        for rank, (rank_norms, rank_bad) in enumerate(zip(norms, nonfinite)):
            for step, (step_norms, step_bad) in enumerate(zip(rank_norms, rank_bad)):
                total = combined_norm(  # a NaN norm with no NaN/Inf count: no gradient
                    n for n, bad in zip(step_norms, step_bad) if not math.isnan(n) or bad > 0
                )
                if total is not None:
                    totals[rank, step] = total
        return totals

    def diagnose(self, diverge: float = DEFAULT_DIVERGE) -> list[Finding]:
        """Cross-rank findings (see the module docstring): ``"nan"``, ``"diverging"``, ``"unused"``.

        Each :class:`~hookviz.analysis.findings.Finding` has ``rank`` and ``step`` set (``unused``: the
        first rank that lacked the gradient).

        Args:
            diverge: the ratio to the other ranks' median local norm above which a rank is said
                to diverge (a number above 1; default 10).

        Raises:
            WatchError: ``diverge`` is not a number above 1.
        """
        if not (isinstance(diverge, (int, float)) and diverge > 1):
            raise WatchError(f"diverge={diverge!r} must be a number above 1 (a ratio of norms)")
        return nan_findings(self) + diverging_findings(self, diverge) + unused_findings(self)

    def heatmap(self, rank: int | None = None, kind: str = "parameter") -> plotly.graph_objects.Figure:
        """A plotly heatmap, names x steps, of log10 of the gradient norm.

        Args:
            rank: whose local gradients to show; None for the reduced ones.
            kind: ``"parameter"`` or ``"output"`` (module outputs; local ranks only).

        Returns:
            a ``plotly.graph_objects.Figure``.

        Raises:
            WatchError: ``rank`` is not in this history.
        """
        import plotly.graph_objects as go

        history = self.history(rank)
        columns = [i for i, k in enumerate(history.kinds) if k == kind]
        values = history.norm[:, columns].T
        values = torch.log10(values.where(values > 0, torch.tensor(math.nan, dtype=torch.float64)))
        z = [[None if not math.isfinite(v) else v for v in row] for row in values.tolist()]
        title = "reduced gradient norm" if rank is None else f"rank {rank}: local gradient norm"
        scale = color_range(history)
        figure = go.Figure(
            go.Heatmap(
                z=z,
                x=history.steps,
                y=[module_name(history.names[i]) for i in columns],
                colorscale=PLOTLY_COLORSCALE,  # hookviz's one scale, on its one range
                zmin=scale["lo"],
                zmax=scale["hi"],
                colorbar={"title": "log10 norm"},
            )
        )
        figure.update_layout(
            title=f"{title} per {kind}",
            xaxis_title="step",
            yaxis={"autorange": "reversed", "type": "category"},
        )
        return figure

    def __repr__(self) -> str:
        return (
            f"RankHistory(ranks={self.ranks}, steps={len(self.steps)}, names={len(self.names)}, "
            f"strategy={self.strategy or 'one process'!r})"
        )


def from_watch(watch) -> RankHistory:
    """A one-process :class:`RankHistory` (rank 0, nothing reduced) of a watch's kept steps."""
    history = watch.history
    local = torch.stack([getattr(history, s) for s in STATISTICS], dim=-1).unsqueeze(0)
    reduced = torch.full(local.shape[1:], math.nan, dtype=torch.float64)
    return RankHistory(
        [0],
        list(history.steps),
        list(history.names),
        list(history.kinds),
        local,
        reduced,
        _order_row(watch).unsqueeze(0),
        dict(watch.module_types),
        "",
        watch.every,
        **_step_extras(watch, history.steps),
    )


def _step_extras(watch, steps: list[int]) -> dict:
    """The per-step fields of :class:`RankHistory` for ``steps`` from this process's watch (a step
    it did not keep: NaN ratios, no optimizer, not skipped)."""
    history = watch.history
    at = {s: i for i, s in enumerate(history.steps)}
    ratio = torch.full((len(steps), len(history.names)), math.nan, dtype=torch.float64)
    read = torch.zeros(ratio.shape, dtype=torch.bool)
    pre_clip = None if history.pre_clip_norm is None else torch.full_like(ratio, math.nan)
    rows = [at.get(s) for s in steps]
    for i, row in enumerate(rows):
        if row is not None:
            ratio[i] = history.update_ratio[row]
            read[i] = history.update_measured[row]
            if pre_clip is not None:
                pre_clip[i] = history.pre_clip_norm[row]

    def per_step(values: list, missing) -> list:
        return [missing if row is None else values[row] for row in rows]

    return {
        "update_ratio": ratio,
        "optimizers": per_step(history.optimizers, ""),
        "skipped": per_step(history.skipped, False),
        "learning_rates": per_step(history.learning_rates, []),
        "loss_scales": per_step(history.loss_scales, math.nan),
        "notes": list(watch.notes),
        "pre_clip_norm": pre_clip,
        "pre_clip_total": per_step(history.pre_clip_total, math.nan) if history.pre_clip_total else [],
        "update_measured": read,
        "numels": list(history.numels),
    }


def _order_row(watch) -> torch.Tensor:
    order = torch.full((len(watch.names),), math.nan, dtype=torch.float64)
    for column, position in watch.arrival_order.items():
        order[column] = position
    return order


# ---------------------------------------------------------------------------- gathering


def gather(watch, dst: int = 0, group=None) -> RankHistory | None:
    """Bring every rank's watch history to rank ``dst``: a collective (see the module docstring).

    Args:
        watch: this rank's :class:`hookviz.Watch` (open or closed) of the same model as the other
            ranks' (same names in the same order).
        dst: the global rank that receives the history.
        group: the process group (None = the default one).

    Returns:
        a :class:`RankHistory` on ``dst``; None on the other ranks.

    Raises:
        WatchError: no process group is initialised; the ranks watch different names.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise WatchError(
            "gather() needs torch.distributed initialised (torch.distributed.init_process_group, "
            f"as torchrun scripts do); in one process use watch.history or {advice('save_watch')}"
        )
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    if dst not in ranks:
        raise WatchError(f"dst={dst} is not a rank of the group (ranks {ranks})")
    backend = dist.get_backend(group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    history = watch.history
    steps, names = len(history.steps), len(history.names)
    recorder = getattr(watch, "ranks", None)
    check = zlib.crc32("\n".join(history.names).encode())
    header = torch.tensor([steps, names, check], dtype=torch.int64, device=device)
    headers = [torch.empty_like(header) for _ in ranks]
    dist.all_gather(headers, header, group=group)
    headers = [h.tolist() for h in headers]
    if any(h[1:] != headers[0][1:] for h in headers):
        raise WatchError(
            "the ranks' watches record different names: watch the same model on every rank "
            f"(names per rank: {[h[1] for h in headers]})"
        )
    most = max(h[0] for h in headers)
    payload = torch.full((most * (2 + 8 * names) + 2 * names,), math.nan, dtype=torch.float64)
    local = torch.stack([getattr(history, s) for s in STATISTICS], dim=-1)  # [steps, names, 4]
    reduced = torch.full_like(local, math.nan)
    if recorder is not None:
        for i, step in enumerate(history.steps):
            if step in recorder.reduced:
                reduced[i] = recorder.reduced[step]
    numel = recorder.shard_numel if recorder is not None else torch.zeros(names, dtype=torch.float64)
    view = _Payload(payload, most, names)
    view.steps[:steps] = torch.tensor(history.steps, dtype=torch.float64)
    view.local[:steps], view.reduced[:steps] = local, reduced
    view.numel[:], view.order[:] = numel, _order_row(watch)
    if recorder is not None and recorder.pre_clip_shares:
        shares = [recorder.pre_clip_shares.get(s, math.nan) for s in history.steps]
        view.shares[:steps] = torch.tensor(shares, dtype=torch.float64)
    payload = payload.to(device)
    received = [torch.empty_like(payload) for _ in ranks] if dist.get_rank() == dst else None
    dist.gather(payload, received, dst=dst, group=group)
    if received is None:
        return None
    views = [_Payload(p.cpu(), most, names) for p in received]
    return _combine(views, ranks, history, watch, recorder.strategy if recorder is not None else "")


@dataclass
class _Payload:
    """Views into one rank's flat gathered tensor."""

    flat: torch.Tensor
    most: int
    names: int

    def __post_init__(self):
        s, n = self.most, self.names
        self.steps = self.flat[:s]
        self.local = self.flat[s : s + 4 * s * n].view(s, n, 4)
        self.reduced = self.flat[s + 4 * s * n : s + 8 * s * n].view(s, n, 4)
        self.numel = self.flat[s + 8 * s * n : s + 8 * s * n + n]
        self.order = self.flat[s + 8 * s * n + n : s + 8 * s * n + 2 * n]
        self.shares = self.flat[s + 8 * s * n + 2 * n :]


def _combine(views: list[_Payload], ranks: list[int], history, watch, strategy: str) -> RankHistory:
    rows = [[int(s) for s in v.steps.tolist() if not math.isnan(s)] for v in views]
    steps = sorted({s for r in rows for s in r})
    names = len(history.names)
    local = torch.full((len(ranks), len(steps), names, 4), math.nan, dtype=torch.float64)
    parts = torch.full((len(ranks), len(steps), names, 4), math.nan, dtype=torch.float64)
    for i, (view, kept) in enumerate(zip(views, rows)):
        at = [steps.index(s) for s in kept]
        local[i, at] = view.local[: len(kept)]
        parts[i, at] = view.reduced[: len(kept)]
    numel = torch.stack([v.numel for v in views])  # [ranks, names]
    extras = _step_extras(watch, steps)
    if strategy == "fsdp":
        reduced = _combine_shards(parts, numel)
        if extras["pre_clip_total"]:
            extras["pre_clip_total"] = _combine_totals(views, rows, steps)
    else:  # DDP: every rank holds the same reduced gradient; take the first rank that recorded the step
        reduced = torch.full(parts.shape[1:], math.nan, dtype=torch.float64)
        for i in reversed(range(len(ranks))):
            present = ~parts[i, :, :, 0].isnan() | (parts[i, :, :, 2] > 0)
            reduced[present] = parts[i][present]
    return RankHistory(
        list(ranks),
        steps,
        list(history.names),
        list(history.kinds),
        local,
        reduced,
        torch.stack([v.order for v in views]),
        dict(watch.module_types),
        strategy,
        watch.every,
        **extras,
    )


def _combine_totals(views: list[_Payload], rows: list[list[int]], steps: list[int]) -> list[float]:
    """FSDP2: per step, the 2-norm of the full gradients from each rank's shares
    (:attr:`RankRecorder.pre_clip_shares`), as ``clip_grad_norm_`` combines them; NaN where a rank
    has none."""
    shares = [dict(zip(kept, view.shares[: len(kept)].tolist())) for view, kept in zip(views, rows)]
    totals = []
    for step in steps:
        found = [share.get(step, math.nan) for share in shares]
        totals.append(math.sqrt(sum(v * v for v in found)))  # NaN when one is
    return totals


def _combine_shards(parts: torch.Tensor, numel: torch.Tensor) -> torch.Tensor:
    """Statistics of a full gradient from those of its shards (``parts``: [ranks, steps, names, 4];
    ``numel``: [ranks, names]) by the engine's one rule (:func:`hookviz.stats.reduce.combine`).
    Shards with no elements, or no gradient at that step, are skipped; NaN where none is left."""
    ranks, steps, names, _ = parts.shape
    combined = torch.full(parts.shape[1:], math.nan, dtype=torch.float64)
    values, counts = parts.tolist(), numel.tolist()
    for step in range(steps):
        for column in range(names):
            rows = [
                row_from_statistics(values[rank][step][column], int(counts[rank][column]))
                for rank in range(ranks)
                if counts[rank][column] > 0
                and (not math.isnan(values[rank][step][column][0]) or values[rank][step][column][2] > 0)
            ]
            if rows:
                combined[step, column] = torch.tensor(summary_of(combine(rows)), dtype=torch.float64)
    return combined
