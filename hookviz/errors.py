"""hookviz's errors: one base class, one subclass per kind of mistake.

Every message names the thing, the problem and the fix, so it can be shown to a user as it is.
"""

from __future__ import annotations

import difflib


class HookvizError(Exception):
    """Base of every error hookviz raises on purpose."""


class LossError(HookvizError):
    """The model's output cannot be turned into a scalar loss that requires grad."""


class ForwardError(HookvizError):
    """The model's forward raised; the message names the innermost module that was running.

    Args:
        message: what went wrong and the fix.
        module: the qualified name of the innermost module that was running ("" = the root), or
            None when no module was.
    """

    def __init__(self, message: str, module: str | None = None):
        super().__init__(message)
        self.module = module


class BackwardError(HookvizError):
    """Backward raised (for example an in-place op that a full backward hook cannot handle)."""


class ExpressionError(HookvizError):
    """An edit expression is malformed, uses something forbidden, or asks for too much work."""


class EditError(HookvizError):
    """An edit produced an unusable gradient (wrong type, shape, dtype or device) or cannot be installed."""


class TargetError(HookvizError):
    """An unknown node id, module name, leaf name or slot."""


class DeviceError(HookvizError):
    """An unknown or unavailable device."""


class WatchError(HookvizError):
    """A watch cannot be opened or read: no parameter requires grad, the model is already watched,
    no step has been recorded, or an unknown step or name was asked for."""


class UnsupportedError(HookvizError):
    """The model uses something hookviz cannot record; the message names the alternative."""


class FileFormatError(HookvizError):
    """A file is not a hookviz file, is a pickle, is truncated or corrupt, has an unknown version, or
    holds a value no run has (a norm too large for a float, a loss of several elements); the message
    names the file and the place."""


class PathError(HookvizError, OSError):
    """A path given to ``save``, ``save_html`` or ``load`` names no file hookviz can write or read: it
    is empty, a folder, in a folder that does not exist, or not a regular file (a FIFO, a device).
    Also an OSError, as the error writing or opening such a path would be."""


class ExtraError(HookvizError, ImportError):
    """An integration needs a package that is not installed (``hookviz.integrations.lightning`` needs
    ``lightning``); the message names the extra to install. Also an ImportError, as the failed
    import would be."""


class ReadOnlyError(HookvizError):
    """An edit or a re-run was asked of a run opened from a file."""


class DetailsRefused(HookvizError):
    """``Run.fill_details()`` refuses to record a lazy run's details; the message says why and
    what to do. Its subclasses are the only refusals: any other error while recording propagates."""


class DetailsChanged(DetailsRefused):
    """Something that affects a run's numbers (a parameter, buffer, train/eval mode or input)
    changed since the run, so recording it again would give other numbers."""


class DetailsNotReproduced(DetailsRefused):
    """Recorded again, the run gave other gradients than it did (a hook of the user's changed, say)."""


class DetailsUnavailable(DetailsRefused):
    """Nothing is left to record a run's details from (a run read from a file, or unpickled)."""


class DetailsPending(HookvizError, AttributeError):
    """A value of a lazy run was read before ``run.fill_details()`` recorded it (indexing,
    iterating, formatting or reading an attribute of a :data:`hookviz.data.deferred.PENDING`).
    It is also an ``AttributeError``, so ``hasattr`` answers False instead of raising."""


def unknown_name(what: str, name: str, known: list[str]) -> str:
    """The message for an unknown name: close matches first, then up to 12 known names."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    listing = ", ".join(map(repr, known[:12])) + (" ..." if len(known) > 12 else "")
    return f"unknown {what} {name!r}{hint} (known: {listing})"
