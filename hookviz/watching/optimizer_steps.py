"""A watch's steps taken at ``optimizer.step()``: the gradients each step uses, what it did to the weights.

``hookviz.watch(model, optimizer=opt)`` (one optimizer or a list) registers, on each optimizer,

- a step pre-hook (``Optimizer.register_step_pre_hook``): the step's gradients are the ``.grad``
  the optimizer is about to read, so accumulated over micro-batches, unscaled by ``GradScaler``
  (``scaler.step`` unscales before it calls ``optimizer.step``), clipped by ``clip_grad_norm_``.
  Given ``step(closure)`` (Lightning; LBFGS), the optimizer runs the closure's backward after
  this hook, so the hook wraps the closure and keeps the step when its first call returns.
  On every ``stats_every``-th step (as the other statistics) it also copies the weights of
  the optimizer's watched parameters (three passes over the weights: not on every step);
- a step post-hook (``register_step_post_hook``): the update-to-weight ratio ``‖w_after -
  w_before‖ / ‖w_after‖`` per parameter where the weights were copied (else NaN: not measured),
  and each param group's learning rate (read before the step).

A ``GradScaler`` that finds Inf/NaN skips ``optimizer.step()``, so neither hook runs. Given the
scaler (``scaler=``, or the one an accelerate ``AcceleratedOptimizer`` holds), the watch wraps that
one scaler's ``step`` (an attribute of the instance, removed on close): when ``scaler.step(opt)``
returns without ``opt``'s pre-hook having run, the step was skipped, and it is kept, marked skipped,
with the unscaled gradients that held the Inf/NaN.

Wrapped optimizers are followed to the optimizer inside (accelerate's ``AcceleratedOptimizer``,
Lightning's ``LightningOptimizer``: :mod:`hookviz.integrations.optimizers`).
Source: https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.register_step_pre_hook.html
"""

from __future__ import annotations

import math
import threading
import warnings
import weakref
from functools import partial

import torch

from hookviz.advice import advice
from hookviz.errors import WatchError
from hookviz.stats.reduce import norm_column, norms_in_range, queue_norms
from hookviz.watching.gather import is_shard
from hookviz.watching.history import STATISTICS, StepInfo
from hookviz.watching.reduce import EXPLODING, StepReducer, finite_max_abs, is_alarm
from hookviz.watching.scaler_listeners import listen

# Frameworks' optimizer wrappers (accelerate's, Lightning's) are known in the integrations layer,
# which comes after this one: hookviz.integrations.optimizers registers its unwrap() here when
# hookviz is imported. Until then an optimizer is taken as it is.
_unwrap = None


def unwrap_with(function) -> None:
    """Use ``function(optimizer) -> (inner optimizer, GradScaler or None)`` to follow frameworks'
    optimizer wrappers (:func:`hookviz.integrations.optimizers.unwrap` registers itself)."""
    global _unwrap
    _unwrap = function


def unwrapped(optimizer) -> tuple[torch.optim.Optimizer, object]:
    """``(the torch optimizer, the GradScaler its wrapper holds or None)`` of ``optimizer``
    (a framework's wrapper is followed: :func:`hookviz.integrations.optimizers.unwrap`).

    Raises:
        WatchError: ``optimizer`` is not a torch optimizer nor a wrapper of one.
    """
    optimizer, scaler = _unwrap(optimizer) if _unwrap is not None else (optimizer, None)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WatchError(
            f"optimizer={type(optimizer).__name__} is not a torch.optim.Optimizer; pass the optimizer "
            "whose step() trains the model (or a list of them), or leave optimizer out to keep one step "
            "per backward"
        )
    return optimizer, scaler


def _names(optimizers: list[torch.optim.Optimizer]) -> list[str]:
    """A name per optimizer: its class, with its place in the list when several share a class."""
    kinds = [type(o).__name__ for o in optimizers]
    return [k if kinds.count(k) == 1 else f"{k}[{i}]" for i, k in enumerate(kinds)]


