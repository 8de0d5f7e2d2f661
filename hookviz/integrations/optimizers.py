"""The optimizer wrappers of training frameworks, unwrapped to the torch optimizer that steps.

A trainer hands its callbacks a wrapper, not the ``torch.optim.Optimizer``:

- accelerate's ``AcceleratedOptimizer`` (what the Hugging Face ``Trainer`` passes) holds the torch
  optimizer as ``.optimizer`` and, under ``fp16``, the accelerator's ``GradScaler`` as ``.scaler``.
  It is itself a ``torch.optim.Optimizer`` subclass whose own step hooks never run: its ``step()``
  calls the inner optimizer's (or the scaler's ``step``).
  Source: https://github.com/huggingface/accelerate/blob/main/src/accelerate/optimizer.py
- Lightning's ``LightningOptimizer`` (``trainer.optimizers`` holds the torch optimizers, but
  ``self.optimizers()`` in a LightningModule returns these) holds it as ``._optimizer``.
  Source: https://github.com/Lightning-AI/pytorch-lightning/blob/master/src/lightning/pytorch/core/optimizer.py

:func:`unwrap` is the one place that knows them. The watch's step hooks go on the inner optimizer
(``Optimizer.register_step_pre_hook``), whose ``step()`` is the one that reads ``.grad``. This
module imports no framework: it reads the attributes, so ``import hookviz`` stays light, and a plain
``hookviz.watch(model, optimizer=accelerator.prepare(opt))`` is followed too (this module registers
:func:`unwrap` with :mod:`hookviz.watching.optimizer_steps` when hookviz is imported: the watching
layer comes before this one and imports nothing from it).
"""

from __future__ import annotations

import torch

from hookviz.watching import optimizer_steps

# The attribute under which each framework's wrapper holds the torch optimizer: accelerate's
# AcceleratedOptimizer, Lightning's LightningOptimizer.
_INNER = ("optimizer", "_optimizer")


def unwrap(optimizer) -> tuple[object, object | None]:
    """``(the optimizer inside, the GradScaler its wrapper holds or None)``.

    ``optimizer`` as it is when it wraps nothing (a torch optimizer, or anything else: the watch
    refuses what is not a ``torch.optim.Optimizer``). A wrapper of a wrapper is followed to the end.

    Args:
        optimizer: what a trainer or the user passed as ``optimizer=``.
    """
    scaler = None
    for _ in range(8):  # wrappers nest a level or two (Lightning over accelerate); never a cycle
        inner = next(
            (
                found
                for found in (getattr(optimizer, a, None) for a in _INNER)
                if isinstance(found, torch.optim.Optimizer) and found is not optimizer
            ),
            None,
        )
        if inner is None:
            break
        scaler = getattr(optimizer, "scaler", None) if scaler is None else scaler
        optimizer = inner
    return optimizer, scaler


optimizer_steps.unwrap_with(unwrap)
