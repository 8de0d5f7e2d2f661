"""Where hookviz writes and reads its files (``save``, ``save_html``, ``load``).

A target must name a file: an empty path, a path ending in a separator, ``.``, ``..`` or an existing
folder is refused (:class:`~hookviz.errors.PathError`, naming the fix), and so is a file in a folder
that does not exist.

Writing goes to a new temporary file in the target's folder, created exclusively (``O_CREAT |
O_EXCL | O_NOFOLLOW``, a random name), then renamed over the target (``os.replace``): a crash leaves
the old file, a failure removes the temporary, and no symlink is ever written through. A symlink at
the target itself is replaced by the new file; the file it pointed to is left as it was.

Reading opens only a regular file (through symlinks): a folder, a FIFO, a socket or a device is
refused after ``os.stat``, before it is opened, and the file is opened without blocking
(``O_NONBLOCK``) and checked again, so a FIFO put in its place between the two never blocks.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO

from hookviz.errors import PathError


def _is_folder(path: Path) -> bool:
    """True when ``path`` itself (not what a symlink there points to) is a folder."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def as_path(path: str | os.PathLike, example: str = "run.hookviz") -> Path:
    """``path`` as a ``pathlib.Path``, when it is a ``str`` or an ``os.PathLike`` (``bytes``
    too, as ``open`` takes).

    Raises:
        PathError: ``path`` is another type (a number, None, a file object).
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise PathError(
            f"a path must be a str or a pathlib.Path, got {type(path).__name__}: pass a file name, "
            f"e.g. {example!r}"
        )
    return Path(os.fsdecode(os.fspath(path)))


def target(path: str | os.PathLike, suffix: str = "", example: str = "run.hookviz") -> Path:
    """The file that writing ``path`` writes: ``path``, with ``suffix`` appended when its name has
    another suffix or none.

    Args:
        path: what the user gave.
        suffix: e.g. ``".hookviz"``; "" appends nothing.
        example: a file name the messages suggest.

    Raises:
        PathError: ``path`` is not a str or a path, is empty, ends with a separator, is ``.`` or
            ``..``, or is a folder (before or after the suffix); or the folder it would be written
            in does not exist.
    """
    as_path(path, example)
    text = os.fsdecode(os.fspath(path))
    if not text:
        raise PathError(f"no file name given (the path is empty): pass one, e.g. {example!r}")
    if os.path.basename(text) in ("", ".", ".."):
        raise PathError(
            f"{text!r} names a folder, not a file: give a file name, e.g. {os.path.join(text, example)!r}"
        )
    result = Path(text)
    if suffix and result.suffix != suffix:
        result = result.with_name(result.name + suffix)
    for candidate in dict.fromkeys((Path(text), result)):
        if _is_folder(candidate):
            raise PathError(
                f"{str(candidate)!r} is a folder, not a file: give a file name, e.g. "
                f"{str(candidate / example)!r}"
            )
    folder = result.parent
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise PathError(
            f"cannot write {str(result)!r}: its folder {str(folder)!r} {problem}; "
            "create the folder first (os.makedirs) or give another path"
        )
    return result


def write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary created exclusively beside it (see the module
    docstring); the temporary is removed whatever fails. Raises OSError when the folder cannot be
    written, the disk is full or the rename is refused (``path`` became a folder)."""
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.partial")
        try:
            descriptor = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666
            )
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"cannot create a temporary file beside {str(path)!r}: every name tried exists")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # a crash mid-write leaves the old file, never half a new one
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _not_a_file(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (see the module docstring).

    Raises:
        FileNotFoundError: nothing is at ``path``.
        PathError: ``path`` is a folder, a FIFO, a socket or a device.
    """
    what = _not_a_file(os.stat(path).st_mode)
    if what is None:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        what = _not_a_file(os.fstat(descriptor).st_mode)
        if what is None:
            return os.fdopen(descriptor, "rb")
        os.close(descriptor)
    raise PathError(
        f"cannot open {str(path)!r}: it is {what}, not a file; give the path of a file that "
        "hookviz.save wrote"
    )
