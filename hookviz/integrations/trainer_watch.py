"""What both trainer callbacks do with a watch, whatever the framework: open it on the trainer's own
optimizers, show it live in a notebook, report its findings, log its numbers, close it and save it.

A step is one ``optimizer.step()`` of the trainer's optimizers (``hookviz.watch(model,
optimizer=...)``, :mod:`hookviz.watching.optimizer_steps`), so the gradients of a step are those
the optimizer used: summed over the micro-batches of gradient accumulation, unscaled by the
trainer's ``GradScaler``, clipped where the trainer clips.

Findings are reported at the framework's own reporting points (the callbacks call :meth:`TrainerWatch.report`
at the end of an epoch, at a log, at the end of training): the findings of the last kept step, each
kind of problem at each module once. A step whose gradients hold NaN/Inf is noted by a step
listener (one comparison per step) and reported at the next step boundary: the first such step is
where the NaN came from.

hookviz never stops training: a watch that cannot open (a DeepSpeed optimizer, which is no
``torch.optim.Optimizer``; a model another watch already watches) is a warning and a callback that
watches nothing, and an error of hookviz's own while training is a warning once, after which the
callback stops watching. A save path that names no file raises when training starts, before any step.
"""

from __future__ import annotations

import difflib
import logging
import sys
import warnings
from pathlib import Path

import torch

from hookviz.analysis.findings import Finding
from hookviz.errors import PathError, WatchError
from hookviz.files.paths import target
from hookviz.integrations.scalars import Scalars
from hookviz.stats.reduce import COLUMN
from hookviz.watching.autosave import SAVE_EVERY_SECONDS
from hookviz.watching.watch import STATS_EVERY, Watch, watch

