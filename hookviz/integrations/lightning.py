"""``HookvizCallback`` for PyTorch Lightning: watch the gradients of ``trainer.fit`` step by step.

::

    from hookviz.integrations.lightning import HookvizCallback

    callback = HookvizCallback("fit.hookviz")
    trainer = lightning.Trainer(callbacks=[callback], accumulate_grad_batches=4, gradient_clip_val=1.0)
    trainer.fit(model, data)
    callback.watch.heatmap()

When fitting starts (``on_fit_start``, after Lightning has set up the optimizers) the callback opens
``hookviz.watch(pl_module, optimizer=trainer.optimizers, scaler=trainer.precision_plugin.scaler)``:
one step per optimizer step, with the gradients the optimizer used (summed over
``accumulate_grad_batches``, unscaled under ``precision="16-mixed"``, clipped by
``gradient_clip_val``). Lightning runs the forward, backward and clipping in a closure that the
optimizer calls inside ``step()``; the watch keeps the step when that closure returns
(:mod:`hookviz.watching.optimizer_steps`). In a Jupyter kernel the live widget is displayed. The
findings go to this module's logger (``logging.getLogger("hookviz.integrations.lightning")``) as
warnings, on global rank zero only, at the end of each training epoch, at once after a step whose
gradients hold NaN/Inf, and at the end of fitting, when the watch is closed and saved.

Distributed: every rank watches its own gradients; only global rank zero shows, logs and saves
(its own history).

Needs ``lightning`` (``pip install "hookviz[lightning]"``); the older ``pytorch_lightning``
package has its own ``Callback`` class, which this one is not.
Source: https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html
"""

from __future__ import annotations

import logging

from hookviz.errors import ExtraError
from hookviz.integrations.trainer_watch import WatchingCallback, log_findings, summary

try:
    from lightning.pytorch import Callback
except ImportError as error:
    raise ExtraError(
        'hookviz.integrations.lightning needs the lightning package: pip install "hookviz[lightning]"'
    ) from error

logger = logging.getLogger(__name__)


class HookvizCallback(WatchingCallback, Callback):
    """Watch a Lightning ``fit``: see the module docstring. Its options (``path``, ``show``, ``every``,
    ``outputs``, ``capacity``, ``**show_options``) and attributes (``watch``, ``widget``,
    ``findings``, ``saved``) are those of
    :class:`~hookviz.integrations.trainer_watch.WatchingCallback`; the watch opens when fitting
    starts."""

    def on_fit_start(self, trainer, pl_module) -> None:
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        watch = self._trainer_watch.open(
            pl_module, list(trainer.optimizers), scaler, display=trainer.is_global_zero
        )
        if trainer.is_global_zero:
            logger.info("hookviz: watching %s; %s", type(pl_module).__name__, "; ".join(watch.notes))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._trainer_watch.nonfinite_pending:
            self._report(trainer, self._trainer_watch.report())

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._report(trainer, self._trainer_watch.report())

    def on_fit_end(self, trainer, pl_module) -> None:
        self._finish(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._finish(trainer)

    def _finish(self, trainer) -> None:
        if self.watch is None or self.watch.closed:
            return
        self._report(trainer, self._trainer_watch.finish(write=trainer.is_global_zero))
        if trainer.is_global_zero:
            logger.info(summary(self.watch, self.saved))

    @staticmethod
    def _report(trainer, findings) -> None:
        if trainer.is_global_zero:
            log_findings(logger, findings)
