"""Which devices a run can use, and turning a user's device argument into one of them."""

from __future__ import annotations

import itertools

import torch

from hookviz.errors import DeviceError


def devices() -> list[str]:
    """Devices hookviz can run on here: ``"cpu"``, then ``"cuda:N"`` for each visible GPU, then ``"mps"``.

    Source: ``torch.cuda.device_count()`` and ``torch.backends.mps.is_available()``.
    """
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def resolve_device(device) -> str:
    """Normalise ``device`` (str or ``torch.device``) to an entry of :func:`devices`.

    ``"cuda"`` means ``"cuda:0"``. Raises DeviceError naming the available devices when the
    device is malformed or not present on this machine.
    """
    available = devices()
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceError(f"{device!r} is not a device; choose one of {available}") from None
    name = f"cuda:{parsed.index or 0}" if parsed.type == "cuda" else parsed.type
    if name not in available:
        raise DeviceError(f"device {name!r} is not available on this machine; choose one of {available}")
    return name


def device_of(model: torch.nn.Module, tensors: list[torch.Tensor]) -> str:
    """Where a model lives: its first parameter's or buffer's device, else the first input's, else cpu."""
    # Generators: only the first is needed, and listing every parameter of a large model is not free.
    for tensor in itertools.chain(model.parameters(), model.buffers(), tensors):
        return resolve_device(tensor.device)
    return "cpu"
