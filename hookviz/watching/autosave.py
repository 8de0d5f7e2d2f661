"""A watch written to disk as it trains: ``hookviz.watch(model, path="train.hookviz")``.

A job that dies (out of memory, a preempted node, Ctrl-C, ``sys.exit`` in a loss guard) keeps what
its watch saw up to then: the steps that explain a crash are the ones before it. The file is the
one ``hookviz.save(watch, path)`` writes (:func:`hookviz.files.saving.save`: a temporary file beside
the target, flushed with ``fsync``, renamed over it with ``os.replace``), so a reader at any moment
opens the previous complete file or the new one, never half of one, and a process killed mid-write
leaves the previous file. It is written:

- at most every ``save_every_seconds`` (default 60) while new steps are kept, the first time at
  the first kept step, and never for more than :data:`MAX_SHARE` of the time: a write that took
  ``t`` seconds of CPU waits at least ``t / MAX_SHARE`` for the next periodic one (a full history
  of a thousand steps takes a tenth of a second to encode: ``save_every_seconds=1`` then writes
  every ten seconds or so);
- at once after a step whose gradients newly hold NaN/Inf, or a norm above the ``exploding_norm``
  threshold (:data:`hookviz.analysis.diagnose.DEFAULT_THRESHOLDS`): the first step of each run of
  such steps (a run of NaN steps is written at its first step, then with the periodic writes);
- when the watch closes (``close()``, the end of a ``with`` block, also when ``KeyboardInterrupt``
  or ``SystemExit`` leaves it), on the closing thread, before ``close()`` returns;
- when the interpreter exits with the watch still open (``atexit``).

The training thread only compares the step's row with the thresholds (the watch's step listener,
:meth:`hookviz.Watch.add_step_listener`); a daemon thread of this module takes the history (a
consistent copy, :attr:`hookviz.Watch.history`, the only moment the watch's lock is held for it),
encodes it and writes it. A process killed by ``SIGKILL`` runs nothing: the file then holds the
last write, which includes the last NaN/Inf step when the kill came after that write.

While it runs, the autosave holds the watch (and so the model) alive: ``hookviz.watch(model,
path=...)`` unassigned still writes its file. Several processes (ranks) given the same path
overwrite each other's file, whole: give each rank its own path, or a path on rank 0 only.

The file format lives in the files layer, after this one: :mod:`hookviz.files.saving`
registers its path check and its ``save`` here when hookviz is imported (:func:`write_with`).
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import warnings
from pathlib import Path

import torch

from hookviz.analysis.diagnose import DEFAULT_THRESHOLDS
from hookviz.errors import WatchError

# The default of save_every_seconds: a minute of training at most is lost to a kill.
SAVE_EVERY_SECONDS = 60.0
# The most of one core the periodic writes may take (their own CPU time over the time between them).
MAX_SHARE = 0.01
# (check(path) -> the Path written, write(watch, path) -> Path), registered by hookviz.files.saving.
_writer: tuple | None = None
# The autosaves of open watches: each is written one last time when the interpreter exits.
_RUNNING: set[Autosave] = set()


def write_with(check, write) -> None:
    """Use ``check(path) -> Path`` (refuses a path that names no file) and ``write(watch, path)``
    to write watches (:mod:`hookviz.files.saving` registers its own when imported)."""
    global _writer
    _writer = (check, write)


def checked(path, save_every_seconds: float) -> Path:
    """The file an autosave to ``path`` writes (``.hookviz`` appended when the name has another
    suffix), checked now, before any step.

    Raises:
        WatchError: ``save_every_seconds`` is not a number of seconds, 0 or more.
        PathError: ``path`` names no file, or its folder does not exist.
    """
    if (
        isinstance(save_every_seconds, bool)
        or not isinstance(save_every_seconds, (int, float))
        or not save_every_seconds >= 0
        or math.isinf(save_every_seconds)
    ):
        raise WatchError(
            f"save_every_seconds={save_every_seconds!r} must be a number of seconds, 0 or more "
            "(the most time a killed job loses; 0 writes after every kept step, which costs the most)"
        )
    if _writer is None:  # hookviz.files.saving registers itself when the hookviz package is imported
        raise WatchError("path= needs hookviz's file format: import hookviz first")
    return _writer[0](path)


@atexit.register
def _write_all() -> None:
    for autosave in list(_RUNNING):
        autosave.stop()


class Autosave:
    """Writes ``watch`` to ``path`` while it trains; see the module docstring. Made by
    :func:`hookviz.watch` given ``path=`` (``watch.autosave``).

    Args:
        watch: an open :class:`hookviz.Watch`.
        path: the file, as :func:`checked` returned it.
        every_seconds: at most one periodic write every this many seconds.

    Attributes:
        path: the file written.
        every_seconds: as given.
        saved_step: the last step the file holds for sure (a write includes at least it); None
            before the first write.
        writes: how many times the file was written.
        cpu_seconds: the CPU time the writes took, in seconds (``time.thread_time`` of the thread
            that wrote): the autosave's cost, beside the watch's.
        error: the last write's error (a warning said it), or None.
    """

    def __init__(self, watch, path: Path, every_seconds: float):
        self.path = path
        self.every_seconds = float(every_seconds)
        self.saved_step: int | None = None
        self.writes = 0
        self.cpu_seconds = 0.0
        self.error: Exception | None = None
        self._watch = watch  # let go when stopped
        # One comparison per step: a norm above exploding_norm (Inf too), a NaN/Inf count above 0.
        self._limits = torch.tensor([DEFAULT_THRESHOLDS["exploding_norm"], math.inf, 0.0, math.inf])
        self._condition = threading.Condition()
        self._latest: int | None = None  # the last step kept
        self._written: int | None = None  # the last step handed to a write
        self._alarms = (False, False)  # the last kept step's (exploding, NaN/Inf)
        self._urgent = False
        self._stopping = False
        self._written_at = -math.inf  # time.monotonic() of the last write's start
        self._cost = 0.0  # the CPU seconds of the last write (time.thread_time)
        self._write_lock = threading.Lock()  # one write at a time (the thread's, the final one)
        self._handle = watch.add_step_listener(self._on_step)
        self._thread = threading.Thread(target=self._run, name="hookviz-autosave", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    # ----- the training thread ----------------------------------------------------------------

    def _on_step(self, step: int | None, row: torch.Tensor | None) -> None:
        """The watch's step listener: note the step; wake the writer when it is idle or alarmed."""
        if step is None:  # the watch closes: the last write, on the closing thread
            self.stop()
            return
        exploding, _, nonfinite, _ = row.gt(self._limits).any(0).tolist()
        with self._condition:
            idle = self._latest == self._written
            new = (exploding and not self._alarms[0]) or (nonfinite and not self._alarms[1])
            self._alarms = (exploding, nonfinite)
            self._latest = step
            self._urgent |= new
            # Woken only when it waits for nothing or must write now: a wake-up per step would
            # hand the GIL back and forth with the training thread.
            if idle or new:
                self._condition.notify()

    # ----- the writer thread --------------------------------------------------------------------

    def _due_in(self) -> float | None:
        """Seconds until a write is due (0: now), or None: nothing new. Holds the condition."""
        if self._stopping:
            return 0.0
        if self._latest is None or self._latest == self._written:
            return None
        if self._urgent:
            return 0.0
        pause = max(self.every_seconds, self._cost / MAX_SHARE)
        return max(0.0, self._written_at + pause - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._condition:
                due = self._due_in()
                while due != 0.0:
                    self._condition.wait(timeout=due)
                    due = self._due_in()
                if self._stopping:
                    return
                self._urgent = False
            self._write()

    def _write(self) -> None:
        """Write the watch's history as it is now (a consistent copy) to :attr:`path`."""
        with self._write_lock:
            watch = self._watch
            with self._condition:
                step = self._latest
                if watch is None or step is None or step == self._written:
                    return
                self._written, self._written_at = step, time.monotonic()
            started = time.thread_time()
            try:
                _writer[1](watch, self.path)
            except Exception as error:  # a full disk must not stop training: say it, try again later
                if repr(error) != repr(self.error):
                    warnings.warn(
                        f"hookviz could not write the watch to {str(self.path)!r}: {error}; it tries "
                        "again at the next write (the file holds the last complete write)",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                self.error = error
                return
            finally:
                self._cost = time.thread_time() - started
                self.cpu_seconds += self._cost
            self.error = None
            self.saved_step = step
            self.writes += 1

    # ----- stopping -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Write the last steps (on this thread, after any write under way) and stop; idempotent.
        Called when the watch closes and when the interpreter exits."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()
        self._write()
        _RUNNING.discard(self)
        self._handle.remove()
        self._watch = None

    def __repr__(self) -> str:
        return (
            f"Autosave({str(self.path)!r}, every {self.every_seconds:g} s, writes={self.writes}, "
            f"saved_step={self.saved_step})"
        )