class OptimizerSteps:
    """The optimizer side of a :class:`hookviz.Watch` (module docstring).

    Attributes:
        optimizers: the torch optimizers watched, in the order given.
        names: one name per optimizer (its class; ``"Adam[1]"`` when several share a class).
        scaler: the ``GradScaler`` whose skipped steps are kept, or None.

    Raises:
        WatchError: an optimizer listed twice, or one that owns none of the watched parameters.
    """

    def __init__(self, watch, optimizers: list, scaler, handles, column_of: dict[int, int]):
        pairs = [unwrapped(o) for o in optimizers]
        self.optimizers = [o for o, _ in pairs]
        if len({id(o) for o in self.optimizers}) != len(self.optimizers):
            raise WatchError("optimizer= lists one optimizer twice; list each once")
        self.names = _names(self.optimizers)
        if column_of:
            foreign = [n for i, n in enumerate(self.names) if not self.columns(i, column_of)]
            if foreign:
                raise WatchError(
                    f"optimizer={', '.join(foreign)} owns none of the parameters of "
                    f"{type(watch.model).__name__} that require grad, so its steps would hold no "
                    "gradient; pass the optimizer that trains this model (the one built from "
                    "model.parameters()), or leave optimizer out to keep one step per backward"
                )
        self.scaler = scaler if scaler is not None else next((s for _, s in pairs if s is not None), None)
        self._watch = weakref.ref(watch)
        self._lock = threading.Lock()
        self._stepped: set[int] = set()  # optimizers whose pre-hook ran inside the current scaler.step
        self._pending: dict[int, tuple] = {}  # optimizer -> (step, columns, weights before)
        self._before: dict[int, list] = {}  # optimizer -> weights copied before a closure ran
        # what the backwards since the last step left: module outputs, DDP / FSDP2 local rows
        self._outputs: torch.Tensor | None = None
        self._local: dict[int, tuple] = {}
        # per column: its norm as the last backward left it (unscaled) and that .grad's identity
        self._pre_clip = torch.full((len(watch.names),), math.nan, dtype=torch.float64)
        self._left: dict[int, tuple[int, int]] = {}
        # DDP: per column, the norm of the all-reduced .grad the last backward left (what clipping sees)
        self._reduced = torch.full((len(watch.names),), math.nan, dtype=torch.float64)
        self._parameter_count = len(watch.parameter_names)
        # a backward that left NaN/Inf and no step yet: (its row, its columns)
        self._unstepped: tuple[torch.Tensor, list[int]] | None = None
        reference = weakref.ref(self)
        for index, optimizer in enumerate(self.optimizers):
            handles.add(optimizer.register_step_pre_hook(partial(_before_step, reference, index)))
            handles.add(optimizer.register_step_post_hook(partial(_after_step, reference, index)))
        if self.scaler is not None and self.scaler.is_enabled():
            begins, stepped = partial(_scaler_step_begins, reference), partial(_scaler_stepped, reference)
            handles.add(listen(self.scaler, begins, stepped))

    def columns(self, index: int, column_of: dict[int, int]) -> list[int]:
        """The watched columns of optimizer ``index``'s parameters, in its param groups' order."""
        found = (column_of.get(id(p)) for g in self.optimizers[index].param_groups for p in g["params"])
        return [c for c in found if c is not None]

    def learning_rates(self, index: int) -> list[float]:
        """Each param group's learning rate now (before the step), as floats."""
        return [float(g["lr"]) for g in self.optimizers[index].param_groups if "lr" in g]

    def owner(self, columns: list[int], column_of: dict[int, int]) -> int:
        """The index of the first optimizer that owns one of ``columns`` (0 when none does)."""
        wanted = set(columns)
        for index in range(len(self.optimizers)):
            if wanted.intersection(self.columns(index, column_of)):
                return index
        return 0

    # ------------------------------------------------------------------ from the backwards

    def backward_began(self) -> None:
        """A backward began: a backward that left NaN/Inf and whose gradients were reset (or
        changed in place: unscaled, zeroed) with no step of a watched optimizer since is kept as a
        skipped step now. Gradients still as it left them are being accumulated: not skipped."""
        watch = self._watch()
        with self._lock:
            unstepped = self._unstepped
            if unstepped is None or watch is None:
                return
            _, columns = unstepped
            parameters = watch.columns.parameters
            same = all(
                parameters[c].grad is not None
                and (id(parameters[c].grad), parameters[c].grad._version) == self._left.get(c)
                for c in columns
            )
            if same:
                return
            self._unstepped = None
        self.keep_unstepped(watch, unstepped)

    def keep_unstepped(self, watch, unstepped: tuple[torch.Tensor, list[int]]) -> None:
        """Keep a backward that left NaN/Inf and was followed by no step, marked skipped."""
        row, columns = unstepped
        index = self.owner(columns, watch.columns.column_of)
        keep_step(watch, index, skipped=True, read=(row, columns))

    def backward_ended(self, changed: tuple, outputs: torch.Tensor | None, local: dict) -> None:
        """A backward ended: note what it left for the next step (module outputs, DDP / FSDP2 local
        rows), read each changed ``.grad``'s norm as it left it (the pre-clip norm, unscaled when
        the scaler is known), and keep its row when a gradient holds NaN/Inf. DDP / FSDP2: the
        pre-clip norms are this rank's, read in the parameters' hooks before the all-reduce
        (``local``)."""
        columns, grads, _ = changed
        norms, finite = None, True
        if grads:  # one batched call for plain CPU gradients, else the general path; bit for bit alike
            norms = norms_in_range(grads, math.inf)  # None when a norm is not finite (or 0)
            if norms is None:
                norms = norm_column(grads)
                finite = bool(norms.isfinite().all())
        elif local and columns:
            norms = torch.tensor([local[c][0] for c in columns], dtype=torch.float64)
        unstepped = None
        if not finite:
            reducer = StepReducer()
            reducer.add_all(columns, grads, True)
            row = reducer.finish(self._pre_clip.numel())
            finite_max_abs(row, columns, grads)
            unstepped = (row, columns)
        scale = 1.0
        if self.scaler is not None and self.scaler.is_enabled():
            scale = float(self.scaler.get_scale())
        with self._lock:
            if outputs is not None:
                self._outputs = outputs
            self._local.update(local)
            if norms is not None:
                norms = norms if scale == 1.0 else norms / scale
                if columns == list(range(len(columns))):
                    self._pre_clip[: len(columns)] = norms
                else:
                    self._pre_clip[columns] = norms
                self._left.update(zip(columns, ((id(g), g._version) for g in grads)))
            if unstepped is not None:
                self._unstepped = unstepped

    def read_reduced(self, columns: list[int]) -> None:
        """DDP / FSDP2, at the end of a backward, after their own end-of-backward callbacks wrote the
        reduced gradients to ``.grad``: note their norms (FSDP2: of this rank's shards; unscaled when
        the scaler is known), the ones ``clip_grad_norm_`` reads before the step."""
        watch = self._watch()
        if watch is None or watch.closed:
            return
        parameters = watch.columns.parameters
        pairs = [(c, parameters[c].grad) for c in columns]
        pairs = [(c, g.to_local() if is_shard(g) else g) for c, g in pairs if g is not None]
        pairs = [(c, g) for c, g in pairs if g.numel()]
        if not pairs:
            return
        norms = norm_column([g for _, g in pairs])
        if self.scaler is not None and self.scaler.is_enabled():
            norms = norms / float(self.scaler.get_scale())
        with self._lock:
            self._reduced[[c for c, _ in pairs]] = norms

    def reduced_total(self, columns: list[int]) -> float:
        """The 2-norm of ``columns``' reduced gradients as the last backward left them: DDP, what
        ``clip_grad_norm_`` returns on every rank; FSDP2, this rank's shards' share of it. NaN where
        none was read."""
        with self._lock:
            read = [v for v in self._reduced[columns].tolist() if not math.isnan(v)]
        return math.sqrt(sum(v * v for v in read)) if read else math.nan

    def unchanged(self, pairs: list[tuple[int, torch.Tensor]], pre_clip: torch.Tensor) -> bool:
        """Whether each ``.grad`` of ``pairs`` is the one the last backward left, unchanged since,
        with a norm read then that raises no alarm (in range, not 0) and no loss scale in it."""
        if self.scaler is not None and self.scaler.is_enabled():
            return False
        left = self._left
        if any(left.get(c) != (id(g), g._version) for c, g in pairs):
            return False
        values = pre_clip.tolist()
        return all(0 < values[c] <= EXPLODING for c, _ in pairs)

    def take_backward(self, columns: list[int]) -> tuple[torch.Tensor | None, dict, torch.Tensor, bool]:
        """A step of optimizer with ``columns``: ``(module outputs row or None, local rows, the
        pre-clip norms [width], whether a NaN/Inf backward of these columns awaited a step)``; the
        NaN/Inf backward, if any, is stepped on now."""
        with self._lock:
            outputs, self._outputs = self._outputs, None
            local, self._local = self._local, {}
            if len(columns) == self._parameter_count and columns == list(range(len(columns))):
                pre_clip = self._pre_clip.clone()  # the usual step: every watched parameter
            else:
                pre_clip = torch.full_like(self._pre_clip, math.nan)
                pre_clip[columns] = self._pre_clip[columns]
            stepped = self._unstepped is not None and bool(set(self._unstepped[1]) & set(columns))
            if stepped:
                self._unstepped = None
        return outputs, local, pre_clip, stepped

    def close(self, watch) -> None:
        """The watch closes: a NaN/Inf backward still waiting for a step is kept, marked skipped;
        then the optimizers (which hold the parameters) are let go."""
        with self._lock:
            unstepped, self._unstepped = self._unstepped, None
        if unstepped is not None:
            self.keep_unstepped(watch, unstepped)
        self.optimizers = []


