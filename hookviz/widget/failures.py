"""What the page cannot show is logged, not dropped: one rule for every handler in the widget that
catches an error so the page keeps working (a picture that failed, a diagnosis bug, a request
that broke, a live update).

Each logs the error with its traceback (``logging.exception`` on the ``hookviz.widget`` logger;
with no handler configured Python prints it to stderr, which a notebook shows) and gives the page
a one-line note to show briefly where the failed part would be.
"""

from __future__ import annotations

import json
import logging
from typing import Any

LOG = logging.getLogger("hookviz.widget")


def reported(what: str, error: BaseException) -> str:
    """Log ``error`` with its traceback (call it inside the ``except`` block that caught it) and
    return the note the page shows: ``"<what> failed: <type>: <message> (traceback in the log)"``."""
    LOG.exception("%s failed", what, exc_info=error)
    return f"{what} failed: {type(error).__name__}: {error} (traceback in the log: logger 'hookviz.widget')"


def sendable(message: dict[str, Any], what: str) -> dict[str, Any]:
    """``message`` when the kernel can send it as JSON (as ``jupyter_client``'s packer: no NaN,
    no object JSON has no type for); else, logged by :func:`reported`, a message that says so,
    with the same ``type`` and ``request`` so that the page's waiting request is answered."""
    try:
        json.dumps(message, allow_nan=False)
    except (TypeError, ValueError) as error:
        note = reported(f"sending the {what} to the page", error)
        return {
            "type": message.get("type"),
            "request": message.get("request") if isinstance(message.get("request"), str) else None,
            "ok": False,
            "error": note,
        }
    return message
