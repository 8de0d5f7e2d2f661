"""``HookvizCallback`` for the Hugging Face ``Trainer``: watch the gradients of ``trainer.train()``.

::

    from hookviz.integrations.transformers import attach

    trainer = transformers.Trainer(model, args, train_dataset=data)
    callback = attach(trainer, path="train.hookviz")
    trainer.train()
    callback.watch.heatmap()

When training starts (``on_train_begin``, after the Trainer has made its optimizer and passed it
through accelerate) the callback opens ``hookviz.watch(model, optimizer=optimizer)``: one step per
optimizer step, with the gradients the optimizer used (summed over ``gradient_accumulation_steps``,
clipped to ``max_grad_norm``, and unscaled under ``fp16=True``: the ``AcceleratedOptimizer`` the
callback gets holds the accelerator's ``GradScaler``, which the watch takes,
:mod:`hookviz.integrations.optimizers`). In a Jupyter kernel the live widget is displayed.

:func:`attach` is the supported way in: it adds the callback and overrides two of the trainer's
methods on that instance, as the Trainer's documentation invites ("Subclass and override this
method to inject custom behavior", on ``Trainer.log``):

- ``trainer.log(logs)`` first merges the watch's scalars (:mod:`hookviz.integrations.scalars`:
  ``hookviz/grad_norm/<layer>``, ``hookviz/update_ratio/<layer>``, ``hookviz/lr/...``, NaN/Inf
  counts, finding counts) into ``logs``. ``Trainer.log`` appends a copy of ``logs`` to
  ``state.log_history`` and then calls every callback's ``on_log``, the ``report_to``
  integrations (TensorBoard, W&B, MLflow, ...) before the user's: numbers added in a callback's
  ``on_log`` would reach neither the history nor those integrations; merged before, they reach
  both, at every ``logging_steps``;
- ``trainer.train()`` closes the watch (its hooks come off the model; the history is saved) when
  training raises: the Trainer calls no callback then (there is no ``on_exception``).

A ``HookvizCallback`` given in ``callbacks=[...]`` without :func:`attach` watches and reports its
findings, and a warning at the start of training says what it misses.

The findings go, as text with their step and epoch, to this module's logger
(``logging.getLogger("hookviz.integrations.transformers")``) as warnings, on the main process only,
at each of the Trainer's logs, at once after a step whose gradients hold NaN/Inf, and at the end
of training, when the watch is closed and saved; their counts per kind go into ``logs`` (the
``report_to`` integrations take numbers: TensorBoard's drops any other value with a warning).

Distributed: every process watches its own gradients; only the main process shows, logs and saves
(its own history).

Needs ``transformers`` and ``accelerate`` (``pip install "hookviz[transformers]"``).
Source: https://huggingface.co/docs/transformers/main_classes/callback,
https://huggingface.co/docs/transformers/main_classes/trainer
"""

from __future__ import annotations

import functools
import logging
import warnings

from hookviz.errors import ExtraError, WatchError
from hookviz.integrations.optimizers import unwrap
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
    """Watch a Hugging Face ``Trainer.train()``: see the module docstring; add it with
    :func:`attach`. Its options (``path``, ``show``, ``every``, ``outputs``, ``capacity``,
    ``stats_every``, ``scaler``, ``log``, ``per_parameter``, ``**show_options``) and attributes
    (``watch``, ``widget``, ``findings``, ``saved``) are those of
    :class:`~hookviz.integrations.trainer_watch.WatchingCallback`; the watch opens when training
    starts.

    Raises:
        WatchError: an unknown option (at construction).
    """

    attached = False  # set by attach(): the trainer's log() merges the scalars, train() closes on error

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._main = state.is_world_process_zero
        optimizer, scaler = unwrap(optimizer) if optimizer is not None else (None, None)
        optimizers = [optimizer] if optimizer is not None else []
        watch = self._trainer_watch.open(model, optimizers, scaler, main=self._main)
        if watch is None or not self._main:
            return
        logger.info("hookviz: watching %s; %s", type(model).__name__, "; ".join(watch.notes))
        if not self.attached:
            warnings.warn(
                "HookvizCallback was given to the Trainer without hookviz.integrations.transformers."
                "attach(trainer): its numbers do not reach state.log_history nor the report_to "
                "integrations, and its hooks stay on the model if training raises; use "
                "`callback = attach(trainer)` (or attach(trainer, callback)) before trainer.train()",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self._trainer_watch.nonfinite_pending:
            self._safely(lambda: self._report(state, self._trainer_watch.report()))

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._safely(lambda: self._report(state, self._trainer_watch.report()))

    def on_train_end(self, args, state, control, **kwargs):
        self._safely(self._finish, state)

    def _finish(self, state) -> None:
        if self.watch is None or self.watch.closed:
            return
        self._report(state, self._trainer_watch.finish())
        if state.is_world_process_zero:
            logger.info(summary(self.watch, self.saved))

    def merge_scalars(self, logs: dict) -> None:
        """Add the watch's new scalars (:mod:`hookviz.integrations.scalars`) to ``logs``, on the
        main process, when ``log`` is on (what the attached ``trainer.log`` calls)."""
        if self.log and getattr(self, "_main", False):
            self._safely(lambda: logs.update(self._trainer_watch.scalars.take(self.watch)))

    @staticmethod
    def _report(state, findings) -> None:
        if state.is_world_process_zero:
            log_findings(logger, findings, state.epoch)


def attach(trainer, callback: HookvizCallback | None = None, **options) -> HookvizCallback:
    """Watch ``trainer.train()`` with ``callback`` (made from ``options`` when None, or the
    :class:`HookvizCallback` already among the trainer's callbacks), its numbers merged into the
    trainer's logs and its hooks removed when training raises (see the module docstring).

    Args:
        trainer: a ``transformers.Trainer``.
        callback: the callback to attach; None: the one the trainer has, else a new one.
        **options: a new callback's options (:class:`HookvizCallback`).

    Returns:
        the attached callback (``callback.watch`` once training started). Attaching the same
        callback twice does nothing more.

    Raises:
        WatchError: both ``callback`` and ``options`` given, or another HookvizCallback is already
            attached to this trainer; an unknown option.
    """
    present = [c for c in trainer.callback_handler.callbacks if isinstance(c, HookvizCallback)]
    if callback is not None and options:
        raise WatchError(
            "attach(trainer, callback, **options): give the options to HookvizCallback(...) or to "
            "attach(trainer, ...), not both"
        )
    if callback is None:
        callback = present[0] if present else HookvizCallback(**options)
    mine = getattr(trainer, "hookviz_callback", None)
    if mine is callback:
        return callback
    if mine is not None:
        raise WatchError(
            "this trainer already has a HookvizCallback attached (trainer.hookviz_callback); one watch "
            "per model: use that one"
        )
    if callback not in present:
        trainer.add_callback(callback)
    log, train = trainer.log, trainer.train

    @functools.wraps(log)
    def log_with_hookviz(logs, *args, **kwargs):
        callback.merge_scalars(logs)
        return log(logs, *args, **kwargs)

    @functools.wraps(train)
    def train_closing_on_error(*args, **kwargs):
        try:
            return train(*args, **kwargs)
        except BaseException:
            callback._safely(callback._finish, trainer.state)
            raise

    trainer.log, trainer.train = log_with_hookviz, train_closing_on_error
    trainer.hookviz_callback = callback
    callback.attached = True
    return callback
