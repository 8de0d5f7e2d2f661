"""Data-parallel models: DistributedDataParallel (DDP) and FSDP2 (``fully_shard``).

What a plain ``loss.backward()`` leaves in ``.grad`` on such a model is not the rank's own gradient:

- **DDP** multiplies each rank's gradient by ``1 / world_size`` and all-reduces (sums) it from hooks on
  ``AccumulateGrad`` (the reducer, ``torch/csrc/distributed/c10d/reducer.cpp``,
  ``mark_variable_ready_dense``), so ``.grad`` is the mean over ranks.
- **FSDP2** swaps each sharded ``DTensor`` parameter for an all-gathered ``_unsharded_param`` during
  forward, and after backward reduce-scatters its gradient (also a mean) into the sharded
  ``.grad``; ``p.grad.full_tensor()`` is the full mean.

hookviz takes gradients with ``torch.autograd.grad``, which runs neither, so a run holds each rank's
local gradient. This module turns those into what ``.grad`` holds (:func:`reduce_parameter_grads`,
a collective: every rank calls it, as every rank calls ``backward``), names FSDP2's unsharded
parameters after the user's parameters (:func:`forward_parameter_names`), keeps DDP's reducer out of
a recorded forward so it is ready for the next training step (:func:`quiet_reducer`), and tells
FSDP2's own hooks from the user's (:func:`is_framework_hook`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from hookviz.errors import HookvizError
from hookviz.record import torch_compat

DDP = "ddp"
FSDP = "fsdp"


def _ddp_class():
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def _fsdp_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    fsdp_module = torch_compat.fsdp_module_class()
    if fsdp_module is None:  # FSDP2 never imported: no module of this process is sharded
        return []
    return [(n, m) for n, m in model.named_modules() if isinstance(m, fsdp_module)]


def strategy(model: torch.nn.Module) -> str | None:
    """``"ddp"`` for a ``DistributedDataParallel``, ``"fsdp"`` for a model with ``fully_shard``
    modules, None for anything else (a plain model, or one not in a process group)."""
    if not torch.distributed.is_available():
        return None
    if isinstance(model, _ddp_class()):
        return DDP
    if _fsdp_modules(model):
        return FSDP
    return None


def is_framework_hook(hook) -> bool:
    """True for a module hook FSDP2 registered (its all-gather before forward and its pre-backward
    and reduce-scatter set-up after): hookviz looks through those instead of showing them as the
    user's. Recognised by where the function is defined (``torch.distributed.fsdp``)."""
    function = getattr(hook, "__wrapped__", hook)
    function = getattr(function, "func", function)  # functools.partial
    function = getattr(function, "__func__", function)  # bound method
    return getattr(function, "__module__", "").startswith("torch.distributed.fsdp")


@contextlib.contextmanager
def quiet_reducer(model: torch.nn.Module) -> Iterator[None]:
    """Run a DDP forward as ``DistributedDataParallel.no_sync`` does, so the reducer does not wait
    for a backward that hookviz (using ``torch.autograd.grad``) never lets it see; afterwards the
    flags are as they were, so the user's next forward and backward all-reduce as usual.

    ``no_sync`` also sets ``require_forward_param_sync`` (whether the next forward broadcasts
    buffers): it is put back too. Any other model: does nothing.
    """
    if strategy(model) != DDP:
        yield
        return
    backward_sync, forward_sync = model.require_backward_grad_sync, model.require_forward_param_sync
    model.require_backward_grad_sync = False
    try:
        yield
    finally:
        model.require_backward_grad_sync = backward_sync
        model.require_forward_param_sync = forward_sync


def reduces_gradients(model: torch.nn.Module) -> bool:
    """Whether a plain backward through ``model`` would all-reduce now: DDP outside ``no_sync()``,
    or FSDP2 (whose ``set_requires_gradient_sync(False)`` keeps unsharded local gradients)."""
    kind = strategy(model)
    if kind == DDP:
        return bool(model.require_backward_grad_sync)
    if kind == FSDP:
        return all(
            _state(m)._fsdp_param_group is None or _state(m)._fsdp_param_group.reduce_grads
            for _, m in _fsdp_modules(model)
        )
    return False


def _state(module):
    return module._get_fsdp_state()


def fsdp_parameters(model: torch.nn.Module) -> list[tuple[str, object]]:
    """(qualified name, FSDPParam) of every parameter FSDP2 manages in ``model``."""
    names = {id(m): n for n, m in model.named_modules()}
    found = []
    for _, module in _fsdp_modules(model):
        for group in torch_compat.fsdp_param_groups(module):
            for fsdp_param in group.fsdp_params:
                info = fsdp_param._module_info
                prefix = names.get(id(info.module))
                if prefix is not None:
                    found.append((f"{prefix}.{info.param_name}" if prefix else info.param_name, fsdp_param))
    return found


def forward_parameter_names(model: torch.nn.Module) -> dict[int, str]:
    """``id(tensor) -> parameter name`` for the tensors that stand for parameters during forward:
    FSDP2's all-gathered ``_unsharded_param`` of each sharded parameter. Call after forward (they are
    made lazily by the first all-gather). Empty for any other model."""
    if strategy(model) != FSDP:
        return {}
    return {
        id(p._unsharded_param): name for name, p in fsdp_parameters(model) if hasattr(p, "_unsharded_param")
    }


def user_forward(model: torch.nn.Module):
    """The ``forward`` whose signature names the model's inputs: for DDP, the wrapped module's."""
    return model.module.forward if strategy(model) == DDP else model.forward


