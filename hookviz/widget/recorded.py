"""A recorded run opened from a file, standing where a live Session stands for the widget.

A run loaded with :func:`hookviz.load` has every record of the run (graph, gradients, hook calls,
module views) but no model: it cannot run again. :class:`RecordedSession` answers what the widget
reads from a session (the run, its baseline, its edits) and refuses, with a note that says why,
what would need the model (editing and re-running).
"""

from __future__ import annotations

from hookviz.advice import advice
from hookviz.errors import ReadOnlyError

READ_ONLY_NOTE = (
    "read-only: this run was opened from a file, without its model, so it cannot run again. "
    "Inspect, replay and compare work; to edit and re-run, record it again with "
    f"{advice('show_model')}"
)


class RecordedSession:
    """The session-shaped view of a loaded :class:`hookviz.Run` (see the module docstring).

    Args:
        run: a run, usually from :func:`hookviz.load`.
        baseline: the run to compare with (another loaded run of the same model); None = ``run``.
    """

    read_only = True

    def __init__(self, run, baseline=None):
        self.last_run = run
        self.baseline = baseline if baseline is not None else run
        self.edits = list(run.edits)

    def run(self, device=None, forward: bool = False):
        """Refused: raises ReadOnlyError (there is no model to run)."""
        raise ReadOnlyError(READ_ONLY_NOTE)

    def edit(self, target: str, slot: str, transform):
        """Refused: raises ReadOnlyError."""
        raise ReadOnlyError(READ_ONLY_NOTE)

    def remove_edit(self, edit) -> None:
        """Refused: raises ReadOnlyError."""
        raise ReadOnlyError(READ_ONLY_NOTE)

    def clear_edits(self) -> None:
        """Nothing to clear: the recorded edits are part of what ran."""

    def sites(self, target: str) -> list[str]:
        """No site is editable in a recorded run."""
        return []

    def edits_as_code(self) -> str:
        """The recorded edits as comments (their transforms are not in the file)."""
        lines = ["# edits active in this recorded run (read-only; re-create them with session.edit):"]
        lines += [f"#   {edit.target or '<root module>'} {edit.slot}: {edit.source}" for edit in self.edits]
        return "\n".join(lines if self.edits else ["# no edits in this recorded run"])

    def __repr__(self) -> str:
        return f"RecordedSession({self.last_run!r}, read-only)"
