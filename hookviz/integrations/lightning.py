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
(:mod:`hookviz.watching.optimizer_steps`). In a Jupyter kernel the live widget is displayed.

The trainer's loggers get the numbers: every ``log_every_n_steps`` optimizer steps (when Lightning
itself writes its logged metrics) the callback logs the scalars of
:mod:`hookviz.integrations.scalars` (``hookviz/grad_norm/<layer>``, ``hookviz/update_ratio/<layer>``,
``hookviz/lr/...``, NaN/Inf counts, finding counts) with ``pl_module.log_dict(..., on_step=True)``,
so every logger of the trainer (TensorBoardLogger, CSVLogger, WandbLogger, MLFlowLogger, ...)
writes them beside the loss, at Lightning's own step. The findings go, as text with their step and
epoch, to this module's logger (``logging.getLogger("hookviz.integrations.lightning")``) as
warnings, and to the loggers that take text (TensorBoard's ``add_text``, W&B's ``log_text``,
MLflow's ``log_text`` artifact ``hookviz_findings.txt``): at the end of each training epoch, at once
after a step whose gradients hold NaN/Inf, and at the end of fitting, when the watch is closed and
saved. A fit that raises closes the watch too (``on_exception``).

Distributed: every rank watches its own gradients; only global rank zero shows, logs and saves
(its own history).

Needs ``lightning`` (``pip install "hookviz[lightning]"``); the older ``pytorch_lightning``
package has its own ``Callback`` class, which this one is not.
Source: https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html
"""

from __future__ import annotations

import logging

from hookviz.errors import ExtraError
from hookviz.integrations.optimizers import unwrap
from hookviz.integrations.trainer_watch import WatchingCallback, finding_text, log_findings, summary

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
except ImportError as error:
    raise ExtraError(
        'hookviz.integrations.lightning needs the lightning package: pip install "hookviz[lightning]"'
    ) from error

logger = logging.getLogger(__name__)
TEXT_TAG = "hookviz/findings"  # the text findings' tag (TensorBoard) or key (W&B)


class HookvizCallback(WatchingCallback, Callback):
    """Watch a Lightning ``fit``: see the module docstring. Its options (``path``, ``show``,
    ``every``, ``outputs``, ``capacity``, ``stats_every``, ``scaler``, ``log``, ``per_parameter``,
    ``**show_options``) and attributes (``watch``, ``widget``, ``findings``, ``saved``) are those
    of :class:`~hookviz.integrations.trainer_watch.WatchingCallback`; the watch opens when
    fitting starts.

    Raises:
        WatchError: an unknown option (at construction).
    """

    def on_fit_start(self, trainer, pl_module) -> None:
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        optimizers = [unwrap(o)[0] for o in trainer.optimizers]
        self._logged_at = -1  # the trainer's global_step at the last log
        watch = self._trainer_watch.open(pl_module, optimizers, scaler, main=trainer.is_global_zero)
        if watch is not None and trainer.is_global_zero:
            logger.info("hookviz: watching %s; %s", type(pl_module).__name__, "; ".join(watch.notes))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._safely(self._batch_end, trainer, pl_module)

    def _batch_end(self, trainer, pl_module) -> None:
        if self._trainer_watch.nonfinite_pending:
            self._report(trainer, self._trainer_watch.report())
        # Lightning writes the logged metrics after this hook when (batches that stepped) %
        # log_every_n_steps == 0: with one optimizer, when global_step (already counting this
        # batch's step) is a multiple of it.
        every = trainer.log_every_n_steps
        step = trainer.global_step
        if self.log and every and step != self._logged_at and step % every == 0 and trainer.is_global_zero:
            self._logged_at = step
            values = self._trainer_watch.scalars.take(self.watch)
            if values:
                pl_module.log_dict(values, on_step=True, on_epoch=False, rank_zero_only=True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._safely(lambda: self._report(trainer, self._trainer_watch.report()))

    def on_fit_end(self, trainer, pl_module) -> None:
        self._safely(self._finish, trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._safely(self._finish, trainer)

    def _finish(self, trainer) -> None:
        if self.watch is None or self.watch.closed:
            return
        self._report(trainer, self._trainer_watch.finish())
        if trainer.is_global_zero:
            logger.info(summary(self.watch, self.saved))

    def _report(self, trainer, findings) -> None:
        if not trainer.is_global_zero or not findings:
            return
        epoch = trainer.current_epoch
        log_findings(logger, findings, epoch)
        if self.log:
            for each in trainer.loggers:
                log_text(each, findings, epoch, self.findings)


def log_text(target, findings, epoch: int, every_finding) -> None:
    """``findings`` as text to a Lightning logger that takes text: TensorBoard (``add_text`` at
    each finding's step), W&B (a table: epoch, step, kind, module, message), MLflow (the artifact
    ``hookviz_findings.txt``, rewritten with ``every_finding`` so far). Other loggers (CSV) get the
    finding counts only (:mod:`hookviz.integrations.scalars`)."""
    if isinstance(target, TensorBoardLogger):
        for finding in findings:
            target.experiment.add_text(TEXT_TAG, finding_text(finding, epoch), global_step=finding.step)
    elif isinstance(target, WandbLogger):
        rows = [[epoch, f.step, f.kind, f.module, f.message] for f in findings]
        target.log_text(TEXT_TAG, columns=["epoch", "step", "kind", "module", "message"], data=rows)
    elif isinstance(target, MLFlowLogger):
        text = "\n".join(finding_text(f) for f in every_finding)
        target.experiment.log_text(target.run_id, text + "\n", "hookviz_findings.txt")
