"""What both trainer callbacks do with a watch, whatever the framework: open it on the trainer's own
optimizers, show it live in a notebook, report its findings, close it and save it.

A step is one ``optimizer.step()`` of the trainer's optimizers (``hookviz.watch(model,
optimizer=...)``, :mod:`hookviz.watching.optimizer_steps`), so the gradients of a step are those
the optimizer used: summed over the micro-batches of gradient accumulation, unscaled by the
trainer's ``GradScaler``, clipped where the trainer clips.

Findings are reported at the framework's own reporting points (the callbacks call :meth:`TrainerWatch.report`
at the end of an epoch, at a log, at the end of training): the findings of the last kept step, each
kind of problem at each module once. A step whose gradients hold NaN/Inf is noted by a step
listener (one comparison per step) and reported at the next step boundary: the first such step is
where the NaN came from.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

from hookviz.analysis.findings import Finding
from hookviz.files.paths import target
from hookviz.files.saving import save
from hookviz.stats.reduce import COLUMN
from hookviz.watching.watch import Watch, watch

_NONFINITE = COLUMN["nonfinite"]  # the column of a step's row that counts NaN/Inf elements


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel): there a widget
    can be displayed. IPython is only looked up, never imported."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class TrainerWatch:
    """The watch of one training run of a framework's trainer, and what is done with it.

    Args:
        path: where to save the watch when training ends (``.hookviz`` is appended when the name
            has another suffix), or None.
        show: display the live widget (``hookviz.show(watch)``) when training starts; None: when
            running in a Jupyter kernel.
        every, outputs, capacity: passed to :func:`hookviz.watch`.
        show_options: passed to ``hookviz.show`` (``every_seconds``, ``every_steps``, ...).

    Attributes:
        watch: the :class:`hookviz.Watch` of the current (or last) training run; None before.
        widget: the live :class:`hookviz.Widget` showing it, or None.
        findings: the findings reported so far, in the order reported.
        saved: the path written at the end of training, or None.
    """

    def __init__(
        self, path, *, show: bool | None, every: int, outputs: bool, capacity: int, show_options: dict
    ):
        self.path = path
        self.show = show
        self.every = every
        self.outputs = outputs
        self.capacity = capacity
        self.show_options = show_options
        self.watch: Watch | None = None
        self.widget = None
        self.findings: list[Finding] = []
        self.saved: Path | None = None
        self._reported: set[tuple[str, str]] = set()
        self._nonfinite_step: int | None = None  # the first step that held NaN/Inf, until reported
        self._nonfinite_seen = False

    def open(self, model: torch.nn.Module, optimizers: list, scaler, *, display: bool) -> Watch:
        """Open the watch on ``model`` with the trainer's ``optimizers`` (none: one step per
        backward) and ``scaler`` (a ``torch.amp.GradScaler`` or None); display the widget when
        ``display`` and the ``show`` option allow.

        Raises:
            PathError: the save path names no file that can be written (checked now, not after
                training).
            WatchError: as :func:`hookviz.watch`.
        """
        if self.path is not None:
            target(self.path, ".hookviz", "fit.hookviz")
        self.close()  # a watch left open by a run that raised
        self.findings, self._reported, self.saved = [], set(), None
        self._nonfinite_step, self._nonfinite_seen = None, False
        self.watch = watch(
            model,
            self.every,
            outputs=self.outputs,
            capacity=self.capacity,
            optimizer=optimizers or None,
            scaler=scaler,
        )
        self.watch.add_step_listener(self._on_step)
        self.widget = None
        if display and (self.show if self.show is not None else in_notebook()):
            from IPython.display import display as display_widget

            from hookviz.widget.show import show

            self.widget = show(self.watch, **self.show_options)
            display_widget(self.widget)
        return self.watch

    def _on_step(self, step: int | None, row: torch.Tensor | None) -> None:
        """The watch's step listener (runs on the training thread): note the first NaN/Inf step."""
        if step is not None and not self._nonfinite_seen and bool(row[:, _NONFINITE].gt(0).any()):
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

    def finish(self, *, write: bool) -> list[Finding]:
        """Training ended: report the last findings, close the watch and, when ``write`` and a path
        was given, save it (to :attr:`saved`). Returns the findings reported now."""
        if self.watch is None:
            return []
        found = self.report()
        self.close()
        if write and self.path is not None and self.watch.steps:
            self.saved = save(self.watch, self.path)
        return found


def log_findings(logger: logging.Logger, findings: list[Finding]) -> None:
    """Each finding as one warning of ``logger``, prefixed ``hookviz:``."""
    for finding in findings:
        logger.warning("hookviz: %s", finding.message)


def summary(watch: Watch, saved: Path | None) -> str:
    """One line for the end of training: steps kept, what a step is, where the watch was saved."""
    where = f"; saved to {saved}" if saved is not None else ""
    return f"hookviz: watched {watch.step} steps, kept {len(watch.steps)} ({watch.notes[0]}){where}"


class WatchingCallback:
    """What the frameworks' ``HookvizCallback`` classes share: their options, the
    :class:`TrainerWatch` they drive from the framework's events, and what came of it.

    Args:
        path: save the watch here when training ends (``hookviz.save``; ``.hookviz`` is appended
            when the name has another suffix); None saves nothing. Checked when training starts.
        show: display the live widget; None (default): when running in a Jupyter kernel.
        every: keep every ``every``-th optimizer step (:func:`hookviz.watch`).
        outputs: also watch the gradient w.r.t. each module's output (:func:`hookviz.watch`).
        capacity: steps kept before thinning (:func:`hookviz.watch`).
        **show_options: passed to ``hookviz.show`` (``every_seconds``, ``every_steps``).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        show: bool | None = None,
        every: int = 1,
        outputs: bool = False,
        capacity: int = 1024,
        **show_options,
    ):
        self._trainer_watch = TrainerWatch(
            path, show=show, every=every, outputs=outputs, capacity=capacity, show_options=show_options
        )

    @property
    def watch(self) -> Watch | None:
        """The :class:`hookviz.Watch` of the current (or last) training run; None before the first."""
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
        """The path written at the end of the last training run, or None."""
        return self._trainer_watch.saved

    def close(self) -> None:
        """Close the watch now (its history stays); the end of training does it otherwise."""
        self._trainer_watch.close()
