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
import warnings
import weakref
from functools import partial

import torch

from hookviz.advice import advice
from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.errors import WatchError
from hookviz.stats.reduce import norms_in_range, queue_norms
from hookviz.text import number
from hookviz.watching.history import StepInfo
from hookviz.watching.kept_steps import keep, set_update_ratios
from hookviz.watching.reduce import StepReducer

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
    """

    def __init__(self, watch, optimizers: list, scaler, handles: list):
        pairs = [unwrapped(o) for o in optimizers]
        self.optimizers = [o for o, _ in pairs]
        if len({id(o) for o in self.optimizers}) != len(self.optimizers):
            raise WatchError("optimizer= lists one optimizer twice; list each once")
        self.names = _names(self.optimizers)
        self.scaler = scaler if scaler is not None else next((s for _, s in pairs if s is not None), None)
        self._watch = weakref.ref(watch)
        self._stepped: set[int] = set()  # optimizers whose pre-hook ran inside the current scaler.step
        self._pending: dict[int, tuple] = {}  # optimizer -> (step, columns, weights before)
        reference = weakref.ref(self)
        for index, optimizer in enumerate(self.optimizers):
            handles.append(optimizer.register_step_pre_hook(partial(_before_step, reference, index)))
            handles.append(optimizer.register_step_post_hook(partial(_after_step, reference, index)))
        if self.scaler is not None and getattr(self.scaler, "is_enabled", lambda: False)():
            handles.append(_ScalerWrap(self.scaler, reference))

    def columns(self, index: int, column_of: dict[int, int]) -> list[int]:
        """The watched columns of optimizer ``index``'s parameters, in its param groups' order."""
        found = (column_of.get(id(p)) for g in self.optimizers[index].param_groups for p in g["params"])
        return [c for c in found if c is not None]

    def learning_rates(self, index: int) -> list[float]:
        """Each param group's learning rate now (before the step), as floats."""
        return [float(g["lr"]) for g in self.optimizers[index].param_groups if "lr" in g]

    def step_skipped_by_scaler(self, optimizer) -> None:
        """``scaler.step(optimizer)`` returned: if ``optimizer`` is watched and did not step, keep its
        skipped step."""
        inner, _ = unwrapped(optimizer)
        for index, mine in enumerate(self.optimizers):
            if mine is inner and index not in self._stepped:
                watch = self._watch()
                if watch is not None:
                    keep_step(watch, index, skipped=True)
        self._stepped.clear()


def _before_step(reference: weakref.ref, index: int, optimizer, args, kwargs):
    """Step pre-hook: keep the step with the gradients it is about to use; copy the weights.

    ``optimizer.step(closure)`` runs the closure (forward, backward, and, under Lightning, the
    clipping) inside ``step()``, after this hook: then the closure is wrapped, and the step is kept
    when its first call returns, from the ``.grad`` it left. ``args`` holds the optimizer itself first.
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


def _keep_before_step(steps: OptimizerSteps, watch, index: int) -> None:
    kept = keep_step(watch, index, skipped=False)
    if kept is not None:
        step, columns, read_all = kept
        if read_all:  # the update ratios come with the other statistics (an alarm's step too)
            with torch.no_grad():
                before = [watch._parameters[c].detach().clone() for c in columns]
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
        after = [watch._parameters[c].detach() for c in columns]
        torch._foreach_sub_(before, after)  # the update, negated: the same norm
        found = norms_in_range(before + after, math.inf)  # one call, when every norm is plain
        if found is not None:
            values = found.tolist()
        else:
            values = [math.nan if n is None else float(n) for n, _, _ in queue_norms(before + after)]
    count = len(columns)
    ratios = [d / w if w > 0 else math.nan for d, w in zip(values[:count], values[count:])]
    set_update_ratios(watch, step, columns, ratios)


class _ScalerWrap:
    """``scaler.step`` of one GradScaler instance, wrapped to see the steps it skips; :meth:`remove`
    puts the class's method back (as a ``RemovableHandle`` removes a hook)."""

    def __init__(self, scaler, reference: weakref.ref):
        self.scaler = scaler
        original = type(scaler).step

        def step(optimizer, *args, **kwargs):
            steps = reference()
            if steps is not None:
                steps._stepped.clear()
            result = original(scaler, optimizer, *args, **kwargs)
            steps = reference()
            if steps is not None:
                steps.step_skipped_by_scaler(optimizer)
            return result

        step.hookviz_wrap = True
        scaler.step = step

    def remove(self) -> None:
        if getattr(self.scaler.__dict__.get("step"), "hookviz_wrap", False):
            del self.scaler.__dict__["step"]


