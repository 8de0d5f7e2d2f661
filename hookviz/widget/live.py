"""A widget that follows an open :class:`hookviz.Watch` while the training loop runs.

``hookviz.show(w)`` on an open watch subscribes to it (:meth:`hookviz.Watch.add_step_listener`).
The listener runs on the training thread at the end of every kept step and does almost nothing:
it notes the step number and whether the step holds a NaN/Inf or an exploding norm (one
comparison of the step's row). A daemon thread of this module does the rest: it reads the watch
(a consistent copy), builds the heatmap, the per-layer lines and the findings, and sets the
widget's traitlets, at most once every ``every_steps`` steps or ``every_seconds`` seconds; a step
that newly holds NaN/Inf or an exploding norm is sent at once. Setting a traitlet sends a comm
message through the kernel's IOPub channel, which its own thread flushes while the cell that
trains is still running, so the page updates mid-cell and the training thread never waits for it.

When training stops, the last step is sent at most ``every_seconds`` later (one second when only
``every_steps`` is set); when the watch closes, its final state is sent and the thread ends.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import weakref

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.widget.failures import reported

# With every_steps alone, the last steps of a loop that stopped are sent after this quiet time.
QUIET_SECONDS = 1.0


# The feeds whose thread may still run: stopped and joined when the interpreter exits, so that
# no update is halfway through torch code while the process tears down.
_RUNNING: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for feed in list(_RUNNING):
        feed.stop(wait=2.0)


class LiveFeed:
    """Sends ``watch``'s new steps to ``widget`` from a daemon thread; see the module docstring.

    Args:
        widget: the :class:`hookviz.Widget` showing the watch.
        watch: an open or closed :class:`hookviz.Watch`.
        every_steps: send at most once every this many kept steps (None: by time only).
        every_seconds: send at most once every this many seconds (None with ``every_steps``:
            by steps only, the last ones after :data:`QUIET_SECONDS` without a new step).
    """

    def __init__(self, widget, watch, every_steps: int | None, every_seconds: float | None):
        self.widget = widget
        self.watch = watch
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.updates = 0  # updates sent (read by tests and the benchmark)
        # One comparison per step finds a NaN/Inf count above 0 or a norm above exploding_norm
        # (NaN compares false: a name without a gradient raises nothing).
        self._alarm_limits = torch.tensor([DEFAULT_THRESHOLDS["exploding_norm"], math.inf, 0.0, math.inf])
        self._condition = threading.Condition()
        self._latest: int | None = None  # the last step the watch kept
        self._shown: int | None = None  # the last step sent
        self._new_steps = 0  # steps kept since the last update
        self._alarmed = False  # the last step kept raised the alarm
        self._urgent = False  # a step newly raised it: send now
        self._closed = False
        self._sent_at = -math.inf  # when the last update was sent (time.monotonic)
        self._step_at = -math.inf  # when the last step was kept
        self._handle = watch.add_step_listener(self._on_step)
        if watch.closed:
            self._closed = True
        self._thread = threading.Thread(target=self._run, name="hookviz-live-watch", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    # ----- the training thread ----------------------------------------------------------------

    def _on_step(self, step: int | None, row: torch.Tensor | None) -> None:
        """The watch's step listener: note the step; wake the sender on an alarm."""
        alarm = row is not None and bool(row.gt(self._alarm_limits).any())
        with self._condition:
            # The sender sleeps until its next update is due; it is woken only when it waits for
            # nothing (all sent), when an alarm must go now, or when every_steps steps came: a
            # wake-up per step would hand the GIL back and forth with the training thread.
            idle = self._latest == self._shown
            if step is None:
                self._closed = True
            else:
                self._latest = step
                self._step_at = time.monotonic()
                self._new_steps += 1
                self._urgent |= alarm and not self._alarmed
                self._alarmed = alarm
            if idle or self._closed or self._urgent or self._new_steps == self.every_steps:
                self._condition.notify()

    # ----- the sender thread --------------------------------------------------------------------

    def _due_in(self) -> float | None:
        """Seconds until an update is due (0: now), or None: nothing new to send. Holds the lock."""
        if self._closed or self._urgent:
            return 0.0
        if self._latest is None or self._latest == self._shown:
            return None
        if self.every_steps is None:
            return self._left(self._sent_at, self.every_seconds)
        if self._new_steps >= self.every_steps:
            return 0.0 if self.every_seconds is None else self._left(self._sent_at, self.every_seconds)
        # fewer than every_steps since the last update: sent once training has paused
        return self._left(self._step_at, self.every_seconds or QUIET_SECONDS)

    @staticmethod
    def _left(since: float, seconds: float) -> float:
        return max(0.0, since + seconds - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._condition:
                due = self._due_in()
                while due != 0.0:
                    self._condition.wait(timeout=due)
                    due = self._due_in()
                closed, step = self._closed, self._latest
                self._urgent = False
                self._new_steps = 0
                self._sent_at = time.monotonic()
            if closed or step != self._shown:
                self._send(closed)
                self._shown = step
            if closed:
                self._handle.remove()
                return

    def _send(self, closed: bool) -> None:
        """Set the widget's watch traitlets from a copy of the watch's kept steps."""
        try:
            self.widget._show_live_state(self.watch, closed)
            self.updates += 1
        except Exception as error:  # logged and shown on the page; training goes on
            note = reported("live update", error)
            try:
                self.widget._set_error("watch", note)
            except Exception as unshown:  # the page cannot be told: logged, and the feed stops
                reported("showing a live update's failure", unshown)
                self._closed = True

    def stop(self, wait: float = 0.0) -> None:
        """Unsubscribe and end the thread (the widget keeps what it shows). ``wait``: at most this
        many seconds for the thread to end (it sends the final state first)."""
        self._handle.remove()
        with self._condition:
            self._closed = True
            self._condition.notify()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(wait)

    def wait_shown(self, timeout: float = 10.0) -> bool:
        """Wait until the widget shows the watch's latest kept step: that step is sent now,
        whatever ``every_steps`` and ``every_seconds`` allow; after the watch closed, wait for its
        final state (the thread's last update). Call it before reading the widget's watch
        traitlets in code (``view.watch_view``, ``view.diagnosis``); ``save_html`` calls it, so a
        page saved mid-training shows the watch as it stands. For example:

        ```python
        with hookviz.watch(model) as w:
            view = hookviz.show(w)
            display(view)
            train(model)
        assert view.live.wait_shown()
        assert view.watch_view["step"] == w.steps[-1]
        ```

        Args:
            timeout: at most this many seconds to wait.

        Returns:
            True once the widget shows the latest kept step (at once when nothing is new);
            False on timeout.
        """
        deadline = time.monotonic() + timeout
        with self._condition:
            if self._latest != self._shown:
                self._urgent = True
                self._condition.notify()
        while time.monotonic() < deadline:
            if self._closed:  # the final state goes last, then the thread ends
                self._thread.join(max(0.0, deadline - time.monotonic()))
                return not self._thread.is_alive()
            if self._latest == self._shown and not self._urgent:
                return True
            time.sleep(0.01)
        return False
