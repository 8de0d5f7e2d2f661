"""Run -> the replay's payload: backward step by step, and what the user's hooks printed."""

from __future__ import annotations

from collections import defaultdict

from hookviz.data.run import Run


def replay_json(run: Run) -> list[dict]:
    """The recorded backward execution order as replay steps: ``[{node, op, hooks}]``; the user
    hooks and edits that fired at a node are attached to its step."""
    steps: list[dict] = []
    step_of: dict[str, int] = {}
    pending: dict[str, list[dict]] = defaultdict(list)
    for event in run.events:
        if event.kind == "node":
            node = run.nodes.get(event.node)
            step_of[event.node] = len(steps)
            steps.append(
                {
                    "node": event.node,
                    "op": node.op if node else "",
                    "hooks": pending.pop(event.node, []),
                }
            )
        else:
            fired = {"kind": event.kind, "detail": event.detail}
            if event.node in step_of:
                steps[step_of[event.node]]["hooks"].append(fired)
            elif event.node is not None:
                pending[event.node].append(fired)
            elif steps:
                steps[-1]["hooks"].append(fired)
    return steps


def log_json(run: Run) -> list[dict]:
    """What the user's hooks printed: ``[{hook, where, text}]``."""
    return [{"hook": e.hook, "where": e.where, "text": e.text} for e in run.log]