def step_notes(steps: OptimizerSteps | None, scaler, found: bool = False) -> list[str]:
    """The notes a watch gives with its numbers: what one step is, and whether a loss scale is in
    them; ``found``: the scaler was not given but found in use (:mod:`hookviz.watching.scaler_search`)."""
    scaled = scaler is not None and getattr(scaler, "is_enabled", lambda: False)()
    if steps is None:
        notes = ["a step is one backward that reached the model's parameters; .grad read when it ends"]
        if scaled and found:
            notes.append(
                f"a GradScaler is in use (loss scale {number(float(scaler.get_scale()))} now), though "
                "watch() was not given it: found when a norm first passed exploding_norm (the "
                "scaler this loop updates between steps); the gradients carry its loss scale "
                f"({advice('loss_scale')}) and diagnosis divides it out before calling a norm an "
                "explosion. Pass scaler= to keep the scale from the first step, or optimizer= to "
                "watch the unscaled gradients the optimizer steps on"
            )
        elif scaled:
            notes.append(
                f"the gradients carry GradScaler's loss scale ({advice('loss_scale')}); diagnosis divides "
                "it out before calling a norm an explosion. Pass optimizer= to watch the unscaled "
                "gradients the optimizer steps on"
            )
        return notes
    names = ", ".join(steps.names)
    notes = [
        f"a step is one optimizer.step() of {names}, with the .grad it read: accumulated over "
        "micro-batches, clipped where the loop clips, with each parameter's update-to-weight ratio"
    ]
    if scaled:
        notes.append(
            "GradScaler unscaled the gradients before each step read them; a step the scaler skipped "
            "(Inf/NaN found) is kept and marked skipped (watch.skipped_steps)"
        )
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


def keep_step(watch, index: int, skipped: bool) -> tuple[int, list[int], bool] | None:
    """Optimizer ``index`` steps (or its GradScaler skipped the step): keep the step with the
    ``.grad`` of its watched parameters now. Returns ``(step, its columns, whether every statistic
    was read)`` when it was kept."""
    steps = watch._optimizer_steps
    with watch._lock:
        step = watch.step
        recording = watch.recording
        watch.step += 1
        outputs, watch._outputs_row = watch._outputs_row, None
        local, watch._local_rows = watch._local_rows, {}
    if not recording:
        return None
    columns = steps.columns(index, watch._column_of)
    pairs = [(c, watch._parameters[c].grad) for c in columns]
    pairs = [(c, g) for c, g in pairs if g is not None and g.numel()]
    row = outputs if outputs is not None else torch.full_like(watch._rows[0], math.nan)
    row[: len(watch.parameter_names)] = math.nan  # the parameters: as the optimizer reads them
    read_all = False
    if pairs:
        reducer = StepReducer()
        full = step % watch.stats_every == 0  # else norms only, unless one raises an alarm
        read_all = reducer.add_all(
            [c for c, _ in pairs], [g for _, g in pairs], full, DEFAULT_THRESHOLDS["exploding_norm"]
        )
        found = reducer.finish(len(watch.names))
        row[[c for c, _ in pairs]] = found[[c for c, _ in pairs]]
    if watch._ranks is not None:  # the row: local gradients before the all-reduce; .grad: reduced
        watch._ranks.reduced[step] = StepReducer()(pairs, len(watch.names))
        for column, values in local.items():
            row[column] = torch.tensor(values, dtype=torch.float64)
    scale = watch.scaler.get_scale() if watch.scaler is not None and watch.scaler.is_enabled() else math.nan
    info = StepInfo(steps.names[index], skipped, steps.learning_rates(index), float(scale))
    if not keep(watch, step, row, [], info):
        return None
    return step, [c for c, _ in pairs], read_all


def warn_nothing_kept(watch) -> None:
    """A watch that closes with no step kept while its parameters got gradients says why."""
    changed = [
        name
        for (name, parameter), (grad, version) in zip(
            ((n, p) for n, p in watch.model.named_parameters() if p.requires_grad), watch._grads_at_open
        )
        if parameter.grad is not None and (parameter.grad is not grad or parameter.grad._version != version)
    ]
    why = nothing_kept_reason(
        type(watch.model).__name__, watch._backwards_seen, watch._optimizer_steps, changed
    )
    if why:
        warnings.warn(why, RuntimeWarning, stacklevel=4)