_NONFINITE = COLUMN["nonfinite"]  # the column of a step's row that counts NaN/Inf elements
# What hookviz.show(watch, ...) takes: the live view's pace and the widget's options.
SHOW_OPTIONS = ("every_seconds", "every_steps", "visible_budget", "vanishing_threshold")


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel): there a widget
    can be displayed. IPython is only looked up, never imported."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def check_show_options(owner: str, options: dict) -> dict:
    """``options`` when each is one ``hookviz.show`` takes for a watch (:data:`SHOW_OPTIONS`).

    Raises:
        WatchError: an unknown option (a misspelt one is named with the option it is close to).
    """
    for name in options:
        if name not in SHOW_OPTIONS:
            close = difflib.get_close_matches(name, SHOW_OPTIONS + CALLBACK_OPTIONS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise WatchError(
                f"{owner} got an unknown option {name!r}{hint} Its options: "
                f"{', '.join(CALLBACK_OPTIONS)}, and for the live widget {', '.join(SHOW_OPTIONS)}"
            )
    return dict(options)


class TrainerWatch:
    """The watch of one training run of a framework's trainer, and what is done with it.

    Args:
        path: where the watch is written as it trains (``hookviz.watch(..., path=)``: ``.hookviz``
            is appended when the name has another suffix), on the main process; or None.
        save_every_seconds: at most one periodic write every this many seconds.
        show: display the live widget (``hookviz.show(watch)``) when training starts; None: when
            running in a Jupyter kernel.
        every, outputs, capacity, stats_every, scaler: passed to :func:`hookviz.watch` (``scaler``
            None: the trainer's own).
        per_parameter: log one scalar per parameter instead of per layer
            (:mod:`~hookviz.integrations.scalars`).
        show_options: passed to ``hookviz.show`` (``every_seconds``, ``every_steps``, ...).

    Attributes:
        watch: the :class:`hookviz.Watch` of the current (or last) training run; None before, or
            when it could not open.
        widget: the live :class:`hookviz.Widget` showing it, or None.
        findings: the findings reported so far, in the order reported.
        saved: the path the watch was written to when training ended, or None.
        scalars: what the callback logs to the trainer's loggers
            (:class:`~hookviz.integrations.scalars.Scalars`).
    """

    def __init__(
        self,
        path,
        *,
        save_every_seconds: float,
        show: bool | None,
        every: int,
        outputs: bool,
        capacity: int,
        stats_every: int,
        scaler,
        per_parameter: bool,
        show_options: dict,
    ):
        self.path = path
        self.save_every_seconds = save_every_seconds
        self.show = show
        self.every = every
        self.outputs = outputs
        self.capacity = capacity
        self.stats_every = stats_every
        self.scaler = scaler
        self.per_parameter = per_parameter
        self.show_options = show_options
        self.watch: Watch | None = None
        self.widget = None
        self.findings: list[Finding] = []
        self.saved: Path | None = None
        self.scalars = Scalars(per_parameter)
        self._reported: set[tuple[str, str]] = set()
        self._nonfinite_step: int | None = None  # the first step that held NaN/Inf, until reported
        self._nonfinite_seen = False

    def open(self, model: torch.nn.Module, optimizers: list, scaler, *, main: bool) -> Watch | None:
        """Open the watch on ``model`` with the trainer's ``optimizers`` (none: one step per
        backward) and ``scaler`` (a ``torch.amp.GradScaler`` or None; the ``scaler`` option wins);
        on the ``main`` process, write it to the path as it trains, and display the widget when the
        ``show`` option allows.

        Returns:
            the watch, or None when it could not open: then a ``RuntimeWarning`` says why, and
            training goes on unwatched.

        Raises:
            PathError: the save path names no file that can be written (checked now, not after
                training).
        """
        if self.path is not None:
            target(self.path, ".hookviz", "fit.hookviz")
        self.close()  # a watch left open by a run that raised
        self.watch, self.widget = None, None
        self.findings, self._reported, self.saved = [], set(), None
        self._nonfinite_step, self._nonfinite_seen = None, False
        self.scalars = Scalars(self.per_parameter)
        try:
            self.watch = watch(
                model,
                self.every,
                outputs=self.outputs,
                capacity=self.capacity,
                optimizer=optimizers or None,
                scaler=self.scaler if self.scaler is not None else scaler,
                stats_every=self.stats_every,
                path=self.path if main else None,
                save_every_seconds=self.save_every_seconds,
            )
        except PathError:
            raise
        except Exception as error:  # never stop training: say why nothing is watched
            warnings.warn(
                f"hookviz is not watching {type(model).__name__} in this run: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        self.watch.add_step_listener(self._on_step)
        if main and (self.show if self.show is not None else in_notebook()):
            from IPython.display import display as display_widget

            from hookviz.widget.show import show

            self.widget = show(self.watch, **self.show_options)
            display_widget(self.widget)
        return self.watch

    def _on_step(self, step: int | None, row: torch.Tensor | None) -> None:
        """The watch's step listener (runs on the training thread): note the NaN/Inf steps."""
        if step is None:
            return
        nonfinite = bool(row[:, _NONFINITE].gt(0).any())
        self.scalars.note_step(nonfinite)
        if nonfinite and not self._nonfinite_seen:
            self._nonfinite_seen = True
            self._nonfinite_step = step

    @property
    def nonfinite_pending(self) -> bool:
        """Whether a step holding NaN/Inf was kept and not reported yet (a cheap check per step)."""
        return self._nonfinite_step is not None

    def report(self) -> list[Finding]:
        """The findings not reported before (by kind and module): those of the first NaN/Inf step,
        then those of the last kept step. Empty before the first kept step."""
        kept = self.watch.steps if self.watch is not None else []
        if not kept:
            return []
        steps = [s for s in dict.fromkeys((self._nonfinite_step, kept[-1])) if s in kept]
        self._nonfinite_step = None
        new = []
        for step in steps:
            for finding in self.watch.diagnose(step):
                key = (finding.kind, finding.module)
                if key not in self._reported:
                    self._reported.add(key)
                    new.append(finding)
        self.findings += new
        return new

    def close(self) -> None:
        """Close the watch (its hooks come off the model and the optimizers; its history stays)."""
        if self.watch is not None and not self.watch.closed:
            self.watch.close()

    def finish(self) -> list[Finding]:
        """Training ended: report the last findings, close the watch (its last write, to
        :attr:`saved`). Returns the findings reported now."""
        if self.watch is None:
            return []
        found = self.report()
        self.close()
        autosave = self.watch.autosave
        if autosave is not None and autosave.writes and autosave.error is None:
            self.saved = autosave.path
        return found

    def failed(self, error: Exception) -> None:
        """hookviz failed while training (its own error, never the model's): warn once, close the
        watch and watch no more, so that training goes on."""
        warnings.warn(
            f"hookviz stopped watching after an error of its own ({error!r}); training goes on "
            "unwatched. Please report it with the traceback of this warning's error",
            RuntimeWarning,
            stacklevel=3,
        )
        try:
            self.close()
        finally:
            self.watch = None


def finding_text(finding: Finding, epoch: int | float | None = None) -> str:
    """One line for a finding in a log: ``hookviz: epoch 2, step 14: <message>`` (its step and,
    when known, the trainer's epoch, fractional under the Hugging Face ``Trainer``, then the
    message without its own ``step N:``)."""
    message = finding.message
    own = f"step {finding.step}: "
    if message.startswith(own):
        message = message[len(own) :]
    where = f"step {finding.step}" if epoch is None else f"epoch {epoch:g}, step {finding.step}"
    return f"hookviz: {where}: {message}"


def log_findings(logger: logging.Logger, findings: list[Finding], epoch: int | float | None = None) -> None:
    """Each finding as one warning of ``logger`` (:func:`finding_text`)."""
    for finding in findings:
        logger.warning(finding_text(finding, epoch))


def summary(watch: Watch, saved: Path | None) -> str:
    """One line for the end of training: steps kept, what a step is, where the watch was saved."""
    where = f"; saved to {saved}" if saved is not None else ""
    return f"hookviz: watched {watch.step} steps, kept {len(watch.steps)} ({watch.notes[0]}){where}"


# The callbacks' own options (WatchingCallback's arguments), named in the message for an unknown one.
CALLBACK_OPTIONS = (
    "path",
    "save_every_seconds",
    "show",
    "every",
    "outputs",
    "capacity",
    "stats_every",
    "scaler",
    "log",
    "per_parameter",
)


class WatchingCallback:
    """What the frameworks' ``HookvizCallback`` classes share: their options, the
    :class:`TrainerWatch` they drive from the framework's events, and what came of it.

    Args:
        path: write the watch here as it trains and when training ends or raises (``.hookviz``
            is appended when the name has another suffix; :mod:`hookviz.watching.autosave`); None
            writes nothing. Checked when training starts.
        save_every_seconds: at most one periodic write every this many seconds (and at once
            after a step with NaN/Inf or an exploding norm).
        show: display the live widget; None (default): when running in a Jupyter kernel.
        every: keep every ``every``-th optimizer step (:func:`hookviz.watch`).
        outputs: also watch the gradient w.r.t. each module's output (:func:`hookviz.watch`).
        capacity: steps kept before thinning (:func:`hookviz.watch`).
        stats_every: every statistic (and the update ratios) every ``stats_every``-th step, norms on
            the others (:func:`hookviz.watch`).
        scaler: the ``torch.amp.GradScaler`` whose skipped steps are kept; None (default): the
            trainer's own (Lightning's precision plugin's, accelerate's under ``fp16``).
        log: log the watch's numbers and findings to the trainer's own loggers
            (:mod:`hookviz.integrations.scalars`).
        per_parameter: log one scalar per parameter instead of one per layer.
        **show_options: passed to ``hookviz.show`` (``every_seconds``, ``every_steps``,
            ``visible_budget``, ``vanishing_threshold``).

    Raises:
        WatchError: an option none of the above names (a typo is never taken as a show option).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        save_every_seconds: float = SAVE_EVERY_SECONDS,
        show: bool | None = None,
        every: int = 1,
        outputs: bool = False,
        capacity: int = 1024,
        stats_every: int = STATS_EVERY,
        scaler=None,
        log: bool = True,
        per_parameter: bool = False,
        **show_options,
    ):
        self.log = log
        self._trainer_watch = TrainerWatch(
            path,
            save_every_seconds=save_every_seconds,
            show=show,
            every=every,
            outputs=outputs,
            capacity=capacity,
            stats_every=stats_every,
            scaler=scaler,
            per_parameter=per_parameter,
            show_options=check_show_options(type(self).__name__, show_options),
        )

    @property
    def watch(self) -> Watch | None:
        """The :class:`hookviz.Watch` of the current (or last) training run; None before the first,
        or when it could not open (a warning said why)."""
        return self._trainer_watch.watch

    @property
    def widget(self):
        """The live :class:`hookviz.Widget` showing the watch, or None."""
        return self._trainer_watch.widget

    @property
    def findings(self) -> list[Finding]:
        """The findings reported during the last training run, in the order reported."""
        return list(self._trainer_watch.findings)

    @property
    def saved(self) -> Path | None:
        """The path the last training run's watch was written to, once it ended; else None."""
        return self._trainer_watch.saved

    def close(self) -> None:
        """Close the watch now (its history stays); the end of training does it otherwise."""
        self._trainer_watch.close()

    def _safely(self, action, *args) -> None:
        """Run one of the callback's actions; an error of hookviz's own stops the watching, not the
        training (:meth:`TrainerWatch.failed`)."""
        if self._trainer_watch.watch is None:
            return
        try:
            action(*args)
        except PathError:
            raise
        except Exception as error:
            self._trainer_watch.failed(error)
