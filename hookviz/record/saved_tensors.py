"""The saved-tensor recorder: what autograd saves for backward, and where the user's hooks put it."""

from __future__ import annotations

import contextlib

import torch

from hookviz.data.stats_batch import device_name
from hookviz.record import torch_compat
from hookviz.record.torch_compat import pytree


def _tensors_in(value) -> list[torch.Tensor]:
    """The tensors in a value, in pytree order (a plain tensor, or a tuple of them, without the
    cost of a pytree walk: this runs once per module call)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


class _Packed:
    """What hookviz's pack hook stores: what the user's pack hook made, and the saved tensor's
    ``(shape, dtype, nbytes, stored_on)`` (stored_on: where the user's hook put it)."""

    __slots__ = ("inner", "described")

    def __init__(self, inner, described: tuple):
        self.inner, self.described = inner, described


def _described(tensor: torch.Tensor, stored_on=None) -> tuple:
    """``(shape, dtype, nbytes, stored_on)`` of a saved tensor; ``stored_on`` defaults to its device."""
    where = tensor.device if stored_on is None else stored_on
    return tuple(tensor.shape), tensor.dtype, tensor.numel() * tensor.element_size(), device_name(where)


class SavedTensorsRecorder:
    """``torch.autograd.graph.saved_tensors_hooks`` that note every tensor saved for backward.

    The hooks chain to the user's own (say ``save_on_cpu``) active when the run starts, so those
    still decide where saved tensors live. Reading ``grad_fn._saved_<name>`` later calls the unpack
    hook, which tells which tensors that attribute holds (:meth:`attribute`).

    With no saved-tensor hooks of the user's, hookviz sets none either (:attr:`needed` is False;
    :meth:`hooks` is a no-op): reading ``grad_fn._saved_<name>`` then hands over the saved tensor
    itself, which describes it as well, and PyTorch keeps its own check of a saved tensor's version
    when backward unpacks it (a tensor changed in place after it was saved makes backward raise),
    a check that PyTorch makes only when no saved-tensor hooks are set. Setting hooks anyway costs a
    Python call per saved tensor in forward and again in backward (docs/perf.md). With the user's hooks,
    PyTorch checks nothing, and neither does hookviz.
    Source: https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.saved_tensors_hooks
    and ``SavedVariable::unpack`` (torch/csrc/autograd/saved_variable.cpp).

    Raises:
        UnsupportedError: the user's hooks are set and torch is too old to hand them over
            (:func:`hookviz.record.torch_compat.saved_tensors_default_hooks`).
    """

    def __init__(self):
        outer = torch_compat.saved_tensors_default_hooks()
        self.outer_pack, self.outer_unpack = outer if outer is not None else (None, None)
        self.needed = outer is not None  # the user's hooks decide where saved tensors live
        self.unpacked: list[_Packed] | None = None  # collects while attribute() reads one

    def pack(self, tensor: torch.Tensor) -> _Packed:
        inner = self.outer_pack(tensor)
        stored = next((t.device for t in _tensors_in(inner)), "elsewhere")
        return _Packed(inner, _described(tensor, stored))

    def unpack(self, packed: _Packed) -> torch.Tensor:
        if self.unpacked is not None:
            self.unpacked.append(packed)
        return self.outer_unpack(packed.inner)

    def hooks(self):
        """The context manager to wrap forward in (a no-op when :attr:`needed` is False)."""
        if not self.needed:
            return contextlib.nullcontext()
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def attribute(self, fn, name: str) -> tuple[list[tuple], list[torch.Tensor], bool | int | float | None]:
        """``(shape, dtype, nbytes, stored_on)`` of each tensor behind ``fn.<name>``, the tensors
        themselves as unpacking hands them over (empty when that count differs), and the Python
        number it holds, if it is one.

        A number is a saved scalar argument (``_saved_alpha``, ``_saved_exponent``) or a wrapped
        Python number: PyTorch saves the ``2`` of ``2 * x`` as a one-element CPU tensor without
        calling pack hooks. Such tensors are described from the tensor itself.
        """
        if self.needed:  # the user's pack hooks ran: what they stored is described by ours
            self.unpacked = []
            try:
                value = getattr(fn, name)
            finally:
                packed, self.unpacked = self.unpacked, None
            found = [p.described for p in packed]
            if found:
                tensors = _tensors_in(value)
                return found, tensors if len(tensors) == len(found) else [], None
        else:
            value = getattr(fn, name)
        if isinstance(value, bool):
            return [], [], value
        if isinstance(value, int):  # PyTorch hands a saved int64 over as uint64: -1 arrives as 2**64 - 1
            return [], [], value - 2**64 if value >= 2**63 else value
        if isinstance(value, float):
            return [], [], value
        values = value if isinstance(value, (tuple, list)) else (value,)
        tensors = [t for t in values if isinstance(t, torch.Tensor)]
        wrapped = (
            isinstance(value, torch.Tensor)
            and value.dim() == 0
            and value.device.type == "cpu"  # .item() on an accelerator would wait for it
            and not value.requires_grad
            and not value.is_complex()
        )
        return [_described(t) for t in tensors], tensors, value.item() if wrapped else None