def parameter_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Other names a user may give a parameter: for DDP, the wrapped module's own names
    (``"0.weight"`` for ``"module.0.weight"``)."""
    if strategy(model) != DDP:
        return {}
    return {name.removeprefix("module."): name for name, _ in model.named_parameters()}


def _process_group(model: torch.nn.Module):
    if strategy(model) == DDP:
        return model.process_group
    meshes = []  # each fully_shard call holds its own DeviceMesh object; equal ones are one mesh
    for _, fsdp_param in fsdp_parameters(model):
        if all(fsdp_param.mesh_info.mesh != mesh for mesh in meshes):
            meshes.append(fsdp_param.mesh_info.mesh)
    if len(meshes) != 1 or meshes[0].ndim != 1:
        raise HookvizError(
            "this FSDP2 model shards over several device meshes or a 2-D (HSDP) mesh; hookviz reduces "
            "gradients over one 1-D mesh only: record it with fully_shard(..., mesh=<1-D mesh>)"
        )
    return meshes[0].get_group()


def reduce_parameter_grads(
    model: torch.nn.Module, grads: dict[str, torch.Tensor | None]
) -> dict[str, torch.Tensor | None]:
    """What ``.grad`` holds after a plain backward through DDP / FSDP2, from each rank's own gradients.

    A collective over the model's process group: every rank must call it, with the same model.

    Args:
        model: a DDP model or an FSDP2 model (see :func:`strategy`).
        grads: ``{parameter name: this rank's gradient}`` (full, unsharded shapes); a missing or
            None entry is a parameter that got no gradient on this rank.

    Returns:
        ``{name: the mean over ranks}`` for every parameter that requires grad, in
        ``model.named_parameters()`` order: each rank's gradient times ``1 / world_size`` (a
        Python float, as the DDP reducer multiplies), summed over ranks with ``all_reduce``; ranks
        without a gradient add zeros (as DDP does with ``find_unused_parameters``). None for a
        parameter that no rank gave a gradient. On 2 ranks this equals ``.grad`` bit for bit
        (multiplying by 1/2 is exact and a sum of two is order-free); on more, within float
        rounding, since the order of the sum depends on the collective's algorithm. Full shapes
        on every rank, for FSDP2 too (``p.grad.full_tensor()``); with an FSDP2 mixed-precision
        policy the sum runs in its ``reduce_dtype`` and the result has the parameter's dtype.

    Raises:
        HookvizError: an FSDP2 model on several meshes or a 2-D mesh.
    """
    group = _process_group(model)
    world = torch.distributed.get_world_size(group)
    if strategy(model) == DDP:
        shapes = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    else:
        shapes = [(n, p) for n, p in fsdp_parameters(model) if p.sharded_param.requires_grad]
    result: dict[str, torch.Tensor | None] = {}
    final: dict[str, torch.dtype] = {}  # FSDP2: the dtype of the sharded .grad
    buckets: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    used = []
    for name, parameter in shapes:
        grad = grads.get(name)
        used.append(grad is not None)
        if strategy(model) == DDP:
            grad = torch.zeros_like(parameter) if grad is None else grad
        else:  # FSDP2 reduces in its mixed-precision policy's reduce_dtype, into the parameter's dtype
            dtype = parameter.reduce_dtype or parameter.param_dtype or parameter.orig_dtype
            grad = (
                torch.zeros(parameter._orig_size, dtype=dtype, device=parameter.device)
                if grad is None
                else grad.to(dtype)
            )
            final[name] = parameter.orig_dtype
        buckets.setdefault((grad.device, grad.dtype), []).append((name, grad))
    device = next(iter(buckets))[0] if buckets else torch.device("cpu")
    counts = torch.tensor(used, dtype=torch.int32, device=device)
    torch.distributed.all_reduce(counts, group=group)
    for members in buckets.values():
        flat = torch.cat([g.detach().reshape(-1) * (1.0 / world) for _, g in members])
        torch.distributed.all_reduce(flat, group=group)
        offset = 0
        for name, grad in members:
            result[name] = (
                flat[offset : offset + grad.numel()]
                .view(grad.shape)
                .to(final.get(name, grad.dtype), copy=True)
            )
            offset += grad.numel()
    ordered = {}
    for (name, _), count in zip(shapes, counts.tolist()):
        ordered[name] = result[name] if count else None
    return ordered


def reduced_run(model: torch.nn.Module, run):
    """``run`` with ``leaf_grads`` as a plain backward through ``model`` leaves ``.grad``.

    For a DDP or FSDP2 model: the rank's own leaf gradients move to ``run.local_leaf_grads``;
    parameters in ``run.leaf_grads`` become the mean over ranks (:func:`reduce_parameter_grads`,
    a collective, so every rank must record its run); forward arguments stay local (nothing
    reduces them). A parameter that got a gradient only on other ranks is added. Inside
    ``no_sync()`` (or FSDP2's ``set_requires_gradient_sync(False)``) nothing is reduced, as in
    plain PyTorch. A DDP communication hook (``register_comm_hook``) is not replayed: the run
    gets a note in ``run.notes``. Any other model: ``run`` unchanged.
    """
    if strategy(model) is None:
        return run
    local = dict(run.leaf_grads)
    run.local_leaf_grads = local
    run.parameter_aliases = {**parameter_aliases(model), **run.parameter_aliases}
    if reduces_gradients(model):
        reduced = reduce_parameter_grads(model, local)
        run.leaf_grads = {**local, **{n: g for n, g in reduced.items() if n in local or g is not None}}
        hooks = [getattr(hook, "__qualname__", repr(hook)) for hook, _ in getattr(model, "_comm_hooks", [])]
        if hooks:
            run.notes.append(
                f"DistributedDataParallel has the communication hook {', '.join(hooks)}: a plain backward "
                "reduces through it (compressed, for example), while leaf_grad holds the plain mean over "
                "ranks; they may differ by what the hook changes"
            )
    return run