def _scaler_step_begins(reference: weakref.ref) -> None:
    steps = reference()
    if steps is not None:
        steps._stepped.clear()


def _scaler_stepped(reference: weakref.ref, optimizer) -> None:
    """``scaler.step(optimizer)`` returned: if ``optimizer`` is watched and did not step, keep its
    skipped step (with the unscaled gradients that held the Inf/NaN)."""
    steps = reference()
    watch = steps._watch() if steps is not None else None
    if watch is None or watch.closed:
        return
    inner, _ = unwrapped(optimizer)
    for index, mine in enumerate(steps.optimizers):
        if mine is inner and index not in steps._stepped:
            keep_step(watch, index, skipped=True)
    steps._stepped.clear()


def _before_step(reference: weakref.ref, index: int, optimizer, args, kwargs):
    """Step pre-hook: keep the step with the gradients it is about to use; copy the weights.

    ``optimizer.step(closure)`` runs the closure (forward, backward, and, under Lightning, the
    clipping) inside ``step()``, after this hook: then the closure is wrapped, and the step is kept
    when its first call returns, from the ``.grad`` it left; the weights are copied now, before the
    closure (a SAM-style closure moves them). ``args`` holds the optimizer itself first.
    """
    steps = reference()
    watch = steps._watch() if steps is not None else None
    if watch is None or watch.closed:
        return None
    steps._stepped.add(index)
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    if closure is None:
        _keep_before_step(steps, watch, index)
        return None
    recorded, full = watch.kept.peek(index)
    if recorded and full:
        steps._before[index] = _weights(watch, steps.columns(index, watch.columns.column_of))
    pending = [True]  # LBFGS calls the closure several times a step: the first call's .grad is kept

    def closure_then_keep():
        result = closure()
        if pending:
            pending.clear()
            _keep_before_step(steps, watch, index)
        return result

    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure_then_keep}
    return (args[0], closure_then_keep, *args[2:]), kwargs


