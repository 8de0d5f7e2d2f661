"""Run -> the replay's payload: backward step by step, and what the user's hooks printed."""

from __future__ import annotations

from collections import defaultdict

from hookviz.data.run import Run
from hookviz.widget.tree import module_label, root_type


def _detail(event, calls: dict, root: str) -> str:
    """What fired, naming the root module as its box does (the recorder writes its name, "")."""
    call = calls.get(event.step)
    if call is None or call.where != "":
        return event.detail
    if event.kind == "edit":
        return f"{root}: {call.name}"
    return f"{call.kind} {call.name} @ {root}"


def replay_json(run: Run) -> list[dict]:
    """The recorded backward execution order as replay steps: ``[{node, op, hooks}]``; the user
    hooks and edits that fired at a node are attached to its step."""
    calls = {call.step: call for call in run.hook_calls}
    root = module_label("", root_type(run))
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
            fired = {"kind": event.kind, "detail": _detail(event, calls, root)}
            if event.node in step_of:
                steps[step_of[event.node]]["hooks"].append(fired)
            elif event.node is not None:
                pending[event.node].append(fired)
            elif steps:
                steps[-1]["hooks"].append(fired)
    return steps


def log_json(run: Run) -> list[dict]:
    """What the user's hooks printed: ``[{hook, where, text}]``."""
    root = module_label("", root_type(run))
    return [{"hook": e.hook, "where": e.where or root, "text": e.text} for e in run.log]
