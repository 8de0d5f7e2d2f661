"""The private PyTorch APIs hookviz needs that differ between the torch releases it supports.

One function per API. Each picks the call by asking torch whether it has it (the release that added it
is named in the docstring), so a build from source between releases gets what it actually has, and
where an older torch has no equivalent it refuses with :class:`~hookviz.errors.UnsupportedError`
naming the torch release needed. ``.ci/compat`` runs the test suite on the oldest and the newest
torch that hookviz supports.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch
import torch.utils._pytree

from hookviz.errors import UnsupportedError

pytree = torch.utils._pytree
"""PyTorch's pytree (``tree_leaves``, ``tree_map``, ...), private: the torch releases hookviz
supports have no public one. The modules that walk nested inputs and outputs use it from here."""

PackHook = Callable[[torch.Tensor], Any]
UnpackHook = Callable[[Any], torch.Tensor]

SAVED_TENSORS_HOOKS_READABLE_SINCE = "2.8"
"""The first torch release with ``torch._C._autograd._top_saved_tensors_default_hooks``."""
SAVED_TENSORS_HOOKS_READABLE = hasattr(torch._C._autograd, "_top_saved_tensors_default_hooks")
"""Whether this torch hands over the saved-tensor hooks set (:func:`saved_tensors_default_hooks`)."""


def _identity(value):
    return value


def saved_tensors_hooks_set() -> bool:
    """Whether ``torch.autograd.graph.saved_tensors_hooks`` (or ``save_on_cpu``) are set on this thread.

    torch >= 2.8 says so directly (``_top_saved_tensors_default_hooks``, below). Older torch keeps the
    stack of hooks in C++ with no reader (``at::SavedTensorDefaultHooks`` in
    aten/src/ATen/SavedTensorHooks.cpp), so this saves one zero-dimensional tensor for backward
    (``sin`` saves its input) and tries to set hooks on that saved tensor: ``SavedVariable::register_hooks``
    (torch/csrc/autograd/saved_variable.cpp) raises when the default hooks already packed it, and
    succeeds when none were set. The user's pack hook, if any, so sees one extra 0-dim CPU float32
    tensor; its unpack hook is not called. The probe's graph is dropped at once.
    Source: https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.saved_tensors_hooks
    """
    if SAVED_TENSORS_HOOKS_READABLE:
        return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None
    with torch.enable_grad(), torch._C.DisableTorchFunction():
        out = torch.zeros((), requires_grad=True).sin()
        if out.grad_fn is None:  # inference mode: nothing is saved, so no hook could apply
            return False
        try:
            out.grad_fn._raw_saved_self.register_hooks(_identity, _identity)
        except RuntimeError:
            return True
    return False


def saved_tensors_default_hooks() -> tuple[PackHook, UnpackHook] | None:
    """The ``(pack_hook, unpack_hook)`` of the innermost ``saved_tensors_hooks`` set on this thread, or None.

    torch >= 2.8: ``torch._C._autograd._top_saved_tensors_default_hooks(ignore_is_tracing=False)``
    (torch/csrc/autograd/init.cpp, reading ``at::SavedTensorDefaultHooks::get_hooks``).
    Older torch cannot hand the hooks over (only push and pop them), so there this returns None when
    none are set (:func:`saved_tensors_hooks_set`) and otherwise raises.

    Raises:
        UnsupportedError: torch older than 2.8 and saved-tensor hooks are set.
    """
    if SAVED_TENSORS_HOOKS_READABLE:
        return torch._C._autograd._top_saved_tensors_default_hooks(False)
    if not saved_tensors_hooks_set():
        return None
    raise UnsupportedError(
        "a run inside torch.autograd.graph.saved_tensors_hooks (or save_on_cpu) needs torch >= "
        f"{SAVED_TENSORS_HOOKS_READABLE_SINCE}: torch {torch.__version__} cannot tell hookviz which "
        "saved-tensor hooks are set, so it could not keep them deciding where saved tensors live; "
        f"upgrade torch to {SAVED_TENSORS_HOOKS_READABLE_SINCE} or newer, or call run() outside the "
        "saved_tensors_hooks context"
    )


def forward_output_counts(nodes: Collection) -> dict[str, int]:
    """Node id -> how many outputs the forward op behind each op Node had: the length of the
    ``grad_outputs`` its hooks see.

    Args:
        nodes: the walked graph's nodes (:class:`hookviz.record.graph.WalkedNode`: ``id``, ``fn``,
            ``kind``, ``inputs``); only ``kind == "op"`` nodes are counted.

    torch >= 2.5: ``len(fn._input_metadata)``, one entry per forward output
    (``THPCppFunction_input_metadata`` in torch/csrc/autograd/python_cpp_function.cpp). torch 2.4
    has no reader of a Node's input metadata; there the outputs that reach the graph stand in:
    1 + the highest ``output_nr`` an edge of the walk leads from (at least 1, for the root). An
    output that nothing downstream used (the indices of ``max(dim)``, an unused piece of ``unbind``)
    is then not counted, so its ``grad_outputs`` slot is not offered for editing on torch 2.4.
    """
    ops = [node for node in nodes if node.kind == "op"]
    if not ops or hasattr(ops[0].fn, "_input_metadata"):
        return {node.id: len(node.fn._input_metadata) for node in ops}
    counts = dict.fromkeys((node.id for node in ops), 1)
    for node in nodes:
        for _, producer, output_nr in node.inputs:
            if producer in counts:
                counts[producer] = max(counts[producer], output_nr + 1)
    return counts


def compiled_modules_run_eagerly(compiled: list[torch.nn.Module]) -> contextlib.AbstractContextManager:
    """A context manager inside which the ``torch.compile``d modules in ``compiled`` run eagerly, so
    hooks and function modes see each of their ops.

    Args:
        compiled: ``OptimizedModule`` objects (``torch.compile(module)``; each has ``_orig_mod``).

    torch >= 2.6: ``torch.compiler.set_stance("force_eager")`` (torch/compiler/__init__.py), which
    holds for every compiled region. torch 2.4 and 2.5 have no stance; there each module's
    ``forward``, an instance attribute that ``OptimizedModule._initialize`` sets to the dynamo-wrapped
    call (torch/_dynamo/eval_frame.py), points at its ``_orig_mod.__call__`` while inside, and the
    same object is put back on exit, also when the body raises. A ``torch.compile``d function (not a
    module) called inside the model still runs compiled there.
    Source: https://pytorch.org/docs/stable/generated/torch.compiler.set_stance.html
    """
    if not compiled:
        return contextlib.nullcontext()
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("force_eager")
    return _original_forwards(compiled)


@contextlib.contextmanager
def _original_forwards(compiled: list[torch.nn.Module]) -> Iterator[None]:
    swapped = []
    try:
        for module in compiled:
            swapped.append((module, module.__dict__.get("forward")))
            module.__dict__["forward"] = module._orig_mod.__call__
        yield
    finally:
        for module, forward in reversed(swapped):
            if forward is None:
                del module.__dict__["forward"]
            else:
                module.__dict__["forward"] = forward


_FSDP2_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def fsdp2() -> types.ModuleType:
    """The module that holds FSDP2 (``fully_shard``, ``FSDPModule``, ``MixedPrecisionPolicy``), imported.

    torch >= 2.6: ``torch.distributed.fsdp``. torch 2.4 and 2.5: ``torch.distributed._composable.fsdp``,
    where FSDP2 started (torch 2.6 moved it and kept that name as an alias).
    Source: https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html

    Raises:
        ImportError: a torch built without distributed support.
    """
    import torch.distributed.fsdp as public

    if hasattr(public, "fully_shard"):
        return public
    import torch.distributed._composable.fsdp as early

    return early


def fsdp_module_class() -> type | None:
    """FSDP2's ``FSDPModule`` (the class every ``fully_shard``ed module gets), or None when this
    process has not imported FSDP2, so that no module can be sharded: importing it here would cost
    seconds (it pulls in DTensor) on every plain model. See :func:`fsdp2` for where it lives."""
    if not any(name in sys.modules for name in _FSDP2_MODULES):
        return None
    try:
        return fsdp2().FSDPModule
    except ImportError:  # a torch without FSDP2
        return None


def fsdp_param_groups(module: torch.nn.Module) -> list:
    """The ``FSDPParamGroup`` objects of one ``fully_shard``ed module (one per ``fully_shard`` call
    that named it; an empty list when it holds no parameters of its own).

    Newer torch keeps a list, ``FSDPState._fsdp_param_groups``, and keeps the single
    ``_fsdp_param_group`` as a property that refuses several groups; torch 2.4 has only that single
    attribute (``FSDPState`` in torch/distributed/_composable/fsdp/_fsdp_state.py, later
    torch/distributed/fsdp/_fully_shard/_fsdp_state.py).
    """
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    return [] if state._fsdp_param_group is None else [state._fsdp_param_group]


def _batched_version_setter() -> bool:
    probe = torch.zeros(())
    try:
        torch._C._autograd._unsafe_set_version_counter((probe,), (0,))
    except TypeError:
        return False
    return True


_SET_VERSIONS_BATCHED = _batched_version_setter()


def set_version_counters(tensors: list[torch.Tensor], versions: list[int]) -> None:
    """Set each tensor's version counter (``tensor._version``) to ``versions[i]``.

    ``torch._C._autograd._unsafe_set_version_counter`` (torch/csrc/autograd/init.cpp) takes two
    sequences in newer torch and one tensor and one int per call in torch 2.4; which form this torch
    takes is found once, at import, on a 0-dim probe tensor.
    """
    if _SET_VERSIONS_BATCHED:
        torch._C._autograd._unsafe_set_version_counter(tuple(tensors), tuple(versions))
        return
    for tensor, version in zip(tensors, versions, strict=True):
        torch._C._autograd._unsafe_set_version_counter(tensor, version)


# ---------------------------------------------------------------------------- autograd's engine
# The private autograd APIs hookviz calls, named here once: every torch release it supports has
# them under these names (torch/csrc/autograd/python_engine.cpp, init.cpp, python_cpp_function.h).


graph_task_id: Callable[[], int] = torch._C._current_graph_task_id
"""``graph_task_id()``: the id of the graph task (one backward) running on this thread, -1 outside
a backward (``torch._C._current_graph_task_id``, bound as it is: the watch calls it in every hook)."""


def queue_end_of_backward(callback: Callable[[], None]) -> None:
    """Run ``callback`` once the running backward has finished (``Variable._execution_engine.
    queue_callback``, as DDP queues its own); call it from inside a backward."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


next_sequence_nr: Callable[[], int] = torch._C._autograd._get_sequence_nr
"""``next_sequence_nr()``: the sequence number the next autograd Node made on this thread gets
(``torch._C._autograd._get_sequence_nr``, bound as it is: the recorder calls it twice per module
call)."""


def sequence_nr(node: Any) -> int:
    """The sequence number of an autograd Node: the order Nodes were made on their thread
    (``Node._sequence_nr()``)."""
    return node._sequence_nr()


torch_function_disabled: Callable[[], contextlib.AbstractContextManager] = torch._C.DisableTorchFunction
"""``with torch_function_disabled():`` no ``__torch_function__`` (mode or subclass) is called
(``torch._C.DisableTorchFunction``, bound as it is: the recorder enters it three times per module
call): hookviz's own tensor reads inside a function mode."""


def operator_schemas(name: str) -> list:
    """The schemas of ATen operator ``aten::<name>`` (``torch._C._jit_get_schemas_for_operator``);
    raises RuntimeError for an unknown operator, as that does."""
    return torch._C._jit_get_schemas_for_operator(f"aten::{name}")