def _weights(watch, columns: list[int]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [_local(watch.columns.parameters[c]).clone() for c in columns]


def _local(parameter: torch.Tensor) -> torch.Tensor:
    """A parameter's values on this rank (FSDP2: its shard, so a ratio is the shard's)."""
    parameter = parameter.detach()
    return parameter.to_local() if is_shard(parameter) else parameter


def _keep_before_step(steps: OptimizerSteps, watch, index: int) -> None:
    kept = keep_step(watch, index, skipped=False)
    before = steps._before.pop(index, None)
    if kept is not None:
        step, columns, read_all = kept
        if read_all:  # the update ratios come with the other statistics (an alarm's step too)
            all_columns = steps.columns(index, watch.columns.column_of)
            if before is not None and len(before) == len(all_columns):
                place = dict(zip(all_columns, before))
                before = [place[c] for c in columns]
            else:
                before = _weights(watch, columns)
            steps._pending[index] = (step, columns, before)


def _after_step(reference: weakref.ref, index: int, optimizer, args, kwargs) -> None:
    """Step post-hook: ``‖Δw‖ / ‖w‖`` per parameter of a kept step."""
    steps = reference()
    watch = steps._watch() if steps is not None else None
    pending = steps._pending.pop(index, None) if steps is not None else None
    if watch is None or pending is None:
        return
    step, columns, before = pending
    with torch.no_grad():
        after = [_local(watch.columns.parameters[c]) for c in columns]
        torch._foreach_sub_(before, after)  # the update, negated: the same norm
        found = norms_in_range(before + after, math.inf)  # one call, when every norm is plain
        if found is not None:
            values = found.tolist()
        else:
            values = [math.nan if n is None else float(n) for n, _, _ in queue_norms(before + after)]
    count = len(columns)
    ratios = [d / w if w > 0 else math.nan for d, w in zip(values[:count], values[count:])]
    watch.kept.set_ratios(step, columns, ratios)


SCALE_NOTE = (
    "every watched gradient's norm is above exploding_norm, as the gradients of "
    "scaler.scale(loss).backward() are (multiplied by the GradScaler's loss scale): if this loop "
    f"uses a GradScaler, pass it as {advice('watch_with_scaler')} so that each step keeps its "
    "scale and diagnosis divides it out (the watch never guesses a scale); otherwise the "
    "gradients are exploding"
)


def step_notes(steps: OptimizerSteps | None, scaler, looks_scaled: bool = False) -> list[str]:
    """The notes a watch gives with its numbers: what one step is, and whether a loss scale is in
    them; ``looks_scaled``: no scaler was given and every norm of a kept step is above
    ``exploding_norm``, as a loss scale makes them."""
    scaled = scaler is not None and scaler.is_enabled()
    if steps is None:
        notes = ["a step is one backward that reached the model's parameters; .grad read when it ends"]
        if scaled:
            notes.append(
                f"the gradients carry GradScaler's loss scale ({advice('loss_scale')}); diagnosis divides "
                "it out before calling a norm an explosion. Pass optimizer= to watch the unscaled "
                "gradients the optimizer steps on"
            )
        elif looks_scaled:
            notes.append(SCALE_NOTE)
        return notes
    names = ", ".join(steps.names)
    notes = [
        f"a step is one optimizer.step() of {names}, with the .grad it read: accumulated over "
        "micro-batches, clipped where the loop clips, with each parameter's update-to-weight ratio; "
        "history.pre_clip_norm keeps each gradient's norm as the backward left it (before clipping), "
        "and a backward that left NaN/Inf with no step after it is kept, marked skipped"
    ]
    if scaled:
        notes.append(
            "GradScaler unscaled the gradients before each step read them (and the pre-clip norms are "
            "divided by its scale); a step the scaler skipped (Inf/NaN found) is kept and marked "
            "skipped (watch.skipped_steps)"
        )
    elif looks_scaled:
        notes.append(SCALE_NOTE)
    return notes


def nothing_kept_reason(model: str, backwards: int, steps: OptimizerSteps | None, changed: list[str]) -> str:
    """Why a watch that kept no step saw gradients anyway (``""`` when it saw none): ``backwards``
    that reached its parameters, ``changed``: parameters whose ``.grad`` changed while it was open."""
    if backwards and steps is not None:
        return (
            f"hookviz.watch kept no step: {backwards} backward(s) reached the parameters of {model}, "
            f"but {', '.join(steps.names)} never stepped while the watch was open (with optimizer=, a "
            "step is one optimizer.step()); pass the optimizer whose step() trains these parameters, "
            "or leave optimizer= out to keep one step per backward"
        )
    if changed and not backwards:
        listed = ", ".join(repr(n) for n in changed[:3]) + (" ..." if len(changed) > 3 else "")
        return (
            f"hookviz.watch kept no step: the .grad of {len(changed)} parameter(s) of {model} "
            f"({listed}) changed while it was open, but no backward it could see reached them: "
            "the gradients were assigned to .grad directly or computed where tensor hooks do not run; "
            "call loss.backward() (or torch.autograd.backward) on the model's output inside the watch"
        )
    return ""


def keep_step(
    watch, index: int, skipped: bool, read: tuple[torch.Tensor, list[int]] | None = None
) -> tuple[int, list[int], bool] | None:
    """Optimizer ``index`` steps (or its step was skipped): read the ``.grad`` of its watched
    parameters now (or take ``read``: the row and columns of a backward that left NaN/Inf and was
    never stepped on) and keep the step when the kept steps say so. Returns ``(step, its columns,
    whether every statistic was read)`` when it was kept."""
    steps = watch.optimizer_steps
    plan = watch.kept.plan(index)
    width = len(watch.names)
    columns = steps.columns(index, watch.columns.column_of)
    outputs, local, pre_clip, _ = steps.take_backward(columns)
    row = torch.full((width, len(STATISTICS)), math.nan, dtype=torch.float64) if outputs is None else outputs
    row[: len(watch.parameter_names)] = math.nan  # the parameters: as the optimizer reads them
    read_all, alarm, pairs = True, True, []
    if read is not None:
        found, columns = read
        row[columns] = found[columns]
    else:
        pairs = [(c, watch.columns.parameters[c].grad) for c in columns]
        # FSDP2: a sharded parameter's .grad is a DTensor; this rank's shard is read (the gather
        # combines the shards into the full gradient's statistics)
        pairs = [(c, g.to_local() if is_shard(g) else g) for c, g in pairs if g is not None]
        pairs = [(c, g) for c, g in pairs if g.numel()]
        columns = [c for c, _ in pairs]
        read_all = False
        if pairs and not plan.full and steps.unchanged(pairs, pre_clip):
            # the .grad the backward left, untouched since (no clipping, unscaling, accumulation):
            # its norms were read at the backward's end
            if columns == list(range(len(columns))):
                row[: len(columns), 0], row[: len(columns), 2] = pre_clip[: len(columns)], 0.0
            else:
                row[columns, 0], row[columns, 2] = pre_clip[columns], 0.0
        elif pairs:
            reducer = StepReducer()
            read_all = reducer.add_all(columns, [g for _, g in pairs], plan.full, EXPLODING)
            row[columns] = reducer.finish(width)[columns]
        alarm = (read_all or outputs is not None or bool(local)) and is_alarm(row)
        if alarm:
            finite_max_abs(row, columns, [g for _, g in pairs])
    for column, values in local.items():  # DDP / FSDP2: local gradients before the all-reduce
        row[column] = torch.tensor(values, dtype=torch.float64)
    scale = watch.scaler.get_scale() if watch.scaler is not None and watch.scaler.is_enabled() else math.nan
    read = [v for v in pre_clip.tolist() if not math.isnan(v)]
    total = math.sqrt(sum(v * v for v in read)) if read and columns else math.nan
    share = math.nan
    if watch.ranks is not None:  # the local norms add up to no norm clipping reads: the reduced ones do
        share = steps.reduced_total(columns) if columns else math.nan
        total = share if watch.ranks.strategy == "ddp" else math.nan  # FSDP2: gather combines the shares
    info = StepInfo(steps.names[index], skipped, steps.learning_rates(index), float(scale), total)
    if not watch.kept.keep(plan, row, info, alarm, [], len(watch.parameter_names), pre_clip):
        return None
    if watch.ranks is not None:  # the row: local gradients before the all-reduce; .grad: reduced
        watch.ranks.note_step(plan.step, StepReducer()(pairs, width), share)
    return plan.step, columns, read_all


def warn_nothing_kept(watch) -> None:
    """A watch that closes with no step kept while its parameters got gradients says why."""
    why = nothing_kept_reason(
        type(watch.model).__name__,
        watch.backwards.seen,
        watch.optimizer_steps,
        watch.columns.changed_since_open(),
    )
    if why:
        warnings.warn(why, RuntimeWarning, stacklevel=4)
