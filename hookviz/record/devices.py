"""Which devices a run can use, turning a user's device argument into one of them, and the random
state of the devices a re-run uses."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator

import torch

from hookviz.errors import DeviceError


def devices() -> list[str]:
    """Devices hookviz can run on here: ``"cpu"``, then ``"cuda:N"`` for each visible GPU, then ``"mps"``.

    Source: ``torch.cuda.device_count()`` and ``torch.backends.mps.is_available()``.

    Raises:
        Nothing: it takes no argument, and a GPU that PyTorch cannot use is left out, not an error.
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


# The random state of the CPU and of each accelerator a run uses: (CPU state, {device: state}).
RandomState = tuple[torch.Tensor, dict[torch.device, torch.Tensor]]


def accelerators(tensors: Iterable[torch.Tensor], also: Iterable[str] = ()) -> list[torch.device]:
    """The devices other than the CPU that ``tensors`` live on, and those named in ``also``, each
    once, with its index (``cuda`` is the current CUDA device); meta tensors draw no random
    numbers and are left out."""
    found: dict[torch.device, None] = {}
    for device in itertools.chain((t.device for t in tensors), map(torch.device, also)):
        if device.type not in ("cpu", "meta"):
            found.setdefault(_indexed(device))
    return list(found)


def _indexed(device: torch.device) -> torch.device:
    if device.index is not None:
        return device
    module = getattr(torch, device.type)
    index = module.current_device() if hasattr(module, "current_device") else 0
    return torch.device(device.type, index)


def random_state(devices: list[torch.device]) -> RandomState:
    """The random state of the CPU and of each of ``devices`` (from :func:`accelerators`) now.

    Source: ``torch.get_rng_state``, ``torch.cuda.get_rng_state`` (and ``torch.mps`` / ``torch.xpu``'s).
    """
    return torch.get_rng_state(), {d: getattr(torch, d.type).get_rng_state(d) for d in devices}


@contextlib.contextmanager
def forked_random_state(devices: list[torch.device], state: RandomState | None = None) -> Iterator[None]:
    """For the block, the random state of the CPU and of each of ``devices`` is saved, set to
    ``state`` when given, and restored afterwards, so a re-run draws what the run drew and the
    user's random numbers do not move. Source: ``torch.random.fork_rng``."""
    by_type: dict[str, list[int]] = {}
    for device in devices:
        by_type.setdefault(device.type, []).append(device.index or 0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        for kind, indices in by_type.items():
            stack.enter_context(torch.random.fork_rng(devices=indices, device_type=kind))
        if state is not None:
            cpu, others = state
            torch.set_rng_state(cpu)
            for device, device_state in others.items():
                getattr(torch, device.type).set_rng_state(device_state, device)
        yield
