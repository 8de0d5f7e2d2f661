"""``HookvizCallback`` for the Hugging Face ``Trainer``: watch the gradients of ``trainer.train()``.

::

    from hookviz.integrations.transformers import HookvizCallback

    callback = HookvizCallback("train.hookviz")
    trainer = transformers.Trainer(model, args, train_dataset=data, callbacks=[callback])
    trainer.train()
    callback.watch.heatmap()

When training starts (``on_train_begin``, after the Trainer has made its optimizer and passed it
through accelerate) the callback opens ``hookviz.watch(model, optimizer=optimizer)``: one step per
optimizer step, with the gradients the optimizer used (summed over ``gradient_accumulation_steps``,
clipped to ``max_grad_norm``, and unscaled under ``fp16=True``: the ``AcceleratedOptimizer`` the
callback gets holds the accelerator's ``GradScaler``, which the watch takes). In a Jupyter kernel
the live widget is displayed. The findings go to this module's logger
(``logging.getLogger("hookviz.integrations.transformers")``) as warnings, on the main process only,
at each of the Trainer's logs (``logging_steps``), at once after a step whose gradients hold
NaN/Inf, and at the end of training, when the watch is closed and saved.

Distributed: every process watches its own gradients; only the main process shows, logs and saves
(its own history). The Trainer calls no callback when training raises: call
``callback.close()`` then, or the watch's hooks stay on the model.

Needs ``transformers`` and ``accelerate`` (``pip install "hookviz[transformers]"``).
Source: https://huggingface.co/docs/transformers/main_classes/callback
"""

from __future__ import annotations

import logging

from hookviz.errors import ExtraError
from hookviz.integrations.trainer_watch import WatchingCallback, log_findings, summary

try:
    from transformers import TrainerCallback
except ImportError as error:
    raise ExtraError(
        "hookviz.integrations.transformers needs the transformers and accelerate packages: "
        'pip install "hookviz[transformers]"'
    ) from error

logger = logging.getLogger(__name__)


class HookvizCallback(WatchingCallback, TrainerCallback):
    """Watch a Hugging Face ``Trainer.train()``: see the module docstring. Its options (``path``,
    ``show``, ``every``, ``outputs``, ``capacity``, ``**show_options``) and attributes (``watch``,
    ``widget``, ``findings``, ``saved``) are those of
    :class:`~hookviz.integrations.trainer_watch.WatchingCallback`; the watch opens when training
    starts."""

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        optimizers = [optimizer] if optimizer is not None else []
        watch = self._trainer_watch.open(model, optimizers, None, display=state.is_world_process_zero)
        if state.is_world_process_zero:
            logger.info("hookviz: watching %s; %s", type(model).__name__, "; ".join(watch.notes))

    def on_step_end(self, args, state, control, **kwargs):
        if self._trainer_watch.nonfinite_pending:
            self._report(state, self._trainer_watch.report())

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._report(state, self._trainer_watch.report())

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is None or self.watch.closed:
            return
        self._report(state, self._trainer_watch.finish(write=state.is_world_process_zero))
        if state.is_world_process_zero:
            logger.info(summary(self.watch, self.saved))

    @staticmethod
    def _report(state, findings) -> None:
        if state.is_world_process_zero:
            log_findings(logger, findings)
